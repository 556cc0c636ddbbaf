package bench

import (
	"math"
	"testing"
	"time"
)

// The bound and the ceiling are two readings of one inequality: at the ceiling's refusal
// cost the bound is exactly the share asked for, and the figures of docs/performance-history.md's
// one-CPU runs (an answer about 113 µs, a refusal about 40 µs) give the goodput those runs
// measured at 2× (33–49% of capacity).
func TestGoodputBoundAndRefusalCeilingAgree(t *testing.T) {
	answer := 113 * time.Microsecond
	for _, c := range []struct {
		refusal time.Duration
		k, want float64
	}{
		{0, 2, 1},
		{0, 4, 1},
		{40 * time.Microsecond, 2, 33.0 / 73},
		{40 * time.Microsecond, 4, 0},
		{10 * time.Microsecond, 4, 73.0 / 103},
		{answer, 2, 0.5},
		{2 * answer, 4, 0.25},
	} {
		if got := goodputBound(answer, c.refusal, c.k); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("goodputBound(%v, %v, %g) = %.4f, want %.4f", answer, c.refusal, c.k, got, c.want)
		}
	}
	for _, k := range []float64{2, 4} {
		ceiling := refusalCeiling(answer, k, 0.9)
		// The ceiling is whole nanoseconds, so the bound is 0.9 to within one of them.
		if got := goodputBound(answer, ceiling, k); math.Abs(got-0.9) > 1e-4 {
			t.Errorf("at %g× with a refusal of %v (the ceiling for 90%%) the bound is %.4f, want 0.9", k, ceiling, got)
		}
		if worse := goodputBound(answer, ceiling+time.Microsecond, k); worse >= 0.9 {
			t.Errorf("at %g× a refusal dearer than the ceiling still allows %.4f", k, worse)
		}
	}
	if got, want := refusalCeiling(answer, 2, 0.9), answer/11; got != want {
		t.Errorf("refusalCeiling at 2× = %v, want %v (a tenth of an answer over 1.1)", got, want)
	}
}

// A phase's refusals are charged only the CPU its answers did not use, and the bench's
// own process (the load generator) is never the stack's.
func TestCPUPerRefusalChargesWhatTheAnswersLeft(t *testing.T) {
	p := &phase{
		cpu:           CPUTimes{"gateway": 700 * time.Millisecond, "licensing": 300 * time.Millisecond, "bench": 900 * time.Millisecond},
		acceptedCount: 5000,
		refusals:      make([]time.Duration, 9000),
		errors:        1000,
	}
	if got := p.stackCPU(); got != time.Second {
		t.Fatalf("stackCPU = %v, want 1s (the bench's process left out)", got)
	}
	if got, want := p.cpuPerAnswer(), 200*time.Microsecond; got != want {
		t.Errorf("cpuPerAnswer = %v, want %v", got, want)
	}
	// 5,000 answers at 100 µs used 500 ms; the other 500 ms over 10,000 refusals and errors.
	if got, want := p.cpuPerRefusal(100*time.Microsecond), 50*time.Microsecond; got != want {
		t.Errorf("cpuPerRefusal = %v, want %v", got, want)
	}
	// Answers dearer than the phase's whole CPU leave the refusals nothing, not a negative.
	if got := p.cpuPerRefusal(time.Millisecond); got != 0 {
		t.Errorf("cpuPerRefusal with answers costing more than the phase used = %v, want 0", got)
	}
	// A phase of 2 s whose generator got 30,000 requests out delivered 15,000 a second,
	// whatever it was asked to offer.
	lagging := &phase{offered: 40000, duration: 2 * time.Second, outcomes: make([]outcome, 30000)}
	if got := lagging.delivered(); got != 15000 {
		t.Errorf("delivered = %g, want 15000", got)
	}
	if got := (&phase{}).cpuPerRefusal(time.Millisecond); got != 0 {
		t.Errorf("cpuPerRefusal of a phase without refusals = %v, want 0", got)
	}
}
