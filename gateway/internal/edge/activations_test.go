package edge

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

type fakeValidator struct {
	activationsv1.ActivationsServiceClient
	calls []*activationsv1.ValidateLicenseRequest
	err   error
	// invalid lists the instance ids without a seat; until is the valid answers' expiry.
	invalid map[string]bool
	until   time.Time
	// older: an activations from before ValidateLicenseBatch (validatebatch_test.go).
	older bool
	// class is the check-update class the batch call names with every answer.
	class string
	mu    sync.Mutex
}

func (f *fakeValidator) ValidateLicense(_ context.Context, req *activationsv1.ValidateLicenseRequest, opts ...grpc.CallOption) (*activationsv1.ValidateLicenseResponse, error) {
	f.mu.Lock()
	f.calls = append(f.calls, req)
	f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	if f.invalid[req.GetInstanceId()] {
		return &activationsv1.ValidateLicenseResponse{Valid: false}, nil
	}
	for _, o := range opts {
		if h, ok := o.(grpc.HeaderCallOption); ok && !f.until.IsZero() {
			*h.HeaderAddr = metadata.Pairs(licensecache.ValidUntilHeader, f.until.Format(time.RFC3339Nano))
		}
	}
	return &activationsv1.ValidateLicenseResponse{Valid: true}, nil
}

func serveValidate(t *testing.T, f *fakeValidator, body string) string {
	t.Helper()
	mux := runtime.NewServeMux(runtime.WithMarshalerOption(runtime.MIMEWildcard, newJSONMarshaler()), runtime.WithErrorHandler(handleError))
	if err := mux.HandlePath(http.MethodPost, "/v1/validate-license", validateLicense(mux, &cachedValidate{misses: newBatchedValidate(f)})); err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/validate-license", strings.NewReader(body)))
	if w.Code != http.StatusOK {
		t.Fatalf("status %d for %q", w.Code, body)
	}
	return w.Body.String()
}

// api.md: validate-license always answers 200 with valid and never an error field.
func TestValidateLicenseAnswersValidFalseForWhatItCannotValidate(t *testing.T) {
	for _, body := range []string{
		``, `not json`, `[]`, `"key"`, `{}`, `{"key":"K"}`, `{"instance_id":"i"}`,
		`{"key":5,"instance_id":"i"}`, `{"key":"K","instance_id":null}`, `{"key":"","instance_id":"i"}`,
		`{"key":"K","instance_id":"i"`,
	} {
		f := &fakeValidator{}
		if got := serveValidate(t, f, body); got != `{"valid":false}` {
			t.Errorf("body %q: %s", body, got)
		}
		if len(f.calls) != 0 {
			t.Errorf("body %q reached the service", body)
		}
	}
}

func TestValidateLicenseForwardsAWellFormedRequest(t *testing.T) {
	f := &fakeValidator{}
	// Unknown fields are ignored, as on every other route.
	if got := serveValidate(t, f, `{"key":"K-1","instance_id":"host-1","extra":[1]}`); got != `{"valid":true}` {
		t.Fatalf("got %s", got)
	}
	if len(f.calls) != 1 || f.calls[0].GetKey() != "K-1" || f.calls[0].GetInstanceId() != "host-1" {
		t.Fatalf("calls %v", f.calls)
	}
}

func TestValidateLicenseAnswersValidFalseWhenTheServiceFails(t *testing.T) {
	for _, err := range []error{status.Error(codes.Unavailable, "connection refused"), status.Error(codes.Internal, "boom")} {
		f := &fakeValidator{err: err}
		if got := serveValidate(t, f, `{"key":"K","instance_id":"i"}`); got != `{"valid":false}` {
			t.Errorf("%v: %s", err, got)
		}
	}
}

func TestCachedValidateKeepsValidAnswersPerInstanceUntilTheLicenseExpires(t *testing.T) {
	expires := time.Now().Add(500 * time.Millisecond)
	f := &fakeValidator{invalid: map[string]bool{"host-2": true}, until: expires}
	c := &cachedValidate{misses: newBatchedValidate(f), valid: licensecache.New[*activationsv1.ValidateLicenseResponse](time.Hour)}
	key := license.NewKey()
	validate := func(instance string) bool {
		t.Helper()
		resp, err := c.ValidateLicense(t.Context(), &activationsv1.ValidateLicenseRequest{Key: key, InstanceId: instance})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetValid()
	}
	calls := func(want int, what string) {
		t.Helper()
		if len(f.calls) != want {
			t.Fatalf("%s: activations asked %d times in all, want %d", what, len(f.calls), want)
		}
	}
	for range 3 {
		if !validate("host-1") {
			t.Fatal("host-1 not valid")
		}
	}
	calls(1, "a valid answer is asked once")
	for range 2 {
		if validate("host-2") {
			t.Fatal("host-2 valid")
		}
	}
	calls(3, "an invalid answer is asked every time")

	c.valid.Invalidate(license.CanonicalKey(key))
	time.Sleep(150 * time.Millisecond) // the cache keeps nothing about K while it settles
	validate("host-1")
	validate("host-1")
	calls(4, "after the license changed, asked once again")

	time.Sleep(time.Until(expires))
	validate("host-1")
	calls(5, "once the license's expiry has come, activations decides")
}
