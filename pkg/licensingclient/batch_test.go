package licensingclient_test

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/license"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// batchLicensing serves GetLicenses: a key "K…" is a license of tenant t1 with that key,
// anything else unknown. Every call waits for release (when hold is set); the keys of
// each call are recorded.
type batchLicensing struct {
	fakeLicensing
	hold    bool
	release chan struct{}
	arrived chan struct{}

	mu    sync.Mutex
	calls [][]string
}

func (b *batchLicensing) GetLicenses(ctx context.Context, req *licensingv1.GetLicensesRequest) (*licensingv1.GetLicensesResponse, error) {
	b.mu.Lock()
	b.calls = append(b.calls, req.GetKeys())
	b.mu.Unlock()
	b.arrived <- struct{}{}
	if b.hold {
		select {
		case <-b.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	resp := &licensingv1.GetLicensesResponse{}
	for _, key := range req.GetKeys() {
		answer := &licensingv1.GetLicenseResponse{}
		if len(key) > 1 && key[0] == 'K' {
			answer.License = &licensingv1.License{Key: key, TenantId: "t1", Status: license.StatusActive}
		}
		resp.Results = append(resp.Results, answer)
	}
	return resp, nil
}

func (b *batchLicensing) sizes() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var n []int
	for _, c := range b.calls {
		n = append(n, len(c))
	}
	return n
}

// Lookups in any tenant that arrive while calls are out go to licensing together; each
// gets its own license, or license.ErrNotFound for its own unknown key.
func TestLicenseLookupsGoTogether(t *testing.T) {
	t.Parallel()
	lis := listen(t)
	f := &batchLicensing{hold: true, release: make(chan struct{}), arrived: make(chan struct{}, 100)}
	serveBatch(t, lis, f)
	c := client(t, lis.Addr().String())
	type answer struct {
		key string
		l   *licensingv1.License
		err error
	}
	answers := make(chan answer, 100)
	ask := func(key string) {
		go func() {
			l, err := c.License(context.Background(), "", key)
			answers <- answer{key, l, err}
		}()
	}
	// One call out, held; what arrives meanwhile waits for it, then goes in one call.
	ask("KFIRST0")
	<-f.arrived
	const queued = 30
	for i := range queued {
		if i%3 == 0 {
			ask("UNKNOWN" + strconv.Itoa(i))
		} else {
			ask("K" + strconv.Itoa(i))
		}
	}
	for c.QueuedLookups() != queued {
		time.Sleep(time.Millisecond)
	}
	close(f.release)
	for range queued + 1 {
		a := <-answers
		if a.key[0] == 'U' {
			wantStatus(t, a.err, codes.NotFound, "License key not found", false)
			continue
		}
		if a.err != nil || a.l.GetKey() != a.key {
			t.Errorf("%s: %v, %v", a.key, a.l, a.err)
		}
	}
	if sizes := f.sizes(); len(sizes) != 2 || sizes[1] != queued {
		t.Errorf("calls of %v keys: want the first alone, then the %d that queued in one", sizes, queued)
	}
}

// A caller that leaves while its batch is out is answered as its call alone
// would be (503 "Licensing service unavailable, retry") without waiting for the batch,
// which still answers the others.
func TestALookupsCancellationIsItsOwn(t *testing.T) {
	t.Parallel()
	lis := listen(t)
	f := &batchLicensing{hold: true, release: make(chan struct{}), arrived: make(chan struct{}, 100)}
	serveBatch(t, lis, f)
	c := client(t, lis.Addr().String())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.License(ctx, "", "KLEAVES")
		done <- err
	}()
	<-f.arrived
	stayed := make(chan error, 1)
	go func() {
		_, err := c.License(context.Background(), "", "KSTAYS")
		stayed <- err
	}()
	cancel()
	select {
	case err := <-done:
		wantStatus(t, err, codes.Unavailable, "Licensing service unavailable, retry", true)
	case <-time.After(10 * time.Second):
		t.Fatal("the caller that left still waits for its batch")
	}
	close(f.release)
	if err := <-stayed; err != nil {
		t.Fatal(err)
	}
}

func serveBatch(t *testing.T, lis net.Listener, f *batchLicensing) {
	t.Helper()
	g := grpc.NewServer()
	licensingv1.RegisterLicensingInternalServiceServer(g, f)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
}
