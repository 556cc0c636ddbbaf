package edge

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/apierr"
)

// The prebuilt refusal is, byte for byte, the 503 any dependency that could not take the
// call answers.
func TestWriteOverloadedIsTheServiceUnavailableAnswer(t *testing.T) {
	want := httptest.NewRecorder()
	writeError(want, http.StatusServiceUnavailable, apierr.UnavailableMessage, nil)
	for range 2 { // the prebuilt bytes are not consumed by an answer
		got := httptest.NewRecorder()
		WriteOverloaded(got)
		if got.Code != want.Code || got.Body.String() != want.Body.String() ||
			got.Header().Get("Content-Type") != want.Header().Get("Content-Type") || len(got.Header()) != len(want.Header()) {
			t.Fatalf("refusal %d %v %q; want %d %v %q", got.Code, got.Header(), got.Body, want.Code, want.Header(), want.Body)
		}
	}
	if want.Body.String() != `{"error":"Service unavailable, retry"}` {
		t.Fatalf("503 body %s", want.Body)
	}
}
