package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/keyhouse/keyhouse/pkg/events"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// liveSeat is the condition of a seat that counts: not floating, or leased until a time
// not yet passed. A floating seat past its lease counts nowhere (the cap, validate-license,
// track-usage, leases) even before the sweeper removes it.
const liveSeat = `(lease_expires_at IS NULL OR lease_expires_at >= now())`

// Policy is the lease policy of a product's tier ("*": the product's default).
type Policy struct {
	ProductID, Tier  string
	Floating         bool
	LeaseTTL         time.Duration
	RenewAfter       time.Duration
	FingerprintMatch string
	Entitlements     []string
	UpdatedAt        time.Time
}

const policyColumns = `product_id, tier, floating, lease_ttl_seconds, renew_after_seconds, fingerprint_match, entitlements, updated_at`

func scanPolicy(row pgx.CollectableRow) (Policy, error) {
	var p Policy
	var ttl, renew int32
	err := row.Scan(&p.ProductID, &p.Tier, &p.Floating, &ttl, &renew, &p.FingerprintMatch, &p.Entitlements, &p.UpdatedAt)
	p.LeaseTTL, p.RenewAfter = time.Duration(ttl)*time.Second, time.Duration(renew)*time.Second
	return p, err
}

// PutPolicy creates or replaces the policy of (product, tier) and returns it as stored.
func (s *Store) PutPolicy(ctx context.Context, tenant string, p Policy) (Policy, error) {
	rows, err := s.db.Query(ctx, `INSERT INTO lease_policies (tenant_id, product_id, tier, floating, lease_ttl_seconds,
			renew_after_seconds, fingerprint_match, entitlements) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (tenant_id, product_id, tier) DO UPDATE SET floating = EXCLUDED.floating,
			lease_ttl_seconds = EXCLUDED.lease_ttl_seconds, renew_after_seconds = EXCLUDED.renew_after_seconds,
			fingerprint_match = EXCLUDED.fingerprint_match, entitlements = EXCLUDED.entitlements, updated_at = now()
		RETURNING `+policyColumns,
		tenant, p.ProductID, p.Tier, p.Floating, int32(p.LeaseTTL/time.Second), int32(p.RenewAfter/time.Second),
		p.FingerprintMatch, nonNil(p.Entitlements))
	if err != nil {
		return Policy{}, err
	}
	return pgx.CollectExactlyOneRow(rows, scanPolicy)
}

// Policies lists the policies of a product, the default ("*") first, then by tier.
func (s *Store) Policies(ctx context.Context, tenant, productID string) ([]Policy, error) {
	rows, err := s.db.Query(ctx, `SELECT `+policyColumns+` FROM lease_policies WHERE tenant_id = $1 AND product_id = $2
		ORDER BY tier <> '*', tier`, tenant, productID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanPolicy)
}

// Policy is the policy of (product, tier) itself, or nil when it has none.
func (s *Store) Policy(ctx context.Context, tenant, productID, tier string) (*Policy, error) {
	return optionalPolicy(s.db.Query(ctx, `SELECT `+policyColumns+` FROM lease_policies WHERE tenant_id = $1 AND product_id = $2 AND tier = $3`,
		tenant, productID, tier))
}

// optionalPolicy is the one policy rows hold, or nil when they hold none.
func optionalPolicy(rows pgx.Rows, err error) (*Policy, error) {
	if err != nil {
		return nil, err
	}
	p, err := pgx.CollectExactlyOneRow(rows, scanPolicy)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return &p, err
}

// DeletePolicy removes the policy of (product, tier), reporting whether there was one.
func (s *Store) DeletePolicy(ctx context.Context, tenant, productID, tier string) (bool, error) {
	tag, err := s.db.Exec(ctx, `DELETE FROM lease_policies WHERE tenant_id = $1 AND product_id = $2 AND tier = $3`,
		tenant, productID, tier)
	return tag.RowsAffected() > 0, err
}

// PolicyFor is the policy a license of (product, tier) follows: its tier's, else the
// product's default, else nil (the built-in defaults apply).
func (s *Store) PolicyFor(ctx context.Context, tenant, productID, tier string) (*Policy, error) {
	return optionalPolicy(s.db.Query(ctx, `SELECT `+policyColumns+` FROM lease_policies
		WHERE tenant_id = $1 AND product_id = $2 AND tier IN ($3, '*') ORDER BY tier = '*' LIMIT 1`, tenant, productID, tier))
}

// LongestLeaseTTL is the longest lease_ttl of the tenant's policies (0 without any).
func (s *Store) LongestLeaseTTL(ctx context.Context, tenant string) (time.Duration, error) {
	var secs int32
	err := s.db.QueryRow(ctx, `SELECT coalesce(max(lease_ttl_seconds), 0) FROM lease_policies WHERE tenant_id = $1`, tenant).Scan(&secs)
	return time.Duration(secs) * time.Second, err
}

// LeaseSeat is what a lease needs of a seat.
type LeaseSeat struct {
	Instance string
	// LeaseExpiresAt is set for a floating seat.
	LeaseExpiresAt *time.Time
	// Components are those the seat is bound to (nil: unbound).
	Components map[string]string
	// Live: the seat counts (not a floating seat past its lease).
	Live bool
}

const leaseSeatColumns = `instance_id, lease_expires_at, components, ` + liveSeat

func scanLeaseSeat(row pgx.CollectableRow) (LeaseSeat, error) {
	var seat LeaseSeat
	var components []byte
	if err := row.Scan(&seat.Instance, &seat.LeaseExpiresAt, &components, &seat.Live); err != nil {
		return seat, err
	}
	if components != nil {
		if err := json.Unmarshal(components, &seat.Components); err != nil {
			return seat, err
		}
	}
	return seat, nil
}

// LapsedWithin reports whether the seat holding tokenHash lapsed (its floating lease ran
// out) less than within ago.
func (s *Store) LapsedWithin(ctx context.Context, tenant, key string, tokenHash []byte, within time.Duration) (bool, error) {
	var ok bool
	err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM lapsed_seats WHERE token_hash = $3 AND tenant_id = $1
		AND license_key = $2 AND lapsed_at > now() - make_interval(secs => $4))`, tenant, key, tokenHash, within.Seconds()).Scan(&ok)
	return ok, err
}

// LeaseRenewal is what a lease changes on its seat.
type LeaseRenewal struct {
	Tenant, Key, Instance string
	// ProductID is the license's: a reinstall's new token is seat.token_reissued, and a
	// floating seat keeps it for the sweeper's seat.deactivated.
	ProductID string
	// TokenHash is the seat's token as the caller proved it; nil for a reinstall by
	// instance_id (then SeenComponents, the bound ones, are the proof).
	TokenHash []byte
	// NewTokenHash replaces the token (a reinstall); nil keeps it.
	NewTokenHash []byte
	// SeenComponents are the components the caller compared against (nil: unbound); the
	// renewal applies only if the seat still has exactly those.
	SeenComponents map[string]string
	// Bind binds the seat to these components when it is unbound (nil: leave it).
	Bind map[string]string
	// LeaseExpiresAt is the floating seat's new lease end; nil makes the seat not floating.
	LeaseExpiresAt *time.Time
}

// renewLeaseSQL moves a seat's lease, binds it and replaces its token, all only while the
// seat is live at this very moment (clock_timestamp, not the transaction's start: a
// lapsed seat is never revived) and still bound as the caller saw it. The sweeper's
// lease_sweep_after stays as it is unless the lease end falls below it (a shorter
// lease_ttl, the license's expiry) or the seat stops or starts floating: a renewal then
// changes no indexed column and is a HOT update.
const renewLeaseSQL = `UPDATE seats SET lease_expires_at = $6,
		lease_sweep_after = CASE WHEN $6::timestamptz IS NULL THEN NULL ELSE least(lease_sweep_after, $6::timestamptz) END,
		components = coalesce(components, $7::jsonb),
		token_hash = coalesce($8, token_hash),
		product_id = coalesce(nullif($9, ''), product_id)
	WHERE tenant_id = $1 AND license_key = $2 AND instance_id = $3 AND ($4::bytea IS NULL OR token_hash = $4)
		AND components IS NOT DISTINCT FROM $5::jsonb
		AND (lease_expires_at IS NULL OR lease_expires_at >= clock_timestamp())`

// RenewLease applies r and reports whether it did (false: the seat went away, lapsed, was
// bound or got a new token meanwhile; the caller looks again).
//
// It holds the license's lock in shared mode, as an increment does, so it never runs
// between an activation's count and its commit: an activation that counted a floating
// seat as lapsed has committed before a renewal can look at that seat, and the renewal
// then finds it lapsed too. Without the lock, a renewal checked just before the lapse and
// committed after an activation's count would make one seat too many live.
func (s *Store) RenewLease(ctx context.Context, r LeaseRenewal) (bool, error) {
	seen, err := jsonOrNil(r.SeenComponents)
	if err != nil {
		return false, err
	}
	bind, err := jsonOrNil(r.Bind)
	if err != nil {
		return false, err
	}
	var renewed bool
	b := &pgx.Batch{}
	b.Queue(shareLicenseSQL, r.Tenant, r.Key)
	b.Queue(renewLeaseSQL, r.Tenant, r.Key, r.Instance, r.TokenHash, seen, r.LeaseExpiresAt, bind, r.NewTokenHash, r.ProductID).
		Exec(func(tag pgconn.CommandTag) error { renewed = tag.RowsAffected() > 0; return nil })
	if r.NewTokenHash == nil {
		// A renewal is not an event (too many, as increments are): one round trip.
		err = s.db.SendBatch(ctx, b).Close()
		return renewed, err
	}
	// A reinstall replaces the seat's token, as reissue-token does: seat.token_reissued.
	err = s.spine.InTx(ctx, s.db, func(ctx context.Context, tx pgx.Tx) error {
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if !renewed {
			return nil
		}
		return events.Emit(ctx, tx, events.SeatTokenReissued(r.Tenant, r.Key, r.ProductID, r.Instance))
	})
	return renewed, err
}

func jsonOrNil(m map[string]string) ([]byte, error) {
	if m == nil {
		return nil, nil
	}
	return json.Marshal(m)
}

// LapsedSeat is a floating seat removed because its lease ran out.
type LapsedSeat struct {
	Tenant, Key, ProductID, Instance string
	LapsedAt                         time.Time
}

// rescheduleRenewedSQL raises lease_sweep_after to the lease end of up to $1 floating
// seats renewed past it, so that the sweeper's index range (lease_sweep_after < now())
// holds lapsed seats and not live ones. Each seat comes up once per lease, however often
// it was renewed meanwhile. SKIP LOCKED: another replica's sweeper, or a renewal, has it.
const rescheduleRenewedSQL = `UPDATE seats s SET lease_sweep_after = s.lease_expires_at FROM (
		SELECT tenant_id, license_key, instance_id FROM seats
		WHERE lease_sweep_after < now() AND lease_expires_at >= now()
		ORDER BY lease_sweep_after LIMIT $1 FOR UPDATE SKIP LOCKED
	) x
	WHERE s.tenant_id = x.tenant_id AND s.license_key = x.license_key AND s.instance_id = x.instance_id
		AND s.lease_expires_at >= now()`

// RescheduleRenewed moves up to limit renewed floating seats out of the sweeper's range
// (see rescheduleRenewedSQL) and says how many it moved. Safe on every replica at once.
func (s *Store) RescheduleRenewed(ctx context.Context, limit int) (int, error) {
	tag, err := s.db.Exec(ctx, rescheduleRenewedSQL, limit)
	return int(tag.RowsAffected()), err
}

// lapseSQL removes the floating seats that target selects (their tenant_id, license_key
// and instance_id) and whose lease ran out, records each token's lapse (so that a lease
// asked for with it answers "Seat lease has expired" rather than "Invalid activation
// token", addendum §12) and answers each seat removed (scanLapsed), oldest lapse first.
// It is the one way a lapsed seat goes: the sweeper's and any change that would take a
// lapsed seat's place (an activation, a purge) run it, the change in its own
// transaction before it acts, each announcing the seats it removed with lapseEvents. The
// seat's lapse is then one seat.deactivated however it was found, and comes before
// whatever took the seat's place.
func lapseSQL(target string) string {
	return `WITH gone AS (
	DELETE FROM seats s USING (` + target + `) x
	WHERE s.tenant_id = x.tenant_id AND s.license_key = x.license_key AND s.instance_id = x.instance_id
		AND s.lease_expires_at < now()
	RETURNING s.tenant_id, s.license_key, coalesce(s.product_id, '') AS product_id, s.instance_id, s.token_hash, s.lease_expires_at
), recorded AS (
	INSERT INTO lapsed_seats (token_hash, tenant_id, license_key, instance_id, lapsed_at)
	SELECT token_hash, tenant_id, license_key, instance_id, lease_expires_at FROM gone
	ON CONFLICT (token_hash) DO UPDATE SET lapsed_at = EXCLUDED.lapsed_at
)
SELECT tenant_id, license_key, product_id, instance_id, lease_expires_at FROM gone
ORDER BY lease_expires_at, tenant_id, license_key, instance_id`
}

// sweepLapsedSQL is the sweeper's lapseSQL: up to $1 floating seats past their lease,
// found by the index on lease_sweep_after (never past the lease end). SKIP LOCKED lets
// the sweepers of every replica run side by side, each taking other seats, and skips a
// seat a renewal is updating (the renewal decides: a seat renewed in time is live again,
// one not renewed is taken on the next sweep) or an activation is lapsing.
var sweepLapsedSQL = lapseSQL(`SELECT tenant_id, license_key, instance_id FROM seats
		WHERE lease_sweep_after < now() AND lease_expires_at < now() ORDER BY lease_sweep_after LIMIT $1 FOR UPDATE SKIP LOCKED`)

// lapseLicensesSQL is lapseSQL for every lapsed seat of the licenses ($1 tenants, $2
// keys). Run under their exclusive locks (lockLicensesSQL), so no renewal moves a lease
// meanwhile; it waits for a sweeper that holds one of the seats (which then removed it).
// The seats are locked in (tenant, key, token) order, the order in which a batch of
// deactivations locks its seats.
var lapseLicensesSQL = lapseSQL(`SELECT tenant_id, license_key, instance_id FROM seats
		WHERE (tenant_id, license_key) IN (SELECT * FROM unnest($1::text[], $2::text[])) AND lease_expires_at < now()
		ORDER BY tenant_id, license_key, token_hash FOR UPDATE`)

// scanLapsed reads the seats a lapseSQL statement removed.
func scanLapsed(rows pgx.Rows) ([]LapsedSeat, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (LapsedSeat, error) {
		var l LapsedSeat
		err := row.Scan(&l.Tenant, &l.Key, &l.ProductID, &l.Instance, &l.LapsedAt)
		return l, err
	})
}

// lapseEvents announces lapsed seats: seat.deactivated with reason lease_expired, the
// system's doing whichever call found the seat lapsed.
func lapseEvents(lapsed []LapsedSeat) []*eventsv1.Event {
	evs := make([]*eventsv1.Event, len(lapsed))
	for i, l := range lapsed {
		evs[i] = events.SeatDeactivated(l.Tenant, l.Key, l.ProductID, l.Instance, events.ReasonLeaseExpired)
		evs[i].Actor = events.Actor(events.ActorSystem, "")
	}
	return evs
}

// SweepLapsed removes up to limit floating seats whose lease ran out, announces each
// (lapseEvents, in the same transaction), and forgets lapses older than remember. Safe on
// every replica at once.
func (s *Store) SweepLapsed(ctx context.Context, limit int, remember time.Duration) ([]LapsedSeat, error) {
	var lapsed []LapsedSeat
	// The sweeper's removals are the system's doing; the spine's post-commit path
	// announces them to the caches of validate-license's answers.
	err := s.spine.InTx(events.WithActor(ctx, events.ActorSystem), s.db, func(ctx context.Context, tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sweepLapsedSQL, limit)
		if err != nil {
			return err
		}
		if lapsed, err = scanLapsed(rows); err != nil {
			return err
		}
		if err := events.EmitAll(ctx, tx, lapseEvents(lapsed)...); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM lapsed_seats WHERE lapsed_at < now() - make_interval(secs => $1)`, remember.Seconds())
		return err
	})
	if err != nil {
		return nil, err
	}
	return lapsed, nil
}

// leaseSeconds is a floating seat's lease for SQL (make_interval's secs; NULL: not floating).
func leaseSeconds(ttl *time.Duration) *float64 {
	if ttl == nil {
		return nil
	}
	secs := ttl.Seconds()
	return &secs
}

// SeatLeases lists a license's seats with their lease state, oldest first.
func (s *Store) SeatLeases(ctx context.Context, tenant, key string) ([]LeaseSeat, error) {
	rows, err := s.db.Query(ctx, `SELECT `+leaseSeatColumns+` FROM seats WHERE tenant_id = $1 AND license_key = $2
		ORDER BY activated_at, instance_id`, tenant, key)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanLeaseSeat)
}

// LeaseBasis is what one lease reads, in one round trip: the seat the request proves
// (nil: none), the policy its license follows (nil: the built-in defaults) and the
// tenant's active signing key (nil: none yet).
type LeaseBasis struct {
	Seat   *LeaseSeat
	Policy *Policy
	Key    *LeaseKey
}

// leaseBasisSQL reads a lease's basis: the seat of ($1 tenant, $2 key) holding token hash
// $3 or, without one, the seat of instance $4; the policy of ($5 product, $6 tier), else
// the product's "*"; the tenant's active key. The one row always comes back; what is
// missing is NULL. Each part is its own indexed lookup (a plan per form of the seat's).
const leaseBasisSQL = `SELECT s.instance_id, s.lease_expires_at, s.components, s.live,
		p.product_id, p.tier, p.floating, p.lease_ttl_seconds, p.renew_after_seconds, p.fingerprint_match, p.entitlements, p.updated_at,
		k.kid, k.public_key, k.sealed_private, k.status, k.retire_at
	FROM (SELECT 1) one
	LEFT JOIN LATERAL (SELECT ` + leaseSeatColumns + ` AS live FROM seats
		WHERE tenant_id = $1 AND license_key = $2 AND %s) s ON true
	LEFT JOIN LATERAL (SELECT ` + policyColumns + ` FROM lease_policies
		WHERE tenant_id = $1 AND product_id = $5 AND tier IN ($6, '*') ORDER BY tier = '*' LIMIT 1) p ON true
	LEFT JOIN LATERAL (SELECT ` + leaseKeyColumns + ` FROM lease_keys WHERE tenant_id = $1 AND status = 'active') k ON true`

var (
	leaseBasisByTokenSQL    = fmt.Sprintf(leaseBasisSQL, `token_hash = $3 AND $4::text IS NULL`)
	leaseBasisByInstanceSQL = fmt.Sprintf(leaseBasisSQL, `instance_id = $4 AND $3::bytea IS NULL`)
)

// LeaseBasis reads what a lease of (tenant, key) needs: the seat holding tokenHash (or,
// when tokenHash is nil, the seat of instance), the policy of (productID, tier) and the
// tenant's active key.
func (s *Store) LeaseBasis(ctx context.Context, tenant, key, productID, tier string, tokenHash []byte, instance string) (LeaseBasis, error) {
	sql, instanceArg := leaseBasisByTokenSQL, (*string)(nil)
	if tokenHash == nil {
		sql, instanceArg = leaseBasisByInstanceSQL, &instance
	}
	return scanLeaseBasis(s.db.QueryRow(ctx, sql, tenant, key, tokenHash, instanceArg, productID, tier))
}

// scanLeaseBasis reads a row of leaseBasisSQL's columns, after the leading ones of dest.
func scanLeaseBasis(row pgx.Row, dest ...any) (LeaseBasis, error) {
	var (
		b          LeaseBasis
		seat       LeaseSeat
		seatID     *string
		components []byte
		live       *bool
		p          Policy
		pProduct   *string
		pTier      *string
		pFloating  *bool
		ttl, renew *int32
		pMatch     *string
		pUpdated   *time.Time
		k          LeaseKey
		kid        *string
		kStatus    *string
	)
	err := row.Scan(append(dest, &seatID, &seat.LeaseExpiresAt, &components, &live,
		&pProduct, &pTier, &pFloating, &ttl, &renew, &pMatch, &p.Entitlements, &pUpdated,
		&kid, &k.PublicKey, &k.SealedPrivate, &kStatus, &k.RetireAt)...)
	if err != nil {
		return b, err
	}
	if seatID != nil {
		seat.Instance, seat.Live = *seatID, *live
		if components != nil {
			if err := json.Unmarshal(components, &seat.Components); err != nil {
				return b, err
			}
		}
		b.Seat = &seat
	}
	if pProduct != nil {
		p.ProductID, p.Tier, p.Floating, p.FingerprintMatch, p.UpdatedAt = *pProduct, *pTier, *pFloating, *pMatch, *pUpdated
		p.LeaseTTL, p.RenewAfter = time.Duration(*ttl)*time.Second, time.Duration(*renew)*time.Second
		b.Policy = &p
	}
	if kid != nil {
		k.Kid, k.Status = *kid, *kStatus
		b.Key = &k
	}
	return b, nil
}
