package purge

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestParseChecksTheEventContract(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	ev, err := Parse([]byte(`{"tenant_id":"t1","key":"K-1","deleted_at":"2026-03-04T05:06:07Z"}`), "t1")
	if err != nil || ev.TenantID != "t1" || ev.Key != "K-1" || !ev.DeletedAt.Equal(at) {
		t.Fatalf("%+v %v", ev, err)
	}
	// The header is optional; without deleted_at the purge is stamped now.
	if ev, err := Parse([]byte(`{"tenant_id":"t1","key":"K-1"}`), ""); err != nil || ev.DeletedAt.IsZero() {
		t.Fatalf("%+v %v", ev, err)
	}
	for _, tc := range []struct{ name, data, header string }{
		{"not json", `nope`, ""},
		{"no tenant", `{"key":"K-1"}`, ""},
		{"no key", `{"tenant_id":"t1"}`, ""},
		{"header disagrees", `{"tenant_id":"t1","key":"K-1"}`, "t2"},
	} {
		if _, err := Parse([]byte(tc.data), tc.header); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

type fakeMsg struct {
	jetstream.Msg
	data   []byte
	header nats.Header
}

func (m fakeMsg) Data() []byte         { return m.data }
func (m fakeMsg) Headers() nats.Header { return m.header }

type fakePurger struct {
	calls []Event
	err   error
}

func (p *fakePurger) Purge(_ context.Context, tenant, key string, deletedAt time.Time) error {
	p.calls = append(p.calls, Event{TenantID: tenant, Key: key, DeletedAt: deletedAt})
	return p.err
}

func TestHandlerTerminatesMalformedEventsAndRetriesFailures(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := nats.Header{}
	h.Set(natsx.HeaderTenant, "t1")
	good := fakeMsg{data: []byte(`{"tenant_id":"t1","key":"K-1","deleted_at":"2026-03-04T05:06:07Z"}`), header: h}

	p := &fakePurger{}
	if err := Handler(p, log)(context.Background(), good); err != nil || len(p.calls) != 1 || p.calls[0].Key != "K-1" {
		t.Fatalf("%v %v", p.calls, err)
	}
	if err := Handler(p, log)(context.Background(), fakeMsg{data: []byte(`{}`), header: nats.Header{}}); !natsx.IsPermanent(err) {
		t.Fatalf("malformed event: %v", err)
	}
	p.err = errors.New("database down")
	if err := Handler(p, log)(context.Background(), good); err == nil || natsx.IsPermanent(err) {
		t.Fatalf("a failed purge must be redelivered: %v", err)
	}
}
