package importer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/keyhouse/keyhouse/pkg/input"
	"github.com/keyhouse/keyhouse/pkg/license"
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

// Summary adds up every batch's answer. Problems lists the licenses that were skipped or
// invalid, by their index in the licenses given to Import (each carries its place in
// the file, License.Where).
type Summary struct {
	Imported, Unchanged, Skipped, Invalid int
	// Repeated counts the licenses that repeat an earlier one's key and terms: one
	// license, sent once.
	Repeated int
	// RepeatedWithOtherTerms counts the licenses skipped because an earlier one has their
	// key with other terms (they are in Skipped and in Problems too).
	RepeatedWithOtherTerms int
	Problems               []Result
	Calls, Retries         int
}

// Import sends ls in batches of BatchSize, one at a time, retrying a batch answered 429
// or 503 after the Retry-After the API sent (or a backoff). A batch is safe to send
// again: an import that was already applied answers "unchanged".
//
// Licenses with one key (as the API matches keys: Keyhouse-shaped ones in any spelling)
// are one license: an export lists a key once per sale or renewal. The first is sent; a
// later one with the same terms is counted Repeated, and one with other terms is skipped
// and reported with the place of the first, whatever OnConflict says, so that the file's
// other licenses still import (the API would refuse the second copy of a key in one call,
// and take it as a conflict in a later call).
func (c *Client) Import(ctx context.Context, ls []License) (*Summary, error) {
	sum := &Summary{}
	sent := make([]int, 0, len(ls)) // index in ls of each license sent
	firstOf := map[string]int{}
	for i := range ls {
		if reason := refusedWhole(ls[i]); reason != "" {
			// The API's input policy refuses the whole call that carries this license
			// (docs/import.md): it would stop the run at its call, every later call
			// unsent, without naming the line. It is this license's problem alone.
			sum.Invalid++
			sum.Problems = append(sum.Problems, Result{Index: i, Key: ls[i].Key, Result: "invalid", Error: &reason})
			continue
		}
		key := license.CanonicalKey(ls[i].Key)
		j, seen := firstOf[key]
		switch {
		case !seen:
			firstOf[key] = i
			sent = append(sent, i)
		case sameTerms(ls[i], ls[j]):
			sum.Repeated++
		default:
			msg := "the key is also on " + ls[j].Where + ", with other terms; that license is the one imported"
			sum.Skipped++
			sum.RepeatedWithOtherTerms++
			sum.Problems = append(sum.Problems, Result{Index: i, Key: ls[i].Key, Result: "skipped", Error: &msg})
		}
	}
	for start := 0; start < len(sent); start += BatchSize {
		end := min(start+BatchSize, len(sent))
		batch := make([]License, end-start)
		for k, i := range sent[start:end] {
			batch[k] = ls[i]
		}
		var resp struct {
			Imported, Unchanged, Skipped, Invalid int
			Results                               []Result
		}
		if err := c.send(ctx, batch, &resp, sum); err != nil {
			return sum, c.batchFailed(ls, sent[start:end], err)
		}
		sum.Imported += resp.Imported
		sum.Unchanged += resp.Unchanged
		sum.Skipped += resp.Skipped
		sum.Invalid += resp.Invalid
		for _, r := range resp.Results {
			if (r.Result == "skipped" || r.Result == "invalid") && r.Index >= 0 && r.Index < len(batch) {
				r.Index = sent[start+r.Index]
				sum.Problems = append(sum.Problems, r)
			}
		}
		if c.Progress != nil {
			c.Progress(sent[end-1]+1, len(ls))
		}
	}
	sort.SliceStable(sum.Problems, func(a, b int) bool { return sum.Problems[a].Index < sum.Problems[b].Index })
	return sum, nil
}

// refusedWhole says why the API's input policy (pkg/input, the gateway's check of every
// string field) would refuse a call carrying l, in its words ("issued_to must not contain
// control characters", "issued_to is not valid UTF-8": an export saved as Latin-1, which
// encoding/json would otherwise send with each such byte replaced by U+FFFD), or "".
func refusedWhole(l License) string {
	fields := []struct {
		name  string
		value *string
	}{{"key", &l.Key}, {"product_id", &l.ProductID}, {"tier", &l.Tier}, {"issued_to", &l.IssuedTo}, {"notes", l.Notes}}
	for _, f := range fields {
		if f.value == nil {
			continue
		}
		if p := input.FieldCheck(protoreflect.Name(f.name))(*f.value); p != input.OK {
			return input.Describe(f.name, p)
		}
	}
	return ""
}

// sameTerms says whether two licenses of one key are the same license.
func sameTerms(a, b License) bool {
	a.Key, b.Key, a.Where, b.Where = "", "", "", ""
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// conflictIndex reads the item a 409 of the API names: licenses[<i>].key <reason>.
var conflictIndex = regexp.MustCompile(`^licenses\[(\d+)\]\.key (.*)$`)

// batchFailed words the failure of the batch of the licenses ls[batch...], by their places
// in the file: the API's 409 names an item by its index in the call.
func (c *Client) batchFailed(ls []License, batch []int, err error) error {
	from := ls[batch[0]].Where
	var conflict *conflictError
	if errors.As(err, &conflict) {
		if m := conflictIndex.FindStringSubmatch(conflict.message); m != nil {
			if i, convErr := strconv.Atoi(m[1]); convErr == nil && i < len(batch) {
				reason, _, _ := strings.Cut(m[2], ";")
				return fmt.Errorf("%s: key %s, and --on-conflict is fail: nothing from %s on was imported (--on-conflict skip imports the others)",
					ls[batch[i]].Where, reason, from)
			}
		}
	}
	var unanswered *unansweredError
	if errors.As(err, &unanswered) {
		return fmt.Errorf("the call importing from %s on got no answer (%w): the server may have imported it; nothing after it was sent. Run the same import again: licenses already imported answer unchanged", from, unanswered.err)
	}
	return fmt.Errorf("nothing from %s on was imported: %w", from, err)
}

// unansweredError is a call whose answer never came (interrupted, timed out, connection
// lost): unlike a refusal, the server may have applied it.
type unansweredError struct{ err error }

func (e *unansweredError) Error() string { return e.err.Error() }
func (e *unansweredError) Unwrap() error { return e.err }

// conflictError is the API's 409: a key of the batch exists with other terms.
type conflictError struct{ message string }

func (e *conflictError) Error() string { return "HTTP 409: " + e.message }

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
			return &unansweredError{err}
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		resp.Body.Close()
		if err != nil {
			return &unansweredError{err}
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
			if resp.StatusCode == http.StatusConflict {
				return &conflictError{message: e.Error}
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
