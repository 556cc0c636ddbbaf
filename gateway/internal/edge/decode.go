package edge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"regexp"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/keyhouse/keyhouse/pkg/input"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// invalidJSON is the one wording of a request body the decoder refuses.
const invalidJSON = "Invalid JSON body"

// NewDecoder is the one request-body decoder of the REST surface. It reads the whole body
// (the 1 MiB cap bounds it) and refuses, each as a 400 "Invalid JSON body…":
//   - a syntax error, worded by encoding/json whatever the position;
//   - anything after the one JSON value (`{"key":"A"}{"key":"B"}`): "Invalid JSON body";
//   - a string where the message declares a number, a wrapper type's included (protojson
//     takes "5" for 5; api.md says number);
//   - what protojson refuses (wrong types, invalid UTF-8, a lone surrogate), its message
//     cleaned of parser positions and naming the field the client sent (refusal).
//
// An empty body is io.EOF, which the generated handlers treat as an empty request.
func (m *jsonMarshaler) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error {
		body, err := readBody(r)
		if err != nil {
			return err
		}
		return m.decode(body, v)
	})
}

// The answers to a request body that cannot be read (400), on every route.
const (
	invalidGzip    = "Invalid gzip body"
	unreadableBody = "Request body could not be read"
)

// readBody reads a whole request body (the 1 MiB cap bounds it): the one read of the
// decoder and of the routes that take the raw bytes (validate-license, the webhooks), so
// each words a failure the same way. The error's text is the client's answer: a gzip
// Content-Encoding that does not decompress is invalidGzip, anything else unreadableBody.
// The body cap (413) and a stalled client (408) are flagged on the request and answered
// by the error handler before it looks at this text. The read error's own text names
// addresses ("read tcp 10.0.0.1:8080->…"), so it never reaches the client.
func readBody(r io.Reader) ([]byte, error) {
	body, err := io.ReadAll(r)
	switch {
	case err == nil:
		return body, nil
	case errors.Is(err, errBadGzip):
		return nil, errors.New(invalidGzip)
	default:
		return nil, errors.New(unreadableBody)
	}
}

// readRequestBody is readBody for a handler that answers through the error handler: its
// error is the 400 status the generated handlers make of a decoder's error.
func readRequestBody(r *http.Request) ([]byte, error) {
	body, err := readBody(r.Body)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return body, nil
}

func (m *jsonMarshaler) decode(body []byte, v any) error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return io.EOF
	}
	if done, err := decodeHotRequest(body, v); done {
		return err
	}
	if req, ok := v.(*licensingv1.ImportLicensesRequest); ok {
		return m.decodeImport(body, req)
	}
	return m.decodeGeneric(body, v)
}

// decodeGeneric decodes any request body; decodeHotRequest's answers are its answers.
func (m *jsonMarshaler) decodeGeneric(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return syntaxError(err)
	}
	if dec.InputOffset() != int64(len(body)) {
		return errors.New(invalidJSON)
	}
	msg, ok := v.(proto.Message)
	if !ok {
		return m.JSONPb.Unmarshal(body, v)
	}
	if err := noStringNumbers(raw, msg.ProtoReflect().Descriptor()); err != nil {
		return err
	}
	if err := m.UnmarshalOptions.Unmarshal(body, msg); err != nil {
		return m.refusal(raw, msg.ProtoReflect().Descriptor(), err)
	}
	return input.CheckMessage(msg.ProtoReflect())
}

func syntaxError(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New(invalidJSON + ": unexpected end of input")
	}
	return errors.New(invalidJSON + ": " + err.Error())
}

// noStringNumbers refuses a JSON string in a numeric field of md (or of a message inside
// it), naming the field as protojson names a wrong type.
func noStringNumbers(raw json.RawMessage, md protoreflect.MessageDescriptor) error {
	// In the body's order, so that of two offending members the same one is named every
	// time. Not an object: protojson words that refusal.
	fields := md.Fields()
	for name, value := range members(raw) {
		fd := fields.ByJSONName(name)
		if fd == nil {
			fd = fields.ByTextName(name)
		}
		if fd == nil || fd.IsMap() {
			continue
		}
		values := []json.RawMessage{value}
		if fd.IsList() {
			values = nil
			_ = json.Unmarshal(value, &values)
		}
		for _, v := range values {
			if err := checkValue(v, fd); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkValue(v json.RawMessage, fd protoreflect.FieldDescriptor) error {
	kind := fd.Kind()
	if kind == protoreflect.MessageKind {
		inner, wrapper := wrappedKind(fd.Message())
		switch {
		case wrapper:
			// A wrapper is written as its value (expire_old_after_seconds: 3600), and
			// protojson takes "3600" for it as for a plain int64.
			kind = inner
		case fd.Message().FullName().Parent() == "google.protobuf":
			return nil // Value, Struct, ListValue, Timestamp: their own JSON rules
		default:
			return noStringNumbers(v, fd.Message())
		}
	}
	switch kind {
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.BoolKind, protoreflect.EnumKind:
		return nil
	}
	if len(v) > 0 && v[0] == '"' {
		return fmt.Errorf("%s: invalid value for %s field %s: %s", invalidJSON, kind, fd.TextName(), v)
	}
	return nil
}

// wrappedKind is the kind of a wrapper type's value (google.protobuf.Int64Value: int64);
// wrapper is false for any other message.
func wrappedKind(md protoreflect.MessageDescriptor) (kind protoreflect.Kind, wrapper bool) {
	switch md.FullName() {
	case "google.protobuf.DoubleValue", "google.protobuf.FloatValue",
		"google.protobuf.Int64Value", "google.protobuf.UInt64Value",
		"google.protobuf.Int32Value", "google.protobuf.UInt32Value",
		"google.protobuf.BoolValue", "google.protobuf.StringValue", "google.protobuf.BytesValue":
		return md.Fields().ByName("value").Kind(), true
	}
	return 0, false
}

// refusal words protojson's refusal of body, a JSON value encoding/json has read. protojson
// names the field it was decoding, and for some refusals that is not the client's field:
// a wrapper type's inner "value" ({"enabled":1}: "invalid value for bool field value: 1"),
// none at all for a map, list or message of the wrong JSON type ("unexpected token 1"),
// and for a string escape it does not accept (a lone UTF-16 surrogate, which encoding/json
// takes) the bytes after the escape, which may be another field's value, a secret. So the
// member at fault is found by decoding the body's members one at a time, and the refusal
// is worded as the plain cases are, with the name of the field the client sent. A refusal
// that no member causes alone (a field named twice) keeps protojson's words, cleaned; an
// escape is never quoted.
func (m *jsonMarshaler) refusal(body json.RawMessage, md protoreflect.MessageDescriptor, err error) error {
	if msg := m.refusedMember(body, md); msg != "" {
		return errors.New(invalidJSON + ": " + msg)
	}
	if badEscape(err.Error()) {
		return errors.New(invalidJSON + ": invalid escape in string")
	}
	return errors.New(cleanDecodeError(err.Error()))
}

// badEscape reports protojson's error for an escape it does not accept. encoding/json has
// read the whole value, so that escape is a lone UTF-16 surrogate: protojson quotes the six
// bytes after it or, with fewer left, stops at "unexpected EOF".
func badEscape(protojsonError string) bool {
	return strings.Contains(protojsonError, "invalid escape code") || strings.HasSuffix(protojsonError, "unexpected EOF")
}

// refusedMember words the refusal of the first member of the JSON object body that
// protojson refuses on its own as a field of md, descending into a refused member that is
// a message or a list of messages; "" when no member is refused alone, or its refusal has
// no better wording than protojson's.
func (m *jsonMarshaler) refusedMember(body json.RawMessage, md protoreflect.MessageDescriptor) string {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
	if err != nil {
		return ""
	}
	fields := md.Fields()
	for name, value := range members(body) {
		fd := fields.ByJSONName(name)
		if fd == nil {
			fd = fields.ByTextName(name)
		}
		if fd == nil {
			// protojson discards an unknown member (a member named "" here), but reads it.
			if err := m.UnmarshalOptions.Unmarshal(memberAlone("", value), mt.New().Interface()); err != nil && badEscape(err.Error()) {
				return "invalid escape in string field " + name
			}
			continue
		}
		err = m.UnmarshalOptions.Unmarshal(memberAlone(fd.JSONName(), value), mt.New().Interface())
		if err == nil {
			continue
		}
		if inner := m.refusedInside(fd, value); inner != "" {
			return inner
		}
		return wordRefusal(fd, value, err.Error())
	}
	return ""
}

// members yields the members of the JSON object body in their order, and stops at the
// first that does not read (a body that is no object yields none).
func members(body json.RawMessage) iter.Seq2[string, json.RawMessage] {
	return func(yield func(string, json.RawMessage) bool) {
		dec := json.NewDecoder(bytes.NewReader(body))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			return
		}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return
			}
			name, _ := tok.(string)
			var value json.RawMessage
			if dec.Decode(&value) != nil || !yield(name, value) {
				return
			}
		}
	}
}

// memberAlone is the JSON object {name: value}.
func memberAlone(name string, value json.RawMessage) []byte {
	b := make([]byte, 0, len(name)+len(value)+5)
	b = append(append(append(b, `{"`...), name...), `":`...)
	return append(append(b, value...), '}')
}

// refusedInside words a refusal inside the value of a message field, or of a list of
// messages, whose own fields are then the ones to name.
func (m *jsonMarshaler) refusedInside(fd protoreflect.FieldDescriptor, value json.RawMessage) string {
	if fd.Kind() != protoreflect.MessageKind || fd.IsMap() || fd.Message().FullName().Parent() == "google.protobuf" {
		return ""
	}
	if !fd.IsList() {
		return m.refusedMember(value, fd.Message())
	}
	var items []json.RawMessage
	if json.Unmarshal(value, &items) != nil {
		return ""
	}
	for _, item := range items {
		if msg := m.refusedMember(item, fd.Message()); msg != "" {
			return msg
		}
	}
	return ""
}

// protojsonInvalidValue is protojson's type error, naming the field it was decoding: for a
// wrapper or a map's value, its inner field "value".
var protojsonInvalidValue = regexp.MustCompile(`(?s)^invalid value for (\S+) field \S+: (.*)$`)

// wordRefusal words protojson's refusal of one member, the value of field fd, naming fd.
func wordRefusal(fd protoreflect.FieldDescriptor, value json.RawMessage, protojsonError string) string {
	msg := protoPosition.ReplaceAllString(protojsonError, "")
	switch {
	case badEscape(msg):
		return "invalid escape in string field " + fd.TextName()
	case protojsonInvalidValue.MatchString(msg):
		sub := protojsonInvalidValue.FindStringSubmatch(msg)
		return fmt.Sprintf("invalid value for %s field %s: %s", sub[1], fd.TextName(), refusedValue(fd, value, sub[2]))
	}
	if token, ok := strings.CutPrefix(msg, "unexpected token "); ok {
		return fmt.Sprintf("invalid value for %s field %s: %s", jsonKind(fd, value), fd.TextName(), refusedValue(fd, value, token))
	}
	return ""
}

// refusedValue is the value to quote for protojson's quote of the token it refused: for
// an array or an object that is only its opening "[" or "{", so the field's whole value
// (compacted) is quoted instead, when it is the one refused ("lease_ttl_seconds": [] is
// "[]"). Inside a map's value protojson refused an element, not the map: its token stays.
func refusedValue(fd protoreflect.FieldDescriptor, value json.RawMessage, quoted string) string {
	if (quoted != "[" && quoted != "{") || fd.IsMap() {
		return quoted
	}
	var b bytes.Buffer
	if json.Compact(&b, value) != nil || !bytes.HasPrefix(b.Bytes(), []byte(quoted)) {
		return quoted
	}
	return b.String()
}

// jsonKind is what JSON a field takes where protojson found another token: an object for a
// map, a struct or a message; an array for a list; inside an array or an object given
// one, what each element or value takes.
func jsonKind(fd protoreflect.FieldDescriptor, value json.RawMessage) string {
	switch {
	case fd.IsList() && (len(value) == 0 || value[0] != '['):
		return "array"
	case fd.IsMap() && (len(value) == 0 || value[0] != '{'):
		return "object"
	case fd.IsMap():
		fd = fd.MapValue()
	}
	if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
		return fd.Kind().String()
	}
	if kind, wrapper := wrappedKind(fd.Message()); wrapper {
		return kind.String()
	}
	switch fd.Message().FullName() {
	case "google.protobuf.ListValue":
		return "array"
	case "google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.FieldMask":
		return "string"
	}
	return "object"
}
