package stack

import (
	"strconv"
	"strings"
)

// MetricSeries is one series of a metric in the Prometheus text exposition that
// Proc.Metrics reads: its labels and its value.
type MetricSeries struct {
	Labels map[string]string
	Value  float64
}

// ParseMetrics returns the series of the metric name in a text exposition, in their
// order. Label values are taken as written between their quotes: the methods, routes and
// codes Keyhouse labels with need no escapes.
func ParseMetrics(exposition, name string) []MetricSeries {
	var out []MetricSeries
	for _, line := range strings.Split(exposition, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue // another metric whose name starts with this one, or a comment
		}
		series := MetricSeries{Labels: map[string]string{}}
		if labels, after, ok := strings.Cut(strings.TrimPrefix(rest, "{"), "} "); rest[0] == '{' && ok {
			for _, pair := range strings.Split(labels, ",") {
				if k, v, ok := strings.Cut(pair, "="); ok {
					series.Labels[k] = strings.Trim(v, `"`)
				}
			}
			rest = after
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			continue
		}
		series.Value = v
		out = append(out, series)
	}
	return out
}
