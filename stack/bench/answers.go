package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/keyhouse/keyhouse/stack"
)

// answerMetric is the gateway's count of cacheable questions by route and result (hit:
// answered from its cache; miss: a service was asked), pkg/metrics.AnswerCache.
const answerMetric = "keyhouse_gateway_answer_cache_total"

// Answers counts, by route, the cacheable questions the gateways answered from their
// caches and those they asked a service about.
type Answers map[string]HitsMisses

// HitsMisses is a route's questions: answered from a cache, and asked of a service.
type HitsMisses struct{ Hits, Misses float64 }

// Sample is what RunSlice reads before and after a slice: the CPU of every process, and
// the gateways' cache answers.
type Sample struct {
	CPU     CPUTimes
	Stolen  time.Duration
	Answers Answers
}

// SampleStack reads the CPU times of s's processes and their gateways' cache answers.
func SampleStack(s *stack.Stack) Sample {
	return Sample{CPU: SampleCPU(s), Stolen: StolenCPU(), Answers: SampleAnswers(s)}
}

// SampleAnswers reads the cache answers of every gateway of s from its /metrics. A
// gateway that cannot be read is left out.
func SampleAnswers(s *stack.Stack) Answers {
	out := Answers{}
	for _, p := range s.Procs() {
		if p.Name != "gateway" || p.MetricsAddr == "" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		metrics, err := p.Metrics(ctx)
		cancel()
		if err != nil {
			continue
		}
		for _, series := range stack.ParseMetrics(metrics, answerMetric) {
			route := series.Labels["route"]
			hm := out[route]
			if series.Labels["result"] == "hit" {
				hm.Hits += series.Value
			} else {
				hm.Misses += series.Value
			}
			out[route] = hm
		}
	}
	return out
}

// Sub returns the answers counted between before and a.
func (a Answers) Sub(before Answers) Answers {
	out := Answers{}
	for route, hm := range a {
		b := before[route]
		if d := (HitsMisses{hm.Hits - b.Hits, hm.Misses - b.Misses}); d.Hits+d.Misses > 0 {
			out[route] = d
		}
	}
	return out
}

// share is the share of a's questions, every route's, answered from a cache (0 for none).
func (a Answers) share() float64 {
	var hits, all float64
	for _, hm := range a {
		hits, all = hits+hm.Hits, all+hm.Hits+hm.Misses
	}
	if all == 0 {
		return 0
	}
	return hits / all
}

// add adds b's counts to a.
func (a Answers) add(b Answers) {
	for route, hm := range b {
		s := a[route]
		a[route] = HitsMisses{s.Hits + hm.Hits, s.Misses + hm.Misses}
	}
}

// CacheAnswers says, for every row whose requests the gateway could answer from its
// cache, which share it did: the figure behind a read row's cost (a hit is a few µs, a
// miss the whole path to Postgres), and what tells a hot set's row from a spread's.
func CacheAnswers(results []Result) string {
	var b strings.Builder
	for _, r := range results {
		routes := make([]string, 0, len(r.Answers))
		for route := range r.Answers {
			routes = append(routes, route)
		}
		slices.Sort(routes)
		for _, route := range routes {
			hm := r.Answers[route]
			fmt.Fprintf(&b, "- %s: the gateway's cache answered %s of its %.0f %s questions\n",
				r.Name, pct(hm.Hits/(hm.Hits+hm.Misses)), hm.Hits+hm.Misses, strings.TrimPrefix(route, "/v1/"))
		}
	}
	return b.String()
}
