package stack

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// With fixed ports (make run), a METRICS_PORT in the launcher's environment must not reach
// every process: each service serves metrics on its own port + 1000.
func TestFixedPortsGiveEachProcessItsOwnMetricsPort(t *testing.T) {
	t.Setenv("METRICS_PORT", "19080")
	s := &Stack{opts: Options{FirstServicePort: 9101}}
	for range 20 {
		own, err := listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer own.Close()
		if portOf(own) > 64000 {
			continue
		}
		extra := map[string]string{"GRPC_ADDR": own.Addr().String()}
		metrics, err := s.metricsSocket(extra, own)
		if errors.Is(err, syscall.EADDRINUSE) {
			continue // port + 1000 is some other process's; try another
		}
		if err != nil {
			t.Fatal(err)
		}
		defer metrics.Close()
		want := strconv.Itoa(portOf(own) + 1000)
		if got := strconv.Itoa(portOf(metrics)); got != want {
			t.Fatalf("metrics port %s, want %s", got, want)
		}
		seen := ""
		for _, kv := range s.environ(extra) {
			if v, ok := strings.CutPrefix(kv, "METRICS_PORT="); ok {
				seen = v // the last one wins, as in exec.Cmd
			}
		}
		if seen != want {
			t.Fatalf("the process gets METRICS_PORT=%s, want %s", seen, want)
		}
		return
	}
	t.Fatal("no port whose port + 1000 was free in 20 tries")
}

// Without fixed ports each process gets a metrics port of its own, bound before it starts.
func TestFreeMetricsPortIsBoundAndNamed(t *testing.T) {
	s := &Stack{}
	own, err := listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	extra := map[string]string{}
	metrics, err := s.metricsSocket(extra, own)
	if err != nil {
		t.Fatal(err)
	}
	defer metrics.Close()
	if extra["METRICS_PORT"] != strconv.Itoa(portOf(metrics)) || portOf(metrics) == portOf(own) {
		t.Fatalf("METRICS_PORT=%s for a socket on %s (own %s)", extra["METRICS_PORT"], metrics.Addr(), own.Addr())
	}
	if _, err := net.Listen("tcp", metrics.Addr().String()); err == nil {
		t.Fatal("the metrics port is not held until the process inherits it")
	}
}

// A port the stack chooses is below the kernel's range for outgoing connections, so a
// service started again on its port never finds it taken by some process's connection.
func TestChosenPortsAreBelowTheOutgoingConnectionsRange(t *testing.T) {
	low, high, ok := belowEphemeral()
	if !ok {
		t.Skip("this kernel's range for outgoing connections starts too low to stay below")
	}
	for range 50 {
		l, err := listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := portOf(l)
		_ = l.Close()
		if port < low || port >= high {
			t.Fatalf("chose port %d, want one in [%d, %d)", port, low, high)
		}
	}
}
