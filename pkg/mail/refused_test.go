package mail_test

import (
	"context"
	"strings"
	"testing"

	"golang.org/x/net/idna"

	"github.com/keyhouse/keyhouse/devinfra/mailtest"
	"github.com/keyhouse/keyhouse/pkg/mail"
)

// A relay that refuses the recipient quotes the address in its answer, and go-mail lists
// it as the "affected recipient": the error Send returns (which the storefront logs and
// shows on the delivery) says why, with the address masked in whatever spelling and case
// the server wrote it back.
func TestARefusedRecipientIsMaskedInTheError(t *testing.T) {
	t.Parallel()
	unicodeDomain := func(rcpt string) string {
		at := strings.LastIndexByte(rcpt, '@')
		d, err := idna.ToUnicode(rcpt[at+1:])
		if err != nil {
			t.Fatal(err)
		}
		return rcpt[:at+1] + d
	}
	quoted := func(rcpt string) string { // go-smtp hands the local part over unquoted
		at := strings.LastIndexByte(rcpt, '@')
		return `"` + rcpt[:at] + `"` + rcpt[at:]
	}
	for _, c := range []struct {
		name, to, local string
		utf8            bool
		reply           func(rcpt string) string
	}{
		{"bare, echoed", "jane.doe@example.com", "jane.doe", false, mailtest.Rejected},
		{"mixed case, echoed upper-cased", "Jane.Doe@Example.COM", "jane.doe", false,
			func(r string) string { return mailtest.Rejected(strings.ToUpper(r)) }},
		{"name-addr", "Jane Doe <jane.doe@example.com>", "jane.doe", false, mailtest.Rejected},
		{"quoted local part, echoed unquoted", `"jane q doe"@example.com`, "jane q doe", false, mailtest.Rejected},
		{"quoted local part, echoed quoted", `"jane q doe"@example.com`, "jane q doe", false,
			func(r string) string { return mailtest.Rejected(quoted(r)) }},
		{"IDN given in Unicode, echoed in punycode", "janedoe@münchen.de", "janedoe", false, mailtest.Rejected},
		{"IDN given in Unicode, echoed in Unicode upper-cased", "janedoe@münchen.de", "janedoe", false,
			func(r string) string { return mailtest.Rejected(strings.ToUpper(unicodeDomain(r))) }},
		{"IDN given in punycode, echoed in Unicode", "janedoe@xn--mnchen-3ya.de", "janedoe", false,
			func(r string) string { return mailtest.Rejected(unicodeDomain(r)) }},
		{"Unicode local part, echoed upper-cased", "zoë.doe@bücher.example", "zoë.doe", true,
			func(r string) string { return mailtest.Rejected(strings.ToUpper(unicodeDomain(r))) }},
		{"echoed without brackets", "jane.doe@example.com", "jane.doe", false,
			func(r string) string { return "No such mailbox here: " + r }},
	} {
		start := mailtest.Start
		if c.utf8 {
			start = mailtest.StartSMTPUTF8
		}
		sink, err := start()
		if err != nil {
			t.Fatal(err)
		}
		defer sink.Stop()
		sink.RefuseRecipients(c.reply)
		s, err := mail.New(mail.Config{Provider: "smtp", SMTPURL: sink.URL(), From: "shop@example.com"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Send(context.Background(), mail.Message{To: c.to, Subject: "s", Text: "t"})
		if err == nil {
			t.Fatalf("%s: a refused recipient was sent to", c.name)
		}
		text := err.Error()
		t.Logf("%s: %s", c.name, text)
		if strings.Contains(strings.ToLower(text), strings.ToLower(c.local)) {
			t.Errorf("%s: the error names the address: %s", c.name, text)
		}
		// Still why: the server's code and reply, and whom it was about, masked.
		if !strings.Contains(text, "550") || !strings.Contains(text, "5.1.1") ||
			!strings.Contains(text, "Recipient address rejected") && !strings.Contains(text, "No such mailbox") ||
			!strings.Contains(strings.ToLower(text), string([]rune(c.local)[0])+"***@") {
			t.Errorf("%s: the error does not say why, or for which (masked) address: %s", c.name, text)
		}
	}
}
