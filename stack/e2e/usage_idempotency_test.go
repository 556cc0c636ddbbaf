package e2e

import (
	"net/http"
	"sync"
	"testing"
)

// track-usage with an Idempotency-Key (addendum §8) is applied exactly once: a retry
// with the same key and body, also several at once, returns the first answer and adds
// nothing; the key with another body is a 409 and adds nothing.
func TestTrackUsageWithAnIdempotencyKeyCountsARetryOnce(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic("track-idem", "limits", map[string]any{"api_calls_per_day": 100}))
	tok := seat(t, c, key, "host-a")
	body := map[string]any{"key": key, "token": tok, "metric": "api_calls_per_day", "increment": 3}
	first := c.Do(http.MethodPost, "/v1/track-usage", body, "Idempotency-Key", "sdk-retry-1").Expect(t, 200)
	first.ExpectBody(t, `{"ok":true,"metric":"api_calls_per_day","usage":3}`)

	// Retries of the same call, one after another and then several at once.
	c.Do(http.MethodPost, "/v1/track-usage", body, "Idempotency-Key", "sdk-retry-1").
		ExpectBody(t, `{"ok":true,"metric":"api_calls_per_day","usage":3}`)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			anon(t, s).Do(http.MethodPost, "/v1/track-usage", body, "Idempotency-Key", "sdk-retry-1").
				ExpectBody(t, `{"ok":true,"metric":"api_calls_per_day","usage":3}`)
		})
	}
	wg.Wait()

	c.Do(http.MethodPost, "/v1/track-usage", map[string]any{"key": key, "token": tok, "metric": "api_calls_per_day", "increment": 4},
		"Idempotency-Key", "sdk-retry-1").ExpectError(t, 409, "Idempotency-Key reused with a different request")

	// A new key is a new increment; so is a call without one.
	c.Do(http.MethodPost, "/v1/track-usage", body, "Idempotency-Key", "sdk-retry-2").
		ExpectBody(t, `{"ok":true,"metric":"api_calls_per_day","usage":6}`)
	trackUsage(c, key, tok, "api_calls_per_day").ExpectBody(t, `{"ok":true,"metric":"api_calls_per_day","usage":7}`)

	// A refused increment stores nothing: the same key decides again once it fits.
	big := map[string]any{"key": key, "token": tok, "metric": "api_calls_per_day", "increment": 94}
	c.Do(http.MethodPost, "/v1/track-usage", big, "Idempotency-Key", "sdk-retry-3").
		ExpectError(t, 403, "Usage limit exceeded for metric: api_calls_per_day")
	a.Post("/v1/admin/reset-usage", map[string]any{"key": key, "metric": "api_calls_per_day"}).Expect(t, 200)
	c.Do(http.MethodPost, "/v1/track-usage", big, "Idempotency-Key", "sdk-retry-3").
		ExpectBody(t, `{"ok":true,"metric":"api_calls_per_day","usage":94}`)
}

// An Idempotency-Key that cannot be honoured is refused (400) before anything is done,
// on every route that honours the header. A key outside printable ASCII never reached
// the service (grpc-gateway drops what gRPC metadata cannot carry), so the license was
// issued as if no key had been sent and a retry issued a second one; a blank key was
// taken for no key. An ordinary key still de-duplicates.
func TestAnIdempotencyKeyThatCannotBeHonouredIsRefused(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	p := product("idem-refused")
	key := issueLicense(t, a, lic(p, "limits", map[string]any{"api_calls_per_day": 100}))
	tok := seat(t, c, key, "host-a")
	refused := map[string]string{
		"ünï":         "Idempotency-Key must be printable ASCII",
		"order-ünï-1": "Idempotency-Key must be printable ASCII",
		" ":           "Idempotency-Key must not be blank",
		"":            "Idempotency-Key must not be blank",
	}
	for idem, want := range refused {
		for range 2 { // a retry is refused alike
			a.Do(http.MethodPost, "/v1/issue-license", lic(p), "Idempotency-Key", idem).ExpectError(t, 400, want)
			c.Do(http.MethodPost, "/v1/track-usage", map[string]any{"key": key, "token": tok, "metric": "api_calls_per_day"},
				"Idempotency-Key", idem).ExpectError(t, 400, want)
			a.Do(http.MethodPost, "/v1/register-release", rel(p, "1.0.0"), "Idempotency-Key", idem).ExpectError(t, 400, want)
		}
	}
	// Nothing was issued, counted or registered.
	if total := a.Get("/v1/list-licenses?product_id=" + p).JSON(t)["total"]; total != 1.0 {
		t.Fatalf("%v licenses of %s, want the one issued without a key", total, p)
	}
	trackUsage(c, key, tok, "api_calls_per_day").ExpectBody(t, `{"ok":true,"metric":"api_calls_per_day","usage":1}`)
	registerRelease(t, a, rel(p, "1.0.0"))

	// An ordinary key, printable ASCII with a space inside, still de-duplicates.
	first := a.Do(http.MethodPost, "/v1/issue-license", lic(p), "Idempotency-Key", "order 1001").Expect(t, 200)
	a.Do(http.MethodPost, "/v1/issue-license", lic(p), "Idempotency-Key", "order 1001").ExpectBody(t, string(first.Body))
	if total := a.Get("/v1/list-licenses?product_id=" + p).JSON(t)["total"]; total != 2.0 {
		t.Fatalf("%v licenses of %s after a retry with the same key, want 2", total, p)
	}
}
