package edge

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/keyhouse/keyhouse/gateway/internal/flatjson/flatjsontest"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	"google.golang.org/protobuf/proto"
)

func randomLeaseAnswer(r *rand.Rand) *activationsv1.CreateLeaseResponse {
	m := &activationsv1.CreateLeaseResponse{Lease: randomString(r), ExpiresAt: randomTimestamp(r), RenewAfter: randomTimestamp(r)}
	if r.IntN(3) == 0 {
		m.Token = proto.String(randomString(r))
	}
	return m
}

// The lease answer's encoder writes exactly protojson's bytes, or leaves the message to
// the generic path when protojson would refuse it: no byte of POST /v1/leases's answer
// may change.
func TestLeaseAnswersMatchProtojson(t *testing.T) {
	m := newJSONMarshaler()
	generic := protoMarshaler(m)
	r := rand.New(rand.NewPCG(22, 2026))
	messages := []proto.Message{
		&activationsv1.CreateLeaseResponse{}, &activationsv1.CreateLeaseResponse{Token: proto.String("")},
		&activationsv1.CreateLeaseResponse{Lease: "eyJhbGciOiJFZERTQSJ9.e30.c2ln", ExpiresAt: sampleTimestamps[2], RenewAfter: sampleTimestamps[3]},
	}
	for _, s := range sampleStrings {
		messages = append(messages, &activationsv1.CreateLeaseResponse{Lease: s, Token: proto.String(s)})
	}
	for _, ts := range sampleTimestamps {
		messages = append(messages, &activationsv1.CreateLeaseResponse{ExpiresAt: ts, RenewAfter: ts})
	}
	for range 20000 {
		messages = append(messages, randomLeaseAnswer(r))
	}
	fast, refused := 0, 0
	for _, msg := range messages {
		want, wantErr := generic.marshalGeneric(msg)
		got, ok := appendHotAnswer(nil, msg)
		if !ok {
			refused++
			continue
		}
		fast++
		if wantErr != nil {
			t.Fatalf("protojson refuses %v (%v) but the lease encoder wrote %s", msg, wantErr, got)
		}
		if string(got) != string(want) {
			t.Fatalf("lease encoder wrote\n%s\nprotojson\n%s\nfor %v", got, want, msg)
		}
		if viaMarshal, err := m.Marshal(msg); err != nil || string(viaMarshal) != string(want) {
			t.Fatalf("Marshal wrote %s, %v; want %s", viaMarshal, err, want)
		}
	}
	if fast < len(messages)/3 || refused == 0 {
		t.Fatalf("%d of %d messages took the lease encoder, %d the generic path", fast, len(messages), refused)
	}
}

// leaseRequestBodies are lease request bodies: the plain ones the fast decoder takes and
// the near misses it must leave to the generic path.
var leaseRequestBodies = []string{
	`{"key":"KH-ABCD","token":"act_x"}`, `{"token":"act_x","key":"KH-ABCD"}`, `{"key":"K","instance_id":"pc"}`,
	`{"key":"K","instanceId":"pc"}`, `{"instance_id":"a","instanceId":"b"}`, `{"key":"K","token":"t","nonce":"n-1"}`,
	`{"key":"K","token":"t","nonce":""}`, `{"nonce":"a","nonce":"b"}`, `{"token":"a","token":"b"}`,
	`{"key":"K","token":"t","components":{"cpu":"c"}}`, `{"key":"K","token":"t","components":{}}`,
	`{"key":"K","token":"t","nonce":null}`, `{"key":"K","token":5}`, `{"key":"K","token":"t","other":"x"}`,
	`{"key":"K","token":" t "}`, `{"key":"K","token":"t\u0000"}`, `{"key":"K","nonce":"` + strings.Repeat("n", 200) + `"}`,
	`{"key":"K","token":"é"}`, "{\"key\":\"K\",\"token\":\"\xff\"}", `{}`, `{"key":"K","token":"t",}`,
}

var leaseRequestFragments = []string{
	`{`, `}`, `"key"`, `"token"`, `"instance_id"`, `"instanceId"`, `"nonce"`, `"components"`, `"other"`,
	`:`, `,`, ` `, `"A"`, `"act_1"`, `""`, `5`, `null`, `{"cpu":"c"}`, `"\u0001"`, "\"\xff\"", `"é"`,
}

// The lease request's decoder answers every body exactly as the generic path does: the
// same request or the same error wording.
func TestLeaseRequestsDecodeAsGeneric(t *testing.T) {
	m := protoMarshaler(newJSONMarshaler())
	hot := 0
	for _, body := range leaseRequestBodies {
		if checkDecodesAsGeneric(t, m, body) {
			hot++
		}
	}
	for body := range flatjsontest.Bodies(22, 20000, 12, leaseRequestFragments) {
		if checkDecodesAsGeneric(t, m, body) {
			hot++
		}
	}
	if hot < 10 {
		t.Fatalf("only %d bodies took the fast decoder: the comparison proves nothing", hot)
	}
}

func FuzzLeaseRequestDecode(f *testing.F) {
	for _, body := range leaseRequestBodies {
		f.Add(body)
	}
	m := protoMarshaler(newJSONMarshaler())
	f.Fuzz(func(t *testing.T, body string) {
		checkDecodesAsGeneric(t, m, body)
	})
}
