package edge

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"google.golang.org/protobuf/proto"
)

// slots stands in for admission control's take: it grants a slot while free is positive
// and records how many were taken and released.
type slots struct{ free, taken, released, refused int }

func (s *slots) take() (func(), bool) {
	if s.free <= 0 {
		s.refused++
		return nil, false
	}
	s.free--
	s.taken++
	return func() { s.released++; s.free++ }, true
}

// A request let through without a slot (its answer was in the cache) whose answer is
// gone when its handler asks takes a slot for its miss on all three routes, and holds it
// only while the service is asked; when none is left it is refused with admission
// control's 503, validate-license's too (not valid false, which would tell a valid seat
// it is not). A request whose answer is still there takes none, nor does a request that
// went through admission control with a slot of its own.
func TestAMissOfARequestLetThroughWithoutASlotTakesOne(t *testing.T) {
	// A key per step: an answer loaded just after its key was dropped is not kept.
	cached, refusedKey, shownKey := license.NewKey(), license.NewKey(), license.NewKey()
	valid := &licensingv1.VerifyLicenseResponse{Valid: true, Status: "active"}
	src := &verifier{answers: map[string]*licensingv1.VerifyLicenseResponse{cached: valid, refusedKey: valid, shownKey: valid}}
	verify := &cachedVerify{LicensingServiceClient: src, verified: licensecache.New[*licensingv1.VerifyLicenseResponse](time.Hour), misses: newBatchedVerify(src)}
	validator := &fakeValidator{}
	validate := &cachedValidate{misses: newBatchedValidate(validator), valid: licensecache.New[*activationsv1.ValidateLicenseResponse](time.Hour)}
	u := &updater{answer: &releasesv1.CheckUpdateResponse{}, class: "tenant\x00app"}
	update := &cachedCheckUpdate{ReleasesServiceClient: u, misses: newBatchedCheckUpdate(u), answers: hourLongUpdateAnswers()}

	ask := map[string]func(ctx context.Context, key string) error{
		"verify-license": func(ctx context.Context, key string) error {
			_, err := verify.VerifyLicense(ctx, &licensingv1.VerifyLicenseRequest{Key: proto.String(key)})
			return err
		},
		"validate-license": func(ctx context.Context, key string) error {
			_, err := validate.ValidateLicense(ctx, &activationsv1.ValidateLicenseRequest{Key: key, InstanceId: "seat-1"})
			return err
		},
		"check-update": func(ctx context.Context, key string) error {
			_, err := update.CheckUpdate(ctx, &releasesv1.CheckUpdateRequest{Key: key, ProductId: "app", CurrentVersion: "1.0.0"})
			return err
		},
	}
	for route, ask := range ask {
		s := &slots{free: 1}
		ctx := WithSlotOnMiss(t.Context(), s.take)
		if err := ask(ctx, cached); err != nil || s.taken != 1 || s.released != 1 {
			t.Fatalf("%s, a miss with a slot free: %v; %d taken, %d released; want 1, 1", route, err, s.taken, s.released)
		}
		if err := ask(ctx, cached); err != nil || s.taken != 1 {
			t.Fatalf("%s, answered from the cache: %v; %d slots taken; want still 1", route, err, s.taken)
		}
		s.free = 0
		if err := ask(ctx, refusedKey); err != errRefusedOnMiss || s.refused != 1 {
			t.Fatalf("%s, a miss with no slot left: %v (%d refused); want the refusal", route, err, s.refused)
		}
		if err := ask(t.Context(), refusedKey); err != nil || s.refused != 1 || s.taken != 1 {
			t.Fatalf("%s, a request that holds a slot of its own: %v; %d taken; want none", route, err, s.taken-1)
		}
	}

	// What the refused client reads: admission control's 503 on each route.
	mux := runtime.NewServeMux(runtime.WithMarshalerOption(runtime.MIMEWildcard, newJSONMarshaler()), runtime.WithErrorHandler(handleError))
	if err := mux.HandlePath(http.MethodPost, ValidateLicensePath, validateLicense(mux, validate)); err != nil {
		t.Fatal(err)
	}
	if err := mux.HandlePath(http.MethodPost, VerifyLicensePath, func(w http.ResponseWriter, r *http.Request, _ map[string]string) {
		_, err := verify.VerifyLicense(r.Context(), &licensingv1.VerifyLicenseRequest{Key: proto.String(shownKey)})
		runtime.HTTPError(r.Context(), mux, newJSONMarshaler(), w, r, err)
	}); err != nil {
		t.Fatal(err)
	}
	refused := httptest.NewRecorder()
	WriteOverloaded(refused)
	for _, path := range []string{ValidateLicensePath, VerifyLicensePath} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{"key":"`+shownKey+`","instance_id":"seat-1"}`))
		mux.ServeHTTP(w, r.WithContext(WithSlotOnMiss(r.Context(), (&slots{}).take)))
		if w.Code != http.StatusServiceUnavailable || w.Body.String() != refused.Body.String() {
			t.Errorf("%s refused for want of a slot: %d %s; want %d %s", path, w.Code, w.Body, refused.Code, refused.Body)
		}
	}
}
