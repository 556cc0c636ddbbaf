package telemetry

import (
	"log/slog"
	"net/url"
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
var pathSecrets = []pathSecret{
	{"/portal/", false},
	{"/v1/export-license/", true},
	{"/v1/list-activations/", true},
	{"/v1/admin/license/", true},
	{"/console/licenses/", true},
}

type pathSecret struct {
	prefix     string
	licenseKey bool
}

// RedactPath hides the portal token and masks the license key in a request path, so the
// access log can name the route without holding the credential. fullLicenseKeys leaves
// keys whole (LOG_LICENSE_KEYS=full); portal tokens are hidden regardless.
//
// The path is read as the routes read it, segment by segment unescaped (CanonicalPath),
// and written so: a client that escaped a letter of a route's word (/%70ortal/TOKEN,
// /v1/export%2Dlicense/KEY) reaches the route, and its line names the route with the
// credential hidden, not the path as sent.
//
// A path with an empty, "." or ".." segment (//v1/admin/license/KEY, /portal/TOKEN/..)
// names a route only once cleaned; the gateway refuses it, and its line logs the cleaned
// path, redacted, never the path as sent, which held the key or token where no prefix
// matched.
func RedactPath(p string, fullLicenseKeys bool) string {
	p = CanonicalPath(p)
	if redacted, ok := redactRoute(p, fullLicenseKeys); ok {
		return redacted
	}
	if cleaned := path.Clean(p); cleaned != p && cleaned != strings.TrimSuffix(p, "/") {
		redacted, _ := redactRoute(cleaned, fullLicenseKeys)
		return redacted
	}
	return p
}

// CanonicalPath is the escaped path p spelled one way: each segment (the text between two
// "/" the client sent) unescaped and escaped again as url.PathEscape does, so a route's
// word is its word however a client escaped its letters, and an escaped "/" stays %2F, one
// segment's data. The gateway routes on this spelling, and the access log writes it.
func CanonicalPath(p string) string {
	if !strings.Contains(p, "%") {
		return p
	}
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if !strings.Contains(s, "%") {
			continue // url.PathEscape keeps what url.URL keeps unescaped in a path
		}
		if u, err := url.PathUnescape(s); err == nil {
			segs[i] = url.PathEscape(u)
		}
	}
	return strings.Join(segs, "/")
}

// MaskUnknownPath is the path of a request that named no route, as it may be logged
// (CanonicalPath's spelling): every segment that is not a route word (routeWord) is
// masked as a license key is, even with LOG_LICENSE_KEYS=full. A mistyped route
// (/v1/admin/licenses/KEY, /v1/export-licence/KEY) carries a key or token where no route
// says which segment holds it, so any segment may be one; the words kept still show which
// route was meant. Under a prefix of a route that carries a credential the segment
// RedactPath hides or masks is left to it, and every later one that is not a route word is
// masked here: a key holding "/" sent unescaped (/v1/export-license/LEGACY/ABCD-1234/file)
// spans several.
func MaskUnknownPath(p string, routeWord func(string) bool) string {
	p = CanonicalPath(p)
	if cleaned := path.Clean(p); cleaned != p {
		if _, _, ok := secretPrefix(cleaned); ok {
			p = cleaned // as RedactPath logs it
		}
	}
	keep := 0 // the leading parts RedactPath masks: a prefix of pathSecrets and its secret
	if ps, _, ok := secretPrefix(p); ok {
		keep = strings.Count(ps.prefix, "/") + 1
	}
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if i >= keep && s != "" && !routeWord(s) {
			segs[i] = MaskLicenseKey(s)
		}
	}
	return strings.Join(segs, "/")
}

// secretPrefix is the route of pathSecrets p is under, and what follows its prefix; ok is
// false when p is under none or nothing follows.
func secretPrefix(p string) (pathSecret, string, bool) {
	for _, ps := range pathSecrets {
		if rest, ok := strings.CutPrefix(p, ps.prefix); ok && rest != "" {
			return ps, rest, true
		}
	}
	return pathSecret{}, "", false
}

// redactRoute is RedactPath for a path as the routes spell it: ok when a prefix of
// pathSecrets matched.
func redactRoute(path string, fullLicenseKeys bool) (string, bool) {
	ps, rest, ok := secretPrefix(path)
	if !ok {
		return path, false
	}
	segment, tail, _ := strings.Cut(rest, "/")
	if tail != "" || strings.HasSuffix(rest, "/") {
		tail = "/" + tail
	}
	switch {
	case !ps.licenseKey:
		segment = "[redacted]"
	case ps.prefix == "/console/licenses/" && segment == "new":
		// /console/licenses/new is a page, not a key.
	case !fullLicenseKeys:
		segment = MaskLicenseKey(segment)
	}
	return ps.prefix + segment + tail, true
}
