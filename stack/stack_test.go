package stack

import (
	"strings"
	"testing"
)

// With fixed ports (make run), a METRICS_PORT in the launcher's environment must not reach
// every process: each service serves metrics on its own port + 1000.
func TestFixedPortsGiveEachProcessItsOwnMetricsPort(t *testing.T) {
	t.Setenv("METRICS_PORT", "19080")
	s := &Stack{opts: Options{FirstServicePort: 9101}}
	extra := map[string]string{"GRPC_ADDR": "127.0.0.1:9102"}
	addr, err := s.metricsAddr(extra)
	if err != nil || addr != "127.0.0.1:10102" {
		t.Fatalf("metrics address %q, %v", addr, err)
	}
	seen := ""
	for _, kv := range s.environ(extra) {
		if v, ok := strings.CutPrefix(kv, "METRICS_PORT="); ok {
			seen = v // the last one wins, as in exec.Cmd
		}
	}
	if seen != "10102" {
		t.Fatalf("the process gets METRICS_PORT=%s, want 10102", seen)
	}
}
