// Package stack runs the whole Keyhouse stack on one machine: Postgres, Redis and NATS
// from devinfra (unless given their URLs), every service binary (migrated first), and one
// or more gateways. `make run` uses it with data kept under .keyhouse/; the integration
// tests (stack/e2e) and the benchmarks use it on testkit's shared servers.
package stack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/keyhouse/keyhouse/devinfra"
	"github.com/keyhouse/keyhouse/devinfra/devnats"
	"github.com/keyhouse/keyhouse/pkg/listenfd"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Services lists the service binaries in start order; the gateway comes last.
var Services = []string{"billing", "licensing", "activations", "releases", "storefront", "events"}

// portOffset keeps fixed ports in the order of pkg/config's defaults (9101 licensing …
// 9106 events), so `make run` matches what the binaries assume when run by hand.
var portOffset = map[string]int{"licensing": 0, "activations": 1, "releases": 2, "billing": 3, "storefront": 4, "events": 5}

// Options configure Start.
type Options struct {
	// Dir holds data, logs and pid files.
	Dir string
	// BinDir holds the built binaries (see Build).
	BinDir string
	// Env is passed to every process on top of what the stack sets (PORT, MULTI_TENANT,
	// TRUSTED_PROXIES, ADMIN_RATE_LIMIT_MAX, ...). DATABASE_URL, REDIS_URL or NATS_URL
	// present here are used instead of starting that dependency.
	Env map[string]string
	// Fixed ports (make run); zero picks free ports (tests).
	PostgresPort, RedisPort, NATSPort, GatewayPort, FirstServicePort int
	// Output receives the processes' logs; nil writes them to Dir/logs/<name>.log.
	Output io.Writer
	// GatewayEnv is passed to the first gateway only, on top of Env (make run: the
	// user's METRICS_PORT, which names the gateway's port, not every process's).
	GatewayEnv map[string]string
	// DurablePostgres keeps the crash safety of the Postgres the stack starts (make run,
	// whose data is kept); without it the cluster runs with fsync and synchronous commit
	// off, as the tests' and benchmarks' throwaway clusters do (devinfra.Durable).
	DurablePostgres bool
}

// Stack is a running stack.
type Stack struct {
	opts     Options
	Postgres *devinfra.Postgres
	Redis    *devinfra.Redis
	NATS     *devnats.Server
	// URL is the first gateway's base URL.
	URL string
	// AdminKey is the admin credential of this stack.
	AdminKey string

	env      map[string]string
	mu       sync.Mutex
	procs    []*Proc
	gateways []*Proc
	exited   chan *Proc
}

// Proc is one running binary.
type Proc struct {
	Name string
	Addr string
	// MetricsAddr is where the process serves Prometheus /metrics (METRICS_PORT).
	MetricsAddr string
	cmd         *exec.Cmd
	done        chan struct{}
	err         error
	// stopping marks an exit we asked for, as opposed to a crash.
	stopping atomic.Bool
	// extra is the environment spawn gave it on top of the stack's (Supervise starts a
	// crashed process again with it).
	extra   map[string]string
	bind    string // the address its socket was bound to
	started time.Time
}

// Err is the process's exit error, once it has exited.
func (p *Proc) Err() error { return p.err }

// Pid is the process id (make bench samples each process's CPU time by it).
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Metrics reads the process's Prometheus metrics from its /metrics (the text exposition).
func (p *Proc) Metrics(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.MetricsAddr+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("scrape %s: %w", p.Name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("scrape %s: %d %s", p.Name, resp.StatusCode, body)
	}
	return string(body), err
}

// Crashed delivers each process that exits without having been told to stop.
func (s *Stack) Crashed() <-chan *Proc { return s.exited }

// DevEnv is the environment `make run` gives the stack (text logs at the default level,
// unless the user's LOG_FORMAT says otherwise), with extra on top. make bench uses it too,
// so its figures include the logging users get.
func DevEnv(extra map[string]string) map[string]string {
	env := map[string]string{"LOG_FORMAT": "text"}
	if v := os.Getenv("LOG_FORMAT"); v != "" {
		env["LOG_FORMAT"] = v
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// Start brings the stack up and returns when every gateway answers.
func Start(ctx context.Context, opts Options) (_ *Stack, err error) {
	if opts.Dir == "" || opts.BinDir == "" {
		return nil, errors.New("stack: Dir and BinDir are required")
	}
	s := &Stack{opts: opts, env: map[string]string{}, exited: make(chan *Proc, 64)}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	for k, v := range opts.Env {
		s.env[k] = v
	}
	// Nothing balances load in front of a local stack, so stopping need not wait for one
	// to notice (SHUTDOWN_DELAY); tests of the drain set it themselves.
	if _, set := s.env["SHUTDOWN_DELAY"]; !set {
		s.env["SHUTDOWN_DELAY"] = "0s"
	}
	s.AdminKey = s.env["ADMIN_API_KEY"]
	if s.AdminKey == "" {
		return nil, errors.New("stack: Env must set ADMIN_API_KEY")
	}
	if s.env["DATABASE_URL"] == "" {
		var pgOpts []devinfra.PostgresOption
		if opts.DurablePostgres {
			pgOpts = append(pgOpts, devinfra.Durable())
		}
		if s.Postgres, err = devinfra.StartPostgres(ctx, filepath.Join(opts.Dir, "postgres"), opts.PostgresPort, pgOpts...); err != nil {
			return nil, err
		}
		s.env["DATABASE_URL"] = s.Postgres.URL("keyhouse")
	}
	if s.env["REDIS_URL"] == "" {
		if s.Redis, err = devinfra.StartRedis(ctx, filepath.Join(opts.Dir, "redis"), opts.RedisPort); err != nil {
			return nil, err
		}
		s.env["REDIS_URL"] = s.Redis.URL()
	}
	if s.env["NATS_URL"] == "" {
		if s.NATS, err = devnats.Start(filepath.Join(opts.Dir, "nats"), opts.NATSPort); err != nil {
			return nil, err
		}
		s.env["NATS_URL"] = s.NATS.URL()
	}
	// Every process's port is bound here, now, and inherited by the process (see listen):
	// the first gateway's first, so that PUBLIC_BASE_URL (portal links, storefront
	// callback URLs) names this stack's own gateway unless the caller set it.
	var sockets []net.Listener
	defer func() {
		for _, l := range sockets {
			_ = l.Close() // those not handed to a process (spawn closed the others)
		}
	}()
	gatewayAddr := "127.0.0.1:0"
	if opts.GatewayPort != 0 {
		gatewayAddr = ":" + strconv.Itoa(opts.GatewayPort)
	}
	gatewaySocket, err := listen(gatewayAddr)
	if err != nil {
		return nil, err
	}
	sockets = append(sockets, gatewaySocket)
	if s.env["PUBLIC_BASE_URL"] == "" {
		s.env["PUBLIC_BASE_URL"] = "http://127.0.0.1:" + strconv.Itoa(portOf(gatewaySocket))
	}
	serviceSockets := map[string]net.Listener{}
	for _, name := range Services {
		port := 0
		if opts.FirstServicePort != 0 {
			port = opts.FirstServicePort + portOffset[name]
		}
		l, err := listen("127.0.0.1:" + strconv.Itoa(port))
		if err != nil {
			return nil, err
		}
		sockets = append(sockets, l)
		serviceSockets[name] = l
		s.env[strings.ToUpper(name)+"_ADDR"] = l.Addr().String()
	}
	// Migrations are independent per schema, so they run side by side.
	var wg sync.WaitGroup
	errs := make([]error, len(Services))
	for i, name := range Services {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.runOnce(ctx, name, "migrate")
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, name := range Services {
		if _, err := s.spawn(name, map[string]string{"GRPC_ADDR": s.env[strings.ToUpper(name)+"_ADDR"]}, serviceSockets[name]); err != nil {
			return nil, err
		}
	}
	for _, p := range s.procs {
		if err := waitGRPC(ctx, p); err != nil {
			return nil, err
		}
	}
	url, err := s.startGateway(ctx, gatewaySocket, opts.GatewayEnv)
	if err != nil {
		return nil, err
	}
	s.URL = url
	return s, nil
}

// Dir is the folder holding the stack's data and logs.
func (s *Stack) Dir() string { return s.opts.Dir }

// Procs returns the running service and gateway processes, in start order.
func (s *Stack) Procs() []*Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Proc(nil), s.procs...)
}

// Env returns the value of a variable as the processes see it.
func (s *Stack) Env(name string) string { return s.env[name] }

// StartGateway starts another gateway process (port 0 = a free port) with extra env on
// top of the stack's, and returns its base URL once it answers.
func (s *Stack) StartGateway(ctx context.Context, port int, extra map[string]string) (string, error) {
	l, err := listen("127.0.0.1:" + strconv.Itoa(port))
	if err != nil {
		return "", err
	}
	return s.startGateway(ctx, l, extra)
}

func (s *Stack) startGateway(ctx context.Context, socket net.Listener, extra map[string]string) (string, error) {
	env := map[string]string{"PORT": strconv.Itoa(portOf(socket))}
	for k, v := range extra {
		env[k] = v
	}
	p, err := s.spawn("gateway", env, socket)
	if err != nil {
		return "", err
	}
	url := "http://" + p.Addr
	if err := waitHTTP(ctx, p, url+"/readyz"); err != nil {
		return "", err
	}
	s.mu.Lock()
	s.gateways = append(s.gateways, p)
	s.mu.Unlock()
	return url, nil
}

func (s *Stack) environ(extra map[string]string) []string {
	env := os.Environ()
	for k, v := range s.env {
		env = append(env, k+"="+v)
	}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

func (s *Stack) output(name string) (io.Writer, func(), error) {
	if s.opts.Output != nil {
		return &prefixWriter{prefix: name, w: s.opts.Output}, func() {}, nil
	}
	dir := filepath.Join(s.opts.Dir, "logs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, nil, err
	}
	return f, func() { _ = f.Close() }, nil
}

func (s *Stack) runOnce(ctx context.Context, name string, args ...string) error {
	out, closeOut, err := s.output(name)
	if err != nil {
		return err
	}
	defer closeOut()
	cmd := exec.CommandContext(ctx, filepath.Join(s.opts.BinDir, name), args...)
	// Only serve reads the admin key: migrate runs without it, as the Helm migrate Job does,
	// so every stack proves it can.
	cmd.Env = s.environ(map[string]string{"ADMIN_API_KEY": ""})
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w (see %s)", name, strings.Join(args, " "), err, s.logHint(name))
	}
	return nil
}

// LogPath is where the process name writes its log when Options.Output is nil.
func (s *Stack) LogPath(name string) string {
	return filepath.Join(s.opts.Dir, "logs", name+".log")
}

func (s *Stack) logHint(name string) string {
	if s.opts.Output != nil {
		return "the output above"
	}
	return filepath.Join(s.opts.Dir, "logs", name+".log")
}

// spawn starts a binary serving on socket (its gRPC port, or the gateway's HTTP port),
// which the process inherits with a metrics socket of its own (pkg/listenfd). spawn
// closes its copy of socket either way: once the process has started, a connection to a
// process that has died is refused rather than left waiting in the backlog.
func (s *Stack) spawn(name string, extra map[string]string, socket net.Listener) (*Proc, error) {
	defer socket.Close()
	metricsSocket, err := s.metricsSocket(extra, socket)
	if err != nil {
		return nil, err
	}
	defer metricsSocket.Close()
	socketName := "grpc"
	if name == "gateway" {
		socketName = "http"
	}
	var files []*os.File
	defer func() {
		for _, f := range files {
			_ = f.Close()
		}
	}()
	for _, l := range []net.Listener{socket, metricsSocket} {
		f, err := l.(*net.TCPListener).File()
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	out, closeOut, err := s.output(name)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(s.opts.BinDir, name), "serve")
	cmd.Env = append(s.environ(extra), listenfd.Env([]string{socketName, "metrics"})...)
	cmd.ExtraFiles = files
	cmd.Stdout, cmd.Stderr = out, out
	// Own process group: a Ctrl-C on the terminal reaches the launcher only, which then
	// stops the processes in order. And they die with the launcher (Pdeathsig, as
	// devinfra's Postgres and Redis): a test binary killed at its -timeout left every stack
	// it had started running, dozens of processes that kept a 2-core machine at load 40
	// through the runs after it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		closeOut()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Addr: dialable(socket), MetricsAddr: dialable(metricsSocket), cmd: cmd, done: make(chan struct{}),
		extra: extra, bind: socket.Addr().String(), started: time.Now()}
	go func() {
		p.err = cmd.Wait()
		closeOut()
		close(p.done)
		if !p.stopping.Load() {
			select {
			case s.exited <- p:
			default:
			}
		}
	}()
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	return p, nil
}

// metricsSocket binds a process's METRICS_PORT, on the host of its own socket: a port
// set in extra, with fixed ports (make run) the process's own default (its port + 1000),
// otherwise a free one. The port is set in extra, so that a METRICS_PORT inherited from
// the launcher's environment does not give every process the same port.
func (s *Stack) metricsSocket(extra map[string]string, socket net.Listener) (net.Listener, error) {
	port := extra["METRICS_PORT"]
	if port == "" {
		port = "0"
		if s.opts.FirstServicePort != 0 {
			port = strconv.Itoa(portOf(socket) + 1000)
		}
	}
	host, _, err := net.SplitHostPort(socket.Addr().String())
	if err != nil {
		return nil, err
	}
	l, err := listen(net.JoinHostPort(host, port))
	if err != nil {
		return nil, err
	}
	extra["METRICS_PORT"] = strconv.Itoa(portOf(l))
	return l, nil
}

// listen binds a port for a process the stack is about to start; the process inherits
// the socket (pkg/listenfd). A port merely chosen free and bound later by the process
// could be taken meanwhile by any of the processes of parallel stacks (a gateway then
// talked to another stack's service).
//
// Port 0 is chosen below the kernel's range for outgoing connections: a service stopped
// and started again on its port (RestartService, a crash) would otherwise find it taken
// by any connection some other process opened meanwhile, which is given a port from that
// range ("bind: address already in use" failed a test that way).
func listen(addr string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err == nil && port == "0" {
		if low, high, ok := belowEphemeral(); ok {
			for range 100 {
				candidate := net.JoinHostPort(host, strconv.Itoa(low+rand.IntN(high-low)))
				if l, err := net.Listen("tcp", candidate); err == nil {
					return l, nil
				}
			}
		}
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		if p, perr := strconv.Atoi(port); perr == nil && p != 0 && errors.Is(err, syscall.EADDRINUSE) {
			return nil, devinfra.PortInUse("stack: listen "+addr, p)
		}
		return nil, fmt.Errorf("stack: listen %s: %w", addr, err)
	}
	return l, nil
}

// belowEphemeral is the range of ports [low, high) listen picks from: the half below the
// kernel's range for outgoing connections, when that starts high enough (Linux's default
// is 32768).
func belowEphemeral() (low, high int, ok bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, 0, false
	}
	start, err := strconv.Atoi(f[0])
	if err != nil || start < 16384 {
		return 0, 0, false
	}
	return start / 2, start, true
}

func portOf(l net.Listener) int { return l.Addr().(*net.TCPAddr).Port }

// dialable is the loopback address of a socket bound on every interface or on loopback.
func dialable(l net.Listener) string { return "127.0.0.1:" + strconv.Itoa(portOf(l)) }

// Signal sends sig to the process (tests pause and resume, or stop, one replica).
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Exited is closed when the process ends.
func (p *Proc) Exited() <-chan struct{} { return p.done }

// running reports whether the process has not ended yet.
func (p *Proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM and waits (then SIGKILL after 15 s).
func (p *Proc) Stop() {
	if !p.running() {
		return
	}
	p.stopping.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Kill ends the process at once with SIGKILL, as a crash or an OOM kill would: nothing
// of its shutdown sequence runs.
func (p *Proc) Kill() {
	if !p.running() {
		return
	}
	p.stopping.Store(true)
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Stop ends the gateways, then the services, then the dependencies it started.
func (s *Stack) Stop() {
	s.mu.Lock()
	procs := append([]*Proc(nil), s.procs...)
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		if p.Name == "gateway" {
			wg.Add(1)
			go func() { defer wg.Done(); p.Stop() }()
		}
	}
	wg.Wait()
	for _, p := range procs {
		if p.Name != "gateway" {
			wg.Add(1)
			go func() { defer wg.Done(); p.Stop() }()
		}
	}
	wg.Wait()
	if s.NATS != nil {
		s.NATS.Stop()
	}
	if s.Redis != nil {
		_ = s.Redis.Stop()
	}
	if s.Postgres != nil {
		_ = s.Postgres.Stop()
	}
}

// Service returns the running process of a service (for tests that stop one): the first
// started of those still running, so after RestartService the new process, not the one
// it replaced; nil when none runs.
func (s *Stack) Service(name string) *Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		if p.Name == name && p.running() {
			return p
		}
	}
	return nil
}

// RestartService starts a stopped service again on the same address.
func (s *Stack) RestartService(ctx context.Context, name string) error {
	return s.RestartServiceWith(ctx, name, nil)
}

// RestartServiceWith is RestartService with extra on top of the stack's environment: a
// setting the operator changed before the restart, such as a rotated ADMIN_API_KEY.
func (s *Stack) RestartServiceWith(ctx context.Context, name string, extra map[string]string) error {
	addr := s.env[strings.ToUpper(name)+"_ADDR"]
	l, err := listen(addr)
	if err != nil {
		return err
	}
	env := map[string]string{"GRPC_ADDR": addr}
	maps.Copy(env, extra)
	p, err := s.spawn(name, env, l)
	if err != nil {
		return err
	}
	if err := waitGRPC(ctx, p); err != nil {
		return err
	}
	return s.awaitReachable(ctx, name)
}

// awaitReachable waits until every running process that calls the service name (each
// gateway, other services) reaches it. They lost their connections with its old process,
// and each stays in transient failure, failing the calls that do not wait for it (a
// gateway answers the service's routes 503), until its reconnect backoff has run and the
// new process has answered its health check; on a busy machine that can take seconds.
// Each says so in keyhouse_peer_reachable (pkg/grpcx's Dial).
func (s *Stack) awaitReachable(ctx context.Context, name string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		var unreachable []string
		for _, p := range s.Procs() {
			if !p.running() {
				continue
			}
			exposition, err := p.Metrics(ctx)
			if err != nil {
				unreachable = append(unreachable, err.Error())
				continue
			}
			for _, series := range ParseMetrics(exposition, "keyhouse_peer_reachable") {
				if series.Labels["peer"] == name && series.Value == 0 {
					unreachable = append(unreachable, p.Name+" on "+p.Addr)
				}
			}
		}
		if len(unreachable) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s restarted, but still unreachable from: %s", name, strings.Join(unreachable, ", "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// StartServiceReplica starts one more process of a service on the same database, NATS
// and Redis (extra, when set, overrides any of its environment), on a free port, and
// returns its address once it is healthy. Point a gateway at it with
// StartGateway(ctx, 0, map[string]string{"<NAME>_ADDR": addr}).
func (s *Stack) StartServiceReplica(ctx context.Context, name string, extra map[string]string) (string, error) {
	l, err := listen("127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	env := map[string]string{"GRPC_ADDR": addr}
	maps.Copy(env, extra)
	p, err := s.spawn(name, env, l)
	if err != nil {
		return "", err
	}
	return addr, waitGRPC(ctx, p)
}

func waitGRPC(ctx context.Context, p *Proc) error {
	conn, err := grpc.NewClient(p.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited during start: %v", p.Name, p.err)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		c, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := client.Check(c, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s did not become healthy on %s", p.Name, p.Addr)
}

func waitHTTP(ctx context.Context, p *Proc, url string) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited during start: %v", p.Name, p.err)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer on %s", p.Name, url)
}

type prefixWriter struct {
	mu     sync.Mutex
	prefix string
	w      io.Writer
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	// Every complete line gets the prefix; the lines of one write go out in one write.
	var out []byte
	rest := p.buf
	for {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break
		}
		out = fmt.Appendf(out, "%-12s| %s\n", p.prefix, rest[:i])
		rest = rest[i+1:]
	}
	// Keep the unfinished tail only, at the start of the buffer.
	p.buf = p.buf[:copy(p.buf, rest)]
	if len(out) > 0 {
		if _, err := p.w.Write(out); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}
