package edge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/keyhouse/keyhouse/pkg/input"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
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
//     cleaned of parser positions.
//
// An empty body is io.EOF, which the generated handlers treat as an empty request.
func (m *jsonMarshaler) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error {
		body, err := io.ReadAll(r)
		if err != nil {
			// The body cap (413) and a stalled client (408) are flagged on the request
			// and answered by the error handler. The error's own text names addresses
			// ("read tcp 10.0.0.1:8080->…"), so it never reaches the client.
			if errors.Is(err, errBadGzip) {
				return errors.New("Invalid gzip body")
			}
			return errors.New("Request body could not be read")
		}
		return m.decode(body, v)
	})
}

func (m *jsonMarshaler) decode(body []byte, v any) error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return io.EOF
	}
	if done, err := decodeHotRequest(body, v); done {
		return err
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
		if strings.HasSuffix(err.Error(), "unexpected EOF") {
			// encoding/json read the whole value, so protojson stopped inside a string
			// escape it does not accept: a lone UTF-16 surrogate.
			return errors.New(invalidJSON + ": invalid escape in string")
		}
		return errors.New(cleanDecodeError(err.Error()))
	}
	return checkStrings(msg.ProtoReflect())
}

// freeTextFields are the request fields that may hold line breaks and tabs; every other
// string field names something (a key, an id, a version, an email) and is an identifier
// under the input policy (pkg/input).
var freeTextFields = map[protoreflect.Name]bool{"notes": true, "release_notes": true, "password": true}

// trimmedFields are the request fields the services compare after trimming surrounding
// white space (api.md: check-update's product_id, whitespace-insensitively): white space
// at their ends is not refused.
var trimmedFields = map[protoreflect.Name]bool{"product_id": true}

// checkStrings applies the input policy to every string field of a decoded request,
// nested messages included (not the free-form google.protobuf values, whose strings
// protojson has already checked for UTF-8): a control character in a key reached the
// services as a lookup of something that cannot exist, and broke the answer on its way
// back. The error names the field as the client sent it.
func checkStrings(m protoreflect.Message) error {
	if m.Descriptor().FullName().Parent() == "google.protobuf" {
		return nil
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		check := input.Identifier
		switch {
		case freeTextFields[fd.Name()]:
			check = input.Text
		case trimmedFields[fd.Name()]:
			check = input.TrimmedIdentifier
		}
		switch {
		case fd.IsMap():
			return true
		case fd.IsList():
			list := v.List()
			for i := 0; i < list.Len() && err == nil; i++ {
				err = checkValueOf(fd, list.Get(i), check)
			}
		default:
			err = checkValueOf(fd, v, check)
		}
		return err == nil
	})
	return err
}

func checkValueOf(fd protoreflect.FieldDescriptor, v protoreflect.Value, check func(string) input.Problem) error {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if p := check(v.String()); p != input.OK {
			return errors.New(input.Describe(string(fd.Name()), p))
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return checkStrings(v.Message())
	}
	return nil
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
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return nil // not an object: protojson words that refusal
	}
	fields := md.Fields()
	for name, value := range obj {
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
