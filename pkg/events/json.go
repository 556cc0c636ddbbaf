package events

import (
	"bytes"
	"encoding/json"
	"fmt"

	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
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
	return &eventsv1.EventRecord{Id: ev.Id, Type: ev.Type, CreatedAt: ev.CreatedAt, Actor: ev.Actor, Data: st}, nil
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
