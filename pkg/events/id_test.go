package events

import (
	"sync"
	"testing"
	"time"
)

func TestEventIDsMadeTogetherShareTheirLeadingCharacters(t *testing.T) {
	at := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	a, b := newIDAt(at), newIDAt(at)
	later := newIDAt(at.Add(time.Hour))
	for _, id := range []string{a, b, later} {
		if !IsID(id) {
			t.Fatalf("%q does not have the shape of an event id", id)
		}
	}
	// "evt_" and the 9 characters of the millisecond's 45 leading bits.
	if a[:13] != b[:13] {
		t.Errorf("ids of one millisecond begin %q and %q: the time must lead", a[:13], b[:13])
	}
	if a == b {
		t.Errorf("two ids of one millisecond are both %q", a)
	}
	if later[:13] == a[:13] {
		t.Errorf("ids an hour apart both begin %q", a[:13])
	}
}

func TestEventIDsAreUniqueWhenMadeAtOnce(t *testing.T) {
	const workers, each = 8, 20_000
	ids := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range each {
				ids[w] = append(ids[w], NewID())
			}
		})
	}
	wg.Wait()
	seen := make(map[string]bool, workers*each)
	for _, list := range ids {
		for _, id := range list {
			if seen[id] {
				t.Fatalf("id %q made twice", id)
			}
			seen[id] = true
		}
	}
}
