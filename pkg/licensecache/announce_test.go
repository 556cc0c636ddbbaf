package licensecache

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// A call whose handler announces a key drops it from the caller's cache before the call
// returns, whether the call succeeded or failed (the metadata then rides the trailer).
func TestDropAnnouncedDropsWhatTheAnswerNames(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(stream)
		if err := stream.RecvMsg(&emptypb.Empty{}); err != nil {
			return err
		}
		AnnounceInCall(stream.Context(), "CHANGED")
		if method == "/test.Writes/Fail" {
			return status.Error(codes.Unavailable, "commit in doubt")
		}
		return stream.SendMsg(&emptypb.Empty{})
	}))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	cache, _ := newTestCache(DefaultTTL)
	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(cache.DropAnnounced()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })

	for _, method := range []string{"/test.Writes/Succeed", "/test.Writes/Fail"} {
		for _, key := range []string{"CHANGED", "OTHER"} {
			if _, err := cache.Get(key, func() (int64, error) { return 1, nil }); err != nil {
				t.Fatal(err)
			}
		}
		err := conn.Invoke(context.Background(), method, &emptypb.Empty{}, &emptypb.Empty{})
		if wantFail := method == "/test.Writes/Fail"; (err != nil) != wantFail {
			t.Fatalf("%s: %v", method, err)
		}
		reloaded := map[string]bool{}
		for _, key := range []string{"CHANGED", "OTHER"} {
			if _, err := cache.Get(key, func() (int64, error) { reloaded[key] = true; return 2, nil }); err != nil {
				t.Fatal(err)
			}
		}
		if !reloaded["CHANGED"] || reloaded["OTHER"] {
			t.Fatalf("%s: reloaded %v, want only CHANGED", method, reloaded)
		}
	}
}

// Outside a gRPC call (a background job, a test) announcing does nothing.
func TestAnnounceInCallOutsideACallIsHarmless(t *testing.T) {
	AnnounceInCall(context.Background(), "KEY")
}
