package purge

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func deleted(t *testing.T, tenant, key string, at time.Time) []byte {
	t.Helper()
	ev := events.LicenseDeleted(tenant, key, "app")
	ev.Id, ev.CreatedAt = events.NewID(), timestamppb.New(at)
	b, err := proto.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseTakesOnlyLicenseDeletedEvents(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	ev, err := Parse(deleted(t, "t1", "K-1", at))
	if err != nil || ev.GetTenantId() != "t1" || ev.GetLicenseDeleted().GetKey() != "K-1" || !ev.GetCreatedAt().AsTime().Equal(at) {
		t.Fatalf("%v %v", ev, err)
	}
	other := events.LicenseRevoked("t1", "K-1", "app")
	other.Id = events.NewID()
	otherBytes, _ := proto.Marshal(other)
	for name, data := range map[string][]byte{
		"not an event": []byte("nope"),
		"no tenant":    deleted(t, "", "K-1", at),
		"no key":       deleted(t, "t1", "", at),
		"another type": otherBytes,
	} {
		if _, err := Parse(data); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

type fakeMsg struct {
	jetstream.Msg
	data []byte
}

func (m fakeMsg) Data() []byte { return m.data }

type call struct {
	tenant, key, product, actor string
	at                          time.Time
}

type fakePurger struct {
	calls []call
	err   error
}

func (p *fakePurger) Purge(ctx context.Context, tenant, key, productID string, deletedAt time.Time) error {
	p.calls = append(p.calls, call{tenant, key, productID, events.ActorFrom(ctx), deletedAt})
	return p.err
}

func TestHandlerTerminatesMalformedEventsAndRetriesFailures(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	good := fakeMsg{data: deleted(t, "t1", "K-1", at)}

	p := &fakePurger{}
	if err := Handler(p, log)(context.Background(), good); err != nil || len(p.calls) != 1 ||
		p.calls[0] != (call{"t1", "K-1", "app", events.ActorSystem, at}) {
		t.Fatalf("%v %v", p.calls, err)
	}
	if err := Handler(p, log)(context.Background(), fakeMsg{data: []byte(`{}`)}); !natsx.IsPermanent(err) {
		t.Fatalf("malformed event: %v", err)
	}
	p.err = errors.New("database down")
	if err := Handler(p, log)(context.Background(), good); err == nil || natsx.IsPermanent(err) {
		t.Fatalf("a failed purge must be redelivered: %v", err)
	}
}
