package config

import (
	"bufio"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"
)

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func TestDefaultsFollowTheAddendum(t *testing.T) {
	c, err := LoadFrom(env(map[string]string{"ADMIN_API_KEY": "k"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Port != 8080 || c.MultiTenant || c.AdminRateLimitMax != 300 || len(c.TrustedProxies) != 0 ||
		c.LogLevel != "info" || c.LogFormat != "json" || c.PublicBaseURL != "http://localhost:8080" || c.EmailProvider != "log" {
		t.Fatalf("defaults %+v", c)
	}
}

func TestInvalidValuesAreAllReportedAtOnce(t *testing.T) {
	_, err := LoadFrom(env(map[string]string{
		"PORT": "http", "MULTI_TENANT": "maybe", "ADMIN_RATE_LIMIT_MAX": "0", "RATE_LIMIT_REDIS_TIMEOUT": "0s",
		"TRUSTED_PROXIES": "10.0.0.0/8, nonsense", "EMAIL_PROVIDER": "smtp", "STRIPE_API_BASE": "localhost:12111",
	}))
	if err == nil {
		t.Fatal("want an error")
	}
	for _, name := range []string{"PORT", "MULTI_TENANT", "ADMIN_RATE_LIMIT_MAX", "RATE_LIMIT_REDIS_TIMEOUT", "TRUSTED_PROXIES", "ADMIN_API_KEY", "SMTP_URL", "EMAIL_FROM", "STRIPE_API_BASE"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error does not name %s: %v", name, err)
		}
	}
}

func TestTrustedProxiesAcceptCIDRsAndBareAddresses(t *testing.T) {
	c, err := LoadFrom(env(map[string]string{"ADMIN_API_KEY": "k", "TRUSTED_PROXIES": "10.1.2.3/8, 192.168.0.1 ,::1"}))
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.0.1/32"), netip.MustParsePrefix("::1/128")}
	if fmt.Sprint(c.TrustedProxies) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", c.TrustedProxies, want)
	}
}

func TestSecretsNeverPrint(t *testing.T) {
	c, err := LoadFrom(env(map[string]string{
		"ADMIN_API_KEY": "super-secret-admin", "DATABASE_URL": "postgres://u:dbpass@h/db",
		"REDIS_URL": "redis://:redispass@h:6379/0", "SMTP_URL": "smtp://u:mailpass@h:25",
		"NATS_URL": "nats://u:natspass@h:4222",
	}))
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		out := fmt.Sprintf(format, c)
		for _, secret := range []string{"super-secret-admin", "dbpass", "redispass", "mailpass", "natspass"} {
			if strings.Contains(out, secret) {
				t.Errorf("%s prints %q", format, secret)
			}
		}
	}
	if c.AdminAPIKey.Reveal() != "super-secret-admin" {
		t.Fatal("Reveal must return the value")
	}
}

func TestRuntimeDurationsAndMetricsPort(t *testing.T) {
	c, err := LoadFrom(env(map[string]string{"ADMIN_API_KEY": "k"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.RequestTimeout != 5*time.Second || c.ShutdownDelay != 5*time.Second || c.ShutdownTimeout != 25*time.Second {
		t.Fatalf("defaults: timeout %v delay %v drain %v", c.RequestTimeout, c.ShutdownDelay, c.ShutdownTimeout)
	}
	if addr, err := c.MetricsAddr(":9101"); err != nil || addr != ":10101" {
		t.Fatalf("default metrics addr %q %v, want :10101", addr, err)
	}
	c, err = LoadFrom(env(map[string]string{"ADMIN_API_KEY": "k", "REQUEST_TIMEOUT": "1500ms", "SHUTDOWN_DELAY": "0", "SHUTDOWN_TIMEOUT": "3", "METRICS_PORT": "9999"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.RequestTimeout != 1500*time.Millisecond || c.ShutdownDelay != 0 || c.ShutdownTimeout != 3*time.Second {
		t.Fatalf("parsed: timeout %v delay %v drain %v", c.RequestTimeout, c.ShutdownDelay, c.ShutdownTimeout)
	}
	if addr, _ := c.MetricsAddr("127.0.0.1:8080"); addr != "127.0.0.1:9999" {
		t.Fatalf("METRICS_PORT addr %q", addr)
	}
	_, err = LoadFrom(env(map[string]string{"ADMIN_API_KEY": "k", "REQUEST_TIMEOUT": "soon", "SHUTDOWN_TIMEOUT": "0s", "METRICS_PORT": "70000"}))
	for _, name := range []string{"REQUEST_TIMEOUT", "SHUTDOWN_TIMEOUT", "METRICS_PORT"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("error does not name %s: %v", name, err)
		}
	}
}

// migrate (and any command but serve) loads Common only: no admin key needed, so the Helm
// migrate Job gets none; serve still refuses to start without one.
func TestOnlyServeNeedsTheAdminKey(t *testing.T) {
	c, err := LoadCommonFrom(env(map[string]string{"DATABASE_URL": "postgres://u@h/db", "LOG_LEVEL": "debug"}))
	if err != nil {
		t.Fatalf("common config without an admin key: %v", err)
	}
	if c.DatabaseURL.Reveal() != "postgres://u@h/db" || c.LogLevel != "debug" || c.LogFormat != "json" {
		t.Fatalf("common %+v", c)
	}
	if _, err := LoadFrom(env(map[string]string{"DATABASE_URL": "postgres://u@h/db"})); err == nil || !strings.Contains(err.Error(), "ADMIN_API_KEY") {
		t.Fatalf("serve config without an admin key: %v", err)
	}
	full, err := LoadFrom(env(map[string]string{"ADMIN_API_KEY": "k", "DATABASE_URL": "postgres://u@h/db"}))
	if err != nil || full.DatabaseURL != c.DatabaseURL {
		t.Fatalf("serve config carries the common part: %+v, %v", full, err)
	}
}

func TestLicenseCacheTTLIsADurationAndZeroTurnsTheCacheOff(t *testing.T) {
	for v, want := range map[string]time.Duration{"": time.Second, "250ms": 250 * time.Millisecond, "0": 0} {
		c, err := LoadFrom(env(map[string]string{"ADMIN_API_KEY": "k", "LICENSE_CACHE_TTL": v}))
		if err != nil || c.LicenseCacheTTL != want {
			t.Errorf("LICENSE_CACHE_TTL=%q: %v %v, want %v", v, c, err, want)
		}
	}
	for _, v := range []string{"soon", "-1s"} {
		if _, err := LoadFrom(env(map[string]string{"ADMIN_API_KEY": "k", "LICENSE_CACHE_TTL": v})); err == nil || !strings.Contains(err.Error(), "LICENSE_CACHE_TTL") {
			t.Errorf("LICENSE_CACHE_TTL=%q: %v", v, err)
		}
	}
}

func TestLogLicenseKeysIsMaskedUnlessFull(t *testing.T) {
	// In any case, as LOG_LEVEL and LOG_FORMAT are read.
	for v, want := range map[string]bool{"": false, "masked": false, "full": true, "FULL": true, "Masked": false} {
		c, err := LoadCommonFrom(env(map[string]string{"LOG_LICENSE_KEYS": v}))
		if err != nil || c.LogFullLicenseKeys != want {
			t.Errorf("LOG_LICENSE_KEYS=%q: %+v %v, want full=%v", v, c, err, want)
		}
	}
	if _, err := LoadCommonFrom(env(map[string]string{"LOG_LICENSE_KEYS": "yes"})); err == nil || !strings.Contains(err.Error(), "LOG_LICENSE_KEYS") {
		t.Fatalf("an unknown LOG_LICENSE_KEYS value is refused naming the variable: %v", err)
	}
}

func TestLicenseCacheLiveTTLDefaultsToFiveMinutes(t *testing.T) {
	for v, want := range map[string]time.Duration{"": 5 * time.Minute, "30s": 30 * time.Second, "0": 0} {
		c, err := LoadFrom(env(map[string]string{"ADMIN_API_KEY": "k", "LICENSE_CACHE_LIVE_TTL": v}))
		if err != nil || c.LicenseCacheLiveTTL != want {
			t.Errorf("LICENSE_CACHE_LIVE_TTL=%q: %v %v, want %v", v, c, err, want)
		}
	}
	if _, err := LoadFrom(env(map[string]string{"ADMIN_API_KEY": "k", "LICENSE_CACHE_LIVE_TTL": "-1s"})); err == nil || !strings.Contains(err.Error(), "LICENSE_CACHE_LIVE_TTL") {
		t.Errorf("LICENSE_CACHE_LIVE_TTL=-1s: %v", err)
	}
}

func TestAdmissionControlIsOnByDefaultAndItsBoundsAreChecked(t *testing.T) {
	c, err := LoadFrom(env(map[string]string{"ADMIN_API_KEY": "k"}))
	if err != nil || c.AdmissionMaxLimit != 1000 || c.AdmissionMinLimit != 16 || c.AdmissionTolerance != 2 ||
		c.AdmissionLatencyFloor != 40*time.Millisecond {
		t.Fatalf("defaults: %v %+v", err, c)
	}
	c, err = LoadFrom(env(map[string]string{"ADMIN_API_KEY": "k", "ADMISSION_MAX_LIMIT": "0"}))
	if err != nil || c.AdmissionMaxLimit != 0 {
		t.Fatalf("ADMISSION_MAX_LIMIT=0 turns it off: %v %+v", err, c)
	}
	for name, vars := range map[string]map[string]string{
		"ADMISSION_MAX_LIMIT":         {"ADMISSION_MAX_LIMIT": "-1"},
		"ADMISSION_MIN_LIMIT":         {"ADMISSION_MAX_LIMIT": "10", "ADMISSION_MIN_LIMIT": "20"},
		"ADMISSION_LATENCY_TOLERANCE": {"ADMISSION_LATENCY_TOLERANCE": "0.5"},
		"ADMISSION_LATENCY_FLOOR":     {"ADMISSION_LATENCY_FLOOR": "-1ms"},
	} {
		vars["ADMIN_API_KEY"] = "k"
		if _, err := LoadFrom(env(vars)); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%v: %v; want an error naming %s", vars, err, name)
		}
	}
	if _, err := LoadFrom(env(map[string]string{"ADMIN_API_KEY": "k", "ADMISSION_LATENCY_TOLERANCE": "lots"})); err == nil || !strings.Contains(err.Error(), "ADMISSION_LATENCY_TOLERANCE") {
		t.Errorf("a tolerance that is not a number: %v", err)
	}
}

// NATS_STREAM_REPLICAS is unset by default (a stream is created with one copy and an
// existing one keeps its count); a count JetStream cannot keep is refused at start.
func TestNATSStreamReplicasIsUnsetByDefaultAndBounded(t *testing.T) {
	c, err := LoadFrom(env(map[string]string{"ADMIN_API_KEY": "k"}))
	if err != nil || c.NATSStreamReplicas != 0 {
		t.Fatalf("default: %v %d", err, c.NATSStreamReplicas)
	}
	c, err = LoadFrom(env(map[string]string{"ADMIN_API_KEY": "k", "NATS_STREAM_REPLICAS": "3"}))
	if err != nil || c.NATSStreamReplicas != 3 {
		t.Fatalf("NATS_STREAM_REPLICAS=3: %v %d", err, c.NATSStreamReplicas)
	}
	for _, v := range []string{"0", "6", "-1", "three"} {
		_, err := LoadFrom(env(map[string]string{"ADMIN_API_KEY": "k", "NATS_STREAM_REPLICAS": v}))
		if err == nil || !strings.Contains(err.Error(), "NATS_STREAM_REPLICAS") {
			t.Errorf("NATS_STREAM_REPLICAS=%s: %v; want an error naming the variable", v, err)
		}
	}
}

// LOG_LEVEL and LOG_FORMAT are checked like every other variable: a value the logger does
// not understand stops the process with a message naming the variable, where it used to
// start at info or in JSON without a word. The spellings that worked keep working.
func TestLogLevelAndFormatAreValidated(t *testing.T) {
	for _, v := range map[string][2]string{"debug": {"debug", "text"}, "upper": {"WARN", "JSON"}, "offset": {"debug-4", "Text"}, "error": {"error", "json"}} {
		c, err := LoadCommonFrom(env(map[string]string{"LOG_LEVEL": v[0], "LOG_FORMAT": v[1]}))
		if err != nil {
			t.Errorf("LOG_LEVEL=%s LOG_FORMAT=%s: %v", v[0], v[1], err)
			continue
		}
		if c.LogLevel != v[0] || c.LogFormat != strings.ToLower(v[1]) {
			t.Errorf("LOG_LEVEL=%s LOG_FORMAT=%s read as %q %q", v[0], v[1], c.LogLevel, c.LogFormat)
		}
	}
	for name, value := range map[string]string{"LOG_LEVEL": "verbose", "LOG_FORMAT": "xml"} {
		_, err := LoadCommonFrom(env(map[string]string{name: value}))
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%s: want an error naming %s, got %v", name, value, name, err)
		}
		// serve's loader refuses it too (it reads the common part the same way).
		if _, err := LoadFrom(env(map[string]string{"ADMIN_API_KEY": strings.Repeat("k", 32), name: value})); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("serve, %s=%s: want an error naming %s, got %v", name, value, name, err)
		}
	}
	for _, want := range []string{"must be one of debug, info, warn, error", "must be one of json, text"} {
		_, err := LoadCommonFrom(env(map[string]string{"LOG_LEVEL": "verbose", "LOG_FORMAT": "xml"}))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in %v", want, err)
		}
	}
}

// A short admin key is warned about at start, naming the variable and never the value;
// a long one, or none (ADMIN_API_KEY_PREVIOUS unset), draws nothing.
func TestAShortAdminKeyIsAWarningNotARefusal(t *testing.T) {
	c, err := LoadFrom(env(map[string]string{"ADMIN_API_KEY": "abc", "ADMIN_API_KEY_PREVIOUS": "old-short"}))
	if err != nil {
		t.Fatalf("a short admin key stops the process: %v", err)
	}
	var out strings.Builder
	c.LogWarnings(slog.New(slog.NewTextHandler(&out, nil)))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "level=WARN") || !strings.HasSuffix(lines[0], "variable=ADMIN_API_KEY") ||
		!strings.HasSuffix(lines[1], "variable=ADMIN_API_KEY_PREVIOUS") || !strings.Contains(out.String(), "at least 32 random characters") {
		t.Fatalf("warnings:\n%s", out.String())
	}
	if strings.Contains(out.String(), "abc") || strings.Contains(out.String(), "old-short") {
		t.Fatalf("a warning prints the key:\n%s", out.String())
	}
	long, err := LoadFrom(env(map[string]string{"ADMIN_API_KEY": strings.Repeat("k", MinAdminKeyLength)}))
	if err != nil {
		t.Fatal(err)
	}
	if w := long.Warnings(); len(w) != 0 {
		t.Fatalf("a key of %d characters draws %v", MinAdminKeyLength, w)
	}
}

// ADMIN_API_KEY_PREVIOUS is optional, read once here, and never prints.
func TestPreviousAdminKeyIsOptionalAndSecret(t *testing.T) {
	c, err := LoadFrom(env(map[string]string{"ADMIN_API_KEY": "k"}))
	if err != nil || c.AdminAPIKeyPrevious != "" {
		t.Fatalf("unset: %q %v", c.AdminAPIKeyPrevious.Reveal(), err)
	}
	c, err = LoadFrom(env(map[string]string{"ADMIN_API_KEY": "new-admin-key", "ADMIN_API_KEY_PREVIOUS": " old-admin-key "}))
	if err != nil || c.AdminAPIKeyPrevious.Reveal() != "old-admin-key" {
		t.Fatalf("set: %q %v", c.AdminAPIKeyPrevious.Reveal(), err)
	}
	if out := fmt.Sprintf("%+v %#v", c, c); strings.Contains(out, "old-admin-key") {
		t.Fatalf("the previous key prints: %s", out)
	}
}

// The admin key printed in deploy/systemd/keyhouse.env.example is long enough to draw no
// short-key warning and known to anyone: a process left on it, as ADMIN_API_KEY or as
// ADMIN_API_KEY_PREVIOUS, refuses to start, naming the variable and not echoing the key.
func TestThePublishedExampleKeyIsRefused(t *testing.T) {
	f, err := os.Open("../../deploy/systemd/keyhouse.env.example")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	example := map[string]string{}
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && !strings.HasPrefix(k, "#") {
			example[k] = v
		}
	}
	placeholder := example["ADMIN_API_KEY"]
	if len(placeholder) < MinAdminKeyLength {
		t.Fatalf("the example's ADMIN_API_KEY %q is short: the short-key warning covers it, update this test", placeholder)
	}
	// The example file as a whole, as an operator who forgot to edit the key would run it.
	if _, err := LoadFrom(env(example)); err == nil || !strings.Contains(err.Error(), "ADMIN_API_KEY is the placeholder of a published example") {
		t.Fatalf("the example's environment: %v, want ADMIN_API_KEY refused", err)
	} else if strings.Contains(err.Error(), placeholder) {
		t.Fatalf("the refusal echoes the key: %v", err)
	}
	_, err = LoadFrom(env(map[string]string{"ADMIN_API_KEY": strings.Repeat("k", 32), "ADMIN_API_KEY_PREVIOUS": placeholder}))
	if err == nil || !strings.Contains(err.Error(), "ADMIN_API_KEY_PREVIOUS is the placeholder") {
		t.Fatalf("as the previous key: %v", err)
	}
	example["ADMIN_API_KEY"] = strings.Repeat("k", 32)
	if _, err := LoadFrom(env(example)); err != nil {
		t.Fatalf("the example with a key of its own: %v", err)
	}
}

// A retention shorter than what the documentation promises is a WARN at start naming the
// variable, its value and what it breaks: RECORD_RETENTION under Stripe's 72 h of retries
// (a bare 90, meant as days, is 90 seconds), EVENT_RETENTION under the 72 h a webhook
// receiver may be down. The defaults, 0 (records kept for ever) and 72 h draw nothing.
func TestShortRetentionsAreWarnedAbout(t *testing.T) {
	key := strings.Repeat("k", MinAdminKeyLength)
	warnings := func(vars map[string]string) string {
		t.Helper()
		vars["ADMIN_API_KEY"] = key
		c, err := LoadFrom(env(vars))
		if err != nil {
			t.Fatalf("%v: a short retention stops the process: %v", vars, err)
		}
		var out strings.Builder
		c.LogWarnings(slog.New(slog.NewTextHandler(&out, nil)))
		return out.String()
	}
	for _, quiet := range []map[string]string{
		{},
		{"RECORD_RETENTION": "0", "EVENT_RETENTION": "72h"},
		{"RECORD_RETENTION": "72h", "EVENT_RETENTION": "259200"},
	} {
		if out := warnings(quiet); out != "" {
			t.Errorf("%v warns:\n%s", quiet, out)
		}
	}
	out := warnings(map[string]string{"RECORD_RETENTION": "90"})
	for _, want := range []string{"level=WARN", "config: RECORD_RETENTION is 1m30s (a bare number is seconds)", "72h Stripe retries", "a second license and a second buyer email", "variable=RECORD_RETENTION"} {
		if !strings.Contains(out, want) {
			t.Errorf("RECORD_RETENTION=90: no %q in\n%s", want, out)
		}
	}
	out = warnings(map[string]string{"EVENT_RETENTION": "24h"})
	for _, want := range []string{"level=WARN", "config: EVENT_RETENTION is 24h0m0s", "72h a webhook receiver may be down", "variable=EVENT_RETENTION"} {
		if !strings.Contains(out, want) {
			t.Errorf("EVENT_RETENTION=24h: no %q in\n%s", want, out)
		}
	}
	if n := strings.Count(warnings(map[string]string{"RECORD_RETENTION": "71h", "EVENT_RETENTION": "1h"}), "level=WARN"); n != 2 {
		t.Errorf("both short: %d warnings, want 2", n)
	}
}
