package admission

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/gateway/internal/edge"
)

const keyA = "ABCD-EFGH-JKMN-PQRS-TVWX-YZ01-2345"

// Whatever the body, the share is the key's tenant's when the key can be read, and the
// next handler reads exactly the bytes the client sent.
func TestTheShareComesFromTheBodyAndTheBodyReachesTheHandlerWhole(t *testing.T) {
	book := NewTenants()
	book.Learn(keyA, "a")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`{"key":"` + keyA + `"}`))
	_ = zw.Close()
	cases := []struct {
		name, body string
		length     int64 // -1: chunked; 0: the body's length
		encoding   string
		share      string
	}{
		{"plain", `{"key":"` + keyA + `"}`, 0, "", "tenant:a"},
		{"plain, key after other members", `{ "instance_id" : "i-1", "key":"` + keyA + `" }`, 0, "", "tenant:a"},
		{"another spelling of the key", `{"key":"abcdefghjkmnpqrstvwxyz012345"}`, 0, "", "tenant:a"},
		{"a number before the key", `{"amount":5,"key":"` + keyA + `"}`, 0, "", "tenant:a"},
		{"an escaped key", `{"key":"ABCD-EFGH-JKMN-PQRS-TVWX-YZ01-234\u0035"}`, 0, "", "tenant:a"},
		{"chunked", `{"key":"` + keyA + `"}`, -1, "", "tenant:a"},
		{"unknown key", `{"key":"nobody's"}`, 0, "", UnknownKeys},
		{"no key", `{"instance_id":"i-1"}`, 0, "", NoKey},
		{"not JSON", `key=` + keyA, 0, "", NoKey},
		{"gzip: not read into", gz.String(), 0, "gzip", NoKey},
		{"one byte", `{`, 0, "", NoKey},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/v1/verify-license", strings.NewReader(c.body))
			switch c.length {
			case -1:
				r.ContentLength = -1
			}
			if c.encoding != "" {
				r.Header.Set("Content-Encoding", c.encoding)
			}
			if got := book.Of(r); got != c.share {
				t.Errorf("share %q; want %q", got, c.share)
			}
			if got, err := io.ReadAll(r.Body); err != nil || string(got) != c.body {
				t.Errorf("the handler read %q (%v); the client sent %q", got, err, c.body)
			}
		})
	}
}

// A body shorter than its Content-Length: the handler gets what came, then the error.
func TestAShortBodyReachesTheHandlerWithItsError(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/v1/verify-license", strings.NewReader(`{"key":"K"`))
	r.ContentLength = 100
	if got := NewTenants().Of(r); got != NoKey {
		t.Fatalf("share %q", got)
	}
	got, err := io.ReadAll(r.Body)
	if string(got) != `{"key":"K"` || err != io.ErrUnexpectedEOF {
		t.Fatalf("the handler read %q, %v", got, err)
	}
}

// countingBody counts what is read of it.
type countingBody struct {
	io.Reader
	read int
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	b.read += n
	return n, err
}
func (b *countingBody) Close() error { return nil }

// A refusal reads the body short of its end (net/http then discards the last byte
// without the background read a handler that reaches the end starts).
func TestARefusalDoesNotReadTheBodyToItsEnd(t *testing.T) {
	lim := strictLimiter(1)
	hold, _ := lim.Acquire(UnknownKeys)
	defer hold(time.Millisecond)
	h := Middleware(Options{Limiter: lim, Tenants: NewTenants(), Refuse: edge.WriteOverloaded}, http.NotFoundHandler())
	body := `{"key":"` + keyA + `"}`
	cb := &countingBody{Reader: strings.NewReader(body)}
	r := httptest.NewRequest(http.MethodPost, "/v1/verify-license", nil)
	r.Body, r.ContentLength = cb, int64(len(body))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusServiceUnavailable || cb.read != len(body)-1 {
		t.Fatalf("status %d, %d of %d bytes read", rec.Code, cb.read, len(body))
	}
}

// Through a real server: the refusal's exact status line, headers and body, nothing of
// the edge's middleware (no request id, no rate-limit headers), and the keep-alive
// connection serves the next request after it.
func TestARefusalOnTheWireAndTheConnectionAfterIt(t *testing.T) {
	lim := strictLimiter(1)
	hold, _ := lim.Acquire(UnknownKeys)
	h := Middleware(Options{Limiter: lim, Tenants: NewTenants(), Refuse: edge.WriteOverloaded},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("X-Request-Id", "set-by-the-edge")
			_, _ = w.Write(b)
		}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	body := `{"key":"` + keyA + `"}`
	send := func() *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/verify-license", strings.NewReader(body))
		if err := req.Write(conn); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := send()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || string(got) != `{"error":"Service unavailable, retry"}` {
		t.Fatalf("refusal: %d %s", resp.StatusCode, got)
	}
	want := http.Header{"Content-Type": {"application/json"}, "Retry-After": {"1"},
		"Content-Length": {"38"}, "Date": resp.Header["Date"]}
	if len(resp.Header) != len(want) {
		t.Fatalf("refusal headers %v; want exactly %v", resp.Header, want)
	}
	for k, v := range want {
		if resp.Header.Get(k) != v[0] {
			t.Fatalf("refusal header %s: %q; want %q", k, resp.Header.Get(k), v[0])
		}
	}
	hold(time.Millisecond)
	resp = send() // the same connection: the refused request's unread byte was discarded
	got, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(got) != body {
		t.Fatalf("the request after the refusal: %d %s", resp.StatusCode, got)
	}
}

// The peek hands on the body as read, all of it but its last byte, whenever it read the
// key the plain way: the cache reads the rest of the question from it (the instance of a
// validate-license: edge's TestTheCacheReadsTheInstanceAsTheHandlerDoes).
func TestThePeekHandsOnTheBodyAsReadWithAPlainKey(t *testing.T) {
	cases := []struct {
		body, key string
		plain     bool
	}{
		{`{"key":"K","instance_id":"i-1"}`, "K", true},
		{`{ "instance_id" : "i-1" , "key" : "K" }`, "K", true},
		{`{"key":"K","channel":"beta","instance_id":"i-1"}`, "K", true},
		{`{"key":"K","instance_id":"i-1","instance_id":"i-2"}`, "K", true},
		{`{"key":"K"}`, "K", true},
		{`{"key":"K","amount":5,"instance_id":"i-1"}`, "K", true},
		{`{"key":"K","instance_id":"i\u002d1"}`, "K", true},
		{`{"amount":5,"key":"K","instance_id":"i-1"}`, "K", false},
		{`{"instance_id":"i-1"}`, "", false},
	}
	for _, c := range cases {
		r := httptest.NewRequest(http.MethodPost, "/v1/validate-license", strings.NewReader(c.body))
		key, cut := peekLicense(r)
		if string(key) != c.key {
			t.Errorf("%s: key %q; want %q", c.body, key, c.key)
		}
		if want := c.body[:len(c.body)-1]; c.plain && string(cut) != want || !c.plain && cut != nil {
			t.Errorf("%s: the body as read %q; want %q (plain %v)", c.body, cut, want, c.plain)
		}
		if got, err := io.ReadAll(r.Body); err != nil || string(got) != c.body {
			t.Errorf("%s: the handler reads %q, %v", c.body, got, err)
		}
	}
}
