// Package bench is the load generator behind `make bench`: scenarios registered by each
// service's file in this package run against a real stack on loopback, C concurrent
// workers for a fixed duration each, and report requests/s and latency percentiles.
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keyhouse/keyhouse/stack"
)

// Op is one request of a scenario. worker is 0..C-1 and i counts that worker's calls, so
// an Op can spread its requests over client IPs or license keys without locking.
type Op func(ctx context.Context, worker, i int) error

// Scenario prepares its data once and returns the Op the workers call.
type Scenario struct {
	// Name is what the report shows, e.g. "verify-license (gateway)".
	Name string
	// Note says what the figure measures or what limits it; it goes in the report.
	Note  string
	Setup func(ctx context.Context, env *Env) (Op, error)
}

var (
	mu        sync.Mutex
	scenarios []Scenario
)

// Register adds a scenario; call it from an init function.
func Register(s Scenario) {
	mu.Lock()
	defer mu.Unlock()
	scenarios = append(scenarios, s)
}

// Scenarios returns the registered scenarios in registration order.
func Scenarios() []Scenario {
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(scenarios)
}

// Env is the running stack a scenario talks to.
type Env struct {
	Stack *stack.Stack
	// URL is the gateway's base URL; AdminKey its admin credential.
	URL, AdminKey string
	HTTP          *http.Client
}

// NewHTTPClient keeps enough idle connections for every worker, so the benchmark measures
// requests, not TCP handshakes.
func NewHTTPClient(workers int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = workers * 2
	t.MaxIdleConnsPerHost = workers * 2
	return &http.Client{Transport: t, Timeout: 30 * time.Second}
}

// ClientIP is the X-Forwarded-For a worker sends: the stack trusts loopback as a proxy
// and limits per client IP, so each worker moves to a fresh address every perIP requests
// (real traffic comes from many clients; one IP would hit the tier limit at once).
func ClientIP(worker, i, perIP int) string {
	n := worker*1_000_000 + i/perIP
	return fmt.Sprintf("10.%d.%d.%d", (n>>16)&0xff, (n>>8)&0xff, n&0xff)
}

// Do sends a JSON request through the gateway as client ip (with the admin key when
// admin is true) and returns the status and body. body may be nil.
func (e *Env) Do(ctx context.Context, method, path, ip string, admin bool, body any) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.URL+path, r)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forwarded-For", ip)
	if admin {
		req.Header.Set("Authorization", "Bearer "+e.AdminKey)
	}
	resp, err := e.HTTP.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// Expect returns an error unless status is want.
func Expect(status int, body []byte, err error, want int) error {
	if err != nil {
		return err
	}
	if status != want {
		return fmt.Errorf("status %d: %s", status, body)
	}
	return nil
}

var setupCalls atomic.Int64

// SetupIP is the client IP for setup requests: a fresh one every 50 calls keeps setup
// under the Management tier (100 / 15 min per IP).
func SetupIP() string { return ClientIP(250, int(setupCalls.Add(1)), 50) }

// IssueLicense issues a license as the admin and returns its key.
func (e *Env) IssueLicense(ctx context.Context, body map[string]any) (string, error) {
	st, data, err := e.Do(ctx, http.MethodPost, "/v1/issue-license", SetupIP(), true, body)
	if err := Expect(st, data, err, http.StatusOK); err != nil {
		return "", fmt.Errorf("issue-license: %w", err)
	}
	var out struct {
		Key string `json:"key"`
	}
	return out.Key, json.Unmarshal(data, &out)
}

// Result is one scenario's figures.
type Result struct {
	Name, Note    string
	Requests      int
	Errors        int
	FirstError    string
	Duration      time.Duration
	P50, P99, Max time.Duration
}

// RPS is completed requests per second.
func (r Result) RPS() float64 { return float64(r.Requests) / r.Duration.Seconds() }

// Run drives op with workers concurrent callers for d, after a short warm-up.
func Run(ctx context.Context, name, note string, op Op, workers int, d time.Duration) Result {
	warm, cancel := context.WithTimeout(ctx, d/5)
	drive(warm, op, workers, 0)
	cancel()
	runCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	lat, errs, first := drive(runCtx, op, workers, 1_000_000)
	res := Result{Name: name, Note: note, Requests: len(lat), Errors: errs, FirstError: first, Duration: time.Since(start)}
	if len(lat) > 0 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		res.P50, res.P99, res.Max = lat[len(lat)*50/100], lat[len(lat)*99/100], lat[len(lat)-1]
	}
	return res
}

// drive runs workers until ctx ends; i starts at base so warm-up and measurement use
// different client IPs and keys.
func drive(ctx context.Context, op Op, workers, base int) ([]time.Duration, int, string) {
	var (
		mu    sync.Mutex
		all   []time.Duration
		errs  int
		first string
		wg    sync.WaitGroup
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			bad := 0
			msg := ""
			for i := base; ctx.Err() == nil; i++ {
				t0 := time.Now()
				err := op(ctx, w, i)
				if ctx.Err() != nil {
					break // a call cut by the deadline is not a result
				}
				if err != nil {
					bad++
					if msg == "" {
						msg = err.Error()
					}
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			all = append(all, mine...)
			errs += bad
			if first == "" {
				first = msg
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return all, errs, first
}

// Table formats results as a Markdown table.
func Table(results []Result, workers int) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "| scenario (%d concurrent clients) | requests/s | p50 | p99 | max | errors |\n|---|---:|---:|---:|---:|---:|\n", workers)
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d |\n", r.Name, strconv.FormatFloat(r.RPS(), 'f', 0, 64),
			ms(r.P50), ms(r.P99), ms(r.Max), r.Errors)
	}
	return b.String()
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 2, 64) + " ms"
}
