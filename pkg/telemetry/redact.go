package telemetry

import (
	"log/slog"
	"path"
	"strings"
)

// LogOption tunes NewLogger.
type LogOption func(*logSettings)

type logSettings struct {
	fullLicenseKeys bool
}

// FullLicenseKeys writes license keys whole in log lines (LOG_LICENSE_KEYS=full), for an
// operator who must match log lines to keys and accepts that the logs then hold them.
// By default a key is masked to its first and last four characters.
func FullLicenseKeys(full bool) LogOption {
	return func(s *logSettings) { s.fullLicenseKeys = full }
}

// secretAttrs name attributes whose value is a credential: they never reach a log line,
// whoever logs them. Activation and portal tokens, API keys, session ids and webhook or
// storefront signing secrets are bearer credentials; a log line outlives the secret's
// rotation and travels to places (log pipelines, support tickets) the secret must not.
var secretAttrs = map[string]bool{
	"token": true, "activation_token": true, "portal_token": true, "new_token": true,
	"api_key": true, "apikey": true, "admin_api_key": true, "authorization": true,
	"secret": true, "signing_secret": true, "webhook_secret": true, "password": true,
	"session": true, "session_id": true, "cookie": true, "csrf": true, "csrf_token": true,
}

// licenseKeyAttrs name attributes whose value is a license key: an identifier that also
// unlocks the license's public routes, so it is masked unless the operator asks otherwise.
var licenseKeyAttrs = map[string]bool{"key": true, "license_key": true}

// redactAttr is the logger's ReplaceAttr: it applies the two rules above to attributes by
// name, and RedactPath to request paths.
func (s logSettings) redactAttr(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() != slog.KindString {
		return a
	}
	name := strings.ToLower(a.Key)
	switch {
	case secretAttrs[name]:
		return slog.String(a.Key, "[redacted]")
	case licenseKeyAttrs[name] && !s.fullLicenseKeys:
		return slog.String(a.Key, MaskLicenseKey(a.Value.String()))
	case name == "path":
		return slog.String(a.Key, RedactPath(a.Value.String(), s.fullLicenseKeys))
	}
	return a
}

// MaskLicenseKey keeps a key's first and last four characters (enough to tell keys apart
// in a support conversation, far too little to use one). Keys shorter than 12 characters
// keep only their first two, so the mask never gives the whole key away.
func MaskLicenseKey(key string) string {
	r := []rune(key)
	switch {
	case len(r) == 0:
		return ""
	case len(r) < 12:
		return string(r[:min(2, len(r)/4)]) + "…"
	default:
		return string(r[:4]) + "…" + string(r[len(r)-4:])
	}
}

// pathSecrets lists the routes that carry a credential in their path: the segment after
// the prefix is a portal token (always hidden) or a license key (masked).
var pathSecrets = []struct {
	prefix     string
	licenseKey bool
}{
	{"/portal/", false},
	{"/v1/export-license/", true},
	{"/v1/list-activations/", true},
	{"/v1/admin/license/", true},
	{"/console/licenses/", true},
}

// RedactPath hides the portal token and masks the license key in a request path, so the
// access log can name the route without holding the credential. fullLicenseKeys leaves
// keys whole (LOG_LICENSE_KEYS=full); portal tokens are hidden regardless.
//
// A path with an empty, "." or ".." segment (//v1/admin/license/KEY, /portal/TOKEN/..)
// names a route only once cleaned; the gateway refuses it, and its line logs the cleaned
// path, redacted, never the path as sent, which held the key or token where no prefix
// matched.
func RedactPath(p string, fullLicenseKeys bool) string {
	if redacted, ok := redactRoute(p, fullLicenseKeys); ok {
		return redacted
	}
	if cleaned := path.Clean(p); cleaned != p && cleaned != strings.TrimSuffix(p, "/") {
		redacted, _ := redactRoute(cleaned, fullLicenseKeys)
		return redacted
	}
	return p
}

// MaskUnknownPath is the path of a request that named no route, as it may be logged:
// every segment that is not a route word (routeWord) is masked as a license key is, even
// with LOG_LICENSE_KEYS=full. A mistyped route (/v1/admin/licenses/KEY,
// /v1/export-licence/KEY) carries a key or token where no route says which segment holds
// it, so any segment may be one; the words kept still show which route was meant.
func MaskUnknownPath(p string, routeWord func(string) bool) string {
	if _, ok := redactRoute(path.Clean(p), false); ok {
		return p // a route of pathSecrets: RedactPath hides its secret, here as anywhere
	}
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if s != "" && !routeWord(s) {
			segs[i] = MaskLicenseKey(s)
		}
	}
	return strings.Join(segs, "/")
}

// redactRoute is RedactPath for a path as the routes spell it: ok when a prefix of
// pathSecrets matched.
func redactRoute(path string, fullLicenseKeys bool) (string, bool) {
	for _, p := range pathSecrets {
		rest, ok := strings.CutPrefix(path, p.prefix)
		if !ok || rest == "" {
			continue
		}
		segment, tail, _ := strings.Cut(rest, "/")
		if tail != "" || strings.HasSuffix(rest, "/") {
			tail = "/" + tail
		}
		switch {
		case !p.licenseKey:
			segment = "[redacted]"
		case p.prefix == "/console/licenses/" && segment == "new":
			// /console/licenses/new is a page, not a key.
		case !fullLicenseKeys:
			segment = MaskLicenseKey(segment)
		}
		return p.prefix + segment + tail, true
	}
	return path, false
}
