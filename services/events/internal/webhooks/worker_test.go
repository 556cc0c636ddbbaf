package webhooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/seal"
	"github.com/keyhouse/keyhouse/pkg/signing"
	"github.com/keyhouse/keyhouse/pkg/webhook"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	"github.com/keyhouse/keyhouse/services/events/internal/ingest"
	"github.com/keyhouse/keyhouse/services/events/internal/store"
	"github.com/keyhouse/keyhouse/services/events/migrations"
)

func TestMain(m *testing.M) { testkit.Main(m) }

var schema = testkit.Template{Name: "events", Migrate: pgxx.Migrations{Schema: "events", FS: migrations.FS}.Apply}

// clock is the injected clock: it moves only when a test moves it.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
}
func (c *clock) Add(d time.Duration) { c.Set(c.Now().Add(d)) }

type fixedKeys struct{ k *signing.Keyring }

func (f fixedKeys) Keyring(context.Context) (*signing.Keyring, error) { return f.k, nil }

type fixture struct {
	t      testing.TB
	store  *Store
	keys   fixedKeys
	clock  *clock
	worker *Worker
	// disabled receives the endpoints the worker disabled, from inside the transaction.
	disabled chan string
}

func newFixture(t testing.TB, opts ...pgxx.Option) *fixture {
	t.Helper()
	db, err := pgxx.Open(context.Background(), testkit.DatabaseURL(t, schema), "events", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	k, err := signing.NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, store: NewStore(db), keys: fixedKeys{k}, clock: &clock{now: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)}, disabled: make(chan string, 16)}
	f.worker = &Worker{
		Store: f.store, Keys: f.keys, Now: f.clock.Now,
		Sender: webhook.NewSender(webhook.SenderOptions{AllowPrivate: true}),
		Log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnDisable: func(ctx context.Context, tx pgx.Tx, ep *Endpoint) error {
			f.disabled <- ep.ID
			return EmitDisabled(ctx, tx, ep)
		},
	}
	return f
}

// endpoint creates an endpoint of tenant to url and returns it with its secret.
func (f *fixture) endpoint(tenant, url string, events ...string) (*Endpoint, string) {
	f.t.Helper()
	secret := NewSecret()
	sealed, err := seal.Seal(f.keys.k, seal.PurposeEndpointSecret, []byte(secret))
	if err != nil {
		f.t.Fatal(err)
	}
	if len(events) == 0 {
		events = []string{"*"}
	}
	ep, err := createEndpoint(f.store, tenant, NewEndpoint{URL: url, Events: events, SealedSecret: sealed}, f.clock.Now())
	if err != nil {
		f.t.Fatal(err)
	}
	return ep, secret
}

// event stores a new event of tenant in the log, created now, and its deliveries, as the
// log's ingest does.
func (f *fixture) event(tenant, id, typ string) []byte {
	f.t.Helper()
	body := []byte(`{"id":"` + id + `","type":"` + typ + `","created_at":"2026-11-25T12:00:00.000000Z","actor":{"type":"system","request_id":null},"data":{}}`)
	err := pgxx.InTx(context.Background(), f.store.db, func(tx pgx.Tx) error {
		if _, err := store.InsertAll(context.Background(), tx, []store.Event{{ID: id, TenantID: tenant, Type: typ, CreatedAt: f.clock.Now(), Body: body}}); err != nil {
			return err
		}
		_, err := f.store.Fanout(context.Background(), tx, tenant, id, typ, body, f.clock.Now())
		return err
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return body
}

func (f *fixture) deliveries(tenant, endpointID string) []Delivery {
	f.t.Helper()
	ds, _, err := f.store.ListDeliveries(context.Background(), tenant, endpointID, DeliveryFilter{Limit: 100})
	if err != nil {
		f.t.Fatal(err)
	}
	return ds
}

// recorder is a real HTTP receiver whose answer the test switches.
type recorder struct {
	*httptest.Server
	status atomic.Int32
	mu     sync.Mutex
	got    []*http.Request
	bodies [][]byte
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{}
	r.status.Store(200)
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, req)
		r.bodies = append(r.bodies, b)
		r.mu.Unlock()
		w.WriteHeader(int(r.status.Load()))
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *recorder) count() int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.got) }

// A stored event reaches every matching enabled endpoint, signed with its own secret; an
// endpoint not subscribed to the type gets nothing.
func TestEventReachesMatchingEndpointsSigned(t *testing.T) {
	f := newFixture(t)
	all := newRecorder(t)
	licenses, other := newRecorder(t), newRecorder(t)
	epAll, secretAll := f.endpoint("t1", all.URL)
	_, secretLic := f.endpoint("t1", licenses.URL, "license.")
	f.endpoint("t1", other.URL, "release.published")
	body := f.event("t1", "evt_1", "license.issued")
	if n := f.worker.RunOnce(context.Background()); n != 2 {
		t.Fatalf("%d attempts, want 2", n)
	}
	for _, c := range []struct {
		r      *recorder
		secret string
	}{{all, secretAll}, {licenses, secretLic}} {
		if c.r.count() != 1 {
			t.Fatalf("received %d", c.r.count())
		}
		req, got := c.r.got[0], c.r.bodies[0]
		if string(got) != string(body) || req.Header.Get("Keyhouse-Event-Id") != "evt_1" {
			t.Fatalf("got %s %v", got, req.Header)
		}
		if err := webhook.Verify(req.Header.Get("Keyhouse-Signature"), got, []byte(c.secret), anyAge, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if other.count() != 0 {
		t.Fatal("an endpoint not subscribed to the type received it")
	}
	ds := f.deliveries("t1", epAll.ID)
	if len(ds) != 1 || ds[0].Status != StatusSucceeded || ds[0].NextAttemptAt != nil || len(ds[0].Attempts) != 1 ||
		*ds[0].Attempts[0].StatusCode != 200 || ds[0].Attempts[0].Error != nil {
		t.Fatalf("delivery %+v", ds)
	}
	// Stored twice (a redelivered message): still one delivery per endpoint.
	f.event("t1", "evt_1", "license.issued")
	if ds := f.deliveries("t1", epAll.ID); len(ds) != 1 {
		t.Fatalf("%d deliveries after a duplicate", len(ds))
	}
}

// A failed attempt is retried on the schedule, not before; the retry that succeeds ends
// the delivery.
func TestFailedAttemptRetriedOnSchedule(t *testing.T) {
	f := newFixture(t)
	r := newRecorder(t)
	r.status.Store(500)
	ep, _ := f.endpoint("t1", r.URL)
	f.event("t1", "evt_1", "license.revoked")
	f.worker.RunOnce(context.Background())
	d := f.deliveries("t1", ep.ID)[0]
	if d.Status != StatusPending || len(d.Attempts) != 1 || *d.Attempts[0].StatusCode != 500 || d.NextAttemptAt == nil {
		t.Fatalf("after a 500: %+v", d)
	}
	wait := d.NextAttemptAt.Sub(f.clock.Now())
	if wait < 24*time.Second || wait > 36*time.Second {
		t.Fatalf("first retry in %v", wait)
	}
	f.clock.Add(wait - time.Second)
	if n := f.worker.RunOnce(context.Background()); n != 0 {
		t.Fatal("retried before it was due")
	}
	r.status.Store(200)
	f.clock.Add(time.Second)
	if n := f.worker.RunOnce(context.Background()); n != 1 {
		t.Fatal("not retried when due")
	}
	d = f.deliveries("t1", ep.ID)[0]
	if d.Status != StatusSucceeded || len(d.Attempts) != 2 || r.count() != 2 {
		t.Fatalf("after the retry: %+v", d)
	}
}

// A receiver down for 72 hours: every delivery is retried through the window, then fails,
// and the endpoint is disabled (its event recorded in the disabling transaction); later
// events are not sent to it. Run on the injected clock: no test waits 72 hours.
func TestEndpointDisabledAfter72HoursOfFailures(t *testing.T) {
	f := newFixture(t)
	down := httptest.NewServer(http.NotFoundHandler())
	url := down.URL
	down.Close()
	ep, _ := f.endpoint("t1", url)
	healthy := newRecorder(t)
	f.endpoint("t1", healthy.URL)
	var mailed []string
	f.worker.Disabled = func(_ context.Context, ep *Endpoint) { mailed = append(mailed, ep.ID) }
	f.event("t1", "evt_1", "license.issued")
	start := f.clock.Now()
	for i := 0; i < 40; i++ {
		f.worker.RunOnce(context.Background())
		d := f.deliveries("t1", ep.ID)[0]
		if d.Status != StatusPending {
			break
		}
		f.clock.Set(*d.NextAttemptAt)
	}
	d := f.deliveries("t1", ep.ID)[0]
	if d.Status != StatusFailed || d.NextAttemptAt != nil {
		t.Fatalf("after 72 h: %+v", d)
	}
	if last := d.Attempts[len(d.Attempts)-1]; last.At.Sub(start) < 72*time.Hour || *last.Error != "connection refused" || last.StatusCode != nil {
		t.Fatalf("last attempt %+v, %v after the first", last, last.At.Sub(start))
	}
	got, err := f.store.GetEndpoint(context.Background(), "t1", ep.ID)
	if err != nil || got.Enabled || got.DisabledReason == nil || *got.DisabledReason != DisabledReason {
		t.Fatalf("endpoint %+v %v", got, err)
	}
	if id := <-f.disabled; id != ep.ID || len(mailed) != 1 || mailed[0] != ep.ID {
		t.Fatalf("disabled event for %s, mailed %v", id, mailed)
	}
	// The service's own hook: webhook_endpoint.disabled is in its outbox, committed with
	// the change, naming the endpoint and the reason.
	var subject string
	var payload []byte
	if err := f.store.db.QueryRow(context.Background(), `SELECT subject, payload FROM outbox WHERE tenant_id = 't1'`).Scan(&subject, &payload); err != nil {
		t.Fatal(err)
	}
	ev, uerr := events.Unmarshal(payload)
	if uerr != nil || subject != "keyhouse.events.webhook_endpoint.disabled" || ev.GetWebhookEndpointDisabled().GetEndpointId() != ep.ID ||
		ev.GetWebhookEndpointDisabled().GetReason() != DisabledReason || ev.GetActor().GetType() != "system" {
		t.Fatalf("outbox %s %v %v", subject, ev, uerr)
	}
	f.event("t1", "evt_2", "license.revoked")
	if ds := f.deliveries("t1", ep.ID); len(ds) != 1 {
		t.Fatal("a disabled endpoint got a new delivery")
	}
	// Enabling it again clears the reason; it receives new events.
	on := true
	if got, err = f.store.UpdateEndpoint(context.Background(), "t1", ep.ID, EndpointUpdate{Enabled: &on}); err != nil || got.DisabledReason != nil || !got.Enabled {
		t.Fatalf("re-enabled: %+v %v", got, err)
	}
}

// An endpoint that answers now and then is not disabled: a success ends the streak.
func TestSuccessResetsTheFailureStreak(t *testing.T) {
	f := newFixture(t)
	r := newRecorder(t)
	r.status.Store(503)
	ep, _ := f.endpoint("t1", r.URL)
	for i := 0; i < 4; i++ {
		f.event("t1", "evt_"+string(rune('a'+i)), "license.issued")
		f.worker.RunOnce(context.Background())
		if i == 1 {
			r.status.Store(200)
			f.clock.Add(time.Hour)
			f.worker.RunOnce(context.Background()) // the retries succeed
			r.status.Store(503)
		}
		f.clock.Add(40 * time.Hour)
	}
	if got, _ := f.store.GetEndpoint(context.Background(), "t1", ep.ID); !got.Enabled {
		t.Fatal("disabled although a delivery succeeded within 72 h")
	}
}

// Deliveries older than the retention are deleted, the others kept.
func TestDeliveriesKeptForTheRetention(t *testing.T) {
	f := newFixture(t)
	r := newRecorder(t)
	ep, _ := f.endpoint("t1", r.URL)
	f.event("t1", "evt_old", "license.issued")
	f.clock.Add(48 * time.Hour)
	f.event("t1", "evt_new", "license.issued")
	f.worker.Retention = 72 * time.Hour
	f.clock.Add(25 * time.Hour)
	f.worker.sweep(context.Background())
	ds := f.deliveries("t1", ep.ID)
	if len(ds) != 1 || ds[0].EventID != "evt_new" {
		t.Fatalf("after the sweep: %+v", ds)
	}
}

// A retention shorter than the retry window (an operator's EVENT_RETENTION=10m) deletes
// the deliveries that are done, but a pending one is kept, and retried, until its 72
// hours have run: webhooks.md promises delivery to a receiver down for up to 72 hours.
func TestAShortRetentionKeepsPendingDeliveriesForTheirRetries(t *testing.T) {
	f := newFixture(t)
	down, up := newRecorder(t), newRecorder(t)
	down.status.Store(503)
	epDown, _ := f.endpoint("t1", down.URL)
	epUp, _ := f.endpoint("t1", up.URL)
	f.event("t1", "evt_1", "license.issued")
	f.worker.RunOnce(context.Background())
	f.worker.Retention = 10 * time.Minute
	f.clock.Add(time.Hour)
	f.worker.sweep(context.Background())
	if ds := f.deliveries("t1", epUp.ID); len(ds) != 0 {
		t.Fatalf("the succeeded delivery outlived the retention: %+v", ds)
	}
	ds := f.deliveries("t1", epDown.ID)
	if len(ds) != 1 || ds[0].Status != StatusPending {
		t.Fatalf("the pending delivery was not kept for its retries: %+v", ds)
	}
	down.status.Store(200)
	f.worker.RunOnce(context.Background())
	if ds := f.deliveries("t1", epDown.ID); len(ds) != 1 || ds[0].Status != StatusSucceeded || down.count() != 2 {
		t.Fatalf("the kept delivery was not delivered when its receiver came back: %+v, %d attempts", ds, down.count())
	}
	// Past the window it has failed or succeeded, and goes at the next sweep.
	f.clock.Add(72 * time.Hour)
	f.worker.lastSweep = time.Time{}
	f.worker.sweep(context.Background())
	if ds := f.deliveries("t1", epDown.ID); len(ds) != 0 {
		t.Fatalf("kept past the retention and the window: %+v", ds)
	}
}

// A redelivery goes with its event, however late it was made: its body is a copy of the
// event, and must not outlive the log's retention (the probe's redelivery made at +100 s
// of a 120 s retention outlived its event). A pending one is kept for its retries, so no
// copy lives longer than EVENT_RETENTION + the 72 h window.
func TestARedeliveryGoesWithItsEvent(t *testing.T) {
	f := newFixture(t)
	up, down := newRecorder(t), newRecorder(t)
	down.status.Store(503)
	epUp, _ := f.endpoint("t1", up.URL)
	epDown, _ := f.endpoint("t1", down.URL)
	f.event("t1", "evt_1", "license.issued")
	f.worker.RunOnce(context.Background()) // epUp's delivery succeeds, epDown's is pending
	f.worker.Retention = 2 * time.Minute
	f.clock.Add(100 * time.Second)
	for _, ep := range []*Endpoint{epUp, epDown} {
		if _, err := f.store.Enqueue(context.Background(), "t1", ep.ID, "evt_1", "license.issued", []byte(`{}`), true, f.clock.Now()); err != nil {
			t.Fatal(err)
		}
	}
	f.worker.RunOnce(context.Background())
	f.clock.Add(time.Minute) // the event is past the retention; the redeliveries are not
	f.worker.sweep(context.Background())
	if ds := f.deliveries("t1", epUp.ID); len(ds) != 0 {
		t.Fatalf("deliveries outlived their event: %+v", ds)
	}
	ds := f.deliveries("t1", epDown.ID)
	if len(ds) != 2 || ds[0].Status != StatusPending || ds[1].Status != StatusPending {
		t.Fatalf("the pending deliveries were not kept for their retries: %+v", ds)
	}
	// 72 hours after the redelivery was made its retries are over, and it goes too.
	f.clock.Add(72 * time.Hour)
	f.worker.RunOnce(context.Background())
	f.worker.lastSweep = time.Time{}
	f.worker.sweep(context.Background())
	if ds := f.deliveries("t1", epDown.ID); len(ds) != 0 {
		t.Fatalf("kept past EVENT_RETENTION + 72 h: %+v", ds)
	}
}

// A delivery claimed by a process that died before recording its attempt is due again
// when the lease runs out, and is then delivered.
func TestDeliveryOfAKilledProcessIsRetried(t *testing.T) {
	f := newFixture(t)
	r := newRecorder(t)
	ep, _ := f.endpoint("t1", r.URL)
	f.event("t1", "evt_1", "seat.activated")
	// The "killed" process: it claimed the delivery and never recorded anything.
	due, err := f.store.Claim(context.Background(), f.clock.Now(), DefaultLease, Bounds{Total: 10, PerEndpoint: 4, PerTenant: 10}, InFlight{})
	if err != nil || len(due) != 1 {
		t.Fatalf("claim: %v %v", due, err)
	}
	if n := f.worker.RunOnce(context.Background()); n != 0 {
		t.Fatal("claimed twice while the first claim's lease runs")
	}
	f.clock.Add(DefaultLease)
	if n := f.worker.RunOnce(context.Background()); n != 1 {
		t.Fatal("not retried after the lease")
	}
	if d := f.deliveries("t1", ep.ID)[0]; d.Status != StatusSucceeded || r.count() != 1 {
		t.Fatalf("%+v", d)
	}
}

// A receiver that hangs holds at most PerEndpoint workers; every delivery to another
// tenant's endpoint goes through meanwhile.
func TestHangingReceiverDelaysNoOtherEndpoint(t *testing.T) {
	f := newFixture(t)
	release := make(chan struct{})
	var hanging, maxHanging atomic.Int32
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := hanging.Add(1)
		for {
			m := maxHanging.Load()
			if n <= m || maxHanging.CompareAndSwap(m, n) {
				break
			}
		}
		<-release
		hanging.Add(-1)
	}))
	fast := newRecorder(t)
	f.endpoint("slow-tenant", slow.URL)
	f.endpoint("t2", fast.URL)
	for i := 0; i < 20; i++ {
		id := "evt_" + string(rune('a'+i))
		f.event("slow-tenant", id, "license.issued")
		f.event("t2", id, "license.issued")
	}
	f.worker.Concurrency, f.worker.PerEndpoint, f.worker.Poll = 8, 2, 20*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.worker.Run(ctx); close(done) }()
	deadline := time.Now().Add(time.Minute) // a failure bound, not a timing goal
	for fast.count() < 20 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if fast.count() != 20 {
		t.Fatalf("the other tenant's endpoint received %d of 20 while one receiver hung", fast.count())
	}
	if m := maxHanging.Load(); m > 2 {
		t.Fatalf("%d attempts at once to the hanging endpoint, bound 2", m)
	}
	cancel()
	close(release)
	<-done
	slow.Close()
}

// While a roll overlaps, deliveries carry a signature for each secret; once the old
// secret expired, only the new one.
func TestRollSecretOverlap(t *testing.T) {
	f := newFixture(t)
	r := newRecorder(t)
	ep, oldSecret := f.endpoint("t1", r.URL)
	newSecret := NewSecret()
	sealed, _ := seal.Seal(f.keys.k, seal.PurposeEndpointSecret, []byte(newSecret))
	if _, err := f.store.RollSecret(context.Background(), Idempotency{}, "t1", ep.ID, sealed, f.clock.Now(), f.clock.Now().Add(time.Hour), noAnswer); err != nil {
		t.Fatal(err)
	}
	f.event("t1", "evt_1", "license.issued")
	f.worker.RunOnce(context.Background())
	f.clock.Add(time.Hour)
	f.event("t1", "evt_2", "license.issued")
	f.worker.RunOnce(context.Background())
	if r.count() != 2 {
		t.Fatalf("received %d", r.count())
	}
	verify := func(i int, secret string) error {
		return webhook.Verify(r.got[i].Header.Get("Keyhouse-Signature"), r.bodies[i], []byte(secret), anyAge, time.Now())
	}
	if verify(0, oldSecret) != nil || verify(0, newSecret) != nil {
		t.Fatal("during the overlap both secrets must verify")
	}
	if verify(1, newSecret) != nil || !errors.Is(verify(1, oldSecret), webhook.ErrNoSignature) {
		t.Fatal("after the overlap only the new secret verifies")
	}
}

// signers reports, for each secret, whether the i-th delivery r received verifies with
// it, and how many v1 signatures it carries.
func (r *recorder) signers(i int, secrets ...string) ([]bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	header := r.got[i].Header.Get("Keyhouse-Signature")
	out := make([]bool, len(secrets))
	for j, secret := range secrets {
		out[j] = webhook.Verify(header, r.bodies[i], []byte(secret), anyAge, time.Now()) == nil
	}
	return out, strings.Count(header, "v1=")
}

// A second roll within the first one's overlap keeps the first one's secret signing until
// the end the first roll promised: each secret a roll kept signs until its own end, and a
// roll that keeps none (0) ends only the secret it replaces.
func TestRollSecretKeepsEverySecretUntilItsOwnEnd(t *testing.T) {
	f := newFixture(t)
	s := f.server(true)
	r := newRecorder(t)
	ctx := tenantCtx("t1")
	ep, s0 := f.endpoint("t1", r.URL)
	id := ep.ID
	roll := func(overlap *int64) string {
		t.Helper()
		req := &eventsv1.RollWebhookEndpointSecretRequest{Id: id}
		if overlap != nil {
			req.ExpireOldAfterSeconds = wrapperspb.Int64(*overlap)
		}
		out, err := s.RollWebhookEndpointSecret(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return out.GetEndpoint().GetSecret()
	}
	hour, none := int64(3600), int64(0)
	s1 := roll(nil) // s0 signs for the default day
	f.clock.Add(time.Minute)
	s2 := roll(&hour) // s1 signs for an hour
	deliver := func(n int) {
		t.Helper()
		f.event("t1", fmt.Sprintf("evt_%d", n), "license.issued")
		f.worker.RunOnce(context.Background())
		if r.count() != n {
			t.Fatalf("received %d, want %d", r.count(), n)
		}
	}
	want := func(i int, secrets []string, signs []bool) {
		t.Helper()
		got, v1s := r.signers(i, secrets...)
		wantV1s := 0
		for j := range got {
			if signs[j] {
				wantV1s++
			}
			if got[j] != signs[j] {
				t.Errorf("delivery %d: secret %d signs %v, want %v", i, j, got[j], signs[j])
			}
		}
		if v1s != wantV1s {
			t.Errorf("delivery %d carries %d v1, want %d", i, v1s, wantV1s)
		}
	}
	deliver(1)
	want(0, []string{s0, s1, s2}, []bool{true, true, true})
	f.clock.Add(time.Hour) // s1's hour is over, s0's day is not
	deliver(2)
	want(1, []string{s0, s1, s2}, []bool{true, false, true})
	s3 := roll(&none) // s2 ends at once; s0 keeps its day
	deliver(3)
	want(2, []string{s0, s1, s2, s3}, []bool{true, false, false, true})
	f.clock.Add(23 * time.Hour) // s0's day is over
	deliver(4)
	want(3, []string{s0, s3}, []bool{false, true})
}

// At most MaxOldSecrets old secrets sign at once, however many rolls race (the endpoint's
// row serializes them); past it a roll that would keep one more is a 400 naming the
// field, and changes nothing, while a roll that keeps none is never refused.
func TestRollSecretOldSecretLimitUnderConcurrentRolls(t *testing.T) {
	f := newFixture(t)
	s := f.server(true)
	r := newRecorder(t)
	ctx := tenantCtx("t1")
	ep, s0 := f.endpoint("t1", r.URL)
	id := ep.ID
	var mu sync.Mutex
	secrets := []string{s0}
	var refused atomic.Int32
	var wg sync.WaitGroup
	for range 3 * MaxOldSecrets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := s.RollWebhookEndpointSecret(ctx, &eventsv1.RollWebhookEndpointSecretRequest{Id: id})
			if err != nil {
				st, _ := status.FromError(err)
				if st.Code() != codes.InvalidArgument || st.Message() != "Too many old secrets still signing (at most 4): roll with expire_old_after_seconds 0, or after one expires" {
					t.Errorf("refused with %v", err)
				}
				refused.Add(1)
				return
			}
			mu.Lock()
			secrets = append(secrets, out.GetEndpoint().GetSecret())
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(secrets) != MaxOldSecrets+1 || int(refused.Load()) != 2*MaxOldSecrets {
		t.Fatalf("%d rolls kept a secret, %d refused; want %d and %d", len(secrets)-1, refused.Load(), MaxOldSecrets, 2*MaxOldSecrets)
	}
	f.event("t1", "evt_1", "license.issued")
	f.worker.RunOnce(context.Background())
	if r.count() != 1 {
		t.Fatalf("received %d", r.count())
	}
	signs, v1s := r.signers(0, secrets...)
	for i, ok := range signs {
		if !ok {
			t.Errorf("secret %d does not sign", i)
		}
	}
	if v1s != MaxOldSecrets+1 {
		t.Errorf("%d v1, want %d", v1s, MaxOldSecrets+1)
	}
	if _, err := s.RollWebhookEndpointSecret(ctx, &eventsv1.RollWebhookEndpointSecretRequest{Id: id, ExpireOldAfterSeconds: wrapperspb.Int64(0)}); err != nil {
		t.Fatalf("a roll keeping no secret was refused: %v", err)
	}
}

// A process of the release before reads only old_secret: a roll writes there the secret
// it superseded, and the old secret such a process's roll left there signs too.
func TestRollSecretKeepsTheReleaseBeforeSigning(t *testing.T) {
	f := newFixture(t)
	r := newRecorder(t)
	ep, s0 := f.endpoint("t1", r.URL)
	s1 := NewSecret()
	sealed1, _ := seal.Seal(f.keys.k, seal.PurposeEndpointSecret, []byte(s1))
	if _, err := f.store.RollSecret(context.Background(), Idempotency{}, "t1", ep.ID, sealed1, f.clock.Now(), f.clock.Now().Add(time.Hour), noAnswer); err != nil {
		t.Fatal(err)
	}
	var legacy []byte
	if err := f.store.db.QueryRow(context.Background(), `SELECT old_secret FROM webhook_endpoints WHERE id = $1`, ep.ID).Scan(&legacy); err != nil {
		t.Fatal(err)
	}
	if got, err := seal.Open(f.keys.k, seal.PurposeEndpointSecret, legacy); err != nil || string(got) != s0 {
		t.Fatalf("old_secret is not the superseded secret: %v", err)
	}
	// The release before's roll, verbatim: s1 becomes old_secret, s2 the secret.
	s2 := NewSecret()
	sealed2, _ := seal.Seal(f.keys.k, seal.PurposeEndpointSecret, []byte(s2))
	if _, err := f.store.db.Exec(context.Background(), `
		UPDATE webhook_endpoints SET old_secret = secret, old_secret_expires_at = $3, secret = $2 WHERE id = $1`,
		ep.ID, sealed2, f.clock.Now().Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	f.event("t1", "evt_1", "license.issued")
	f.worker.RunOnce(context.Background())
	if signs, v1s := r.signers(0, s0, s1, s2); !signs[0] || !signs[1] || !signs[2] || v1s != 3 {
		t.Fatalf("signers %v, %d v1", signs, v1s)
	}
	// This release's next roll, keeping none, ends s2 and keeps s1 to the end the release
	// before's roll promised it (s0's hour runs out first).
	s3 := NewSecret()
	sealed3, _ := seal.Seal(f.keys.k, seal.PurposeEndpointSecret, []byte(s3))
	if _, err := f.store.RollSecret(context.Background(), Idempotency{}, "t1", ep.ID, sealed3, f.clock.Now(), f.clock.Now(), noAnswer); err != nil {
		t.Fatal(err)
	}
	f.clock.Add(90 * time.Minute)
	f.event("t1", "evt_2", "license.issued")
	f.worker.RunOnce(context.Background())
	if signs, v1s := r.signers(1, s0, s1, s2, s3); signs[0] || !signs[1] || signs[2] || !signs[3] || v1s != 2 {
		t.Fatalf("after the roll: signers %v, %d v1", signs, v1s)
	}
}

// At most 16 endpoints per tenant, also when creates race; other tenants are unaffected.
func TestEndpointLimitUnderConcurrentCreates(t *testing.T) {
	f := newFixture(t)
	var ok, limited atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 24; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := createEndpoint(f.store, "t1", NewEndpoint{URL: "https://example.com/h", Events: []string{"*"}, SealedSecret: []byte("x")}, f.clock.Now())
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, ErrEndpointLimit):
				limited.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != MaxEndpoints || limited.Load() != 24-MaxEndpoints {
		t.Fatalf("%d created, %d refused", ok.Load(), limited.Load())
	}
	f.endpoint("t2", "https://example.com/h")
}

// Another tenant's endpoint and deliveries do not exist for a tenant.
func TestTenantIsolation(t *testing.T) {
	f := newFixture(t)
	r := newRecorder(t)
	ep, _ := f.endpoint("t1", r.URL)
	f.event("t1", "evt_1", "license.issued")
	ctx := context.Background()
	if _, err := f.store.GetEndpoint(ctx, "t2", ep.ID); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if _, _, err := f.store.ListDeliveries(ctx, "t2", ep.ID, DeliveryFilter{Limit: 10}); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if _, err := f.store.Enqueue(ctx, "t2", ep.ID, "evt_x", PingType, []byte("{}"), false, f.clock.Now()); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	on := false
	if _, err := f.store.UpdateEndpoint(ctx, "t2", ep.ID, EndpointUpdate{Enabled: &on}); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if err := f.store.DeleteEndpoint(ctx, "t2", ep.ID); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if ds, _, _ := f.store.ListEventDeliveries(ctx, "t2", "evt_1", DeliveryFilter{Limit: 10}); len(ds) != 0 {
		t.Fatal("another tenant's deliveries listed")
	}
	if got := f.deliveries("t1", ep.ID); len(got) != 1 {
		t.Fatal("the owner lost its delivery")
	}
}

// anyAge accepts a signature of any age: the worker signs at the injected clock's time,
// and the tolerance check itself is pkg/webhook's test.
const anyAge = 1000 * time.Hour

// Hosted, a delivery to an endpoint that now resolves to a private address (DNS
// rebinding, or an endpoint stored before the operator turned private networks off) fails
// at the dial, and the receiver hears nothing.
func TestHostedDeliveryRefusesPrivateAddressAtDial(t *testing.T) {
	f := newFixture(t)
	r := newRecorder(t)
	f.worker.Sender = webhook.NewSender(webhook.SenderOptions{}) // hosted: the dial guard on
	_, port, _ := strings.Cut(strings.TrimPrefix(r.URL, "http://"), ":")
	ep, _ := f.endpoint("t1", "http://localhost:"+port+"/hook")
	f.event("t1", "evt_1", "license.issued")
	f.worker.RunOnce(context.Background())
	d := f.deliveries("t1", ep.ID)[0]
	if d.Status != StatusPending || d.Attempts[0].StatusCode != nil || *d.Attempts[0].Error != "Webhook URL must resolve to a public address" {
		t.Fatalf("%+v", d.Attempts)
	}
	if r.count() != 0 {
		t.Fatal("the receiver on loopback was reached")
	}
}

// A busy endpoint's backlog drains through its lanes: each slot, after a success, claims
// the endpoint's next due delivery itself, never more than PerEndpoint attempts at once.
// One claiming round (RunOnce) therefore delivers the whole backlog, not PerEndpoint of it.
func TestBusyEndpointDrainsThroughItsLanes(t *testing.T) {
	f := newFixture(t)
	var inFlight, maxInFlight, got atomic.Int32
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		for {
			m := maxInFlight.Load()
			if n <= m || maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(time.Millisecond) // lets the lanes overlap
		inFlight.Add(-1)
		got.Add(1)
	}))
	t.Cleanup(recv.Close)
	ep, _ := f.endpoint("t1", recv.URL)
	const backlog = 30
	for i := range backlog {
		f.event("t1", fmt.Sprintf("evt_lane_%02d", i), "license.issued")
	}
	f.worker.Concurrency, f.worker.PerEndpoint = 8, 2
	if n := f.worker.RunOnce(context.Background()); n != 2 {
		t.Fatalf("the claiming round took %d deliveries, want PerEndpoint (2)", n)
	}
	if got.Load() != backlog {
		t.Fatalf("the receiver got %d of the %d deliveries in one round", got.Load(), backlog)
	}
	if m := maxInFlight.Load(); m > 2 {
		t.Fatalf("%d attempts at once to one endpoint, bound 2", m)
	}
	for _, d := range f.deliveries("t1", ep.ID) {
		if d.Status != StatusSucceeded {
			t.Fatalf("delivery %s is %s after its lane delivered it", d.ID, d.Status)
		}
	}
}

// A failed attempt ends its lane: a failing endpoint's other due deliveries wait for the
// next claim instead of being tried back to back by the slot.
func TestFailedAttemptEndsTheLane(t *testing.T) {
	f := newFixture(t)
	recv := newRecorder(t)
	recv.status.Store(500)
	f.endpoint("t1", recv.URL)
	for i := range 5 {
		f.event("t1", fmt.Sprintf("evt_fail_%d", i), "license.issued")
	}
	f.worker.Concurrency, f.worker.PerEndpoint = 8, 1
	f.worker.RunOnce(context.Background())
	if n := recv.count(); n != 1 {
		t.Fatalf("the failing endpoint got %d attempts from one slot, want 1", n)
	}
}

// A lane claims from its cursor (the due time of the delivery it just made), yet a
// delivery due before the cursor, which appears while the lane runs (a fan-out that
// committed late, a retry that came due), is delivered by the same lane.
func TestLaneDeliversWhatBecameDueBehindItsCursor(t *testing.T) {
	f := newFixture(t)
	var got []string
	var mu sync.Mutex
	late := "evt_behind_cursor"
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, string(body))
		first := len(got) == 1
		mu.Unlock()
		if first {
			// Due an hour before every delivery the lane has seen.
			err := pgxx.InTx(context.Background(), f.store.db, func(tx pgx.Tx) error {
				_, err := f.store.Fanout(context.Background(), tx, "t1", late, "license.issued",
					[]byte(`{"id":"`+late+`"}`), f.clock.Now().Add(-time.Hour))
				return err
			})
			if err != nil {
				t.Error(err)
			}
		}
	}))
	t.Cleanup(recv.Close)
	ep, _ := f.endpoint("t1", recv.URL)
	for i := range 5 {
		f.event("t1", fmt.Sprintf("evt_cursor_%02d", i), "license.issued")
		f.clock.Add(time.Second)
	}
	f.worker.Concurrency, f.worker.PerEndpoint = 4, 1
	if n := f.worker.RunOnce(context.Background()); n != 1 {
		t.Fatalf("the claiming round took %d deliveries, want one lane", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 6 || !strings.Contains(got[len(got)-1], late) {
		t.Fatalf("the lane delivered %d bodies (last %q), want the 5 deliveries then the one due behind its cursor", len(got), got[len(got)-1])
	}
	for _, d := range f.deliveries("t1", ep.ID) {
		if d.Status != StatusSucceeded {
			t.Fatalf("delivery %s of %s is %s", d.ID, d.EventID, d.Status)
		}
	}
}

// A slot that frees while deliveries wait for one is filled at once, not at the next
// poll: with one slot and an hour's poll, three endpoints' deliveries all arrive.
func TestAFreedSlotTakesTheNextDueDelivery(t *testing.T) {
	f := newFixture(t)
	var receivers []*recorder
	for i := range 3 {
		r := newRecorder(t)
		receivers = append(receivers, r)
		tenant := fmt.Sprintf("t%d", i)
		f.endpoint(tenant, r.URL)
		f.event(tenant, "evt_1", "license.issued")
	}
	f.worker.Concurrency, f.worker.Poll = 1, time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.worker.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(time.Minute) // a failure bound, not a timing goal
	for time.Now().Before(deadline) {
		if receivers[0].count()+receivers[1].count()+receivers[2].count() == 3 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("received %d, %d, %d: a freed slot waited for the poll", receivers[0].count(), receivers[1].count(), receivers[2].count())
}

// The fan-out makes deliveries only for the enabled endpoints subscribed to an event, and
// says whether it made any: events nobody subscribes to must wake no worker (ingest
// tells the worker only of commits whose fan-out wrote).
func TestFanoutReportsWhetherItMadeDeliveries(t *testing.T) {
	f := newFixture(t)
	fan := &Fanout{Store: f.store, Worker: f.worker, Now: f.clock.Now}
	f.endpoint("t-hooks", "http://127.0.0.1:1/", "license.revoked")
	stored := func(tenant, typ string) bool {
		t.Helper()
		id := events.NewID()
		ev := ingest.Stored{Event: &eventsv1.Event{Id: id, TenantId: tenant, Type: typ}, Body: []byte(`{}`)}
		var made bool
		err := pgxx.InTx(context.Background(), f.store.db, func(tx pgx.Tx) (err error) {
			made, err = fan.Stored(context.Background(), tx, []ingest.Stored{ev})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return made
	}
	if stored("t-quiet", "license.revoked") {
		t.Error("an event of a tenant without endpoints made deliveries")
	}
	if stored("t-hooks", "license.issued") {
		t.Error("an event no endpoint subscribes to made deliveries")
	}
	if !stored("t-hooks", "license.revoked") {
		t.Error("an event of a subscribed type made no delivery")
	}
}

// A slot of a tenant at its bound that frees is claimed at once when the tenant has more
// due, not at the next poll: with PerTenant 1 and an hour's poll, both of the tenant's
// endpoints get their delivery.
func TestAFreedSlotOfATenantAtItsBoundIsClaimedAtOnce(t *testing.T) {
	f := newFixture(t)
	first, second := newRecorder(t), newRecorder(t)
	f.endpoint("t1", first.URL)
	f.endpoint("t1", second.URL)
	f.event("t1", "evt_1", "license.issued")
	f.worker.Concurrency, f.worker.PerTenant, f.worker.Poll = 4, 1, time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.worker.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(time.Minute) // a failure bound, not a timing goal
	for time.Now().Before(deadline) {
		if first.count()+second.count() == 2 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("received %d and %d: the tenant's freed slot waited for the poll", first.count(), second.count())
}

// createEndpoint stores an endpoint without an Idempotency-Key and returns it.
func createEndpoint(s *Store, tenant string, n NewEndpoint, now time.Time) (*Endpoint, error) {
	var ep *Endpoint
	_, err := s.CreateEndpoint(context.Background(), Idempotency{}, tenant, n, now, func(created *Endpoint) ([]byte, error) {
		ep = created
		return nil, nil
	})
	return ep, err
}

// Claims that fail round after round (Postgres gone) are one WARN line, with the error
// under "error" as on every other line, and one INFO line when a claim works again.
func TestFailingClaimsAreLoggedOncePerOutage(t *testing.T) {
	f := newFixture(t)
	gone, err := pgxx.Open(context.Background(), testkit.DatabaseURL(t, schema), "events")
	if err != nil {
		t.Fatal(err)
	}
	gone.Close()
	var logged bytes.Buffer
	f.worker.Log = slog.New(slog.NewTextHandler(&logged, nil))
	f.worker.Store = NewStore(gone)
	for range 5 {
		f.worker.RunOnce(context.Background())
	}
	f.worker.Store = f.store
	f.worker.RunOnce(context.Background())
	out := logged.String()
	if strings.Count(out, `level=WARN msg="webhooks: claiming due deliveries failed" error=`) != 1 || strings.Count(out, "level=WARN") != 1 {
		t.Errorf("log of 5 failed claims: want one WARN line with its error:\n%s", out)
	}
	if !strings.Contains(out, `level=INFO msg="webhooks: claiming due deliveries works again" failed_rounds=5`) {
		t.Errorf("log: want one INFO line when claims work again:\n%s", out)
	}
}

// noAnswer is the answer of a roll made without an Idempotency-Key whose answer the test
// does not read.
func noAnswer(*Endpoint) ([]byte, error) { return nil, nil }
