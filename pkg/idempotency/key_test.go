package idempotency_test

import (
	"context"
	"strings"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A key that cannot be honoured is refused with a 400 naming why; the call must not go
// ahead without one (a retry would then create again).
func TestKeyRefusesAKeyItCannotHonour(t *testing.T) {
	long := strings.Repeat("k", idempotency.MaxKeyLen)
	for _, tc := range []struct {
		name string
		md   metadata.MD
		key  string // when accepted
		err  string // when refused
	}{
		{name: "none", md: metadata.MD{}},
		{name: "ordinary", md: metadata.Pairs(idempotency.Header, "order-1001"), key: "order-1001"},
		{name: "inner spaces kept, outer trimmed", md: metadata.Pairs(idempotency.Header, "  order 1001 "), key: "order 1001"},
		{name: "every printable character", md: metadata.Pairs(idempotency.Header, " !~{}"), key: "!~{}"},
		{name: "at the cap", md: metadata.Pairs(idempotency.Header, long), key: long},
		{name: "over the cap", md: metadata.Pairs(idempotency.Header, long+"k"), err: "Idempotency-Key must be at most 255 characters"},
		{name: "empty", md: metadata.Pairs(idempotency.Header, ""), err: "Idempotency-Key must not be blank"},
		{name: "blank", md: metadata.Pairs(idempotency.Header, "   "), err: "Idempotency-Key must not be blank"},
		{name: "not ASCII, as the gateway forwards it", md: metadata.Pairs(idempotency.BinaryHeader, "ünï"), err: "Idempotency-Key must be printable ASCII"},
		{name: "a no-break space, not trimmed away", md: metadata.Pairs(idempotency.BinaryHeader, "\u00a0"), err: "Idempotency-Key must be printable ASCII"},
		{name: "a tab", md: metadata.Pairs(idempotency.Header, "a\tb"), err: "Idempotency-Key must be printable ASCII"},
		{name: "twice", md: metadata.Pairs(idempotency.Header, "a", idempotency.Header, "b"), err: "Idempotency-Key must be sent once"},
		{name: "twice, one not ASCII", md: metadata.Pairs(idempotency.Header, "a", idempotency.BinaryHeader, "ü"), err: "Idempotency-Key must be sent once"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, err := idempotency.Key(metadata.NewIncomingContext(context.Background(), tc.md))
			if tc.err == "" {
				if err != nil || key != tc.key {
					t.Fatalf("got %q, %v; want %q", key, err, tc.key)
				}
				return
			}
			if st := status.Convert(err); err == nil || st.Code() != codes.InvalidArgument || st.Message() != tc.err {
				t.Fatalf("got %q, %v; want InvalidArgument %q", key, err, tc.err)
			}
		})
	}
}

func TestSentSeesAKeyInEitherForm(t *testing.T) {
	if idempotency.Sent(metadata.MD{}) || idempotency.Sent(metadata.Pairs("authorization", "x")) {
		t.Fatal("a call without a key has one")
	}
	for _, md := range []metadata.MD{metadata.Pairs(idempotency.Header, ""), metadata.Pairs(idempotency.BinaryHeader, "ü")} {
		if !idempotency.Sent(md) {
			t.Fatalf("%v: no key seen", md)
		}
	}
}
