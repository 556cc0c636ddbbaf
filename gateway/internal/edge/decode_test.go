package edge

import (
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"google.golang.org/protobuf/proto"
)

func TestDecoderRefusesWhatTheBlackBoxProbeFoundWithOneWording(t *testing.T) {
	cases := []struct {
		name, body string
		into       proto.Message
		want       string
	}{
		{"trailing garbage", `{"key":"A"} garbage`, &activationsv1.TrackUsageRequest{}, "Invalid JSON body"},
		{"two objects", `{"key":"A"}{"key":"B"}`, &activationsv1.TrackUsageRequest{}, "Invalid JSON body"},
		{"string for a double", `{"increment":"5"}`, &activationsv1.TrackUsageRequest{}, `Invalid JSON body: invalid value for double field increment: "5"`},
		{"string for an int32", `{"id":"54"}`, &releasesv1.UnpublishReleaseRequest{}, `Invalid JSON body: invalid value for int32 field id: "54"`},
		{"lone surrogate", `{"key":"\ud800"}`, &activationsv1.TrackUsageRequest{}, "Invalid JSON body: invalid escape in string field key"},
		{"raw control byte", "{\"key\":\"a\x01\"}", &activationsv1.TrackUsageRequest{}, `Invalid JSON body: invalid character '\x01' in string literal`},
		{"truncated", `{"key":"a",`, &activationsv1.TrackUsageRequest{}, "Invalid JSON body: unexpected end of input"},
		{"wrong type, field named as sent", `{"instance_id":7}`, &activationsv1.ActivateLicenseRequest{}, "Invalid JSON body: invalid value for string field instance_id: 7"},
		{"invalid UTF-8", "{\"key\":\"\xff\"}", &activationsv1.TrackUsageRequest{}, "Invalid JSON body: invalid UTF-8 in string"},
		{"not an object", `[1]`, &activationsv1.TrackUsageRequest{}, "Invalid JSON body: unexpected token ["},
	}
	m := newJSONMarshaler()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := m.NewDecoder(strings.NewReader(tc.body)).Decode(tc.into)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("decode %q: %v, want %q", tc.body, err, tc.want)
			}
			// The error handler leaves the decoder's wording as it is.
			if got := cleanDecodeError(err.Error()); got != tc.want {
				t.Fatalf("error handler rewrote %q to %q", tc.want, got)
			}
		})
	}
}

// A wrapper-typed number (google.protobuf.Int64Value) takes a string no more than a plain
// one: api.md says number for both, and the refusal is worded the same.
func TestDecoderRefusesAStringForAWrapperTypedNumberAsForAPlainOne(t *testing.T) {
	m := newJSONMarshaler()
	for _, tc := range []struct {
		body string
		into proto.Message
		want string
	}{
		{`{"lease_ttl_seconds":"3600"}`, &activationsv1.PutLeasePolicyRequest{}, `Invalid JSON body: invalid value for int32 field lease_ttl_seconds: "3600"`},
		{`{"retire_after_seconds":"3600"}`, &activationsv1.RotateLeaseKeysRequest{}, `Invalid JSON body: invalid value for int64 field retire_after_seconds: "3600"`},
		{`{"expire_old_after_seconds":"3600"}`, &eventsv1.RollWebhookEndpointSecretRequest{}, `Invalid JSON body: invalid value for int64 field expire_old_after_seconds: "3600"`},
		{`{"max_activations":"5"}`, &licensingv1.UpdateLicenseTermsRequest{}, ""}, // a google.protobuf.Value: the service words it
	} {
		err := m.NewDecoder(strings.NewReader(tc.body)).Decode(tc.into)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || err.Error() != tc.want) {
			t.Errorf("decode %s: %v, want %q", tc.body, err, tc.want)
		}
	}
	var roll eventsv1.RollWebhookEndpointSecretRequest
	if err := m.NewDecoder(strings.NewReader(`{"expire_old_after_seconds":3600}`)).Decode(&roll); err != nil || roll.GetExpireOldAfterSeconds().GetValue() != 3600 {
		t.Fatalf("a number: %v, %v", err, &roll)
	}
	if err := m.NewDecoder(strings.NewReader(`{"expire_old_after_seconds":null}`)).Decode(&roll); err != nil || roll.ExpireOldAfterSeconds != nil {
		t.Fatalf("null: %v, %v", err, &roll)
	}
}

// Of two members that give a string for a number, the first in the body is named, every
// time: the check walked a map, and which one it named varied from request to request.
func TestOfTwoStringNumbersTheFirstInTheBodyIsNamed(t *testing.T) {
	m := newJSONMarshaler()
	for _, tc := range []struct{ body, want string }{
		{`{"renew_after_seconds":"5","lease_ttl_seconds":"3600"}`, "renew_after_seconds"},
		{`{"lease_ttl_seconds":"3600","renew_after_seconds":"5"}`, "lease_ttl_seconds"},
	} {
		for range 50 {
			err := m.NewDecoder(strings.NewReader(tc.body)).Decode(&activationsv1.PutLeasePolicyRequest{})
			if err == nil || !strings.Contains(err.Error(), "int32 field "+tc.want+":") {
				t.Fatalf("decode %s: %v, want the error to name %s", tc.body, err, tc.want)
			}
		}
	}
}

// A wrong type in a wrapper, a map, a list or a message, and an escape protojson cannot
// read, name the field the client sent (protojson names the wrapper's "value", or
// nothing), and never quote another part of the body.
func TestDecoderNamesTheFieldOfEveryTypeError(t *testing.T) {
	m := newJSONMarshaler()
	for _, tc := range []struct {
		body string
		into proto.Message
		want string
	}{
		{`{"id":"we_1","enabled":1}`, &eventsv1.UpdateWebhookEndpointRequest{}, "invalid value for bool field enabled: 1"},
		{`{"url":5}`, &eventsv1.UpdateWebhookEndpointRequest{}, "invalid value for string field url: 5"},
		{`{"description":true}`, &eventsv1.CreateWebhookEndpointRequest{}, "invalid value for string field description: true"},
		{`{"expire_old_after_seconds":1.5}`, &eventsv1.RollWebhookEndpointSecretRequest{}, "invalid value for int64 field expire_old_after_seconds: 1.5"},
		{`{"events":1}`, &eventsv1.UpdateWebhookEndpointRequest{}, "invalid value for array field events: 1"},
		{`{"events":"*"}`, &eventsv1.CreateWebhookEndpointRequest{}, `invalid value for array field events: "*"`},
		{`{"product_id":"p","limits":1}`, &licensingv1.IssueLicenseRequest{}, "invalid value for object field limits: 1"},
		{`{"key":"K","limits":[]}`, &licensingv1.UpdateLicenseTermsRequest{}, "invalid value for object field limits: []"},
		// The whole array or object refused is quoted, not its opening token.
		{`{"lease_ttl_seconds":[ ]}`, &activationsv1.PutLeasePolicyRequest{}, "invalid value for int32 field lease_ttl_seconds: []"},
		{`{"lease_ttl_seconds":{"a": 1}}`, &activationsv1.PutLeasePolicyRequest{}, `invalid value for int32 field lease_ttl_seconds: {"a":1}`},
		{`{"key":"K","components":1}`, &activationsv1.CreateLeaseRequest{}, "invalid value for object field components: 1"},
		{`{"key":"K","components":{"cpu":1}}`, &activationsv1.CreateLeaseRequest{}, "invalid value for string field components: 1"},
		{`{"licenses":{}}`, &licensingv1.ImportLicensesRequest{}, "invalid value for array field licenses: {}"},
		{`{"licenses":[1]}`, &licensingv1.ImportLicensesRequest{}, "invalid value for object field licenses: 1"},
		// A lone surrogate, in any member: the member named, nothing after it quoted.
		{`{"key":"\ud800","token":"secret-token"}`, &activationsv1.CreateLeaseRequest{}, "invalid escape in string field key"},
		{`{"token":"secret-token","instance_id":"a\udc00","key":"K"}`, &activationsv1.CreateLeaseRequest{}, "invalid escape in string field instance_id"},
		{`{"key":"K","components":{"cpu":"\ud800"},"token":"secret-token"}`, &activationsv1.CreateLeaseRequest{}, "invalid escape in string field components"},
		{`{"licenses":[{"key":"\ud800","issued_to":"secret"}]}`, &licensingv1.ImportLicensesRequest{}, "invalid escape in string field key"},
		{`{"unknown":"\ud800","key":"secret-key"}`, &activationsv1.CreateLeaseRequest{}, "invalid escape in string field unknown"},
		// No one member to name: still nothing quoted.
		{`{"\ud800":"x","key":"secret-key"}`, &activationsv1.CreateLeaseRequest{}, "invalid escape in string"},
	} {
		err := m.NewDecoder(strings.NewReader(tc.body)).Decode(tc.into)
		if want := "Invalid JSON body: " + tc.want; err == nil || err.Error() != want {
			t.Errorf("decode %s: %v, want %q", tc.body, err, want)
			continue
		}
		if got := cleanDecodeError(err.Error()); got != err.Error() {
			t.Errorf("error handler rewrote %q to %q", err, got)
		}
	}
}

func TestDecoderAcceptsOneValueWithSurroundingSpaceAndAnEmptyBody(t *testing.T) {
	m := newJSONMarshaler()
	var req activationsv1.TrackUsageRequest
	if err := m.NewDecoder(strings.NewReader("\n {\"key\":\"A\",\"increment\":5} \r\n")).Decode(&req); err != nil {
		t.Fatal(err)
	}
	if req.GetKey() != "A" || req.GetIncrement() != 5 {
		t.Fatalf("decoded %v", &req)
	}
	if err := m.NewDecoder(strings.NewReader(" ")).Decode(&req); !errors.Is(err, io.EOF) {
		t.Fatalf("empty body: %v, want io.EOF (an empty request)", err)
	}
}

func TestErrorMessagesAreCappedOnARuneBoundary(t *testing.T) {
	short := "Metric not allowed: users"
	if capMessage(short) != short {
		t.Fatal("a short message changed")
	}
	got := capMessage("Metric not allowed: " + strings.Repeat("é", 1<<19))
	if utf8.RuneCountInString(got) != maxErrorRunes+1 || !utf8.ValidString(got) || !strings.HasSuffix(got, "é…") {
		t.Fatalf("capped to %d runes: %.40q", utf8.RuneCountInString(got), got)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) {
	return 0, errors.New("read tcp 10.0.0.1:8080->10.0.0.2:5000: connection reset by peer")
}

func TestDecoderNeverEchoesTheConnectionsReadError(t *testing.T) {
	var req activationsv1.TrackUsageRequest
	err := newJSONMarshaler().NewDecoder(failingReader{}).Decode(&req)
	if err == nil || err.Error() != "Request body could not be read" {
		t.Fatalf("read failure: %v", err)
	}
}
