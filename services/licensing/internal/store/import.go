package store

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"time"

	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/license"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
)

// ImportOutcome is what became of one license of an import.
type ImportOutcome int

const (
	// Imported: the license is new and was inserted.
	Imported ImportOutcome = iota
	// Unchanged: the tenant already has the key with the same terms.
	Unchanged
	// Conflict: the key exists with other terms, or in another tenant.
	Conflict
)

// ErrImportRaced: a concurrent import inserted one of the keys first; nothing of this
// one was applied, and running it again sees that key.
var ErrImportRaced = errors.New("a concurrent import inserted the same key")

// Existing reads the rows of the given keys, of any tenant, keyed by key.
func (t *pgTx) Existing(ctx context.Context, keys []string) (map[string]*License, error) {
	hashes := make([][]byte, len(keys))
	for i, k := range keys {
		hashes[i] = KeyHash(k)
	}
	rows, err := t.tx.Query(ctx, `SELECT `+licenseColumns+` FROM licenses WHERE key_hash = ANY($1) FOR UPDATE`, hashes)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]*License{}
	for rows.Next() {
		l, err := scanLicense(rows)
		if err != nil {
			return nil, err
		}
		out[l.Key] = l
	}
	return out, rows.Err()
}

// InsertImported stores imported licenses as given (issued_at, status and revoked_at
// included) in one statement. It is the one insert path of an import, so whatever must
// accompany a new license (its event) is added here once.
func (t *pgTx) InsertImported(ctx context.Context, ls []*License) error {
	if len(ls) == 0 {
		return nil
	}
	n := len(ls)
	var (
		hashes    = make([][]byte, n)
		keys      = make([]string, n)
		tenants   = make([]string, n)
		tiers     = make([]string, n)
		products  = make([]string, n)
		issuedTo  = make([]string, n)
		issuedAt  = make([]time.Time, n)
		expiresAt = make([]*time.Time, n)
		statuses  = make([]string, n)
		limits    = make([]string, n)
		caps      = make([]*int32, n)
		revokedAt = make([]*time.Time, n)
		notes     = make([]*string, n)
	)
	for i, l := range ls {
		hashes[i], keys[i], tenants[i], tiers[i], products[i], issuedTo[i] =
			KeyHash(l.Key), l.Key, l.TenantID, l.Tier, l.ProductID, l.IssuedTo
		issuedAt[i], expiresAt[i], statuses[i], caps[i], revokedAt[i], notes[i] =
			l.IssuedAt, l.ExpiresAt, l.Status, l.MaxActivations, l.RevokedAt, l.Notes
		b, err := json.Marshal(l.Limits)
		if err != nil {
			return err
		}
		if l.Limits == nil {
			b = []byte("{}")
		}
		limits[i] = string(b)
	}
	// ON CONFLICT: a concurrent import may have inserted one of these keys since Existing
	// looked; the caller then runs the whole import again (ErrImportRaced).
	tag, err := t.tx.Exec(ctx, `INSERT INTO licenses (key_hash, key, tenant_id, tier, product_id, issued_to,
		issued_at, expires_at, status, limits, max_activations, revoked_at, notes)
		SELECT h, k, tn, tr, p, it, ia, ea, st, li::jsonb, ma, ra, nt FROM unnest($1::bytea[], $2::text[], $3::text[],
			$4::text[], $5::text[], $6::text[], $7::timestamptz[], $8::timestamptz[], $9::text[], $10::text[],
			$11::int[], $12::timestamptz[], $13::text[]) AS t(h, k, tn, tr, p, it, ia, ea, st, li, ma, ra, nt)
		ON CONFLICT (key_hash) DO NOTHING`,
		hashes, keys, tenants, tiers, products, issuedTo, issuedAt, expiresAt, statuses, limits, caps, revokedAt, notes)
	if err != nil {
		return err
	}
	if int(tag.RowsAffected()) != n {
		return ErrImportRaced
	}
	return t.emit(importEvents(ls)...)
}

// importEvents are the events of imported licenses, in this transaction (the spine's
// post-commit path also drops a key that was looked up, and found missing, before it was
// imported): one license.issued per license, and right after it license.revoked for one
// imported revoked, so that a consumer of the events reaches the state the license is in
// as it would for one issued and then revoked here (license.issued carries no status).
func importEvents(ls []*License) []*eventsv1.Event {
	evs := make([]*eventsv1.Event, 0, len(ls))
	for _, l := range ls {
		evs = append(evs, events.LicenseIssued(l.TenantID, l.Key, l.ProductID, l.Tier, l.IssuedTo, l.ExpiresAt, l.MaxActivations, l.Limits))
		if l.Status == license.StatusRevoked {
			evs = append(evs, events.LicenseRevoked(l.TenantID, l.Key, l.ProductID))
		}
	}
	return evs
}

// SameTerms says whether an existing row is the license an import describes, so that
// importing it again is "unchanged". revoked_at is the import's own time and not compared,
// nor is issued_at when the import did not give one (issued false).
func SameTerms(have, want *License, issued bool) bool {
	return have.TenantID == want.TenantID && have.Tier == want.Tier && have.ProductID == want.ProductID &&
		have.IssuedTo == want.IssuedTo && (!issued || have.IssuedAt.Equal(want.IssuedAt)) &&
		sameTime(have.ExpiresAt, want.ExpiresAt) && have.Status == want.Status &&
		maps.Equal(have.Limits, want.Limits) && sameCap(have.MaxActivations, want.MaxActivations) &&
		sameText(have.Notes, want.Notes)
}

// HoldsQuota says whether the license counts against the issuance quota (active and not
// expired, as CountActive counts).
func HoldsQuota(l *License, now time.Time) bool {
	return l.Status == license.StatusActive && !license.Expired(l.ExpiresAt, now)
}

func sameTime(a, b *time.Time) bool { return (a == nil) == (b == nil) && (a == nil || a.Equal(*b)) }
func sameCap(a, b *int32) bool      { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
func sameText(a, b *string) bool    { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
