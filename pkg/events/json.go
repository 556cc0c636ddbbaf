package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// jsonOptions are the REST edge's: proto field names, every field, null for unset
// messages (gateway/internal/edge/json.go), so a record prints the same bytes in the log,
// in GET /v1/events and in a webhook delivery.
var jsonOptions = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// Record is the event's §11 JSON form: its data as an object of snake_case fields.
func Record(ev *eventsv1.Event) (*eventsv1.EventRecord, error) {
	data, err := dataMessage(ev)
	if err != nil {
		return nil, err
	}
	raw, err := jsonOptions.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("events: data of %s: %w", ev.Type, err)
	}
	st := &structpb.Struct{}
	if err := protojson.Unmarshal(raw, st); err != nil {
		return nil, fmt.Errorf("events: data of %s: %w", ev.Type, err)
	}
	at, err := recordTime(ev.GetCreatedAt())
	if err != nil {
		return nil, fmt.Errorf("events: created_at of %s: %w", ev.Type, err)
	}
	return &eventsv1.EventRecord{Id: ev.Id, Type: ev.Type, CreatedAt: at, Actor: ev.Actor, Data: st}, nil
}

// TimeLayout is the one form of an event's created_at, in the log, in webhook deliveries
// and in pings (docs/events.md): RFC 3339 in UTC with exactly six fractional digits, the
// precision Postgres keeps, so that the strings sort as the times do. A
// google.protobuf.Timestamp's JSON drops trailing zeros ("…21.882Z" sorted after
// "…21.882805Z", a whole second printed "…21Z").
const TimeLayout = "2006-01-02T15:04:05.000000Z"

// FormatTime writes t in TimeLayout: in UTC, truncated to the microsecond.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeLayout) }

// appendTime is recordTime's string, quoted, for the walk; ok is false for a time
// protojson would refuse (out of 0001-01-01 to 9999-12-31, bad nanos).
func appendTime(b []byte, ts *timestamppb.Timestamp) (_ []byte, ok bool) {
	if ts == nil {
		return append(b, `""`...), true
	}
	if ts.CheckValid() != nil {
		return b, false
	}
	b = append(b, '"')
	b = ts.AsTime().UTC().AppendFormat(b, TimeLayout)
	return append(b, '"'), true
}

// recordTime is a record's created_at: ts in TimeLayout, or "" for an event without a
// time (every event emitted has one: Emit stamps it).
func recordTime(ts *timestamppb.Timestamp) (string, error) {
	if ts == nil {
		return "", nil
	}
	if err := ts.CheckValid(); err != nil {
		return "", err
	}
	return FormatTime(ts.AsTime()), nil
}

// NormalizeTime is a stored record's created_at in TimeLayout: the log keeps each event's
// JSON as it was stored, and an event stored before TimeLayout has a
// google.protobuf.Timestamp's digits. A value that is no RFC 3339 time is left as it is.
func NormalizeTime(v string) string {
	if len(v) == len(TimeLayout) && v[19] == '.' && v[26] == 'Z' {
		return v
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return v
	}
	return FormatTime(t)
}

// JSON is the event's §11 envelope, compact:
// {"id","type","created_at","actor":{"type","request_id"},"data":{…}}.
// One walk of the event writes it (appendEnvelope); what the walk leaves alone, among it
// every event protojson refuses, takes the three passes, which give protojson's error.
func JSON(ev *eventsv1.Event) ([]byte, error) {
	if b, ok := appendEnvelope(make([]byte, 0, 512), ev); ok {
		return b, nil
	}
	return threePassJSON(ev)
}

// threePassJSON is the envelope as protojson prints it: the data printed, read back into
// a Struct (which sorts its keys), and the record printed and compacted. The walk's bytes
// are held to these (TestJSONMatchesTheThreePasses).
func threePassJSON(ev *eventsv1.Event) ([]byte, error) {
	rec, err := Record(ev)
	if err != nil {
		return nil, err
	}
	return RecordJSON(rec)
}

// RecordJSON prints a record as the REST edge does.
func RecordJSON(rec *eventsv1.EventRecord) ([]byte, error) {
	raw, err := jsonOptions.Marshal(rec)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// dataMessage is the message set in the event's oneof.
func dataMessage(ev *eventsv1.Event) (proto.Message, error) {
	data := setData(ev)
	if data == nil {
		return nil, fmt.Errorf("events: %s has no data", ev.Type)
	}
	return data.Interface(), nil
}

var dataOneof = (&eventsv1.Event{}).ProtoReflect().Descriptor().Oneofs().ByName("data")

// setData is the message set in the event's oneof, or nil.
func setData(ev *eventsv1.Event) protoreflect.Message {
	m := ev.ProtoReflect()
	fd := m.WhichOneof(dataOneof)
	if fd == nil {
		return nil
	}
	return m.Get(fd).Message()
}

// NormalizeJSON is an envelope (JSON's bytes, as stored and delivered) with its
// created_at in TimeLayout: body itself when it already is, as every envelope written
// since is; an envelope written before (a logged event redelivered, a delivery still
// pending) gets the same bytes with the time's digits alone rewritten. The envelope
// opens with id and type, neither of which can hold the created_at key, so its first
// occurrence is the envelope's own.
func NormalizeJSON(body []byte) []byte {
	const key = `,"created_at":"`
	i := bytes.Index(body, []byte(key))
	if i < 0 {
		return body
	}
	start := i + len(key)
	end := bytes.IndexByte(body[start:], '"')
	if end < 0 {
		return body
	}
	at := string(body[start : start+end])
	norm := NormalizeTime(at)
	if norm == at {
		return body
	}
	out := make([]byte, 0, len(body)+len(norm)-len(at))
	out = append(out, body[:start]...)
	out = append(out, norm...)
	return append(out, body[start+end:]...)
}
