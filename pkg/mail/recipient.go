package mail

import (
	"cmp"
	"errors"
	"fmt"
	"net/mail"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// Recipient is an address a message can be sent to, in the form SMTP carries it.
type Recipient struct {
	// Address is local@domain with the local part quoted where RFC 5321 needs it
	// ("john smith"@example.com) and the domain in ASCII (an internationalized domain in
	// its punycode form, xn--…), so a relay never receives a domain it would mangle.
	Address string
	// UTF8 says the local part is not ASCII (zoë@example.com): only a server that offers
	// SMTPUTF8 (RFC 6531) can carry it.
	UTF8 bool
}

// ErrSMTPUTF8Unsupported is returned for a recipient whose local part is not ASCII when
// the mail server does not offer SMTPUTF8: sending it anyway would hand a relay bytes it
// may mangle or deliver elsewhere.
var ErrSMTPUTF8Unsupported = errors.New("mail: the recipient's address has a non-ASCII local part, which needs SMTPUTF8 (RFC 6531), and the mail server does not offer it")

// idnaProfile converts a domain as mail does: the lookup profile of UTS #46 (the one
// browsers and resolvers use), which also lower-cases and validates it.
var idnaProfile = idna.Lookup

// ParseRecipient turns what a payment provider gives as a buyer's email into the address
// to send to: a bare address (jane@example.com), one with a quoted local part
// ("john smith"@example.com), or the address of a name-addr (Jane Doe <jane@example.com>).
// An address that cannot be used is ErrInvalidRecipient wrapped with why; the address
// itself is never part of the error.
func ParseRecipient(s string) (Recipient, error) {
	s = strings.TrimSpace(s)
	if strings.ContainsAny(s, "\r\n") || !utf8.ValidString(s) {
		return Recipient{}, fmt.Errorf("%w: it holds a line break or invalid UTF-8", ErrInvalidRecipient)
	}
	if list, err := mail.ParseAddressList(s); err == nil && len(list) > 1 {
		return Recipient{}, fmt.Errorf("%w: it is a list of %d addresses, not one", ErrInvalidRecipient, len(list))
	}
	a, err := mail.ParseAddress(s)
	if err != nil {
		return Recipient{}, fmt.Errorf("%w: it is not an email address", ErrInvalidRecipient)
	}
	at := strings.LastIndexByte(a.Address, '@')
	local, domain := a.Address[:at], a.Address[at+1:]
	asciiDomain, err := idnaProfile.ToASCII(domain)
	if err != nil || asciiDomain == "" {
		return Recipient{}, fmt.Errorf("%w: its domain is not a valid domain name", ErrInvalidRecipient)
	}
	// net/mail quotes a local part that is not a dot-atom and strips the brackets it adds.
	addr := strings.TrimSuffix(strings.TrimPrefix((&mail.Address{Address: local + "@" + asciiDomain}).String(), "<"), ">")
	if len(addr) > MaxAddressLen {
		return Recipient{}, fmt.Errorf("%w: it is longer than %d characters", ErrInvalidRecipient, MaxAddressLen)
	}
	return Recipient{Address: addr, UTF8: !isASCII(local)}, nil
}

func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// addressLike is a run of text around an @ that may be an address (no space, bracket,
// quote or separator in it).
const addressLike = `[^\s<>()\[\],;:"]+@[^\s<>()\[\],;:"]+`

// maskIn returns text (a mail server's refusal, say) with the recipient's address masked
// as Mask masks it, in every spelling a server may write it back: as sent, as given (what
// the caller passed as Message.To), its local part quoted or not, its domain in punycode
// or in Unicode, in any letter case, Go-quoted or not. Any other address-like run is
// masked too (a server may write the address in a form of its own).
func (to Recipient) maskIn(text, given string) string {
	var spellings []string
	add := func(addr string) {
		at := strings.LastIndexByte(addr, '@')
		if at <= 0 {
			return
		}
		locals := []string{addr[:at]}
		if a, err := mail.ParseAddress(addr); err == nil { // the local part unquoted
			locals = append(locals, a.Address[:strings.LastIndexByte(a.Address, '@')])
		}
		domain := addr[at+1:]
		domains := []string{domain}
		if d, err := idna.ToUnicode(domain); err == nil {
			domains = append(domains, d)
		}
		if d, err := idnaProfile.ToASCII(domain); err == nil {
			domains = append(domains, d)
		}
		for _, l := range locals {
			for _, d := range domains {
				// go-mail writes the server's reply Go-quoted (%q): a quote of the
				// local part then reads \".
				quoted := strconv.Quote(l + "@" + d)
				spellings = append(spellings, regexp.QuoteMeta(l+"@"+d), regexp.QuoteMeta(quoted[1:len(quoted)-1]))
			}
		}
	}
	add(to.Address)
	if a, err := mail.ParseAddress(strings.TrimSpace(given)); err == nil {
		add(a.Address)
	}
	// The longest first: at one position the first alternative that matches wins.
	slices.SortFunc(spellings, func(a, b string) int {
		if c := cmp.Compare(len(b), len(a)); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	re := regexp.MustCompile("(?i)" + strings.Join(append(slices.Compact(spellings), addressLike), "|"))
	return re.ReplaceAllStringFunc(text, Mask)
}
