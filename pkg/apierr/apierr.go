// Package apierr is how services say what went wrong. Handlers return these typed errors;
// the gRPC interceptor passes their status through, and the gateway's one error handler
// turns the status into the HTTP status and {"error": ...} body api.md names. Any other
// error becomes a bare 500 "Internal server error", so internals never reach a client.
package apierr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	apiv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/api/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
)

// Error is a client-visible failure: a gRPC code (which fixes the HTTP status) and the
// exact message api.md gives, plus optional sibling fields of "error" in the REST body.
type Error struct {
	Code    codes.Code
	Message string
	// retryable: the same request may succeed if sent again (a lost race, a dependency
	// that did not answer). It crosses processes as an errdetails.RetryInfo detail.
	retryable bool
	before    []*apiv1.ErrorField
	after     []*apiv1.ErrorField
}

func (e *Error) Error() string { return e.Message }

// GRPCStatus lets grpc and status.FromError see the intended status.
func (e *Error) GRPCStatus() *status.Status {
	st := status.New(e.Code, e.Message)
	var details []protoadapt.MessageV1
	if e.retryable {
		details = append(details, &errdetails.RetryInfo{})
	}
	if len(e.before) > 0 || len(e.after) > 0 {
		details = append(details, &apiv1.ErrorFields{Before: e.before, After: e.after})
	}
	if len(details) == 0 {
		return st
	}
	withDetails, err := st.WithDetails(details...)
	if err != nil {
		return st
	}
	return withDetails
}

// Retryable reports whether a status (one received from another process included) says
// the request may be retried: it carries a RetryInfo detail, which only Retry and
// Unavailable errors (and statuses passed on from them) do.
func Retryable(st *status.Status) bool {
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.RetryInfo); ok {
			return true
		}
	}
	return false
}

// WithBefore returns a copy that writes name: value ahead of "error" in the REST body.
func (e *Error) WithBefore(name string, value any) *Error {
	c := *e
	c.before = append(append([]*apiv1.ErrorField(nil), e.before...), field(name, value))
	return &c
}

// WithAfter returns a copy that writes name: value after "error" in the REST body.
func (e *Error) WithAfter(name string, value any) *Error {
	c := *e
	c.after = append(append([]*apiv1.ErrorField(nil), e.after...), field(name, value))
	return &c
}

func field(name string, value any) *apiv1.ErrorField {
	b, err := json.Marshal(value)
	if err != nil {
		panic(fmt.Sprintf("apierr: unmarshalable field %s: %v", name, err))
	}
	return &apiv1.ErrorField{Name: name, JsonValue: string(b)}
}

func newf(code codes.Code, format string, args ...any) *Error {
	msg := format
	if len(args) > 0 {
		msg = fmt.Sprintf(format, args...)
	}
	return &Error{Code: code, Message: msg}
}

// Invalid is a 400: bad parameters or body.
func Invalid(format string, args ...any) *Error { return newf(codes.InvalidArgument, format, args...) }

// Forbidden is a 403 business-rule refusal (expired, not active, limits, ownership, quota).
func Forbidden(format string, args ...any) *Error {
	return newf(codes.PermissionDenied, format, args...)
}

// NotFound is a 404.
func NotFound(format string, args ...any) *Error { return newf(codes.NotFound, format, args...) }

// Conflict is a 409.
func Conflict(format string, args ...any) *Error { return newf(codes.AlreadyExists, format, args...) }

// Retry is a 503 for a lost optimistic-concurrency race: retrying is correct.
func Retry(format string, args ...any) *Error {
	e := newf(codes.Aborted, format, args...)
	e.retryable = true
	return e
}

// Unavailable is a 503 for a dependency that did not answer (or a call that ran out of
// time): retrying is correct. The message api.md's style gives it ends in ", retry".
func Unavailable(format string, args ...any) *Error {
	e := newf(codes.Unavailable, format, args...)
	e.retryable = true
	return e
}

// Unauthorized is the one 403 every admin and tenant route answers for a bad credential.
var Unauthorized = &Error{Code: codes.Unauthenticated, Message: "Unauthorized"}

// InternalMessage is the only text a 500 ever carries.
const InternalMessage = "Internal server error"

// UnavailableMessage is the 503 text of a service that could not be reached, or did not
// answer within the request's budget.
const UnavailableMessage = "Service unavailable, retry"

// Is reports whether err carries the given code, looking through wrapping and gRPC statuses.
func Is(err error, code codes.Code) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Code == code
	}
	if st, ok := status.FromError(err); ok {
		return st.Code() == code
	}
	return false
}

// FromStatus rebuilds the error a peer answered with (code, message, siblings,
// retryability), so it passes on through this service unchanged.
func FromStatus(st *status.Status) *Error {
	e := &Error{Code: st.Code(), Message: st.Message(), retryable: Retryable(st)}
	for _, d := range st.Details() {
		if f, ok := d.(*apiv1.ErrorFields); ok {
			e.before, e.after = f.GetBefore(), f.GetAfter()
		}
	}
	return e
}

// HTTPStatus is the one mapping from gRPC statuses to the HTTP statuses api.md uses, for
// every REST door (the gateway's routes, the console's pages). ResourceExhausted is never
// a 429: the routes' rate limits are the gateway's own, answered before any call, so it
// is gRPC's own, a message over a size limit, and that is a 500 like anything else
// unexpected.
//
// PublicMessage is the text that goes with it.
func HTTPStatus(st *status.Status) int {
	switch st.Code() {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.Unauthenticated, codes.PermissionDenied:
		return http.StatusForbidden
	case codes.NotFound, codes.Unimplemented:
		return http.StatusNotFound
	case codes.AlreadyExists:
		return http.StatusConflict
	case codes.Aborted, codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// PublicMessage is the one rule for the text a REST door (the gateway's routes, the
// console's and the portal's pages) shows for a call that failed with st, HTTPStatus
// being its status: the service's own message, except
//   - Unimplemented (a route no service has): "Not found";
//   - a transport failure reaching a service (Unavailable without the RetryInfo detail a
//     service's own 503 carries: gRPC's text, naming internal addresses), no answer
//     within the request's budget (DeadlineExceeded, Canceled), and a 503 without a
//     message: UnavailableMessage;
//   - any other 500: InternalMessage. A text other than that (gRPC's own, such as an
//     answer over the size limit; a service's 500 logged its cause and says only
//     InternalMessage) is logged here, never shown.
func PublicMessage(ctx context.Context, st *status.Status) string {
	msg := st.Message()
	switch code := st.Code(); {
	case code == codes.Unimplemented:
		return "Not found"
	case code == codes.Unavailable && !Retryable(st), code == codes.DeadlineExceeded, code == codes.Canceled,
		msg == "" && HTTPStatus(st) == http.StatusServiceUnavailable:
		return UnavailableMessage
	case HTTPStatus(st) == http.StatusInternalServerError:
		if msg != InternalMessage {
			slog.Default().ErrorContext(ctx, "internal error", "code", code.String(), "error", msg)
		}
		return InternalMessage
	}
	return msg
}
