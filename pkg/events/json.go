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
func JSON(ev *eventsv1.Event) ([]byte, error) {
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
	m := ev.ProtoReflect()
	od := m.Descriptor().Oneofs().ByName("data")
	fd := m.WhichOneof(od)
	if fd == nil {
		return nil, fmt.Errorf("events: %s has no data", ev.Type)
	}
	var v protoreflect.Value = m.Get(fd)
	return v.Message().Interface(), nil
}
