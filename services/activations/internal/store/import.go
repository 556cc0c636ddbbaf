package store

import (
	"context"
)

// ImportUsage writes the starting totals of imported licenses (key → metric → total) in
// one statement. A metric that already has a row keeps it: importing the same licenses
// again changes nothing, and what track-usage counted since is never rewound. Returns
// how many totals were written.
func (s *Store) ImportUsage(ctx context.Context, tenant string, usage map[string]map[string]int64) (int, error) {
	var keys, metrics []string
	var totals []int64
	for key, m := range usage {
		for metric, used := range m {
			keys, metrics, totals = append(keys, key), append(metrics, metric), append(totals, used)
		}
	}
	if len(keys) == 0 {
		return 0, nil
	}
	tag, err := s.db.Exec(ctx, `INSERT INTO usage (tenant_id, license_key, metric, used, version)
		SELECT $1, k, m, u, nextval('usage_version') FROM unnest($2::text[], $3::text[], $4::bigint[]) AS t(k, m, u)
		ON CONFLICT (tenant_id, license_key, metric) DO NOTHING`, tenant, keys, metrics, totals)
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}
