package mail_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/keyhouse/keyhouse/devinfra/mailtest"
	"github.com/keyhouse/keyhouse/pkg/mail"
)

func TestValidAddressHoldsTheSMTPLengthLimit(t *testing.T) {
	t.Parallel()
	at254 := strings.Repeat("x", mail.MaxAddressLen-len("@example.com")) + "@example.com"
	for s, want := range map[string]bool{
		"buyer@example.com":                 true,
		at254:                               true,
		"x" + at254:                         false,
		strings.Repeat("x", 800_000) + "@a": false,
		"Buyer <buyer@example.com>":         false,
		"a@example.com, b@example.com":      false,
	} {
		if got := mail.ValidAddress(s); got != want {
			t.Errorf("ValidAddress(%.40q…) = %v, want %v", s, got, want)
		}
	}
}

// What a checkout's customer email may look like, and the address SMTP is given for it.
func TestParseRecipientAcceptsEveryUsableFormAndSaysWhyNot(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]mail.Recipient{
		"jane@example.com":            {Address: "jane@example.com"},
		"jane+license@example.com":    {Address: "jane+license@example.com"},
		"o'brien@example.com":         {Address: "o'brien@example.com"},
		`"john smith"@example.com`:    {Address: `"john smith"@example.com`},
		"Jane Doe <jane@example.com>": {Address: "jane@example.com"},
		"user@münchen.de":             {Address: "user@xn--mnchen-3ya.de"},
		"user@xn--mnchen-3ya.de":      {Address: "user@xn--mnchen-3ya.de"},
		"jane@EXAMPLE.COM":            {Address: "jane@example.com"},
		"zoë@example.com":             {Address: "zoë@example.com", UTF8: true},
		"zoë@bücher.example":          {Address: "zoë@xn--bcher-kva.example", UTF8: true},
	} {
		got, err := mail.ParseRecipient(in)
		if err != nil || got != want {
			t.Errorf("ParseRecipient(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for in, why := range map[string]string{
		"nope":                                    "not an email address",
		"a@example.com, b@example.com":            "a list of 2 addresses",
		"a@example.com\r\nBcc: x@y.z":             "line break",
		"a@-bad-.example":                         "domain is not a valid domain name",
		strings.Repeat("x", 250) + "@example.com": "longer than 254",
	} {
		_, err := mail.ParseRecipient(in)
		if !errors.Is(err, mail.ErrInvalidRecipient) || !strings.Contains(err.Error(), why) {
			t.Errorf("ParseRecipient(%.30q) error %v, want ErrInvalidRecipient saying %q", in, err, why)
		}
		if err != nil && strings.Contains(err.Error(), "@") {
			t.Errorf("the error names the address: %v", err)
		}
	}
}

// A non-ASCII local part goes out with SMTPUTF8 to a server that offers it, and is
// refused, with nothing sent, by one that does not; an internationalized domain goes out
// in punycode either way.
func TestInternationalAddressesReachARealServerOrAreRefused(t *testing.T) {
	t.Parallel()
	for _, offersUTF8 := range []bool{true, false} {
		newSink := mailtest.New
		if offersUTF8 {
			newSink = mailtest.NewSMTPUTF8
		}
		sink := newSink(t)
		s, err := mail.New(mail.Config{Provider: "smtp", SMTPURL: sink.URL(), From: "Shop <shop@example.com>"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		send := func(to string) error {
			return s.Send(context.Background(), mail.Message{To: to, Subject: "s", Text: "t"})
		}
		if err := send("user@münchen.de"); err != nil {
			t.Fatalf("SMTPUTF8 %v: IDN domain: %v", offersUTF8, err)
		}
		if got := sink.To("user@xn--mnchen-3ya.de"); len(got) != 1 || !strings.Contains(string(got[0].Raw), "To: <user@xn--mnchen-3ya.de>") {
			t.Fatalf("SMTPUTF8 %v: IDN domain received as %+v", offersUTF8, sink.Messages())
		}
		err = send("zoë@example.com")
		switch {
		case offersUTF8 && err != nil:
			t.Fatalf("non-ASCII local part with SMTPUTF8: %v", err)
		case offersUTF8:
			if got := sink.To("zoë@example.com"); len(got) != 1 || !got[0].SMTPUTF8 {
				t.Fatalf("non-ASCII local part received as %+v", sink.Messages())
			}
		case !errors.Is(err, mail.ErrSMTPUTF8Unsupported):
			t.Fatalf("non-ASCII local part without SMTPUTF8: error %v", err)
		case len(sink.Messages()) != 1:
			t.Fatalf("a message reached the server without SMTPUTF8: %+v", sink.Messages())
		}
	}
}

// A quoted local part is carried quoted in RCPT TO and To.
func TestQuotedLocalPartReachesARealServer(t *testing.T) {
	t.Parallel()
	sink, s := smtpSink(t)
	for _, to := range []string{`"john smith"@example.com`, "Jane Doe <jane@example.com>"} {
		if err := s.Send(context.Background(), mail.Message{To: to, Subject: "s", Text: "t"}); err != nil {
			t.Fatalf("%s: %v", to, err)
		}
	}
	// The server accepted the quoted path (it records the local part unquoted, as RFC
	// 5321 defines its value); the To header carries it quoted.
	if got := sink.To("john smith@example.com"); len(got) != 1 || got[0].Header.Get("To") != `<"john smith"@example.com>` {
		t.Fatalf("quoted local part: received %+v", sink.Messages())
	}
	if got := sink.To("jane@example.com"); len(got) != 1 {
		t.Fatalf("name-addr: received %+v", sink.Messages())
	}
}
