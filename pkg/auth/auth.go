// Package auth is the one credential check every service runs, as a gRPC interceptor.
// A method's access level is declared in its proto (keyhouse.api.v1.access), so a new
// route cannot forget it: a method without one is refused.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/signing"
	apiv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/api/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// SelfHostedTenant is the one implicit tenant of a self-hosted deployment.
const SelfHostedTenant = "default"

// TenantHeader carries the tenant on service-to-service calls made with the admin key.
// The gateway never forwards it from clients.
const TenantHeader = "x-keyhouse-tenant"

// Principal is who is calling.
type Principal struct {
	// TenantID scopes every row the call may touch; empty on public and admin-only calls.
	TenantID string
	// Admin is true when the call carried the admin key.
	Admin bool
	// Session is true when the call carried a console session token.
	Session bool
	// ReadOnly is true when the call carried an API key of scope "read": only methods
	// declared (keyhouse.api.v1.read_only) accept it.
	ReadOnly bool
}

// SessionPrefix starts every console session token (billing's ConsoleAccountsService).
const SessionPrefix = "khs_"

// IsSessionToken tells a console session token from an API key.
func IsSessionToken(token string) bool { return strings.HasPrefix(token, SessionPrefix) }

type principalKey struct{}

// WithPrincipal stores p in ctx.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the caller, if the interceptor set one.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// TenantID returns the caller's tenant or an Unauthorized error; store methods take it
// explicitly so no query runs unscoped.
func TenantID(ctx context.Context) (string, error) {
	p, ok := FromContext(ctx)
	if !ok || p.TenantID == "" {
		return "", apierr.Unauthorized
	}
	return p.TenantID, nil
}

// Credential is what a tenant credential (an API key or a console session) resolves to.
type Credential struct {
	TenantID string
	// ReadOnly: an API key of scope "read".
	ReadOnly bool
}

// ErrTenantSuspended is the answer to every credential of a tenant the operator suspended.
var ErrTenantSuspended = apierr.Forbidden("Tenant is suspended")

// TenantResolver maps a tenant credential (a hosted tenant API key, an extra API key of
// either mode, a console session) to its tenant. It returns apierr.Unauthorized for an
// unknown, deleted or expired key and ErrTenantSuspended for a suspended tenant's.
type TenantResolver interface {
	ResolveAPIKey(ctx context.Context, apiKey string) (Credential, error)
}

// Config is what the interceptor needs to know.
type Config struct {
	MultiTenant bool
	AdminKey    string
	// PreviousAdminKey (ADMIN_API_KEY_PREVIOUS) is accepted wherever AdminKey is, during a
	// rotation; empty otherwise.
	PreviousAdminKey string
	// Tenants resolves hosted API keys; unused self-hosted.
	Tenants TenantResolver
}

// Authenticator checks credentials against Config.
type Authenticator struct {
	cfg          Config
	adminHash    [32]byte
	previousHash [32]byte
	access       sync.Map // full method name -> apiv1.Access
	// readOnlyOf: full method name -> bool, the method's (keyhouse.api.v1.read_only).
	readOnlyOf sync.Map
}

// New returns an Authenticator.
func New(cfg Config) *Authenticator {
	return &Authenticator{cfg: cfg, adminHash: sha256.Sum256([]byte(cfg.AdminKey)), previousHash: sha256.Sum256([]byte(cfg.PreviousAdminKey))}
}

// HashAPIKey is how tenant API keys are stored: SHA-256, hex. The keys carry 256 random
// bits, so a fast unsalted hash is enough and lets the lookup be an index probe.
func HashAPIKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// AdminKeyFingerprint is what a console session opened with the admin key records of that
// key, so that the session ends once the key is no longer accepted (billing compares it
// with the fingerprints of ADMIN_API_KEY and ADMIN_API_KEY_PREVIOUS on every request):
// HMAC-SHA256 keyed with the admin key over a label of its own, hex. Only a holder of the
// key can compute it, and it is neither the key nor any other value derived from it (the
// console's CSRF key, the SHA-256 the interceptor compares).
func AdminKeyFingerprint(key string) string {
	return signing.SignHMAC([]byte(key), []byte("keyhouse-console-session-admin-key-v1"))
}

// IsAdminKey compares in constant time (hashing first also hides the length) with the
// admin key and, during a rotation, the previous one: both comparisons are always made,
// so the time taken does not tell which key matched.
func (a *Authenticator) IsAdminKey(key string) bool {
	if a.cfg.AdminKey == "" || key == "" {
		return false
	}
	sum := sha256.Sum256([]byte(key))
	current := subtle.ConstantTimeCompare(sum[:], a.adminHash[:])
	previous := subtle.ConstantTimeCompare(sum[:], a.previousHash[:])
	if a.cfg.PreviousAdminKey == "" {
		previous = 0
	}
	return current|previous == 1
}

// ErrAdminKeyRefused is the answer to a service-to-service call (an ACCESS_INTERNAL
// method) whose admin key this process does not accept: the processes disagree on
// ADMIN_API_KEY, as during a rotation without ADMIN_API_KEY_PREVIOUS. It is
// Unauthenticated like every bad credential; its own message lets the caller tell it
// from a refusal of what the call carries (grpcx.Call logs it as what it is, and
// presents the previous key). No REST route reaches an internal method, so no client
// ever reads it.
var ErrAdminKeyRefused = &apierr.Error{Code: codes.Unauthenticated, Message: "Internal call refused: the admin key is not accepted"}

// IsAdminKeyRefusal reports whether err is a peer's ErrAdminKeyRefused.
func IsAdminKeyRefusal(err error) bool {
	if err == nil {
		return false
	}
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unauthenticated && st.Message() == ErrAdminKeyRefused.Message
}

// ErrAuthorizationTwice refuses a call carrying two different authorization values, as
// the REST edge refuses two Authorization headers (addendum): which one counts would be
// the reader's choice, and a proxy in front may have judged another. The same value
// twice is no ambiguity, and gateways before this release sent every REST credential so (see
// edge.incomingHeader): a rolling upgrade must not refuse their calls.
var ErrAuthorizationTwice = apierr.Invalid("Authorization must be sent once")

// UnaryInterceptor authenticates each unary call according to the method's access level.
func (a *Authenticator) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := a.Authenticate(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamInterceptor does the same for streams (health watch, reflection).
func (a *Authenticator) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := a.Authenticate(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		return handler(srv, &wrappedStream{ServerStream: ss, ctx: ctx})
	}
}

type wrappedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (w *wrappedStream) Context() context.Context { return w.ctx }

// Authenticate returns ctx carrying the caller's Principal, or apierr.Unauthorized.
func (a *Authenticator) Authenticate(ctx context.Context, fullMethod string) (context.Context, error) {
	access := a.accessOf(fullMethod)
	if access == apiv1.Access_ACCESS_PUBLIC {
		return ctx, nil
	}
	if values := metadata.ValueFromIncomingContext(ctx, "authorization"); len(values) > 1 && slices.ContainsFunc(values[1:], func(v string) bool { return v != values[0] }) {
		return nil, ErrAuthorizationTwice
	}
	token, ok := Bearer(ctx)
	if !ok {
		return nil, apierr.Unauthorized
	}
	switch access {
	case apiv1.Access_ACCESS_ADMIN:
		if !a.IsAdminKey(token) {
			return nil, apierr.Unauthorized
		}
		announceCaller(ctx, CallerAdmin)
		return WithPrincipal(ctx, Principal{Admin: true}), nil
	case apiv1.Access_ACCESS_INTERNAL:
		if !a.IsAdminKey(token) {
			return nil, ErrAdminKeyRefused
		}
		// The tenant is optional: a lookup by license key on behalf of a public route has
		// none yet. Methods that need one call TenantID, which refuses an empty tenant.
		tenant := SelfHostedTenant
		if a.cfg.MultiTenant {
			tenant = first(metadata.ValueFromIncomingContext(ctx, TenantHeader))
		}
		return WithPrincipal(ctx, Principal{TenantID: tenant, Admin: true}), nil
	case apiv1.Access_ACCESS_TENANT:
		// A session-shaped token is never taken for the admin key.
		if !a.cfg.MultiTenant && !IsSessionToken(token) && a.IsAdminKey(token) {
			// The admin key is the admin's on every route, so one credential is one caller.
			announceCaller(ctx, CallerAdmin)
			return WithPrincipal(ctx, Principal{TenantID: SelfHostedTenant, Admin: true}), nil
		}
		// Hosted, the admin key is never a tenant credential (api.md, Authentication).
		// Every credential Keyhouse issues is ASCII; one that is not UTF-8 is unknown, and
		// billing could not be asked about it anyway (a protobuf string cannot carry it:
		// the call would fail before it left, as if billing were down).
		if a.IsAdminKey(token) || a.cfg.Tenants == nil || !utf8.ValidString(token) {
			return nil, apierr.Unauthorized
		}
		// Everything else is resolved by billing, with no cache, so a rotation, a deleted
		// or expired key, a logout or a suspension is in force on the next call of every
		// service: hosted tenant keys, extra API keys (both modes, self-hosted under the
		// implicit tenant) and console sessions (addendum §9, both modes).
		cred, err := a.cfg.Tenants.ResolveAPIKey(ctx, token)
		if err != nil {
			return nil, err
		}
		if cred.ReadOnly && !a.readOnly(fullMethod) {
			return nil, apierr.Unauthorized
		}
		announceCaller(ctx, CallerTenantPrefix+cred.TenantID)
		return WithPrincipal(ctx, Principal{TenantID: cred.TenantID, Session: IsSessionToken(token), ReadOnly: cred.ReadOnly}), nil
	default:
		return nil, apierr.Unauthorized
	}
}

// CallerHeader is the gRPC response metadata in which a call authenticated by a client's
// credential names who that credential proved to be: CallerAdmin, or CallerTenantPrefix
// and the tenant id. The gateway's admission control learns from it which credentials are
// real and whose they are, so a credential counts for its tenant's fair share, and one
// never proven (made up, or refused) counts with every other such one
// (gateway/internal/admission). Calls of internal methods (service to service) name
// nobody.
const CallerHeader = "keyhouse-caller"

// The values of CallerHeader.
const (
	CallerAdmin        = "admin"
	CallerTenantPrefix = "tenant "
)

// announceCaller puts who into the call's CallerHeader (outside a call it does nothing).
func announceCaller(ctx context.Context, who string) {
	_ = grpc.SetHeader(ctx, metadata.Pairs(CallerHeader, who))
}

// readOnly reads the read_only option of a method: whether a read-scope key may call it.
func (a *Authenticator) readOnly(fullMethod string) bool {
	if v, ok := a.readOnlyOf.Load(fullMethod); ok {
		return v.(bool)
	}
	ro := false
	if md, ok := methodDescriptor(fullMethod); ok {
		ro = proto.GetExtension(md.Options(), apiv1.E_ReadOnly).(bool)
	}
	a.readOnlyOf.Store(fullMethod, ro)
	return ro
}

func methodDescriptor(fullMethod string) (protoreflect.MethodDescriptor, bool) {
	name := strings.Replace(strings.TrimPrefix(fullMethod, "/"), "/", ".", 1)
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
	if err != nil {
		return nil, false
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	return md, ok
}

// accessOf reads the access option of a method; methods outside the keyhouse packages
// (grpc.health.v1, reflection) are public, keyhouse methods without the option are refused.
func (a *Authenticator) accessOf(fullMethod string) apiv1.Access {
	if v, ok := a.access.Load(fullMethod); ok {
		return v.(apiv1.Access)
	}
	access := apiv1.Access_ACCESS_UNSPECIFIED
	name := strings.Replace(strings.TrimPrefix(fullMethod, "/"), "/", ".", 1)
	if !strings.HasPrefix(name, "keyhouse.") {
		access = apiv1.Access_ACCESS_PUBLIC
	} else if d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name)); err == nil {
		if md, ok := d.(protoreflect.MethodDescriptor); ok {
			access = proto.GetExtension(md.Options(), apiv1.E_Access).(apiv1.Access)
		}
	}
	a.access.Store(fullMethod, access)
	return access
}

// Bearer returns the token of the call's "authorization: Bearer …" metadata.
func Bearer(ctx context.Context) (string, bool) {
	h := first(metadata.ValueFromIncomingContext(ctx, "authorization"))
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// Outgoing returns ctx with the metadata for a service-to-service call on behalf of tenant,
// made with the admin key (ACCESS_INTERNAL methods).
func Outgoing(ctx context.Context, adminKey, tenant string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+adminKey, TenantHeader, tenant)
}
