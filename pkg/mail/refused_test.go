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
		newSink := mailtest.New
		if c.utf8 {
			newSink = mailtest.NewSMTPUTF8
		}
		sink := newSink(t)
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

// A relay may write back only the recipient's local part (`<jane.doe>: Recipient address
// rejected`, `user jane.doe unknown`): it is masked as the whole address is (j***), where
// it is the recipient's and not a word of the reply. A local part with a dot, digit or
// other non-letter is masked wherever it stands alone; one of letters only ("user",
// "info") only between brackets or quotes, so the reply's own words stay readable.
func TestARecipientWrittenBackWithoutItsDomainIsMasked(t *testing.T) {
	t.Parallel()
	sink, s := smtpSink(t)
	for _, c := range []struct {
		name, to, reply string
		hidden          string   // must not be in the error, in any case ("": nothing is)
		shown           []string // must be
	}{
		{"bracketed", "jane.doe@example.com", "<jane.doe>: Recipient address rejected",
			"jane.doe", []string{"<j***>: Recipient address rejected"}},
		{"in words", "jane.doe@example.com", "user jane.doe unknown",
			"jane.doe", []string{"user j***", "unknown"}},
		{"upper-cased, before a full stop", "Jane.Doe42@example.com", "No such user JANE.DOE42.",
			"jane.doe42", []string{"No such user J***."}},
		{"name-addr, quoted", "Jane Doe <jdoe+shop@example.com>", "mailbox 'jdoe+shop' does not exist",
			"jdoe+shop", []string{"mailbox 'j***' does not exist"}},
		{"quoted local part with spaces", `"jane q doe"@example.com`, "user jane q doe unknown",
			"jane q doe", []string{"user j*** unknown"}},
		{"letters only, bracketed", "jane@example.com", "<jane>: Recipient address rejected: User unknown",
			"<jane>", []string{"<j***>: Recipient address rejected: User unknown"}},
		{"a reply's own word, bracketed", "user@example.com", "<user>: Recipient address rejected: User unknown in local recipient table",
			"<user>", []string{"<u***>: Recipient address rejected: User unknown in local recipient table"}},
		{"a reply's own word, not an address", "mailbox@example.com", "Mailbox unavailable; mailbox full",
			"", []string{"Mailbox unavailable; mailbox full"}},
		{"inside another name", "jane.doe@example.com", "user jane.doe2 unknown, user xjane.doe unknown",
			"", []string{"user jane.doe2 unknown, user xjane.doe unknown"}},
	} {
		sink.RefuseRecipients(func(string) string { return c.reply })
		err := s.Send(context.Background(), mail.Message{To: c.to, Subject: "s", Text: "t"})
		if err == nil {
			t.Fatalf("%s: a refused recipient was sent to", c.name)
		}
		text := err.Error()
		if c.hidden != "" && strings.Contains(strings.ToLower(text), strings.ToLower(c.hidden)) {
			t.Errorf("%s: the error holds %q: %s", c.name, c.hidden, text)
		}
		for _, want := range c.shown {
			if !strings.Contains(text, want) {
				t.Errorf("%s: the error does not say %q: %s", c.name, want, text)
			}
		}
	}
}
