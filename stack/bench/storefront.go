package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/keyhouse/keyhouse/pkg/events"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	"github.com/nats-io/nats.go"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"
	"google.golang.org/protobuf/proto"
)

// storefrontRate is the steady arrival rate of the storefront scenario (issue 11).
const storefrontRate = 50

func init() {
	Register(Scenario{
		ID:   "storefront",
		Name: "storefront: signed checkout.session.completed → license issued (50 events/s)",
		Rate: storefrontRate,
		Note: "open loop at 50 events/s; each op is the callback's 200 (event + outbox row committed) plus the time until " +
			"licensing's license.issued for it is on the event stream (outbox relay → JetStream → worker → licensing, then licensing's relay), " +
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
	link, product := fmt.Sprintf("plink_bench%d", stamp), fmt.Sprintf("bench-shop-%d", stamp)
	st, data, err = env.Do(ctx, http.MethodPost, "/v1/storefront/mappings", SetupIP(), true, map[string]any{
		"payment_link": link, "product_id": product, "tier": "pro", "seats": 2, "duration_days": 365,
	})
	if err := Expect(st, data, err, http.StatusOK); err != nil {
		return nil, fmt.Errorf("create mapping: %w", err)
	}
	issued, err := watchIssued(ctx, env.Stack.Env("NATS_URL"), product)
	if err != nil {
		return nil, err
	}
	var ips atomic.Int64
	return func(ctx context.Context, _, i int) error {
		customer := stripeCustomerID()
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
		return issued.await(ctx, customer)
	}, nil
}

// watchIssued tells the row's sessions that their license exists: licensing's
// license.issued for the row's product, which its relay publishes once the license is
// committed, read off the event stream by a subscription of the bench's own and keyed by
// issued_to (the session's customer). The row used to poll list-licenses for each
// session every 10 ms, and the polls were what overloaded the stack: each cost the
// gateway, licensing and 1-3 ms of Postgres (planning the issued_to search included), so
// once a stall left a few hundred sessions waiting their polls took the two cores, the
// sessions waited longer and polled more, and the row measured its own polls (in a full
// run, 3 licenses issued a second of the 50, p99 21 s, Postgres at 163% of a core on
// list-licenses; backing the polls off did not stop it).
func watchIssued(ctx context.Context, natsURL, product string) (*arrivals, error) {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return nil, fmt.Errorf("watch license.issued: %w", err)
	}
	arr := newArrivals()
	if _, err := nc.Subscribe(events.Subject(events.TypeLicenseIssued), func(m *nats.Msg) {
		if customer, ok := issuedToOfProduct(m.Data, product); ok {
			arr.arrived(customer)
		}
	}); err != nil {
		nc.Close()
		return nil, fmt.Errorf("watch license.issued: %w", err)
	}
	context.AfterFunc(ctx, nc.Close)
	return arr, nil
}

// issuedToOfProduct is whom the license.issued event in data was issued to, if it is a
// license of product: the other rows' licenses (the import's 100,000 among them) are
// none of this row's business.
func issuedToOfProduct(data []byte, product string) (string, bool) {
	var ev eventsv1.Event
	if proto.Unmarshal(data, &ev) != nil || ev.GetLicenseIssued().GetProductId() != product {
		return "", false
	}
	return ev.GetLicenseIssued().GetIssuedTo(), true
}

// stripeCustomerID is a customer id as Stripe makes them: cus_ and 14 random letters and
// digits.
func stripeCustomerID() string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	id := []byte("cus_")
	for range 14 {
		id = append(id, alphabet[rand.IntN(len(alphabet))])
	}
	return string(id)
}
