package telemetry

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// LogBufferLines is how many log lines a process holds for a reader that has stopped
// reading (a suspended terminal, a blocked log driver): about 256 KiB of typical lines.
// Past it, lines are dropped rather than the request that logs them made to wait.
const LogBufferLines = 1024

// logLinesDropped counts the lines dropped because the log reader stalled.
var logLinesDropped = promauto.NewCounter(prometheus.CounterOpts{
	Name: "keyhouse_log_lines_dropped_total",
	Help: "Log lines dropped because whatever reads the process's output stopped reading and the log buffer was full.",
})

// boundedWriter hands each line (one Write: slog writes a record in one call) to a
// goroutine that writes it to out, so a Write never waits for out. When LogBufferLines
// are waiting, a line is dropped and counted; once out takes a line again, the writer
// says how many were dropped before the next one.
type boundedWriter struct {
	out     io.Writer
	lines   chan []byte
	dropped atomic.Uint64 // since the last report
	// report formats the "log lines dropped" line for n lines, in the logger's format.
	report func(n uint64) []byte
	// pending counts lines accepted and not yet written, for flush.
	pending sync.WaitGroup
}

func newBoundedWriter(out io.Writer, capacity int, report func(n uint64) []byte) *boundedWriter {
	w := &boundedWriter{out: out, lines: make(chan []byte, capacity), report: report}
	go w.run()
	return w
}

func (w *boundedWriter) Write(p []byte) (int, error) {
	line := append([]byte(nil), p...)
	w.pending.Add(1)
	select {
	case w.lines <- line:
	default:
		w.pending.Done()
		w.dropped.Add(1)
		logLinesDropped.Inc()
	}
	return len(p), nil
}

func (w *boundedWriter) run() {
	for line := range w.lines {
		if n := w.dropped.Swap(0); n > 0 {
			_, _ = w.out.Write(w.report(n))
		}
		_, _ = w.out.Write(line)
		w.pending.Done()
	}
}

// flush waits until every accepted line is written or ctx ends, and reports drops that
// no later line has reported yet.
func (w *boundedWriter) flush(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		w.pending.Wait()
		if n := w.dropped.Swap(0); n > 0 {
			_, _ = w.out.Write(w.report(n))
		}
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

var (
	writersMu sync.Mutex
	writers   []*boundedWriter
)

// FlushLogs writes what the process's loggers still hold, waiting at most timeout (a
// stalled reader must not keep a stopping process alive). Call it last, before exit.
func FlushLogs(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	writersMu.Lock()
	ws := append([]*boundedWriter(nil), writers...)
	writersMu.Unlock()
	for _, w := range ws {
		w.flush(ctx)
	}
}
