package webhooks

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"strings"
	"time"

	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/signing"
	"github.com/keyhouse/keyhouse/pkg/telemetry"
)

// pingEnvelope returns a new ping event's id and its envelope bytes, in the shape every
// event is delivered in: {"id","type","created_at","actor":{"type","request_id"},"data":{}}.
func pingEnvelope(ctx context.Context, now time.Time) (string, []byte, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := "evt_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
	created, err := signing.FormatTime(now.UTC())
	if err != nil {
		return "", nil, err
	}
	var requestID any
	if r := telemetry.RequestID(ctx); r != "" {
		requestID = r
	}
	body, err := signing.Marshal(signing.NewObject().
		Add("id", id).
		Add("type", PingType).
		Add("created_at", created).
		Add("actor", signing.NewObject().Add("type", actorType(ctx)).Add("request_id", requestID)).
		Add("data", signing.NewObject()))
	return id, body, err
}

// actorType names the caller as an event's actor does.
func actorType(ctx context.Context) string {
	p, _ := auth.FromContext(ctx)
	switch {
	case p.Session:
		return "console"
	case p.Admin:
		return "admin"
	}
	return "api_key"
}
