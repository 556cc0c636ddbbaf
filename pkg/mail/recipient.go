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
	"unicode"
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

// addressLike matches a run of text around an @ that may be an address (no space,
// bracket, quote or separator in it). Compiled once: maskIn runs on every failed send.
var addressLike = regexp.MustCompile(`[^\s<>()\[\],;:"]+@[^\s<>()\[\],;:"]+`)

// maskIn returns text (a mail server's refusal, say) with the recipient's address masked
// as Mask masks it, in every spelling a server may write it back: as sent, as given (what
// the caller passed as Message.To), its local part quoted or not, its domain in punycode
// or in Unicode, in any letter case, Go-quoted or not. Any other address-like run is
// masked too (a server may write the address in a form of its own), and so is the local
// part written back alone (`<jane.doe>: Recipient address rejected`, `user jane.doe
// unknown`) where it cannot be a word of the reply (localEchoed).
//
// The spellings are matched as literal strings, case-insensitively, longest first: no
// regexp is compiled per send.
func (to Recipient) maskIn(text, given string) string {
	addresses, locals := to.spellings(given)
	text = replaceFold(text, addresses, nil, Mask)
	text = addressLike.ReplaceAllStringFunc(text, Mask)
	return replaceFold(text, locals, localEchoed, maskLocal)
}

// spellings are the ways a server may write the recipient back: whole addresses (every
// local part with every domain), and local parts alone. Each list is longest first, so
// that at one position the longest spelling is the one replaced, and holds each spelling
// once: the conversions and quotings that change nothing are not made.
func (to Recipient) spellings(given string) (addresses, locals []string) {
	var domains []string
	add := func(addr string) {
		at := strings.LastIndexByte(addr, '@')
		if at <= 0 {
			return
		}
		local, domain := addr[:at], addr[at+1:]
		locals = appendNew(locals, local)
		if strings.HasPrefix(local, `"`) { // the local part unquoted
			if a, err := mail.ParseAddress(addr); err == nil {
				locals = appendNew(locals, a.Address[:strings.LastIndexByte(a.Address, '@')])
			}
		}
		domains = appendNew(domains, domain)
		if strings.Contains(strings.ToLower(domain), "xn--") {
			if d, err := idna.ToUnicode(domain); err == nil {
				domains = appendNew(domains, d)
			}
		}
		if !isASCII(domain) {
			if d, err := idnaProfile.ToASCII(domain); err == nil {
				domains = appendNew(domains, d)
			}
		}
	}
	add(to.Address)
	if given = strings.TrimSpace(given); given != "" && given != to.Address {
		if a, err := mail.ParseAddress(given); err == nil {
			add(a.Address)
		}
	}
	for _, l := range locals {
		for _, d := range domains {
			addr := l + "@" + d
			addresses = append(addresses, addr)
			// go-mail writes the server's reply Go-quoted (%q): a quote of the local part
			// then reads \".
			if strings.ContainsAny(addr, `"\`) {
				quoted := strconv.Quote(addr)
				addresses = append(addresses, quoted[1:len(quoted)-1])
			}
		}
	}
	return longestFirst(addresses), longestFirst(locals)
}

// appendNew appends s to list unless list holds it.
func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// longestFirst sorts spellings longest first and drops repeats.
func longestFirst(spellings []string) []string {
	slices.SortFunc(spellings, func(a, b string) int {
		if c := cmp.Compare(len(b), len(a)); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return slices.Compact(spellings)
}

// replaceFold replaces, left to right, each occurrence in text of one of spellings (in
// any letter case; at one position the first that matches wins) that accept, when
// given, accepts, with mask of what text holds there.
func replaceFold(text string, spellings []string, accept func(text, spelling string, start, end int) bool, mask func(string) string) string {
	var out strings.Builder
	done := 0
	for i := 0; i < len(text); {
		matched := false
		for _, s := range spellings {
			end := i + len(s)
			if s == "" || end > len(text) || !strings.EqualFold(text[i:end], s) ||
				accept != nil && !accept(text, s, i, end) {
				continue
			}
			out.WriteString(text[done:i])
			out.WriteString(mask(text[i:end]))
			done, i, matched = end, end, true
			break
		}
		if !matched {
			_, size := utf8.DecodeRuneInString(text[i:])
			i += size
		}
	}
	if done == 0 {
		return text
	}
	out.WriteString(text[done:])
	return out.String()
}

// localEchoed reports whether the local part found at text[start:end] is the recipient's
// written back, not a word of the reply that happens to read the same. The rule:
//   - it must stand alone: the characters on either side cannot be part of an address
//     (so "jane" in "janet" or in "jane@other.example" is not it);
//   - a local part with a letter and a character words do not have (a dot, a digit, a
//     '+', '_', '-', a space: "jane.doe", "jdoe42") is masked wherever it stands alone,
//     since no reply's words read like that;
//   - a local part of letters only ("jane", "info", "user", "mailbox") may be a word the
//     reply itself uses, and masking that word would garble every reply to such an
//     address: it is masked only where the reply marks it as an address, between angle
//     brackets or quotes ("<jane>", "'jane'", `"jane"`, Go-quoted \"jane\").
//
// A local part of digits and dots only ("5.1.1") is treated like one of letters only,
// so a status code is never masked.
func localEchoed(text, local string, start, end int) bool {
	before, _ := utf8.DecodeLastRuneInString(text[:start])
	after, _ := utf8.DecodeRuneInString(text[end:])
	if start == 0 {
		before = ' '
	}
	if end == len(text) {
		after = ' '
	}
	if after == '.' { // a sentence's full stop, unless the address goes on after it
		if next, _ := utf8.DecodeRuneInString(text[end+1:]); end+1 < len(text) && inAddress(next) {
			return false
		}
		after = ' '
	}
	if inAddress(before) || inAddress(after) {
		return false
	}
	if distinctive(local) {
		return true
	}
	return strings.ContainsRune(`<"'`, before) && strings.ContainsRune(`>"'\`, after)
}

// inAddress reports whether r may be part of an unquoted address (RFC 5322 atext, a dot
// or the @; the apostrophe, though atext, is left out: replies quote with it).
func inAddress(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("!#$%&*+-/=?^_`{|}~.@", r)
}

// distinctive reports whether a local part has a letter and a character that is not
// one: no word of a mail server's reply reads like it.
func distinctive(local string) bool {
	return strings.IndexFunc(local, unicode.IsLetter) >= 0 &&
		strings.IndexFunc(local, func(r rune) bool { return !unicode.IsLetter(r) }) >= 0
}
