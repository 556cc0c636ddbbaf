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
		if got := goodputBound(answer, c.refusal, c.k, 1); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("goodputBound(%v, %v, %g) = %.4f, want %.4f", answer, c.refusal, c.k, got, c.want)
		}
	}
	for _, k := range []float64{2, 4} {
		ceiling := refusalCeiling(answer, k, 0.9)
		// The ceiling is whole nanoseconds, so the bound is 0.9 to within one of them.
		if got := goodputBound(answer, ceiling, k, 1); math.Abs(got-0.9) > 1e-4 {
			t.Errorf("at %g× with a refusal of %v (the ceiling for 90%%) the bound is %.4f, want 0.9", k, ceiling, got)
		}
		if worse := goodputBound(answer, ceiling+time.Microsecond, k, 1); worse >= 0.9 {
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

// On the CPU a phase had, with the refusal cost measured from that phase, the bound is
// exactly the goodput the phase measured: the bound's gap to the goodput is the CPU the
// stack had less than at capacity, and nothing else. The figures are the 2026-11-29 full
// run's 2× phase (capacity 6,138/s at 142% of a core, the phase 2,522/s answered of
// 11,295/s delivered at 130%), which measured 41.1% against a bound of 54.2% on the
// capacity's CPU.
func TestGoodputBoundOnThePhasesOwnCPUIsWhatItMeasured(t *testing.T) {
	second := time.Second
	capacity := &phase{duration: 10 * second, acceptedCount: 61380, cpu: CPUTimes{"gateway": 14200 * time.Millisecond, "bench": 3900 * time.Millisecond}}
	p := &phase{duration: 10 * second, acceptedCount: 25220, refusals: make([]time.Duration, 112950-25220),
		outcomes: make([]outcome, 112950), cpu: CPUTimes{"gateway": 13000 * time.Millisecond, "bench": 6600 * time.Millisecond}}
	c := float64(capacity.acceptedCount) / capacity.duration.Seconds()
	perAnswer := capacity.cpuPerAnswer()
	refusal := p.cpuPerRefusal(perAnswer)
	k := p.delivered() / c
	measured := float64(p.acceptedCount) / p.duration.Seconds() / c
	onItsOwn := goodputBound(perAnswer, refusal, k, p.cores("")/capacity.cores(""))
	if math.Abs(onItsOwn-measured) > 1e-3 {
		t.Errorf("bound on the phase's own CPU %.4f, measured %.4f: want the same", onItsOwn, measured)
	}
	if onCapacity := goodputBound(perAnswer, refusal, k, 1); onCapacity < measured+0.1 {
		t.Errorf("bound on the capacity's CPU %.4f, want about 13 points above the measured %.4f", onCapacity, measured)
	}
	if got := p.cores("bench"); math.Abs(got-0.66) > 1e-9 {
		t.Errorf("cores(bench) = %g, want 0.66", got)
	}
}
