package telemetry

import (
	"bytes"
	"context"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"
)

// The fast path writes, byte for byte, the line slog's text handler writes for the same
// record through NewLogger's handler (redaction included); whatever it refuses is written
// by slog.
func TestLogHTTPWritesSlogsLine(t *testing.T) {
	methods := []string{"GET", "POST", "HEAD", "PO ST", "", "M=x", `M"`, "MÉTHOD"}
	paths := []string{"/v1/verify-license", "/", "/v1/export-license/ABCD-EFGH-IJKL-MNOP", "/v1/export-license/AB",
		"/portal/tok123/x", "/v1/a b", "/v1/é", "/v1/a=b", `/v1/a"b`, `/v1/a\b`, "/v1/\x00", "/v1/release/17", ""}
	ips := []string{"127.0.0.1", "::1", "2001:db8::1", "invalid IP", "10.0.0.7"}
	ids := []string{"", "0123456789abcdef01234567", "req.id-1_x", "a b", "é"}
	levels := []slog.Level{slog.LevelInfo, slog.LevelDebug, slog.LevelWarn, slog.LevelInfo + 2, slog.LevelError}
	rng := rand.New(rand.NewPCG(1, 2))
	fast := 0
	for i := range 20000 {
		full := i%2 == 0
		settings := logSettings{fullLicenseKeys: full}
		var buf bytes.Buffer
		h := contextHandler{Handler: slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: settings.redactAttr})}.
			WithAttrs([]slog.Attr{slog.String("service", "gateway")})
		f := &fastText{attrs: " service=gateway", settings: settings}
		method, path, ip, id := methods[rng.IntN(len(methods))], paths[rng.IntN(len(paths))], ips[rng.IntN(len(ips))], ids[rng.IntN(len(ids))]
		level := levels[rng.IntN(len(levels))]
		status := []int{200, 404, 429, 503, 0, -1}[rng.IntN(6)]
		dur := []int64{0, 3, 1 << 40, -5}[rng.IntN(4)]
		// Times with every millisecond digit, zero fractions, other zones and years.
		tm := time.Unix(rng.Int64N(1<<36)-1<<35, rng.Int64N(1e9)).In(time.FixedZone("z", (rng.IntN(48)-24)*1800))
		if rng.IntN(4) == 0 {
			tm = tm.Truncate(time.Second)
		}
		ctx := context.Background()
		if id != "" {
			ctx = WithRequestID(ctx, id)
		}
		line := f.httpLine(ctx, tm, level, method, path, ip, status, dur)
		if line == nil {
			continue
		}
		fast++
		r := slog.NewRecord(tm, level, "http", 0)
		r.AddAttrs(slog.String("method", method), slog.String("path", path), slog.String("client_ip", ip),
			slog.Int("status", status), slog.Int64("duration_ms", dur))
		if err := h.Handle(ctx, r); err != nil {
			t.Fatal(err)
		}
		if string(line) != buf.String() {
			t.Fatalf("fast line\n%q\nslog's\n%q", line, buf.String())
		}
	}
	if fast < 1000 {
		t.Errorf("the fast path wrote %d lines of 20000", fast)
	}
}

// A logger with attributes added, or a JSON one, is written by slog.
func TestLogHTTPFastOnlyForTheTextLoggerItself(t *testing.T) {
	var buf bytes.Buffer
	text := NewLogger(&buf, "gateway", "info", "text")
	if h, _ := text.Handler().(contextHandler); h.fast == nil {
		t.Error("text logger: no fast path")
	}
	if h, _ := text.With("component", "x").Handler().(contextHandler); h.fast != nil {
		t.Error("logger with attributes: fast path kept")
	}
	if h, _ := NewLogger(&buf, "gateway", "info", "json").Handler().(contextHandler); h.fast != nil {
		t.Error("JSON logger: fast path")
	}
}
