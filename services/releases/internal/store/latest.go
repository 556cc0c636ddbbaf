package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
)

// Channel names the releases one check-update asks about: a tenant's product (its
// product key), channel and platform.
type Channel struct {
	Tenant, ProductKey, Channel, Platform string
}

// key is the channel's entry in the cache of latest releases. None of the four holds a
// NUL (Postgres text cannot; check-update asks nothing with one), so it names one channel.
func (c Channel) key() string {
	return c.Tenant + "\x00" + c.ProductKey + "\x00" + c.Channel + "\x00" + c.Platform
}

// LatestCache is a cache of the latest published release of each channel asked. Only
// channels that have one are kept, so its entries are bounded by the releases registered,
// not by what clients ask (a channel or platform name is theirs to choose). It is correct
// only with its invalidation: every release change empties it, in the process that made
// it before that change is answered (ClearOnReleaseChange, the spine's local step) and in
// every other over NATS (its ClearOn of license.ReleasesChangedSubject, with
// pkg/licensecache's bound when a message is lost).
type LatestCache = licensecache.Cache[*Release]

// ClearOnReleaseChange is the spine option that empties c when this process commits a
// release change (or a tenant purge announces one), before the change is answered.
func ClearOnReleaseChange(c *LatestCache) events.Option {
	return events.WithLocal(func(ev *eventsv1.Event) {
		if events.ChangedReleases(ev) {
			c.Clear()
		}
	})
}

// WithLatestCache makes Latest and LatestOf answer from c while it holds the channel
// (nil: always from Postgres). The releases it returns are shared: callers must not
// modify them.
func (s *Store) WithLatestCache(c *LatestCache) *Store {
	s.latest = c
	return s
}

// Latest returns the published release of the product/channel/platform with the highest
// precedence, the most recently registered among equals; nil when there is none. It is
// the first entry of the releases_latest index, however many releases the channel holds.
func (s *Store) Latest(ctx context.Context, tenant, productKey, channel, platform string) (*Release, error) {
	c := Channel{Tenant: tenant, ProductKey: productKey, Channel: channel, Platform: platform}
	return s.latest.GetUntil(c.key(), "", func() (*Release, time.Time, error) {
		r, err := s.readLatest(ctx, c)
		if r == nil {
			// Only channels with a published release are kept (see LatestCache).
			return nil, licensecache.NotKept, err
		}
		return r, time.Time{}, err
	})
}

func (s *Store) readLatest(ctx context.Context, c Channel) (*Release, error) {
	r, err := scan(s.db.QueryRow(ctx, `SELECT `+columns+` FROM releases
		WHERE tenant_id = $1 AND product_key = $2 AND channel = $3 AND platform = $4 AND status = 'published'
		ORDER BY precedence DESC, id DESC LIMIT 1`, c.Tenant, c.ProductKey, c.Channel, c.Platform))
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	return r, err
}

// LatestOf is Latest for many channels (check-update's batches): one answer per channel,
// in the order given, nil where nothing is published. The channels the cache lacks are
// read with one query, each channel once however many times it is asked.
func (s *Store) LatestOf(ctx context.Context, channels []Channel) ([]*Release, error) {
	keys := make([]string, len(channels))
	byKey := make(map[string]Channel, len(channels))
	for i, c := range channels {
		keys[i] = c.key()
		byKey[keys[i]] = c
	}
	found, err := s.latest.GetMany(keys, func(missing []string) (map[string]*Release, error) {
		asked := make([]Channel, len(missing))
		for i, k := range missing {
			asked[i] = byKey[k]
		}
		latest, err := s.readLatestOf(ctx, asked)
		if err != nil {
			return nil, err
		}
		// A channel without a published release is left out: answered nil, not kept.
		out := make(map[string]*Release, len(missing))
		for i, k := range missing {
			if latest[i] != nil {
				out[k] = latest[i]
			}
		}
		return out, nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]*Release, len(channels))
	for i, k := range keys {
		out[i] = found[k]
	}
	return out, nil
}

// readLatestOf is readLatest for each channel with one query.
func (s *Store) readLatestOf(ctx context.Context, channels []Channel) ([]*Release, error) {
	tenants, products, names, platforms := make([]string, len(channels)), make([]string, len(channels)), make([]string, len(channels)), make([]string, len(channels))
	for i, c := range channels {
		tenants[i], products[i], names[i], platforms[i] = c.Tenant, c.ProductKey, c.Channel, c.Platform
	}
	// Latest's query for each asked channel (the same index walk, LIMIT 1); the asked
	// columns are named apart from the releases' own so that columns reads the release's.
	rows, err := s.db.Query(ctx, `SELECT q.i, `+columns+`
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS q(q_tenant, q_product, q_channel, q_platform, i)
		CROSS JOIN LATERAL (SELECT `+columns+` FROM releases
			WHERE tenant_id = q.q_tenant AND product_key = q.q_product AND channel = q.q_channel AND platform = q.q_platform AND status = 'published'
			ORDER BY precedence DESC, id DESC LIMIT 1) latest`, tenants, products, names, platforms)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]*Release, len(channels))
	for rows.Next() {
		var i int64
		r, err := scan(indexedRow{rows, &i})
		if err != nil {
			return nil, err
		}
		out[i-1] = r
	}
	return out, rows.Err()
}

// indexedRow reads a row's first column into i, the rest as the row a scan reads.
type indexedRow struct {
	pgx.Row
	i *int64
}

func (r indexedRow) Scan(dest ...any) error { return r.Row.Scan(append([]any{r.i}, dest...)...) }
