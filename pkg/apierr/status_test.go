package apierr_test

import (
	"net/http"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Every REST door maps a status the same way, as it arrives from another process (rebuilt
// from its wire form): gRPC's own ResourceExhausted (an answer over the size limit) is a
// 500, never a 429 (a rate limit is the gateway's own answer).
func TestHTTPStatusOfStatusesFromAnotherProcess(t *testing.T) {
	wire := func(err *apierr.Error) *status.Status { return status.FromProto(err.GRPCStatus().Proto()) }
	// A quota detail changes nothing: no service refuses with a 429 of its own.
	withQuota, err := status.New(codes.ResourceExhausted, "quota").WithDetails(&errdetails.QuotaFailure{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		st   *status.Status
		want int
	}{
		{"gRPC's ResourceExhausted", status.New(codes.ResourceExhausted, "grpc: received message larger than max"), http.StatusInternalServerError},
		{"ResourceExhausted with a QuotaFailure detail", status.FromProto(withQuota.Proto()), http.StatusInternalServerError},
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
	}
}
