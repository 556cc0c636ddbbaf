package grpcx

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/metrics"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// servePeer serves a peer that reports SERVING on addr ("127.0.0.1:0" for any port).
func servePeer(t *testing.T, addr string) (*Server, string) {
	t.Helper()
	srv := NewServer(slog.New(slog.DiscardHandler), auth.New(auth.Config{}), ServerOptions{})
	srv.Health.SetServingStatus(ServingHealthName, healthpb.HealthCheckResponse_SERVING)
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.GRPC.Serve(lis) }()
	t.Cleanup(srv.GRPC.Stop)
	return srv, lis.Addr().String()
}

// A restarted peer is reachable again only once the caller's connection has left
// transient failure, which it does on its own backoff schedule: keyhouse_peer_reachable
// follows that state (what a test harness waits on after a restart, and what an operator
// sees while a gateway answers a service's routes 503), not the peer's own health.
func TestPeerReachableFollowsTheConnectionThroughARestartAndADrain(t *testing.T) {
	srv, addr := servePeer(t, "127.0.0.1:0")
	conn, err := Dial("restarting-peer", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	reachable := metrics.PeerReachable.WithLabelValues("restarting-peer")
	health := healthpb.NewHealthClient(conn)
	// call makes a call without WaitForReady, as the gateway's routes do.
	call := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	await := func(what string, want float64) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); testutil.ToFloat64(reachable) != want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: keyhouse_peer_reachable still %v, want %v", what, testutil.ToFloat64(reachable), want)
			}
		}
	}

	if err := call(); err != nil {
		t.Fatal(err)
	}
	await("connected", 1)

	srv.GRPC.Stop()
	await("the peer stopped", 0)
	if err := call(); status.Code(err) != codes.Unavailable {
		t.Fatalf("a call while unreachable: %v, want Unavailable", err)
	}

	srv, _ = servePeer(t, addr)
	await("the peer back on its address", 1)
	if err := call(); err != nil {
		t.Fatalf("a call once reachable again: %v", err)
	}

	// A peer that is up but not SERVING (draining, its database gone) takes no calls either.
	srv.Health.SetServingStatus(ServingHealthName, healthpb.HealthCheckResponse_NOT_SERVING)
	await("the peer draining", 0)
	srv.Health.SetServingStatus(ServingHealthName, healthpb.HealthCheckResponse_SERVING)
	await("the peer serving again", 1)
}

// A peer this process has not called yet is not taken as reachable on trust: with
// licensing killed before billing ever called it, billing's keyhouse_peer_reachable read
// 1 (an idle connection). The connection is tried, and a peer nobody answers for is 0
// without a call.
func TestAPeerNeverCalledAndNotThereIsUnreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close() // nothing listens there
	conn, err := Dial("never-called-peer", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	reachable := metrics.PeerReachable.WithLabelValues("never-called-peer")
	// The gauge is 0 before it is first set too: wait for the connection's failure.
	for deadline := time.Now().Add(10 * time.Second); testutil.ToFloat64(reachable) != 0 || conn.GetState() != connectivity.TransientFailure; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("keyhouse_peer_reachable %v (connection %v) for a peer nothing answers for and never called, want 0 (transient failure)", testutil.ToFloat64(reachable), conn.GetState())
		}
	}
}
