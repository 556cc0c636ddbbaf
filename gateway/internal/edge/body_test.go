package edge

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
)

// badGzipBodies are gzip Content-Encoded bodies that do not decompress: not gzip at all,
// and a gzip stream cut short.
func badGzipBodies(t *testing.T) map[string][]byte {
	whole := testkit.Gzip(t, `{"key":"KEY-1","instance_id":"host-1"}`)
	return map[string][]byte{"not gzip": []byte("nope"), "truncated": whole[:len(whole)-10]}
}

// Every read of a request body words a gzip body that does not decompress the same way:
// the decoder's routes and the routes that read their raw bytes (validate-license, by
// the hot route and by the mux, and the two webhooks), none of them a 500, and nothing
// reaches a service.
func TestEveryBodyReadAnswersABadGzipBodyWithOneWording(t *testing.T) {
	t.Parallel()
	b := &backends{}
	h, err := New(context.Background(), Options{Log: slog.New(slog.DiscardHandler), Conns: serveBackends(t, b.handle)})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{
		VerifyLicensePath, // decoded: the wording the others share
		ValidateLicensePath,
		ValidateLicensePath + "?via=mux", // not the hot route: the mux's handler
		"/v1/webhooks/billing",
		"/v1/webhooks/storefront/wh_1",
	} {
		for name, body := range badGzipBodies(t) {
			r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
			r.Header.Set("Content-Encoding", "gzip")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusBadRequest || w.Body.String() != `{"error":"Invalid gzip body"}` {
				t.Errorf("%s, %s: %d %s", path, name, w.Code, w.Body)
			}
		}
	}
	if called := b.take(); len(called) != 0 {
		t.Errorf("bodies that did not decompress reached the services: %v", called)
	}
}

func TestReadBodyWordsItsFailuresForTheClient(t *testing.T) {
	for name, body := range badGzipBodies(t) {
		_, err := readBody(&gunzip{src: &limitedBody{ReadCloser: io.NopCloser(bytes.NewReader(body))}})
		if err == nil || err.Error() != invalidGzip {
			t.Errorf("%s: %v, want %q", name, err, invalidGzip)
		}
	}
	if _, err := readBody(failingReader{}); err == nil || err.Error() != unreadableBody {
		t.Errorf("read failure: %v, want %q", err, unreadableBody)
	}
	got, err := readBody(&gunzip{src: &limitedBody{ReadCloser: io.NopCloser(bytes.NewReader(testkit.Gzip(t, "{}")))}})
	if err != nil || string(got) != "{}" {
		t.Errorf("a good gzip body: %q, %v", got, err)
	}
}
