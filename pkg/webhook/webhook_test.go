package webhook_test

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/webhook"
)

// receiver is a real HTTP server that records what it received.
type receiver struct {
	*httptest.Server
	hits   atomic.Int32
	bodies chan received
}

type received struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) *receiver {
	t.Helper()
	rc := &receiver{bodies: make(chan received, 16)}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		rc.bodies <- received{r.Header.Clone(), body}
		answer(w, r)
	}))
	t.Cleanup(rc.Close)
	return rc
}

var (
	body    = []byte(`{"id":"evt_1","type":"ping","created_at":"2026-11-25T00:00:00Z","actor":{"type":"system","request_id":null},"data":{}}`)
	secret  = []byte("whsec_current")
	retired = []byte("whsec_retiring")
)

func send(s *webhook.Sender, url string, secrets ...[]byte) webhook.Result {
	return s.Send(context.Background(), webhook.Delivery{URL: url, EventID: "evt_1", Body: body, Secrets: secrets}, time.Now())
}

// A 2xx answer is success; the receiver gets the envelope with the headers the docs name,
// and the signature verifies under the secret.
func TestDeliverySignedAndSucceeds(t *testing.T) {
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	res := send(webhook.NewSender(webhook.SenderOptions{AllowPrivate: true}), rc.URL, secret)
	if !res.Succeeded() || res.StatusCode != 204 || res.Error != "" {
		t.Fatalf("result %+v", res)
	}
	got := <-rc.bodies
	if string(got.body) != string(body) {
		t.Fatalf("body %s", got.body)
	}
	if ct := got.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content type %q", ct)
	}
	if id := got.header.Get("Keyhouse-Event-Id"); id != "evt_1" {
		t.Fatalf("event id %q", id)
	}
	sig := got.header.Get("Keyhouse-Signature")
	if err := webhook.Verify(sig, got.body, secret, webhook.DefaultTolerance, time.Now()); err != nil {
		t.Fatalf("verify %q: %v", sig, err)
	}
	if err := webhook.Verify(sig, append(got.body, ' '), secret, webhook.DefaultTolerance, time.Now()); err == nil {
		t.Fatal("a changed body verified")
	}
	if err := webhook.Verify(sig, got.body, []byte("whsec_other"), webhook.DefaultTolerance, time.Now()); err == nil {
		t.Fatal("another secret verified")
	}
	if err := webhook.Verify(sig, got.body, secret, webhook.DefaultTolerance, time.Now().Add(time.Hour)); !errors.Is(err, webhook.ErrTooOld) {
		t.Fatalf("an hour-old signature: %v", err)
	}
}

// While a roll overlaps, the header carries one v1 per live secret: a receiver holding
// either verifies.
func TestRollOverlapSignsWithBothSecrets(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	h := webhook.Sign(now, body, secret, retired)
	if !strings.HasPrefix(h, "t=1800000000,v1=") || strings.Count(h, ",v1=") != 2 {
		t.Fatalf("header %q", h)
	}
	for _, s := range [][]byte{secret, retired} {
		if err := webhook.Verify(h, body, s, webhook.DefaultTolerance, now); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// Every way a receiver can fail is a failed attempt with a reason, never a success, and
// the reason never quotes the URL (which may carry a token).
func TestFailuresAreDescribed(t *testing.T) {
	// Only the receivers that never answer meet the short timeout; the others get the real
	// one, so a loaded machine cannot turn their failure into a timeout.
	fast := webhook.NewSender(webhook.SenderOptions{AllowPrivate: true, Timeout: 300 * time.Millisecond})
	normal := webhook.NewSender(webhook.SenderOptions{AllowPrivate: true})
	release := make(chan struct{})

	status500 := newReceiver(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) })
	hanging := newReceiver(t, func(w http.ResponseWriter, r *http.Request) { <-release })
	slowBody := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-release
	})
	reset := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		conn.(*net.TCPConn).SetLinger(0)
		conn.Close()
	})
	target := newReceiver(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	redirect := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusTemporaryRedirect)
	})
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()

	// Registered after the receivers, so it runs before they close (cleanups run last
	// first) and the hanging handlers return.
	t.Cleanup(func() { close(release) })

	tlsServer := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
	tlsServer.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is the point
	tlsServer.StartTLS()
	t.Cleanup(tlsServer.Close)

	noDNS := webhook.NewSender(webhook.SenderOptions{AllowPrivate: true, Resolver: &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			return nil, errors.New("no DNS server here")
		},
	}})

	for _, c := range []struct {
		name   string
		sender *webhook.Sender
		url    string
		status int
		err    string
	}{
		{"500", normal, status500.URL + "/hook?token=s3cret", 500, "answered HTTP 500"},
		{"hangs", fast, hanging.URL + "/hook?token=s3cret", 0, "timed out after 300ms"},
		{"answer body never ends", fast, slowBody.URL, 200, "timed out after 300ms"},
		{"resets", normal, reset.URL + "/hook?token=s3cret", 0, "connection reset before an answer"},
		{"redirect", normal, redirect.URL, 307, "redirect not followed"},
		{"down", normal, downURL + "/hook?token=s3cret", 0, "connection refused"},
		{"no such name", noDNS, "http://receiver.keyhouse-test.invalid/hook?token=s3cret", 0, "DNS lookup failed"},
		{"untrusted TLS", normal, tlsServer.URL + "/hook?token=s3cret", 0, "TLS certificate not trusted"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := send(c.sender, c.url, secret)
			if res.Succeeded() || res.StatusCode != c.status || res.Error != c.err {
				t.Fatalf("got status %d error %q, want %d %q", res.StatusCode, res.Error, c.status, c.err)
			}
			if strings.Contains(res.Error, "s3cret") || strings.Contains(res.Error, "127.0.0.1") {
				t.Fatalf("the error quotes the URL: %q", res.Error)
			}
		})
	}
	if target.hits.Load() != 0 {
		t.Fatal("the redirect was followed")
	}
	trusted := webhook.NewSender(webhook.SenderOptions{AllowPrivate: true, RootCAs: poolOf(tlsServer)})
	if res := send(trusted, tlsServer.URL, secret); !res.Succeeded() {
		t.Fatalf("trusted TLS: %+v", res)
	}
}

func poolOf(s *httptest.Server) *x509.CertPool {
	return s.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
}

// stubResolver answers every name with fixed addresses.
type stubResolver []netip.Addr

func (s stubResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	if len(s) == 0 {
		return nil, &net.DNSError{Err: "no such host", IsNotFound: true}
	}
	return s, nil
}

// Hosted mode refuses URLs that are or resolve to non-public addresses at creation.
func TestCheckURL(t *testing.T) {
	ctx := context.Background()
	public := stubResolver{netip.MustParseAddr("93.184.216.34")}
	private := stubResolver{netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("10.1.2.3")}
	const notPublic = "Webhook URL must resolve to a public address"
	for _, c := range []struct {
		url          string
		r            webhook.Resolver
		allowPrivate bool
		want         string
	}{
		{"https://hooks.example.com/x", public, false, ""},
		{"http://93.184.216.34:8080/x", public, false, ""},
		{"http://127.0.0.1/x", public, false, notPublic},
		{"http://127.8.9.10/x", public, false, notPublic},
		{"http://10.0.0.1/x", public, false, notPublic},
		{"http://10.255.255.255/x", public, false, notPublic},
		{"http://172.16.0.1/x", public, false, notPublic},
		{"http://192.168.1.1/x", public, false, notPublic},
		{"http://169.254.169.254/latest/meta-data", public, false, notPublic},
		{"http://[::1]/x", public, false, notPublic},
		{"http://[::ffff:127.0.0.1]/x", public, false, notPublic},
		{"http://[fe80::1]/x", public, false, notPublic},
		{"http://[fd00::1]/x", public, false, notPublic},
		{"http://[ff02::1]/x", public, false, notPublic},
		{"http://224.0.0.1/x", public, false, notPublic},
		{"http://0.0.0.0/x", public, false, notPublic},
		{"http://[::]/x", public, false, notPublic},
		{"http://100.64.0.1/x", public, false, notPublic},
		{"https://rebind.example.com/x", private, false, notPublic},
		{"https://nowhere.example.com/x", stubResolver{}, false, notPublic},
		{"http://localhost:9/x", net.DefaultResolver, false, notPublic},
		{"http://127.0.0.1/x", public, true, ""},
		{"ftp://hooks.example.com/x", public, true, "url must be an http:// or https:// URL"},
		{"hooks.example.com/x", public, true, "url must be an http:// or https:// URL"},
		{"https:///x", public, true, "url must be an http:// or https:// URL"},
		{"https://user:pw@hooks.example.com/x", public, true, "url must not contain credentials"},
		{"https://hooks.example.com/" + strings.Repeat("a", 2048), public, true, "url must be at most 2048 characters"},
	} {
		err := webhook.CheckURL(ctx, c.r, c.url, c.allowPrivate)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%.60s (allow private %v): got %q, want %q", c.url, c.allowPrivate, got, c.want)
		}
	}
}

// In hosted mode the address actually dialed is checked, whatever the name resolved to
// when the endpoint was created: a name that now resolves to loopback (DNS rebinding) and
// a loopback literal are both refused, and the receiver never hears from us.
func TestDialGuardRefusesPrivateAddresses(t *testing.T) {
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	_, port, _ := net.SplitHostPort(rc.Listener.Addr().String())
	hosted := webhook.NewSender(webhook.SenderOptions{})
	for _, url := range []string{
		"http://localhost:" + port + "/x",
		"http://127.0.0.1:" + port + "/x",
		"http://[::ffff:127.0.0.1]:" + port + "/x",
	} {
		// At creation the name looked public.
		if err := webhook.CheckURL(context.Background(), stubResolver{netip.MustParseAddr("93.184.216.34")}, "http://localhost/x", false); err != nil {
			t.Fatal(err)
		}
		res := send(hosted, url, secret)
		if res.Succeeded() || res.Error != "Webhook URL must resolve to a public address" {
			t.Fatalf("%s: %+v", url, res)
		}
	}
	if rc.hits.Load() != 0 {
		t.Fatal("the guard let a connection through")
	}
}

func TestIsPublic(t *testing.T) {
	for addr, want := range map[string]bool{
		"93.184.216.34": true, "2606:2800:220:1::1": true, "1.1.1.1": true,
		"127.0.0.1": false, "10.0.0.1": false, "169.254.169.254": false, "::1": false,
		"fe80::1": false, "fc00::1": false, "ff05::1": false, "255.255.255.255": false,
		"64:ff9b::a00:1": false, "::ffff:10.0.0.1": false,
		// IPv6 forms that embed an IPv4 address a translating network delivers to.
		"::127.0.0.1": false, "::a9fe:a9fe": false, "::ffff:0:7f00:1": false,
		"2002:7f00:1::1": false, "2001:0:4136:e378:8000:63bf:3fff:fdd2": false,
		"fec0::1": false, "2001:4860:4860::8888": true,
	} {
		if got := webhook.IsPublic(netip.MustParseAddr(addr)); got != want {
			t.Errorf("%s: %v", addr, got)
		}
	}
}

// The schedule retries for the whole window, doubling up to the cap, with one last
// attempt at the window's end, then gives up.
func TestScheduleCoversTheWindow(t *testing.T) {
	s := webhook.DefaultSchedule
	first := time.Unix(1_800_000_000, 0)
	now := first
	attempts := 1
	var last time.Duration
	for {
		next, ok := s.Next(attempts, first, now)
		if !ok {
			break
		}
		if !next.After(now) {
			t.Fatalf("attempt %d: next %v not after %v", attempts, next, now)
		}
		last = next.Sub(now)
		if last > time.Duration(float64(s.Max)*(1+s.Jitter)) {
			t.Fatalf("delay %v over the cap", last)
		}
		now = next
		attempts++
	}
	if got := now.Sub(first); got != s.Window {
		t.Fatalf("last attempt %v after the first, want exactly %v", got, s.Window)
	}
	if attempts < 10 || attempts > 25 {
		t.Fatalf("%d attempts over 72 h", attempts)
	}
	if d, _ := s.Next(1, first, first); d.Sub(first) < 24*time.Second || d.Sub(first) > 36*time.Second {
		t.Fatalf("first retry after %v", d.Sub(first))
	}
}
