package apierr_test

import (
	"net/http"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Every REST door maps a status the same way, as it arrives from another process (rebuilt
// from its wire form): a service's TooMany is the 429 its route documents, while gRPC's
// own ResourceExhausted (an answer over the size limit) is a 500.
func TestHTTPStatusOfStatusesFromAnotherProcess(t *testing.T) {
	wire := func(err *apierr.Error) *status.Status { return status.FromProto(err.GRPCStatus().Proto()) }
	for _, tc := range []struct {
		name string
		st   *status.Status
		want int
	}{
		{"TooMany", wire(apierr.TooMany("resent 5 times")), http.StatusTooManyRequests},
		{"gRPC's ResourceExhausted", status.New(codes.ResourceExhausted, "grpc: received message larger than max"), http.StatusInternalServerError},
		{"Invalid", wire(apierr.Invalid("key is required")), http.StatusBadRequest},
		{"Forbidden", wire(apierr.Forbidden("License has expired")), http.StatusForbidden},
		{"NotFound", wire(apierr.NotFound("Tenant not found")), http.StatusNotFound},
		{"Unimplemented", status.New(codes.Unimplemented, "unknown method"), http.StatusNotFound},
		{"Conflict", wire(apierr.Conflict("exists")), http.StatusConflict},
		{"Retry", wire(apierr.Retry("lost a race, retry")), http.StatusServiceUnavailable},
		{"DeadlineExceeded", status.New(codes.DeadlineExceeded, "deadline"), http.StatusServiceUnavailable},
		{"Internal", status.New(codes.Internal, apierr.InternalMessage), http.StatusInternalServerError},
	} {
		if got := apierr.HTTPStatus(tc.st); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
		if apierr.IsTooMany(tc.st) != (tc.want == http.StatusTooManyRequests) {
			t.Errorf("%s: IsTooMany %v", tc.name, apierr.IsTooMany(tc.st))
		}
	}
}
