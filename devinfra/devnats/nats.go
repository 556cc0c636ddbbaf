// Package devnats embeds a NATS server with JetStream for `make run`, the integration
// tests and the package tests that need NATS. It is a package of its own so that only
// the binaries that use it link nats-server.
package devnats

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/nats-io/nats-server/v2/server"
)

// Server is an embedded NATS server with JetStream, storing streams under its dir.
type Server struct {
	srv *server.Server
}

// Start starts the server on port (0 = a free port, chosen by the server). A fixed port
// that another process holds (a second `make run`) is refused at once, naming the port and
// its holder: the embedded server would only fail to become ready.
func Start(dir string, port int) (*Server, error) {
	if port == 0 {
		port = server.RANDOM_PORT
	} else if l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port))); err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, devinfra.PortInUse("nats", port)
		}
		return nil, fmt.Errorf("nats: %w", err)
	} else {
		_ = l.Close()
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	srv, err := server.NewServer(&server.Options{
		Host:      host,
		Port:      port,
		JetStream: true,
		StoreDir:  abs,
		NoSigs:    true,
		NoLog:     true,
	})
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("nats: not ready")
	}
	return &Server{srv: srv}, nil
}

// host is the address the server listens on: loopback only.
const host = "127.0.0.1"

// URL is the client URL.
func (n *Server) URL() string { return n.srv.ClientURL() }

// Stop shuts the server down.
func (n *Server) Stop() {
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
}

// StartCluster starts n servers clustered with JetStream (n ≥ 3 holds replicated
// streams), storing under dir, and returns once JetStream has a leader. A test that needs
// a stream's replicas (NATS_STREAM_REPLICAS) uses it; ClusterURL names every server.
func StartCluster(dir string, n int) (_ []*Server, err error) {
	routes := make([]int, n)
	var urls []string
	for i := range routes {
		if routes[i], err = devinfra.FreePort(); err != nil {
			return nil, err
		}
		urls = append(urls, fmt.Sprintf("nats://%s:%d", host, routes[i]))
	}
	var servers []*Server
	defer func() {
		if err != nil {
			for _, s := range servers {
				s.Stop()
			}
		}
	}()
	for i := range routes {
		store, err := filepath.Abs(filepath.Join(dir, fmt.Sprintf("n%d", i+1)))
		if err != nil {
			return nil, err
		}
		srv, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       host,
			Port:       server.RANDOM_PORT,
			JetStream:  true,
			StoreDir:   store,
			NoSigs:     true,
			NoLog:      true,
			Cluster:    server.ClusterOpts{Name: "keyhouse-test", Host: host, Port: routes[i]},
			Routes:     server.RoutesFromStr(strings.Join(urls, ",")),
		})
		if err != nil {
			return nil, fmt.Errorf("nats: %w", err)
		}
		srv.Start()
		servers = append(servers, &Server{srv: srv})
		if !srv.ReadyForConnections(10 * time.Second) {
			return nil, fmt.Errorf("nats: server %d of the cluster not ready", i+1)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		for _, s := range servers {
			if s.srv.JetStreamIsLeader() {
				return servers, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, errors.New("nats: the cluster elected no JetStream leader within 30 s")
		}
	}
}

// ClusterURL is the client URL naming every server of a cluster.
func ClusterURL(servers []*Server) string {
	var urls []string
	for _, s := range servers {
		urls = append(urls, s.URL())
	}
	return strings.Join(urls, ",")
}

var shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// SharedURL is the URL of the test binary's one NATS server, started on first use (in
// process: it ends with the binary). Tests share it by using streams and subjects of their
// own. Like every testkit resource it skips the test under -short.
func SharedURL(t testing.TB) string {
	t.Helper()
	dir := testkit.Dir(t)
	shared.once.Do(func() {
		shared.srv, shared.err = Start(filepath.Join(dir, "nats"), 0)
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.srv.URL()
}
