package events

import (
	"bytes"
	"encoding/json"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/protojsonappend"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The walk prints every event as the three passes do, byte for byte: each data type's
// zero message, each with every field set, and thousands of random events. What the passes
// refuse, the walk refuses (and JSON returns the passes' error); what they print, the walk
// prints, so no event takes the passes but the ones they refuse.
func TestJSONMatchesTheThreePasses(t *testing.T) {
	t.Parallel()
	var events []*eventsv1.Event
	for _, fd := range fieldsOf(dataOneof.Fields()) {
		zero := envelope(fd)
		ev := zero.ProtoReflect()
		ev.Set(fd, ev.NewField(fd))
		events = append(events, zero)

		full := envelope(fd)
		ev = full.ProtoReflect()
		data := ev.NewField(fd).Message()
		(&messageFiller{r: rand.New(rand.NewPCG(1, uint64(fd.Number()))), everyField: true}).fill(data, 1)
		ev.Set(fd, protoreflect.ValueOfMessage(data))
		checkEveryField(t, data)
		events = append(events, full)
	}
	// The data's oneof member set to a nil message.
	events = append(events, &eventsv1.Event{Id: "evt_1", Type: TypeLicenseIssued, Data: &eventsv1.Event_LicenseIssued{}})

	f := &messageFiller{r: rand.New(rand.NewPCG(2026, 11)), badOneIn: 150}
	for range 3000 {
		ev := &eventsv1.Event{}
		f.fillEvent(ev)
		events = append(events, ev)
	}
	var n tally
	for _, ev := range events {
		want, wantErr := threePassJSON(ev)
		got, ok := appendEnvelope(nil, ev)
		viaJSON, err := JSON(ev)
		printed := matchThePasses(t, ev, got, ok, want, wantErr)
		n.add(printed)
		if !printed {
			if err == nil {
				t.Fatalf("the passes refuse %v (%v), JSON wrote %s", ev, wantErr, viaJSON)
			}
			continue
		}
		if err != nil || !bytes.Equal(viaJSON, want) {
			t.Fatalf("JSON wrote %s, %v; want %s", viaJSON, err, want)
		}
		// GET /v1/events reads the stored bytes into a record and prints it again.
		rec := &eventsv1.EventRecord{}
		if err := protojson.Unmarshal(got, rec); err != nil {
			t.Fatalf("the log cannot read %s: %v", got, err)
		}
		if listed, err := RecordJSON(rec); err != nil || !bytes.Equal(listed, got) {
			t.Fatalf("GET /v1/events would print %s (%v)\nthe log holds %s", listed, err, got)
		}
	}
	n.check(t, len(events)*3/4)
}

// The walk of a message of every kind protojson knows (every scalar, enums with unknown
// numbers and aliases, proto3 optional and oneof members, lists and maps of each, nested
// and recursive messages, the well-known types) prints what the three passes print.
func TestDataWalkMatchesTheThreePasses(t *testing.T) {
	t.Parallel()
	md := allKindsDescriptor(t)
	zero := dynamicpb.NewMessage(md)
	full := dynamicpb.NewMessage(md)
	(&messageFiller{r: rand.New(rand.NewPCG(7, 7)), everyField: true}).fill(full, 0)
	checkEveryField(t, full)
	messages := []protoreflect.Message{zero, full}
	f := &messageFiller{r: rand.New(rand.NewPCG(2026, 12)), badOneIn: 400}
	for range 300 {
		m := dynamicpb.NewMessage(md)
		f.fill(m, 0)
		messages = append(messages, m)
	}
	var n tally
	for _, m := range messages {
		want, wantErr := threePassData(m.Interface())
		got, ok := appendData(nil, m)
		n.add(matchThePasses(t, m, got, ok, want, wantErr))
	}
	n.check(t, len(messages)/2)
}

// What the Struct of the second pass makes of each kind, pinned for the walk and the
// passes alike: a double keeps protojson's digits (1e+21, 1e-7, -0) and NaN stays a string;
// a float32 is read back as a double; int64 stays a string; an enum number with no name is
// a number; a map's integer keys sort as strings; <, >, &, U+2028 and DEL are not escaped;
// a set proto3 optional field is there even when zero, an unset one is not.
func TestTheStructTripsForms(t *testing.T) {
	t.Parallel()
	md := allKindsDescriptor(t)
	m := dynamicpb.NewMessage(md)
	field := func(name string) protoreflect.FieldDescriptor { return md.Fields().ByName(protoreflect.Name(name)) }
	for _, d := range []float64{0.1, 1e21, 1e-7, math.Copysign(0, -1), 1e20, math.NaN(), math.Inf(-1), 5e-324} {
		m.Mutable(field("r_double")).List().Append(protoreflect.ValueOfFloat64(d))
	}
	for _, f := range []float32{0.1, 16777217, math.MaxFloat32} {
		m.Mutable(field("r_float")).List().Append(protoreflect.ValueOfFloat32(f))
	}
	for _, n := range []protoreflect.EnumNumber{1, 7, -5} {
		m.Mutable(field("r_colour")).List().Append(protoreflect.ValueOfEnum(n))
	}
	for _, k := range []int32{10, 9, -1} {
		m.Mutable(field("m_int32_string")).Map().Set(protoreflect.ValueOfInt32(k).MapKey(), protoreflect.ValueOfString("<>&\u2028\x7f\x01"))
	}
	m.Mutable(field("r_int64")).List().Append(protoreflect.ValueOfInt64(math.MaxInt64))
	m.Mutable(field("r_uint32")).List().Append(protoreflect.ValueOfUint32(math.MaxUint32))
	m.Set(field("s_bytes"), protoreflect.ValueOfBytes([]byte{0xff, 0xfe, 0}))
	m.Set(field("o_int32"), protoreflect.ValueOfInt32(0))
	passes, err := threePassData(m.Interface())
	if err != nil {
		t.Fatal(err)
	}
	walk, _ := appendData(nil, m)
	for _, form := range []string{
		`"r_double":[0.1,1e+21,1e-7,-0,100000000000000000000,"NaN","-Infinity",5e-324]`,
		`"r_float":[0.1,16777216,3.4028235e+38]`,
		`"r_colour":["RED",7,"NEGATIVE"]`,
		"\"m_int32_string\":{\"-1\":\"<>&\u2028\x7f\\u0001\",\"10\":\"<>&\u2028\x7f\\u0001\",\"9\":\"<>&\u2028\x7f\\u0001\"}",
		`"r_int64":["9223372036854775807"]`, `"r_uint32":[4294967295]`, `"s_bytes":"//4A"`, `"o_int32":0`, `"s_null":null`,
		`"s_timestamp":null`, `"r_timestamp":[]`, `"m_string_double":{}`, `{"Zeta":"","_hidden":0,"alpha_1":false,"beta2":0,`,
	} {
		if !strings.Contains(string(passes), form) || !strings.Contains(string(walk), form) {
			t.Fatalf("want %s\nwalk   %s\npasses %s", form, walk, passes)
		}
	}
	if strings.Contains(string(passes), "o_string") || strings.Contains(string(walk), "o_string") {
		t.Fatalf("an unset proto3 optional field is printed:\nwalk   %s\npasses %s", walk, passes)
	}
}

// What the walk does not print it leaves to the three passes, which print or refuse it
// as before: google.protobuf.Any and FieldMask, a proto2 message, nesting past
// maxWalkDepth, data that is a well-known type; and for events, anything the passes
// refuse, with the passes' error.
func TestWhatTheWalkLeavesTakesTheThreePasses(t *testing.T) {
	t.Parallel()
	md := allKindsDescriptor(t)
	set := func(name string, v protoreflect.Value) protoreflect.Message {
		m := dynamicpb.NewMessage(md)
		m.Set(md.Fields().ByName(protoreflect.Name("s_"+name)), v)
		return m
	}
	anyValue, err := anypb.New(wrapperspb.String("x"))
	if err != nil {
		t.Fatal(err)
	}
	legacy := (&descriptorpb.DescriptorProto_ReservedRange{Start: proto.Int32(1)}).ProtoReflect()
	deep := dynamicpb.NewMessage(md)
	for range maxWalkDepth + 1 {
		outer := dynamicpb.NewMessage(md)
		outer.Set(md.Fields().ByName("s_nested"), protoreflect.ValueOfMessage(deep))
		deep = outer
	}
	for name, m := range map[string]protoreflect.Message{
		"any":        set("any", protoreflect.ValueOfMessage(anyValue.ProtoReflect())),
		"field mask": set("field_mask", protoreflect.ValueOfMessage((&fieldmaskpb.FieldMask{Paths: []string{"a.b_c"}}).ProtoReflect())),
		"proto2":     set("legacy", protoreflect.ValueOfMessage(legacy)),
		"deep":       deep,
		"a Struct":   (&structpb.Struct{Fields: map[string]*structpb.Value{"b": structpb.NewBoolValue(true)}}).ProtoReflect(),
	} {
		want, err := threePassData(m.Interface())
		if err != nil {
			t.Fatalf("%s: the passes refuse it: %v", name, err)
		}
		if got, ok := appendData(nil, m); ok {
			t.Fatalf("%s: the walk wrote %s, the passes %s", name, got, want)
		}
	}

	// Data that is not an object cannot be read into a Struct.
	if got, ok := appendData(nil, (&timestamppb.Timestamp{}).ProtoReflect()); ok {
		t.Fatalf("the walk wrote a timestamp as data: %s", got)
	}
	if _, err := threePassData(&timestamppb.Timestamp{}); err == nil {
		t.Fatal("the passes print a timestamp as data")
	}

	at := timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	yearZero := time.Date(0, 12, 31, 23, 59, 59, 0, time.UTC)
	for name, ev := range map[string]*eventsv1.Event{
		"no data":              {Id: "evt_1", Type: TypePing, CreatedAt: at},
		"invalid UTF-8 data":   LicenseRevoked("t", "K-\xff", "app"),
		"invalid UTF-8 type":   {Id: "evt_1", Type: "ping\xc3", Data: Ping("t").Data},
		"created_at too late":  {Id: "evt_1", Type: TypePing, CreatedAt: &timestamppb.Timestamp{Seconds: protojsonappend.MaxTimestampSeconds + 1}, Data: Ping("t").Data},
		"expires_at too early": LicenseIssued("t", "k", "p", "pro", "x", &yearZero, nil, nil),
		"request id":           {Id: "evt_1", Type: TypePing, Actor: Actor(ActorSystem, "\xff"), Data: Ping("t").Data},
	} {
		want, wantErr := threePassJSON(ev)
		if wantErr == nil {
			t.Fatalf("%s: the passes print %s", name, want)
		}
		if got, ok := appendEnvelope(nil, ev); ok {
			t.Fatalf("%s: the walk wrote %s", name, got)
		}
		if got, err := JSON(ev); err == nil || err.Error() != wantErr.Error() {
			t.Fatalf("%s: JSON = %s, %v; want the passes' error %v", name, got, err, wantErr)
		}
	}
}

// The envelope's record fields and the actor's are written by hand in declaration order;
// a field added to either must be added to appendEnvelope or appendActor.
func TestActorIsTheWalksTwoFields(t *testing.T) {
	t.Parallel()
	names := func(md protoreflect.MessageDescriptor) []string {
		var out []string
		for _, fd := range fieldsOf(md.Fields()) {
			out = append(out, string(fd.Name()))
		}
		return out
	}
	if got := names((&eventsv1.Actor{}).ProtoReflect().Descriptor()); !slices.Equal(got, []string{"type", "request_id"}) {
		t.Fatalf("Actor's fields are %v: appendActor writes type and request_id", got)
	}
	if got := names((&eventsv1.EventRecord{}).ProtoReflect().Descriptor()); !slices.Equal(got, []string{"id", "type", "created_at", "actor", "data"}) {
		t.Fatalf("EventRecord's fields are %v: appendEnvelope writes id, type, created_at, actor, data", got)
	}
}

func BenchmarkJSON(b *testing.B) {
	exp, seats := time.Date(2027, 11, 25, 0, 0, 0, 0, time.UTC), int32(5)
	issued := LicenseIssued("t1", "KH-7Q2M-99XA-PL3K", "app", "pro", "Ada Lovelace <ada@example.com>", &exp, &seats,
		map[string]float64{"api_calls": 10000, "projects": 25, "storage_gb": 2.5})
	activated := SeatActivated("t1", "KH-7Q2M-99XA-PL3K", "app", "inst-3f9c2a7e-9d4b-4f0e-8a61-2b7c5d1e0f93")
	for _, ev := range []*eventsv1.Event{issued, activated} {
		ev.Id, ev.CreatedAt = NewID(), timestamppb.New(time.Date(2026, 11, 25, 4, 30, 0, 123_000_000, time.UTC))
		ev.Actor = Actor(ActorAPIKey, "req-01JDXQ4W9ZK3")
		b.Run(ev.GetType()+"/walk", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := JSON(ev); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(ev.GetType()+"/three-passes", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := threePassJSON(ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// threePassData is the data of threePassJSON's record, alone: printed, read into a
// Struct, printed again and compacted.
func threePassData(m proto.Message) ([]byte, error) {
	raw, err := jsonOptions.Marshal(m)
	if err != nil {
		return nil, err
	}
	st := &structpb.Struct{}
	if err := protojson.Unmarshal(raw, st); err != nil {
		return nil, err
	}
	if raw, err = jsonOptions.Marshal(st); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	err = json.Compact(&buf, raw)
	return buf.Bytes(), err
}

// tally counts what the walk printed and what both refused.
type tally struct{ walked, refused int }

func (n *tally) add(printed bool) {
	if printed {
		n.walked++
	} else {
		n.refused++
	}
}

// check fails t unless both outcomes are common: otherwise the comparison proves little.
func (n *tally) check(t *testing.T, minWalked int) {
	t.Helper()
	if n.refused < 20 || n.walked < minWalked {
		t.Fatalf("%d walked, %d refused", n.walked, n.refused)
	}
	t.Logf("%d walked, %d refused by both", n.walked, n.refused)
}

// matchThePasses fails t unless the walk of subject wrote what the passes print, or both
// refused it; it reports whether the passes print it.
func matchThePasses(t *testing.T, subject any, walk []byte, ok bool, passes []byte, passesErr error) bool {
	t.Helper()
	if passesErr != nil {
		if ok {
			t.Fatalf("the passes refuse %v (%v), the walk wrote %s", subject, passesErr, walk)
		}
		return false
	}
	if !ok {
		t.Fatalf("the walk left %v to the passes, which print it\n%s", subject, passes)
	}
	if !bytes.Equal(walk, passes) {
		i := 0
		for i < len(walk) && i < len(passes) && walk[i] == passes[i] {
			i++
		}
		t.Fatalf("the walk and the passes differ at byte %d:\nwalk   %s\npasses %s\nfor %v", i, walk, passes, subject)
	}
	return true
}

func fieldsOf[L interface {
	Len() int
	Get(int) protoreflect.FieldDescriptor
}](l L) []protoreflect.FieldDescriptor {
	out := make([]protoreflect.FieldDescriptor, l.Len())
	for i := range out {
		out[i] = l.Get(i)
	}
	return out
}

// envelope is an event of the data member fd with a plain envelope.
func envelope(fd protoreflect.FieldDescriptor) *eventsv1.Event {
	return &eventsv1.Event{
		Id: "evt_01jdxq4w9zk3m7v2c8b5n6h1tr", Type: string(fd.Name()), TenantId: "t1",
		CreatedAt: timestamppb.New(time.Date(2026, 11, 25, 4, 30, 0, 0, time.UTC)), Actor: Actor(ActorAdmin, "req-1"),
	}
}

// checkEveryField fails t unless every field of m is set (but for the oneof's members
// other than the one set, and the types the filler leaves alone).
func checkEveryField(t *testing.T, m protoreflect.Message) {
	t.Helper()
	for _, fd := range fieldsOf(m.Descriptor().Fields()) {
		if fd.ContainingOneof() != nil && !fd.ContainingOneof().IsSynthetic() {
			continue
		}
		if !m.Has(fd) && (fd.Message() == nil || !unfilled[fd.Message().FullName()]) {
			t.Fatalf("%s is unset in the every-field message", fd.FullName())
		}
	}
}

// unfilled are the message types the filler leaves unset: the walk leaves them to the
// passes (TestWhatTheWalkLeavesTakesTheThreePasses).
var unfilled = map[protoreflect.FullName]bool{
	"google.protobuf.Any": true, "google.protobuf.FieldMask": true, "google.protobuf.DescriptorProto.ReservedRange": true,
}

// messageFiller sets a message's fields by reflection with values chosen for what the
// passes do to them: strings with escapes, HTML characters, U+2028, astral runes and now
// and then invalid UTF-8; integers at their kinds' ends; doubles such as 0.1, 1e21, 1e-7,
// -0, NaN and the infinities; float32s; enum numbers with no name; timestamps and
// durations at and now and then beyond their range; Values of every kind, now and then
// with none or NaN; lists and maps of 0 to 3 entries; nested messages set or unset.
type messageFiller struct {
	r *rand.Rand
	// everyField sets every field (one member of each oneof) to a value other than its
	// default, never one the passes refuse, lists and maps of 1 to 3 entries.
	everyField bool
	// badOneIn: a value the passes refuse once in so many values (never when 0).
	badOneIn int
}

func (f *messageFiller) bad() bool {
	return !f.everyField && f.badOneIn > 0 && f.r.IntN(f.badOneIn) == 0
}

func (f *messageFiller) fillEvent(ev *eventsv1.Event) {
	m := ev.ProtoReflect()
	fds := m.Descriptor().Fields()
	for _, name := range []protoreflect.Name{"id", "type", "tenant_id"} {
		m.Set(fds.ByName(name), protoreflect.ValueOfString(f.string()))
	}
	for _, name := range []protoreflect.Name{"created_at", "actor"} {
		if fd := fds.ByName(name); f.r.IntN(8) > 0 {
			m.Set(fd, f.message(m.NewField(fd).Message(), 1))
		}
	}
	if f.r.IntN(100) > 0 {
		data := fieldsOf(dataOneof.Fields())
		fd := data[f.r.IntN(len(data))]
		m.Set(fd, f.message(m.NewField(fd).Message(), 1))
	}
}

func (f *messageFiller) fill(m protoreflect.Message, depth int) {
	md := m.Descriptor()
	switch md.FullName() {
	case "google.protobuf.Timestamp":
		secs, nanos := f.timestamp()
		m.Set(md.Fields().ByName("seconds"), protoreflect.ValueOfInt64(secs))
		m.Set(md.Fields().ByName("nanos"), protoreflect.ValueOfInt32(nanos))
		return
	case "google.protobuf.Duration":
		secs, nanos := f.duration()
		m.Set(md.Fields().ByName("seconds"), protoreflect.ValueOfInt64(secs))
		m.Set(md.Fields().ByName("nanos"), protoreflect.ValueOfInt32(nanos))
		return
	case "google.protobuf.Value":
		f.fillValue(m, depth)
		return
	}
	for i := range md.Oneofs().Len() {
		od := md.Oneofs().Get(i)
		if members := fieldsOf(od.Fields()); f.everyField || f.r.IntN(3) > 0 {
			fd := members[f.r.IntN(len(members))]
			f.setField(m, fd, depth)
		}
	}
	for _, fd := range fieldsOf(md.Fields()) {
		if fd.ContainingOneof() != nil || (!f.everyField && f.r.IntN(2) == 0) {
			continue
		}
		f.setField(m, fd, depth)
	}
}

// maxFillDepth: messages below it are left unset, so a recursive message ends.
const maxFillDepth = 2

func (f *messageFiller) setField(m protoreflect.Message, fd protoreflect.FieldDescriptor, depth int) {
	switch {
	case fd.Message() != nil && (unfilled[fd.Message().FullName()] || depth >= maxFillDepth):
	case fd.Message() == m.Descriptor() && depth > 0 && f.r.IntN(4) > 0: // a recursion kept small
	case fd.IsList():
		list := m.Mutable(fd).List()
		for range f.length() {
			list.Append(f.value(list.NewElement, fd, depth))
		}
	case fd.IsMap():
		mp := m.Mutable(fd).Map()
		for range f.length() {
			mp.Set(f.value(func() protoreflect.Value { return protoreflect.Value{} }, fd.MapKey(), depth).MapKey(), f.value(mp.NewValue, fd.MapValue(), depth))
		}
	default:
		m.Set(fd, f.value(func() protoreflect.Value { return m.NewField(fd) }, fd, depth))
		for f.everyField && !m.Has(fd) {
			m.Set(fd, f.value(func() protoreflect.Value { return m.NewField(fd) }, fd, depth))
		}
	}
}

func (f *messageFiller) length() int {
	if f.everyField {
		return 1 + f.r.IntN(3)
	}
	return f.r.IntN(4)
}

func (f *messageFiller) message(m protoreflect.Message, depth int) protoreflect.Value {
	f.fill(m, depth)
	return protoreflect.ValueOfMessage(m)
}

// value is a value of fd's kind; newMessage makes the message of a message kind.
func (f *messageFiller) value(newMessage func() protoreflect.Value, fd protoreflect.FieldDescriptor, depth int) protoreflect.Value {
	r := f.r
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(r.IntN(2) == 0)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(f.string())
	case protoreflect.BytesKind:
		b := make([]byte, r.IntN(9))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return protoreflect.ValueOfBytes(b)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(pick(r, []int32{0, 1, -1, math.MinInt32, math.MaxInt32, int32(r.Uint32()), int32(r.IntN(1000))}))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(pick(r, []uint32{0, 1, math.MaxUint32, r.Uint32(), uint32(r.IntN(1000))}))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(pick(r, []int64{0, 1, -1, math.MinInt64, math.MaxInt64, 1<<53 + 1, -(1<<53 + 1), int64(r.Uint64())}))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(pick(r, []uint64{0, 1, math.MaxUint64, 1<<53 + 1, r.Uint64()}))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(pick(r, []float32{float32(f.double()), math.Float32frombits(r.Uint32()), math.MaxFloat32, math.SmallestNonzeroFloat32, 16777217, 1e-6, 9.999999e-7}))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(f.double())
	case protoreflect.EnumKind:
		values := fd.Enum().Values()
		if r.IntN(4) == 0 {
			return protoreflect.ValueOfEnum(pick(r, []protoreflect.EnumNumber{7, -3, math.MaxInt32, math.MinInt32}))
		}
		return protoreflect.ValueOfEnum(values.Get(r.IntN(values.Len())).Number())
	default:
		return f.message(newMessage().Message(), depth+1)
	}
}

func pick[T any](r *rand.Rand, from []T) T { return from[r.IntN(len(from))] }

var (
	sampleStrings = []string{
		"", "K-1", "pro", `quote " and \ backslash`, "line\nbreak\ttab\rcr\bbs\fff", "\x00\x01\x1f\x7f",
		"<script>alert('&amp;')</script>", "héllo wörld", "日本語", "emoji 🎉🔑", "\u2028\u2029", "\ufffd",
		"\U0010ffff", "a/b", strings.Repeat("long ", 60),
	}
	invalidUTF8 = []string{"bad \xff utf8", "\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80", "ok\xc3("}
	runeRanges  = [][2]rune{{0, 0x7f}, {0x80, 0x7ff}, {0x800, 0xd7ff}, {0xe000, 0xffff}, {0x10000, 0x10ffff}}
)

func (f *messageFiller) string() string {
	r := f.r
	if f.bad() {
		return pick(r, invalidUTF8)
	}
	if r.IntN(2) == 0 {
		return pick(r, sampleStrings)
	}
	var b strings.Builder
	for range r.IntN(12) {
		span := pick(r, runeRanges)
		b.WriteRune(span[0] + r.Int32N(span[1]-span[0]+1))
	}
	return b.String()
}

func (f *messageFiller) double() float64 {
	r := f.r
	switch r.IntN(3) {
	case 0:
		return math.Float64frombits(r.Uint64())
	case 1:
		return float64(r.IntN(2_000_001)-1_000_000) / pick(r, []float64{1, 10, 100, 1e7})
	}
	return pick(r, []float64{
		0, math.Copysign(0, -1), 0.1, 1e21, -1e21, 1e20, 999999999999999900000, 1e-7, 1e-6, 9.999999e-7,
		0.1 + 0.2, 2.5, 1.5e300, math.MaxFloat64, 5e-324, 9007199254740993, math.NaN(), math.Inf(1), math.Inf(-1),
	})
}

func (f *messageFiller) timestamp() (int64, int32) {
	r := f.r
	if f.bad() {
		out := pick(r, [][2]int64{{protojsonappend.MaxTimestampSeconds + 1, 0}, {protojsonappend.MinTimestampSeconds - 1, 0}, {0, -1}, {0, 1e9}})
		return out[0], int32(out[1])
	}
	secs := pick(r, []int64{0, protojsonappend.MinTimestampSeconds, protojsonappend.MaxTimestampSeconds, 1764000000 + r.Int64N(1e8),
		r.Int64N(protojsonappend.MaxTimestampSeconds-protojsonappend.MinTimestampSeconds+1) + protojsonappend.MinTimestampSeconds})
	return secs, f.nanos()
}

func (f *messageFiller) nanos() int32 {
	r := f.r
	return pick(r, []int32{0, 999_999_999, int32(r.IntN(1000)) * 1e6, int32(r.IntN(1e6)) * 1e3, r.Int32N(1e9)})
}

func (f *messageFiller) duration() (int64, int32) {
	r := f.r
	if f.bad() {
		return pick(r, []int64{1, 315576000001, -315576000001}), pick(r, []int32{-1, 1e9})
	}
	secs, nanos := pick(r, []int64{0, 1, 315576000000, r.Int64N(315576000000), r.Int64N(100)}), f.nanos()
	if r.IntN(2) == 0 {
		return -secs, -nanos
	}
	return secs, nanos
}

func (f *messageFiller) fillValue(m protoreflect.Message, depth int) {
	r := f.r
	fds := m.Descriptor().Fields()
	if f.bad() {
		if r.IntN(2) == 0 {
			m.Set(fds.ByName("number_value"), protoreflect.ValueOfFloat64(pick(r, []float64{math.NaN(), math.Inf(1), math.Inf(-1)})))
		}
		return // no kind
	}
	kinds := []protoreflect.Name{"null_value", "number_value", "string_value", "bool_value"}
	if depth < 4 {
		kinds = append(kinds, "struct_value", "list_value")
	}
	fd := fds.ByName(pick(r, kinds))
	switch fd.Name() {
	case "null_value":
		m.Set(fd, protoreflect.ValueOfEnum(0))
	case "number_value":
		n := f.double()
		for math.IsNaN(n) || math.IsInf(n, 0) {
			n = f.double()
		}
		m.Set(fd, protoreflect.ValueOfFloat64(n))
	default:
		m.Set(fd, f.value(func() protoreflect.Value { return m.NewField(fd) }, fd, depth))
	}
}

// allKindsDescriptor is a proto3 message with a field of every kind: each scalar kind
// alone and repeated, an enum with an alias, NullValue, proto3 optional fields, a oneof,
// maps of every key kind, itself nested, every well-known type, a proto2 message, and
// names whose order differs as proto names, JSON names and by case.
func allKindsDescriptor(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	type T = descriptorpb.FieldDescriptorProto_Type
	const (
		pkg     = "keyhouse.events.walktest"
		message = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
	)
	optional, repeated := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	msg := &descriptorpb.DescriptorProto{Name: proto.String("AllKinds")}
	add := func(name string, label *descriptorpb.FieldDescriptorProto_Label, typ T, typeName string) *descriptorpb.FieldDescriptorProto {
		fd := &descriptorpb.FieldDescriptorProto{
			Name: proto.String(name), Number: proto.Int32(int32(len(msg.Field) + 1)), Label: label, Type: typ.Enum(),
		}
		if typeName != "" {
			fd.TypeName = proto.String(typeName)
		}
		msg.Field = append(msg.Field, fd)
		return fd
	}
	scalars := map[string]T{
		"bool": descriptorpb.FieldDescriptorProto_TYPE_BOOL, "string": descriptorpb.FieldDescriptorProto_TYPE_STRING,
		"bytes": descriptorpb.FieldDescriptorProto_TYPE_BYTES, "int32": descriptorpb.FieldDescriptorProto_TYPE_INT32,
		"sint32": descriptorpb.FieldDescriptorProto_TYPE_SINT32, "sfixed32": descriptorpb.FieldDescriptorProto_TYPE_SFIXED32,
		"uint32": descriptorpb.FieldDescriptorProto_TYPE_UINT32, "fixed32": descriptorpb.FieldDescriptorProto_TYPE_FIXED32,
		"int64": descriptorpb.FieldDescriptorProto_TYPE_INT64, "sint64": descriptorpb.FieldDescriptorProto_TYPE_SINT64,
		"sfixed64": descriptorpb.FieldDescriptorProto_TYPE_SFIXED64, "uint64": descriptorpb.FieldDescriptorProto_TYPE_UINT64,
		"fixed64": descriptorpb.FieldDescriptorProto_TYPE_FIXED64, "float": descriptorpb.FieldDescriptorProto_TYPE_FLOAT,
		"double": descriptorpb.FieldDescriptorProto_TYPE_DOUBLE,
	}
	enums := map[string]string{"colour": "." + pkg + ".Colour", "null": ".google.protobuf.NullValue"}
	messages := map[string]string{
		"nested": "." + pkg + ".AllKinds", "timestamp": ".google.protobuf.Timestamp", "duration": ".google.protobuf.Duration",
		"struct": ".google.protobuf.Struct", "value": ".google.protobuf.Value", "list_value": ".google.protobuf.ListValue",
		"empty": ".google.protobuf.Empty", "any": ".google.protobuf.Any", "field_mask": ".google.protobuf.FieldMask",
		"legacy": ".google.protobuf.DescriptorProto.ReservedRange",
	}
	for _, w := range []string{"Bool", "Int32", "Int64", "UInt32", "UInt64", "Float", "Double", "String", "Bytes"} {
		messages["w_"+strings.ToLower(w)] = ".google.protobuf." + w + "Value"
	}
	for _, name := range slices.Sorted(maps.Keys(scalars)) {
		add("s_"+name, optional, scalars[name], "")
		add("r_"+name, repeated, scalars[name], "")
	}
	for _, name := range slices.Sorted(maps.Keys(enums)) {
		add("s_"+name, optional, descriptorpb.FieldDescriptorProto_TYPE_ENUM, enums[name])
		add("r_"+name, repeated, descriptorpb.FieldDescriptorProto_TYPE_ENUM, enums[name])
	}
	for _, name := range slices.Sorted(maps.Keys(messages)) {
		add("s_"+name, optional, message, messages[name])
		add("r_"+name, repeated, message, messages[name])
	}
	// Names that sort differently by byte, by case and as JSON names.
	add("Zeta", optional, descriptorpb.FieldDescriptorProto_TYPE_STRING, "")
	add("_hidden", optional, descriptorpb.FieldDescriptorProto_TYPE_INT32, "")
	add("alpha_1", optional, descriptorpb.FieldDescriptorProto_TYPE_BOOL, "").JsonName = proto.String("zzz")
	add("beta2", optional, descriptorpb.FieldDescriptorProto_TYPE_DOUBLE, "")
	// A oneof, then proto3 optional fields (synthetic oneofs come after real ones).
	msg.OneofDecl = append(msg.OneofDecl, &descriptorpb.OneofDescriptorProto{Name: proto.String("choice")})
	for _, c := range []struct {
		name, typeName string
		typ            T
	}{
		{"c_string", "", descriptorpb.FieldDescriptorProto_TYPE_STRING}, {"c_int64", "", descriptorpb.FieldDescriptorProto_TYPE_INT64},
		{"c_nested", "." + pkg + ".AllKinds", message}, {"c_timestamp", ".google.protobuf.Timestamp", message},
		{"c_float", "", descriptorpb.FieldDescriptorProto_TYPE_FLOAT},
	} {
		add(c.name, optional, c.typ, c.typeName).OneofIndex = proto.Int32(0)
	}
	for _, o := range []struct {
		name string
		typ  T
	}{{"o_int32", descriptorpb.FieldDescriptorProto_TYPE_INT32}, {"o_string", descriptorpb.FieldDescriptorProto_TYPE_STRING}} {
		fd := add(o.name, optional, o.typ, "")
		fd.Proto3Optional, fd.OneofIndex = proto.Bool(true), proto.Int32(int32(len(msg.OneofDecl)))
		msg.OneofDecl = append(msg.OneofDecl, &descriptorpb.OneofDescriptorProto{Name: proto.String("_" + o.name)})
	}
	// Maps: every key kind, values of several kinds.
	for _, m := range []struct {
		key, value        T
		valueName, suffix string
	}{
		{descriptorpb.FieldDescriptorProto_TYPE_STRING, descriptorpb.FieldDescriptorProto_TYPE_DOUBLE, "", "string_double"},
		{descriptorpb.FieldDescriptorProto_TYPE_INT32, descriptorpb.FieldDescriptorProto_TYPE_STRING, "", "int32_string"},
		{descriptorpb.FieldDescriptorProto_TYPE_INT64, descriptorpb.FieldDescriptorProto_TYPE_BOOL, "", "int64_bool"},
		{descriptorpb.FieldDescriptorProto_TYPE_UINT32, descriptorpb.FieldDescriptorProto_TYPE_ENUM, "." + pkg + ".Colour", "uint32_colour"},
		{descriptorpb.FieldDescriptorProto_TYPE_UINT64, descriptorpb.FieldDescriptorProto_TYPE_BYTES, "", "uint64_bytes"},
		{descriptorpb.FieldDescriptorProto_TYPE_SINT32, descriptorpb.FieldDescriptorProto_TYPE_FLOAT, "", "sint32_float"},
		{descriptorpb.FieldDescriptorProto_TYPE_SINT64, descriptorpb.FieldDescriptorProto_TYPE_SINT64, "", "sint64_sint64"},
		{descriptorpb.FieldDescriptorProto_TYPE_FIXED32, descriptorpb.FieldDescriptorProto_TYPE_UINT32, "", "fixed32_uint32"},
		{descriptorpb.FieldDescriptorProto_TYPE_FIXED64, descriptorpb.FieldDescriptorProto_TYPE_INT64, "", "fixed64_int64"},
		{descriptorpb.FieldDescriptorProto_TYPE_SFIXED32, message, ".google.protobuf.Timestamp", "sfixed32_timestamp"},
		{descriptorpb.FieldDescriptorProto_TYPE_SFIXED64, descriptorpb.FieldDescriptorProto_TYPE_ENUM, ".google.protobuf.NullValue", "sfixed64_null"},
		{descriptorpb.FieldDescriptorProto_TYPE_BOOL, message, "." + pkg + ".AllKinds", "bool_nested"},
		{descriptorpb.FieldDescriptorProto_TYPE_STRING, message, ".google.protobuf.Value", "string_value"},
	} {
		entry := &descriptorpb.DescriptorProto{
			Name:    proto.String(mapEntryName("m_" + m.suffix)),
			Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
			Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("key"), Number: proto.Int32(1), Label: optional, Type: m.key.Enum()},
				{Name: proto.String("value"), Number: proto.Int32(2), Label: optional, Type: m.value.Enum()},
			},
		}
		if m.valueName != "" {
			entry.Field[1].TypeName = proto.String(m.valueName)
		}
		msg.NestedType = append(msg.NestedType, entry)
		add("m_"+m.suffix, repeated, message, "."+pkg+".AllKinds."+entry.GetName())
	}
	file := &descriptorpb.FileDescriptorProto{
		Name: proto.String("keyhouse/events/walktest.proto"), Package: proto.String(pkg), Syntax: proto.String("proto3"),
		Dependency: []string{
			"google/protobuf/any.proto", "google/protobuf/descriptor.proto", "google/protobuf/duration.proto",
			"google/protobuf/empty.proto", "google/protobuf/field_mask.proto", "google/protobuf/struct.proto",
			"google/protobuf/timestamp.proto", "google/protobuf/wrappers.proto",
		},
		EnumType: []*descriptorpb.EnumDescriptorProto{{
			Name:    proto.String("Colour"),
			Options: &descriptorpb.EnumOptions{AllowAlias: proto.Bool(true)},
			Value: []*descriptorpb.EnumValueDescriptorProto{
				{Name: proto.String("COLOUR_UNSPECIFIED"), Number: proto.Int32(0)}, {Name: proto.String("RED"), Number: proto.Int32(1)},
				{Name: proto.String("CRIMSON"), Number: proto.Int32(1)}, {Name: proto.String("GREEN"), Number: proto.Int32(2)},
				{Name: proto.String("NEGATIVE"), Number: proto.Int32(-5)},
			},
		}},
		MessageType: []*descriptorpb.DescriptorProto{msg},
	}
	fd, err := protodesc.NewFile(file, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Messages().Get(0)
}

// mapEntryName is protoc's name for the entry type of map field name: m_int32_string's
// is MInt32StringEntry.
func mapEntryName(name string) string {
	var b strings.Builder
	for part := range strings.SplitSeq(name, "_") {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String() + "Entry"
}
