package mail

import "testing"

// maskIn runs on every failed send, and used to compile a regexp of the recipient's
// spellings each time (some 190 allocations for this reply, most of them the compile).
// It matches the spellings as literal strings now; what it allocates is the spellings
// and the masked text. The bound is a count, not a time: it holds on any machine.
func TestMaskInCompilesNoRegexpPerSend(t *testing.T) {
	given := "Jane Doe <jane.doe@münchen.de>"
	to, err := ParseRecipient(given)
	if err != nil {
		t.Fatal(err)
	}
	reply := `sending SMTP RCPT TO command: 550 "5.1.1 <jane.doe@xn--mnchen-3ya.de>: Recipient address rejected", ` +
		`affected recipient(s): <jane.doe@xn--mnchen-3ya.de>, affected message ID: <1234.5678@shop.example>`
	const want = `sending SMTP RCPT TO command: 550 "5.1.1 <j***@xn--mnchen-3ya.de>: Recipient address rejected", ` +
		`affected recipient(s): <j***@xn--mnchen-3ya.de>, affected message ID: <1***@shop.example>`
	if got := to.maskIn(reply, given); got != want {
		t.Fatalf("maskIn:\n got %s\nwant %s", got, want)
	}
	const limit = 100
	if n := testing.AllocsPerRun(20, func() { to.maskIn(reply, given) }); n > limit {
		t.Fatalf("maskIn allocates %.0f times per call (at most %d without a regexp compile)", n, limit)
	}
}
