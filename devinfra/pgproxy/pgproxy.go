// Package pgproxy is a TCP proxy between a Postgres client and server that can make the
// outcome of a commit unknown to the client: it delays the message that commits (so the
// client times out before the server commits, or the server commits after the client
// gave up), or holds the server's reply to it (the server committed, the client never
// hears). Tests use it to check that a client tells applied from not applied.
package pgproxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"time"
)

// Fault is what the proxy does at one commit: the commit message reaches the server
// DelayCommit late, and the server's replies from then on reach the client HoldReply
// late. The zero Fault passes the commit through.
type Fault struct {
	DelayCommit, HoldReply time.Duration
}

// Proxy forwards connections to a Postgres server.
type Proxy struct {
	lis    net.Listener
	target string
	// fault is asked at every commit: the Sync ending an extended-protocol batch that
	// executed statements (an implicit transaction) or a simple-query COMMIT. It gets
	// the SQL of the statements executed since the previous commit or Sync.
	fault func(statements []string) Fault

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// Start listens on a free loopback port and forwards to target (host:port).
func Start(target string, fault func(statements []string) Fault) (*Proxy, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{lis: lis, target: target, fault: fault, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.lis.Addr().String() }

// Close stops listening, closes every connection and waits for the forwarding to end,
// delayed messages included.
func (p *Proxy) Close() {
	_ = p.lis.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.lis.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.track(client)
		p.track(server)
		s := &session{proxy: p, client: client, server: server}
		p.wg.Add(2)
		go s.clientToServer()
		go s.serverToClient()
	}
}

// session is one proxied connection.
type session struct {
	proxy          *Proxy
	client, server net.Conn

	mu        sync.Mutex
	heldUntil time.Time
}

func (s *session) close() {
	_ = s.client.Close()
	_ = s.server.Close()
}

// clientToServer forwards the client's messages one by one, acting at each commit.
func (s *session) clientToServer() {
	defer s.proxy.wg.Done()
	defer s.close()
	r := bufio.NewReader(s.client)
	// Untyped messages first: SSL/GSS requests (answered by one byte), then the
	// startup message.
	for {
		msg, err := readUntyped(r)
		if err != nil {
			return
		}
		if _, err := s.server.Write(msg); err != nil {
			return
		}
		code := binary.BigEndian.Uint32(msg[4:8])
		if code != 80877103 && code != 80877104 { // SSLRequest, GSSENCRequest
			break
		}
	}
	prepared := map[string]string{} // statement name → SQL
	var executed []string           // the SQL bound since the last Sync or COMMIT
	inTx := false                   // within BEGIN … COMMIT
	for {
		typ, msg, err := readTyped(r)
		if err != nil {
			return
		}
		commit := false
		switch typ {
		case 'P': // Parse: name, query, …
			if f := cstrings(msg[5:], 2); len(f) == 2 {
				prepared[f[0]] = f[1]
			}
		case 'B': // Bind: portal, statement, …
			if f := cstrings(msg[5:], 2); len(f) == 2 {
				executed = append(executed, prepared[f[1]])
			}
		case 'S':
			// Inside BEGIN … COMMIT a Sync ends a statement, not the transaction.
			commit = !inTx && len(executed) > 0
		case 'Q':
			query := string(bytes.TrimRight(msg[5:], "\x00"))
			switch word := strings.ToLower(strings.TrimSpace(query)); {
			case strings.HasPrefix(word, "begin"):
				inTx = true
			case strings.HasPrefix(word, "commit"):
				commit, inTx = len(executed) > 0, false
			case strings.HasPrefix(word, "rollback"):
				executed, inTx = nil, false
			default:
				executed = append(executed, query)
				commit = !inTx
			}
		}
		if commit {
			f := s.proxy.fault(executed)
			if f.DelayCommit > 0 {
				time.Sleep(f.DelayCommit)
			}
			if f.HoldReply > 0 {
				s.mu.Lock()
				s.heldUntil = time.Now().Add(f.HoldReply)
				s.mu.Unlock()
			}
		}
		if commit || (typ == 'S' && !inTx) {
			executed = nil
		}
		if _, err := s.server.Write(msg); err != nil {
			return
		}
	}
}

// cstrings reads the first n NUL-terminated strings of b.
func cstrings(b []byte, n int) []string {
	var out []string
	for range n {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			return out
		}
		out = append(out, string(b[:i]))
		b = b[i+1:]
	}
	return out
}

// serverToClient forwards the server's bytes, waiting out a hold.
func (s *session) serverToClient() {
	defer s.proxy.wg.Done()
	defer s.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := s.server.Read(buf)
		if n > 0 {
			s.mu.Lock()
			wait := time.Until(s.heldUntil)
			s.mu.Unlock()
			if wait > 0 {
				time.Sleep(wait)
			}
			if _, werr := s.client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// maxMessage bounds a message's length (Postgres's own limit is 1 GB).
const maxMessage = 1 << 30

func readUntyped(r *bufio.Reader) ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(head[:])
	if n < 8 || n > maxMessage {
		return nil, errors.New("pgproxy: bad startup message length")
	}
	msg := make([]byte, n)
	copy(msg, head[:])
	_, err := io.ReadFull(r, msg[4:])
	return msg, err
}

// readTyped reads one message: its type and all its bytes (type and length included).
func readTyped(r *bufio.Reader) (byte, []byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(head[1:])
	if n < 4 || n > maxMessage {
		return 0, nil, errors.New("pgproxy: bad message length")
	}
	msg := make([]byte, 1+n)
	copy(msg, head[:])
	_, err := io.ReadFull(r, msg[5:])
	return head[0], msg, err
}
