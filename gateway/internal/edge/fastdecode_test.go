package edge

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/keyhouse/keyhouse/gateway/internal/flatjson/flatjsontest"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"google.golang.org/protobuf/proto"
)

// hotRequestBodies are bodies of verify-license, check-update, leases and activate- and
// deactivate-license, the plain ones the hot decoder takes and every near miss it must
// leave to the generic path.
var hotRequestBodies = []string{
	`{"key":"KH-ABCD-EFGH"}`, `{}`, ` { "key" : "A" } `, "{\n\t\"key\":\"A\"\r\n}", `{"key":""}`,
	`{"key":"A","key":"B"}`, `{"key":"A",}`, `{"key":"A"`, `{"key":"A"} x`, `{"key":"A"}{}`,
	`{"key":5}`, `{"key":null}`, `{"key":true}`, `{"key":["A"]}`, `{"key":{"a":"b"}}`,
	`{"key":"a\nb"}`, `{"key":"a\\nb"}`, `{"key":"\u0041"}`, `{"key":"é"}`, "{\"key\":\"\xff\"}",
	"{\"key\":\"a\x01\"}", "{\"key\":\"a\x7f\"}", `{"key":" A "}`, `{"KEY":"A"}`, `{"other":"x"}`,
	`{"key":"A","other":"x"}`, `[]`, `"key"`, `null`, `{"key":"A"}}`, `{,"key":"A"}`, `{"key""A"}`,
	`{"key":"A" "x":"y"}`, `{"key" :"A",  "channel":"beta"}`, `{ }`,
	`{"key":"K","product_id":"app","channel":"stable","platform":"linux","current_version":"1.0.0"}`,
	`{"key":"K","productId":"app","currentVersion":"1.0.0"}`, `{"product_id":"a","productId":"b"}`,
	`{"product_id":" app "}`, `{"product_id":"app\t"}`, `{"channel":"beta","channel":"beta"}`,
	`{"current_version":"1","currentVersion":"2"}`, `{"platform":5}`, `{"platform":"5"}`,
	`{"key":"<>&'"}`, `{"key":"` + strings.Repeat("A", 5000) + `"}`, `{"key":"A"}` + "\u00a0",
	`{"key":"K","instance_id":"host-1"}`, `{"key":"K","instanceId":"host-1"}`, `{"instance_id":"a","instanceId":"b"}`,
	`{"instance_id":"a","instance_id":"a"}`, `{"instance_id":" a"}`, `{"instance_id":5}`,
	`{"key":"K","token":"tok_1"}`, `{"token":"a","token":"b"}`, `{"token":""}`, `{"key":"K","token":null}`,
}

var hotRequestFragments = []string{
	`{`, `}`, `"key"`, `"product_id"`, `"productId"`, `"channel"`, `"platform"`, `"current_version"`,
	`"currentVersion"`, `"other"`, `:`, `,`, ` `, "\n", `"A"`, `"KH-1"`, `""`, `5`, `null`, `"a\"b"`,
	`"\u0001"`, "\"\x01\"", `"é"`, "\"\xff\"", `[`, `]`, `"\ud800"`, `"instance_id"`, `"instanceId"`, `"token"`,
}

func hotRequestTargets() []func() proto.Message {
	return []func() proto.Message{
		func() proto.Message { return &licensingv1.VerifyLicenseRequest{} },
		func() proto.Message { return &releasesv1.CheckUpdateRequest{} },
		func() proto.Message { return &activationsv1.CreateLeaseRequest{} },
		func() proto.Message { return &activationsv1.ActivateLicenseRequest{} },
		func() proto.Message { return &activationsv1.DeactivateLicenseRequest{} },
	}
}

// checkDecodesAsGeneric fails unless decoding body through the REST decoder gives the
// generic path's message and error, byte for byte.
func checkDecodesAsGeneric(t *testing.T, m *jsonMarshaler, body string) (hot bool) {
	t.Helper()
	for _, newMessage := range hotRequestTargets() {
		want, got := newMessage(), newMessage()
		trimmed := bytes.TrimSpace([]byte(body))
		var wantErr error = io.EOF
		if len(trimmed) > 0 {
			wantErr = m.decodeGeneric(trimmed, want)
		}
		gotErr := m.NewDecoder(strings.NewReader(body)).Decode(got)
		if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
			t.Fatalf("decode %q into %T: error %v, the generic path's %v", body, got, gotErr, wantErr)
		}
		if wantErr == nil && !proto.Equal(want, got) {
			t.Fatalf("decode %q: %v, the generic path's %v", body, got, want)
		}
		if done, _ := decodeHotRequest(trimmed, newMessage()); done && len(trimmed) > 0 {
			hot = true
		}
	}
	return hot
}

// The hot routes' decoder answers every body exactly as the generic path does: the same
// request or the same error wording (no answer byte of these routes may change).
func TestHotRequestsDecodeAsGeneric(t *testing.T) {
	m := protoMarshaler(newJSONMarshaler())
	hot := 0
	for _, body := range hotRequestBodies {
		if checkDecodesAsGeneric(t, m, body) {
			hot++
		}
	}
	for body := range flatjsontest.Bodies(8, 20000, 12, hotRequestFragments) {
		if checkDecodesAsGeneric(t, m, body) {
			hot++
		}
	}
	if hot < 10 {
		t.Fatalf("only %d bodies took the hot decoder: the comparison proves nothing", hot)
	}
}

func FuzzHotRequestDecode(f *testing.F) {
	for _, body := range hotRequestBodies {
		f.Add(body)
	}
	m := protoMarshaler(newJSONMarshaler())
	f.Fuzz(func(t *testing.T, body string) {
		checkDecodesAsGeneric(t, m, body)
	})
}

func BenchmarkDecodeVerifyLicenseRequest(b *testing.B) {
	m := protoMarshaler(newJSONMarshaler())
	body := []byte(`{"key":"KH-7Q2M-9XKD-4TRW-HJ6P"}`)
	b.Run("hot", func(b *testing.B) {
		for b.Loop() {
			_ = m.decode(body, &licensingv1.VerifyLicenseRequest{})
		}
	})
	b.Run("generic", func(b *testing.B) {
		for b.Loop() {
			_ = m.decodeGeneric(body, &licensingv1.VerifyLicenseRequest{})
		}
	})
}

// What admission control takes for check-update's question (checkUpdateQuestionOf, from the
// body cut before its last byte) is what the handler asks the cache about after decoding
// the whole body, or the handler refuses the body: a request let through as answered
// from memory never reaches releases about another question.
func TestTheQuestionOfACutBodyIsTheQuestionOfTheWholeOne(t *testing.T) {
	m := protoMarshaler(newJSONMarshaler())
	taken := 0
	check := func(body string) {
		if len(body) < 2 {
			return
		}
		peeked, ok := checkUpdateQuestionOf([]byte(body[:len(body)-1]))
		if !ok {
			return
		}
		taken++
		decoded := &releasesv1.CheckUpdateRequest{}
		if err := m.NewDecoder(strings.NewReader(body)).Decode(decoded); err != nil {
			return // refused: 400, from no cache
		}
		if peeked.GetKey() != decoded.GetKey() || checkUpdateQuestion(peeked) != checkUpdateQuestion(decoded) {
			t.Fatalf("%q: admission control takes key %q, question %q; the handler asks about %q, %q",
				body, peeked.GetKey(), checkUpdateQuestion(peeked), decoded.GetKey(), checkUpdateQuestion(decoded))
		}
	}
	for _, body := range hotRequestBodies {
		check(body)
		check(body + "\n")
	}
	for body := range flatjsontest.Bodies(9, 20000, 12, hotRequestFragments) {
		check(body)
	}
	t.Logf("%d bodies taken as questions", taken)
	if taken < 10 {
		t.Fatalf("only %d bodies were taken as questions: the comparison proves nothing", taken)
	}
	for _, c := range []struct {
		cut string
		ok  bool
	}{
		{`{"key":"K","product_id":"app","current_version":"1.0.0"`, true},
		{`{"key":"K","productId":"app","currentVersion":"1.0.0"}`, true}, // the last byte was white space
		{`{"key":"K","product_id":"app","productId":"app"`, false},       // named twice: 400
		{`{"key":"K","product_id":"app","beta":true`, false},             // not the plain body
		{`{"key":"K","product_id":"app\u0020"`, false},
		{`{"key":"K","product_id":"app`, false},
		{``, false},
	} {
		if _, ok := checkUpdateQuestionOf([]byte(c.cut)); ok != c.ok {
			t.Errorf("%s: taken %v; want %v", c.cut, ok, c.ok)
		}
	}
}
