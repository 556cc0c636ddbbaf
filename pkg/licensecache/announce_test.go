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
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A call whose handler announces a key drops it from the caller's cache before the call
// returns, whether the call succeeded or failed (the metadata then rides the trailer),
// whatever bytes the key holds: a control character or invalid UTF-8 in a plain metadata
// value made the answer itself fail (a NotFound arrived as an Internal error, a 500).
func TestDropAnnouncedDropsWhatTheAnswerNames(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(stream)
		var key wrapperspb.BytesValue
		if err := stream.RecvMsg(&key); err != nil {
			return err
		}
		AnnounceInCall(stream.Context(), string(key.Value))
		if method == "/test.Writes/Fail" {
			return status.Error(codes.NotFound, "License key not found")
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

	for _, changed := range []string{"CHANGED", "x\n", "x\x00", "\r", "\x01", "\x1f", "\x7f", "\xff\xfe", "ключ"} {
		for _, method := range []string{"/test.Writes/Succeed", "/test.Writes/Fail"} {
			for _, key := range []string{changed, "OTHER"} {
				if _, err := cache.Get(key, func() (int64, error) { return 1, nil }); err != nil {
					t.Fatal(err)
				}
			}
			err := conn.Invoke(context.Background(), method, wrapperspb.Bytes([]byte(changed)), &emptypb.Empty{})
			if method == "/test.Writes/Fail" && status.Code(err) != codes.NotFound || method != "/test.Writes/Fail" && err != nil {
				t.Fatalf("%s announcing %q: %v", method, changed, err)
			}
			reloaded := map[string]bool{}
			for _, key := range []string{changed, "OTHER"} {
				if _, err := cache.Get(key, func() (int64, error) { reloaded[key] = true; return 2, nil }); err != nil {
					t.Fatal(err)
				}
			}
			if !reloaded[changed] || reloaded["OTHER"] {
				t.Fatalf("%s announcing %q: reloaded %v, want only that key", method, changed, reloaded)
			}
		}
	}
}

// Outside a gRPC call (a background job, a test) announcing does nothing.
func TestAnnounceInCallOutsideACallIsHarmless(t *testing.T) {
	AnnounceInCall(context.Background(), "KEY")
}
