// Package store is the activations schema's SQL: seats, usage totals, and the record of
// purged licenses. Every method takes the tenant explicitly and every query is scoped by it.
package store

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/tenantpurge"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
)

// Store reads and writes the activations schema. Every committed change of a seat or a
// usage total that addendum §11 names emits its event (pkg/events) in its own
// transaction; the spine's post-commit path announces removed seats to the caches.
type Store struct {
	db    *pgxpool.Pool
	spine *events.Spine
	// resolved, when set (tests), hears each outcome learned by a fence (commit.go).
	resolved func(applied bool)
}

// New returns a Store on db (search_path = activations); spine may be nil (no post-commit
// path: the events are written all the same).
func New(db *pgxpool.Pool, spine *events.Spine) *Store { return &Store{db: db, spine: spine} }

var (
	// ErrCapReached: the license already has max_activations seats.
	ErrCapReached = errors.New("activation limit reached")
	// ErrLicenseDeleted: the license's deletion, or its tenant's, was already processed here.
	ErrLicenseDeleted = errors.New("license deleted")
)

// lockLicenseSQL serializes, across every replica, the transactions that change the set of
// seats of one license: activations (count then insert) and the purge on deletion. The
// two-int form of the advisory lock lives in a different key space from the one-bigint
// form goose uses for migrations; the class id keeps it apart from any other two-int user.
// A hash collision between two licenses only makes them wait for each other.
const lockLicenseSQL = `SELECT pg_advisory_xact_lock(1263488, hashtext($1 || E'\x1f' || $2))`

// shareLicenseSQL is lockLicenseSQL's shared form: changes to a license's usage run side
// by side (they queue on the usage row instead), but never while its purge runs.
const shareLicenseSQL = `SELECT pg_advisory_xact_lock_shared(1263488, hashtext($1 || E'\x1f' || $2))`

// lockLicensesSQL and shareLicensesSQL take lockLicenseSQL's lock of every license ($1
// tenants, $2 keys) in one statement, exclusive or shared: a batch of activations holds
// the exclusive lock of each license it adds seats to, a batch of increments the shared
// one of each license it meters (increments run side by side, but never while the
// license's purge runs). Both take the locks in the order of the lock ids, so two batches
// that want the same locks wait for each other instead of deadlocking; ids that collide
// are taken once.
const (
	lockLicensesSQL  = `SELECT pg_advisory_xact_lock(1263488, id) FROM (` + licenseLockIDs + `) AS locks`
	shareLicensesSQL = `SELECT pg_advisory_xact_lock_shared(1263488, id) FROM (` + licenseLockIDs + `) AS locks`
	licenseLockIDs   = `SELECT DISTINCT hashtext(t || E'\x1f' || k) AS id FROM unnest($1::text[], $2::text[]) AS l(t, k) ORDER BY id`
)

// activateSQL inserts the seat unless the license's deletion was processed, the pair
// already has a live seat, or the license has $5 live seats ($5 NULL = unlimited), and
// says which. It must run after the license's lock is taken, as a statement of its own: a
// statement's snapshot is taken when it starts, so a count in the statement that waited
// for the lock could miss a seat committed by the holder it waited for. A floating seat
// ($6: its lease in seconds, NULL: not floating) is leased until now + $6; one whose lease
// lapsed counts for nothing, and lapseLicensesSQL, run before in the same transaction,
// has removed it (with its lapse's record and event), so an activation of its instance
// inserts a seat where it was. Without $6, a
// license of tier $8 (NULL: none) is floating when the policy of its tier, else its
// product's default ('*'), is floating, leased for that policy's lease_ttl: read here
// rather than in a statement of its own before the change (one query less per activation,
// and the policy the seat follows is the one in force when it is made).
//
// A license of a tenant deleted here (its purge left a tombstone, pkg/tenantpurge) counts
// as deleted too: licensing, which purges on its own, may still hold it (or this service
// its cached copy), and a seat made now would outlive the purge that already ran.
var activateSQL = `WITH state AS (
	SELECT EXISTS (SELECT 1 FROM deleted_licenses WHERE tenant_id = $1 AND license_key = $2) OR ` + tenantpurge.IsForgottenSQL("$1") + ` AS deleted,
		EXISTS (SELECT 1 FROM seats WHERE tenant_id = $1 AND license_key = $2 AND instance_id = $3 AND ` + liveSeat + `) AS present,
		(SELECT count(*) FROM seats WHERE tenant_id = $1 AND license_key = $2 AND ` + liveSeat + `) AS n,
		coalesce($6::float8, (SELECT CASE WHEN floating THEN lease_ttl_seconds END FROM lease_policies
			WHERE $8::text IS NOT NULL AND tenant_id = $1 AND product_id = $7 AND tier IN ($8, '*') ORDER BY tier = '*' LIMIT 1)) AS lease
), inserted AS (
	INSERT INTO seats (tenant_id, license_key, instance_id, token_hash, lease_expires_at, lease_sweep_after, product_id)
	SELECT $1, $2, $3, $4, now() + make_interval(secs => lease), now() + make_interval(secs => lease), $7 FROM state WHERE NOT deleted AND NOT present AND ($5::int IS NULL OR n < $5)
	RETURNING 1
)
SELECT deleted, present, EXISTS (SELECT 1 FROM inserted) FROM state`

// deactivateSQL removes the live seat of a license holding a token. A floating seat whose
// lease ran out is no active seat (api.md: deactivated false): it already counts nowhere,
// and its removal is its lapse's (seat.deactivated with reason lease_expired, and the
// record that keeps its token answering "Seat lease has expired"), which the sweeper or
// the license's next activation makes.
const deactivateSQL = `DELETE FROM seats WHERE tenant_id = $1 AND license_key = $2 AND token_hash = $3 AND ` + liveSeat + ` RETURNING instance_id`

// SeatChange is one call's change to the seats of a license: with Activate, the seat
// (Instance) holding TokenHash is created unless it exists or the license has MaxSeats
// seats (nil: unlimited); without, the seat holding TokenHash is removed.
type SeatChange struct {
	Tenant, Key string
	// ProductID is the license's, for the event.
	ProductID string
	Activate  bool
	Instance  string
	TokenHash []byte
	MaxSeats  *int32
	// RequestID is the id of the call that asks for the change (a batch carries several).
	RequestID string
	// LeaseTTL makes the activated seat floating, leased for this long (nil: as Tier says).
	LeaseTTL *time.Duration
	// Tier, when set and LeaseTTL is nil, makes the seat floating when the license's
	// lease policy (its tier's, else its product's default) is floating, for that
	// policy's lease_ttl; read in the statement that makes the seat. Nil (and LeaseTTL
	// nil): not floating.
	Tier *string
}

// SeatChanged is the outcome of a SeatChange.
type SeatChanged struct {
	// Err is ErrCapReached or ErrLicenseDeleted for an activation refused, else nil.
	Err error
	// Already: the activation found its seat there (nothing changed).
	Already bool
	// Removed: the deactivation removed a seat.
	Removed bool
}

// seatEvent is what a decided SeatChange changed, for its event: the seat it created, or
// the instance of the seat it removed.
type seatEvent struct {
	created         bool
	removedInstance string
}

// ChangeSeats applies changes in one transaction of two round trips (pipelined): all of
// them are decided, or none is (on an error). Each is decided as if alone: the removals first,
// then the activations in the order given (the calls of one batch were concurrent, so
// any order is one they could have run in).
//
// Activations count and insert under the exclusive lock of their license, taken for
// every license of the batch in one statement before the first count, so concurrent
// activations on any number of replicas never exceed the cap. Under those locks, before
// any change, the licenses' floating seats whose lease ran out are lapsed as the sweeper
// lapses them (lapseLicensesSQL): an activation may take such a seat's place (its
// instance's row, or its slot under the cap), and the lapse that freed it is then
// recorded and announced before the activation, not lost or after it. The batch runs in
// the transaction that also writes its events (seat.deactivated with reason lease_expired
// for each seat lapsed, then seat.activated for each seat created and seat.deactivated
// with reason client for each removed), whose end releases the transaction-scoped locks.
// Removals need no license lock (a removal cannot pass the cap); they delete in (tenant,
// key, token) order, so two batches removing the same seats wait for each other instead
// of deadlocking.
func (s *Store) ChangeSeats(ctx context.Context, changes []SeatChange) ([]SeatChanged, error) {
	order := stableOrder(len(changes), func(a, b int) int {
		x, y := &changes[a], &changes[b]
		switch {
		case x.Activate != y.Activate && x.Activate:
			return 1
		case x.Activate != y.Activate:
			return -1
		case x.Activate:
			return 0 // in the order given
		}
		return cmp.Or(cmp.Compare(x.Tenant, y.Tenant), cmp.Compare(x.Key, y.Key), slices.Compare(x.TokenHash, y.TokenHash))
	})
	var tenants, keys []string
	for _, c := range changes {
		if c.Activate {
			tenants, keys = append(tenants, c.Tenant), append(keys, c.Key)
		}
	}
	changed := make([]SeatChanged, len(changes))
	happened := make([]seatEvent, len(changes))
	var lapsed []LapsedSeat
	// The first round trip: the lock of every license an activation is for, the lapse of
	// their seats past their lease, then each change in order, whose callbacks record what
	// the database decided.
	first := func(_ context.Context, b *pgx.Batch) error {
		if len(keys) > 0 {
			// The tenants' shared locks first: a tenant's purge waits for this batch, or
			// this batch for the purge and then sees its tombstone (activateSQL).
			tenantpurge.QueueShare(b, tenants)
			b.Queue(lockLicensesSQL, tenants, keys)
			b.Queue(lapseLicensesSQL, tenants, keys).Query(func(rows pgx.Rows) error {
				var err error
				lapsed, err = scanLapsed(rows)
				return err
			})
		}
		for _, i := range order {
			c, out, ev := &changes[i], &changed[i], &happened[i]
			if !c.Activate {
				b.Queue(deactivateSQL, c.Tenant, c.Key, c.TokenHash).Query(func(rows pgx.Rows) error {
					for rows.Next() {
						if err := rows.Scan(&ev.removedInstance); err != nil {
							return err
						}
						out.Removed = true
					}
					return rows.Err()
				})
				continue
			}
			b.Queue(activateSQL, c.Tenant, c.Key, c.Instance, c.TokenHash, c.MaxSeats, leaseSeconds(c.LeaseTTL), c.ProductID, c.Tier).QueryRow(func(row pgx.Row) error {
				var deleted bool
				if err := row.Scan(&deleted, &out.Already, &ev.created); err != nil {
					return err
				}
				switch {
				case deleted:
					out.Err = ErrLicenseDeleted
				case !out.Already && !ev.created:
					out.Err = ErrCapReached
				}
				return nil
			})
		}
		return nil
	}
	err := s.spine.Pipelined(ctx, s.db, first, func(ctx context.Context, b *pgx.Batch) error {
		evs := lapseEvents(lapsed)
		for i, c := range changes {
			var ev *eventsv1.Event
			switch h := happened[i]; {
			case c.Activate && h.created:
				ev = events.SeatActivated(c.Tenant, c.Key, c.ProductID, c.Instance)
			case !c.Activate && changed[i].Removed:
				ev = events.SeatDeactivated(c.Tenant, c.Key, c.ProductID, h.removedInstance, events.ReasonClient)
			default:
				continue
			}
			ev.Actor = events.Actor(events.ActorClient, c.RequestID)
			evs = append(evs, ev)
		}
		return events.QueueAll(ctx, b, evs...)
	})
	if err != nil {
		return nil, err
	}
	return changed, nil
}

// stableOrder returns the indexes 0..n-1 sorted by compare, equal ones in their order.
func stableOrder(n int, compare func(a, b int) int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, compare)
	return order
}

// Activate creates the seat (tenant, key, instance) holding tokenHash, unless it exists
// (already true, nothing changes) or the license has maxSeats seats (ErrCapReached);
// maxSeats nil means unlimited. ChangeSeats with one change.
func (s *Store) Activate(ctx context.Context, tenant, key, instance string, tokenHash []byte, maxSeats *int32) (already bool, err error) {
	changed, err := s.ChangeSeats(ctx, []SeatChange{{Tenant: tenant, Key: key, Activate: true, Instance: instance, TokenHash: tokenHash, MaxSeats: maxSeats}})
	if err != nil {
		return false, err
	}
	return changed[0].Already, changed[0].Err
}

// DeactivateByToken removes the seat of key holding tokenHash, reporting whether one did.
// ChangeSeats with one change.
func (s *Store) DeactivateByToken(ctx context.Context, tenant, key string, tokenHash []byte) (bool, error) {
	changed, err := s.ChangeSeats(ctx, []SeatChange{{Tenant: tenant, Key: key, TokenHash: tokenHash}})
	if err != nil {
		return false, err
	}
	return changed[0].Removed, nil
}

// DeactivateInstance removes the live seat (key, instance), reporting whether one did
// (seat.deactivated with reason, the caller's: admin, or client for the holder's portal).
// A floating seat whose lease ran out is left to its lapse, as deactivateSQL leaves it.
func (s *Store) DeactivateInstance(ctx context.Context, tenant, key, productID, instance, reason string) (bool, error) {
	var removed bool
	err := s.spine.InTx(ctx, s.db, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM seats WHERE tenant_id = $1 AND license_key = $2 AND instance_id = $3 AND `+liveSeat, tenant, key, instance)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		removed = true
		return events.Emit(ctx, tx, events.SeatDeactivated(tenant, key, productID, instance, reason))
	})
	return removed, err
}

// HasSeat reports whether the license has a live seat for instance and, for a floating
// seat, when its lease ends (nil: not floating): an answer that the seat is valid holds
// only until then, so no cache may keep it longer.
func (s *Store) HasSeat(ctx context.Context, tenant, key, instance string) (bool, *time.Time, error) {
	var leaseEnds *time.Time
	err := s.db.QueryRow(ctx, `SELECT lease_expires_at FROM seats WHERE tenant_id = $1 AND license_key = $2 AND instance_id = $3 AND `+liveSeat,
		tenant, key, instance).Scan(&leaseEnds)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil, nil
	}
	return err == nil, leaseEnds, err
}

// Reissue replaces the token of seat (key, instance) (seat.token_reissued); false when
// there is no such live seat. A floating seat whose lease ran out keeps its token, so its
// lapse's record names the token its holder has (addendum §12: that token answers "Seat
// lease has expired").
func (s *Store) Reissue(ctx context.Context, tenant, key, productID, instance string, tokenHash []byte) (bool, error) {
	var ok bool
	err := s.spine.InTx(ctx, s.db, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE seats SET token_hash = $4 WHERE tenant_id = $1 AND license_key = $2 AND instance_id = $3 AND `+liveSeat,
			tenant, key, instance, tokenHash)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		ok = true
		return events.Emit(ctx, tx, events.SeatTokenReissued(tenant, key, productID, instance))
	})
	return ok, err
}

// Added is the outcome of AddUsage.
type Added struct {
	// SeatOK: the token holds a seat of the license.
	SeatOK bool
	// Applied: the increment was added; Used is the new total.
	Applied bool
	Used    int64
}

// addUsageSQL adds $5 to the metric's total in one statement, if the token holds a seat
// of the license ($3), the metric may be metered ($7) and the new total stays within $6.
// The upsert takes the row's lock, so concurrent increments of one metric queue on it
// and each sees the total the previous one wrote: none is lost, none passes the limit,
// and none has to be retried. The version moves on as ResetUsage's does. What it did is
// recorded as item $9 of change $8, for a caller that loses the reply (commit.go).
const addUsageSQL = `WITH seat AS (
	SELECT EXISTS (SELECT 1 FROM seats WHERE tenant_id = $1 AND license_key = $2 AND token_hash = $3 AND ` + liveSeat + `) AS ok
), added AS (
	INSERT INTO usage (tenant_id, license_key, metric, used, version)
	SELECT $1, $2, $4, $5, nextval('usage_version') FROM seat WHERE ok AND $7 AND $5::bigint <= $6::float8
	ON CONFLICT (tenant_id, license_key, metric) DO UPDATE
		SET used = usage.used + EXCLUDED.used, version = EXCLUDED.version
		WHERE usage.used + EXCLUDED.used <= $6::float8
	RETURNING used
), recorded AS (
	INSERT INTO usage_commit_items (op_id, item, seat_ok, used)
	SELECT $8, $9, ok, (SELECT used FROM added) FROM seat
)
SELECT ok, (SELECT used FROM added) FROM seat`

// Increment is one call's addition to a metric's running total: inc is added when
// TokenHash holds a seat of the license, Allowed is true and the new total is at most
// Limit.
type Increment struct {
	Tenant, Key string
	// ProductID is the license's, for the event.
	ProductID string
	TokenHash []byte
	Metric    string
	Inc       int64
	Limit     float64
	Allowed   bool
	// RequestID is the id of the call that asks for the increment (a batch carries several).
	RequestID string
}

// AddUsage applies one increment (AddUsages) and says which of its conditions held; it
// is applied once or not at all.
func (s *Store) AddUsage(ctx context.Context, tenant, key string, tokenHash []byte, metric string, inc int64, limit float64, allowed bool) (Added, error) {
	added, err := s.AddUsages(ctx, []Increment{{Tenant: tenant, Key: key, TokenHash: tokenHash, Metric: metric, Inc: inc, Limit: limit, Allowed: allowed}})
	if err != nil {
		return Added{}, err
	}
	return added[0], nil
}

// AddUsages applies increments in one round trip and one transaction: all of them are
// decided, or none is (on an error). Each is decided as if alone: increments of one
// metric apply in the order given, each against the total the one before wrote. An
// error is ErrNotApplied (or another error) only when none was applied; ErrNoAnswer
// when that could not be learned (commit.go).
func (s *Store) AddUsages(ctx context.Context, incs []Increment) ([]Added, error) {
	op := newOpID()
	var added []Added
	err := s.change(ctx, op, func(ctx context.Context, conn *pgxpool.Conn) error {
		ctx, done := s.spine.Track(ctx)
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var err error
			added, err = addUsages(ctx, tx, op, incs)
			return err
		})
		done(err)
		return err
	})
	if errors.Is(err, errCommittedUnseen) {
		return s.committedItems(ctx, op, len(incs))
	}
	return added, err
}

// AddUsageOnce applies inc under an Idempotency-Key (pkg/idempotency): answer turns
// the outcome into the call's answer, stored with the increment; a retry with the same
// key and requestHash gets that answer back and adds nothing. An error of answer's
// keeps nothing, so a retry decides again.
func (s *Store) AddUsageOnce(ctx context.Context, idemKey string, requestHash []byte, inc Increment, answer func(Added) ([]byte, error)) ([]byte, error) {
	op := newOpID()
	var resp []byte
	err := s.change(ctx, op, func(ctx context.Context, conn *pgxpool.Conn) error {
		ctx, done := s.spine.Track(ctx)
		var err error
		resp, _, err = idempotency.Do(ctx, conn, inc.Tenant, idemKey, requestHash, func(tx pgx.Tx) ([]byte, error) {
			added, err := addUsages(ctx, tx, op, []Increment{inc})
			if err != nil {
				return nil, err
			}
			return answer(added[0])
		})
		done(err)
		return err
	})
	if errors.Is(err, errCommittedUnseen) {
		// The answer was stored with the increment: replay it.
		ctx, cancel := resolveBudget(ctx)
		defer cancel()
		resp, _, err = idempotency.Do(ctx, s.db, inc.Tenant, idemKey, requestHash, func(pgx.Tx) ([]byte, error) {
			return nil, ErrNoAnswer
		})
		if err != nil {
			return nil, ErrNoAnswer
		}
	}
	return resp, err
}

// addUsages sends the increments of change op (recordCommitSQL first) in tx; the
// increment that lands exactly on its limit is usage.limit_reached, written in the same
// transaction (increments themselves are not events, addendum §11).
//
// Each license's lock is held in shared mode, so no increment overlaps the purge of its
// license: without it, an increment whose statement saw the seat before the purge
// committed would insert its row after the purge deleted the usage, leaving a total of a
// deleted license behind. The increments run after the locks, as statements of their
// own, so their snapshots follow the purge. Rows are locked in (tenant, key, metric)
// order, so two calls over the same rows wait for each other instead of deadlocking.
func addUsages(ctx context.Context, tx pgx.Tx, op []byte, incs []Increment) ([]Added, error) {
	order := stableOrder(len(incs), func(a, b int) int {
		x, y := &incs[a], &incs[b]
		return cmp.Or(cmp.Compare(x.Tenant, y.Tenant), cmp.Compare(x.Key, y.Key), cmp.Compare(x.Metric, y.Metric))
	})
	added := make([]Added, len(incs))
	used := make([]*int64, len(incs))
	var tenants, keys []string
	for _, inc := range incs {
		tenants, keys = append(tenants, inc.Tenant), append(keys, inc.Key)
	}
	b := &pgx.Batch{}
	b.Queue(recordCommitSQL, op)
	// The tenants' shared locks: an increment racing its tenant's purge either commits
	// before the purge deletes its row or runs after it, when no seat is left to meter.
	tenantpurge.QueueShare(b, tenants)
	b.Queue(shareLicensesSQL, tenants, keys)
	for _, i := range order {
		inc := &incs[i]
		b.Queue(addUsageSQL, inc.Tenant, inc.Key, inc.TokenHash, inc.Metric, inc.Inc, inc.Limit, inc.Allowed, op, i).QueryRow(func(row pgx.Row) error {
			return row.Scan(&added[i].SeatOK, &used[i])
		})
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	var reached []*eventsv1.Event
	for i, u := range used {
		if u == nil {
			continue
		}
		added[i].Applied, added[i].Used = true, *u
		if inc := &incs[i]; float64(*u) == inc.Limit {
			ev := events.UsageLimitReached(inc.Tenant, inc.Key, inc.ProductID, inc.Metric, float64(*u), inc.Limit)
			ev.Actor = events.Actor(events.ActorClient, inc.RequestID)
			reached = append(reached, ev)
		}
	}
	if err := events.EmitAll(ctx, tx, reached...); err != nil {
		return nil, err
	}
	return added, nil
}

// Usage returns the running totals of a license.
func (s *Store) Usage(ctx context.Context, tenant, key string) (map[string]int64, error) {
	rows, err := s.db.Query(ctx, `SELECT metric, used FROM usage WHERE tenant_id = $1 AND license_key = $2`, tenant, key)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	var m string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&m, &n}, func() error { out[m] = n; return nil })
	return out, err
}

// ResetUsage sets one metric's total to 0 (metric non-nil) or clears every total
// (usage.reset, in the same transaction, when a total above 0 went to 0), and returns the
// totals afterwards, read in the same transaction. A concurrent AddUsage lands wholly
// before or wholly after it. Its errors are AddUsages': ErrNoAnswer when whether it was applied
// could not be learned.
func (s *Store) ResetUsage(ctx context.Context, tenant, key, productID string, metric *string) (map[string]int64, error) {
	op := newOpID()
	var usage map[string]int64
	err := s.change(ctx, op, func(ctx context.Context, conn *pgxpool.Conn) error {
		ctx, done := s.spine.Track(ctx)
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			b.Queue(recordCommitSQL, op)
			// zeroed counts the totals above 0 the reset took back to 0: none, and the
			// reset changed nothing, so it records nothing (events.md).
			zeroed := 0
			countZeroed := func(rows pgx.Rows) error {
				var used int64
				_, err := pgx.ForEachRow(rows, []any{&used}, func() error {
					if used > 0 {
						zeroed++
					}
					return nil
				})
				return err
			}
			if metric != nil {
				// Under the shared lock, as AddUsage, and never for a purged license: a row
				// written while or after the purge runs would outlive it. A total above 0
				// goes to 0 (the UPDATE waits for an increment that holds the row and
				// looks again); a missing one is written as 0, and one an increment wrote
				// in between stays (that increment came after the reset).
				b.Queue(shareLicenseSQL, tenant, key)
				b.Queue(`UPDATE usage SET used = 0, version = nextval('usage_version')
					WHERE tenant_id = $1 AND license_key = $2 AND metric = $3 AND used <> 0 RETURNING 1::bigint`,
					tenant, key, *metric).Query(countZeroed)
				b.Queue(`INSERT INTO usage (tenant_id, license_key, metric, used, version)
					SELECT $1, $2, $3, 0, nextval('usage_version')
					WHERE NOT EXISTS (SELECT 1 FROM deleted_licenses WHERE tenant_id = $1 AND license_key = $2)
					ON CONFLICT (tenant_id, license_key, metric) DO NOTHING`,
					tenant, key, *metric)
			} else {
				b.Queue(`DELETE FROM usage WHERE tenant_id = $1 AND license_key = $2 RETURNING used`, tenant, key).Query(countZeroed)
			}
			usage = map[string]int64{}
			b.Queue(`SELECT metric, used FROM usage WHERE tenant_id = $1 AND license_key = $2`, tenant, key).Query(func(rows pgx.Rows) error {
				var m string
				var n int64
				_, err := pgx.ForEachRow(rows, []any{&m, &n}, func() error { usage[m] = n; return nil })
				return err
			})
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return err
			}
			if zeroed == 0 {
				return nil
			}
			return events.Emit(ctx, tx, events.UsageReset(tenant, key, productID, metric))
		})
		done(err)
		return err
	})
	if errors.Is(err, errCommittedUnseen) {
		// Applied; the totals now are the answer (the reset's own were lost with the reply).
		ctx, cancel := resolveBudget(ctx)
		defer cancel()
		if usage, err = s.Usage(ctx, tenant, key); err != nil {
			return nil, ErrNoAnswer
		}
	}
	return usage, err
}

// Seat is one activation of a license.
type Seat struct {
	Key, InstanceID string
	ActivatedAt     time.Time
}

// The listings and counts below show active seats only: a floating seat whose lease ran
// out is no active seat, swept yet or not (addendum §12), so a list taken between its
// lapse and the sweep must not show it, nor count it, nor offer to deactivate it.

// Seats lists a license's active seats, oldest first.
func (s *Store) Seats(ctx context.Context, tenant, key string) ([]Seat, error) {
	rows, err := s.db.Query(ctx, `SELECT license_key, instance_id, activated_at FROM seats
		WHERE tenant_id = $1 AND license_key = $2 AND `+liveSeat+` ORDER BY activated_at, instance_id`, tenant, key)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanSeat)
}

// recentSQL reads the newest seats in the order of the seats_recent index, which stops at
// the limit however many seats share an activation time.
const recentSQL = `SELECT license_key, instance_id, activated_at FROM seats
	WHERE tenant_id = $1 AND NOT license_key = ANY($3) AND ` + liveSeat + `
	ORDER BY activated_at DESC, license_key, instance_id LIMIT $2`

// Recent lists the tenant's newest active seats across licenses, but none of the exclude keys.
func (s *Store) Recent(ctx context.Context, tenant string, limit int, exclude []string) ([]Seat, error) {
	rows, err := s.db.Query(ctx, recentSQL, tenant, limit, nonNil(exclude))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanSeat)
}

func scanSeat(row pgx.CollectableRow) (Seat, error) {
	var s Seat
	err := row.Scan(&s.Key, &s.InstanceID, &s.ActivatedAt)
	return s, err
}

// CountSeats counts the tenant's active seats, but none of the exclude keys.
func (s *Store) CountSeats(ctx context.Context, tenant string, exclude []string) (int, error) {
	var n int
	err := s.db.QueryRow(ctx, `SELECT count(*) FROM seats WHERE tenant_id = $1 AND NOT license_key = ANY($2) AND `+liveSeat,
		tenant, nonNil(exclude)).Scan(&n)
	return n, err
}

// nonNil makes "no keys" an empty array: NULL would make ANY() unknown and match nothing.
func nonNil(keys []string) []string {
	if keys == nil {
		return []string{}
	}
	return keys
}

// Summary is one license's seat count and totals.
type Summary struct {
	Seats int
	Usage map[string]int64
}

// Summaries returns the active seat count and usage of each of keys that has either.
func (s *Store) Summaries(ctx context.Context, tenant string, keys []string) (map[string]*Summary, error) {
	out := map[string]*Summary{}
	get := func(k string) *Summary {
		if out[k] == nil {
			out[k] = &Summary{Usage: map[string]int64{}}
		}
		return out[k]
	}
	rows, err := s.db.Query(ctx, `SELECT license_key, count(*) FROM seats
		WHERE tenant_id = $1 AND license_key = ANY($2) AND `+liveSeat+` GROUP BY license_key`, tenant, keys)
	if err != nil {
		return nil, err
	}
	var k, m string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&k, &n}, func() error { get(k).Seats = int(n); return nil }); err != nil {
		return nil, err
	}
	rows, err = s.db.Query(ctx, `SELECT license_key, metric, used FROM usage
		WHERE tenant_id = $1 AND license_key = ANY($2)`, tenant, keys)
	if err != nil {
		return nil, err
	}
	_, err = pgx.ForEachRow(rows, []any{&k, &m, &n}, func() error { get(k).Usage[m] = n; return nil })
	return out, err
}

// Purge forgets a deleted license: its seats and usage go (a seat.deactivated event with
// reason license_deleted for each seat), and a record of the deletion stays so that an
// activation racing the deletion cannot recreate a seat. A floating seat whose lease ran
// out before had already gone: it lapses first, as the sweeper would lapse it (reason
// lease_expired). Idempotent: a second purge removes nothing and emits nothing.
func (s *Store) Purge(ctx context.Context, tenant, key, productID string, deletedAt time.Time) error {
	return s.spine.InTx(ctx, s.db, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, lockLicenseSQL, tenant, key); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, lapseLicensesSQL, []string{tenant}, []string{key})
		if err != nil {
			return err
		}
		lapsed, err := scanLapsed(rows)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO deleted_licenses (tenant_id, license_key, deleted_at)
			VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, tenant, key, deletedAt); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `DELETE FROM seats WHERE tenant_id = $1 AND license_key = $2 RETURNING instance_id`, tenant, key)
		if err != nil {
			return err
		}
		instances, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		slices.Sort(instances)
		removed := lapseEvents(lapsed)
		for _, instance := range instances {
			removed = append(removed, events.SeatDeactivated(tenant, key, productID, instance, events.ReasonLicenseDeleted))
		}
		if err := events.EmitAll(ctx, tx, removed...); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM usage WHERE tenant_id = $1 AND license_key = $2`, tenant, key)
		return err
	})
}

// SeatsForKeys lists the active seats of many licenses of the tenant, oldest first per license.
func (s *Store) SeatsForKeys(ctx context.Context, tenant string, keys []string) ([]Seat, error) {
	rows, err := s.db.Query(ctx, `SELECT license_key, instance_id, activated_at FROM seats
		WHERE tenant_id = $1 AND license_key = ANY($2) AND `+liveSeat+` ORDER BY license_key, activated_at, instance_id`, tenant, keys)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanSeat)
}
