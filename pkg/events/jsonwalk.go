package events

import (
	"encoding/base64"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/keyhouse/keyhouse/pkg/protojsonappend"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// maxWalkDepth is far beyond any event's nesting (two levels); deeper data takes the
// passes, whose reading of the Struct stops at protojson's recursion limit.
const maxWalkDepth = 100

// appendEnvelope writes JSON's bytes for ev in one walk of the event, instead of the
// three protojson passes of threePassJSON (23% of the events service's CPU samples under
// write load, docs/performance-history.md). It writes what the passes write: the data's fields in
// the order of their proto names (the Struct of the second pass sorts them, nested
// objects' too), each value as protojson prints it after the Struct's reading has made
// every JSON number a double:
//
//   - int32, uint32 and an enum number with no name: the integer (a double holds it
//     exactly, and prints it whole);
//   - int64 and uint64 kinds: strings, as protojson prints them, untouched by the Struct;
//   - double: protojson's digits, which read back as the same double; NaN and the
//     infinities are the strings "NaN", "Infinity" and "-Infinity";
//   - float: protojson's float32 digits read as a double, printed as a double;
//   - strings, bytes (base64), enum names, Timestamp, Duration: protojson's strings (the
//     envelope's own created_at is FormatTime's, the record's string);
//   - a message: its object, sorted, unset fields included; an unset message is null;
//   - repeated fields: arrays ([] when empty); maps: objects, keys sorted as strings.
//
// TestJSONMatchesTheThreePasses and TestDataWalkMatchesTheThreePasses hold it to the
// passes' bytes. ok is false for what it leaves to the passes: anything protojson refuses
// (invalid UTF-8, a timestamp or duration out of range, a Value without kind or with NaN,
// no data), google.protobuf.Any and FieldMask, messages that are not proto3, and data
// nested deeper than maxWalkDepth.
func appendEnvelope(b []byte, ev *eventsv1.Event) (_ []byte, ok bool) {
	data := setData(ev)
	if data == nil {
		return b, false
	}
	b = append(b, `{"id":`...)
	if b, ok = protojsonappend.String(b, ev.GetId()); !ok {
		return b, false
	}
	b = append(b, `,"type":`...)
	if b, ok = protojsonappend.String(b, ev.GetType()); !ok {
		return b, false
	}
	b = append(b, `,"created_at":`...)
	if b, ok = appendTime(b, ev.GetCreatedAt()); !ok {
		return b, false
	}
	b = append(b, `,"actor":`...)
	if b, ok = appendActor(b, ev.GetActor()); !ok {
		return b, false
	}
	b = append(b, `,"data":`...)
	if b, ok = appendData(b, data); !ok {
		return b, false
	}
	return append(b, '}'), true
}

// appendData writes the record's data: the event's data message as the object the
// Struct makes of it. A message whose JSON is not an object (a Timestamp, say) cannot be
// read into a Struct: the passes refuse it.
func appendData(b []byte, m protoreflect.Message) ([]byte, bool) {
	if planOf(m.Descriptor()).form != plainMessage {
		return b, false
	}
	return appendMessage(b, m, 0)
}

// appendActor writes the actor as the record's protojson pass does: declaration order, no
// Struct in between (TestActorIsTheWalksTwoFields guards the field list).
func appendActor(b []byte, a *eventsv1.Actor) (_ []byte, ok bool) {
	if a == nil {
		return append(b, "null"...), true
	}
	b = append(b, `{"type":`...)
	if b, ok = protojsonappend.String(b, a.GetType()); !ok {
		return b, false
	}
	b = append(b, `,"request_id":`...)
	if a.GetRequestId() == nil {
		b = append(b, "null"...)
	} else if b, ok = protojsonappend.String(b, a.GetRequestId().GetValue()); !ok {
		return b, false
	}
	return append(b, '}'), true
}

// messageForm is how protojson prints a message: as an object of its fields, or in the
// special form of a well-known type.
type messageForm uint8

const (
	plainMessage messageForm = iota
	timestampMessage
	durationMessage
	wrapperMessage   // its value field alone
	structMessage    // its fields map alone
	listValueMessage // its values list alone
	valueMessage     // the set member of its kind oneof
	unwalkable       // Any, FieldMask, not proto3: the passes print it
)

// messagePlan is what the walk needs of a message type, worked out once per type.
type messagePlan struct {
	form messageForm
	// plainMessage: the fields by proto name. A well-known type: its fields as declared
	// (a Timestamp's seconds, then nanos).
	fields []fieldPlan
	kind   protoreflect.OneofDescriptor // valueMessage
}

type fieldPlan struct {
	fd protoreflect.FieldDescriptor
	// name is `"name":`.
	name string
	// inOneof: written only when set (protojson leaves out unset oneof members, proto3
	// optional fields among them).
	inOneof bool
	// nullWhenUnset: a message field, null when unset.
	nullWhenUnset bool
}

var plans sync.Map // protoreflect.MessageDescriptor → *messagePlan

func planOf(md protoreflect.MessageDescriptor) *messagePlan {
	if p, ok := plans.Load(md); ok {
		return p.(*messagePlan)
	}
	p, _ := plans.LoadOrStore(md, newPlan(md))
	return p.(*messagePlan)
}

func newPlan(md protoreflect.MessageDescriptor) *messagePlan {
	p := &messagePlan{form: formOf(md)}
	fds := md.Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		p.fields = append(p.fields, fieldPlan{
			fd: fd, name: `"` + fd.TextName() + `":`,
			inOneof:       fd.ContainingOneof() != nil,
			nullWhenUnset: fd.HasPresence() && fd.ContainingOneof() == nil,
		})
	}
	switch p.form {
	case plainMessage:
		slices.SortFunc(p.fields, func(x, y fieldPlan) int { return strings.Compare(x.fd.TextName(), y.fd.TextName()) })
	case valueMessage:
		p.kind = md.Oneofs().ByName("kind")
	}
	return p
}

func formOf(md protoreflect.MessageDescriptor) messageForm {
	if md.Syntax() != protoreflect.Proto3 {
		return unwalkable
	}
	if md.ParentFile().Package() != "google.protobuf" {
		return plainMessage
	}
	switch md.Name() {
	case "Timestamp":
		return timestampMessage
	case "Duration":
		return durationMessage
	case "BoolValue", "Int32Value", "Int64Value", "UInt32Value", "UInt64Value", "FloatValue", "DoubleValue",
		"StringValue", "BytesValue":
		return wrapperMessage
	case "Struct":
		return structMessage
	case "ListValue":
		return listValueMessage
	case "Value":
		return valueMessage
	case "Any", "FieldMask":
		return unwalkable
	}
	return plainMessage // Empty and the rest have no special form
}

func appendMessage(b []byte, m protoreflect.Message, depth int) (_ []byte, ok bool) {
	if depth > maxWalkDepth {
		return b, false
	}
	p := planOf(m.Descriptor())
	switch p.form {
	case timestampMessage:
		return protojsonappend.Timestamp(b, m.Get(p.fields[0].fd).Int(), m.Get(p.fields[1].fd).Int())
	case durationMessage:
		return protojsonappend.Duration(b, m.Get(p.fields[0].fd).Int(), m.Get(p.fields[1].fd).Int())
	case wrapperMessage, structMessage, listValueMessage:
		return appendValue(b, m.Get(p.fields[0].fd), p.fields[0].fd, depth)
	case valueMessage:
		fd := m.WhichOneof(p.kind)
		if fd == nil {
			return b, false
		}
		v := m.Get(fd)
		if fd.Kind() == protoreflect.DoubleKind {
			return protojsonappend.Number(b, v.Float())
		}
		return appendValue(b, v, fd, depth)
	case unwalkable:
		return b, false
	}
	b = append(b, '{')
	first := true
	for _, f := range p.fields {
		if f.inOneof && !m.Has(f.fd) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, f.name...)
		if f.nullWhenUnset && !m.Has(f.fd) {
			b = append(b, "null"...)
		} else if b, ok = appendValue(b, m.Get(f.fd), f.fd, depth); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

// appendValue writes the value of field fd: a list, a map or one value.
func appendValue(b []byte, v protoreflect.Value, fd protoreflect.FieldDescriptor, depth int) (_ []byte, ok bool) {
	switch {
	case fd.IsList():
		list := v.List()
		b = append(b, '[')
		for i := range list.Len() {
			if i > 0 {
				b = append(b, ',')
			}
			if b, ok = appendSingular(b, list.Get(i), fd, depth); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	case fd.IsMap():
		return appendMap(b, v.Map(), fd.MapValue(), depth)
	}
	return appendSingular(b, v, fd, depth)
}

type mapEntry struct {
	key   string
	value protoreflect.Value
}

// appendMap writes a map as the Struct does: its keys as strings, in their order as
// strings (so "10" before "9": the Struct no longer knows they were numbers).
func appendMap(b []byte, m protoreflect.Map, valueFd protoreflect.FieldDescriptor, depth int) (_ []byte, ok bool) {
	if m.Len() == 0 {
		return append(b, "{}"...), true
	}
	entries := make([]mapEntry, 0, m.Len())
	m.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		entries = append(entries, mapEntry{k.String(), v})
		return true
	})
	slices.SortFunc(entries, func(x, y mapEntry) int { return strings.Compare(x.key, y.key) })
	b = append(b, '{')
	for i, e := range entries {
		if i > 0 {
			b = append(b, ',')
		}
		if b, ok = protojsonappend.String(b, e.key); !ok {
			return b, false
		}
		b = append(b, ':')
		if b, ok = appendSingular(b, e.value, valueFd, depth); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

// appendSingular writes one value of field fd as it comes out of the Struct.
func appendSingular(b []byte, v protoreflect.Value, fd protoreflect.FieldDescriptor, depth int) ([]byte, bool) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return strconv.AppendBool(b, v.Bool()), true
	case protoreflect.StringKind:
		return protojsonappend.String(b, v.String())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return strconv.AppendInt(b, v.Int(), 10), true
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return strconv.AppendUint(b, v.Uint(), 10), true
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		b = append(b, '"')
		return append(strconv.AppendInt(b, v.Int(), 10), '"'), true
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		b = append(b, '"')
		return append(strconv.AppendUint(b, v.Uint(), 10), '"'), true
	case protoreflect.FloatKind:
		return appendFloatAsDouble(b, v.Float())
	case protoreflect.DoubleKind:
		return protojsonappend.Float(b, v.Float(), 64), true
	case protoreflect.BytesKind:
		b = append(b, '"')
		return append(base64.StdEncoding.AppendEncode(b, v.Bytes()), '"'), true
	case protoreflect.EnumKind:
		if fd.Enum().FullName() == "google.protobuf.NullValue" {
			return append(b, "null"...), true
		}
		if name := fd.Enum().Values().ByNumber(v.Enum()); name != nil {
			return protojsonappend.String(b, string(name.Name()))
		}
		return strconv.AppendInt(b, int64(v.Enum()), 10), true
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return appendMessage(b, v.Message(), depth+1)
	}
	return b, false
}

// appendFloatAsDouble writes a float field as it comes out of the Struct: the first pass
// prints the float32's shortest digits, the Struct reads them as a double, the last pass
// prints that double. The reading changed no digits in 28 million float32s tried, but
// nothing here proves it never does, so the walk does what the passes do.
func appendFloatAsDouble(b []byte, f float64) ([]byte, bool) {
	var digits [32]byte
	printed := protojsonappend.Float(digits[:0], f, 32)
	if printed[0] == '"' { // NaN and the infinities: strings, which the Struct keeps
		return append(b, printed...), true
	}
	d, err := strconv.ParseFloat(string(printed), 64)
	if err != nil {
		return b, false
	}
	return protojsonappend.Float(b, d, 64), true
}
