package licensingclient_test

import (
	"context"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/license"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Licenses asks licensing once for all of a batch's keys (each named once):
// the found ones by canonical key, the unknown ones absent; an outage is the error each
// key's License would have failed with.
func TestLicensesLooksUpABatchsKeysInOneCall(t *testing.T) {
	t.Parallel()
	lis := listen(t)
	f := &batchLicensing{release: make(chan struct{}), arrived: make(chan struct{}, 100)}
	serveBatch(t, lis, f)
	c := client(t, lis.Addr().String())
	keys := []string{"K1", "UNKNOWN", "K2", "K1", "K3"}
	found, err := c.Licenses(context.Background(), keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"K1", "K2", "K3"} {
		if l := found[license.CanonicalKey(key)]; l.GetKey() != license.CanonicalKey(key) {
			t.Errorf("%s: %v", key, l)
		}
	}
	if l, ok := found[license.CanonicalKey("UNKNOWN")]; ok || len(found) != 3 {
		t.Errorf("unknown key answered %v; %d found, want 3", l, len(found))
	}
	if sizes := f.sizes(); len(sizes) != 1 || sizes[0] != 4 {
		t.Errorf("calls of %v keys: want one call of the 4 distinct keys", sizes)
	}

	lis = listen(t)
	g := grpc.NewServer()
	licensingv1.RegisterLicensingInternalServiceServer(g, &failingBatch{err: status.Error(codes.Unavailable, "connection refused")})
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	_, err = client(t, lis.Addr().String()).Licenses(context.Background(), keys)
	wantStatus(t, err, codes.Unavailable, "Licensing service unavailable, retry", true)
}

// failingBatch is a licensing whose GetLicenses fails with its err.
type failingBatch struct {
	licensingv1.UnimplementedLicensingInternalServiceServer
	err error
}

func (f *failingBatch) GetLicenses(context.Context, *licensingv1.GetLicensesRequest) (*licensingv1.GetLicensesResponse, error) {
	return nil, f.err
}
