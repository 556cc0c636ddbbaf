package pgxx

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Retention deletes the rows of one table older than a stated period, so records of
// received events (storefront deliveries and fulfillments, billing's Stripe events) do
// not grow for ever. Every replica may run it: each pass deletes in chunks of
// retentionChunk rows, so no statement holds many locks, and two replicas deleting the
// same old rows only skip what the other deleted.
type Retention struct {
	// Table is the table's name in the pool's schema; Column the timestamptz it ages by.
	Table, Column string
	// Keep is the period (config RECORD_RETENTION); 0 keeps rows for ever.
	Keep time.Duration
	// Every is the time between passes (default an hour).
	Every time.Duration
}

const retentionChunk = 1000

// Prune deletes the rows whose Column is older than now - Keep and returns how many.
func (r Retention) Prune(ctx context.Context, pool *pgxpool.Pool, now time.Time) (int64, error) {
	if r.Keep <= 0 {
		return 0, nil
	}
	// ctid: the tables have different keys (serial, composite, text); the physical row
	// id is what every table has.
	q := fmt.Sprintf(`DELETE FROM %[1]s WHERE ctid = ANY(ARRAY(
		SELECT ctid FROM %[1]s WHERE %[2]s < $1 LIMIT %[3]d))`, r.Table, r.Column, retentionChunk)
	var total int64
	for {
		tag, err := pool.Exec(ctx, q, now.Add(-r.Keep))
		if err != nil {
			return total, fmt.Errorf("retention %s: %w", r.Table, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < retentionChunk {
			return total, nil
		}
	}
}

// Run prunes once now and then every Every until ctx is done; a failed pass is logged
// and tried again at the next.
func (r Retention) Run(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) {
	if r.Keep <= 0 {
		return
	}
	every := r.Every
	if every <= 0 {
		every = time.Hour
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		n, err := r.Prune(ctx, pool, time.Now())
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("retention pass failed", "table", r.Table, "error", err.Error())
		case n > 0:
			log.Info("retention pass", "table", r.Table, "deleted", n, "older_than", r.Keep.String())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
