package edge

import (
	"bytes"
	"encoding/json"
	"io"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"
)

// jsonMarshaler is the one JSON shape of the REST surface: proto field names as declared
// (api.md's names, snake_case or camelCase), every documented field present, null for an
// unset message field ("… or null"), fields in declaration order, compact output.
type jsonMarshaler struct {
	runtime.JSONPb
}

func newJSONMarshaler() runtime.Marshaler {
	return &runtime.HTTPBodyMarshaler{Marshaler: &jsonMarshaler{JSONPb: runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
	}}}
}

// Marshal compacts protojson's output: protojson deliberately varies its whitespace
// between builds, and clients compare bodies byte for byte.
func (m *jsonMarshaler) Marshal(v any) ([]byte, error) {
	if out, ok := appendHotAnswer(make([]byte, 0, 256), v); ok {
		return out, nil
	}
	return m.marshalGeneric(v)
}

// marshalGeneric is protojson's answer, compacted: the reference appendHotAnswer matches.
func (m *jsonMarshaler) marshalGeneric(v any) ([]byte, error) {
	out, err := m.JSONPb.Marshal(v)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, out); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// NewEncoder keeps streaming writes on the same compact path.
func (m *jsonMarshaler) NewEncoder(w io.Writer) runtime.Encoder {
	return runtime.EncoderFunc(func(v any) error {
		b, err := m.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	})
}
