// Package config is the one configuration loader: flat environment variables with
// defaults in code, validated at start. Every command of every binary loads Common (the
// database and logging); `serve` loads Config, which adds what serving needs, so `migrate`
// runs without an admin key. A variable is read here only once some code reads its field.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/keyhouse/keyhouse/pkg/webhook"
)

// Service gRPC addresses. Each service listens on its own and dials the others.
const (
	DefaultLicensingAddr   = "127.0.0.1:9101"
	DefaultActivationsAddr = "127.0.0.1:9102"
	DefaultReleasesAddr    = "127.0.0.1:9103"
	DefaultBillingAddr     = "127.0.0.1:9104"
	DefaultStorefrontAddr  = "127.0.0.1:9105"
	DefaultEventsAddr      = "127.0.0.1:9106"
)

// Common is what every command needs (serve, migrate): the database and the logs.
type Common struct {
	DatabaseURL Secret
	LogLevel    string
	LogFormat   string
	// LogFullLicenseKeys (LOG_LICENSE_KEYS=full) writes license keys whole in log lines;
	// the default, "masked", keeps their first and last four characters.
	LogFullLicenseKeys bool
}

// Config is what `serve` needs: Common, the variables of addendum §1 that running code
// reads, and the wiring between services.
type Config struct {
	Common

	Port        int
	MultiTenant bool
	AdminAPIKey Secret
	// AdminAPIKeyPrevious (ADMIN_API_KEY_PREVIOUS) is accepted beside AdminAPIKey during a
	// rotation, and presented to a peer that refuses AdminAPIKey (one still on the old
	// key), so a rolling restart onto a new key breaks no call between services
	// (docs/operations.md, "Rotating the admin key"). Empty outside a rotation.
	AdminAPIKeyPrevious Secret
	AdminRateLimitMax   int
	// RateLimitRedisTimeout bounds each of the gateway's rate-limit round trips to Redis;
	// past it the gateway counts in process until Redis answers again (docs/operations.md).
	RateLimitRedisTimeout time.Duration
	TrustedProxies        []netip.Prefix
	RedisURL              Secret
	NATSURL               Secret
	// NATSStreamReplicas is how many JetStream servers hold each stream the services
	// create (NATS_STREAM_REPLICAS, 1 to 5); 0 (unset) creates a stream with one and leaves
	// an existing stream's count as it is, so that one set by hand is not undone.
	NATSStreamReplicas int
	// PublicBaseURL is where clients reach the gateway (storefront callback URLs, mail links).
	PublicBaseURL string
	// WebhookAllowPrivateNetworks lets hosted webhook endpoints reach private addresses
	// (WEBHOOK_ALLOW_PRIVATE_NETWORKS); self-hosted always may.
	WebhookAllowPrivateNetworks bool
	// WebhookRetryFirst and WebhookRetryMax shape the webhook retry schedule: the first
	// retry's delay, doubling up to the max, for 72 h (WEBHOOK_RETRY_FIRST, WEBHOOK_RETRY_MAX).
	WebhookRetryFirst time.Duration
	WebhookRetryMax   time.Duration

	// Mail (the storefront's buyer email, pkg/mail).
	EmailProvider string
	SMTPURL       Secret
	EmailFrom     string
	EmailReplyTo  string

	// Hosted billing (services/billing/internal/payments): Stripe's API and webhooks.
	StripeSecretKey       Secret
	StripeWebhookSecret   Secret
	StripePriceProMonthly string
	StripePriceProAnnual  string
	// StripeAPIBase points the Stripe client elsewhere (stripe-mock in tests).
	StripeAPIBase string

	// GRPCAddr is where this process serves gRPC; empty means the service's default.
	GRPCAddr        string
	LicensingAddr   string
	ActivationsAddr string
	ReleasesAddr    string
	BillingAddr     string
	StorefrontAddr  string
	EventsAddr      string

	// EventRetention is how long the event log keeps an event (EVENT_RETENTION).
	EventRetention time.Duration

	// LicenseCacheTTL is how long a cached license row is served without a fresh read
	// (pkg/licensecache); 0 turns the cache off.
	LicenseCacheTTL time.Duration
	// LicenseCacheLiveTTL is how long the gateway (and activations and releases, their
	// license lookups) serves a cached answer while it can prove it has seen every change
	// event (pkg/licensecache's liveness: sequence numbers and the publishers' heartbeats);
	// past LicenseCacheTTL, only while that proof holds. Each answer lives it less up to a
	// fifth at random, so answers loaded together do not expire together. At or below
	// LicenseCacheTTL it changes nothing.
	LicenseCacheLiveTTL time.Duration

	// RecordRetention is how long records of received events are kept (RECORD_RETENTION,
	// default 90 days): storefront deliveries and fulfillments, billing's Stripe events.
	// 0 keeps them for ever.
	RecordRetention time.Duration

	// SigningKeysFile optionally points at operator-supplied signing material.
	SigningKeysFile string

	// LeaseSweepInterval is how often activations removes floating seats whose lease
	// lapsed (LEASE_SWEEP_INTERVAL; addendum §12 wants them gone within 15 s).
	LeaseSweepInterval time.Duration
	// LeaseMinTTL is the shortest lease_ttl a policy may set (LEASE_MIN_TTL, 60 s by the
	// contract; only tests lower it, to watch leases lapse).
	LeaseMinTTL time.Duration

	// RequestTimeout is every request's budget (REQUEST_TIMEOUT): the gateway cuts each
	// HTTP request to it, and services apply it to gRPC calls that arrive without a deadline.
	RequestTimeout time.Duration
	// ShutdownDelay is how long a process keeps serving after SIGTERM while reporting
	// not-ready, so load balancers stop sending (SHUTDOWN_DELAY).
	ShutdownDelay time.Duration
	// ShutdownTimeout bounds the drain of in-flight requests after the delay (SHUTDOWN_TIMEOUT).
	ShutdownTimeout time.Duration
	// MetricsPort is the Prometheus port (METRICS_PORT); 0 means the process's own port
	// + 1000 (see MetricsAddr).
	MetricsPort int

	// AdmissionMaxLimit and AdmissionMinLimit bound the gateway's adaptive concurrency
	// limit (ADMISSION_MAX_LIMIT, ADMISSION_MIN_LIMIT); AdmissionMaxLimit 0 turns admission
	// control off. AdmissionTolerance is how many times the baseline latency the average
	// may reach before the limit shrinks (ADMISSION_LATENCY_TOLERANCE); an average under
	// AdmissionLatencyFloor never shrinks it (ADMISSION_LATENCY_FLOOR).
	AdmissionMaxLimit     int
	AdmissionMinLimit     int
	AdmissionTolerance    float64
	AdmissionLatencyFloor time.Duration
}

// MaxNATSStreamReplicas is the most copies JetStream keeps of a stream.
const MaxNATSStreamReplicas = 5

// The defaults of ADMISSION_MAX_LIMIT, ADMISSION_MIN_LIMIT and ADMISSION_LATENCY_TOLERANCE,
// which the gateway's limiter also takes for a setting left zero.
const (
	DefaultAdmissionMaxLimit  = 1000
	DefaultAdmissionMinLimit  = 16
	DefaultAdmissionTolerance = 2.0
)

// defaultAdmissionLatencyFloor is ADMISSION_LATENCY_FLOOR's default. It sits above what a
// gateway that is merely full shows: on a 2-core machine the requests that take a slot
// (the cache's misses) averaged 18–25 ms at capacity, so a floor of 20 ms turned a load
// the stack answers in full into refusals, which cost a third of an answer each and came
// back at once from clients that ignore Retry-After (docs/performance-history.md, tenth round).
const defaultAdmissionLatencyFloor = 40 * time.Millisecond

// Secret is a string that never prints itself.
type Secret string

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// GoString keeps %#v from leaking the value too.
func (s Secret) GoString() string { return s.String() }

// Reveal returns the actual value, for the one place that needs it.
func (s Secret) Reveal() string { return string(s) }

// LoadCommon reads what every command needs from the environment.
func LoadCommon() (*Common, error) { return LoadCommonFrom(os.LookupEnv) }

// LoadCommonFrom reads Common through lookup, so tests need not touch the process env.
func LoadCommonFrom(lookup func(string) (string, bool)) (*Common, error) {
	r := reader{lookup: lookup}
	c := r.common()
	if len(r.errs) > 0 {
		return nil, errors.Join(r.errs...)
	}
	return &c, nil
}

func (r *reader) common() Common {
	return Common{
		DatabaseURL: Secret(r.str("DATABASE_URL", "postgres://postgres@127.0.0.1:55432/keyhouse?sslmode=disable")),
		LogLevel:    r.logLevel("LOG_LEVEL", "info"),
		LogFormat:   strings.ToLower(r.oneOfFold("LOG_FORMAT", "json", "json", "text")),

		LogFullLicenseKeys: strings.EqualFold(r.oneOfFold("LOG_LICENSE_KEYS", "masked", "masked", "full"), "full"),
	}
}

// Load reads what `serve` needs from the environment.
func Load() (*Config, error) { return LoadFrom(os.LookupEnv) }

// LoadFrom reads Config through lookup, so tests need not touch the process env.
func LoadFrom(lookup func(string) (string, bool)) (*Config, error) {
	r := reader{lookup: lookup}
	c := &Config{
		Common:                r.common(),
		Port:                  r.int("PORT", 8080),
		MultiTenant:           r.bool("MULTI_TENANT", false),
		AdminAPIKey:           Secret(r.str("ADMIN_API_KEY", "")),
		AdminAPIKeyPrevious:   Secret(r.str("ADMIN_API_KEY_PREVIOUS", "")),
		AdminRateLimitMax:     r.int("ADMIN_RATE_LIMIT_MAX", 300),
		RateLimitRedisTimeout: r.duration("RATE_LIMIT_REDIS_TIMEOUT", 100*time.Millisecond),
		TrustedProxies:        r.prefixes("TRUSTED_PROXIES"),
		RedisURL:              Secret(r.str("REDIS_URL", "redis://127.0.0.1:56379/0")),
		NATSURL:               Secret(r.str("NATS_URL", "nats://127.0.0.1:54222")),
		NATSStreamReplicas:    r.int("NATS_STREAM_REPLICAS", 0),
		PublicBaseURL:         strings.TrimRight(r.str("PUBLIC_BASE_URL", "http://localhost:8080"), "/"),

		WebhookAllowPrivateNetworks: r.bool("WEBHOOK_ALLOW_PRIVATE_NETWORKS", false),
		WebhookRetryFirst:           r.duration("WEBHOOK_RETRY_FIRST", 30*time.Second),
		WebhookRetryMax:             r.duration("WEBHOOK_RETRY_MAX", 8*time.Hour),

		EmailProvider: r.str("EMAIL_PROVIDER", "log"),
		SMTPURL:       Secret(r.str("SMTP_URL", "")),
		EmailFrom:     r.str("EMAIL_FROM", ""),
		EmailReplyTo:  r.str("EMAIL_REPLY_TO", ""),

		StripeSecretKey:       Secret(r.str("STRIPE_SECRET_KEY", "")),
		StripeWebhookSecret:   Secret(r.str("STRIPE_WEBHOOK_SECRET", "")),
		StripePriceProMonthly: r.str("STRIPE_PRICE_PRO_MONTHLY", ""),
		StripePriceProAnnual:  r.str("STRIPE_PRICE_PRO_ANNUAL", ""),
		StripeAPIBase:         r.str("STRIPE_API_BASE", ""),

		GRPCAddr:        r.str("GRPC_ADDR", ""),
		LicensingAddr:   r.str("LICENSING_ADDR", DefaultLicensingAddr),
		ActivationsAddr: r.str("ACTIVATIONS_ADDR", DefaultActivationsAddr),
		ReleasesAddr:    r.str("RELEASES_ADDR", DefaultReleasesAddr),
		BillingAddr:     r.str("BILLING_ADDR", DefaultBillingAddr),
		StorefrontAddr:  r.str("STOREFRONT_ADDR", DefaultStorefrontAddr),
		EventsAddr:      r.str("EVENTS_ADDR", DefaultEventsAddr),
		EventRetention:  r.duration("EVENT_RETENTION", 2160*time.Hour),

		LicenseCacheTTL:     r.duration("LICENSE_CACHE_TTL", time.Second),
		LicenseCacheLiveTTL: r.duration("LICENSE_CACHE_LIVE_TTL", 5*time.Minute),
		RecordRetention:     r.duration("RECORD_RETENTION", 90*24*time.Hour),
		SigningKeysFile:     r.str("SIGNING_KEYS_FILE", ""),

		LeaseSweepInterval: r.duration("LEASE_SWEEP_INTERVAL", 5*time.Second),
		LeaseMinTTL:        r.duration("LEASE_MIN_TTL", time.Minute),

		RequestTimeout:  r.duration("REQUEST_TIMEOUT", 5*time.Second),
		ShutdownDelay:   r.duration("SHUTDOWN_DELAY", 5*time.Second),
		ShutdownTimeout: r.duration("SHUTDOWN_TIMEOUT", 25*time.Second),
		MetricsPort:     r.int("METRICS_PORT", 0),

		AdmissionMaxLimit:     r.int("ADMISSION_MAX_LIMIT", DefaultAdmissionMaxLimit),
		AdmissionMinLimit:     r.int("ADMISSION_MIN_LIMIT", DefaultAdmissionMinLimit),
		AdmissionTolerance:    r.float("ADMISSION_LATENCY_TOLERANCE", DefaultAdmissionTolerance),
		AdmissionLatencyFloor: r.duration("ADMISSION_LATENCY_FLOOR", defaultAdmissionLatencyFloor),
	}
	if c.AdmissionMaxLimit < 0 {
		r.fail("ADMISSION_MAX_LIMIT", "must be 0 (off) or positive")
	}
	if c.AdmissionMinLimit < 1 || (c.AdmissionMaxLimit > 0 && c.AdmissionMinLimit > c.AdmissionMaxLimit) {
		r.fail("ADMISSION_MIN_LIMIT", "must be at least 1 and at most ADMISSION_MAX_LIMIT")
	}
	if c.AdmissionTolerance < 1 {
		r.fail("ADMISSION_LATENCY_TOLERANCE", "must be a number of at least 1")
	}
	if c.AdmissionLatencyFloor < 0 {
		r.fail("ADMISSION_LATENCY_FLOOR", "must be 0 (none) or a positive duration")
	}
	if r.str("NATS_STREAM_REPLICAS", "") != "" && (c.NATSStreamReplicas < 1 || c.NATSStreamReplicas > MaxNATSStreamReplicas) {
		r.fail("NATS_STREAM_REPLICAS", fmt.Sprintf("must be 1 to %d (each stream's copies, on that many JetStream servers)", MaxNATSStreamReplicas))
	}
	if c.RequestTimeout <= 0 {
		r.fail("REQUEST_TIMEOUT", "must be positive")
	}
	if c.LeaseSweepInterval <= 0 || c.LeaseSweepInterval > 15*time.Second {
		r.fail("LEASE_SWEEP_INTERVAL", "must be positive and at most 15s")
	}
	if c.LeaseMinTTL < time.Second || c.LeaseMinTTL > time.Minute {
		r.fail("LEASE_MIN_TTL", "must be between 1s and 1m")
	}
	if c.ShutdownTimeout <= 0 {
		r.fail("SHUTDOWN_TIMEOUT", "must be positive")
	}
	if c.EventRetention <= 0 {
		r.fail("EVENT_RETENTION", "must be positive")
	}
	if c.WebhookRetryFirst <= 0 || c.WebhookRetryMax < c.WebhookRetryFirst {
		r.fail("WEBHOOK_RETRY_FIRST", "must be positive and at most WEBHOOK_RETRY_MAX")
	}
	if c.MetricsPort < 0 || c.MetricsPort > 65535 {
		r.fail("METRICS_PORT", "must be a TCP port")
	}
	if c.Port < 1 || c.Port > 65535 {
		r.fail("PORT", "must be a TCP port")
	}
	if c.AdminRateLimitMax < 1 {
		r.fail("ADMIN_RATE_LIMIT_MAX", "must be a positive integer")
	}
	if c.RateLimitRedisTimeout <= 0 {
		r.fail("RATE_LIMIT_REDIS_TIMEOUT", "must be a positive duration")
	}
	if c.AdminAPIKey == "" {
		r.fail("ADMIN_API_KEY", "is required")
	}
	for _, k := range c.adminKeys() {
		if slices.Contains(PublishedPlaceholderKeys, k.value.Reveal()) {
			r.fail(k.name, "is the placeholder of a published example (deploy/systemd/keyhouse.env.example), which anyone can read: set it to at least 32 random characters (openssl rand -hex 32)")
		}
	}
	if u, err := url.Parse(c.PublicBaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		r.fail("PUBLIC_BASE_URL", "must be an absolute http(s) URL")
	}
	if c.StripeAPIBase != "" {
		if u, err := url.Parse(c.StripeAPIBase); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			r.fail("STRIPE_API_BASE", "must be an absolute http(s) URL")
		}
	}
	switch c.EmailProvider {
	case "log":
	case "smtp":
		if c.SMTPURL == "" {
			r.fail("SMTP_URL", "is required when EMAIL_PROVIDER=smtp")
		}
		if c.EmailFrom == "" {
			r.fail("EMAIL_FROM", "is required when EMAIL_PROVIDER=smtp")
		}
	default:
		r.fail("EMAIL_PROVIDER", "must be log or smtp")
	}
	if len(r.errs) > 0 {
		return nil, errors.Join(r.errs...)
	}
	return c, nil
}

// MinAdminKeyLength is the shortest admin key (ADMIN_API_KEY, ADMIN_API_KEY_PREVIOUS) that
// draws no warning at start: docs/operations.md asks for at least 32 random characters.
const MinAdminKeyLength = 32

// PublishedPlaceholderKeys are admin keys printed in the repository's examples
// (deploy/systemd/keyhouse.env.example). Long enough to draw no short-key warning, and
// known to anyone who reads the repository: a process given one as ADMIN_API_KEY or
// ADMIN_API_KEY_PREVIOUS refuses to start.
var PublishedPlaceholderKeys = []string{"change-me-to-at-least-32-random-characters"}

// StripeRetryWindow is how long Stripe retries a webhook event it could not deliver
// (three days). Billing and the storefront recognise a retry by the record of its first
// arrival, kept for RECORD_RETENTION (docs/billing.md, docs/storefront.md).
const StripeRetryWindow = 72 * time.Hour

// Warning is a setting that works but that the documentation advises against. It names
// the variable, and never the value of a secret.
type Warning struct {
	Variable string
	Advice   string
}

// Warnings lists what the process logs at WARN once it has a logger. They are warnings,
// not refusals: installations (and compose files, and tests) running on such a setting
// today would otherwise stop starting on an upgrade, while the key's strength is the
// operator's to choose, and a short retention can be an operator's deliberate trade (the
// records and events hold buyers' emails) against what it breaks, which the warning says.
func (c *Config) Warnings() []Warning {
	var out []Warning
	for _, k := range c.adminKeys() {
		if k.value != "" && len(k.value) < MinAdminKeyLength {
			out = append(out, Warning{Variable: k.name, Advice: fmt.Sprintf(
				"is shorter than %d characters: anyone who guesses it has every admin route; use at least %d random characters (openssl rand -hex 32)",
				MinAdminKeyLength, MinAdminKeyLength)})
		}
	}
	// 0 keeps the records for ever.
	if c.RecordRetention > 0 && c.RecordRetention < StripeRetryWindow {
		out = append(out, Warning{Variable: "RECORD_RETENTION", Advice: fmt.Sprintf(
			"is %s (a bare number is seconds), shorter than the %.0fh Stripe retries an event for: a retry that arrives after its record is deleted is taken for a new event, and a storefront purchase gets a second license and a second buyer email; use at least %.0fh (the default is 2160h)",
			c.RecordRetention, StripeRetryWindow.Hours(), StripeRetryWindow.Hours())})
	}
	if window := webhook.DefaultSchedule.Window; c.EventRetention < window {
		out = append(out, Warning{Variable: "EVENT_RETENTION", Advice: fmt.Sprintf(
			"is %s (a bare number is seconds), shorter than the %.0fh a webhook receiver may be down (docs/webhooks.md): events are deleted before such a receiver can follow the log or redeliver what it missed; use at least %.0fh (the default is 2160h)",
			c.EventRetention, window.Hours(), window.Hours())})
	}
	return out
}

// namedSecret is a secret setting and the variable it was read from.
type namedSecret struct {
	name  string
	value Secret
}

// adminKeys are the admin keys the process holds (ADMIN_API_KEY, ADMIN_API_KEY_PREVIOUS),
// each checked the same way.
func (c *Config) adminKeys() []namedSecret {
	return []namedSecret{{"ADMIN_API_KEY", c.AdminAPIKey}, {"ADMIN_API_KEY_PREVIOUS", c.AdminAPIKeyPrevious}}
}

// LogWarnings writes each of Warnings as one WARN line naming its variable.
func (c *Config) LogWarnings(log *slog.Logger) {
	for _, w := range c.Warnings() {
		log.Warn("config: "+w.Variable+" "+w.Advice, "variable", w.Variable)
	}
}

type reader struct {
	lookup func(string) (string, bool)
	errs   []error
}

func (r *reader) fail(name, why string) {
	r.errs = append(r.errs, fmt.Errorf("config: %s %s", name, why))
}

func (r *reader) str(name, def string) string {
	if v, ok := r.lookup(name); ok && strings.TrimSpace(v) != "" {
		return strings.TrimSpace(v)
	}
	return def
}

// oneOfFold reads a variable that must be one of allowed, in any case (def when unset):
// the log settings were always read so (LOG_FORMAT=TEXT gave text), an installation that
// spells them in capitals must not stop starting now that other values are refused, and
// LOG_LICENSE_KEYS, the third log setting, reads the same way.
func (r *reader) oneOfFold(name, def string, allowed ...string) string {
	v := r.str(name, def)
	for _, a := range allowed {
		if strings.EqualFold(v, a) {
			return v
		}
	}
	r.fail(name, "must be one of "+strings.Join(allowed, ", "))
	return def
}

// logLevel reads a log level as slog parses it (debug, info, warn or error, in any case,
// optionally with an offset such as debug-4): what pkg/telemetry's logger understands,
// so a level it would have replaced with info (LOG_LEVEL=verbose) stops the process
// instead.
func (r *reader) logLevel(name, def string) string {
	v := r.str(name, def)
	var level slog.Level
	if err := level.UnmarshalText([]byte(v)); err != nil {
		r.fail(name, "must be one of debug, info, warn, error")
		return def
	}
	return v
}

func (r *reader) int(name string, def int) int {
	v := r.str(name, "")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		r.fail(name, "must be an integer")
		return def
	}
	return n
}

// float reads a decimal number.
func (r *reader) float(name string, def float64) float64 {
	v := r.str(name, "")
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		r.fail(name, "must be a number")
		return def
	}
	return f
}

// duration reads a Go duration ("5s", "250ms") or a whole number of seconds.
func (r *reader) duration(name string, def time.Duration) time.Duration {
	v := r.str(name, "")
	if v == "" {
		return def
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		r.fail(name, "must be a duration such as 5s or 250ms")
		return def
	}
	return d
}

// MetricsAddr is where this process serves /metrics: METRICS_PORT, or by default the port
// of listenAddr (the process's own HTTP or gRPC address) + 1000, on the same host.
func (c *Config) MetricsAddr(listenAddr string) (string, error) {
	host, port, err := net.SplitHostPort(listenAddr)
	if err != nil {
		return "", fmt.Errorf("config: cannot derive the metrics port from %q: %w", listenAddr, err)
	}
	if c.MetricsPort != 0 {
		return net.JoinHostPort(host, strconv.Itoa(c.MetricsPort)), nil
	}
	p, err := strconv.Atoi(port)
	if err != nil || p == 0 || p+1000 > 65535 {
		return "", fmt.Errorf("config: set METRICS_PORT: the default (port %s + 1000) is not a usable port", port)
	}
	return net.JoinHostPort(host, strconv.Itoa(p+1000)), nil
}

func (r *reader) bool(name string, def bool) bool {
	v := r.str(name, "")
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.fail(name, "must be true or false")
		return def
	}
	return b
}

func (r *reader) prefixes(name string) []netip.Prefix {
	var out []netip.Prefix
	for _, part := range strings.Split(r.str(name, ""), ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if !strings.Contains(part, "/") {
			if a, err := netip.ParseAddr(part); err == nil {
				out = append(out, netip.PrefixFrom(a, a.BitLen()))
				continue
			}
		}
		p, err := netip.ParsePrefix(part)
		if err != nil {
			r.fail(name, fmt.Sprintf("has an invalid CIDR %q", part))
			continue
		}
		out = append(out, p.Masked())
	}
	return out
}
