package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// grpcAnswer is a gRPC call's outcome as REST would write it: the HTTP status of its
// code and its message, so the two doors' answers compare directly.
func grpcAnswer(err error) string {
	if err == nil {
		return "200"
	}
	st := status.Convert(err)
	return fmt.Sprintf("%s %s", st.Code(), st.Message())
}

// restAnswer is a REST answer's status and "error" (the edge's error body).
func restAnswer(t *testing.T, r *Response) string {
	t.Helper()
	if r.Status == 200 {
		return "200"
	}
	var body struct{ Error string }
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatalf("%d %s: %v", r.Status, r.Body, err)
	}
	return fmt.Sprintf("%d %s", r.Status, body.Error)
}

func grpcCtx(t *testing.T, kv ...string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// A direct gRPC caller (an internal service, another team's backend) gets the input policy
// REST applies, with the same words: a control character in an identifier is refused
// before anything is stored, so no license, release or seat exists that REST cannot name
// (a seat like this one filled a 1-seat license that only a gRPC call could free).
func TestDirectGRPCCallsGetRESTsInputPolicy(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	adm, an := admin(t, s), anon(t, s)
	lic := licensingv1.NewLicensingServiceClient(dialService(t, s, "LICENSING_ADDR"))
	act := activationsv1.NewActivationsServiceClient(dialService(t, s, "ACTIVATIONS_ADDR"))
	rel := releasesv1.NewReleasesServiceClient(dialService(t, s, "RELEASES_ADDR"))
	asAdmin := grpcCtx(t, "authorization", "Bearer "+s.AdminKey)
	prod := product("grpc-input")

	for _, tc := range []struct {
		name  string
		rest  *Response
		grpc  error
		field string
	}{
		{"issued_to with CR LF", adm.Post("/v1/issue-license", map[string]any{"tier": "pro", "product_id": prod, "issued_to": "eve\r\nX-Injected: 1"}),
			func() error {
				_, err := lic.IssueLicense(asAdmin, &licensingv1.IssueLicenseRequest{Tier: "pro", ProductId: prod, IssuedTo: "eve\r\nX-Injected: 1"})
				return err
			}(), "issued_to"},
		{"product_id with an escape sequence", adm.Post("/v1/issue-license", map[string]any{"tier": "pro", "product_id": prod + "\n\x1b[31mRED", "issued_to": "x"}),
			func() error {
				_, err := lic.IssueLicense(asAdmin, &licensingv1.IssueLicenseRequest{Tier: "pro", ProductId: prod + "\n\x1b[31mRED", IssuedTo: "x"})
				return err
			}(), "product_id"},
		{"a tab in tier, without a credential", an.Post("/v1/issue-license", map[string]any{"tier": "pro\t", "product_id": prod, "issued_to": "x"}),
			func() error {
				_, err := lic.IssueLicense(grpcCtx(t), &licensingv1.IssueLicenseRequest{Tier: "pro\t", ProductId: prod, IssuedTo: "x"})
				return err
			}(), "tier"},
		{"a release's channel", adm.Post("/v1/register-release", map[string]any{"product_id": prod, "version": "1.0.1", "channel": "st\x01able", "artifact_url": "https://example.com/a"}),
			func() error {
				_, err := rel.RegisterRelease(asAdmin, &releasesv1.RegisterReleaseRequest{ProductId: prod, Version: "1.0.1", Channel: "st\x01able", ArtifactUrl: "https://example.com/a"})
				return err
			}(), "channel"},
	} {
		want := "400 " + tc.field + " must not contain control characters"
		if got := restAnswer(t, tc.rest); got != want {
			t.Errorf("%s over REST: %s, want %s", tc.name, got, want)
		}
		if got, want := grpcAnswer(tc.grpc), "InvalidArgument "+tc.field+" must not contain control characters"; got != want {
			t.Errorf("%s over gRPC: %s, want %s", tc.name, got, want)
		}
	}
	if got := adm.Get("/v1/list-licenses?product_id=" + prod); got.Status != 200 || string(got.Body) != `{"licenses":[],"total":0}` {
		t.Errorf("licenses of %s after the refusals: %d %s", prod, got.Status, got.Body)
	}

	// Free text keeps its line breaks at both doors.
	notes, err := lic.IssueLicense(asAdmin, &licensingv1.IssueLicenseRequest{Tier: "pro", ProductId: prod, IssuedTo: "x", MaxActivations: structpb.NewNumberValue(1), Notes: structpb.NewStringValue("line one\nline two")})
	if err != nil {
		t.Fatalf("issue with notes on two lines: %s", grpcAnswer(err))
	}
	key := notes.GetKey()

	// The seat of the finding: refused, so the license's one seat stays free for REST.
	_, err = act.ActivateLicense(grpcCtx(t), &activationsv1.ActivateLicenseRequest{Key: key, InstanceId: "build-agent\x1b]0;owned\x07"})
	if got, want := grpcAnswer(err), "InvalidArgument instance_id must not contain control characters"; got != want {
		t.Errorf("activate with an escape sequence: %s, want %s", got, want)
	}
	an.Post("/v1/activate-license", map[string]any{"key": key, "instance_id": "laptop"}).Expect(t, 200)

	// Bytes gRPC cannot decode: InvalidArgument naming the field, not gRPC's Internal.
	body := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), key)
	body = protowire.AppendString(protowire.AppendTag(body, 2, protowire.BytesType), "caf\xff")
	var reply []byte
	err = dialService(t, s, "ACTIVATIONS_ADDR").Invoke(grpcCtx(t), activationsv1.ActivationsService_ActivateLicense_FullMethodName, body, &reply, grpc.ForceCodec(rawProto{}))
	if got, want := grpcAnswer(err), "InvalidArgument instance_id is not valid UTF-8"; got != want {
		t.Errorf("activate with an instance id that is not UTF-8: %s, want %s", got, want)
	}
	err = dialService(t, s, "LICENSING_ADDR").Invoke(grpcCtx(t), licensingv1.LicensingService_VerifyLicense_FullMethodName, []byte{0xff, 0xff, 0xff}, &reply, grpc.ForceCodec(rawProto{}))
	if got, want := grpcAnswer(err), "InvalidArgument Invalid protobuf message"; got != want {
		t.Errorf("verify with bytes that are no message: %s, want %s", got, want)
	}

	// validate-license answers anything itself, at both doors.
	if v, err := act.ValidateLicense(grpcCtx(t), &activationsv1.ValidateLicenseRequest{Key: key, InstanceId: "lap\ntop"}); err != nil || v.GetValid() {
		t.Errorf("validate with a line break: %v %s, want valid false", v, grpcAnswer(err))
	}
}

// rawProto sends a request's bytes as they are: a Go client refuses to marshal a string
// that is not UTF-8.
type rawProto struct{}

func (rawProto) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawProto) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}
func (rawProto) Name() string { return "proto" }

// TrackUsageBatch cannot honour an Idempotency-Key (its items are separate calls), so it
// refuses one before adding anything, as addendum §8 says of a key that cannot be honoured;
// TrackUsage honours it. Sent twice, the batch used to count twice.
func TestTrackUsageBatchRefusesAnIdempotencyKey(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	adm := admin(t, s)
	act := activationsv1.NewActivationsServiceClient(dialService(t, s, "ACTIVATIONS_ADDR"))
	key := issueLicense(t, adm, map[string]any{"tier": "pro", "product_id": product("usage-idem"), "issued_to": "u", "limits": map[string]any{"api_calls_per_day": 1000}})
	seat, err := act.ActivateLicense(grpcCtx(t), &activationsv1.ActivateLicenseRequest{Key: key, InstanceId: "host"})
	if err != nil {
		t.Fatal(grpcAnswer(err))
	}
	item := &activationsv1.TrackUsageRequest{Key: key, Token: seat.GetToken(), Metric: "api_calls_per_day", Increment: proto.Float64(1)}
	idem := fmt.Sprintf("usage-%d", time.Now().UnixNano())
	for range 2 {
		_, err := act.TrackUsageBatch(grpcCtx(t, "idempotency-key", idem), &activationsv1.TrackUsageBatchRequest{Items: []*activationsv1.TrackUsageBatchItem{{Request: item}}})
		if got, want := grpcAnswer(err), "InvalidArgument Idempotency-Key is not accepted by this method: send each item as its own call with its own key"; got != want {
			t.Fatalf("batch with a key: %s, want %s", got, want)
		}
	}
	for range 2 {
		if _, err := act.TrackUsage(grpcCtx(t, "idempotency-key", idem), item); err != nil {
			t.Fatalf("track-usage with the key: %s", grpcAnswer(err))
		}
	}
	r, err := act.UsageReport(grpcCtx(t), &activationsv1.UsageReportRequest{Key: key})
	if err != nil {
		t.Fatal(grpcAnswer(err))
	}
	if m := r.GetMetrics(); len(m) != 1 || m[0].GetUsed() != 1 {
		t.Fatalf("usage after two refused batches and one keyed track-usage sent twice: %v, want 1", r.GetMetrics())
	}
}
