package importer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// BatchSize is the most licenses POST /v1/licenses/import takes in one call.
const BatchSize = 1000

// Client sends licenses to a Keyhouse API.
type Client struct {
	// URL is the API's base, e.g. https://keyhouse.example.com (no /v1).
	URL string
	// APIKey is the admin key (self-hosted) or the tenant's API key (hosted).
	APIKey string
	// OnConflict is "skip" or "fail" (the API's default when empty).
	OnConflict string
	HTTP       *http.Client
	// MaxAttempts bounds the tries of one batch answered 429 or 503 (default 10).
	MaxAttempts int
	// Sleep waits between tries (default: time.After, cut short by ctx); tests inject it.
	Sleep func(ctx context.Context, d time.Duration) error
	// Progress, when set, is told after each batch.
	Progress func(done, total int)
}

// Result is one item's outcome as the API reported it.
type Result struct {
	Index  int     `json:"index"`
	Key    string  `json:"key"`
	Result string  `json:"result"`
	Error  *string `json:"error,omitempty"`
}

// Summary adds up every batch's answer. Problems lists the items that were skipped or
// invalid, with their position in the whole file.
type Summary struct {
	Imported, Unchanged, Skipped, Invalid int
	Problems                              []Result
	Calls, Retries                        int
}

// Import sends ls in batches of BatchSize, one at a time, retrying a batch answered 429
// or 503 after the Retry-After the API sent (or a backoff). A batch is safe to send
// again: an import that was already applied answers "unchanged".
func (c *Client) Import(ctx context.Context, ls []License) (*Summary, error) {
	sum := &Summary{}
	for start := 0; start < len(ls); start += BatchSize {
		end := min(start+BatchSize, len(ls))
		var resp struct {
			Imported, Unchanged, Skipped, Invalid int
			Results                               []Result
		}
		if err := c.send(ctx, ls[start:end], &resp, sum); err != nil {
			return sum, fmt.Errorf("licenses %d-%d: %w", start+1, end, err)
		}
		sum.Imported += resp.Imported
		sum.Unchanged += resp.Unchanged
		sum.Skipped += resp.Skipped
		sum.Invalid += resp.Invalid
		for _, r := range resp.Results {
			if r.Result == "skipped" || r.Result == "invalid" {
				r.Index += start
				sum.Problems = append(sum.Problems, r)
			}
		}
		if c.Progress != nil {
			c.Progress(end, len(ls))
		}
	}
	return sum, nil
}

func (c *Client) send(ctx context.Context, batch []License, out any, sum *Summary) error {
	body, err := json.Marshal(map[string]any{"licenses": batch, "on_conflict": c.OnConflict})
	if err != nil {
		return err
	}
	attempts := c.MaxAttempts
	if attempts <= 0 {
		attempts = 10
	}
	backoff := time.Second
	for attempt := 1; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.URL, "/")+"/v1/licenses/import", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
		hc := c.HTTP
		if hc == nil {
			hc = &http.Client{Timeout: 5 * time.Minute}
		}
		sum.Calls++
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		resp.Body.Close()
		if err != nil {
			return err
		}
		switch {
		case resp.StatusCode == http.StatusOK:
			return json.Unmarshal(data, out)
		case (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) && attempt < attempts:
			wait := backoff
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
				wait = time.Duration(s) * time.Second
			}
			backoff = min(backoff*2, time.Minute)
			sum.Retries++
			if err := c.sleep(ctx, wait); err != nil {
				return err
			}
		default:
			var e struct{ Error string }
			if json.Unmarshal(data, &e) != nil || e.Error == "" {
				e.Error = strings.TrimSpace(string(data))
			}
			return fmt.Errorf("HTTP %d: %s", resp.StatusCode, e.Error)
		}
	}
}

func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	if c.Sleep != nil {
		return c.Sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
