package input

import (
	"net/url"
	"testing"
	"unicode/utf8"
)

func TestThePolicy(t *testing.T) {
	for _, tc := range []struct {
		s          string
		identifier Problem
		text       Problem
	}{
		{"ABCD-EFGH-1234", OK, OK},
		{"Zoë ключ 🎫", OK, OK},
		{"x\n", Control, OK},
		{"a\tb", Control, OK},
		{"x\x00", NUL, NUL},
		{"\r", Control, OK},
		{"\x01", Control, OK},
		{"\x1f", Control, OK},
		{"\x7f", Control, OK},
		{"\u0085", Control, OK},
		{"\xff\xfe", NotUTF8, NotUTF8},
		{"whsec_\xff", NotUTF8, NotUTF8},
		{"", OK, OK},
	} {
		if got := Identifier(tc.s); got != tc.identifier {
			t.Errorf("Identifier(%q) = %s, want %s", tc.s, got, tc.identifier)
		}
		if got := Text(tc.s); got != tc.text {
			t.Errorf("Text(%q) = %s, want %s", tc.s, got, tc.text)
		}
	}
}

func TestTrimmedIdentifierAllowsWhiteSpaceAtItsEndsOnly(t *testing.T) {
	for s, want := range map[string]Problem{"  app\t": OK, "\napp\r\n": OK, "a\tpp": Control, "app\x00": NUL, "\x01app": Control, "\xffapp ": NotUTF8} {
		if got := TrimmedIdentifier(s); got != want {
			t.Errorf("TrimmedIdentifier(%q) = %s, want %s", s, got, want)
		}
	}
}

func TestCheckValuesNamesTheFirstRefusedFieldInNameOrder(t *testing.T) {
	v := url.Values{"tier": {"\xff"}, "notes": {"a\nb"}, "plan": {"x\x01"}}
	if err := CheckValues(v, "notes"); err == nil || err.Error() != "plan must not contain control characters" {
		t.Fatalf("got %v", err)
	}
	delete(v, "plan")
	if err := CheckValues(v, "notes"); err == nil || err.Error() != "tier is not valid UTF-8" {
		t.Fatalf("got %v", err)
	}
	delete(v, "tier")
	if err := CheckValues(v, "notes"); err != nil {
		t.Fatalf("notes with a line break: %v", err)
	}
	if err := CheckValues(url.Values{"\xff": {"1"}}); err == nil || err.(*Error).Field != NameField {
		t.Fatalf("bad name: %v", err)
	}
}

func TestDecimalIsDigitsOnly(t *testing.T) {
	for s, want := range map[string]int64{"0": 0, "05": 5, "38": 38, "9223372036854775807": 9223372036854775807} {
		if n, ok := Decimal(s); !ok || n != want {
			t.Errorf("Decimal(%q) = %d, %v, want %d", s, n, ok, want)
		}
	}
	for _, s := range []string{"", "+38", "-4", " 5", "5 ", "1.5", "0x5", "1e3", "٣", "9223372036854775808"} {
		if n, ok := Decimal(s); ok {
			t.Errorf("Decimal(%q) = %d, a number", s, n)
		}
	}
}

// Identifier accepts exactly valid UTF-8 without a control character.
func FuzzIdentifier(f *testing.F) {
	for _, s := range []string{"ABCD", "x\n", "x\x00", "\xff\xfe", "\u0085", "ключ", "\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := utf8.ValidString(s)
		for _, r := range s {
			if r < 0x20 || r >= 0x7f && r <= 0x9f {
				want = false
			}
		}
		if got := Identifier(s) == OK; got != want {
			t.Fatalf("Identifier(%q) ok=%v, want %v", s, got, want)
		}
		if Identifier(s) == OK && Text(s) != OK {
			t.Fatalf("an identifier %q that is not text", s)
		}
	})
}
