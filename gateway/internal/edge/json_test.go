package edge

import (
	"testing"

	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Whatever this build's protojson does with spaces, the answer is compact, in declaration
// order, with null for an unset message field.
func TestMarshalWritesCompactJSONInDeclarationOrder(t *testing.T) {
	limits, err := structpb.NewStruct(map[string]any{"seats": 5, "features": []any{"a", "b c"}})
	if err != nil {
		t.Fatal(err)
	}
	body, err := newJSONMarshaler().Marshal(&licensingv1.VerifyLicenseResponse{
		Valid: true, Tier: "pro", ProductId: "app", Limits: limits,
		IssuedAt: timestamppb.New(timestamppb.Now().AsTime().Truncate(1e9).UTC()), Status: "active",
	})
	if err != nil {
		t.Fatal(err)
	}
	issued := string(body[len(body)-len(`","status":"active"}`)-len("2006-01-02T15:04:05Z") : len(body)-len(`","status":"active"}`)])
	want := `{"valid":true,"tier":"pro","product_id":"app","limits":{"features":["a","b c"],"seats":5},"expires_at":null,"issued_at":"` + issued + `","status":"active"}`
	if string(body) != want {
		t.Fatalf("marshaled\n%s\nwant\n%s", body, want)
	}
}
