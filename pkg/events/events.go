// Package events is the event spine (addendum §11): every committed change of every
// service is one typed event (keyhouse.events.v1.Event), written by Emit into the
// service's outbox in the transaction of the change, published by the service's outbox
// relay (pkg/natsx) on the JetStream stream Stream, and consumed by whatever reacts to
// changes: the event log and webhooks (services/events), the seat purge (activations),
// cache invalidation.
//
// A change and its event commit together or not at all: Emit is a row of the same
// transaction. What must happen the moment a change committed (drop this process's
// caches, the core-NATS fast path to other processes' caches, waking the relay) is one
// post-commit path, Spine.InTx, so no write path adds its own hook.
package events

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/keyhouse/keyhouse/pkg/telemetry"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The event types of addendum §11.
const (
	TypeLicenseIssued           = "license.issued"
	TypeLicenseRevoked          = "license.revoked"
	TypeLicenseReactivated      = "license.reactivated"
	TypeLicenseDeleted          = "license.deleted"
	TypeLicenseTermsUpdated     = "license.terms_updated"
	TypeLicenseNotesUpdated     = "license.notes_updated"
	TypeSeatActivated           = "seat.activated"
	TypeSeatDeactivated         = "seat.deactivated"
	TypeSeatTokenReissued       = "seat.token_reissued"
	TypeUsageLimitReached       = "usage.limit_reached"
	TypeUsageReset              = "usage.reset"
	TypeReleasePublished        = "release.published"
	TypeReleaseUnpublished      = "release.unpublished"
	TypeStorefrontDelivery      = "storefront.delivery"
	TypeBillingPlanChanged      = "billing.plan_changed"
	TypeAPIKeyRotated           = "api_key.rotated"
	TypeAPIKeyCreated           = "api_key.created"
	TypeAPIKeyDeleted           = "api_key.deleted"
	TypeLeaseKeyRotated         = "lease_key.rotated"
	TypeWebhookEndpointDisabled = "webhook_endpoint.disabled"
	TypePing                    = "ping"
)

// TypeTenantDeleted is internal: the fan-out of a hosted tenant's deletion, consumed by
// every service (pkg/tenantpurge); no log keeps it and no webhook delivers it.
const TypeTenantDeleted = "tenant.deleted"

// Types lists every event type, in the order of addendum §11.
var Types = []string{
	TypeLicenseIssued, TypeLicenseRevoked, TypeLicenseReactivated, TypeLicenseDeleted,
	TypeLicenseTermsUpdated, TypeLicenseNotesUpdated, TypeSeatActivated, TypeSeatDeactivated,
	TypeSeatTokenReissued, TypeUsageLimitReached, TypeUsageReset, TypeReleasePublished,
	TypeReleaseUnpublished, TypeStorefrontDelivery, TypeBillingPlanChanged, TypeAPIKeyRotated,
	TypeAPIKeyCreated, TypeAPIKeyDeleted, TypeLeaseKeyRotated, TypeWebhookEndpointDisabled, TypePing,
	TypeTenantDeleted,
}

// LoggedTypes are the types the event log keeps and a webhook endpoint subscribes to:
// every type but ping (sent to the one endpoint it tests, kept in no log) and
// tenant.deleted (internal).
var LoggedTypes = slices.DeleteFunc(slices.Clone(Types), func(t string) bool { return t == TypePing || t == TypeTenantDeleted })

// LoggedTypeOrPrefix is the set IsLoggedTypeOrPrefix accepts, in the words of the 400
// that refuses a value outside it (input.NotOneOf): too many types to list them all.
const LoggedTypeOrPrefix = `an event type or a prefix of one ending in "."`

// IsLoggedTypeOrPrefix reports whether t is one of LoggedTypes or a prefix of some ending
// in ".": what the log's type filter and an endpoint's events list accept, one rule for
// both, so neither takes a value that can never match.
func IsLoggedTypeOrPrefix(t string) bool {
	if strings.HasSuffix(t, ".") {
		return slices.ContainsFunc(LoggedTypes, func(k string) bool { return strings.HasPrefix(k, t) })
	}
	return slices.Contains(LoggedTypes, t)
}

// Reasons of seat.deactivated.
const (
	ReasonClient         = "client"
	ReasonAdmin          = "admin"
	ReasonLeaseExpired   = "lease_expired"
	ReasonLicenseDeleted = "license_deleted"
)

// Actor types: who made a change.
const (
	ActorAdmin      = "admin"
	ActorAPIKey     = "api_key"
	ActorConsole    = "console"
	ActorPortal     = "portal"
	ActorStorefront = "storefront"
	ActorClient     = "client"
	ActorSystem     = "system"
)

// ActorHeader is the gRPC metadata in which a service calling another with the admin key
// says for whom it acts (the storefront's fulfillment issuing a license: "storefront").
// It is believed only on admin-key calls; the gateway never forwards it from clients.
const ActorHeader = "x-keyhouse-actor"

type actorKey struct{}

// WithActor makes the changes made under ctx carry actor type t, whatever the
// credential says: the portal's routes are public, yet their changes are the portal's; a
// consumer's are the system's.
func WithActor(ctx context.Context, t string) context.Context {
	return context.WithValue(ctx, actorKey{}, t)
}

// OutgoingActor is WithActor for the service a call goes to (ActorHeader).
func OutgoingActor(ctx context.Context, t string) context.Context {
	return metadata.AppendToOutgoingContext(WithActor(ctx, t), ActorHeader, t)
}

// ActorFrom is who acts in ctx: an explicit WithActor first, then the authenticated
// principal (a console session, the admin key, a tenant API key; an admin-key call from
// another service may name its actor in ActorHeader), and a public call is the client's.
func ActorFrom(ctx context.Context) string {
	if t, ok := ctx.Value(actorKey{}).(string); ok && t != "" {
		return t
	}
	p, ok := auth.FromContext(ctx)
	switch {
	case !ok:
		return ActorClient
	case p.Session:
		return ActorConsole
	case p.Admin:
		if v := metadata.ValueFromIncomingContext(ctx, ActorHeader); len(v) > 0 && knownActor(v[0]) {
			return v[0]
		}
		return ActorAdmin
	case p.TenantID != "":
		return ActorAPIKey
	}
	return ActorClient
}

// Actor is an explicit actor, for a change made on behalf of a call other than the one
// in the context (an item of a batch); requestID "" is null.
func Actor(t, requestID string) *eventsv1.Actor {
	a := &eventsv1.Actor{Type: t}
	if requestID != "" {
		a.RequestId = wrapperspb.String(requestID)
	}
	return a
}

func knownActor(t string) bool {
	switch t {
	case ActorAdmin, ActorAPIKey, ActorConsole, ActorPortal, ActorStorefront, ActorClient, ActorSystem:
		return true
	}
	return false
}

// idEncoding is lowercase base32 without padding: 16 random bytes are 26 characters.
var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewID returns a fresh event id, "evt_" and 26 characters: 128 bits, the time of its
// making in milliseconds (48 bits, the leading 9 characters) then 80 random bits.
//
// The time leads so that ids made together sort together: every index that holds event
// ids (the log's primary key, the outbox's msg_id, the deliveries' event_id) takes each
// new one near the last instead of at a random place, in a page it has just written
// rather than one anywhere in an index that grows with the log. After each checkpoint
// Postgres writes a page whole to the WAL the first time it changes it: into a log of a
// million events, 40,000 more took 2.5 kB of WAL each with random ids and 1.1-1.2 kB
// with these (docs/performance-history.md, "Event ids lead with their millisecond").
// Ids are no secret (created_at says as much), and 80 random bits a millisecond keep
// them unique.
func NewID() string { return newIDAt(time.Now()) }

func newIDAt(t time.Time) string {
	var b [16]byte
	ms := uint64(t.UnixMilli())
	for i := range 6 {
		b[i] = byte(ms >> (40 - 8*i))
	}
	_, _ = rand.Read(b[6:])
	return "evt_" + idEncoding.EncodeToString(b[:])
}

// IsID reports whether s has the shape of an event id.
func IsID(s string) bool {
	rest, ok := strings.CutPrefix(s, "evt_")
	if !ok || len(rest) != 26 {
		return false
	}
	_, err := idEncoding.DecodeString(rest)
	return err == nil
}

// Subject is the NATS subject of an event type.
func Subject(eventType string) string { return SubjectPrefix + eventType }

// Emit writes ev into the outbox of the service whose transaction tx is, so the event
// commits with the change or not at all. It fills what the caller does not set: the id,
// the time, and the actor with the request id from ctx. Call it in a Spine.InTx (or
// Spine.Track) transaction, whose post-commit path also drops caches and wakes the relay;
// elsewhere the event is still durable and goes out at the relay's next poll.
func Emit(ctx context.Context, tx pgx.Tx, ev *eventsv1.Event) error {
	return EmitAll(ctx, tx, ev)
}

// EmitAll is Emit for the events of a batched change (a batch of seat changes, of usage
// increments, an import): still one outbox row per event, in the order given, written by
// one statement instead of one per event. Every event is checked before any is written.
func EmitAll(ctx context.Context, tx pgx.Tx, evs ...*eventsv1.Event) error {
	msgs, err := messages(ctx, evs)
	if err != nil || len(msgs) == 0 {
		return err
	}
	if err := natsx.EnqueueAll(ctx, tx, msgs...); err != nil {
		return err
	}
	if p, ok := ctx.Value(pendingKey{}).(*pending); ok {
		p.add(evs...)
	}
	return nil
}

// QueueAll is EmitAll for a transaction sent as a pipeline (a pgx.Batch from BEGIN to
// COMMIT, one round trip instead of one per statement): it queues the outbox rows'
// statement on b, which the caller sends in the change's transaction before its COMMIT.
// With the ctx of a Spine.Track, the events count as emitted when they are queued: call
// done with the outcome of the batch that carries them.
func QueueAll(ctx context.Context, b *pgx.Batch, evs ...*eventsv1.Event) error {
	msgs, err := messages(ctx, evs)
	if err != nil || len(msgs) == 0 {
		return err
	}
	if err := natsx.QueueAll(ctx, b, msgs...); err != nil {
		return err
	}
	if p, ok := ctx.Value(pendingKey{}).(*pending); ok {
		p.add(evs...)
	}
	return nil
}

// messages checks every event, fills what the caller did not set (EmitAll) and encodes
// each as its outbox message; none when evs is empty or the build writes no outbox.
func messages(ctx context.Context, evs []*eventsv1.Event) ([]natsx.Message, error) {
	for _, ev := range evs {
		if err := Check(ev); err != nil {
			return nil, err
		}
	}
	if benchWithoutOutbox || len(evs) == 0 {
		return nil, nil
	}
	stampTimes(evs, time.Now)
	msgs := make([]natsx.Message, len(evs))
	for i, ev := range evs {
		if ev.Id == "" {
			ev.Id = NewID()
		}
		if ev.Actor == nil {
			ev.Actor = Actor(ActorFrom(ctx), telemetry.RequestID(ctx))
		}
		payload, err := proto.Marshal(ev)
		if err != nil {
			return nil, fmt.Errorf("events: encode %s: %w", ev.Type, err)
		}
		msgs[i] = natsx.Message{TenantID: ev.TenantId, Subject: Subject(ev.Type), MsgID: ev.Id, Payload: payload}
	}
	return msgs, nil
}

// stampTimes gives each event that has no time the time now reads, in microseconds (what
// Postgres keeps, so the time a client reads in the JSON is the one the log's
// since/until filters compare), each later than the one before it. Readers order by
// created_at, and the log places the events it stores together in created_at order, so
// the events of one change keep the order given (a floating seat's lapse before the
// activation that took its place) even when the clock reads one microsecond twice; a
// tie would fall to the ids' random bits.
func stampTimes(evs []*eventsv1.Event, now func() time.Time) {
	var last time.Time
	for _, ev := range evs {
		if ev.CreatedAt == nil {
			at := now().Truncate(time.Microsecond)
			if !at.After(last) {
				at = last.Add(time.Microsecond)
			}
			ev.CreatedAt = timestamppb.New(at)
		}
		last = ev.CreatedAt.AsTime()
	}
}

// Check refuses an event that could not be stored or delivered as it is: no tenant, or a
// type that does not name its data.
func Check(ev *eventsv1.Event) error {
	if ev == nil {
		return errors.New("events: nil event")
	}
	if ev.TenantId == "" {
		return fmt.Errorf("events: %s without tenant", ev.Type)
	}
	if want := typeOf(ev); want == "" || want != ev.Type {
		return fmt.Errorf("events: type %q does not match its data (%q)", ev.Type, want)
	}
	return nil
}

// Unmarshal decodes an event as the relay publishes it.
func Unmarshal(data []byte) (*eventsv1.Event, error) {
	ev := &eventsv1.Event{}
	if err := proto.Unmarshal(data, ev); err != nil {
		return nil, fmt.Errorf("events: decode: %w", err)
	}
	if err := Check(ev); err != nil {
		return nil, err
	}
	if !IsID(ev.Id) {
		return nil, fmt.Errorf("events: bad event id %q", ev.Id)
	}
	return ev, nil
}

// LicenseKey is the license an event is about, or "" (the event log filters on it).
func LicenseKey(ev *eventsv1.Event) string {
	switch d := ev.Data.(type) {
	case *eventsv1.Event_LicenseIssued:
		return d.LicenseIssued.GetKey()
	case *eventsv1.Event_LicenseRevoked:
		return d.LicenseRevoked.GetKey()
	case *eventsv1.Event_LicenseReactivated:
		return d.LicenseReactivated.GetKey()
	case *eventsv1.Event_LicenseDeleted:
		return d.LicenseDeleted.GetKey()
	case *eventsv1.Event_LicenseTermsUpdated:
		return d.LicenseTermsUpdated.GetKey()
	case *eventsv1.Event_LicenseNotesUpdated:
		return d.LicenseNotesUpdated.GetKey()
	case *eventsv1.Event_SeatActivated:
		return d.SeatActivated.GetKey()
	case *eventsv1.Event_SeatDeactivated:
		return d.SeatDeactivated.GetKey()
	case *eventsv1.Event_SeatTokenReissued:
		return d.SeatTokenReissued.GetKey()
	case *eventsv1.Event_UsageLimitReached:
		return d.UsageLimitReached.GetKey()
	case *eventsv1.Event_UsageReset:
		return d.UsageReset.GetKey()
	case *eventsv1.Event_StorefrontDelivery:
		return d.StorefrontDelivery.GetLicenseKey().GetValue()
	}
	return ""
}

// typeOf is the type the event's data stands for.
func typeOf(ev *eventsv1.Event) string {
	switch ev.Data.(type) {
	case *eventsv1.Event_LicenseIssued:
		return TypeLicenseIssued
	case *eventsv1.Event_LicenseRevoked:
		return TypeLicenseRevoked
	case *eventsv1.Event_LicenseReactivated:
		return TypeLicenseReactivated
	case *eventsv1.Event_LicenseDeleted:
		return TypeLicenseDeleted
	case *eventsv1.Event_LicenseTermsUpdated:
		return TypeLicenseTermsUpdated
	case *eventsv1.Event_LicenseNotesUpdated:
		return TypeLicenseNotesUpdated
	case *eventsv1.Event_SeatActivated:
		return TypeSeatActivated
	case *eventsv1.Event_SeatDeactivated:
		return TypeSeatDeactivated
	case *eventsv1.Event_SeatTokenReissued:
		return TypeSeatTokenReissued
	case *eventsv1.Event_UsageLimitReached:
		return TypeUsageLimitReached
	case *eventsv1.Event_UsageReset:
		return TypeUsageReset
	case *eventsv1.Event_ReleasePublished:
		return TypeReleasePublished
	case *eventsv1.Event_ReleaseUnpublished:
		return TypeReleaseUnpublished
	case *eventsv1.Event_StorefrontDelivery:
		return TypeStorefrontDelivery
	case *eventsv1.Event_BillingPlanChanged:
		return TypeBillingPlanChanged
	case *eventsv1.Event_ApiKeyRotated:
		return TypeAPIKeyRotated
	case *eventsv1.Event_ApiKeyCreated:
		return TypeAPIKeyCreated
	case *eventsv1.Event_ApiKeyDeleted:
		return TypeAPIKeyDeleted
	case *eventsv1.Event_TenantDeleted:
		return TypeTenantDeleted
	case *eventsv1.Event_LeaseKeyRotated:
		return TypeLeaseKeyRotated
	case *eventsv1.Event_WebhookEndpointDisabled:
		return TypeWebhookEndpointDisabled
	case *eventsv1.Event_Ping:
		return TypePing
	}
	return ""
}
