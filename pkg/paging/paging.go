// Package paging reads the limit and offset query parameters every list route shares
// (list-licenses, list-releases; addendum §6): limit 1-1000, default 50; offset >= 0,
// default 0; anything else is a 400 naming the parameter.
package paging

import (
	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/input"
)

// DefaultLimit and MaxLimit are api.md's list limits.
const (
	DefaultLimit = 50
	MaxLimit     = 1000
)

// Parse reads limit and offset as sent; "" means the default. They arrive as strings so
// that a malformed value gets this package's message rather than a decoder's. A number is
// digits only (input.Decimal): "+5" is refused as " 5" is ("limit=+5" in a query string
// is " 5"), and "05" is 5.
func Parse(limit, offset string) (int, int, error) {
	l, o := DefaultLimit, 0
	if limit != "" {
		n, ok := input.Decimal(limit)
		if !ok || n < 1 || n > MaxLimit {
			return 0, 0, apierr.Invalid("limit must be an integer between 1 and %d", MaxLimit)
		}
		l = int(n)
	}
	if offset != "" {
		n, ok := input.Decimal(offset)
		if !ok {
			return 0, 0, apierr.Invalid("offset must be a non-negative integer")
		}
		o = int(n)
	}
	return l, o, nil
}
