package stack

import (
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// MetricSeries is one series of a metric in the Prometheus text exposition that
// Proc.Metrics reads: its labels and its value.
type MetricSeries struct {
	Labels map[string]string
	Value  float64
}

// ParseMetrics returns the series of the counter or gauge name in a text exposition
// (Prometheus's own parser), in their order; nothing when the exposition does not parse.
func ParseMetrics(exposition, name string) []MetricSeries {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(exposition))
	if err != nil {
		return nil
	}
	var out []MetricSeries
	for _, m := range families[name].GetMetric() {
		series := MetricSeries{Labels: map[string]string{}}
		for _, l := range m.GetLabel() {
			series.Labels[l.GetName()] = l.GetValue()
		}
		switch {
		case m.Counter != nil:
			series.Value = m.GetCounter().GetValue()
		case m.Gauge != nil:
			series.Value = m.GetGauge().GetValue()
		case m.Untyped != nil:
			series.Value = m.GetUntyped().GetValue()
		default:
			continue
		}
		out = append(out, series)
	}
	return out
}
