package pgxx

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Prober answers "does Postgres answer?" for a process's readiness, on a connection of its
// own rather than one borrowed from the pool.
//
// A pool whose every connection is busy is load, not an outage: pool.Ping would queue
// behind the requests for a free connection, and under load its probe deadline passed
// while Postgres was answering every query. The process then called Postgres down and
// refused all its requests for a probe interval or two, a burst of 503s that arrived
// exactly when it was busiest. The probe's own connection is idle between probes, so it
// times out only when Postgres itself does not answer (down, paused, unreachable).
type Prober struct {
	config *pgx.ConnConfig

	mu   sync.Mutex // one probe at a time owns conn
	conn *pgx.Conn
}

// NewProber probes the Postgres that pool connects to, with pool's settings. It connects
// on the first Probe; Close releases the connection.
func NewProber(pool *pgxpool.Pool) *Prober {
	return &Prober{config: pool.Config().ConnConfig.Copy()}
}

// Probe pings Postgres within ctx. A failed ping drops the connection, so the next Probe
// connects afresh (a restarted server, a connection the server ended).
func (p *Prober) Probe(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		conn, err := pgx.ConnectConfig(ctx, p.config)
		if err != nil {
			return redact(err)
		}
		p.conn = conn
	}
	if err := p.conn.Ping(ctx); err != nil {
		p.closeLocked()
		return redact(err)
	}
	return nil
}

// Close ends the probe's connection.
func (p *Prober) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeLocked()
}

func (p *Prober) closeLocked() {
	if p.conn == nil {
		return
	}
	// The connection may be hung (the reason the ping failed): closing must not wait on it.
	ctx, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	_ = p.conn.Close(ctx)
	p.conn = nil
}
