package webhooks

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/telemetry"
)

// pingEnvelope returns a new ping event's id and its envelope bytes, in the shape every
// event is delivered in. It is not emitted: a ping goes to one endpoint and into no log.
func pingEnvelope(ctx context.Context, tenant string, now time.Time) (string, []byte, error) {
	ev := events.Ping(tenant)
	ev.Id = events.NewID()
	ev.CreatedAt = timestamppb.New(now.Truncate(time.Microsecond)) // events.TimeLayout's precision
	ev.Actor = events.Actor(events.ActorFrom(ctx), telemetry.RequestID(ctx))
	body, err := events.JSON(ev)
	return ev.Id, body, err
}
