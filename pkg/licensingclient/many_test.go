package licensingclient_test

import (
	"context"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/grpcx/grpcxtest"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
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
	// Asked while serving a call, as a batch call's items are: the answer names each
	// found key's tenant for the gateway in one header write.
	call, stream := grpcxtest.Call(context.Background(), "/keyhouse.activations.v1.ActivationsService/ChangeSeatsBatch")
	found, err := c.Licenses(call, keys)
	if err != nil {
		t.Fatal(err)
	}
	header, writes := stream.Header()
	named := map[string]string{}
	licensecache.Tenants(header, func(key, tenant string) { named[key] = tenant })
	if writes != 1 || len(named) != 3 {
		t.Errorf("%d header writes naming %v; want one naming the 3 keys found", writes, named)
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
