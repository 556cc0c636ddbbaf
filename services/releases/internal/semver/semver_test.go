package semver

import (
	"bytes"
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestParseAcceptsSemVer200Only(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"0.0.0", "1.2.3", "10.20.30", "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-0.3.7",
		"1.0.0-x.7.z.92", "1.0.0-x-y-z.--", "1.0.0+20130313144700", "1.0.0-beta+exp.sha.5114f85",
		"1.0.0+21AF26D3----117B344092BD", "1.0.0-rc.1+build.1", "v1.2.3", "v2.0.0-rc.1",
		"99999999999999999999999.999999999999999999999.99999999999999999999",
	} {
		if _, ok := Parse(s); !ok {
			t.Errorf("Parse(%q) refused a valid version", s)
		}
	}
	for _, s := range []string{
		"", "1", "1.2", "1.2.3.4", "01.2.3", "1.02.3", "1.2.03", "1.2.3-01", "1.2.3-", "1.2.3+",
		"1.2.3-a..b", "1.2.3+a..b", "1.2.3-α", "1.2.3 ", " 1.2.3", "v", "vv1.2.3", "V1.2.3",
		"latest", "nightly-2026-11-23", "1.2.x", "-1.2.3", "1.2.3-beta_1", "1.2.3+build+again",
	} {
		if v, ok := Parse(s); ok {
			t.Errorf("Parse(%q) = %+v, want not a version", s, v)
		}
	}
}

// semver.org §11's own example chain, extended with the numeric cases that a string
// comparison gets wrong (2 < 11, 9 < 10).
var ascending = []string{
	"0.0.0-0", "0.0.0", "0.0.1", "0.9.0", "0.10.0",
	"1.0.0-0", "1.0.0-2", "1.0.0-11", "1.0.0-A", "1.0.0-Z", "1.0.0-a",
	"1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2",
	"1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "1.0.1", "1.1.0", "1.9.0", "1.10.0", "2.0.0-rc.1",
	"2.0.0", "9.0.0", "10.0.0", "100.0.0",
}

func TestPrecedenceFollowsSemVer200(t *testing.T) {
	t.Parallel()
	for i, a := range ascending {
		for j, b := range ascending {
			va, _ := Parse(a)
			vb, _ := Parse(b)
			want := cmp.Compare(i, j)
			if got := Compare(va, vb); got != want {
				t.Errorf("Compare(%s, %s) = %d, want %d", a, b, got, want)
			}
			if got := bytes.Compare(va.Key(), vb.Key()); got != want {
				t.Errorf("key order of %s, %s = %d, want %d", a, b, got, want)
			}
		}
	}
}

func TestPreReleaseRanksBelowItsRelease(t *testing.T) {
	t.Parallel()
	if !Newer("1.0.0", "1.0.0-rc.1") || Newer("1.0.0-rc.1", "1.0.0") {
		t.Fatal("1.0.0-rc.1 must rank below 1.0.0")
	}
	if !Newer("1.0.1-rc.1", "1.0.0") {
		t.Fatal("a pre-release of a later version must rank above the earlier release")
	}
}

func TestBuildMetadataDoesNotAffectPrecedence(t *testing.T) {
	t.Parallel()
	for _, pair := range [][2]string{{"1.0.0+a", "1.0.0+b"}, {"1.0.0", "1.0.0+build.7"}, {"2.0.0-rc.1+x", "2.0.0-rc.1+y.z"}} {
		a, _ := Parse(pair[0])
		b, _ := Parse(pair[1])
		if Compare(a, b) != 0 || !bytes.Equal(a.Key(), b.Key()) {
			t.Errorf("%s and %s must have equal precedence", pair[0], pair[1])
		}
		if Newer(pair[0], pair[1]) || Newer(pair[1], pair[0]) {
			t.Errorf("%s and %s: neither is newer", pair[0], pair[1])
		}
	}
}

func TestLeadingVIsTheSameVersion(t *testing.T) {
	t.Parallel()
	if !bytes.Equal(KeyOf("v1.2.3"), KeyOf("1.2.3")) {
		t.Fatal("v1.2.3 and 1.2.3 must have equal precedence")
	}
}

func TestNonSemverNeverBeatsSemver(t *testing.T) {
	t.Parallel()
	lowest := KeyOf("0.0.0-0")
	for _, s := range []string{"latest", "99", "zzz", "2026-11-23", "9.9.9.9"} {
		if !bytes.Equal(KeyOf(s), NotSemverKey) {
			t.Errorf("KeyOf(%q) is not NotSemverKey", s)
		}
		if bytes.Compare(KeyOf(s), lowest) >= 0 {
			t.Errorf("%q sorts at or above 0.0.0-0", s)
		}
		if Newer(s, "0.0.0-0") {
			t.Errorf("%q offered over a parseable current version", s)
		}
		if !Newer("0.0.0-0", s) {
			t.Errorf("a parseable version is not offered over %q", s)
		}
	}
}

func TestNewerWhenCurrentIsAlreadyLatest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		latest, current string
		want            bool
	}{
		{"1.2.0", "1.1.9", true},
		{"1.2.0", "1.2.0", false},
		{"1.2.0", "1.3.0", false}, // a current version newer than the latest counts as current
		{"1.2.0", "v1.2.0", false},
		{"nightly-2", "nightly-1", true}, // two non-versions: only equality is known
		{"nightly-2", "nightly-2", false},
		{"nightly-2", "1.0.0", false},
		{"1.0.0", "nightly-2", true},
		{"1.0.0", "", true},
	} {
		if got := Newer(tc.latest, tc.current); got != tc.want {
			t.Errorf("Newer(%q, %q) = %v, want %v", tc.latest, tc.current, got, tc.want)
		}
	}
}

// The key order and Compare agree on every pair of many random versions, so the SQL
// ORDER BY and the spec's rules cannot drift apart.
func TestKeyOrderEqualsCompareOnRandomVersions(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	num := func() string { return fmt.Sprint([]int{0, 1, 2, 9, 10, 11, 99, 100, 1234567890123}[r.IntN(9)]) }
	ident := func() string {
		if r.IntN(2) == 0 {
			return num()
		}
		return []string{"a", "alpha", "alpha1", "b", "beta", "rc", "RC", "x-y", "-", "0a"}[r.IntN(10)]
	}
	var vs []Version
	for range 400 {
		s := num() + "." + num() + "." + num()
		if r.IntN(3) > 0 {
			n := 1 + r.IntN(3)
			pre := make([]string, n)
			for i := range pre {
				pre[i] = ident()
			}
			s += "-" + strings.Join(pre, ".")
		}
		if r.IntN(4) == 0 {
			s += "+build." + num()
		}
		v, ok := Parse(s)
		if !ok {
			t.Fatalf("generated %q does not parse", s)
		}
		vs = append(vs, v)
	}
	for _, a := range vs {
		for _, b := range vs {
			if got, want := bytes.Compare(a.Key(), b.Key()), Compare(a, b); got != want {
				t.Fatalf("%+v vs %+v: key order %d, Compare %d", a, b, got, want)
			}
		}
	}
	// Sorting by key gives the same sequence as sorting by Compare.
	byKey, byCmp := slices.Clone(vs), slices.Clone(vs)
	slices.SortStableFunc(byKey, func(a, b Version) int { return bytes.Compare(a.Key(), b.Key()) })
	slices.SortStableFunc(byCmp, Compare)
	for i := range byKey {
		if Compare(byKey[i], byCmp[i]) != 0 {
			t.Fatalf("position %d: %+v vs %+v", i, byKey[i], byCmp[i])
		}
	}
}

func FuzzKeyOrderEqualsCompare(f *testing.F) {
	for _, s := range ascending {
		f.Add(s, "1.0.0-rc.1+b")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		va, oka := Parse(a)
		vb, okb := Parse(b)
		if !oka || !okb {
			return
		}
		if got, want := bytes.Compare(va.Key(), vb.Key()), Compare(va, vb); got != want {
			t.Fatalf("%q vs %q: key order %d, Compare %d", a, b, got, want)
		}
	})
}
