package webhooks

import (
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/webhook"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
)

func tenantCtx(tenant string) context.Context {
	return auth.WithPrincipal(context.Background(), auth.Principal{TenantID: tenant})
}

// publicDNS resolves every name to a public address, except names under "internal.",
// which resolve to a private one.
type publicDNS struct{}

func (publicDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if strings.HasSuffix(host, ".internal.test") {
		return []netip.Addr{netip.MustParseAddr("10.0.0.7")}, nil
	}
	if host == "localhost" {
		return net.DefaultResolver.LookupNetIP(context.Background(), "ip", host)
	}
	return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
}

func (f *fixture) server(allowPrivate bool) *Server {
	return &Server{Store: f.store, Keys: f.keys, AllowPrivate: allowPrivate, Resolver: publicDNS{}, Now: f.clock.Now, Wake: f.worker.Wake}
}

func wantStatus(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code || st.Message() != msg {
		t.Fatalf("got %v %q, want %v %q", st.Code(), st.Message(), code, msg)
	}
}

// Bad input is a 400 naming the field, and nothing is stored.
func TestCreateRefusesBadInput(t *testing.T) {
	f := newFixture(t)
	hosted := f.server(false)
	ctx := tenantCtx("t1")
	long := "https://hooks.example.com/" + strings.Repeat("a", 2030)
	const notPublic = "Webhook URL must resolve to a public address"
	for _, c := range []struct {
		name string
		req  *eventsv1.CreateWebhookEndpointRequest
		msg  string
	}{
		{"no url", &eventsv1.CreateWebhookEndpointRequest{Events: []string{"*"}}, "url is required"},
		{"ftp", &eventsv1.CreateWebhookEndpointRequest{Url: "ftp://example.com/x", Events: []string{"*"}}, "url must be an http:// or https:// URL"},
		{"too long", &eventsv1.CreateWebhookEndpointRequest{Url: long, Events: []string{"*"}}, "url must be at most 2048 characters"},
		{"loopback", &eventsv1.CreateWebhookEndpointRequest{Url: "http://127.0.0.1:8080/x", Events: []string{"*"}}, notPublic},
		{"10/8", &eventsv1.CreateWebhookEndpointRequest{Url: "http://10.1.2.3/x", Events: []string{"*"}}, notPublic},
		{"metadata", &eventsv1.CreateWebhookEndpointRequest{Url: "http://169.254.169.254/latest/meta-data", Events: []string{"*"}}, notPublic},
		{"::1", &eventsv1.CreateWebhookEndpointRequest{Url: "http://[::1]:9/x", Events: []string{"*"}}, notPublic},
		{"name resolving to 10/8", &eventsv1.CreateWebhookEndpointRequest{Url: "https://hooks.internal.test/x", Events: []string{"*"}}, notPublic},
		{"localhost", &eventsv1.CreateWebhookEndpointRequest{Url: "http://localhost:9/x", Events: []string{"*"}}, notPublic},
		{"no events", &eventsv1.CreateWebhookEndpointRequest{Url: "https://hooks.example.com/x"}, `events is required: ["*"] or a list of event types`},
		{"unknown type", &eventsv1.CreateWebhookEndpointRequest{Url: "https://hooks.example.com/x", Events: []string{"license.issued", "license.exploded"}}, `events[1] must be an event type or a prefix of one ending in "."`},
		{"unknown prefix", &eventsv1.CreateWebhookEndpointRequest{Url: "https://hooks.example.com/x", Events: []string{"lic."}}, `events[0] must be an event type or a prefix of one ending in "."`},
		{"star with others", &eventsv1.CreateWebhookEndpointRequest{Url: "https://hooks.example.com/x", Events: []string{"*", "license.issued"}}, `events: "*" stands alone`},
		{"long description", &eventsv1.CreateWebhookEndpointRequest{Url: "https://hooks.example.com/x", Events: []string{"*"}, Description: wrapperspb.String(strings.Repeat("d", 513))}, "description must be at most 512 characters"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := hosted.CreateWebhookEndpoint(ctx, c.req)
			wantStatus(t, err, codes.InvalidArgument, c.msg)
		})
	}
	if eps, _ := f.store.ListEndpoints(context.Background(), "t1"); len(eps) != 0 {
		t.Fatalf("%d endpoints stored", len(eps))
	}
	// Self-hosted (or WEBHOOK_ALLOW_PRIVATE_NETWORKS=true) allows private addresses.
	if _, err := f.server(true).CreateWebhookEndpoint(ctx, &eventsv1.CreateWebhookEndpointRequest{Url: "http://10.1.2.3/x", Events: []string{"license."}}); err != nil {
		t.Fatal(err)
	}
}

// The secret is shown at creation and at a roll, never in a listing; the 17th endpoint is
// refused with the documented message.
func TestEndpointLifecycle(t *testing.T) {
	f := newFixture(t)
	s := f.server(false)
	ctx := tenantCtx("t1")
	created, err := s.CreateWebhookEndpoint(ctx, &eventsv1.CreateWebhookEndpointRequest{Url: "https://hooks.example.com/x", Events: []string{"license.", "seat.activated"}, Description: wrapperspb.String("CRM")})
	if err != nil {
		t.Fatal(err)
	}
	ep := created.GetEndpoint()
	if !strings.HasPrefix(ep.GetId(), "we_") || !strings.HasPrefix(ep.GetSecret(), "whsec_") || !ep.GetEnabled() || ep.GetDisabledReason() != nil || ep.GetDescription().GetValue() != "CRM" {
		t.Fatalf("created %v", ep)
	}
	list, err := s.ListWebhookEndpoints(ctx, &eventsv1.ListWebhookEndpointsRequest{})
	if err != nil || len(list.GetEndpoints()) != 1 || strings.Contains(list.String(), ep.GetSecret()) {
		t.Fatalf("list %v %v", list, err)
	}
	rolled, err := s.RollWebhookEndpointSecret(ctx, &eventsv1.RollWebhookEndpointSecretRequest{Id: ep.GetId()})
	if err != nil || rolled.GetEndpoint().GetSecret() == ep.GetSecret() || !strings.HasPrefix(rolled.GetEndpoint().GetSecret(), "whsec_") {
		t.Fatalf("roll %v %v", rolled, err)
	}
	_, err = s.RollWebhookEndpointSecret(ctx, &eventsv1.RollWebhookEndpointSecretRequest{Id: ep.GetId(), ExpireOldAfterSeconds: wrapperspb.Int64(604801)})
	wantStatus(t, err, codes.InvalidArgument, "expire_old_after_seconds must be between 0 and 604800")
	events, _ := structpb.NewList([]any{"release."})
	upd, err := s.UpdateWebhookEndpoint(ctx, &eventsv1.UpdateWebhookEndpointRequest{Id: ep.GetId(), Events: events, Enabled: wrapperspb.Bool(false)})
	if err != nil || upd.GetEndpoint().GetEnabled() || upd.GetEndpoint().GetEvents()[0] != "release." || upd.GetEndpoint().GetUrl() != "https://hooks.example.com/x" {
		t.Fatalf("update %v %v", upd, err)
	}
	bad, _ := structpb.NewList([]any{1})
	_, err = s.UpdateWebhookEndpoint(ctx, &eventsv1.UpdateWebhookEndpointRequest{Id: ep.GetId(), Events: bad})
	wantStatus(t, err, codes.InvalidArgument, "events must be a list of strings")
	_, err = s.UpdateWebhookEndpoint(ctx, &eventsv1.UpdateWebhookEndpointRequest{Id: ep.GetId(), Url: wrapperspb.String("http://169.254.169.254/")})
	wantStatus(t, err, codes.InvalidArgument, "Webhook URL must resolve to a public address")
	_, err = s.PingWebhookEndpoint(ctx, &eventsv1.PingWebhookEndpointRequest{Id: ep.GetId()})
	wantStatus(t, err, codes.AlreadyExists, "Webhook endpoint is disabled")
	for i := 1; i < MaxEndpoints; i++ {
		if _, err := s.CreateWebhookEndpoint(ctx, &eventsv1.CreateWebhookEndpointRequest{Url: "https://hooks.example.com/x", Events: []string{"*"}}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.CreateWebhookEndpoint(ctx, &eventsv1.CreateWebhookEndpointRequest{Url: "https://hooks.example.com/x", Events: []string{"*"}})
	wantStatus(t, err, codes.InvalidArgument, "A tenant may have at most 16 webhook endpoints: delete one first")
	del, err := s.DeleteWebhookEndpoint(ctx, &eventsv1.DeleteWebhookEndpointRequest{Id: ep.GetId()})
	if err != nil || !del.GetDeleted() || del.GetId() != ep.GetId() {
		t.Fatalf("delete %v %v", del, err)
	}
	_, err = s.DeleteWebhookEndpoint(ctx, &eventsv1.DeleteWebhookEndpointRequest{Id: ep.GetId()})
	wantStatus(t, err, codes.NotFound, "Webhook endpoint not found")
}

// A ping reaches the endpoint, signed, and shows in its deliveries; a redelivery of a
// logged event is a new delivery; another tenant's endpoint, event and deliveries are
// not found.
func TestPingRedeliverAndIsolation(t *testing.T) {
	f := newFixture(t)
	s := f.server(true)
	r := newRecorder(t)
	ctx := tenantCtx("t1")
	created, err := s.CreateWebhookEndpoint(ctx, &eventsv1.CreateWebhookEndpointRequest{Url: r.URL + "/hook", Events: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	ep := created.GetEndpoint()
	ping, err := s.PingWebhookEndpoint(ctx, &eventsv1.PingWebhookEndpointRequest{Id: ep.GetId()})
	if err != nil || !strings.HasPrefix(ping.GetEventId(), "evt_") {
		t.Fatalf("ping %v %v", ping, err)
	}
	f.worker.RunOnce(context.Background())
	if r.count() != 1 {
		t.Fatalf("received %d", r.count())
	}
	body := string(r.bodies[0])
	if !strings.HasPrefix(body, `{"id":"`+ping.GetEventId()+`","type":"ping","created_at":"2026-11-25T12:00:00.000000Z","actor":{"type":"api_key","request_id":null},"data":{}}`) {
		t.Fatalf("ping body %s", body)
	}
	if err := webhook.Verify(r.got[0].Header.Get("Keyhouse-Signature"), r.bodies[0], []byte(ep.GetSecret()), anyAge, f.clock.Now()); err != nil {
		t.Fatal(err)
	}
	ds, err := s.ListWebhookDeliveries(ctx, &eventsv1.ListWebhookDeliveriesRequest{Id: ep.GetId()})
	if err != nil || len(ds.GetDeliveries()) != 1 || ds.GetDeliveries()[0].GetStatus() != "succeeded" || ds.GetHasMore() {
		t.Fatalf("deliveries %v %v", ds, err)
	}
	// A logged event, delivered, then redelivered.
	if _, err := f.store.db.Exec(context.Background(), `INSERT INTO events (id, tenant_id, type, created_at, body, seq) VALUES ('evt_logged', 't1', 'license.revoked', now(), '{"id":"evt_logged"}', 1)`); err != nil {
		t.Fatal(err)
	}
	re, err := s.RedeliverEvent(ctx, &eventsv1.RedeliverEventRequest{EventId: "evt_logged", EndpointId: ep.GetId()})
	if err != nil || re.GetDelivery().GetStatus() != "pending" || re.GetDelivery().GetEventId() != "evt_logged" {
		t.Fatalf("redeliver %v %v", re, err)
	}
	f.worker.RunOnce(context.Background())
	if r.count() != 2 || string(r.bodies[1]) != `{"id":"evt_logged"}` {
		t.Fatalf("redelivered %d", r.count())
	}
	page, err := s.ListWebhookDeliveries(ctx, &eventsv1.ListWebhookDeliveriesRequest{Id: ep.GetId(), Limit: "1", StartingAfter: ""})
	if err != nil || len(page.GetDeliveries()) != 1 || !page.GetHasMore() || page.GetDeliveries()[0].GetEventId() != "evt_logged" {
		t.Fatalf("page 1 %v %v", page, err)
	}
	page2, err := s.ListWebhookDeliveries(ctx, &eventsv1.ListWebhookDeliveriesRequest{Id: ep.GetId(), Limit: "1", StartingAfter: page.GetDeliveries()[0].GetId()})
	if err != nil || len(page2.GetDeliveries()) != 1 || page2.GetHasMore() || page2.GetDeliveries()[0].GetEventId() != ping.GetEventId() {
		t.Fatalf("page 2 %v %v", page2, err)
	}
	_, err = s.ListWebhookDeliveries(ctx, &eventsv1.ListWebhookDeliveriesRequest{Id: ep.GetId(), Status: "done"})
	wantStatus(t, err, codes.InvalidArgument, "status must be pending, succeeded or failed")
	_, err = s.ListWebhookDeliveries(ctx, &eventsv1.ListWebhookDeliveriesRequest{Id: ep.GetId(), Limit: "0"})
	wantStatus(t, err, codes.InvalidArgument, "limit must be an integer between 1 and 1000")
	// A ping is in no log: redeliver, for logged events only, does not find it, to this
	// endpoint or another, and sends nothing.
	pinged, _ := s.CreateWebhookEndpoint(ctx, &eventsv1.CreateWebhookEndpointRequest{Url: r.URL + "/other", Events: []string{"license."}})
	for _, to := range []string{ep.GetId(), pinged.GetEndpoint().GetId()} {
		_, err = s.RedeliverEvent(ctx, &eventsv1.RedeliverEventRequest{EventId: ping.GetEventId(), EndpointId: to})
		wantStatus(t, err, codes.NotFound, "Event not found")
	}
	f.worker.RunOnce(context.Background())
	if r.count() != 2 {
		t.Fatalf("a ping was redelivered: %d deliveries", r.count())
	}
	_, err = s.RedeliverEvent(ctx, &eventsv1.RedeliverEventRequest{EventId: "evt_logged"})
	wantStatus(t, err, codes.InvalidArgument, "endpoint_id is required")

	other := tenantCtx("t2")
	mine, _ := s.CreateWebhookEndpoint(other, &eventsv1.CreateWebhookEndpointRequest{Url: r.URL, Events: []string{"*"}})
	for name, call := range map[string]func() error{
		"ping": func() error {
			_, err := s.PingWebhookEndpoint(other, &eventsv1.PingWebhookEndpointRequest{Id: ep.GetId()})
			return err
		},
		"update": func() error {
			_, err := s.UpdateWebhookEndpoint(other, &eventsv1.UpdateWebhookEndpointRequest{Id: ep.GetId()})
			return err
		},
		"roll": func() error {
			_, err := s.RollWebhookEndpointSecret(other, &eventsv1.RollWebhookEndpointSecretRequest{Id: ep.GetId()})
			return err
		},
		"delete": func() error {
			_, err := s.DeleteWebhookEndpoint(other, &eventsv1.DeleteWebhookEndpointRequest{Id: ep.GetId()})
			return err
		},
		"deliveries": func() error {
			_, err := s.ListWebhookDeliveries(other, &eventsv1.ListWebhookDeliveriesRequest{Id: ep.GetId()})
			return err
		},
		"redeliver to": func() error {
			_, err := s.RedeliverEvent(other, &eventsv1.RedeliverEventRequest{EventId: "evt_logged", EndpointId: mine.GetEndpoint().GetId()})
			return err
		},
	} {
		err := call()
		st, _ := status.FromError(err)
		if st.Code() != codes.NotFound {
			t.Errorf("%s another tenant's: %v", name, err)
		}
	}
	_, err = s.RedeliverEvent(other, &eventsv1.RedeliverEventRequest{EventId: "evt_logged", EndpointId: mine.GetEndpoint().GetId()})
	wantStatus(t, err, codes.NotFound, "Event not found")
	_, err = s.RedeliverEvent(ctx, &eventsv1.RedeliverEventRequest{EventId: "evt_logged", EndpointId: mine.GetEndpoint().GetId()})
	wantStatus(t, err, codes.NotFound, "Webhook endpoint not found")
	if ds, _ := s.ListEventDeliveries(other, &eventsv1.ListEventDeliveriesRequest{EventId: "evt_logged"}); len(ds.GetDeliveries()) != 0 {
		t.Fatal("another tenant's deliveries of an event listed")
	}
	if ds, _ := s.ListEventDeliveries(ctx, &eventsv1.ListEventDeliveriesRequest{EventId: "evt_logged"}); len(ds.GetDeliveries()) != 1 {
		t.Fatal("the event's delivery not listed")
	}
}

// An attempt's at is to the microsecond, as every other time the API answers (Postgres
// keeps no finer): it had nine fractional digits beside its delivery's six, also for
// attempts recorded before (read back through the store's decoding).
func TestAnAttemptsTimeIsToTheMicrosecond(t *testing.T) {
	at := time.Date(2026, 12, 1, 3, 4, 5, 123456789, time.UTC)
	raw, err := attemptJSON(webhook.Result{At: at, StatusCode: 500, Duration: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	old, _ := json.Marshal([]Attempt{{At: at}}) // as recorded before
	for _, stored := range [][]byte{raw, old} {
		d, err := scanDelivery(attemptsRow(stored))
		if err != nil {
			t.Fatal(err)
		}
		answer, err := protojson.Marshal(deliveryPB(d, true))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(answer), `"at":"2026-12-01T03:04:05.123456Z"`) {
			t.Errorf("stored %s answered %s", stored, answer)
		}
	}
}

// attemptsRow is a delivery row whose attempts column holds attempts.
type attemptsRow []byte

func (r attemptsRow) Scan(dest ...any) error {
	*dest[6].(*[]byte) = r
	return nil
}
