package telemetry

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// gate is a log reader that stops reading while closed.
type gate struct {
	mu     sync.Mutex
	open   chan struct{}
	buf    bytes.Buffer
	writes int
}

func newGate() *gate { return &gate{open: make(chan struct{})} }

func (g *gate) Write(p []byte) (int, error) {
	<-g.open
	g.mu.Lock()
	defer g.mu.Unlock()
	g.writes++
	return g.buf.Write(p)
}

func (g *gate) text() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.String()
}

// While the reader is stopped, logging returns at once; past the buffer lines are
// dropped and counted, and once the reader reads again one line says how many.
func TestALoggerNeverWaitsForAStalledReader(t *testing.T) {
	g := newGate()
	log := NewLogger(g, "test", "info", "json")
	before := testutil.ToFloat64(logLinesDropped)
	const lines = LogBufferLines + 500
	done := make(chan struct{})
	go func() {
		for i := 0; i < lines; i++ {
			log.Info("request", "i", i)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("logging blocked on a stalled reader")
	}
	// One line is in the writer's hands (blocked in Write), LogBufferLines wait, the
	// rest were dropped.
	dropped := testutil.ToFloat64(logLinesDropped) - before
	if dropped < 500-1 || dropped > 500 {
		t.Fatalf("dropped %v lines, want about 500", dropped)
	}
	close(g.open)
	FlushLogs(time.Minute)
	log.Info("after the reader came back")
	FlushLogs(time.Minute)
	var reports []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(g.text()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON line: %q", line)
		}
		if m["msg"] == "log lines dropped: the log reader stalled" {
			reports = append(reports, m)
		}
	}
	if !strings.Contains(g.text(), "after the reader came back") {
		t.Fatal("the line after the stall is missing")
	}
	if len(reports) != 1 || reports[0]["dropped"] != dropped || reports[0]["level"] != "WARN" || reports[0]["service"] != "test" {
		t.Fatalf("drop reports %v, want one saying %v", reports, dropped)
	}
}

// FlushLogs writes what is buffered, and gives up on a reader that never reads.
func TestFlushLogsWritesWhatIsLeftAndGivesUpOnAStalledReader(t *testing.T) {
	var buf syncBuffer
	log := NewLogger(&buf, "test", "info", "text")
	log.Info("last words")
	FlushLogs(time.Minute)
	if !strings.Contains(buf.String(), "last words") {
		t.Fatalf("flushed %q", buf.String())
	}
	stalled := newGate()
	NewLogger(stalled, "test", "info", "text").Info("never read")
	start := time.Now()
	FlushLogs(50 * time.Millisecond)
	if time.Since(start) > 30*time.Second {
		t.Fatal("FlushLogs waited for a stalled reader")
	}
	close(stalled.open)
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
