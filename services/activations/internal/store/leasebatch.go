package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// LeaseAsk is what one lease reads (LeaseBasis's arguments): the seat of (Tenant, Key)
// holding TokenHash or, when TokenHash is nil, the seat of Instance; the policy of
// (ProductID, Tier); the tenant's active key.
type LeaseAsk struct {
	Tenant, Key, ProductID, Tier string
	TokenHash                    []byte
	Instance                     string
}

// leaseBasesSQL is leaseBasisSQL for many leases at once, one row per ask in the asks'
// order ($1 … $6: the asks' tenants, keys, token hashes, instances, products, tiers).
// The seat is found by token hash or, for an ask without one, by instance: two indexed
// lookups of which the one that does not apply finds nothing.
const leaseBasesSQL = `SELECT q.i, s.instance_id, s.lease_expires_at, s.components, s.live,
		p.product_id, p.tier, p.floating, p.lease_ttl_seconds, p.renew_after_seconds, p.fingerprint_match, p.entitlements, p.updated_at,
		k.kid, k.public_key, k.sealed_private, k.status, k.retire_at
	FROM unnest($1::text[], $2::text[], $3::bytea[], $4::text[], $5::text[], $6::text[])
		WITH ORDINALITY AS q(tenant_id, license_key, token_hash, instance_id, product_id, tier, i)
	LEFT JOIN LATERAL (
		SELECT ` + leaseSeatColumns + ` AS live FROM seats
			WHERE tenant_id = q.tenant_id AND license_key = q.license_key AND token_hash = q.token_hash
		UNION ALL
		SELECT ` + leaseSeatColumns + ` AS live FROM seats
			WHERE tenant_id = q.tenant_id AND license_key = q.license_key AND q.token_hash IS NULL AND instance_id = q.instance_id
	) s ON true
	LEFT JOIN LATERAL (SELECT ` + policyColumns + ` FROM lease_policies
		WHERE tenant_id = q.tenant_id AND product_id = q.product_id AND tier IN (q.tier, '*') ORDER BY tier = '*' LIMIT 1) p ON true
	LEFT JOIN LATERAL (SELECT ` + leaseKeyColumns + ` FROM lease_keys WHERE tenant_id = q.tenant_id AND status = 'active') k ON true
	ORDER BY q.i`

// LeaseBases is LeaseBasis for many leases in one round trip: one basis per ask, in the
// asks' order.
func (s *Store) LeaseBases(ctx context.Context, asks []LeaseAsk) ([]LeaseBasis, error) {
	n := len(asks)
	tenants, keys, instances, products, tiers := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	hashes := make([][]byte, n)
	for i, a := range asks {
		tenants[i], keys[i], hashes[i], instances[i], products[i], tiers[i] = a.Tenant, a.Key, a.TokenHash, a.Instance, a.ProductID, a.Tier
	}
	rows, err := s.db.Query(ctx, leaseBasesSQL, tenants, keys, hashes, instances, products, tiers)
	if err != nil {
		return nil, err
	}
	bases := make([]LeaseBasis, 0, n)
	var ordinal int64
	for rows.Next() {
		b, err := scanLeaseBasis(rows, &ordinal)
		if err != nil {
			rows.Close()
			return nil, err
		}
		bases = append(bases, b)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(bases) != n {
		return nil, errors.New("lease bases: one row per ask expected")
	}
	return bases, nil
}

// renewLeasesSQL is renewLeaseSQL for many renewals without a new token, in one
// statement ($1 … $8: tenants, keys, instances, token hashes, seen components, lease ends,
// components to bind, product ids): each seat changes only while it is live at this
// very moment and still bound as its caller saw it. It answers the ordinals of the
// renewals applied. Two renewals of one seat in one statement apply once (the other is
// answered as not applied, and its caller looks again).
const renewLeasesSQL = `UPDATE seats SET lease_expires_at = r.lease_expires_at,
		lease_sweep_after = CASE WHEN r.lease_expires_at IS NULL THEN NULL ELSE least(seats.lease_sweep_after, r.lease_expires_at) END,
		components = coalesce(seats.components, r.bind::jsonb),
		product_id = coalesce(nullif(r.product_id, ''), seats.product_id)
	FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::text[], $6::timestamptz[], $7::text[], $8::text[])
		WITH ORDINALITY AS r(tenant_id, license_key, instance_id, token_hash, seen, lease_expires_at, bind, product_id, i)
	WHERE seats.tenant_id = r.tenant_id AND seats.license_key = r.license_key AND seats.instance_id = r.instance_id
		AND seats.token_hash = r.token_hash
		AND seats.components IS NOT DISTINCT FROM r.seen::jsonb
		AND (seats.lease_expires_at IS NULL OR seats.lease_expires_at >= clock_timestamp())
	RETURNING r.i`

// RenewLeases applies many renewals, each proven by its token (NewTokenHash nil: a
// reinstall's new token is an event and goes through RenewLease), in one round trip and
// one transaction, and says which it applied (false: look again, as RenewLease's false).
//
// It holds the shared lock of every license it renews seats of, as RenewLease holds
// one, taken in lock-id order (shareLicensesSQL), so a batch never runs between an
// activation's count and its commit.
func (s *Store) RenewLeases(ctx context.Context, rs []LeaseRenewal) ([]bool, error) {
	n := len(rs)
	tenants, keys, instances, products := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	hashes := make([][]byte, n)
	seen, bind := make([]*string, n), make([]*string, n)
	ends := make([]*time.Time, n)
	for i, r := range rs {
		if r.TokenHash == nil || r.NewTokenHash != nil {
			return nil, errors.New("renew leases: a renewal without a token or with a new one goes alone")
		}
		tenants[i], keys[i], instances[i], hashes[i], ends[i], products[i] = r.Tenant, r.Key, r.Instance, r.TokenHash, r.LeaseExpiresAt, r.ProductID
		var err error
		if seen[i], err = jsonTextOrNil(r.SeenComponents); err != nil {
			return nil, err
		}
		if bind[i], err = jsonTextOrNil(r.Bind); err != nil {
			return nil, err
		}
	}
	renewed := make([]bool, n)
	b := &pgx.Batch{}
	b.Queue(shareLicensesSQL, tenants, keys)
	b.Queue(renewLeasesSQL, tenants, keys, instances, hashes, seen, ends, bind, products).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var i int64
			if err := rows.Scan(&i); err != nil {
				return err
			}
			renewed[i-1] = true
		}
		return rows.Err()
	})
	// A renewal is not an event (too many, as increments are).
	if err := s.db.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	return renewed, nil
}

func jsonTextOrNil(m map[string]string) (*string, error) {
	j, err := jsonOrNil(m)
	if j == nil || err != nil {
		return nil, err
	}
	text := string(j)
	return &text, nil
}
