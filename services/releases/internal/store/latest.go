package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Channel names the releases one check-update asks about: a tenant's product (its
// product key), channel and platform.
type Channel struct {
	Tenant, ProductKey, Channel, Platform string
}

// LatestOf is Latest for many channels with one query (check-update's batches): one
// answer per channel, in the order given, nil where nothing is published.
func (s *Store) LatestOf(ctx context.Context, channels []Channel) ([]*Release, error) {
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
