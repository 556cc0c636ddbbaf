package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"google.golang.org/grpc/grpclog"
)

// RouteLibraryLogs sends the logs of the libraries every process links through log, so
// every line on stderr has the configured format (LOG_FORMAT): the standard library's
// log package (and whatever uses it) at INFO, and gRPC's own logger. gRPC's info and
// warning lines (reconnect attempts, resolver updates) become DEBUG and its errors WARN:
// a dependency outage is reported once by the readiness monitor, not once per redial.
// go-redis is routed by the gateway, the one process that links it.
func RouteLibraryLogs(log *slog.Logger) {
	slog.SetDefault(log)
	grpclog.SetLoggerV2(grpcLogger{log: log.With("component", "grpc")})
}

type grpcLogger struct{ log *slog.Logger }

func (g grpcLogger) emit(level slog.Level, msg string) {
	g.log.Log(context.Background(), level, msg)
}

func (g grpcLogger) Info(args ...any)   { g.emit(slog.LevelDebug, fmt.Sprint(args...)) }
func (g grpcLogger) Infoln(args ...any) { g.emit(slog.LevelDebug, fmt.Sprint(args...)) }
func (g grpcLogger) Infof(format string, args ...any) {
	g.emit(slog.LevelDebug, fmt.Sprintf(format, args...))
}
func (g grpcLogger) Warning(args ...any)   { g.emit(slog.LevelDebug, fmt.Sprint(args...)) }
func (g grpcLogger) Warningln(args ...any) { g.emit(slog.LevelDebug, fmt.Sprint(args...)) }
func (g grpcLogger) Warningf(format string, args ...any) {
	g.emit(slog.LevelDebug, fmt.Sprintf(format, args...))
}
func (g grpcLogger) Error(args ...any)   { g.emit(slog.LevelWarn, fmt.Sprint(args...)) }
func (g grpcLogger) Errorln(args ...any) { g.emit(slog.LevelWarn, fmt.Sprint(args...)) }
func (g grpcLogger) Errorf(format string, args ...any) {
	g.emit(slog.LevelWarn, fmt.Sprintf(format, args...))
}
func (g grpcLogger) Fatal(args ...any)                 { g.fatal(fmt.Sprint(args...)) }
func (g grpcLogger) Fatalln(args ...any)               { g.fatal(fmt.Sprint(args...)) }
func (g grpcLogger) Fatalf(format string, args ...any) { g.fatal(fmt.Sprintf(format, args...)) }

// V reports whether verbose logs of level l are wanted: never, gRPC's verbose output is
// for debugging gRPC itself.
func (g grpcLogger) V(l int) bool { return l <= 0 }

func (g grpcLogger) fatal(msg string) {
	g.emit(slog.LevelError, msg)
	os.Exit(1)
}
