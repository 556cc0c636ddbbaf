package telemetry

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// fastText lets LogHTTP write the access log's line itself, for a text logger as
// NewLogger returns it (no attributes added since): the same bytes slog's TextHandler
// writes, without its pass over every attribute through ReplaceAttr and its boxing.
type fastText struct {
	w *boundedWriter
	// attrs are the logger's own attributes as the handler writes them (" service=gateway").
	attrs    string
	settings logSettings
}

// LogHTTP writes the gateway's access log line for one request, the same line as
//
//	log.LogAttrs(ctx, level, "http", slog.String("method", method), slog.String("path", path),
//		slog.String("client_ip", clientIP), slog.Int("status", status), slog.Int64("duration_ms", durationMs))
//
// which it does itself when its fast path does not apply: a JSON logger, a logger with
// attributes added, a trace in ctx, or a value text would quote (TestLogHTTPWritesSlogsLine).
// The caller checks log.Enabled first.
func LogHTTP(ctx context.Context, log *slog.Logger, level slog.Level, method, path, clientIP string, status int, durationMs int64) {
	if ch, ok := log.Handler().(contextHandler); ok && ch.fast != nil {
		if line := ch.fast.httpLine(ctx, time.Now(), level, method, path, clientIP, status, durationMs); line != nil {
			_, _ = ch.fast.w.Write(line)
			return
		}
	}
	log.LogAttrs(ctx, level, "http", slog.String("method", method), slog.String("path", path),
		slog.String("client_ip", clientIP), slog.Int("status", status), slog.Int64("duration_ms", durationMs))
}

// httpLine is LogHTTP's line at t, or nil when one of its values is not plain (then slog
// writes it).
func (f *fastText) httpLine(ctx context.Context, t time.Time, level slog.Level, method, path, clientIP string, status int, durationMs int64) []byte {
	if trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	lv := level.String()
	path = RedactPath(path, f.settings.fullLicenseKeys) // redactAttr's rule for "path"
	id := RequestID(ctx)
	if !plain(lv) || !plain(method) || !plain(path) || !plain(clientIP) || (id != "" && !plain(id)) {
		return nil
	}
	b := make([]byte, 0, 160+len(path)+len(id))
	b = append(b, "time="...)
	b = appendRFC3339Millis(b, t.Round(0))
	b = append(b, " level="...)
	b = append(b, lv...)
	b = append(b, " msg=http"...)
	b = append(b, f.attrs...)
	b = append(b, " method="...)
	b = append(b, method...)
	b = append(b, " path="...)
	b = append(b, path...)
	b = append(b, " client_ip="...)
	b = append(b, clientIP...)
	b = append(b, " status="...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, " duration_ms="...)
	b = strconv.AppendInt(b, durationMs, 10)
	if id != "" {
		b = append(b, " request_id="...)
		b = append(b, id...)
	}
	return append(b, '\n')
}

// plain reports whether the text handler writes s as it is: not empty, printable ASCII
// without space, '=', '"' or '\'. (The handler leaves more unquoted; the rest goes through
// slog.)
func plain(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '=' || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// appendRFC3339Millis is log/slog's: the time as the text handler writes it.
func appendRFC3339Millis(b []byte, t time.Time) []byte {
	// Format according to time.RFC3339Nano since it is highly optimized,
	// but truncate it to use millisecond resolution.
	// Unfortunately, that format trims trailing 0s, so add 1/10 millisecond
	// to guarantee that there are exactly 4 digits after the period.
	const prefixLen = len("2006-01-02T15:04:05.000")
	n := len(b)
	t = t.Truncate(time.Millisecond).Add(time.Millisecond / 10)
	b = t.AppendFormat(b, time.RFC3339Nano)
	b = append(b[:n+prefixLen], b[n+prefixLen+1:]...) // drop the 4th digit
	return b
}
