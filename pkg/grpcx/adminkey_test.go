package grpcx

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	accountsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

type entitlements struct {
	accountsv1.UnimplementedAccountsServiceServer
}

func (entitlements) GetEntitlements(context.Context, *accountsv1.GetEntitlementsRequest) (*accountsv1.GetEntitlementsResponse, error) {
	return &accountsv1.GetEntitlementsResponse{SubscriptionActive: true}, nil
}

// servePeerWithKey serves an internal method (GetEntitlements, ACCESS_INTERNAL) behind an
// authenticator that accepts adminKey only.
func servePeerWithKey(t *testing.T, adminKey string) string {
	t.Helper()
	return serveStandIn(t, auth.New(auth.Config{AdminKey: adminKey}), func(g *grpc.Server) { accountsv1.RegisterAccountsServiceServer(g, entitlements{}) })
}

// lockedBuffer is a log sink the server's goroutines and the test may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A peer still on the old admin key, called by a process already on the new one (a
// rolling restart onto a new ADMIN_API_KEY): without ADMIN_API_KEY_PREVIOUS the call is the
// peer's 503, as before, but the caller's log says what happened (the admin key refused,
// Unauthenticated), not only Unavailable; with it, the call is made again with the previous
// key and succeeds.
func TestAPeerThatRefusesTheAdminKeyIsLoggedAsSuchAndThePreviousKeyIsPresented(t *testing.T) {
	addr := servePeerWithKey(t, "old-admin-key")
	var logs lockedBuffer
	was := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(was) })

	call := func(opts ...grpc.DialOption) error {
		conn, err := Dial("billing", addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		rpc := accountsv1.NewAccountsServiceClient(conn)
		_, err = Call(context.Background(), Peer{Name: "Billing", AdminKey: "new-admin-key"}, "", func(ctx context.Context, o ...grpc.CallOption) (*accountsv1.GetEntitlementsResponse, error) {
			return rpc.GetEntitlements(ctx, &accountsv1.GetEntitlementsRequest{}, o...)
		})
		return err
	}

	err := call()
	if !apierr.Is(err, codes.Unavailable) || err.Error() != "Billing service unavailable, retry" {
		t.Fatalf("without the previous key: %v, want the peer's 503", err)
	}
	line := logs.String()
	for _, want := range []string{`"level":"ERROR"`, `internal call refused: Billing does not accept this process's admin key`, `"code":"Unauthenticated"`, `ADMIN_API_KEY_PREVIOUS`} {
		if !strings.Contains(line, want) {
			t.Errorf("the refusal's log line lacks %s:\n%s", want, line)
		}
	}
	for _, key := range []string{"old-admin-key", "new-admin-key"} {
		if strings.Contains(line, key) {
			t.Errorf("the log line holds a key:\n%s", line)
		}
	}

	if err := call(WithPreviousAdminKey("old-admin-key")); err != nil {
		t.Fatalf("with the previous key: %v", err)
	}
	if err := call(WithPreviousAdminKey("another-key")); !apierr.Is(err, codes.Unavailable) {
		t.Fatalf("with a previous key the peer does not know either: %v", err)
	}
}
