package edge

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestErrorHandlerWritesTheStatusAndBodyTheAPIUses(t *testing.T) {
	cases := []struct {
		name string
		err  error
		code int
		body string
	}{
		{"business refusal", apierr.Forbidden("License is not active"), 403, `{"error":"License is not active"}`},
		{"bad credential", apierr.Unauthorized, 403, `{"error":"Unauthorized"}`},
		{"siblings keep their order", apierr.NotFound("License key not found").WithBefore("valid", false), 404, `{"valid":false,"error":"License key not found"}`},
		{"siblings after error", apierr.Forbidden("Expired").WithBefore("valid", false).WithBefore("reason", "Expired").WithAfter("extra", 1), 403, `{"valid":false,"reason":"Expired","error":"Expired","extra":1}`},
		{"conflict", apierr.Conflict("A release already exists for this product_id/version/channel/platform"), 409, `{"error":"A release already exists for this product_id/version/channel/platform"}`},
		{"lost race", apierr.Retry("Concurrent update, retry"), 503, `{"error":"Concurrent update, retry"}`},
		{"internal never leaks", status.Error(codes.Internal, "pq: relation licenses does not exist"), 500, `{"error":"Internal server error"}`},
		{"unknown never leaks", errors.New("dial tcp 10.0.0.1:5432"), 500, `{"error":"Internal server error"}`},
		{"transport failure hides addresses", status.Error(codes.Unavailable, "connection error: desc = dial tcp 127.0.0.1:9101: refused"), 503, `{"error":"Service unavailable, retry"}`},
		{"no answer within the budget", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), 503, `{"error":"Service unavailable, retry"}`},
		{"service 503 passes", apierr.Unavailable("Licensing service unavailable, retry"), 503, `{"error":"Licensing service unavailable, retry"}`},
		{"a 503 passed on by another service keeps its text", apierr.FromStatus(apierr.Unavailable("Billing service unavailable, retry").GRPCStatus()), 503, `{"error":"Billing service unavailable, retry"}`},
		{"retryability is the detail, not the text", status.Error(codes.Unavailable, "dial tcp 10.0.0.7:9101: refused, retry"), 503, `{"error":"Service unavailable, retry"}`},
		{"unimplemented is not found", status.Error(codes.Unimplemented, "method X not implemented"), 404, `{"error":"Not found"}`},
		{"decode error names the field", status.Error(codes.InvalidArgument, "proto: (line 1:9): invalid value for string field key: 5"), 400, `{"error":"Invalid JSON body: invalid value for string field key: 5"}`},
		{"decode error names the field as the client sent it", status.Error(codes.InvalidArgument, "proto: (line 1:30): invalid value for string field instanceId: 7"), 400, `{"error":"Invalid JSON body: invalid value for string field instance_id: 7"}`},
		{"decode error with protojson's no-break space", status.Error(codes.InvalidArgument, "proto:\u00a0(line 1:16):\u00a0invalid value for string field instanceId: 7"), 400, `{"error":"Invalid JSON body: invalid value for string field instance_id: 7"}`},
		{"query parameter of the wrong type", status.Error(codes.InvalidArgument, `parsing field "limit": strconv.ParseInt: parsing "abc": invalid syntax`), 400, `{"error":"Invalid value for query parameter limit"}`},
		{"truncated body", status.Error(codes.InvalidArgument, "unexpected EOF"), 400, `{"error":"Invalid JSON body: unexpected end of input"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, "/v1/x", nil)
			var err error = tc.err
			if ae, ok := err.(*apierr.Error); ok {
				err = ae.GRPCStatus().Err()
			}
			handleError(context.Background(), nil, nil, w, r, err)
			if w.Code != tc.code || w.Body.String() != tc.body {
				t.Fatalf("got %d %s, want %d %s", w.Code, w.Body, tc.code, tc.body)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Fatalf("content type %q", ct)
			}
		})
	}
}

// TestAnAnswerOverTheSizeLimitIsA500WithItsCauseInTheLog: gRPC refuses a message over
// its limit with ResourceExhausted. That is no rate limit, and its text is the
// transport's: the client gets the bare 500 ARCHITECTURE.md promises for anything
// unexpected, and the cause goes to the log.
func TestAnAnswerOverTheSizeLimitIsA500WithItsCauseInTheLog(t *testing.T) {
	var logs bytes.Buffer
	was := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(was) })

	const cause = "grpc: received message larger than max (4548697 vs. 4194304)"
	w := httptest.NewRecorder()
	handleError(context.Background(), nil, nil, w, httptest.NewRequest(http.MethodGet, "/v1/list-releases?limit=1000", nil), status.Error(codes.ResourceExhausted, cause))
	if w.Code != http.StatusInternalServerError || w.Body.String() != `{"error":"Internal server error"}` {
		t.Fatalf("got %d %s, want 500 {\"error\":\"Internal server error\"}", w.Code, w.Body)
	}
	if w.Header().Get("Retry-After") != "" {
		t.Fatalf("Retry-After %q on a 500", w.Header().Get("Retry-After"))
	}
	if !strings.Contains(logs.String(), `"level":"ERROR"`) || !strings.Contains(logs.String(), cause) || !strings.Contains(logs.String(), `"code":"ResourceExhausted"`) {
		t.Fatalf("the cause is not logged at ERROR: %s", logs.String())
	}
}
