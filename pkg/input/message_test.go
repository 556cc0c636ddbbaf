package input

import (
	"testing"

	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

func TestCheckMessageAppliesTheFieldRulesEverywhereInARequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  proto.Message
		want string
	}{
		{"plain identifiers", &licensingv1.IssueLicenseRequest{Tier: "pro", ProductId: "app", IssuedTo: "Zoë ключ"}, ""},
		{"a tab in an identifier", &licensingv1.IssueLicenseRequest{Tier: "pro\t", ProductId: "app"}, "tier must not contain control characters"},
		{"CR LF in issued_to", &licensingv1.IssueLicenseRequest{Tier: "pro", IssuedTo: "eve\r\nX-Injected: 1"}, "issued_to must not contain control characters"},
		{"an escape sequence in product_id", &licensingv1.IssueLicenseRequest{ProductId: "app\n\x1b[31mRED"}, "product_id must not contain control characters"},
		{"white space around product_id", &releasesv1.CheckUpdateRequest{Key: "K", ProductId: "  app\t"}, ""},
		{"NUL", &activationsv1.ActivateLicenseRequest{Key: "K", InstanceId: "a\x00b"}, "instance_id must not contain NUL characters"},
		{"not UTF-8", &activationsv1.ActivateLicenseRequest{Key: "K\xff"}, "key is not valid UTF-8"},
		{"DEL", &activationsv1.ActivateLicenseRequest{Key: "K", InstanceId: "build-agent\x1b]0;owned\x07"}, "instance_id must not contain control characters"},
		{"release notes are free text", &releasesv1.RegisterReleaseRequest{ProductId: "app", Version: "1.0.0", ReleaseNotes: "Fixed:\n\t- a crash"}, ""},
		{"free text still refuses NUL", &releasesv1.RegisterReleaseRequest{ReleaseNotes: "a\x00"}, "release_notes must not contain NUL characters"},
		{"channel and platform", &releasesv1.RegisterReleaseRequest{ProductId: "app", Channel: "st\x01able"}, "channel must not contain control characters"},
		{"google.protobuf values are their own", &licensingv1.IssueLicenseRequest{Tier: "pro", Notes: structpb.NewStringValue("a\nb")}, ""},
		{"a list of strings", &activationsv1.ListActivationsForKeysRequest{Keys: []string{"A", "B\n"}}, "keys must not contain control characters"},
		{"a batch's items", &licensingv1.VerifyLicenseBatchRequest{Items: []*licensingv1.VerifyLicenseBatchItem{
			{Request: &licensingv1.VerifyLicenseRequest{Key: proto.String("A")}},
			{Request: &licensingv1.VerifyLicenseRequest{Key: proto.String("B\x7f")}},
		}}, "key must not contain control characters"},
		{"a nested message", &licensingv1.IssueLicenseForTenantRequest{License: &licensingv1.IssueLicenseRequest{IssuedTo: "\u0085"}}, "issued_to must not contain control characters"},
		{"maps are left to the services", &activationsv1.CreateLeaseRequest{Key: "K", Token: "T", Components: map[string]string{"os\n": "x\t"}}, ""},
		{"the first refused field in declaration order", &licensingv1.IssueLicenseRequest{Tier: "\n", ProductId: "\n", IssuedTo: "\n"}, "tier must not contain control characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if err := CheckMessage(tc.msg.ProtoReflect()); err != nil {
				got = err.Error()
				if _, ok := err.(*Error); !ok {
					t.Fatalf("%T, want *Error", err)
				}
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// The checks on the hot paths' requests, as the services' gRPC servers and the edge's
// decoder run them on every call: a few nanoseconds and no allocation
// (`go test -bench CheckMessage -benchmem ./input`).
func BenchmarkCheckMessage(b *testing.B) {
	for _, bc := range []struct {
		name string
		msg  proto.Message
	}{
		{"verify-license", &licensingv1.VerifyLicenseRequest{Key: proto.String("KH-ABCD-EFGH-IJKL-MNOP")}},
		{"validate-license", &activationsv1.ValidateLicenseRequest{Key: "KH-ABCD-EFGH-IJKL-MNOP", InstanceId: "laptop-7f3a"}},
		{"lease", &activationsv1.CreateLeaseRequest{Key: "KH-ABCD-EFGH-IJKL-MNOP", Token: "tok_0123456789abcdef0123456789abcdef", Nonce: proto.String("n-1")}},
		{"check-update", &releasesv1.CheckUpdateRequest{Key: "KH-ABCD-EFGH-IJKL-MNOP", ProductId: "app", Channel: "stable", Platform: "linux-x64", CurrentVersion: "1.2.3"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			m := bc.msg.ProtoReflect()
			b.ReportAllocs()
			for b.Loop() {
				if err := CheckMessage(m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
