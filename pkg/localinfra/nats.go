package localinfra

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATS is an embedded NATS server with JetStream, storing streams under its dir.
type NATS struct {
	srv *server.Server
}

// StartNATS starts the server on port (0 = a free port, chosen by the server).
func StartNATS(dir string, port int) (*NATS, error) {
	if port == 0 {
		port = server.RANDOM_PORT
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	srv, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
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
	return &NATS{srv: srv}, nil
}

// URL is the client URL.
func (n *NATS) URL() string { return n.srv.ClientURL() }

// Stop shuts the server down.
func (n *NATS) Stop() {
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
}
