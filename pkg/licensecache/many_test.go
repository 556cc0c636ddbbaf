package licensecache

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// GetMany loads only what the cache lacks, each key once, keeps what it found (not what
// it did not), and answers the same values Get would.
func TestGetManyLoadsOnlyTheMissesOnce(t *testing.T) {
	c, _ := newTestCache(time.Minute)
	_, _ = c.Get("a", constant(1))
	var asked [][]string
	load := func(missing []string) (map[string]int64, error) {
		asked = append(asked, slices.Clone(missing))
		out := map[string]int64{}
		for _, k := range missing {
			if k != "unknown" {
				out[k] = int64(len(k))
			}
		}
		return out, nil
	}
	got, err := c.GetMany([]string{"a", "bb", "bb", "unknown", "ccc"}, load)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"a": 1, "bb": 2, "ccc": 3}; !maps(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if len(asked) != 1 || !slices.Equal(asked[0], []string{"bb", "unknown", "ccc"}) {
		t.Fatalf("loads: %v, want one of [bb unknown ccc]", asked)
	}
	// Kept: a second call loads only the unknown key again.
	asked = nil
	if _, err := c.GetMany([]string{"bb", "ccc", "unknown"}, load); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 || !slices.Equal(asked[0], []string{"unknown"}) {
		t.Fatalf("second loads: %v, want [unknown]", asked)
	}
	if v, _ := c.Get("bb", func() (int64, error) { t.Fatal("bb not kept"); return 0, nil }); v != 2 {
		t.Fatalf("Get after GetMany: %d", v)
	}
}

// A load that overlapped an invalidation is answered but not kept; a failed load keeps
// nothing and returns its error.
func TestGetManyKeepsNothingReadBeforeAnInvalidation(t *testing.T) {
	c, _ := newTestCache(time.Minute)
	got, err := c.GetMany([]string{"a"}, func([]string) (map[string]int64, error) {
		c.Invalidate("a")
		return map[string]int64{"a": 1}, nil
	})
	if err != nil || got["a"] != 1 {
		t.Fatalf("got %v, %v", got, err)
	}
	reads := 0
	_, _ = c.Get("a", func() (int64, error) { reads++; return 2, nil })
	if reads != 1 {
		t.Fatal("an answer read before the invalidation was kept")
	}
	boom := errors.New("boom")
	if _, err := c.GetMany([]string{"x"}, func([]string) (map[string]int64, error) { return nil, boom }); err != boom {
		t.Fatalf("got %v, want the load's error", err)
	}
	if _, ok := c.entries.lookup("x", ""); ok {
		t.Fatal("a failed load kept an entry")
	}
}

func maps(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
