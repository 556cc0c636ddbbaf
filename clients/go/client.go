// Package keyhouse is the Go client of a Keyhouse license server: activation, online
// verification, usage metering, signed update checks, offline export verification, and
// Check, the offline-first verdict an app asks for at start and on a timer.
package keyhouse

import (
	"bytes"
	"context"
	cryptorand "crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config configures a Client. URL, ProductID and Key are required.
type Config struct {
	// URL is the server's base URL (https://licenses.example.com).
	URL string
	// ProductID is this app's product id (the lease audience).
	ProductID string
	// Key is the license key.
	Key string
	// PublicKeyPEM is the server's RSA public key (GET /v1/public-key), pinned in the app;
	// CheckUpdate and VerifyOfflineExport need it (or PublicKeyPEMs).
	PublicKeyPEM string
	// PublicKeyPEMs are more RSA public keys pinned in the app, each accepted as well: ship
	// every key GET /v1/public-keys lists (the current and, during a planned rotation, the
	// next one), so that the app keeps verifying manifests and offline exports after the
	// server promotes the next key.
	PublicKeyPEMs []string
	// LeaseKeys are the lease signing keys pinned in the app (the JSON of GET
	// /v1/lease-keys). A lease signed by a kid not in the set makes the client fetch the
	// set again once (key rotation); NoKeyRefresh turns that off.
	LeaseKeys    []byte
	NoKeyRefresh bool
	// TenantID pins the hosted tenant whose lease keys are fetched. Optional: without it
	// the client fetches the key set of the tenant its first lease names (the tenant_id
	// claim) and keeps to that tenant once a lease verified against it.
	TenantID string
	// StorePath is the file holding the activation token and the newest lease (written
	// atomically, mode 0600). Default: <user config dir>/keyhouse/<product id>.json.
	// Store replaces the file entirely.
	StorePath string
	Store     Store
	// Components are this machine's components; nil collects them with
	// MachineComponents (container mode keeps its install id beside the store file).
	Components map[string]string
	// RequestTimeout bounds each request (default 10 s).
	RequestTimeout time.Duration
	// HTTPClient sends the requests (default: a client of its own).
	HTTPClient *http.Client
	// Logger receives one line per failed request and per verdict change; never a key,
	// token or lease. Default: nothing is logged.
	Logger *slog.Logger
	// Now is the clock (tests move it); default time.Now.
	Now func() time.Time
	// OnLapsed is called once per lapse of a floating seat (its lease could not be renewed
	// before it ran out, or the server says it lapsed), with the verdict Check answers:
	// seat_lapsed.
	OnLapsed func(Verdict)
}

// Client talks to one license server for one license on this machine. It is safe for
// concurrent use.
type Client struct {
	cfg       Config
	http      *http.Client
	log       *slog.Logger
	pubs      []*rsa.PublicKey
	store     Store
	gate      gate
	mu        sync.Mutex
	keys      JWKS
	state     state
	renewing  bool
	renewDone chan struct{}
	// lapseReported is the floating lease whose lapse OnLapsed was told of.
	lapseReported string
	stop          chan struct{}
	stopOnce      sync.Once
	// after is the heartbeat's timer (time.After; the live tests move their clock instead).
	after func(time.Duration) <-chan time.Time
}

// New returns a client; it reads the store but sends nothing.
func New(cfg Config) (*Client, error) {
	if cfg.URL == "" || cfg.ProductID == "" || cfg.Key == "" {
		return nil, fmt.Errorf("keyhouse: URL, ProductID and Key are required")
	}
	cfg.URL = strings.TrimRight(cfg.URL, "/")
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Client{cfg: cfg, http: cfg.HTTPClient, log: cfg.Logger, store: cfg.Store, stop: make(chan struct{}), after: time.After}
	if c.http == nil {
		c.http = &http.Client{}
	}
	if c.log == nil {
		c.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	for _, pemText := range append([]string{cfg.PublicKeyPEM}, cfg.PublicKeyPEMs...) {
		if pemText == "" {
			continue
		}
		pub, err := ParsePublicKey(pemText)
		if err != nil {
			return nil, err
		}
		c.pubs = append(c.pubs, pub)
	}
	if len(cfg.LeaseKeys) > 0 {
		keys, err := ParseJWKS(cfg.LeaseKeys)
		if err != nil {
			return nil, fmt.Errorf("keyhouse: LeaseKeys: %w", err)
		}
		c.keys = keys
	}
	if c.store == nil {
		path := cfg.StorePath
		if path == "" {
			dir, err := os.UserConfigDir()
			if err != nil {
				return nil, fmt.Errorf("keyhouse: no StorePath and no user config dir: %w", err)
			}
			path = filepath.Join(dir, "keyhouse", regexp.MustCompile(`[^A-Za-z0-9._-]`).ReplaceAllString(cfg.ProductID, "_")+".json")
		}
		c.store = FileStore(path)
		if cfg.Components == nil {
			cfg.Components = MachineComponents(cfg.ProductID, ComponentOptions{InstallIDPath: path + ".install-id"})
		}
	} else if cfg.Components == nil {
		cfg.Components = MachineComponents(cfg.ProductID, ComponentOptions{})
	}
	c.cfg = cfg
	if err := c.load(); err != nil {
		return nil, err
	}
	c.gate.rand = rand.Float64
	if c.state.SuspendedAt != 0 {
		// The server answered a suspension less than a minute ago: a restarted app keeps the pace.
		c.gate.pace(cfg.Now(), time.Unix(c.state.SuspendedAt, 0))
	}
	return c, nil
}

// Failure backoff: after the n-th failure in a row (no answer, 429 or 5xx) the client
// sends nothing for max(Retry-After, MinFailingInterval, a draw in [0, min(MaxBackoff,
// MinFailingInterval·2^(n-1))]) — exponential backoff with full jitter that never lets
// one client send more than one request a minute to a failing server.
//
// A 403 Tenant is suspended (a hosted server whose operator suspended the vendor's
// account) is paced apart, at the refusals' pace: nothing for max(Retry-After,
// MinFailingInterval) after it, one probe at a time, with no growth, so an app whose lease
// ran out meanwhile is licensed within a minute of the suspension being lifted.
const (
	MinFailingInterval = time.Minute
	MaxBackoff         = 30 * time.Minute
)

// The outcomes of a request, for the gate.
type outcome int

const (
	outcomeAnswer     outcome = iota // an answer of the server (200, or a 4xx other than a suspension)
	outcomeFailure                   // no answer, 429, 5xx
	outcomeSuspension                // 403 Tenant is suspended
)

type gate struct {
	mu       sync.Mutex
	failures int
	// paced: the last answer was a suspension; the client keeps to one probe at a time.
	paced bool
	next  time.Time
	rand  func() float64
}

func (g *gate) admit(now time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now.Before(g.next) {
		wait := g.next.Sub(now)
		msg := "server failing; next request in "
		if g.paced && g.failures == 0 {
			msg = "tenant suspended; next request in "
		}
		return &Error{Code: "backing_off", Message: msg + wait.Round(time.Second).String(), RetryAfter: wait}
	}
	if g.failures > 0 || g.paced {
		// One probe at a time while failing or suspended: hold the others until this one
		// answers.
		g.next = now.Add(MinFailingInterval)
	}
	return nil
}

// pace holds the client after a suspension answered at `at` (restored from the store).
func (g *gate) pace(now, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if next := at.Add(MinFailingInterval); !now.Before(at) && now.Before(next) {
		g.paced, g.next = true, next
	}
}

func (g *gate) record(now time.Time, o outcome, retryAfter time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch o {
	case outcomeAnswer:
		g.failures, g.paced, g.next = 0, false, time.Time{}
		return
	case outcomeSuspension:
		// The server works and refuses the vendor's account: the refusals' pace, a minute
		// (or the server's Retry-After), with no growth; a run of failures ends here.
		g.failures, g.paced = 0, true
		g.next = now.Add(max(MinFailingInterval, retryAfter))
		return
	}
	g.failures++
	ceiling := MinFailingInterval << min(g.failures-1, 10)
	if ceiling > MaxBackoff {
		ceiling = MaxBackoff
	}
	wait := time.Duration(g.rand() * float64(ceiling))
	wait = max(wait, MinFailingInterval, retryAfter)
	g.next = now.Add(wait)
}

// do sends one JSON request and decodes a 200 answer into out.
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	return c.send(ctx, method, path, body, out, nil, true)
}

// send is do with extra headers; gated false skips the failure backoff's admission, for
// the bounded retries of one track-usage increment (their failures are still recorded).
func (c *Client) send(ctx context.Context, method, path string, body, out any, headers map[string]string, gated bool) error {
	if gated {
		if err := c.gate.admit(c.cfg.Now()); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	var reader io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		reader = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.cfg.URL+path, reader)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	for name, value := range headers {
		req.Header.Set(name, value)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.gate.record(c.cfg.Now(), outcomeFailure, 0)
		c.log.Warn("keyhouse: no answer", "route", path, "error", redactURL(err.Error(), c.cfg.URL))
		return &Error{Code: "unreachable", Message: "server unreachable", err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		c.gate.record(c.cfg.Now(), outcomeFailure, 0)
		return &Error{Code: "unreachable", Message: "answer cut short", err: err}
	}
	now := c.cfg.Now()
	retryAfter := parseRetryAfter(resp.Header.Get("Retry-After"), now)
	var e struct {
		Error string `json:"error"`
	}
	code := ""
	if resp.StatusCode != 200 {
		_ = json.Unmarshal(data, &e)
		if e.Error == "" {
			e.Error = http.StatusText(resp.StatusCode)
		}
		code = codeFor(resp.StatusCode, e.Error)
	}
	switch {
	case resp.StatusCode == 429 || resp.StatusCode >= 500:
		c.gate.record(now, outcomeFailure, retryAfter)
	case code == "tenant_suspended":
		c.gate.record(now, outcomeSuspension, retryAfter)
		c.noteSuspension(now)
	default:
		c.gate.record(now, outcomeAnswer, retryAfter)
		c.noteSuspension(time.Time{})
	}
	if resp.StatusCode != 200 {
		c.log.Warn("keyhouse: request refused", "route", path, "status", resp.StatusCode, "code", code)
		return &Error{Status: resp.StatusCode, Code: code, Message: e.Error, RetryAfter: retryAfter}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return &Error{Status: 200, Code: "server_error", Message: "answer is not the expected JSON"}
		}
	}
	return nil
}

// noteSuspension keeps in the store when the server last answered 403 Tenant is
// suspended (at), or forgets it (zero at) once the server answers anything else: while it
// is kept, a lease past its exp, or none, answers tenant_suspended, and a restarted app
// keeps the pace.
func (c *Client) noteSuspension(at time.Time) {
	var unix int64
	if !at.IsZero() {
		unix = at.Unix()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state.SuspendedAt == unix {
		return
	}
	c.state.SuspendedAt = unix
	_ = c.saveLocked()
}

// redactURL keeps the server's address out of nothing but itself: transport errors
// carry the URL, which holds no secret, but a path could (export routes hold keys).
func redactURL(msg, base string) string {
	if i := strings.Index(msg, base); i >= 0 {
		rest := msg[i+len(base):]
		end := strings.IndexAny(rest, "\": ")
		if end < 0 {
			end = len(rest)
		}
		return msg[:i] + base + "/…" + rest[end:]
	}
	return msg
}

func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// License is what verify-license answers for a valid license.
type License struct {
	Valid     bool               `json:"valid"`
	Tier      string             `json:"tier"`
	ProductID string             `json:"product_id"`
	Limits    map[string]float64 `json:"limits"`
	ExpiresAt *time.Time         `json:"expires_at"`
	IssuedAt  time.Time          `json:"issued_at"`
	Status    string             `json:"status"`
}

// Verify asks the server whether the license is valid (POST /v1/verify-license). An
// invalid license is an error: ErrLicenseNotFound, ErrLicenseExpired, ErrLicenseNotActive.
func (c *Client) Verify(ctx context.Context) (*License, error) {
	var out License
	if err := c.do(ctx, "POST", "/v1/verify-license", map[string]string{"key": c.cfg.Key}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Validate asks whether this machine's seat is valid (POST /v1/validate-license with the
// activated instance id).
func (c *Client) Validate(ctx context.Context) (bool, error) {
	c.mu.Lock()
	instance := c.state.InstanceID
	c.mu.Unlock()
	if instance == "" {
		return false, &Error{Code: "not_activated", Message: "not activated on this machine"}
	}
	var out struct {
		Valid bool `json:"valid"`
	}
	err := c.do(ctx, "POST", "/v1/validate-license", map[string]string{"key": c.cfg.Key, "instance_id": instance}, &out)
	return out.Valid, err
}

// InstanceID is this machine's instance id for Activate: InstanceID of the client's
// components (Config.Components, else MachineComponents), or, with none, of the host
// name hashed with the product id. Stable across runs and reinstalls, different on
// another machine, and never a raw identifier.
func (c *Client) InstanceID() string {
	if id := InstanceID(c.cfg.Components); id != "" {
		return id
	}
	host, _ := os.Hostname()
	return InstanceID(map[string]string{"hostname": HashComponent(c.cfg.ProductID, host)})
}

// Activation is the answer of Activate.
type Activation struct {
	// AlreadyActivated: the seat existed. Its token is the one stored by the first
	// activation on this machine, or, when the store had none (a reinstall), a new one
	// the server gave for the seat bound to this machine.
	AlreadyActivated bool
	InstanceID       string
}

// Activate takes a seat for instanceID (POST /v1/activate-license; Client.InstanceID
// gives this machine's) and stores its token. When the seat exists but the store holds no
// token for it (the app was reinstalled, its store lost), a seat bound to this machine is
// proven by its components instead and gets a new token (POST /v1/leases with instance_id,
// docs/leases.md "Reinstall"); an unbound seat cannot be, and answers
// ErrInvalidActivationToken: release it (the customer portal) and activate again. Before
// taking a seat it asks verify-license for the license's product: a license of another
// product answers ErrWrongProduct and takes no seat.
func (c *Client) Activate(ctx context.Context, instanceID string) (*Activation, error) {
	c.mu.Lock()
	held := c.state.InstanceID == instanceID && c.state.Token != ""
	c.mu.Unlock()
	if !held {
		// A license of another product would take a seat whose leases this app refuses
		// (wrong_product): refuse it here, before a seat is taken.
		lic, err := c.Verify(ctx)
		if err != nil {
			return nil, err
		}
		if lic.ProductID != c.cfg.ProductID {
			return nil, &Error{Code: "wrong_product", Message: "the license is for another product than this app's; no seat was taken"}
		}
	}
	var out struct {
		Activated        bool   `json:"activated"`
		AlreadyActivated bool   `json:"alreadyActivated"`
		Token            string `json:"token"`
	}
	if err := c.do(ctx, "POST", "/v1/activate-license", map[string]string{"key": c.cfg.Key, "instance_id": instanceID}, &out); err != nil {
		return nil, err
	}
	var lease string
	if out.Token == "" && !held {
		var err error
		if out.Token, lease, err = c.reinstall(ctx, instanceID); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if out.Token != "" || c.state.InstanceID != instanceID {
		c.state = state{Key: c.cfg.Key, InstanceID: instanceID, Token: out.Token, Lease: lease, NewestIAT: c.state.NewestIAT, Keys: c.state.Keys, TenantID: c.state.TenantID}
	}
	if err := c.saveLocked(); err != nil {
		return nil, err
	}
	return &Activation{AlreadyActivated: out.AlreadyActivated, InstanceID: instanceID}, nil
}

// reinstall gets a new token for an existing seat bound to this machine. The lease that
// comes with it is stored unverified: Check verifies a stored lease before believing it.
func (c *Client) reinstall(ctx context.Context, instanceID string) (token, lease string, err error) {
	var out struct {
		Lease string `json:"lease"`
		Token string `json:"token"`
	}
	err = c.do(ctx, "POST", "/v1/leases", map[string]any{"key": c.cfg.Key, "instance_id": instanceID, "components": c.cfg.Components}, &out)
	var e *Error
	if errors.As(err, &e) && e.Code == "invalid_activation_token" {
		return "", "", &Error{Status: e.Status, Code: e.Code, Message: "the seat of this instance id exists but its token was lost, and the seat is not bound to this machine: release the seat and activate again"}
	}
	if err == nil && out.Token == "" {
		err = &Error{Status: 200, Code: "server_error", Message: "the reinstall answer has no token"}
	}
	return out.Token, out.Lease, err
}

// Deactivate frees this machine's seat (POST /v1/deactivate-license) and forgets its
// token and lease. It reports whether a seat was freed.
func (c *Client) Deactivate(ctx context.Context) (bool, error) {
	c.mu.Lock()
	token := c.state.Token
	c.mu.Unlock()
	if token == "" {
		return false, &Error{Code: "not_activated", Message: "not activated on this machine"}
	}
	var out struct {
		Deactivated bool `json:"deactivated"`
	}
	if err := c.do(ctx, "POST", "/v1/deactivate-license", map[string]string{"key": c.cfg.Key, "token": token}, &out); err != nil {
		return false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state = state{Key: c.cfg.Key, NewestIAT: c.state.NewestIAT, Keys: c.state.Keys, TenantID: c.state.TenantID}
	return out.Deactivated, c.saveLocked()
}

// UsageRetries is how many times TrackUsage sends one increment again after no answer or
// a 5xx, with the same Idempotency-Key (so it counts once), waiting UsageRetryDelay·2^i
// (with jitter) before the i-th retry.
const (
	UsageRetries    = 2
	UsageRetryDelay = 250 * time.Millisecond
)

// UsageOption tunes one TrackUsage call.
type UsageOption func(*usageOptions)

type usageOptions struct{ idempotencyKey string }

// WithIdempotencyKey sends key as the increment's Idempotency-Key instead of a fresh one:
// an app that retries an increment later (after TrackUsage failed) passes the same key,
// and the server counts it once (within 24 h).
func WithIdempotencyKey(key string) UsageOption {
	return func(o *usageOptions) { o.idempotencyKey = key }
}

// TrackUsage adds n to a metric of this seat (POST /v1/track-usage) and returns the new
// running total. Each call is one logical increment with one Idempotency-Key (a fresh
// one, or WithIdempotencyKey's): no answer or a 5xx is retried UsageRetries times with
// that key, so an increment whose answer was lost counts once.
func (c *Client) TrackUsage(ctx context.Context, metric string, n int64, opts ...UsageOption) (int64, error) {
	c.mu.Lock()
	token := c.state.Token
	c.mu.Unlock()
	if token == "" {
		return 0, &Error{Code: "not_activated", Message: "not activated on this machine"}
	}
	var o usageOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.idempotencyKey == "" {
		o.idempotencyKey = newIdempotencyKey()
	}
	body := map[string]any{"key": c.cfg.Key, "token": token, "metric": metric, "increment": n}
	headers := map[string]string{"Idempotency-Key": o.idempotencyKey}
	for attempt := 0; ; attempt++ {
		var out struct {
			Usage int64 `json:"usage"`
		}
		err := c.send(ctx, "POST", "/v1/track-usage", body, &out, headers, attempt == 0)
		var e *Error
		retry := errors.As(err, &e) && (e.Code == "unreachable" || e.Status >= 500)
		if !retry || attempt == UsageRetries {
			return out.Usage, err
		}
		wait := time.Duration(float64(UsageRetryDelay<<attempt) * (0.5 + c.gate.rand()))
		select {
		case <-ctx.Done():
			return 0, err
		case <-time.After(wait):
		}
	}
}

// newIdempotencyKey is a fresh key for one logical increment.
func newIdempotencyKey() string {
	b := make([]byte, 16)
	_, _ = cryptorand.Read(b)
	return "usage-" + hex.EncodeToString(b)
}

// UsageReport is the live usage snapshot of POST /v1/usage-report.
type UsageReport struct {
	Valid     bool       `json:"valid"`
	Status    string     `json:"status"`
	ExpiresAt *time.Time `json:"expires_at"`
	Metrics   []struct {
		Metric    string  `json:"metric"`
		Used      int64   `json:"used"`
		Limit     float64 `json:"limit"`
		Remaining float64 `json:"remaining"`
		Exceeded  bool    `json:"exceeded"`
	} `json:"metrics"`
}

// UsageReport reads the license's usage.
func (c *Client) UsageReport(ctx context.Context) (*UsageReport, error) {
	var out UsageReport
	if err := c.do(ctx, "POST", "/v1/usage-report", map[string]string{"key": c.cfg.Key}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CheckUpdate asks for a release newer than currentVersion (POST /v1/check-update). It
// returns nil when there is none, and a release only after VerifyManifest accepted it
// (signature, request, issued within ManifestSkew of now).
func (c *Client) CheckUpdate(ctx context.Context, currentVersion, channel, platform string) (*Release, error) {
	if len(c.pubs) == 0 {
		return nil, fmt.Errorf("keyhouse: CheckUpdate needs Config.PublicKeyPEM")
	}
	if channel == "" {
		channel = "stable"
	}
	req := UpdateRequest{ProductID: c.cfg.ProductID, Channel: channel, Platform: platform}
	var out struct {
		UpdateAvailable bool     `json:"update_available"`
		Release         *Release `json:"release"`
	}
	body := map[string]string{"key": c.cfg.Key, "product_id": req.ProductID, "channel": channel, "platform": platform, "current_version": currentVersion}
	if err := c.do(ctx, "POST", "/v1/check-update", body, &out); err != nil {
		return nil, err
	}
	if !out.UpdateAvailable || out.Release == nil {
		return nil, nil
	}
	if err := VerifyManifestAnyKey(out.Release, req, c.pubs, c.cfg.Now(), ManifestSkew); err != nil {
		return nil, err
	}
	return out.Release, nil
}

// VerifyOfflineExport checks an offline export with the pinned public keys at the
// client's clock.
func (c *Client) VerifyOfflineExport(exportJSON []byte) (*OfflineLicense, error) {
	if len(c.pubs) == 0 {
		return nil, fmt.Errorf("keyhouse: VerifyOfflineExport needs Config.PublicKeyPEM")
	}
	return VerifyOfflineExportAnyKey(exportJSON, c.pubs, c.cfg.Now())
}
