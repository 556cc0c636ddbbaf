package mail_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/mail"
	"strings"
	"testing"

	"github.com/keyhouse/keyhouse/devinfra/mailtest"
	keymail "github.com/keyhouse/keyhouse/pkg/mail"
)

// A tenant's sender name is shown on From with EMAIL_FROM's address, and its reply-to
// replaces EMAIL_REPLY_TO, as a mail client reads them.
func TestSenderNameAndReplyToReachTheRecipient(t *testing.T) {
	t.Parallel()
	sink := mailtest.New(t)
	s, err := keymail.New(keymail.Config{Provider: "smtp", SMTPURL: sink.URL(), From: "Keyhouse <shop@example.com>", ReplyTo: "ops@example.com"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	msg := keymail.Message{To: "buyer@example.com", Subject: "Your license", Text: "hello", SenderName: `Café "Acme", Support`, ReplyTo: "help@acme.example"}
	if err := s.Send(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	got := sink.To("buyer@example.com")
	if len(got) != 1 {
		t.Fatalf("received %d messages", len(got))
	}
	// net/mail reads From as a mail client does, encoded words and quoting undone.
	from, err := mail.ParseAddress(got[0].Header.Get("From"))
	if err != nil || from.Name != `Café "Acme", Support` || from.Address != "shop@example.com" {
		t.Errorf("From %q read as %v (%v), want the display name with EMAIL_FROM's address", got[0].Header.Get("From"), from, err)
	}
	if rt := got[0].HeaderText("Reply-To"); rt != "<help@acme.example>" {
		t.Errorf("Reply-To %q, want the tenant's", rt)
	}
	if got[0].From != "shop@example.com" {
		t.Errorf("envelope sender %q", got[0].From)
	}
}

// A name or reply-to that would add a header of its own (CR, LF) is refused before any
// byte is sent; so is a reply-to that is not one plain address.
func TestSenderFieldsThatCouldInjectAHeaderAreRefused(t *testing.T) {
	t.Parallel()
	sink := mailtest.New(t)
	var logged bytes.Buffer
	smtp, err := keymail.New(keymail.Config{Provider: "smtp", SMTPURL: sink.URL(), From: "shop@example.com"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	logs, _ := keymail.New(keymail.Config{Provider: "log"}, slog.New(slog.NewTextHandler(&logged, nil)))
	for _, m := range []keymail.Message{
		{SenderName: "Acme\r\nBcc: victim@example.com"},
		{SenderName: "Acme\nX-Injected: 1"},
		{SenderName: strings.Repeat("n", keymail.MaxDisplayNameLen+1)},
		{ReplyTo: "help@acme.example\r\nBcc: victim@example.com"},
		{ReplyTo: "Help <help@acme.example>"},
		{ReplyTo: "a@example.com, b@example.com"},
	} {
		m.To, m.Subject, m.Text = "buyer@example.com", "s", "t"
		for _, s := range []keymail.Sender{smtp, logs} {
			if err := s.Send(context.Background(), m); !errors.Is(err, keymail.ErrInvalidSender) {
				t.Errorf("%s: sender %q reply-to %q: error %v, want ErrInvalidSender", s.Provider(), m.SenderName, m.ReplyTo, err)
			}
		}
	}
	if n := len(sink.Messages()); n != 0 {
		t.Errorf("%d messages reached the server", n)
	}
	if logged.Len() != 0 {
		t.Errorf("the log provider logged a refused message: %s", logged.String())
	}
	for s, want := range map[string]bool{"Acme Support": true, "Café — ünïcode": true, " ": false, "": false, "a\tb": false, "a\u0085b": false} {
		if got := keymail.ValidDisplayName(s); got != want {
			t.Errorf("ValidDisplayName(%q) = %v, want %v", s, got, want)
		}
	}
}
