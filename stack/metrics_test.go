package stack

import (
	"reflect"
	"testing"
)

func TestParseMetricsReadsEachSeriesOfOneMetric(t *testing.T) {
	exposition := `# HELP keyhouse_gateway_answer_cache_total Cacheable questions.
# TYPE keyhouse_gateway_answer_cache_total counter
keyhouse_gateway_answer_cache_total{result="hit",route="/v1/verify-license"} 123
keyhouse_gateway_answer_cache_total{result="miss",route="/v1/verify-license"} 4.5e+06
keyhouse_gateway_answer_cache_total_created{result="hit",route="/v1/verify-license"} 1.7e+09
keyhouse_build_info 1
keyhouse_gateway_answer_cache_total{result="hit",route="/v1/check-update"} 7
`
	want := []MetricSeries{
		{Labels: map[string]string{"result": "hit", "route": "/v1/verify-license"}, Value: 123},
		{Labels: map[string]string{"result": "miss", "route": "/v1/verify-license"}, Value: 4.5e6},
		{Labels: map[string]string{"result": "hit", "route": "/v1/check-update"}, Value: 7},
	}
	if got := ParseMetrics(exposition, "keyhouse_gateway_answer_cache_total"); !reflect.DeepEqual(got, want) {
		t.Errorf("series:\n got %v\nwant %v", got, want)
	}
	if got := ParseMetrics(exposition, "keyhouse_build_info"); len(got) != 1 || got[0].Value != 1 || len(got[0].Labels) != 0 {
		t.Errorf("a series without labels: %v", got)
	}
}
