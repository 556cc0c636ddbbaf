package edge

import (
	"context"
	"net/http/httptest"
	"testing"

	accountsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"google.golang.org/protobuf/proto"
)

func TestAnswersThatCarryASecretAreNotStored(t *testing.T) {
	for _, tc := range []struct {
		m       proto.Message
		noStore bool
	}{
		{&activationsv1.ActivateLicenseResponse{}, true},
		{&activationsv1.ReissueTokenResponse{}, true},
		{&accountsv1.CreateTenantResponse{}, true},
		{&accountsv1.RotateApiKeyResponse{}, true},
		{&licensingv1.VerifyLicenseResponse{}, false},
		{&licensingv1.IssueLicenseResponse{}, false},
	} {
		w := httptest.NewRecorder()
		if err := noStoreSecrets(context.Background(), w, tc.m); err != nil {
			t.Fatal(err)
		}
		if got := w.Header().Get("Cache-Control") == "no-store"; got != tc.noStore {
			t.Errorf("%T: no-store %v, want %v", tc.m, got, tc.noStore)
		}
	}
}
