package console

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// With the services down, a portal page and the console's sign-in say the service is
// unavailable, as the REST API does, and name no internal address: gRPC's own text of a
// failed dial ("dial tcp 10.0.3.7:9102: connect: connection refused") stays out of the
// page.
func TestPagesWithTheServicesDownNameNoInternalAddress(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close() // nothing listens there now
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	h, err := New(Options{Conns: Conns{Licensing: conn, Activations: conn, Releases: conn, Billing: conn, Storefront: conn, Events: conn},
		MultiTenant: true, PublicBaseURL: "https://licenses.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	check := func(what string, status int, body string) {
		t.Helper()
		if status != http.StatusServiceUnavailable || !strings.Contains(body, "Service unavailable, retry") {
			t.Errorf("%s: %d, want 503 saying the service is unavailable:\n%.2000s", what, status, body)
		}
		if strings.Contains(body, addr) || strings.Contains(body, ":"+port) || strings.Contains(body, "dial") {
			t.Errorf("%s: the page names the backend's address:\n%.2000s", what, body)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/portal/29Oa1ZvSecretPortalToken", nil))
	check("portal page", rec.Code, rec.Body.String())

	resp := signIn(t, h, "an-api-key-of-some-tenant")
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	check("console sign-in", resp.StatusCode, string(body))
}
