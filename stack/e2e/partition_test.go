package e2e

import (
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/stack"
)

// silentProxy forwards TCP connections to target until Pause: then it stops forwarding in
// both directions without closing anything (a silent partition: both ends keep a healthy
// connection through which nothing passes), until Resume.
type silentProxy struct {
	lis    net.Listener
	target string
	mu     sync.Mutex
	paused bool
	resume *sync.Cond
	conns  []net.Conn
}

func newSilentProxy(t *testing.T, target string) *silentProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &silentProxy{lis: lis, target: target}
	p.resume = sync.NewCond(&p.mu)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *silentProxy) Addr() string { return p.lis.Addr().String() }

func (p *silentProxy) serve() {
	for {
		in, err := p.lis.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

// pipe copies src to dst, holding each chunk while the proxy is paused.
func (p *silentProxy) pipe(src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.paused {
				p.resume.Wait()
			}
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_ = dst.Close()
			}
			return
		}
	}
}

func (p *silentProxy) Pause() {
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
}

func (p *silentProxy) Resume() {
	p.mu.Lock()
	p.paused = false
	p.resume.Broadcast()
	p.mu.Unlock()
}

func (p *silentProxy) close() {
	p.Resume()
	_ = p.lis.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

// A gateway whose connection to NATS goes silent (nothing passes, nothing closes, so its
// NATS client still counts as connected) keeps long-lived cache entries
// (LICENSE_CACHE_LIVE_TTL=1h) only while the publishers' heartbeats prove it hears every
// change: a revocation made through another gateway, whose event the partitioned one never
// receives, is answered correctly by it within the 1 s bound. Repeated, with the partition
// healed in between.
func TestLicenseCache_ASilentlyPartitionedGatewayAnswersARevocationWithinASecond(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"LICENSE_CACHE_TTL": "1s", "LICENSE_CACHE_LIVE_TTL": "1h"})
	t.Cleanup(s.Stop)
	natsURL, err := url.Parse(s.Env("NATS_URL"))
	if err != nil {
		t.Fatal(err)
	}
	proxy := newSilentProxy(t, natsURL.Host)
	partitioned, err := s.StartGateway(t.Context(), 0, map[string]string{"NATS_URL": "nats://" + proxy.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	var gateway *stack.Proc
	for _, p := range s.Procs() {
		if p.Name == "gateway" && strings.HasSuffix(partitioned, p.Addr) {
			gateway = p
		}
	}
	hits := func() float64 {
		return sample(scrape(t, gateway), `keyhouse_gateway_answer_cache_total{result="hit",route="/v1/verify-license"}`)
	}
	a := admin(t, s)
	key := issueLicense(t, a, lic("partition"))
	verify := map[string]string{"key": key}
	const rounds = 5
	outlived := 0
	for round := range rounds {
		other := newClient(t, partitioned, "")
		waitFor(t, other, "/v1/verify-license", verify, 200)
		// An answer read within 100 ms of the key's last change is not kept (the other
		// processes may not have had the event yet): this one is.
		time.Sleep(200 * time.Millisecond)
		other.Post("/v1/verify-license", verify).Expect(t, 200)
		// Older than LICENSE_CACHE_TTL: from here on only the liveness proof keeps the
		// entry (unless a heartbeat came late on a busy machine, which is no error).
		time.Sleep(1500 * time.Millisecond)
		before := hits()
		other.Post("/v1/verify-license", verify).Expect(t, 200)
		if hits() > before {
			outlived++
		}

		proxy.Pause()
		a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": true}).Expect(t, 200)
		revoked := time.Now()
		for {
			asked := time.Now()
			resp := other.Post("/v1/verify-license", verify)
			if resp.Status == 403 {
				resp.ExpectBody(t, verifyNotActive)
				t.Logf("round %d: the partitioned gateway answered the revocation after %v", round+1, time.Since(revoked))
				break
			}
			if asked.Sub(revoked) > staleBound {
				t.Fatalf("round %d: the partitioned gateway, asked %v after the revocation, still answers %d %s",
					round+1, asked.Sub(revoked), resp.Status, resp.Body)
			}
			time.Sleep(10 * time.Millisecond)
		}
		anon(t, s).Post("/v1/verify-license", verify).Expect(t, 403).ExpectBody(t, verifyNotActive)

		proxy.Resume()
		a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": false}).Expect(t, 200)
	}
	// Without the proof, the partition would be covered by the TTL alone; the test is only
	// worth its name if the entries did outlive the TTL.
	t.Logf("the cached answer outlived the TTL in %d of %d rounds", outlived, rounds)
	if outlived == 0 {
		t.Fatal("no cached answer outlived LICENSE_CACHE_TTL while the gateway was proven live")
	}
}
