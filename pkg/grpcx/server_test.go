package grpcx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func deadlineIn(t *testing.T, ctx context.Context, def time.Duration, method string) time.Duration {
	t.Helper()
	var left time.Duration
	_, _ = budgetUnary(def)(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, func(ctx context.Context, _ any) (any, error) {
		dl, ok := ctx.Deadline()
		if !ok {
			left = -1
			return nil, nil
		}
		left = time.Until(dl)
		return nil, nil
	})
	return left
}

func TestEveryCallGetsADeadlineShorterThanItsCallers(t *testing.T) {
	if left := deadlineIn(t, context.Background(), 4*time.Second, "/keyhouse.licensing.v1.LicensingService/VerifyLicense"); left < 3*time.Second || left > 4*time.Second {
		t.Fatalf("call without a deadline: %v left, want about the 4s default", left)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	left := deadlineIn(t, ctx, 4*time.Second, "/keyhouse.licensing.v1.LicensingService/VerifyLicense")
	if left > 1850*time.Millisecond || left < time.Second {
		t.Fatalf("caller's 2s deadline became %v, want a margin of ~200ms", left)
	}
	if left := deadlineIn(t, context.Background(), 4*time.Second, "/grpc.health.v1.Health/Watch"); left != -1 {
		t.Fatalf("health watch got a deadline (%v): it is a long-lived stream", left)
	}
}

func TestADatabaseThatDoesNotAnswerIsA503ThatSaysRetry(t *testing.T) {
	// The error pgx returns when the request's deadline fires during a query.
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	<-ctx.Done()
	conn, err := pgx.Connect(ctx, "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	if err == nil {
		conn.Close(context.Background())
		t.Fatal("connected to nothing")
	}
	cases := map[string]struct {
		err  error
		code codes.Code
		msg  string
	}{
		"connect failure":   {err, codes.Unavailable, DatabaseUnavailable},
		"wrapped":           {fmt.Errorf("store: %w", &pgconn.ConnectError{}), codes.Unavailable, DatabaseUnavailable},
		"budget exhausted":  {fmt.Errorf("call: %w", context.DeadlineExceeded), codes.Unavailable, ServiceUnavailable},
		"client hung up":    {context.Canceled, codes.Canceled, "request canceled"},
		"unexpected errors": {errors.New("boom"), codes.Internal, "Internal server error"},
	}
	for name, tc := range cases {
		st := status.Convert(normalize(context.Background(), slog.New(slog.DiscardHandler), "/m", tc.err))
		if st.Code() != tc.code || st.Message() != tc.msg {
			t.Errorf("%s: %v %q, want %v %q", name, st.Code(), st.Message(), tc.code, tc.msg)
		}
	}
}
