package store

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keyhouse/keyhouse/pkg/apierr"
)

// A usage change (AddUsages, AddUsageOnce, ResetUsage) answers "not applied" only when it
// knows so. When its connection breaks while the change is out (the request's deadline
// passed, Postgres stalled, the network dropped the reply to its COMMIT), it does not
// know: the COMMIT may have been carried out. It then asks Postgres, on another
// connection, with what is left of the call's deadline: every change inserts its op id
// into usage_commits first, in its own transaction, and the question is the same insert
// marked fenced. Exactly one of the two inserts wins, so the answer is final (see the
// migration). The budget is split for that: the change gets writeShare of what is left
// of the deadline, the question the rest.
var (
	// ErrNotApplied: the change was not committed and never will be; retrying is safe.
	ErrNotApplied = errors.New("usage change not applied")
	// ErrNoAnswer: the change's outcome (or, once applied, its answer) could not be
	// learned before the call's deadline. Retrying may apply it twice, unless the retry
	// carries the first call's Idempotency-Key.
	ErrNoAnswer = errors.New("usage change: its outcome could not be learned in time")
	// errCommittedUnseen: the change committed but its reply was lost; its outcome is
	// read back from what it recorded.
	errCommittedUnseen = errors.New("usage change committed, reply lost")
)

const (
	// writeShare of the call's remaining time goes to the change; the rest is kept to
	// learn its outcome should the reply not come.
	writeShare = 2.0 / 3
	// resolveWithin bounds the question for a call without a deadline.
	resolveWithin = 5 * time.Second
	// maxFenceWait is how long the question waits (at most a quarter of its time) for
	// the change's transaction to end before ending it itself (pg_terminate_backend): a
	// change whose COMMIT never reached Postgres would otherwise hold its transaction
	// open until the server noticed the dead connection.
	maxFenceWait = 200 * time.Millisecond
	// CommitRecordsKept is how long usage_commits remembers an op id: far longer than
	// any call's deadline.
	CommitRecordsKept = 10 * time.Minute
)

// recordCommitSQL is the first statement of every usage change.
const recordCommitSQL = `INSERT INTO usage_commits (op_id) VALUES ($1)`

// newOpID is a change's op id: 128 random bits.
func newOpID() []byte {
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	return id
}

// change runs write on a connection of its own, with writeShare of ctx's time, and says
// whether the change op committed: nil (committed, the reply seen), errCommittedUnseen,
// ErrNotApplied (wrapping why), ErrNoAnswer, or write's own error (known not applied:
// Postgres refused it, or it never left).
func (s *Store) change(ctx context.Context, op []byte, write func(context.Context, *pgxpool.Conn) error) error {
	writeCtx, cancel := writeBudget(ctx)
	defer cancel()
	conn, err := s.db.Acquire(writeCtx)
	if err != nil {
		return err
	}
	pid := conn.Conn().PgConn().PID()
	err = write(writeCtx, conn)
	// A connection whose call broke is closed by pgx; Release drops it from the pool.
	broken := conn.Conn().IsClosed()
	conn.Release()
	var ae *apierr.Error
	if err == nil || errors.As(err, &ae) || !broken || pgconn.SafeToRetry(err) {
		return err
	}
	resolveCtx, cancelResolve := resolveBudget(ctx)
	defer cancelResolve()
	applied, rerr := s.resolve(resolveCtx, op, pid)
	switch {
	case rerr != nil:
		return ErrNoAnswer
	case applied:
		return errCommittedUnseen
	default:
		return errors.Join(ErrNotApplied, err)
	}
}

// writeBudget is ctx with writeShare of its remaining time.
func writeBudget(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, time.Duration(float64(time.Until(deadline))*writeShare))
}

// resolveBudget is what is left of ctx's deadline (resolveWithin without one), kept
// even when ctx is canceled: the caller still gets an answer, and the fence must not be
// left half done.
func resolveBudget(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(resolveWithin)
	}
	return context.WithDeadline(context.WithoutCancel(ctx), deadline)
}

// resolve learns whether change op committed, by fencing it: afterwards it cannot
// commit any more. The change's backend (pid) is ended when its transaction is still
// open after fenceLockTimeout, since only its end decides the fence.
func (s *Store) resolve(ctx context.Context, op []byte, pid uint32) (applied bool, err error) {
	for {
		var fenced bool
		wait := maxFenceWait
		if deadline, ok := ctx.Deadline(); ok {
			wait = max(min(wait, time.Until(deadline)/4), 10*time.Millisecond)
		}
		err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", wait.Milliseconds())); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO usage_commits (op_id, fenced) VALUES ($1, true) ON CONFLICT DO NOTHING`, op); err != nil {
				return err
			}
			// A statement of its own, so its snapshot sees the change if it committed
			// while the insert waited; fenced is true also when an earlier try of this
			// loop fenced it and lost only the reply.
			return tx.QueryRow(ctx, `SELECT fenced FROM usage_commits WHERE op_id = $1`, op).Scan(&fenced)
		})
		if err == nil {
			if s.resolved != nil {
				s.resolved(!fenced)
			}
			return !fenced, nil
		}
		if ctx.Err() != nil {
			return false, err
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
			_, _ = s.db.Exec(ctx, `SELECT pg_terminate_backend($1)`, int32(pid))
			continue
		}
		// Postgres unreachable for now: ask again until the deadline.
		select {
		case <-ctx.Done():
			return false, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// committedItems reads back what each increment of change op did.
func (s *Store) committedItems(ctx context.Context, op []byte, n int) ([]Added, error) {
	ctx, cancel := resolveBudget(ctx)
	defer cancel()
	rows, err := s.db.Query(ctx, `SELECT item, seat_ok, used FROM usage_commit_items WHERE op_id = $1`, op)
	if err != nil {
		return nil, ErrNoAnswer
	}
	added := make([]Added, n)
	var item int
	var seatOK bool
	var used *int64
	seen := 0
	if _, err := pgx.ForEachRow(rows, []any{&item, &seatOK, &used}, func() error {
		if item >= 0 && item < n {
			added[item] = Added{SeatOK: seatOK, Applied: used != nil}
			if used != nil {
				added[item].Used = *used
			}
			seen++
		}
		return nil
	}); err != nil || seen != n {
		return nil, ErrNoAnswer
	}
	return added, nil
}

// PurgeCommits forgets the op ids of changes older than CommitRecordsKept.
func (s *Store) PurgeCommits(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `WITH old AS (
			DELETE FROM usage_commits WHERE created_at < now() - $1::interval RETURNING op_id
		) DELETE FROM usage_commit_items WHERE op_id IN (SELECT op_id FROM old)`,
			fmt.Sprintf("%d seconds", int(CommitRecordsKept.Seconds())))
		return err
	})
}
