package events

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
)

// Redact nulls the personal fields and prints every other byte as JSON printed it; a
// second redaction, or an event without personal data, changes nothing.
func TestRedact(t *testing.T) {
	at := timestamppb.New(time.Date(2026, 11, 25, 4, 31, 7, 512000000, time.UTC))
	issued := &eventsv1.Event{Id: "evt_1", Type: TypeLicenseIssued, CreatedAt: at, Actor: Actor(ActorAdmin, "req-1"),
		Data: &eventsv1.Event_LicenseIssued{LicenseIssued: &eventsv1.LicenseIssued{
			Key: "K-1", ProductId: "app", Tier: "pro", IssuedTo: "Zelda <zelda@example.eu>",
			MaxActivations: wrapperspb.Int32(3), Limits: map[string]float64{"api_calls_per_day": 100}}}}
	seat := &eventsv1.Event{Id: "evt_2", Type: TypeSeatDeactivated, CreatedAt: at, Actor: Actor(ActorClient, ""),
		Data: &eventsv1.Event_SeatDeactivated{SeatDeactivated: &eventsv1.SeatDeactivated{Key: "K-1", ProductId: "app", InstanceId: "zeldas-laptop", Reason: "client"}}}
	revoked := &eventsv1.Event{Id: "evt_3", Type: TypeLicenseRevoked, CreatedAt: at, Actor: Actor(ActorAdmin, ""),
		Data: &eventsv1.Event_LicenseRevoked{LicenseRevoked: &eventsv1.LicenseRef{Key: "K-1", ProductId: "app"}}}
	for _, c := range []struct {
		ev   *eventsv1.Event
		want string
	}{
		{issued, `{"id":"evt_1","type":"license.issued","created_at":"2026-11-25T04:31:07.512000Z","actor":{"type":"admin","request_id":"req-1"},"data":{"expires_at":null,"issued_to":null,"key":"K-1","limits":{"api_calls_per_day":100},"max_activations":3,"product_id":"app","tier":"pro"}}`},
		{seat, `{"id":"evt_2","type":"seat.deactivated","created_at":"2026-11-25T04:31:07.512000Z","actor":{"type":"client","request_id":null},"data":{"instance_id":null,"key":"K-1","product_id":"app","reason":"client"}}`},
	} {
		body, err := JSON(c.ev)
		if err != nil {
			t.Fatal(err)
		}
		got, changed, err := Redact(body)
		if err != nil || !changed || string(got) != c.want {
			t.Fatalf("Redact(%s)\n = %s, %v, %v\nwant %s", body, got, changed, err, c.want)
		}
		again, changed, err := Redact(got)
		if err != nil || changed || string(again) != string(got) {
			t.Fatalf("a second redaction changed %s: %s %v %v", got, again, changed, err)
		}
	}
	body, _ := JSON(revoked)
	if got, changed, err := Redact(body); err != nil || changed || string(got) != string(body) {
		t.Fatalf("an event without personal data changed: %s %v %v", got, changed, err)
	}
	if _, _, err := Redact([]byte(`not json`)); err == nil {
		t.Fatal("no error for a body that is no event")
	}
}
