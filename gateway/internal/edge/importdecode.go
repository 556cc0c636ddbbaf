package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"

	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// An import's items are data exported from another system, and docs/import.md promises
// that a bad item is reported on its own while the others import. An item whose field has
// the wrong JSON type ("key": 12345678, "limits": []) is one the decoder would refuse for
// the whole call, so the decoder takes such items out (each becomes an empty item, which
// licensing answers invalid, so every other item keeps its index, in the answer and in a
// 409's licenses[i]) and the import's client puts the reason, naming the field, into the
// answer of each. What is wrong with the call itself (no licenses array, a field
// unknown, a control character anywhere) stays a 400 for the whole call.

// mistypedImportItem is an item the decoder took out of an import.
type mistypedImportItem struct {
	key     string // the key as given, when it is a string
	problem string // "<field> must be <JSON type>"
}

// mistypedImports holds, from the decoding of an import's body to the call of
// ImportLicenses with the request decoded (the generated handler makes that call
// right after decoding, with the same message), the items the decoder took out of it.
var mistypedImports sync.Map // *licensingv1.ImportLicensesRequest → map[int]mistypedImportItem

// decodeImport decodes an import's body; the items whose fields have the wrong JSON type
// go to mistypedImports.
func (m *jsonMarshaler) decodeImport(body []byte, req *licensingv1.ImportLicensesRequest) error {
	err := m.decodeGeneric(body, req)
	if err == nil {
		return nil
	}
	patched, mistyped := m.withoutMistypedItems(body)
	if len(mistyped) == 0 {
		return err
	}
	proto.Reset(req)
	if err := m.decodeGeneric(patched, req); err != nil {
		return err
	}
	mistypedImports.Store(req, mistyped)
	return nil
}

// withoutMistypedItems returns body with every item of licenses that has a field of the
// wrong JSON type replaced by {}, and those items by index; none when body is not an
// object with a licenses array.
func (m *jsonMarshaler) withoutMistypedItems(body []byte) ([]byte, map[int]mistypedImportItem) {
	md := (&licensingv1.ImportedLicense{}).ProtoReflect().Descriptor()
	mistyped := map[int]mistypedImportItem{}
	var out bytes.Buffer
	out.WriteByte('{')
	first := true
	for name, value := range members(body) {
		if !first {
			out.WriteByte(',')
		}
		first = false
		nameJSON, _ := json.Marshal(name)
		out.Write(nameJSON)
		out.WriteByte(':')
		var items []json.RawMessage
		if name != "licenses" || json.Unmarshal(value, &items) != nil {
			out.Write(value)
			continue
		}
		out.WriteByte('[')
		for i, item := range items {
			if i > 0 {
				out.WriteByte(',')
			}
			if fd := m.mistypedField(item, md); fd != nil {
				var keyAsGiven struct{ Key any }
				_ = json.Unmarshal(item, &keyAsGiven)
				key, _ := keyAsGiven.Key.(string)
				mistyped[i] = mistypedImportItem{key: key, problem: fd.TextName() + " must be " + jsonTypeName(fd, nil)}
				item = json.RawMessage("{}")
			}
			out.Write(item)
		}
		out.WriteByte(']')
	}
	out.WriteByte('}')
	return out.Bytes(), mistyped
}

// mistypedField is the first field of the JSON object item that protojson refuses alone
// for its JSON type, or nil. An unknown member, or one refused for another reason (an
// escape it does not read), is no item's problem: the whole call's refusal words it.
func (m *jsonMarshaler) mistypedField(item json.RawMessage, md protoreflect.MessageDescriptor) protoreflect.FieldDescriptor {
	fields := md.Fields()
	for name, value := range members(item) {
		fd := fields.ByJSONName(name)
		if fd == nil {
			fd = fields.ByTextName(name)
		}
		if fd == nil {
			continue
		}
		err := m.UnmarshalOptions.Unmarshal(memberAlone(fd.JSONName(), value), &licensingv1.ImportedLicense{})
		if err != nil && !badEscape(err.Error()) {
			return fd
		}
	}
	return nil
}

// jsonTypeName is what JSON fd takes, with its article: "a string", "an object".
func jsonTypeName(fd protoreflect.FieldDescriptor, value json.RawMessage) string {
	switch kind := jsonKind(fd, value); kind {
	case "string":
		return "a string"
	case "object", "array":
		return "an " + kind
	case "bool":
		return "true or false"
	default:
		return "a number"
	}
}

// mistypedImportsAnswered is the licensing client of the REST routes: its ImportLicenses
// answers the items the decoder took out of the request with their reasons.
type mistypedImportsAnswered struct {
	licensingv1.LicensingServiceClient
}

func (c mistypedImportsAnswered) ImportLicenses(ctx context.Context, req *licensingv1.ImportLicensesRequest, opts ...grpc.CallOption) (*licensingv1.ImportLicensesResponse, error) {
	taken, _ := mistypedImports.LoadAndDelete(req)
	resp, err := c.LicensingServiceClient.ImportLicenses(ctx, req, opts...)
	if err != nil || taken == nil {
		return resp, err
	}
	results := resp.GetResults()
	for i, item := range taken.(map[int]mistypedImportItem) {
		// Licensing answered the empty item invalid (it has no key) and counted it so.
		if i < len(results) && results[i].GetResult() == "invalid" {
			results[i].Key, results[i].Error = item.key, proto.String(item.problem)
		}
	}
	return resp, nil
}
