package events

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keyhouse/keyhouse/devinfra/devnats"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/keyhouse/keyhouse/pkg/telemetry"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// An event's created_at has one form: RFC 3339 in UTC with six fractional digits, trailing
// zeros kept, finer digits dropped, so that the strings sort as the times do (a
// Timestamp's JSON printed "…21.882Z", which sorted after "…21.882805Z", and "…21Z").
// A stored envelope of the older form is rewritten in its time alone.
func TestEventTimesHaveSixDigits(t *testing.T) {
	t.Parallel()
	at := func(nanos int) time.Time { return time.Date(2026, 11, 30, 17, 20, 21, nanos, time.UTC) }
	for _, tc := range []struct {
		at   time.Time
		want string
	}{
		{at(882_000_000), "2026-11-30T17:20:21.882000Z"},
		{at(882_805_000), "2026-11-30T17:20:21.882805Z"},
		{at(0), "2026-11-30T17:20:21.000000Z"},
		{at(882_805_999), "2026-11-30T17:20:21.882805Z"},
		{at(5_000).In(time.FixedZone("CET", 3600)), "2026-11-30T17:20:21.000005Z"},
	} {
		if got := FormatTime(tc.at); got != tc.want {
			t.Errorf("FormatTime(%v) = %s, want %s", tc.at, got, tc.want)
		}
		ev := Ping("t1")
		ev.Id, ev.CreatedAt, ev.Actor = "evt_bbbbbbbbbbbbbbbbbbbbbbbbbb", timestamppb.New(tc.at), Actor(ActorSystem, "")
		if got, _ := JSON(ev); !strings.Contains(string(got), `"created_at":"`+tc.want+`"`) {
			t.Errorf("JSON %s, want created_at %s", got, tc.want)
		}
	}
	if a, b := FormatTime(at(882_000_000)), FormatTime(at(882_805_000)); a >= b {
		t.Errorf("%s sorts after %s", a, b)
	}
	for old, want := range map[string]string{
		"2026-11-30T17:20:21.882Z":       "2026-11-30T17:20:21.882000Z",
		"2026-11-30T17:20:21Z":           "2026-11-30T17:20:21.000000Z",
		"2026-11-30T17:20:21.882805123Z": "2026-11-30T17:20:21.882805Z",
		"2026-11-30T17:20:21.882805Z":    "2026-11-30T17:20:21.882805Z",
		"2026-11-30T18:20:21.5+01:00":    "2026-11-30T17:20:21.500000Z",
		"not a time":                     "not a time",
	} {
		if got := NormalizeTime(old); got != want {
			t.Errorf("NormalizeTime(%q) = %q, want %q", old, got, want)
		}
	}
	stored := `{"id":"evt_bbbbbbbbbbbbbbbbbbbbbbbbbb","type":"ping","created_at":"2026-01-01T00:00:00Z","actor":{"type":"system","request_id":null},"data":{}}`
	want := `{"id":"evt_bbbbbbbbbbbbbbbbbbbbbbbbbb","type":"ping","created_at":"2026-01-01T00:00:00.000000Z","actor":{"type":"system","request_id":null},"data":{}}`
	if got := NormalizeJSON([]byte(stored)); string(got) != want {
		t.Errorf("NormalizeJSON: %s\nwant %s", got, want)
	}
	if got := []byte(want); &NormalizeJSON(got)[0] != &got[0] {
		t.Error("NormalizeJSON copied an envelope already in the form")
	}
}

// The JSON form is addendum §11's envelope, byte for byte: the envelope's fields in its
// order, the data's by their snake_case names, null for what is unset.
func TestJSONIsTheEnvelope(t *testing.T) {
	t.Parallel()
	ev := LicenseIssued("t1", "K-1", "app", "pro", "Ada", nil, nil, map[string]float64{"api_calls": 10, "seats": 2.5})
	ev.Id, ev.CreatedAt = "evt_aaaaaaaaaaaaaaaaaaaaaaaaaa", timestamppb.New(time.Date(2026, 11, 25, 4, 30, 0, 500_000_000, time.UTC))
	ev.Actor = Actor(ActorAPIKey, "req-1")
	got, err := JSON(ev)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"evt_aaaaaaaaaaaaaaaaaaaaaaaaaa","type":"license.issued","created_at":"2026-11-25T04:30:00.500000Z",` +
		`"actor":{"type":"api_key","request_id":"req-1"},"data":{"expires_at":null,"issued_to":"Ada","key":"K-1",` +
		`"limits":{"api_calls":10,"seats":2.5},"max_activations":null,"product_id":"app","tier":"pro"}}`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	// No request: request_id is null; an empty data message is {}.
	ping := Ping("t1")
	ping.Id, ping.CreatedAt, ping.Actor = "evt_bbbbbbbbbbbbbbbbbbbbbbbbbb", timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), Actor(ActorSystem, "")
	if got, _ := JSON(ping); string(got) != `{"id":"evt_bbbbbbbbbbbbbbbbbbbbbbbbbb","type":"ping","created_at":"2026-01-01T00:00:00.000000Z","actor":{"type":"system","request_id":null},"data":{}}` {
		t.Fatalf("ping %s", got)
	}
}

// Every type of the catalogue has its constructor, and each builds an event Check accepts.
func TestEveryTypeHasAConstructor(t *testing.T) {
	t.Parallel()
	metric, plan, key, retiring := "api_calls", "pro", "K-1", "kid1"
	exp, n := time.Now(), int32(3)
	all := []*eventsv1.Event{
		LicenseIssued("t", "k", "p", "pro", "x", &exp, &n, nil), LicenseRevoked("t", "k", "p"), LicenseReactivated("t", "k", "p"),
		LicenseDeleted("t", "k", "p"), LicenseTermsUpdated("t", "k", "p", nil, nil, nil), LicenseNotesUpdated("t", "k", "p"),
		SeatActivated("t", "k", "p", "i"), SeatDeactivated("t", "k", "p", "i", ReasonLeaseExpired), SeatTokenReissued("t", "k", "p", "i"),
		UsageLimitReached("t", "k", "p", metric, 5, 5), UsageReset("t", "k", "p", &metric), ReleasePublished("t", 1, "p", "1.0.0", "stable", "linux"),
		ReleaseUnpublished("t", 1, "p", "1.0.0", "stable", "linux"), StorefrontDelivery("t", "1", "cs", "issued", &key),
		BillingPlanChanged("t", &plan, "active"), APIKeyRotated("t"), APIKeyCreated("t", "ak_1", "ci", "read"),
		APIKeyDeleted("t", "ak_1", "ci", "read"), LeaseKeyRotated("t", "kid2", &retiring),
		WebhookEndpointDisabled("t", "we_1", "failing for 72 hours"), Ping("t"), TenantDeleted("t"),
	}
	var got []string
	for _, ev := range all {
		if err := Check(ev); err != nil {
			t.Errorf("%s: %v", ev.GetType(), err)
		}
		if _, err := JSON(ev); err != nil {
			t.Errorf("%s: %v", ev.GetType(), err)
		}
		got = append(got, ev.GetType())
	}
	if !slices.Equal(got, Types) {
		t.Fatalf("constructors make %v\nthe catalogue is %v", got, Types)
	}
	if err := Check(&eventsv1.Event{TenantId: "t", Type: TypeLicenseRevoked, Data: LicenseDeleted("t", "k", "p").Data}); err == nil {
		t.Fatal("a type that does not name its data passed")
	}
	if err := Check(LicenseRevoked("", "k", "p")); err == nil {
		t.Fatal("an event without tenant passed")
	}
}

// Who acts: an explicit actor first, then the principal; an admin-key caller may name the
// actor it acts for, nobody else can.
func TestActorFromThePrincipal(t *testing.T) {
	t.Parallel()
	bg := context.Background()
	fromStorefront := metadata.NewIncomingContext(bg, metadata.Pairs(ActorHeader, ActorStorefront))
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"public call", bg, ActorClient},
		{"console session", auth.WithPrincipal(bg, auth.Principal{TenantID: "t", Session: true}), ActorConsole},
		{"admin key", auth.WithPrincipal(bg, auth.Principal{TenantID: "t", Admin: true}), ActorAdmin},
		{"tenant API key", auth.WithPrincipal(bg, auth.Principal{TenantID: "t"}), ActorAPIKey},
		{"admin key naming the storefront", auth.WithPrincipal(fromStorefront, auth.Principal{TenantID: "t", Admin: true}), ActorStorefront},
		{"API key naming the storefront", auth.WithPrincipal(fromStorefront, auth.Principal{TenantID: "t"}), ActorAPIKey},
		{"admin key naming nonsense", auth.WithPrincipal(metadata.NewIncomingContext(bg, metadata.Pairs(ActorHeader, "root")), auth.Principal{Admin: true}), ActorAdmin},
		{"explicit", WithActor(auth.WithPrincipal(bg, auth.Principal{TenantID: "t"}), ActorPortal), ActorPortal},
	} {
		if got := ActorFrom(tc.ctx); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

type counter struct{ n atomic.Int32 }

func (c *counter) Notify() { c.n.Add(1) }

func newOutbox(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	url := testkit.DatabaseURL(t, testkit.Empty)
	setup, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Exec(ctx, `CREATE SCHEMA svc; SET search_path = svc; `+natsx.OutboxTableSQL+`
		CREATE TABLE svc.things (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	setup.Close()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = "svc"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// The post-commit path: after a commit that emitted, the process's own hook runs, the
// fast path names the license on the core subject other processes follow, and the relay
// is woken; a transaction that rolls back leaves neither its change nor its event.
func TestSpineRunsThePostCommitPathOnce(t *testing.T) {
	ctx := telemetry.WithRequestID(context.Background(), "req-9")
	db := newOutbox(t)
	nc, err := nats.Connect(devnats.SharedURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	heard, err := nc.SubscribeSync(license.ChangedSubject)
	if err != nil {
		t.Fatal(err)
	}
	relay := &counter{}
	var local []string
	spine := NewSpine(WithRelay(relay), WithFastPath(nc), WithLocal(func(ev *eventsv1.Event) { local = append(local, ChangedLicense(ev)) }))

	if err := spine.InTx(ctx, db, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO things VALUES ('a')`); err != nil {
			return err
		}
		return Emit(ctx, tx, LicenseRevoked("t1", "K-1", "app"))
	}); err != nil {
		t.Fatal(err)
	}
	msg, err := heard.NextMsg(10 * time.Second)
	if err != nil || string(msg.Data) != "K-1" {
		t.Fatalf("fast path: %v %v", msg, err)
	}
	if !slices.Equal(local, []string{"K-1"}) || relay.n.Load() != 1 {
		t.Fatalf("local %v, relay woken %d times", local, relay.n.Load())
	}
	var payload []byte
	var subject, tenant string
	if err := db.QueryRow(ctx, `SELECT subject, tenant_id, payload FROM outbox`).Scan(&subject, &tenant, &payload); err != nil {
		t.Fatal(err)
	}
	ev, err := Unmarshal(payload)
	if err != nil || subject != "keyhouse.events.license.revoked" || tenant != "t1" || ev.GetActor().GetRequestId().GetValue() != "req-9" || ev.GetActor().GetType() != ActorClient {
		t.Fatalf("outbox row %s %s %v %v", subject, tenant, ev, err)
	}

	boom := errors.New("forced failure after the write")
	if err := spine.InTx(ctx, db, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO things VALUES ('b')`); err != nil {
			return err
		}
		if err := Emit(ctx, tx, LicenseRevoked("t1", "K-2", "app")); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	var things, rows int
	if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM things), (SELECT count(*) FROM outbox)`).Scan(&things, &rows); err != nil || things != 1 || rows != 1 {
		t.Fatalf("%d changes and %d events after a rollback, want 1 and 1 (%v)", things, rows, err)
	}
	if relay.n.Load() != 1 {
		t.Fatal("the relay was woken for a rolled back transaction")
	}
	// An event that cannot be written (no tenant) fails its transaction.
	if err := spine.InTx(ctx, db, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO things VALUES ('c')`); err != nil {
			return err
		}
		return Emit(ctx, tx, LicenseRevoked("", "K-3", "app"))
	}); err == nil {
		t.Fatal("an invalid event committed")
	}
}

// EmitAll: a batched change's events are one outbox row each, in the order given, each
// with its own id and the actor of the call (or its own); every one reaches the
// post-commit path; a rollback leaves none, and one invalid event writes none.
func TestEmitAllWritesEveryEventOfABatchOrNone(t *testing.T) {
	ctx := telemetry.WithRequestID(context.Background(), "req-7")
	db := newOutbox(t)
	relay := &counter{}
	var local []string
	spine := NewSpine(WithRelay(relay), WithLocal(func(ev *eventsv1.Event) { local = append(local, LicenseKey(ev)) }))

	ownActor := SeatActivated("t1", "K-2", "app", "i-2")
	ownActor.Actor = Actor(ActorClient, "req-item")
	if err := spine.InTx(ctx, db, func(ctx context.Context, tx pgx.Tx) error {
		return EmitAll(ctx, tx, SeatActivated("t1", "K-1", "app", "i-1"), ownActor, SeatDeactivated("t2", "K-3", "app", "i-3", ReasonClient))
	}); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query(ctx, `SELECT payload FROM outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	payloads, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	ids := map[string]bool{}
	for _, p := range payloads {
		ev, err := Unmarshal(p)
		if err != nil {
			t.Fatal(err)
		}
		ids[ev.GetId()] = true
		got = append(got, ev.GetType()+" "+LicenseKey(ev)+" "+ev.GetActor().GetRequestId().GetValue())
	}
	want := []string{"seat.activated K-1 req-7", "seat.activated K-2 req-item", "seat.deactivated K-3 req-7"}
	if !slices.Equal(got, want) || len(ids) != 3 {
		t.Fatalf("outbox holds %v (%d distinct ids), want %v", got, len(ids), want)
	}
	if !slices.Equal(local, []string{"K-1", "K-2", "K-3"}) || relay.n.Load() != 1 {
		t.Fatalf("post-commit path saw %v, relay woken %d times; want every event once, one wake-up", local, relay.n.Load())
	}

	boom := errors.New("forced failure after the write")
	if err := spine.InTx(ctx, db, func(ctx context.Context, tx pgx.Tx) error {
		if err := EmitAll(ctx, tx, LicenseRevoked("t1", "K-4", "app"), LicenseRevoked("t1", "K-5", "app")); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if err := spine.InTx(ctx, db, func(ctx context.Context, tx pgx.Tx) error {
		return EmitAll(ctx, tx, LicenseRevoked("t1", "K-6", "app"), LicenseRevoked("", "K-7", "app"))
	}); err == nil {
		t.Fatal("a batch with an event without tenant committed")
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("outbox holds %d rows after a rollback and a refused batch, want 3 (%v)", n, err)
	}
	if relay.n.Load() != 1 {
		t.Fatalf("the relay was woken for a transaction that did not commit")
	}
}

// Readers order events by created_at: the events of one change get times in the order
// given, one microsecond apart when the clock reads the same one for several, and a time
// the caller set is kept and followed.
func TestEventsOfOneChangeGetTimesInTheirOrder(t *testing.T) {
	frozen := time.Date(2026, 3, 4, 5, 6, 7, 8900, time.UTC)
	set := SeatActivated("t1", "K-3", "app", "c")
	set.CreatedAt = timestamppb.New(frozen.Add(time.Second))
	evs := []*eventsv1.Event{
		SeatDeactivated("t1", "K-1", "app", "a", ReasonLeaseExpired),
		SeatActivated("t1", "K-1", "app", "a"),
		SeatActivated("t1", "K-2", "app", "b"),
		set,
		SeatDeactivated("t1", "K-3", "app", "c", ReasonClient),
	}
	stampTimes(evs, func() time.Time { return frozen })
	base := frozen.Truncate(time.Microsecond)
	want := []time.Time{base, base.Add(time.Microsecond), base.Add(2 * time.Microsecond), frozen.Add(time.Second),
		frozen.Add(time.Second + time.Microsecond)}
	for i, ev := range evs {
		if got := ev.GetCreatedAt().AsTime(); !got.Equal(want[i]) {
			t.Errorf("event %d at %s, want %s", i, got.Format(time.RFC3339Nano), want[i].Format(time.RFC3339Nano))
		}
	}
}

// Pipelined: a transaction sent as one pipeline (then nil) or two commits its change and
// events together and runs the post-commit path once; a statement that fails leaves
// neither and wakes no relay, and the pool's only connection serves the next
// transaction.
func TestPipelinedCommitsTheChangeWithItsEventsOrNeither(t *testing.T) {
	ctx := context.Background()
	db := newOutbox(t)
	cfg := db.Config()
	cfg.MaxConns = 1
	one, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(one.Close)
	relay := &counter{}
	var local []string
	spine := NewSpine(WithRelay(relay), WithLocal(func(ev *eventsv1.Event) { local = append(local, LicenseKey(ev)) }))
	insert := func(thing, key string) func(ctx context.Context, b *pgx.Batch) error {
		return func(ctx context.Context, b *pgx.Batch) error {
			b.Queue(`INSERT INTO things VALUES ($1)`, thing)
			return QueueAll(ctx, b, LicenseRevoked("t1", key, "app"))
		}
	}
	count := func() (things, rows int) {
		t.Helper()
		if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM things), (SELECT count(*) FROM outbox)`).Scan(&things, &rows); err != nil {
			t.Fatal(err)
		}
		return things, rows
	}

	if err := spine.Pipelined(ctx, one, insert("a", "K-1"), nil); err != nil {
		t.Fatal(err)
	}
	if err := spine.Pipelined(ctx, one, insert("b", "K-2"), insert("c", "K-3")); err != nil {
		t.Fatal(err)
	}
	if things, rows := count(); things != 3 || rows != 3 || relay.n.Load() != 2 || !slices.Equal(local, []string{"K-1", "K-2", "K-3"}) {
		t.Fatalf("%d changes, %d events, relay woken %d times, post-commit path saw %v; want 3, 3, 2, every key once", things, rows, relay.n.Load(), local)
	}

	// "a" again violates the primary key: in the one pipeline, in the second of two.
	if err := spine.Pipelined(ctx, one, insert("a", "K-4"), nil); err == nil {
		t.Fatal("a failed statement committed")
	}
	if err := spine.Pipelined(ctx, one, insert("d", "K-5"), insert("a", "K-6")); err == nil {
		t.Fatal("a failed statement in the second pipeline committed")
	}
	if things, rows := count(); things != 3 || rows != 3 || relay.n.Load() != 2 {
		t.Fatalf("%d changes, %d events, relay woken %d times after two failures; want 3, 3, 2", things, rows, relay.n.Load())
	}
	if err := spine.Pipelined(ctx, one, insert("e", "K-7"), nil); err != nil {
		t.Fatalf("the pool's connection after the failures: %v", err)
	}
	if things, rows := count(); things != 4 || rows != 4 {
		t.Fatalf("%d changes, %d events; want 4 and 4", things, rows)
	}
}
