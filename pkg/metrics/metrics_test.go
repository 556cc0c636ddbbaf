package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Every process registers this package's series; admission control runs in the gateway
// alone, so its series (keyhouse_admission_*, gateway/internal/admission) are not here:
// a service exporting them at 0 would read as a gateway that admits nothing.
func TestNoProcessGetsTheGatewaysAdmissionSeriesFromHere(t *testing.T) {
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "keyhouse_admission_") {
			t.Errorf("pkg/metrics registers %s, which only the gateway has", f.GetName())
		}
	}
}
