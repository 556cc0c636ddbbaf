package grpcx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/keyhouse/keyhouse/pkg/apierr"
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
		"budget exhausted":  {fmt.Errorf("call: %w", context.DeadlineExceeded), codes.Unavailable, apierr.UnavailableMessage},
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

// fakePostgres accepts one connection, completes its startup without authentication,
// and answers its first query with end: what a server that goes away under a query does.
func fakePostgres(t *testing.T, end func(*pgproto3.Backend, *net.TCPConn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b := pgproto3.NewBackend(c, c)
		if _, err := b.ReceiveStartupMessage(); err != nil {
			return
		}
		b.Send(&pgproto3.AuthenticationOk{})
		b.Send(&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: []byte{0, 0, 0, 2}})
		b.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		if b.Flush() != nil {
			return
		}
		if _, err := b.Receive(); err != nil {
			return
		}
		end(b, c.(*net.TCPConn))
	}()
	return "postgres://keyhouse@" + l.Addr().String() + "/keyhouse?sslmode=disable&connect_timeout=5"
}

// fatal ends the connection as Postgres does: an ErrorResponse, then the close.
func fatal(code, msg string) func(*pgproto3.Backend, *net.TCPConn) {
	return func(b *pgproto3.Backend, _ *net.TCPConn) {
		b.Send(&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: code, Message: msg})
		_ = b.Flush()
	}
}

// A Postgres that stops, crashes or drops the connection under a query is as unavailable
// as one that cannot be reached: the query's answer is the same 503 to retry, never a 500.
// A stopped or restarted server ends every pooled connection, and the first query on each
// used to answer 500 "Internal server error".
func TestAConnectionThePostgresEndedIsA503ThatSaysRetry(t *testing.T) {
	ends := map[string]func(*pgproto3.Backend, *net.TCPConn){
		"stopped (57P01)":       fatal("57P01", "terminating connection due to administrator command"),
		"crashed (57P02)":       fatal("57P02", "terminating connection because of crash of another server process"),
		"starting up (57P03)":   fatal("57P03", "the database system is starting up"),
		"closed without a word": func(*pgproto3.Backend, *net.TCPConn) {},
		"reset":                 func(_ *pgproto3.Backend, c *net.TCPConn) { _ = c.SetLinger(0) },
	}
	for name, end := range ends {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, fakePostgres(t, end))
		if err != nil {
			t.Fatalf("%s: connect: %v", name, err)
		}
		// With an argument, as the services' queries: the extended protocol, whose read
		// error pgx passes on as it is (an unexpected EOF, a reset).
		var one int
		first := conn.QueryRow(ctx, "SELECT $1::int", 1).Scan(&one)
		_, next := conn.Exec(ctx, "SELECT 1") // on the connection pgx closed after the first
		conn.Close(ctx)
		for what, err := range map[string]error{"the query": first, "the next query": next} {
			if err == nil {
				t.Fatalf("%s: %s succeeded", name, what)
			}
			st := status.Convert(normalize(ctx, slog.New(slog.DiscardHandler), "/m", fmt.Errorf("store: %w", err)))
			if st.Code() != codes.Unavailable || st.Message() != DatabaseUnavailable {
				t.Errorf("%s, %s (%v): %v %q, want %v %q", name, what, err, st.Code(), st.Message(), codes.Unavailable, DatabaseUnavailable)
			}
		}
	}
}

// The SQLSTATEs of a server going away or a failed connection are unavailable; any other
// error of Postgres's (a defect, or a refusal the handler should have turned into its own
// answer), and a broken connection to an HTTP dependency, stay a 500.
func TestOnlyAPostgresGoingAwayIsUnavailable(t *testing.T) {
	for code, want := range map[string]bool{
		"57P01": true, "57P02": true, "57P03": true, "08000": true, "08001": true, "08003": true, "08004": true, "08006": true,
		"08P01": false, "23505": false, "40001": false, "57014": false, "42P01": false,
	} {
		err := fmt.Errorf("store: %w", &pgconn.PgError{Severity: "FATAL", Code: code})
		if got := isDatabaseUnavailable(err); got != want {
			t.Errorf("SQLSTATE %s: unavailable %v, want %v", code, got, want)
		}
	}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	if !isDatabaseUnavailable(fmt.Errorf("store: %w", reset)) {
		t.Error("a connection reset under a query is not unavailable")
	}
	if isDatabaseUnavailable(&url.Error{Op: "Post", URL: "https://api.stripe.com/v1/x", Err: reset}) {
		t.Error("an HTTP dependency's reset counts as the database's")
	}
}
