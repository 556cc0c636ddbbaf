package store

import (
	"context"
)

// GetMany is Get in any tenant (the public routes' lookup) for several keys at once: the
// licenses found, by the key asked with; a key that names no license is left out. The
// keys the cache does not hold are read in one query.
func (s *Store) GetMany(ctx context.Context, keys []string) (map[string]*License, error) {
	if s.cache == nil {
		return getMany(ctx, s, keys)
	}
	return s.cache.GetMany(keys, func(missing []string) (map[string]*License, error) {
		return getMany(ctx, s, missing)
	})
}

func getMany(ctx context.Context, s *Store, keys []string) (map[string]*License, error) {
	hashes := make([][]byte, len(keys))
	byHash := make(map[string]string, len(keys))
	for i, key := range keys {
		hashes[i] = KeyHash(key)
		byHash[string(hashes[i])] = key
	}
	rows, err := s.db.Query(ctx, `SELECT key_hash, `+licenseColumns+` FROM licenses WHERE key_hash = ANY($1)`, hashes)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	found := make(map[string]*License, len(keys))
	for rows.Next() {
		var hash []byte
		l, err := scanLicense(rows, &hash)
		if err != nil {
			return nil, err
		}
		if key, ok := byHash[string(hash)]; ok {
			found[key] = l
		}
	}
	return found, rows.Err()
}
