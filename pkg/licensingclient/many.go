package licensingclient

import (
	"context"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/grpcx"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxLookupKeys is licensing's bound on the keys of one GetLicenses call.
const maxLookupKeys = 256

// Licenses is License in any tenant (the public routes) for several keys at once, for
// a batch call's items: the keys the cache holds are answered from it, the others are
// asked of licensing in one GetLicenses call (per 256 keys) rather than one call each.
// The answer is by canonical key (license.CanonicalKey); an unknown key is absent from
// it; each license found is named with its tenant in the answer of the call ctx serves,
// as License does. An error is the whole lookup's, the one each key's License would have
// failed with (503 "Licensing service unavailable, retry"). Callers must not modify the
// licenses.
func (c *Client) Licenses(ctx context.Context, keys []string) (map[string]*licensingv1.License, error) {
	canonical := make([]string, len(keys))
	for i, k := range keys {
		canonical[i] = license.CanonicalKey(k)
	}
	found, err := c.licenses.GetMany(canonical, func(missing []string) (map[string]*licensingv1.License, error) {
		return c.lookUp(ctx, missing)
	})
	named := make([]string, 0, 2*len(found))
	for _, l := range found {
		named = append(named, l.GetKey(), l.GetTenantId())
	}
	licensecache.AnnounceTenant(ctx, named...)
	return found, err
}

// lookUp asks licensing for the licenses of keys (canonical, distinct), in any tenant.
func (c *Client) lookUp(ctx context.Context, keys []string) (map[string]*licensingv1.License, error) {
	found := make(map[string]*licensingv1.License, len(keys))
	for start := 0; start < len(keys); start += maxLookupKeys {
		chunk := keys[start:min(start+maxLookupKeys, len(keys))]
		resp, err := grpcx.Call(ctx, c.peer, "", func(ctx context.Context, o ...grpc.CallOption) (*licensingv1.GetLicensesResponse, error) {
			return c.rpc.GetLicenses(ctx, &licensingv1.GetLicensesRequest{Keys: chunk}, o...)
		}, codes.Unimplemented)
		if apierr.Is(err, codes.Unimplemented) {
			// A licensing from before GetLicenses: one call per key.
			if err := c.lookUpEach(ctx, chunk, found); err != nil {
				return nil, err
			}
			continue
		}
		if err == nil && len(resp.GetResults()) != len(chunk) {
			err = c.peer.Downstream(status.Errorf(codes.Internal, "GetLicenses: %d answers for %d keys", len(resp.GetResults()), len(chunk)))
		}
		if err != nil {
			return nil, err
		}
		for i, r := range resp.GetResults() {
			if l := r.GetLicense(); l != nil {
				found[chunk[i]] = l
			}
		}
	}
	return found, nil
}

func (c *Client) lookUpEach(ctx context.Context, keys []string, found map[string]*licensingv1.License) error {
	for _, key := range keys {
		l, err := c.license(ctx, "", key)
		switch {
		case apierr.Is(err, codes.NotFound):
		case err != nil:
			return err
		default:
			found[key] = l
		}
	}
	return nil
}
