package license

import (
	"strings"
	"testing"
)

func TestNewKeyFormatAndEntropy(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 2000; i++ {
		k := NewKey()
		if len(k) != 34 || strings.Count(k, "-") != 6 || CanonicalKey(k) != k {
			t.Fatalf("key %q", k)
		}
		if seen[k] {
			t.Fatalf("duplicate key %q", k)
		}
		seen[k] = true
	}
}

func TestCanonicalKeyForgivesHowPeopleTypeKeys(t *testing.T) {
	const k = "7KQ2-M9XD-4HRT-0BWN-ZC3E-P6YA-1GVF"
	for _, typed := range []string{
		k,
		strings.ToLower(k),
		strings.ReplaceAll(k, "-", ""),
		strings.ReplaceAll(k, "-", " "),
		"7KQ2-M9XD-4HRT-OBWN-ZC3E-P6YA-IGVF", // O for 0, I for 1
		"7kq2m9xd4hrtobwnzc3ep6yalgvf",       // l for 1
	} {
		if got := CanonicalKey(typed); got != k {
			t.Errorf("CanonicalKey(%q) = %q", typed, got)
		}
	}
	for _, other := range []string{"", "short", "7KQ2-M9XD-4HRT-0BWN-ZC3E-P6YA-1GV", "7KQ2-M9XD-4HRT-0BWN-ZC3E-P6YA-1GVU", "ÿKQ2-M9XD-4HRT-0BWN-ZC3E-P6YA-1GVF"} {
		if got := CanonicalKey(other); got != other {
			t.Errorf("CanonicalKey(%q) = %q, want it unchanged", other, got)
		}
	}
}

// A key written as issued is its own canonical form, returned as it is: every hot route
// canonicalizes its key at least twice (admission control, the handler, the service). A
// string one character off that form still goes the long way, to the same answer.
func TestAKeyAsIssuedIsReturnedWithoutACopy(t *testing.T) {
	k := NewKey()
	if allocs := testing.AllocsPerRun(100, func() { _ = CanonicalKey(k) }); allocs != 0 {
		t.Errorf("CanonicalKey of a key as issued allocated %g times; want 0", allocs)
	}
	for _, c := range []struct{ typed, want string }{
		{strings.ToLower(k), k},
		{k[:4] + " " + k[5:], k},
		{k[:10] + "O" + k[11:], k[:10] + "0" + k[11:]},
		{k[:10] + "U" + k[11:], k[:10] + "U" + k[11:]},
		{k + "-", k},
		{"-" + k[1:], "-" + k[1:]},
	} {
		if got := CanonicalKey(c.typed); got != c.want {
			t.Errorf("CanonicalKey(%q) = %q; want %q", c.typed, got, c.want)
		}
	}
}
