package webhooks

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/periodic"
	"github.com/keyhouse/keyhouse/pkg/seal"
	"github.com/keyhouse/keyhouse/pkg/signing"
	"github.com/keyhouse/keyhouse/pkg/telemetry"
	"github.com/keyhouse/keyhouse/pkg/webhook"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Keys gives the installation keyring that seals endpoint secrets (the licensing client
// in the service, a fixed keyring in tests).
type Keys interface {
	Keyring(ctx context.Context) (*signing.Keyring, error)
}

// Worker defaults.
const (
	DefaultConcurrency = 32
	DefaultPerEndpoint = 4
	// DefaultPerTenant leaves a quarter of the slots to each tenant: however many slow
	// endpoints one tenant (or two, or three) keeps busy, the others find free slots.
	DefaultPerTenant = 8
	DefaultPoll      = time.Second
	// DefaultLease outlasts an attempt (10 s) and its recording by far: a delivery
	// claimed by a process that died is tried again this long after the claim.
	DefaultLease = time.Minute
)

// Worker delivers due deliveries. Every replica of the events service runs one; they
// share the work through Claim (SKIP LOCKED), so a delivery is attempted by one replica
// at a time. Concurrency is bounded in all (Concurrency), per endpoint (PerEndpoint) and
// per tenant (PerTenant), each attempt has its own deadline, and the claim shares the
// free slots fairly between tenants, so a slow or dead receiver holds at most PerEndpoint
// workers, a tenant's receivers at most PerTenant, and neither holds up other tenants.
type Worker struct {
	Store    *Store
	Sender   *webhook.Sender
	Keys     Keys
	Log      *slog.Logger
	Schedule webhook.Schedule
	// DisableAfter is how long every delivery of an endpoint must have failed before it is
	// disabled (72 h).
	DisableAfter time.Duration
	// OnDisable records the webhook_endpoint.disabled event in the disabling transaction;
	// Disabled runs after it committed (the mail to the tenant).
	OnDisable OnDisable
	Disabled  func(ctx context.Context, ep *Endpoint)
	// Now is the clock (tests inject one).
	Now         func() time.Time
	Concurrency int
	PerEndpoint int
	// PerTenant bounds one tenant's attempts at once (DefaultPerTenant); self-hosted, with
	// its one tenant, sets it to Concurrency.
	PerTenant int
	Poll      time.Duration
	Lease     time.Duration
	// Retention is how long deliveries are kept (EVENT_RETENTION); 0 keeps them.
	Retention time.Duration

	lastSweep time.Time
	claiming  periodic.Failing // claims failing (Postgres gone): logged once per change

	once     sync.Once
	wake     chan struct{}
	mu       sync.Mutex
	inFlight InFlight // the attempts running in this process
	slots    chan struct{}
	wg       sync.WaitGroup
	// starved is set when a claim may have left due deliveries for lack of free slots; a
	// slot that frees then wakes the worker. Otherwise a lane that ends has nothing to
	// hand on: its endpoint had nothing more due, and every other endpoint's due
	// deliveries were claimed. Waking on every lane's end made a claim from the front of
	// the due index per delivery at a steady trickle, 87 buffers each.
	starved atomic.Bool
}

func (w *Worker) init() {
	w.once.Do(func() {
		w.wake = make(chan struct{}, 1)
		w.inFlight = InFlight{Endpoints: make(map[string]int), Tenants: make(map[string]int)}
		if w.Now == nil {
			w.Now = time.Now
		}
		if w.Concurrency <= 0 {
			w.Concurrency = DefaultConcurrency
		}
		if w.PerEndpoint <= 0 {
			w.PerEndpoint = DefaultPerEndpoint
		}
		if w.PerTenant <= 0 {
			w.PerTenant = DefaultPerTenant
		}
		if w.Poll <= 0 {
			w.Poll = DefaultPoll
		}
		if w.Lease <= 0 {
			w.Lease = DefaultLease
		}
		if w.Schedule.Window == 0 {
			w.Schedule = webhook.DefaultSchedule
		}
		if w.DisableAfter <= 0 {
			w.DisableAfter = w.Schedule.Window
		}
		w.slots = make(chan struct{}, w.Concurrency)
	})
}

// Wake makes the worker look for due deliveries now (a new event was stored, a ping or a
// redelivery was queued) instead of at its next poll.
func (w *Worker) Wake() {
	w.init()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Run delivers until ctx ends, then waits for the attempts in flight (each bounded by its
// deadline). An attempt cut short by the end is not recorded: its lease brings it back.
func (w *Worker) Run(ctx context.Context) {
	w.init()
	t := time.NewTicker(w.Poll)
	defer t.Stop()
	defer w.wg.Wait()
	for {
		w.claimAndStart(ctx)
		w.sweep(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.wake:
		}
	}
}

// sweepEvery is how often the worker deletes deliveries older than Retention.
const sweepEvery = time.Hour

func (w *Worker) sweep(ctx context.Context) {
	now := w.Now()
	if w.Retention <= 0 || now.Sub(w.lastSweep) < sweepEvery {
		return
	}
	w.lastSweep = now
	window := w.Schedule.Window
	if window == 0 {
		window = webhook.DefaultSchedule.Window
	}
	n, err := w.Store.DeleteDeliveriesBefore(ctx, now.Add(-w.Retention), now.Add(-window))
	switch {
	case err != nil && ctx.Err() == nil:
		w.Log.Warn("webhooks: retention sweep failed, retrying at the next", "error", err.Error())
	case n > 0:
		w.Log.Info("webhooks: retention sweep", "deleted", n)
	}
}

// RunOnce claims what is due and waits until those attempts are recorded (tests).
func (w *Worker) RunOnce(ctx context.Context) int {
	w.init()
	n := w.claimAndStart(ctx)
	w.wg.Wait()
	return n
}

func (w *Worker) claimAndStart(ctx context.Context) int {
	free := w.Concurrency - len(w.slots)
	if free <= 0 {
		w.starved.Store(true)
		return 0
	}
	if ctx.Err() != nil {
		return 0
	}
	w.mu.Lock()
	busy := InFlight{Endpoints: maps.Clone(w.inFlight.Endpoints), Tenants: maps.Clone(w.inFlight.Tenants)}
	w.mu.Unlock()
	due, err := w.Store.Claim(ctx, w.Now(), w.Lease, Bounds{Total: free, PerEndpoint: w.PerEndpoint, PerTenant: w.PerTenant}, busy)
	if err != nil {
		if ctx.Err() == nil {
			w.claiming.Fail(w.Log, "webhooks: claiming due deliveries failed", err)
		}
		return 0
	}
	w.claiming.Worked(w.Log, "webhooks: claiming due deliveries works again")
	if len(due) == free {
		w.starved.Store(true)
	}
	for _, d := range due {
		w.slots <- struct{}{}
		w.mu.Lock()
		w.inFlight.Endpoints[d.EndpointID]++
		w.inFlight.Tenants[d.TenantID]++
		w.mu.Unlock()
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer func() {
				w.mu.Lock()
				// A tenant at its bound may have due deliveries the bound held back: its
				// freed slot is claimed now, not at the next poll.
				tenantWasFull := w.inFlight.Tenants[d.TenantID] >= w.PerTenant
				release(w.inFlight.Endpoints, d.EndpointID)
				release(w.inFlight.Tenants, d.TenantID)
				w.mu.Unlock()
				<-w.slots
				if w.starved.Swap(false) || tenantWasFull {
					w.Wake()
				}
			}()
			w.lane(ctx, d)
		}()
	}
	return len(due)
}

// release counts one attempt of id less in counts.
func release(counts map[string]int, id string) {
	if counts[id]--; counts[id] <= 0 {
		delete(counts, id)
	}
}

// lane delivers d, then, while its endpoint keeps answering 2xx, claims and delivers the
// endpoint's next due delivery in the same slot. A busy endpoint's deliveries thus flow
// through up to PerEndpoint lanes at once, each claiming for itself, instead of queueing
// one by one for the claiming loop (which bounded one endpoint near 50 deliveries/s on a
// loaded machine). The first failed attempt ends the lane and frees the slot, so a slow or
// dead endpoint still holds at most PerEndpoint slots and its retries follow the schedule.
//
// A lane claims from its cursor (ClaimNext's after: the place of the delivery it just
// made in the endpoint's due order), so a claim does not read again what the endpoint's
// earlier deliveries left at the front of its due index; when the cursor finds nothing,
// and every laneRescanEvery claims, it claims from the front, so a delivery due before
// the cursor (a retry, a late fan-out) waits at most that many deliveries of the lane.
func (w *Worker) lane(ctx context.Context, d Due) {
	for n := 1; ctx.Err() == nil; n++ {
		after := d.At
		if n%laneRescanEvery == 0 {
			after = Cursor{}
		}
		next, ok := w.attempt(ctx, d, after)
		if !ok {
			return
		}
		d = next
	}
}

// laneRescanEvery is how often a lane claims from the front of its endpoint's due
// deliveries instead of from its cursor.
const laneRescanEvery = 64

// attempt delivers d once and records the result. After a success it also claims the
// endpoint's next due delivery past after, in the same round trip, and returns it (ok
// false: none due, a failure, or the worker stopping).
func (w *Worker) attempt(ctx context.Context, d Due, after Cursor) (next Due, ok bool) {
	secrets, err := w.openSecrets(ctx, d)
	if err != nil {
		// Without the keyring (licensing unreachable) nothing can be signed: the lease
		// brings the delivery back.
		w.Log.Warn("webhooks: endpoint secret unavailable", "endpoint_id", d.EndpointID, "error", err.Error())
		return Due{}, false
	}
	// An envelope stored before created_at had one form is sent in that form.
	sctx, span := startAttemptSpan(ctx, d)
	res := w.Sender.Send(sctx, webhook.Delivery{URL: d.URL, EventID: d.EventID, Body: events.NormalizeJSON(d.Body), Secrets: secrets}, w.Now())
	endAttemptSpan(span, res)
	if ctx.Err() != nil {
		return Due{}, false
	}
	attemptsTotal.WithLabelValues(outcome(res)).Inc()
	// The attempt's time is the clock's at its start; the injected clock may not move.
	// The result is recorded even if the worker stops meanwhile (WithoutCancel).
	if res.Succeeded() {
		next, ok, err := w.Store.SucceedThenClaimNext(context.WithoutCancel(ctx), d, res, w.Now(), w.Lease, after)
		if err != nil {
			w.Log.Warn("webhooks: recording a success or claiming the endpoint's next delivery failed", "delivery_id", d.ID, "endpoint_id", d.EndpointID, "error", err.Error())
			return Due{}, false
		}
		return next, ok
	}
	disabled, err := w.Store.Record(context.WithoutCancel(ctx), d, res, w.Schedule, w.DisableAfter, w.OnDisable)
	if err != nil {
		w.Log.Warn("webhooks: recording an attempt failed", "delivery_id", d.ID, "error", err.Error())
		return Due{}, false
	}
	if disabled != nil {
		endpointsDisabledTotal.Inc()
		w.Log.Info("webhooks: endpoint disabled", "tenant_id", disabled.TenantID, "endpoint_id", disabled.ID, "reason", DisabledReason)
		if w.Disabled != nil {
			w.Disabled(context.WithoutCancel(ctx), disabled)
		}
	}
	return Due{}, false
}

// openSecrets returns the secrets to sign with: the current one, and each old one whose
// roll's overlap runs. An old secret that does not open (sealed under a keyring since
// replaced) is left out rather than holding the delivery back.
func (w *Worker) openSecrets(ctx context.Context, d Due) ([][]byte, error) {
	k, err := w.Keys.Keyring(ctx)
	if err != nil {
		return nil, err
	}
	cur, err := seal.Open(k, seal.PurposeEndpointSecret, d.Secret)
	if err != nil {
		return nil, err
	}
	out := [][]byte{cur}
	for _, sealed := range d.OldSecrets {
		if old, err := seal.Open(k, seal.PurposeEndpointSecret, sealed); err == nil {
			out = append(out, old)
		}
	}
	return out, nil
}

// startAttemptSpan starts an attempt's span, "webhook attempt": a trace of its own linked
// to what caused the delivery (Due.Traceparent: the request that wrote the event, or the
// one that asked for a ping or a redelivery), so an operator follows a license change to
// the attempts that delivered it. It names the delivery by ids, its event's type and the
// attempt's number, never the endpoint's URL (its query may hold a token), a secret or
// the body (personal data).
func startAttemptSpan(ctx context.Context, d Due) (context.Context, trace.Span) {
	return telemetry.StartRoot(ctx, "webhook attempt", trace.SpanKindClient, slices.Values([]string{d.Traceparent}),
		attribute.String("keyhouse.tenant_id", d.TenantID),
		attribute.String("keyhouse.webhook.endpoint_id", d.EndpointID),
		attribute.String("keyhouse.webhook.delivery_id", d.ID),
		attribute.String("keyhouse.event_id", d.EventID),
		attribute.String("keyhouse.event_type", d.EventType),
		attribute.Int("keyhouse.webhook.attempt", d.Tries+1))
}

// endAttemptSpan ends an attempt's span with its outcome (keyhouse_webhook_attempts_total's
// label) and the receiver's status code, when it answered; a failure's status is the
// Result's error, whose words never carry the URL.
func endAttemptSpan(span trace.Span, res webhook.Result) {
	span.SetAttributes(attribute.String("keyhouse.webhook.outcome", outcome(res)))
	if res.StatusCode != 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", res.StatusCode))
	}
	if res.Error != "" {
		span.SetStatus(codes.Error, res.Error)
	}
	span.End()
}
