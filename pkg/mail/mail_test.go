package mail_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/keyhouse/keyhouse/devinfra/mailtest"
	"github.com/keyhouse/keyhouse/pkg/mail"
)

func TestSMTPDeliversToARealServer(t *testing.T) {
	sink := mailtest.New(t)
	s, err := mail.New(mail.Config{Provider: "smtp", SMTPURL: sink.URL(), From: "Shop <shop@example.com>", ReplyTo: "help@example.com"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Provider() != mail.ProviderSMTP {
		t.Fatalf("provider %q", s.Provider())
	}
	body := "License key: ABCD-EFGH\nProduct: été — ünïcode\n"
	if err := s.Send(context.Background(), mail.Message{To: "buyer@example.com", Subject: "Your license key for café", Text: body}); err != nil {
		t.Fatal(err)
	}
	got := sink.To("buyer@example.com")
	if len(got) != 1 {
		t.Fatalf("received %d messages, want 1", len(got))
	}
	m := got[0]
	if m.From != "shop@example.com" || m.Subject != "Your license key for café" || !strings.Contains(m.Body, body) {
		t.Fatalf("received %+v", m)
	}
	if !bytes.Contains(m.Raw, []byte("Reply-To: <help@example.com>")) {
		t.Fatalf("no Reply-To header in\n%s", m.Raw)
	}
}

func TestSMTPServerDownIsAnError(t *testing.T) {
	sink := mailtest.New(t)
	sink.Stop()
	s, err := mail.New(mail.Config{Provider: "smtp", SMTPURL: "smtp://user:hunter2@" + sink.Addr, From: "shop@example.com"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Send(context.Background(), mail.Message{To: "buyer@example.com", Subject: "s", Text: "t"})
	if err == nil {
		t.Fatal("send to a stopped server succeeded")
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("error leaks the SMTP password: %v", err)
	}
	if err := sink.Restart(); err != nil {
		t.Fatal(err)
	}
	// Credentials go only over TLS (go-mail's auto-discovery refuses PLAIN in clear text);
	// the sink speaks plain SMTP, so the resend is unauthenticated, as to a local relay.
	s, err = mail.New(mail.Config{Provider: "smtp", SMTPURL: sink.URL(), From: "shop@example.com"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(context.Background(), mail.Message{To: "buyer@example.com", Subject: "s", Text: "t"}); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if n := len(sink.Messages()); n != 1 {
		t.Fatalf("received %d, want 1", n)
	}
}

func TestLogProviderLogsTheMailWithTheRecipientMaskedAndNoSecret(t *testing.T) {
	var buf bytes.Buffer
	s, err := mail.New(mail.Config{Provider: "log"}, slog.New(slog.NewTextHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	m := mail.Message{To: "jane.doe@example.com", Subject: "Your key", Text: "License key: K-1\nLink: https://x/portal/p-1\nSeats: 2",
		Secrets: []string{"K-1", "https://x/portal/p-1"}}
	if err := s.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, `License key: [redacted]\nLink: [redacted]\nSeats: 2`) || !strings.Contains(out, "j***@example.com") {
		t.Fatalf("log %q", out)
	}
	if strings.Contains(out, "K-1") || strings.Contains(out, "p-1") {
		t.Fatalf("log holds a secret of the mail: %q", out)
	}
	if strings.Contains(out, "jane.doe") {
		t.Fatalf("log holds the recipient address: %q", out)
	}
}

func TestConfigurationErrors(t *testing.T) {
	for name, cfg := range map[string]mail.Config{
		"unknown provider": {Provider: "carrier-pigeon"},
		"bad url":          {Provider: "smtp", SMTPURL: "http://x", From: "a@b.c"},
		"no from":          {Provider: "smtp", SMTPURL: "smtp://h:25"},
		"bad from":         {Provider: "smtp", SMTPURL: "smtp://h:25", From: "not an address"},
		"bad port":         {Provider: "smtp", SMTPURL: "smtp://h:99999", From: "a@b.c"},
	} {
		if _, err := mail.New(cfg, nil); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := mail.New(mail.Config{Provider: "smtp", SMTPURL: "smtp://u:secretpw@h:x", From: "a@b.c"}, nil); err == nil || strings.Contains(err.Error(), "secretpw") {
		t.Errorf("bad url error %v", err)
	}
}

func TestInvalidRecipientsAreRefusedBeforeSending(t *testing.T) {
	s, _ := mail.New(mail.Config{Provider: "log"}, slog.New(slog.DiscardHandler))
	for _, to := range []string{"", "nope", "a@example.com, b@example.com", "a@example.com\r\nBcc: x@y.z", "a@exa mple.com"} {
		if err := s.Send(context.Background(), mail.Message{To: to, Subject: "s", Text: "t"}); !errors.Is(err, mail.ErrInvalidRecipient) {
			t.Errorf("%q: %v", to, err)
		}
	}
}

// An error that names the mail server is a *mail.ServerError: its text keeps the server's
// address and reply for the operator, and its Summary says what failed without either,
// for a tenant who does not run the server.
func TestServerErrorSummaryDoesNotNameTheServer(t *testing.T) {
	t.Parallel()
	sink := mailtest.New(t)
	sink.RefuseRecipients(mailtest.Rejected)
	closed := mailtest.New(t)
	closed.Stop() // nothing listens on its port
	for _, c := range []struct {
		name, server, summary string
		detail                []string
	}{
		{"unreachable", closed.Addr, "the connection to the mail server failed",
			[]string{"mail: smtp send to " + closed.Addr + ": dial failed: ", "connection refused"}},
		{"recipient refused", sink.Addr, "the mail server refused the recipient's address (550 5.1.1)",
			[]string{"mail: smtp send to " + sink.Addr + ": send failed: ", "Recipient address rejected", "b***@example.com"}},
	} {
		s, err := mail.New(mail.Config{Provider: "smtp", SMTPURL: "smtp://" + c.server, From: "shop@example.com"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Send(context.Background(), mail.Message{To: "buyer@example.com", Subject: "s", Text: "t"})
		var serverErr *mail.ServerError
		if !errors.As(err, &serverErr) {
			t.Fatalf("%s: %v is not a *mail.ServerError", c.name, err)
		}
		for _, want := range c.detail {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: the error does not say %q: %s", c.name, want, err)
			}
		}
		if got := serverErr.Summary(); got != c.summary {
			t.Errorf("%s: summary %q, want %q", c.name, got, c.summary)
		}
	}
}

// smtpSink starts an SMTP sink (stopped when the test ends) and a sender that sends to it
// from shop@example.com.
func smtpSink(t *testing.T) (*mailtest.Server, mail.Sender) {
	t.Helper()
	sink := mailtest.New(t)
	s, err := mail.New(mail.Config{Provider: "smtp", SMTPURL: sink.URL(), From: "shop@example.com"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return sink, s
}
