// Package console is the web console at /console/ and the end-user portal at
// /portal/{token} (addendum §9): server-rendered pages from embedded templates, mounted by
// the gateway under the same host as /v1.
//
// The console holds no credential of its own. Signing in exchanges an API key (or a hosted
// email and password) for a console session token at the billing service; the cookie
// kh_session carries that token, and every page calls the services over gRPC with it as
// "authorization: Bearer", through the same auth interceptor as the REST API. A session
// therefore sees exactly what the tenant's API key sees, another tenant's objects are not
// found, and logout or a key rotation (which deletes the sessions) ends it on the next
// request. The portal passes its token to the few public methods that accept it.
package console

import (
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	accountsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	billingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/billing/v1"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	storefrontv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/storefront/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Conns are the service connections the pages call.
type Conns struct {
	Licensing, Activations, Releases, Billing, Storefront, Events *grpc.ClientConn
}

// Options configure New.
type Options struct {
	Log   *slog.Logger
	Conns Conns
	// MultiTenant is MULTI_TENANT: hosted sign-in by password, export, key rotation.
	MultiTenant bool
	// PublicBaseURL is PUBLIC_BASE_URL; an https URL makes the cookies Secure.
	PublicBaseURL string
	// ExportGate allows one data export per tenant per minute; nil allows every export.
	ExportGate ExportGate
	// TooManyRequests writes the API's 429 body and Retry-After (the rate limiter's own).
	TooManyRequests func(w http.ResponseWriter, retryAfter time.Duration)
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time
	// CSRFKey is the secret the sign-in form's CSRF token is derived with, the same on
	// every replica (the gateway passes ADMIN_API_KEY); empty picks a random one, good
	// for one process only.
	CSRFKey string
}

// ExportGate is the data export's one-per-minute limit, shared by every gateway replica.
type ExportGate interface {
	// Allow takes the tenant's export slot for a minute, or says how long until it frees.
	Allow(ctx context.Context, tenant string) (ok bool, retryAfter time.Duration)
}

// Handler serves /console/ and /portal/.
type Handler struct {
	opts   Options
	mux    *http.ServeMux
	pages  map[string]*template.Template
	secure bool
	// csrfKey derives the sign-in form's CSRF token (Options.CSRFKey).
	csrfKey string

	accounts    accountsv1.AccountsServiceClient
	consoleAuth accountsv1.ConsoleAccountsServiceClient
	licensing   licensingv1.LicensingServiceClient
	portal      licensingv1.LicensingPortalServiceClient
	activations activationsv1.ActivationsServiceClient
	seats       activationsv1.ActivationsConsoleServiceClient
	leases      activationsv1.LeasesServiceClient
	releases    releasesv1.ReleasesServiceClient
	billing     billingv1.BillingServiceClient
	// billingDetails says why a past_due subscription is not active (the Billing page).
	billingDetails billingv1.BillingConsoleServiceClient
	storefront     storefrontv1.StorefrontServiceClient
	// storefrontPortal names the product on the portal pages as the buyer emails do.
	storefrontPortal storefrontv1.StorefrontPortalServiceClient
	webhooks         eventsv1.WebhookEndpointsServiceClient
	events           eventsv1.EventsServiceClient
	apiKeys          accountsv1.ApiKeysServiceClient
}

// callTimeout bounds each service call a page makes.
const callTimeout = 5 * time.Second

// New returns the console and portal handler.
func New(opts Options) (*Handler, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	pages, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	c := opts.Conns
	h := &Handler{
		opts:             opts,
		mux:              http.NewServeMux(),
		pages:            pages,
		secure:           strings.HasPrefix(opts.PublicBaseURL, "https://"),
		csrfKey:          opts.CSRFKey,
		accounts:         accountsv1.NewAccountsServiceClient(c.Billing),
		consoleAuth:      accountsv1.NewConsoleAccountsServiceClient(c.Billing),
		licensing:        licensingv1.NewLicensingServiceClient(c.Licensing),
		portal:           licensingv1.NewLicensingPortalServiceClient(c.Licensing),
		activations:      activationsv1.NewActivationsServiceClient(c.Activations),
		seats:            activationsv1.NewActivationsConsoleServiceClient(c.Activations),
		leases:           activationsv1.NewLeasesServiceClient(c.Activations),
		releases:         releasesv1.NewReleasesServiceClient(c.Releases),
		billing:          billingv1.NewBillingServiceClient(c.Billing),
		billingDetails:   billingv1.NewBillingConsoleServiceClient(c.Billing),
		storefront:       storefrontv1.NewStorefrontServiceClient(c.Storefront),
		storefrontPortal: storefrontv1.NewStorefrontPortalServiceClient(c.Storefront),
		webhooks:         eventsv1.NewWebhookEndpointsServiceClient(c.Events),
		events:           eventsv1.NewEventsServiceClient(c.Events),
		apiKeys:          accountsv1.NewApiKeysServiceClient(c.Billing),
	}
	if h.csrfKey == "" {
		h.csrfKey = randomToken()
	}
	h.routes()
	return h, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	// Pages are for people: no framing, no sniffing, nothing cached, nothing loaded from
	// anywhere but this host.
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Referrer-Policy", "same-origin")
	// form-action allows https: because upgrading and managing billing redirect to Stripe.
	hdr.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; form-action 'self' https:; frame-ancestors 'none'; base-uri 'none'")
	if !strings.HasPrefix(r.URL.Path, "/console/static/") {
		hdr.Set("Cache-Control", "no-store")
	}
	if !h.allowedInput(w, r) {
		return
	}
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) routes() {
	m := h.mux
	static, _ := fs.Sub(staticFS, "static")
	m.Handle("GET /console/static/", http.StripPrefix("/console/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /console", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/console/", http.StatusMovedPermanently)
	})
	m.HandleFunc("GET /console/login", h.loginPage)
	m.HandleFunc("POST /console/login", h.login)
	m.HandleFunc("POST /console/logout", h.signedIn(h.logout))

	m.HandleFunc("GET /console/{$}", h.signedIn(h.dashboard))
	m.HandleFunc("GET /console/licenses", h.signedIn(h.licensesPage))
	m.HandleFunc("GET /console/licenses/new", h.signedIn(h.newLicensePage))
	m.HandleFunc("POST /console/licenses", h.signedIn(h.issueLicense))
	m.HandleFunc("GET /console/licenses/{key}", h.signedIn(h.licensePage))
	m.HandleFunc("GET /console/licenses/{key}/revoke", h.signedIn(h.revokeLicensePage))
	m.HandleFunc("POST /console/licenses/{key}/revoke", h.signedIn(h.revokeLicense))
	m.HandleFunc("GET /console/licenses/{key}/delete", h.signedIn(h.deleteLicensePage))
	m.HandleFunc("POST /console/licenses/{key}/delete", h.signedIn(h.deleteLicense))
	m.HandleFunc("POST /console/licenses/{key}/terms", h.signedIn(h.updateTerms))
	m.HandleFunc("POST /console/licenses/{key}/notes", h.signedIn(h.updateNotes))
	m.HandleFunc("GET /console/licenses/{key}/seats/deactivate", h.signedIn(h.deactivateSeatPage))
	m.HandleFunc("POST /console/licenses/{key}/seats/deactivate", h.signedIn(h.deactivateSeat))
	m.HandleFunc("POST /console/licenses/{key}/seats/reissue", h.signedIn(h.reissueToken))
	m.HandleFunc("GET /console/licenses/{key}/usage/reset", h.signedIn(h.resetUsagePage))
	m.HandleFunc("POST /console/licenses/{key}/usage/reset", h.signedIn(h.resetUsage))
	m.HandleFunc("POST /console/licenses/{key}/portal/reset", h.signedIn(h.resetPortalLink))

	m.HandleFunc("GET /console/releases", h.signedIn(h.releasesPage))
	m.HandleFunc("POST /console/releases", h.signedIn(h.registerRelease))
	m.HandleFunc("POST /console/releases/{id}/unpublish", h.signedIn(h.unpublishRelease))

	m.HandleFunc("GET /console/leases", h.signedIn(h.leaseKeysPage))
	m.HandleFunc("POST /console/leases/rotate", h.signedIn(h.rotateLeaseKeys))
	m.HandleFunc("GET /console/products", h.signedIn(h.productsPage))
	m.HandleFunc("GET /console/products/{product_id}", h.signedIn(h.productPage))
	m.HandleFunc("POST /console/products/{product_id}/policies", h.signedIn(h.savePolicy))
	m.HandleFunc("POST /console/products/{product_id}/policies/delete", h.signedIn(h.deletePolicy))

	m.HandleFunc("GET /console/billing", h.signedIn(h.billingPage))
	m.HandleFunc("POST /console/billing/checkout", h.signedIn(h.checkout))

	m.HandleFunc("GET /console/storefront", h.signedIn(h.storefrontPage))
	m.HandleFunc("POST /console/storefront/webhooks", h.signedIn(h.connectWebhook))
	m.HandleFunc("POST /console/storefront/webhooks/{id}/secret", h.signedIn(h.saveWebhookSecret))
	m.HandleFunc("POST /console/storefront/webhooks/{id}/disable", h.signedIn(h.disableWebhook))
	m.HandleFunc("POST /console/storefront/mappings", h.signedIn(h.createMapping))
	m.HandleFunc("POST /console/storefront/mappings/{id}/delete", h.signedIn(h.deleteMapping))

	m.HandleFunc("GET /console/events", h.signedIn(h.eventsPage))
	m.HandleFunc("GET /console/events/{id}", h.signedIn(h.eventPage))
	m.HandleFunc("POST /console/events/{id}/redeliver", h.signedIn(h.redeliverFromEvent))
	m.HandleFunc("GET /console/webhooks", h.signedIn(h.webhooksPage))
	m.HandleFunc("POST /console/webhooks", h.signedIn(h.createWebhookEndpoint))
	m.HandleFunc("GET /console/webhooks/{id}", h.signedIn(h.webhookPage))
	m.HandleFunc("POST /console/webhooks/{id}/update", h.signedIn(h.updateWebhookEndpoint))
	m.HandleFunc("POST /console/webhooks/{id}/ping", h.signedIn(h.pingWebhookEndpoint))
	m.HandleFunc("POST /console/webhooks/{id}/enable", h.signedIn(h.setWebhookEndpointEnabled(true)))
	m.HandleFunc("POST /console/webhooks/{id}/disable", h.signedIn(h.setWebhookEndpointEnabled(false)))
	m.HandleFunc("POST /console/webhooks/{id}/roll-secret", h.signedIn(h.rollWebhookSecret))
	m.HandleFunc("GET /console/webhooks/{id}/delete", h.signedIn(h.deleteWebhookEndpointPage))
	m.HandleFunc("POST /console/webhooks/{id}/delete", h.signedIn(h.deleteWebhookEndpoint))
	m.HandleFunc("POST /console/webhooks/{id}/redeliver", h.signedIn(h.redeliverEvent))

	m.HandleFunc("GET /console/api-keys", h.signedIn(h.apiKeysPage))
	m.HandleFunc("POST /console/api-keys", h.signedIn(h.createAPIKey))
	m.HandleFunc("GET /console/api-keys/{id}/delete", h.signedIn(h.deleteAPIKeyPage))
	m.HandleFunc("POST /console/api-keys/{id}/delete", h.signedIn(h.deleteAPIKey))
	m.HandleFunc("GET /console/settings", h.signedIn(h.settingsPage))
	m.HandleFunc("POST /console/settings/rotate-key", h.signedIn(h.rotateKey))
	m.HandleFunc("POST /console/settings/password", h.signedIn(h.setPassword))
	m.HandleFunc("POST /console/settings/portal", h.signedIn(h.setPortal))
	m.HandleFunc("POST /console/settings/mail", h.signedIn(h.setMailSettings))
	m.HandleFunc("GET /console/export", h.signedIn(h.export))

	m.HandleFunc("GET /portal/{token}", h.portalPage)
	m.HandleFunc("GET /portal/{token}/release", h.portalReleasePage)
	m.HandleFunc("POST /portal/{token}/release", h.portalRelease)
	// Pages served before the portal asked first post here: such a post gets the question.
	m.HandleFunc("POST /portal/{token}/deactivate", h.portalRelease)

	m.HandleFunc("/console/", h.notFound)
	m.HandleFunc("/portal/", h.notFound)
}

// AdminInfoRoutes are the console requests that count against the client IP's Admin-Info
// rate tier (addendum §9): sign-in attempts and data exports. The gateway's rate limiter
// reads this set; the pages are not part of the REST route table.
var AdminInfoRoutes = map[string]bool{
	"POST /console/login": true,
	"GET /console/export": true,
}

// OnPublicTier reports whether a request is an end-user portal page or action, which
// counts against the client IP's Public rate tier (500 per 15 minutes), the tier of the
// API's other routes that answer without an API key (public-key, export-license): a
// portal link is a bearer token, and guessing or hammering one costs the same budget.
func OnPublicTier(path string) bool { return strings.HasPrefix(path, "/portal/") }

// withCredential returns ctx carrying the session token for a service call.
func withCredential(ctx context.Context, token string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	return ctx, cancel
}

// apiError is what a failed call tells the person: the API's own message and the HTTP
// status the REST edge would have answered.
type apiError struct {
	Status  int
	Message string
}

func (e *apiError) Error() string { return e.Message }

// asAPIError turns a gRPC error into the message and status of the REST API.
func asAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	st := status.Convert(err)
	// The gateway's rule: a transport failure (a backend down, gRPC's text naming its
	// address) is the generic 503 text, any unexpected error the one 500 text.
	return &apiError{Status: apierr.HTTPStatus(st), Message: apierr.PublicMessage(context.Background(), st)}
}

func isUnauthenticated(err error) bool { return status.Code(err) == codes.Unauthenticated }
