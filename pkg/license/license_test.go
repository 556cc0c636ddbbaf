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
