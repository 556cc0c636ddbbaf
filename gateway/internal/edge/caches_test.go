package edge

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Admission control lets a validate-license through without a slot only when the cache
// holds the answer for the instance the handler will ask about: the cache reads it from
// the body as admission control read it (all but its last byte) with the handler's own
// plain decoder, so the two never read two instances out of one body.
func TestTheCacheReadsTheInstanceAsTheHandlerDoes(t *testing.T) {
	caches, key := NewCaches(time.Minute, 0), license.NewKey()
	if _, err := caches.ValidSeats.GetUntil(key, "i-1", func() (*activationsv1.ValidateLicenseResponse, time.Time, error) {
		return &activationsv1.ValidateLicenseResponse{Valid: true}, time.Time{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		body   string
		memory bool
	}{
		{`{"key":"` + key + `","instance_id":"i-1"}`, true},
		{`{ "instance_id" : "i-1" , "key" : "` + key + `" }`, true},
		{`{"key":"` + key + `","channel":"beta","instance_id":"i-1"}` + "\n", true},
		// encoding/json, the handler's decoder for anything but the plain body, keeps the
		// last of two: i-2, which the cache does not hold.
		{`{"key":"` + key + `","instance_id":"i-1","instance_id":"i-2"}`, false},
		{`{"key":"` + key + `"}`, false},
		{`{"key":"` + key + `","amount":5,"instance_id":"i-1"}`, false},
		{`{"key":"` + key + `","instance_id":"i\u002d1"}`, false},
		{`{"key":"` + key + `","instance_id":"i-2"}`, false},
		{`{"key":"` + license.NewKey() + `","instance_id":"i-1"}`, false},
	} {
		cut := []byte(c.body[:len(c.body)-1])
		if got := caches.AnswersFromMemory(ValidateLicensePath, []byte(key), cut); got != c.memory {
			t.Errorf("%s: answered from memory %v; want %v", c.body, got, c.memory)
		}
	}
	if caches.AnswersFromMemory(ValidateLicensePath, []byte(key), nil) {
		t.Error("a body not read the plain way was taken as answered from memory")
	}
}

// Admission control sees a check-update answered from memory when the license's class is
// known only from a valid verify-license answer, as the handler does, and only with the
// key's tenant named.
func TestACheckUpdateIsAnsweredFromMemoryByTheClassVerifyLicenseGave(t *testing.T) {
	caches, key := NewCaches(time.Minute, 0), license.NewKey()
	body := `{"key":"` + key + `","product_id":"app","current_version":"1.0.0"}`
	cut := []byte(body[:len(body)-1])
	if _, err := caches.Verified.Get(key, func() (*licensingv1.VerifyLicenseResponse, error) {
		return &licensingv1.VerifyLicenseResponse{Valid: true, ProductId: "app"}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := caches.Updates.GetUntil(license.UpdateClass("tenant", "app"), checkUpdateQuestion(&releasesv1.CheckUpdateRequest{ProductId: "app", CurrentVersion: "1.0.0"}),
		func() (*releasesv1.CheckUpdateResponse, time.Time, error) {
			return &releasesv1.CheckUpdateResponse{}, time.Time{}, nil
		}); err != nil {
		t.Fatal(err)
	}
	if caches.AnswersFromMemory(CheckUpdatePath, []byte(key), cut) {
		t.Error("answered from memory without the key's tenant")
	}
	caches.TenantOf = func(string) (string, bool) { return "tenant", true }
	if !caches.AnswersFromMemory(CheckUpdatePath, []byte(key), cut) {
		t.Error("not answered from memory, with the class's answer held and the license verified valid")
	}
	caches.TenantOf = func(string) (string, bool) { return "another-tenant", true }
	if caches.AnswersFromMemory(CheckUpdatePath, []byte(key), cut) {
		t.Error("answered from memory with another tenant's class")
	}
}

// A write's answer through the gateway names the license it changed: every answer kept
// by that license's key goes before the answer reaches the client (verify-license's,
// validate-license's and the license's check-update class), while check-update's answers
// by class go only when a release changed.
func TestAWritesAnswerDropsWhatTheGatewayKeptAboutItsLicense(t *testing.T) {
	caches, key := NewCaches(time.Hour, 0), license.NewKey()
	class, question := license.UpdateClass("tenant", "app"), "app\x00\x00\x001.0.0"
	keep := func() {
		t.Helper()
		_, err1 := caches.Verified.Get(key, func() (*licensingv1.VerifyLicenseResponse, error) {
			return &licensingv1.VerifyLicenseResponse{Valid: true}, nil
		})
		_, err2 := caches.ValidSeats.GetUntil(key, "host", func() (*activationsv1.ValidateLicenseResponse, time.Time, error) {
			return &activationsv1.ValidateLicenseResponse{Valid: true}, time.Time{}, nil
		})
		caches.UpdateClasses.Keep(caches.UpdateClasses.StartLoad(), key, "", class, time.Time{})
		_, err3 := caches.Updates.GetUntil(class, question, func() (*releasesv1.CheckUpdateResponse, time.Time, error) {
			return &releasesv1.CheckUpdateResponse{}, time.Time{}, nil
		})
		if err := errors.Join(err1, err2, err3); err != nil {
			t.Fatal(err)
		}
	}
	answer := func(header metadata.MD) {
		t.Helper()
		invoker := func(_ context.Context, _ string, _, _ any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
			for _, o := range opts {
				if h, ok := o.(grpc.HeaderCallOption); ok {
					*h.HeaderAddr = header
				}
			}
			return nil
		}
		if err := caches.DropAnnounced()(t.Context(), "/write", nil, nil, nil, invoker); err != nil {
			t.Fatal(err)
		}
	}
	keep()
	answer(metadata.Pairs(licensecache.ChangedHeader, key))
	for name, held := range map[string]bool{
		"verify-license's answer":    caches.Verified.HoldsAbout(key),
		"validate-license's answer":  caches.ValidSeats.HoldsAbout(key),
		"the license's update class": caches.UpdateClasses.HoldsAbout(key),
	} {
		if held {
			t.Errorf("%s kept after a write announced the license", name)
		}
	}
	if !caches.Updates.HoldsAbout(class) {
		t.Error("the class's check-update answer dropped for a license's write")
	}
	answer(metadata.Pairs(licensecache.ClearHeader, "1"))
	if caches.Updates.HoldsAbout(class) {
		t.Error("the class's check-update answer kept after a release changed")
	}
}
