package edge

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type fakeValidator struct {
	activationsv1.ActivationsServiceClient
	calls []*activationsv1.ValidateLicenseRequest
	err   error
}

func (f *fakeValidator) ValidateLicense(_ context.Context, req *activationsv1.ValidateLicenseRequest, _ ...grpc.CallOption) (*activationsv1.ValidateLicenseResponse, error) {
	f.calls = append(f.calls, req)
	if f.err != nil {
		return nil, f.err
	}
	return &activationsv1.ValidateLicenseResponse{Valid: true}, nil
}

func serveValidate(t *testing.T, f *fakeValidator, body string) string {
	t.Helper()
	mux := runtime.NewServeMux(runtime.WithMarshalerOption(runtime.MIMEWildcard, newJSONMarshaler()), runtime.WithErrorHandler(handleError))
	if err := mux.HandlePath(http.MethodPost, "/v1/validate-license", validateLicense(mux, f, nil)); err != nil {
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
