package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// TryLockSession is LockSession for a caller on a shared pool (resend-email on the API's):
// while another holds the session it waits holding no connection, trying again with
// backoff until ctx ends, so callers queued on one purchase can never take every
// connection of the pool from the one holding it.
func (s *Store) TryLockSession(ctx context.Context, tenant, session string) (*Session, error) {
	for pause := 20 * time.Millisecond; ; pause = min(pause*2, 500*time.Millisecond) {
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		var locked bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended('storefront-session:' || $1 || ':' || $2, 0))`,
			tenant, session).Scan(&locked); err != nil {
			// The lock may have been granted after ctx ended: never hand this conn back.
			_ = conn.Conn().Close(context.Background())
			conn.Release()
			return nil, fmt.Errorf("lock checkout session: %w", err)
		}
		if locked {
			return &Session{conn: conn, spine: s.spine, tenant: tenant, session: session}, nil
		}
		conn.Release()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pause):
		}
	}
}

// Begin starts a transaction on the session's connection: resend-email records its
// Idempotency-Key answer and the resend in one (idempotency.Do).
func (x *Session) Begin(ctx context.Context) (pgx.Tx, error) { return x.conn.Begin(ctx) }

// KeepBuyerEmail records the purchase's buyer address, sealed, for resend-email.
func (x *Session) KeepBuyerEmail(ctx context.Context, sealed []byte) error {
	_, err := x.conn.Exec(ctx, `UPDATE fulfillments SET buyer_email_sealed = $3
		WHERE tenant_id = $1 AND checkout_session_id = $2`, x.tenant, x.session, sealed)
	return err
}

// Resends counts the purchase's resends since since, and when the oldest of them was
// sent (zero when none). Read under the session's lock, so the count cannot go stale
// before the next resend is recorded.
func (x *Session) Resends(ctx context.Context, tx pgx.Tx, since time.Time) (n int, oldest time.Time, err error) {
	var first *time.Time
	err = tx.QueryRow(ctx, `SELECT count(*), min(sent_at) FROM email_resends
		WHERE tenant_id = $1 AND checkout_session_id = $2 AND sent_at > $3`, x.tenant, x.session, since).Scan(&n, &first)
	if first != nil {
		oldest = *first
	}
	return n, oldest, err
}

// EmailResent records a resend of the purchase's email (status sent or logged) asked
// through delivery deliveryID: the purchase's email is delivered now, and so are its
// checkout deliveries that were still waiting for it or had failed. A delivery that
// said already_sent keeps saying so: it sent nothing. It writes in tx (Begin's).
func (x *Session) EmailResent(ctx context.Context, tx pgx.Tx, deliveryID int32, status string) (sentAt time.Time, err error) {
	if err := tx.QueryRow(ctx, `INSERT INTO email_resends (tenant_id, checkout_session_id, delivery_id, email_status)
		VALUES ($1, $2, $3, $4) RETURNING sent_at`, x.tenant, x.session, deliveryID, status).Scan(&sentAt); err != nil {
		return sentAt, err
	}
	if _, err := tx.Exec(ctx, `UPDATE fulfillments SET email_status = $3, updated_at = now()
		WHERE tenant_id = $1 AND checkout_session_id = $2`, x.tenant, x.session, status); err != nil {
		return sentAt, err
	}
	_, err = tx.Exec(ctx, `UPDATE deliveries SET email_status = $3, error = NULL, updated_at = now()
		WHERE tenant_id = $1 AND checkout_session_id = $2 AND license_key IS NOT NULL
		AND event_type LIKE 'checkout.session.%' AND email_status IN ('pending', 'failed')`, x.tenant, x.session, status)
	return sentAt, err
}
