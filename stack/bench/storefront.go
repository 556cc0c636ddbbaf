package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"
)

// storefrontRate is the steady arrival rate of the storefront scenario (issue 11).
const storefrontRate = 50

func init() {
	Register(Scenario{
		ID:   "storefront",
		Name: "storefront: signed checkout.session.completed → license issued (50 events/s)",
		Rate: storefrontRate,
		Note: "open loop at 50 events/s; each op is the callback's 200 (event + outbox row committed) plus the time until " +
			"the license exists (outbox relay → JetStream → worker → licensing), polled every 10 ms, so figures carry up to 10 ms of polling; " +
			"the log mail provider (goal p99 < 1 s)",
		Setup: setupStorefront,
	})
}

func setupStorefront(ctx context.Context, env *Env) (Op, error) {
	stamp := time.Now().UnixNano()
	secret := fmt.Sprintf("whsec_bench%d", stamp)
	st, data, err := env.Do(ctx, http.MethodPost, "/v1/storefront/webhooks", SetupIP(), true, map[string]string{"provider": "stripe"})
	if err := Expect(st, data, err, http.StatusOK); err != nil {
		return nil, fmt.Errorf("connect webhook: %w", err)
	}
	var wh struct {
		ID string `json:"webhook_id"`
	}
	if err := json.Unmarshal(data, &wh); err != nil {
		return nil, err
	}
	st, data, err = env.Do(ctx, http.MethodPost, "/v1/storefront/webhooks/"+wh.ID+"/secret", SetupIP(), true, map[string]string{"signing_secret": secret})
	if err := Expect(st, data, err, http.StatusOK); err != nil {
		return nil, fmt.Errorf("save secret: %w", err)
	}
	link := fmt.Sprintf("plink_bench%d", stamp)
	st, data, err = env.Do(ctx, http.MethodPost, "/v1/storefront/mappings", SetupIP(), true, map[string]any{
		"payment_link": link, "product_id": fmt.Sprintf("bench-shop-%d", stamp), "tier": "pro", "seats": 2, "duration_days": 365,
	})
	if err := Expect(st, data, err, http.StatusOK); err != nil {
		return nil, fmt.Errorf("create mapping: %w", err)
	}
	var ips atomic.Int64
	return func(ctx context.Context, _, i int) error {
		customer := fmt.Sprintf("cus_bench%d_%d", stamp, i)
		payload, _ := json.Marshal(map[string]any{
			"id": fmt.Sprintf("evt_bench%d_%d", stamp, i), "object": "event", "type": "checkout.session.completed",
			"api_version": stripe.APIVersion, "created": time.Now().Unix(),
			"data": map[string]any{"object": map[string]any{
				"id": fmt.Sprintf("cs_bench%d_%d", stamp, i), "object": "checkout.session", "payment_link": link,
				"payment_status": "paid", "customer": customer, "created": time.Now().Unix(),
				"customer_details": map[string]any{"email": fmt.Sprintf("buyer%d@example.com", i)},
			}},
		})
		signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, env.URL+"/v1/webhooks/storefront/"+wh.ID, bytes.NewReader(payload))
		if err != nil {
			return err
		}
		req.Header.Set("Stripe-Signature", signed.Header)
		req.Header.Set("X-Forwarded-For", ClientIP(150, int(ips.Add(1)), 1))
		resp, err := env.HTTP.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("callback: status %d", resp.StatusCode)
		}
		// Accepted: now wait for the license (issued_to is the session's customer).
		path := "/v1/list-licenses?limit=1&issued_to=" + url.QueryEscape(customer)
		for ctx.Err() == nil {
			st, body, err := env.Do(ctx, http.MethodGet, path, ClientIP(151, int(ips.Add(1)), 1), true, nil)
			if err := Expect(st, body, err, http.StatusOK); err != nil {
				return err
			}
			if bytes.Contains(body, []byte(`"total":1`)) {
				return nil
			}
			time.Sleep(10 * time.Millisecond)
		}
		return ctx.Err()
	}, nil
}
