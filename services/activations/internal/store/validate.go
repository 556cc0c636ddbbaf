package store

import (
	"context"
	"time"
)

// SeatKey names one seat: the license's tenant and key and the instance.
type SeatKey struct {
	Tenant, Key, Instance string
}

// LiveSeat is HasSeat's answer about one seat: whether it counts, and for a floating
// seat, until when its lease runs.
type LiveSeat struct {
	Present   bool
	LeaseEnds *time.Time
}

// LiveSeats is HasSeat for many seats with one query (validate-license's batches): one
// answer per seat, in the order given.
func (s *Store) LiveSeats(ctx context.Context, seats []SeatKey) ([]LiveSeat, error) {
	tenants, keys, instances := make([]string, len(seats)), make([]string, len(seats)), make([]string, len(seats))
	for i, k := range seats {
		tenants[i], keys[i], instances[i] = k.Tenant, k.Key, k.Instance
	}
	// Each asked seat is one primary-key probe; ordinality says which answer is whose
	// (liveSeat's column is the seats' own: the asked rows have none of that name).
	rows, err := s.db.Query(ctx, `SELECT q.i, seats.lease_expires_at
		FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS q(tenant_id, license_key, instance_id, i)
		JOIN seats ON seats.tenant_id = q.tenant_id AND seats.license_key = q.license_key AND seats.instance_id = q.instance_id
		WHERE `+liveSeat, tenants, keys, instances)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]LiveSeat, len(seats))
	for rows.Next() {
		var i int64
		var leaseEnds *time.Time
		if err := rows.Scan(&i, &leaseEnds); err != nil {
			return nil, err
		}
		out[i-1] = LiveSeat{Present: true, LeaseEnds: leaseEnds}
	}
	return out, rows.Err()
}
