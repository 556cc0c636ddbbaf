package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"
)

// AttemptTimeout is how long one attempt may take, connection to answer: a 2xx within it
// is success, anything slower a failure to retry.
const AttemptTimeout = 10 * time.Second

// SenderOptions configure a Sender.
type SenderOptions struct {
	// AllowPrivate lets deliveries reach any address (self-hosted, or hosted with
	// WEBHOOK_ALLOW_PRIVATE_NETWORKS=true). Otherwise every connection is checked by the
	// dial guard.
	AllowPrivate bool
	// Timeout overrides AttemptTimeout (tests).
	Timeout time.Duration
	// Resolver overrides the system resolver (tests).
	Resolver *net.Resolver
	// RootCAs overrides the system roots (tests with an httptest TLS server).
	RootCAs *x509.CertPool
}

// Sender makes delivery attempts. One Sender serves every endpoint: it keeps idle
// connections per host, so a busy endpoint does not pay a handshake per event.
type Sender struct {
	client  *http.Client
	timeout time.Duration
}

// NewSender returns a Sender. It ignores the proxy environment (a proxy would dial on our
// behalf and bypass the guard) and follows no redirect.
func NewSender(o SenderOptions) *Sender {
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = AttemptTimeout
	}
	dialer := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Resolver: o.Resolver}
	if !o.AllowPrivate {
		dialer.Control = guardControl
	}
	transport := &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: o.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &Sender{
		timeout: timeout,
		client: &http.Client{
			Transport: transport,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
	}
}

// Delivery is one attempt to make.
type Delivery struct {
	URL     string
	EventID string
	Body    []byte
	// Secrets sign the body, one v1 each (the current secret, and each old one whose
	// roll's overlap runs).
	Secrets [][]byte
}

// Result is the outcome of one attempt, as the delivery log shows it. StatusCode is 0
// when no answer came; Error is empty for a 2xx, and otherwise says what went wrong in
// words that never carry the URL (which may hold a token) or a secret.
type Result struct {
	At         time.Time
	StatusCode int
	Error      string
	Duration   time.Duration
}

// Succeeded reports a 2xx answer.
func (r Result) Succeeded() bool { return r.StatusCode >= 200 && r.StatusCode < 300 && r.Error == "" }

// maxResponseBody is how much of a receiver's answer is read (and discarded), so the
// connection can be reused without a huge answer holding the worker.
const maxResponseBody = 64 << 10

// Send makes one attempt: POST the body, signed at now, within the attempt timeout. The
// attempt's span is its caller's (the events service's worker, which knows the delivery
// it belongs to); Send starts none.
func (s *Sender) Send(ctx context.Context, d Delivery, now time.Time) (res Result) {
	res = Result{At: now}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, bytes.NewReader(d.Body))
	if err != nil {
		res.Error = "invalid endpoint URL"
		res.Duration = time.Since(start)
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Keyhouse-Webhooks/1")
	req.Header.Set(EventIDHeader, d.EventID)
	req.Header.Set(SignatureHeader, Sign(now, d.Body, d.Secrets...))
	resp, err := s.client.Do(req)
	if err != nil {
		res.Error = describe(err, s.timeout)
		res.Duration = time.Since(start)
		return res
	}
	_, rerr := io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBody))
	resp.Body.Close()
	res.StatusCode = resp.StatusCode
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		res.Error = "redirect not followed"
	case resp.StatusCode < 200 || resp.StatusCode >= 300:
		res.Error = fmt.Sprintf("answered HTTP %d", resp.StatusCode)
	case rerr != nil && errors.Is(rerr, context.DeadlineExceeded):
		res.Error = describe(rerr, s.timeout)
	}
	res.Duration = time.Since(start)
	return res
}

// describe names a transport failure without the URL: *url.Error would quote it, and an
// endpoint URL may carry a token in its query.
func describe(err error, timeout time.Duration) string {
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var recErr tls.RecordHeaderError
	var alertErr tls.AlertError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	switch {
	case errors.Is(err, errDialRefused):
		return ErrNotPublic.Error()
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Sprintf("timed out after %s", timeout)
	case errors.As(err, &dnsErr):
		if dnsErr.IsNotFound {
			return "DNS lookup failed: no such host"
		}
		return "DNS lookup failed"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return "connection reset before an answer"
	case errors.As(err, &certErr) || errors.As(err, &unknownAuth) || errors.As(err, &hostErr):
		return "TLS certificate not trusted"
	case errors.As(err, &recErr) || errors.As(err, &alertErr):
		return "TLS handshake failed"
	case errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH):
		return "host unreachable"
	case errors.Is(err, context.Canceled):
		return "attempt canceled"
	}
	return "connection failed"
}
