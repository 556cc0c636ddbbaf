package edge

import (
	"net/url"
	"strings"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/input"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	storefrontv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/storefront/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The control characters of the issue's probe, in a key and in notes.
func TestDecoderAppliesTheInputPolicyToEveryStringField(t *testing.T) {
	m := newJSONMarshaler()
	for _, c := range []string{`\n`, `\u0000`, `\r`, `\u0001`, `\u001f`, `\u007f`, `\u0085`} {
		for _, tc := range []struct {
			body string
			into proto.Message
			want string
		}{
			{`{"key":"x` + c + `"}`, &licensingv1.DeleteLicenseRequest{}, "key must not contain control characters"},
			{`{"key":"x` + c + `","notes":"a"}`, &licensingv1.UpdateNotesRequest{}, "key must not contain control characters"},
			{`{"key":"k","instance_id":"` + c + `"}`, &activationsv1.ActivateLicenseRequest{}, "instance_id must not contain control characters"},
			{`{"product_id":"p","tier":"t` + c + `","service_ref":"s"}`, &storefrontv1.CreateMappingRequest{}, "tier must not contain control characters"},
		} {
			if c == `\u0000` {
				tc.want = strings.Replace(tc.want, "control", "NUL", 1)
			}
			err := m.NewDecoder(strings.NewReader(tc.body)).Decode(tc.into)
			if err == nil || err.Error() != tc.want {
				t.Errorf("decode %s: %v, want %q", tc.body, err, tc.want)
			}
		}
	}
	// Free text keeps its line breaks and tabs (licensing refuses a NUL in notes itself).
	notes := &licensingv1.UpdateNotesRequest{}
	if err := m.NewDecoder(strings.NewReader(`{"key":"k","notes":"line 1\nline 2\tend"}`)).Decode(notes); err != nil {
		t.Fatalf("notes with line breaks: %v", err)
	}
}

// Whatever the body, the decoder answers without panicking, and a request it accepts
// holds only strings the input policy accepts.
func FuzzDecodeRequestBody(f *testing.F) {
	for _, seed := range []string{
		`{"key":"ABCD-EFGH","instance_id":"laptop"}`,
		`{"key":"x\n"}`, `{"key":"x\u0000"}`, `{"key":"\u007f"}`, "{\"key\":\"\xff\xfe\"}",
		`{"key":"k","notes":"a\nb"}`, `{"key":"\ud800"}`, `{"key":"A"} {}`, `{"increment":"5"}`,
		`{"limits":{"users\n":1}}`, `{"limits":1,"key":"k"}`, `{"key":"\ud800","notes":"secret"}`, `[]`, `null`, ``, `{"key":{"nested":1}}`,
	} {
		f.Add(seed)
	}
	m := newJSONMarshaler()
	f.Fuzz(func(t *testing.T, body string) {
		for _, into := range []proto.Message{&activationsv1.ActivateLicenseRequest{}, &licensingv1.UpdateNotesRequest{}, &licensingv1.IssueLicenseRequest{}, &storefrontv1.CreateMappingRequest{}} {
			if err := m.NewDecoder(strings.NewReader(body)).Decode(into); err != nil {
				continue
			}
			into.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
				if fd.Kind() != protoreflect.StringKind || fd.IsList() {
					return true
				}
				if p := input.FieldCheck(fd.Name())(v.String()); p != input.OK {
					t.Fatalf("accepted %s with %s %q (%s)", body, fd.Name(), v.String(), p)
				}
				return true
			})
		}
	})
}

// Whatever the URL, the policy answers without panicking, and a URL it lets through has a
// path and query values the input policy accepts.
func FuzzURLPolicy(f *testing.F) {
	for _, seed := range []string{
		"/v1/export-license/%ff%fe", "/v1/export-license/x%0A", "/portal/%ff%fe", "/v1/list-licenses?issued_to=%ff",
		"/v1/list-licenses?%ff=1", "/v1/list-licenses?issued_to=a%00", "/v1/release/12?x=%7f", "/v1/export-license/ключ",
		"/v1/list-licenses?issued_to=Zo%C3%AB&limit=10", "/v1/list-licenses?a=%zz",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.ParseRequestURI(raw)
		if err != nil {
			return
		}
		if urlProblem(u.Path, u.RawQuery) != "" {
			return
		}
		if p := input.Identifier(u.Path); p != input.OK {
			t.Fatalf("let through path %q (%s)", u.Path, p)
		}
		if q, err := url.ParseQuery(u.RawQuery); err == nil {
			if err := input.CheckValues(q); err != nil {
				t.Fatalf("let through query %q: %v", u.RawQuery, err)
			}
		}
	})
}
