package grpcx

import (
	"bytes"
	"context"
	"crypto/rand"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/auth"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// echoMethod is a stand-in service's only method: it answers the bytes it was sent. Its
// name is outside keyhouse's packages, so the authenticator lets it through.
const echoMethod = "/grpcxtest.Echo/Echo"

var echoService = standIn("grpcxtest.Echo", "Echo", func(in []byte) []byte { return in })

// standIn is a service of one method, service/method, answering answer(the bytes sent).
func standIn(service, method string, answer func([]byte) []byte) grpc.ServiceDesc {
	fullMethod := "/" + service + "/" + method
	return grpc.ServiceDesc{
		ServiceName: service,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: method,
			Handler: func(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
				in := &wrapperspb.BytesValue{}
				if err := dec(in); err != nil {
					return nil, err
				}
				handle := func(context.Context, any) (any, error) { return wrapperspb.Bytes(answer(in.Value)), nil }
				return interceptor(ctx, in, &grpc.UnaryServerInfo{FullMethod: fullMethod}, handle)
			},
		}},
	}
}

// serveStandIn starts a server as every service builds it (NewServer), with authn, and
// register adding its services; it returns the address.
func serveStandIn(t *testing.T, authn *auth.Authenticator, register func(*grpc.Server)) string {
	t.Helper()
	srv := NewServer(slog.New(slog.DiscardHandler), authn, ServerOptions{RequestTimeout: time.Minute})
	register(srv.GRPC)
	srv.Health.SetServingStatus(ServingHealthName, healthpb.HealthCheckResponse_SERVING)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.GRPC.Serve(lis) }()
	t.Cleanup(srv.GRPC.Stop)
	return lis.Addr().String()
}

// The connections between Keyhouse's processes run on fixed flow-control windows
// (streamWindow, connWindow) instead of gRPC's estimate. A message larger than the
// stream's window crosses only through the window updates its receiver sends as it reads;
// several at once on one connection also exceed the connection's window. Each must
// arrive whole, in both directions, through the server and client Keyhouse builds.
func TestMessagesLargerThanTheFlowControlWindowsCrossBothWays(t *testing.T) {
	addr := serveStandIn(t, auth.New(auth.Config{}), func(g *grpc.Server) { g.RegisterService(&echoService, nil) })
	conn, err := Dial("echo", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })

	// 3.5 MiB: over three stream windows, under gRPC's 4 MiB limit on a received message.
	const size = 7 << 19
	const calls = 4 // 14 MiB in flight each way on one connection of a 4 MiB window
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]string, calls)
	for i := range calls {
		wg.Go(func() {
			sent := make([]byte, size)
			_, _ = rand.Read(sent)
			got := &wrapperspb.BytesValue{}
			if err := conn.Invoke(ctx, echoMethod, wrapperspb.Bytes(sent), got); err != nil {
				errs[i] = err.Error()
				return
			}
			if !bytes.Equal(got.Value, sent) {
				errs[i] = "answer differs from what was sent"
			}
		})
	}
	wg.Wait()
	for i, e := range errs {
		if e != "" {
			t.Errorf("call %d of %d bytes: %s", i, size, e)
		}
	}
}
