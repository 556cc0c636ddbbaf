package grpcx

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// CallTimeout bounds one call from a service to another: a slow or absent dependency
// answers 503 within it, never a hang. The caller's own deadline still applies when it is
// shorter.
const CallTimeout = 3 * time.Second

// Peer is another service as its internal callers see it: the name its 503 carries and
// the credential the calls present.
type Peer struct {
	// Name starts the 503 message: "Licensing" → "Licensing service unavailable, retry".
	Name string
	// AdminKey is the internal credential (ACCESS_INTERNAL methods); empty for methods
	// that take none.
	AdminKey string
}

// Call makes one internal call under the one policy every client package shares: the
// admin key and the tenant it acts for (tenant "" for none) as metadata, CallTimeout,
// and WaitForReady, so a call rides out a peer that is (re)connecting within that budget
// instead of failing the moment the connection is down. The answer goes through
// Downstream: the codes in pass come back as the callee's own error, anything else as
// the peer's 503.
func Call[Resp any](ctx context.Context, p Peer, tenant string, rpc func(context.Context, ...grpc.CallOption) (Resp, error), pass ...codes.Code) (Resp, error) {
	if p.AdminKey != "" {
		ctx = auth.Outgoing(ctx, p.AdminKey, tenant)
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	resp, err := rpc(ctx, grpc.WaitForReady(true))
	if err != nil {
		if auth.IsAdminKeyRefusal(err) {
			logAdminKeyRefused(ctx, p.Name)
		}
		var zero Resp
		return zero, p.Downstream(err, pass...)
	}
	return resp, nil
}

// logAdminKeyRefused reports a peer that refused this process's admin key, at ERROR: the
// caller's client gets the peer's 503 (its request was fine), and without this line the
// cause would show only as that 503, code Unavailable, in this process's log. The line
// goes to the process's logger (telemetry.RouteLibraryLogs makes it slog's default) with
// the request's id; it names the variables, never a key.
func logAdminKeyRefused(ctx context.Context, peer string) {
	slog.Default().ErrorContext(ctx, "internal call refused: "+peer+" does not accept this process's admin key",
		"peer", peer, "code", codes.Unauthenticated.String(),
		"fix", "give every process the same ADMIN_API_KEY; during a rotation set ADMIN_API_KEY_PREVIOUS to the old key on every process (docs/operations.md, Rotating the admin key)")
}

// WithPreviousAdminKey is the dial option of a process that has ADMIN_API_KEY_PREVIOUS: a
// call whose admin key the peer refuses (auth.ErrAdminKeyRefused: the peer is still on the
// previous key, mid-rollout) is made once more presenting the previous key. The peer's
// interceptor refused it before any handler ran, so the call is safe to repeat. With both
// keys accepted by the processes that already have the new one, and the old key presented
// to those that do not, a rolling restart onto a new admin key breaks no call between
// services.
func WithPreviousAdminKey(previous string) grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if !auth.IsAdminKeyRefusal(err) || previous == "" {
			return err
		}
		md, ok := metadata.FromOutgoingContext(ctx)
		if !ok || len(md.Get("authorization")) == 0 {
			return err
		}
		md = md.Copy()
		md.Set("authorization", "Bearer "+previous)
		return invoker(metadata.NewOutgoingContext(ctx, md), method, req, reply, cc, opts...)
	})
}

// Downstream is the one translation of a peer's error into this service's answer. A
// status whose code is in pass is an answer the peer gives on purpose (NotFound for an
// unknown key, PermissionDenied for a product owned elsewhere): it comes back as an
// *apierr.Error with the peer's message, siblings and retryability. Anything else (the
// peer down, too slow, failing, or a code the caller does not expect) is this service's
// 503 "<Name> service unavailable, retry"; the peer's text, which may name addresses,
// stays out of it.
func (p Peer) Downstream(err error, pass ...codes.Code) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok && slices.Contains(pass, st.Code()) {
		return apierr.FromStatus(st)
	}
	return apierr.Unavailable("%s service unavailable, retry", p.Name)
}
