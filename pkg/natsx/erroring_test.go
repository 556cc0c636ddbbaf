package natsx

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// A process that runs several Consume loops on one durable consumer (the storefront's
// fulfillment runs one per worker) logs a NATS outage once, not once per loop; a message
// handled again ends it, and the next outage is logged again.
func TestAnOutageIsOneWarnLineForEveryLoopOfADurableConsumer(t *testing.T) {
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	var loops []*consumer
	for range 4 {
		c, err := newConsumer(context.Background(), "ERRORING", jetstream.ConsumerConfig{Durable: "erroring-test"}, log, nil)
		if err != nil {
			t.Fatal(err)
		}
		loops = append(loops, c)
	}
	for range 3 {
		for _, c := range loops {
			c.onError(nil, errors.New("nats: server shutdown"))
		}
	}
	if n := strings.Count(logged.String(), "consume error, retrying"); n != 1 {
		t.Fatalf("%d WARN lines for one outage seen by %d loops, want 1:\n%s", n, len(loops), logged.String())
	}
	loops[2].erroring.Store(false) // what a handled message does
	loops[0].onError(nil, errors.New("nats: server shutdown"))
	if n := strings.Count(logged.String(), "consume error, retrying"); n != 2 {
		t.Fatalf("%d WARN lines after a second outage, want 2:\n%s", n, logged.String())
	}
}
