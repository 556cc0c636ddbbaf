// Package server holds the releases service's gRPC handlers: the release registry and the
// license-gated update check with its signed manifest (api.md: Release, Release status,
// register-release, list-releases, release/:id, unpublish-release, check-update).
package server

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/input"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	"github.com/keyhouse/keyhouse/pkg/licensingclient"
	"github.com/keyhouse/keyhouse/pkg/paging"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/signing"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"github.com/keyhouse/keyhouse/services/releases/internal/semver"
	"github.com/keyhouse/keyhouse/services/releases/internal/store"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Store is the SQL the handlers need (store.Store; fakes in unit tests).
type Store interface {
	// Register runs beforeCommit last in the release's transaction (store.Store.Register).
	Register(ctx context.Context, tenant, idemKey string, requestHash []byte, r *store.NewRelease, limit int,
		beforeCommit func(context.Context) error) (int32, error)
	Get(ctx context.Context, tenant string, id int32) (*store.Release, error)
	Unpublish(ctx context.Context, tenant string, id int32) error
	Latest(ctx context.Context, tenant, productKey, channel, platform string) (*store.Release, error)
	LatestOf(ctx context.Context, channels []store.Channel) ([]*store.Release, error)
	List(ctx context.Context, tenant string, f store.Filter) ([]*store.Release, int, error)
}

// Licensing is what releases asks the licensing service.
type Licensing interface {
	// License finds a license by key, in any tenant when tenant is "" (check-update is
	// public); license.ErrNotFound when there is none.
	License(ctx context.Context, tenant, key string) (*licensingv1.License, error)
	// Licenses is License in any tenant for several keys with one call (batches): by
	// canonical key, an unknown key absent.
	Licenses(ctx context.Context, keys []string) (map[string]*licensingv1.License, error)
	// ClaimProduct binds productID to tenant, or 403 "product_id is owned by a different tenant".
	ClaimProduct(ctx context.Context, tenant, productID string) error
	// ProductOwned is ClaimProduct's answer without the claim (false: no tenant owns it).
	ProductOwned(ctx context.Context, tenant, productID string) (bool, error)
	// Keyring is the installation's signing material as this process kept it (no call).
	Keyring(ctx context.Context) (*signing.Keyring, error)
	// CurrentKeyring is the keyring whose RSA key licensing signs with now, the key
	// GET /v1/public-key serves (fetched again when licensing's changed): what signs.
	CurrentKeyring(ctx context.Context) (*signing.Keyring, error)
}

// Entitlements is the billing service (billingclient.Client).
type Entitlements interface {
	// ActivePlan fails with billingclient.ErrSubscriptionInactive when the hosted
	// tenant's subscription is not active.
	ActivePlan(ctx context.Context, tenant string) (int, error)
}

// Config is what the handlers need besides their collaborators.
type Config struct {
	MultiTenant bool
	// Log receives the lines of the items of a batch call (grpcx.ObserveCall); nil: none.
	Log *slog.Logger
}

// Server implements ReleasesService.
type Server struct {
	releasesv1.UnimplementedReleasesServiceServer
	cfg          Config
	store        Store
	licensing    Licensing
	entitlements Entitlements
	manifestSigs sigCache
	now          func() time.Time
}

// New returns a Server.
func New(cfg Config, s Store, l Licensing, e Entitlements) *Server {
	return &Server{cfg: cfg, store: s, licensing: l, entitlements: e, now: time.Now}
}

// Register adds the service to g.
func Register(g *grpc.Server, s *Server) { releasesv1.RegisterReleasesServiceServer(g, s) }

// MaxPublished is api.md's limit of published releases per product_id/channel/platform.
const MaxPublished = 500

// Messages of api.md and the addendum, verbatim.
var (
	errReleaseNotFound = apierr.NotFound("Release not found")
	errReservedProduct = apierr.Invalid("product_id uses a reserved prefix")
	errArtifactURL     = apierr.Invalid("artifact_url must be a valid http(s) URL")
	errDuplicate       = apierr.Conflict("A release already exists for this product_id/version/channel/platform")
	errPublishedLimit  = apierr.Forbidden("Release limit reached: at most %d published releases per product_id/channel/platform; unpublish one to register another", MaxPublished)
)

// reservedPrefix marks the internal self-licensing credential's product. It is checked
// on the product id as check-update compares it, so " _Service_x" is refused too.
const reservedPrefix = "_service_"

const defaultChannel = "stable"

// Field caps of api.md's Release table, in Unicode code points (addendum §7).
const (
	maxProductID    = 200
	maxVersion      = 100
	maxChannel      = 100
	maxPlatform     = 100
	maxArtifactURL  = 2048
	maxChecksum     = 256
	maxReleaseNotes = 10000
)

func channelOrDefault(c string) string {
	if c == "" {
		return defaultChannel
	}
	return c
}

// checkText enforces a field's cap, and presence when required.
func checkText(name, v string, maxLen int, required bool) error {
	if required && strings.TrimSpace(v) == "" {
		return apierr.Invalid("%s is required", name)
	}
	if utf8.RuneCountInString(v) > maxLen {
		return apierr.Invalid("%s must be at most %d characters", name, maxLen)
	}
	if pgxx.HasNUL(v) {
		return apierr.Invalid("%s must not contain NUL characters", name)
	}
	return nil
}

// validArtifactURL: an absolute http or https URL with a valid host, and nothing a client
// would have to guess about (white space, control characters, invisible formatting
// characters such as zero-width spaces and bidi overrides, which make a URL read as
// another one).
func validArtifactURL(s string) bool {
	lower := strings.ToLower(s)
	if !strings.HasPrefix(lower, "http://") && !strings.HasPrefix(lower, "https://") {
		return false
	}
	if strings.IndexFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
	}) >= 0 {
		return false
	}
	u, err := url.Parse(s)
	if err != nil || !validPort(u) {
		return false
	}
	host := u.Hostname()
	if strings.HasPrefix(u.Host, "[") {
		// An IPv6 literal; a zone names an interface of the machine that reads the URL.
		addr, err := netip.ParseAddr(host)
		return err == nil && addr.Is6() && addr.Zone() == ""
	}
	return validDNSName(host) || validIPv4(host)
}

// validPort: no port, or one from 1 to 65535 (url.Parse takes any digits, and a colon
// with none after it).
func validPort(u *url.URL) bool {
	if strings.HasSuffix(u.Host, ":") {
		return false
	}
	p := u.Port()
	if p == "" {
		return true
	}
	n, ok := input.Decimal(p)
	return ok && n >= 1 && n <= 65535
}

func validIPv4(host string) bool {
	addr, err := netip.ParseAddr(host)
	return err == nil && addr.Is4()
}

// validDNSName: ASCII letters, digits and hyphens in dot-separated labels of 1 to 63
// characters that neither start nor end with a hyphen, at most 253 characters, and one
// trailing dot allowed (a fully qualified name). An internationalized name comes as
// punycode (xn--…): Unicode in a host is refused, so no look-alike or invisible character
// reaches the signed manifest. A last label of digits only is refused: URL parsers read
// such a host as an IPv4 address (1.2.3 is 1.2.0.3), so it is valid only as one.
func validDNSName(host string) bool {
	host = strings.TrimSuffix(host, ".")
	if host == "" || len(host) > 253 {
		return false
	}
	labels := strings.Split(host, ".")
	for _, l := range labels {
		if len(l) == 0 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
				return false
			}
		}
	}
	_, numeric := input.Decimal(labels[len(labels)-1])
	return !numeric
}

// newRelease validates a register-release request into the row to insert (unsigned).
func newRelease(req *releasesv1.RegisterReleaseRequest) (*store.NewRelease, error) {
	channel := channelOrDefault(req.GetChannel())
	for _, f := range []struct {
		name, v  string
		max      int
		required bool
	}{
		{"product_id", req.GetProductId(), maxProductID, true},
		{"version", req.GetVersion(), maxVersion, true},
		{"channel", channel, maxChannel, false},
		{"platform", req.GetPlatform(), maxPlatform, false},
		{"artifact_url", req.GetArtifactUrl(), maxArtifactURL, true},
		{"checksum", req.GetChecksum(), maxChecksum, false},
		{"release_notes", req.GetReleaseNotes(), maxReleaseNotes, false},
	} {
		if err := checkText(f.name, f.v, f.max, f.required); err != nil {
			return nil, err
		}
	}
	key := license.ProductKey(req.GetProductId())
	if strings.HasPrefix(key, reservedPrefix) {
		return nil, errReservedProduct
	}
	if !validArtifactURL(req.GetArtifactUrl()) {
		return nil, errArtifactURL
	}
	return &store.NewRelease{
		Release: store.Release{
			ProductID: req.GetProductId(), Version: req.GetVersion(), Channel: channel, Platform: req.GetPlatform(),
			ArtifactURL: req.GetArtifactUrl(), Checksum: req.GetChecksum(), ReleaseNotes: req.GetReleaseNotes(),
		},
		ProductKey: key,
		Precedence: semver.KeyOf(req.GetVersion()),
	}, nil
}

// releaseFields is what a release's own signature covers (addendum §5), in that order.
// check-update's manifest is the same object plus issued_at.
func releaseFields(r *store.Release) *signing.Object {
	return signing.NewObject(
		signing.Field{Name: "product_id", Value: r.ProductID},
		signing.Field{Name: "version", Value: r.Version},
		signing.Field{Name: "channel", Value: r.Channel},
		signing.Field{Name: "platform", Value: r.Platform},
		signing.Field{Name: "artifact_url", Value: r.ArtifactURL},
		signing.Field{Name: "checksum", Value: r.Checksum},
		signing.Field{Name: "release_notes", Value: r.ReleaseNotes},
	)
}

// RegisterRelease stores a published release, signed once, now. Hosted, it claims the
// product for the tenant (licensing's claim, issue-license's), but only once the release
// is being written: a registration refused (a reused Idempotency-Key, a duplicate, the
// release limit) or failed claims nothing.
func (s *Server) RegisterRelease(ctx context.Context, req *releasesv1.RegisterReleaseRequest) (*releasesv1.RegisterReleaseResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	idemKey, err := idempotency.Key(ctx)
	if err != nil {
		return nil, err
	}
	r, err := newRelease(req)
	if err != nil {
		return nil, err
	}
	var claim func(context.Context) error
	if s.cfg.MultiTenant {
		// The subscription first, so a tenant that may not register cannot claim products.
		if _, err := s.entitlements.ActivePlan(ctx, tenant); err != nil {
			return nil, err
		}
		// Another tenant's product is refused here, before the release's own checks, as
		// it was when the claim came first; the check claims nothing.
		owned, err := s.licensing.ProductOwned(ctx, tenant, r.ProductID)
		if err != nil {
			return nil, err
		}
		if !owned {
			// The claim lives in licensing's database, the release in ours, so they cannot
			// commit together. It runs last in the release's transaction, after every check
			// that can refuse and after the insert: a claim lost to another tenant meanwhile
			// (403) or licensing unreachable (503) rolls the release back. What remains is a
			// claim whose release then fails to commit (our database lost between the claim
			// and the commit, or this process killed there): the product is left claimed by
			// the tenant that was about to own it by a registration that had passed every
			// check, which the same request retried completes.
			claim = func(ctx context.Context) error { return s.licensing.ClaimProduct(ctx, tenant, r.ProductID) }
		}
	}
	keyring, err := s.licensing.CurrentKeyring(ctx)
	if err != nil {
		return nil, err
	}
	if _, r.Signature, err = keyring.SignJSON(releaseFields(&r.Release)); err != nil {
		return nil, err
	}
	id, err := s.store.Register(ctx, tenant, idemKey, idempotency.RequestHash("RegisterRelease", req), r, MaxPublished, claim)
	switch {
	case errors.Is(err, store.ErrDuplicate):
		return nil, errDuplicate
	case errors.Is(err, store.ErrLimit):
		return nil, errPublishedLimit
	case err != nil:
		return nil, err
	}
	return &releasesv1.RegisterReleaseResponse{Id: id, Status: "published"}, nil
}

// ListReleases pages the tenant's releases, newest first, without signatures.
func (s *Server) ListReleases(ctx context.Context, req *releasesv1.ListReleasesRequest) (*releasesv1.ListReleasesResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	limit, offset, err := paging.Parse(req.GetLimit(), req.GetOffset())
	if err != nil {
		return nil, err
	}
	// Absent filters nothing; present it must name a status (`?status=` is refused).
	if req.Status != nil {
		if statuses := []string{"published", "unpublished"}; !slices.Contains(statuses, req.GetStatus()) {
			return nil, input.NotOneOf("status", statuses...)
		}
	}
	if pgxx.HasNUL(req.GetProductId(), req.GetChannel(), req.GetPlatform()) {
		return &releasesv1.ListReleasesResponse{Releases: []*releasesv1.ReleaseRow{}}, nil
	}
	rows, total, err := s.store.List(ctx, tenant, store.Filter{
		ProductKey: license.ProductKey(req.GetProductId()), Channel: req.GetChannel(), Platform: req.GetPlatform(),
		Status: req.GetStatus(), Limit: limit, Offset: offset,
	})
	if err != nil {
		return nil, err
	}
	resp := &releasesv1.ListReleasesResponse{Releases: make([]*releasesv1.ReleaseRow, len(rows)), Total: int32(total)}
	for i, r := range rows {
		resp.Releases[i] = &releasesv1.ReleaseRow{
			Id: r.ID, ProductId: r.ProductID, Version: r.Version, Channel: r.Channel, Platform: r.Platform,
			ArtifactUrl: r.ArtifactURL, Checksum: r.Checksum, ReleaseNotes: r.ReleaseNotes, Status: r.Status,
			CreatedAt: timestamppb.New(r.CreatedAt),
		}
	}
	return resp, nil
}

// releaseID reads an id; anything that is not a positive 32-bit integer in digits names
// no release ("+38" is not a number, as "abc" is not).
func releaseID(s string) (int32, bool) {
	n, ok := input.Decimal(s)
	return int32(n), ok && n > 0 && n <= math.MaxInt32
}

// GetRelease is the one view of a release with its signature.
func (s *Server) GetRelease(ctx context.Context, req *releasesv1.GetReleaseRequest) (*releasesv1.GetReleaseResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	id, ok := releaseID(req.GetId())
	if !ok {
		return nil, errReleaseNotFound
	}
	r, err := s.store.Get(ctx, tenant, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errReleaseNotFound
	}
	if err != nil {
		return nil, err
	}
	return &releasesv1.GetReleaseResponse{
		Id: r.ID, ProductId: r.ProductID, Version: r.Version, Channel: r.Channel, Platform: r.Platform,
		ArtifactUrl: r.ArtifactURL, Checksum: r.Checksum, ReleaseNotes: r.ReleaseNotes, Status: r.Status,
		Signature: r.Signature, CreatedAt: timestamppb.New(r.CreatedAt),
	}, nil
}

// UnpublishRelease takes a release out of update checks at once. There is no republish:
// registering the same version again makes a new release. Unpublishing an unpublished
// release changes nothing and answers the same.
func (s *Server) UnpublishRelease(ctx context.Context, req *releasesv1.UnpublishReleaseRequest) (*releasesv1.UnpublishReleaseResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	if req.Id == nil {
		return nil, apierr.Invalid("id is required")
	}
	if req.GetId() <= 0 {
		return nil, errReleaseNotFound
	}
	err = s.store.Unpublish(ctx, tenant, req.GetId())
	if errors.Is(err, store.ErrNotFound) {
		return nil, errReleaseNotFound
	}
	if err != nil {
		return nil, err
	}
	return &releasesv1.UnpublishReleaseResponse{Id: req.GetId(), Status: "unpublished"}, nil
}

// CheckUpdate answers an app: the latest published release of its product, channel and
// platform as a freshly signed manifest when it is newer than current_version (api.md's
// rules 1-7). A mismatch of product, channel or platform is "no update", not an error.
func (s *Server) CheckUpdate(ctx context.Context, req *releasesv1.CheckUpdateRequest) (*releasesv1.CheckUpdateResponse, error) {
	if err := checkUpdateFields(req); err != nil {
		return nil, err
	}
	l, err := s.licensing.License(ctx, "", req.GetKey())
	if err != nil {
		return nil, err
	}
	if err := licensingclient.Usable(l, s.now()); err != nil {
		return nil, err
	}
	if l.GetExpiresAt() != nil {
		// Any answer from here on holds only until the license expires.
		licensecache.AnnounceValidUntil(ctx, l.GetExpiresAt().AsTime())
	}
	asked, ok := latestAsked(l, req)
	if !ok {
		return noUpdate(), nil
	}
	// The license's tenant scopes the releases: a key never reaches another tenant's.
	latest, err := s.store.Latest(ctx, asked.Tenant, asked.ProductKey, asked.Channel, asked.Platform)
	if err != nil {
		return nil, err
	}
	return s.updateAnswer(ctx, req, latest)
}

// checkUpdateFields is what check-update refuses before looking the license up.
func checkUpdateFields(req *releasesv1.CheckUpdateRequest) error {
	if strings.TrimSpace(req.GetProductId()) == "" {
		return apierr.Invalid("product_id is required")
	}
	// White space only is no version, as a blank product_id is no product: without the
	// check it ranked below every release, and was offered the latest.
	if strings.TrimSpace(req.GetCurrentVersion()) == "" {
		return apierr.Invalid("current_version is required")
	}
	if req.GetKey() == "" {
		return license.ErrNotFound
	}
	return nil
}

func noUpdate() *releasesv1.CheckUpdateResponse {
	return &releasesv1.CheckUpdateResponse{UpdateAvailable: false}
}

// latestAsked is the channel whose latest release answers req for license l (in l's
// tenant); false when none can (another product than the license's, or a channel or
// platform no release can have).
func latestAsked(l *licensingv1.License, req *releasesv1.CheckUpdateRequest) (store.Channel, bool) {
	key := license.ProductKey(l.GetProductId())
	if license.ProductKey(req.GetProductId()) != key || pgxx.HasNUL(req.GetChannel(), req.GetPlatform()) {
		return store.Channel{}, false
	}
	return store.Channel{Tenant: l.GetTenantId(), ProductKey: key, Channel: channelOrDefault(req.GetChannel()), Platform: req.GetPlatform()}, true
}

// updateAnswer is check-update's answer once the latest release of the asked channel is
// known (nil: none published): the signed manifest when it is newer than the client's.
func (s *Server) updateAnswer(ctx context.Context, req *releasesv1.CheckUpdateRequest, latest *store.Release) (*releasesv1.CheckUpdateResponse, error) {
	if latest == nil || !semver.Newer(latest.Version, req.GetCurrentVersion()) {
		return noUpdate(), nil
	}
	// Whole seconds: printed identically by the signer (signing.FormatTime) and the REST
	// marshaler (protojson), and every answer about a release within one second is the
	// same manifest, so it is signed once (RSA PKCS #1 v1.5 is deterministic: caching
	// changes no byte of any answer, only the CPU spent).
	issuedAt := s.now().UTC().Truncate(time.Second)
	// A signature is reused only while the keyring kept is the one that made it: once a
	// signing found licensing's key changed (a rotation), none made before is given again.
	kept, err := s.licensing.Keyring(ctx)
	if err != nil {
		return nil, err
	}
	sig, ok := s.manifestSigs.get(latest.ID, issuedAt.Unix(), kept.KeyID())
	if !ok {
		keyring, err := s.licensing.CurrentKeyring(ctx)
		if err != nil {
			return nil, err
		}
		if _, sig, err = keyring.SignJSON(releaseFields(latest).Add("issued_at", issuedAt)); err != nil {
			return nil, err
		}
		s.manifestSigs.put(latest.ID, issuedAt.Unix(), keyring.KeyID(), sig)
	}
	return &releasesv1.CheckUpdateResponse{UpdateAvailable: true, Release: &releasesv1.Manifest{
		ProductId: latest.ProductID, Version: latest.Version, Channel: latest.Channel, Platform: latest.Platform,
		ArtifactUrl: latest.ArtifactURL, Checksum: latest.Checksum, ReleaseNotes: latest.ReleaseNotes,
		Signature: sig, IssuedAt: timestamppb.New(issuedAt),
	}}, nil
}
