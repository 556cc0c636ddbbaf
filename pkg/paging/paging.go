// Package paging reads the limit and offset query parameters every list route shares
// (list-licenses, list-releases; addendum §6): limit 1-1000, default 50; offset >= 0,
// default 0; anything else is a 400 naming the parameter.
package paging

import (
	"strconv"

	"github.com/keyhouse/keyhouse/pkg/apierr"
)

// DefaultLimit and MaxLimit are api.md's list limits.
const (
	DefaultLimit = 50
	MaxLimit     = 1000
)

// Parse reads limit and offset as sent; "" means the default. They arrive as strings so
// that a malformed value gets this package's message rather than a decoder's.
func Parse(limit, offset string) (int, int, error) {
	l, o := DefaultLimit, 0
	if limit != "" {
		n, err := strconv.Atoi(limit)
		if err != nil || n < 1 || n > MaxLimit {
			return 0, 0, apierr.Invalid("limit must be an integer between 1 and %d", MaxLimit)
		}
		l = n
	}
	if offset != "" {
		n, err := strconv.Atoi(offset)
		if err != nil || n < 0 {
			return 0, 0, apierr.Invalid("offset must be a non-negative integer")
		}
		o = n
	}
	return l, o, nil
}
