package edge

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// updater stands in for releases: it answers with answer and, when set, names until as
// the license's expiry.
type updater struct {
	releasesv1.ReleasesServiceClient
	answer *releasesv1.CheckUpdateResponse
	until  time.Time
	calls  atomic.Int32
	err    error
	// older: a releases from before CheckUpdateBatch (validatebatch_test.go).
	older bool
	// class is the answer class the batch call names for every key but those classes
	// names otherwise.
	class   string
	classes map[string]string
}

func (u *updater) classOf(key string) string {
	if c, ok := u.classes[key]; ok {
		return c
	}
	return u.class
}

// hourLongUpdateAnswers are check-update's caches with an hour's TTL.
func hourLongUpdateAnswers() updateAnswers {
	return updateAnswers{classes: licensecache.New[string](time.Hour), updates: licensecache.New[*releasesv1.CheckUpdateResponse](time.Hour)}
}

func (u *updater) CheckUpdate(_ context.Context, _ *releasesv1.CheckUpdateRequest, opts ...grpc.CallOption) (*releasesv1.CheckUpdateResponse, error) {
	u.calls.Add(1)
	if u.err != nil {
		return nil, u.err
	}
	for _, o := range opts {
		if h, ok := o.(grpc.HeaderCallOption); ok && !u.until.IsZero() {
			*h.HeaderAddr = metadata.Pairs(licensecache.ValidUntilHeader, u.until.Format(time.RFC3339Nano))
		}
	}
	return u.answer, nil
}

func TestCachedCheckUpdateKeepsAnAnswerNoLongerThanItsManifestOrLicense(t *testing.T) {
	key := license.NewKey()
	offer := func(issued time.Time) *releasesv1.CheckUpdateResponse {
		return &releasesv1.CheckUpdateResponse{UpdateAvailable: true, Release: &releasesv1.Manifest{Version: "2.0.0", IssuedAt: timestamppb.New(issued)}}
	}
	cases := []struct {
		name   string
		answer *releasesv1.CheckUpdateResponse
		until  time.Time
		calls  int // for three identical questions
	}{
		{"no update, perpetual license: kept", &releasesv1.CheckUpdateResponse{}, time.Time{}, 1},
		{"a manifest of this second: kept", offer(time.Now()), time.Time{}, 1},
		{"a manifest of a second that is over: not kept", offer(time.Now().Add(-2 * time.Second)), time.Time{}, 3},
		{"a license that has expired: not kept", &releasesv1.CheckUpdateResponse{}, time.Now().Add(-time.Second), 3},
		{"a license that expires later: kept", &releasesv1.CheckUpdateResponse{}, time.Now().Add(time.Hour), 1},
		{"from a releases that names no class: not kept", &releasesv1.CheckUpdateResponse{}, time.Time{}, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := &updater{answer: tc.answer, until: tc.until, class: "tenant\x00app"}
			if tc.calls == 3 && tc.until.IsZero() && tc.answer.GetRelease() == nil {
				u.class = ""
			}
			c := &cachedCheckUpdate{ReleasesServiceClient: u, misses: newBatchedCheckUpdate(u), answers: hourLongUpdateAnswers()}
			for range 3 {
				got, err := c.CheckUpdate(t.Context(), &releasesv1.CheckUpdateRequest{Key: key, ProductId: "app", CurrentVersion: "1.0.0"})
				if err != nil || got != tc.answer {
					t.Fatalf("answer %v, %v", got, err)
				}
			}
			if int(u.calls.Load()) != tc.calls {
				t.Fatalf("releases asked %d times, want %d", u.calls.Load(), tc.calls)
			}
			// Another question about the same license is asked on its own.
			if _, err := c.CheckUpdate(t.Context(), &releasesv1.CheckUpdateRequest{Key: key, ProductId: "app", CurrentVersion: "1.5.0"}); err != nil {
				t.Fatal(err)
			}
			if int(u.calls.Load()) != tc.calls+1 {
				t.Fatalf("another current_version was answered from the cache")
			}
		})
	}
}

// One answer per class and question: a license whose class the gateway knows is answered
// with the answer another license of the class was given, and only such a license. A
// license whose class it does not know yet, of another class, or dropped by a change is
// asked about; a release change drops every class's answers.
func TestCheckUpdateAnswersTheLicensesOfAClassWithOneAnswer(t *testing.T) {
	first, second, other := license.NewKey(), license.NewKey(), license.NewKey()
	u := &updater{answer: &releasesv1.CheckUpdateResponse{}, class: "tenant\x00app", classes: map[string]string{other: "tenant\x00tool"}}
	answers := hourLongUpdateAnswers()
	c := &cachedCheckUpdate{ReleasesServiceClient: u, misses: newBatchedCheckUpdate(u), answers: answers}
	calls := int32(0)
	// After a drop a cache keeps nothing for a moment (the other processes are hearing of
	// the same change): the steps below wait that out.
	settled := func() { time.Sleep(150 * time.Millisecond) }
	ask := func(key, version string, asked bool) {
		t.Helper()
		if _, err := c.CheckUpdate(t.Context(), &releasesv1.CheckUpdateRequest{Key: key, ProductId: "app", CurrentVersion: version}); err != nil {
			t.Fatal(err)
		}
		if asked {
			calls++
		}
		if got := u.calls.Load(); got != calls {
			t.Fatalf("releases asked %d times, want %d (last: %s on %s, asked: %v)", got, calls, key[:9], version, asked)
		}
	}
	ask(first, "1.0.0", true)   // neither the class nor the answer known
	ask(first, "1.0.0", false)  // both
	ask(second, "1.0.0", true)  // the same class, but the gateway does not know it yet
	ask(second, "1.0.0", false) // now it does
	ask(other, "1.0.0", true)   // another class
	ask(other, "1.0.0", false)

	// A new question of a known class is asked once, for every license of the class.
	ask(first, "1.5.0", true)
	ask(second, "1.5.0", false)
	ask(other, "1.5.0", true)

	// A release change: every class's answers are asked again, once.
	answers.updates.Clear()
	settled()
	ask(second, "1.0.0", true)
	ask(first, "1.0.0", false)
	ask(other, "1.0.0", true)

	// A license that changed is asked about again; its class's answer still serves the
	// others.
	answers.classes.Invalidate(second)
	settled()
	ask(second, "1.0.0", true)
	ask(first, "1.0.0", false)

	// A license releases now names another class (its product changed) is answered its
	// own answer, which is kept for no one of its old class.
	u.classes[first] = "tenant\x00tool"
	answers.updates.Clear()
	settled()
	ask(first, "1.0.0", true)
	ask(second, "1.0.0", true)
	ask(second, "1.0.0", false)

	// An error is never kept, and another license of the class still asks for itself.
	u.err = license.ErrNotActive.GRPCStatus().Err()
	answers.updates.Clear()
	settled()
	for range 2 {
		if _, err := c.CheckUpdate(t.Context(), &releasesv1.CheckUpdateRequest{Key: second, ProductId: "app", CurrentVersion: "1.0.0"}); err == nil {
			t.Fatal("a refusal was answered from the cache")
		}
	}
	if got := u.calls.Load(); got != calls+2 {
		t.Fatalf("releases asked %d times, want %d", got, calls+2)
	}
}

func TestCheckUpdateKnowsTheClassOfALicenseVerifyLicenseFoundValid(t *testing.T) {
	known, verified, unnamed, refused, otherProduct := license.NewKey(), license.NewKey(), license.NewKey(), license.NewKey(), license.NewKey()
	u := &updater{answer: &releasesv1.CheckUpdateResponse{}, class: license.UpdateClass("tenant", "app"),
		classes: map[string]string{otherProduct: license.UpdateClass("tenant", "tool")}}
	answers := hourLongUpdateAnswers()
	answers.verified = licensecache.New[*licensingv1.VerifyLicenseResponse](time.Hour)
	tenants := map[string]string{known: "tenant", verified: "tenant", refused: "tenant", otherProduct: "tenant"}
	answers.tenantOf = func(key string) (string, bool) { tenant, ok := tenants[key]; return tenant, ok }
	keepVerified := func(key string, resp *licensingv1.VerifyLicenseResponse) {
		t.Helper()
		if _, err := answers.verified.Get(key, func() (*licensingv1.VerifyLicenseResponse, error) { return resp, nil }); err != nil {
			t.Fatal(err)
		}
	}
	// The product as the license spells it: the class compares product keys.
	keepVerified(verified, &licensingv1.VerifyLicenseResponse{Valid: true, ProductId: " App "})
	keepVerified(unnamed, &licensingv1.VerifyLicenseResponse{Valid: true, ProductId: "app"})
	keepVerified(refused, &licensingv1.VerifyLicenseResponse{Valid: false, ProductId: "app"})
	keepVerified(otherProduct, &licensingv1.VerifyLicenseResponse{Valid: true, ProductId: "tool"})

	ask := askingAbout(t, &cachedCheckUpdate{ReleasesServiceClient: u, misses: newBatchedCheckUpdate(u), answers: answers}, u)
	ask(known, true) // the class's answer, learned from releases
	if _, held := answers.held(verified, checkUpdateQuestion(&releasesv1.CheckUpdateRequest{ProductId: "app", CurrentVersion: "1.0.0"}), 0); !held {
		t.Fatal("admission control's lookup does not see the answer a verified license's class holds")
	}
	ask(verified, false)    // never asked about, but verify-license found it valid
	ask(unnamed, true)      // valid, but no answer named its tenant
	ask(refused, true)      // verify-license's answer is not valid: releases decides
	ask(otherProduct, true) // another product: another class, whose answer is not held

	// The verify-license answer dropped (the license changed): its class is no longer known.
	answers.verified.Invalidate(verified)
	time.Sleep(150 * time.Millisecond) // a drop's settle window (TestCheckUpdateAnswersTheLicensesOfAClassWithOneAnswer)
	ask(verified, true)
}

// A valid validate-license answer names the license's class, which check-update keeps
// when it holds answers of that class: the license's first check-update is then answered
// from them. Otherwise (no answer of the class held, an invalid answer, an activations
// that names no class) it keeps nothing.
func TestCheckUpdateLearnsTheClassValidateLicenseNames(t *testing.T) {
	class := license.UpdateClass("tenant", "app")
	u := &updater{answer: &releasesv1.CheckUpdateResponse{}, class: class}
	answers := hourLongUpdateAnswers()
	checkUpdate := &cachedCheckUpdate{ReleasesServiceClient: u, misses: newBatchedCheckUpdate(u), answers: answers}
	f := &fakeValidator{invalid: map[string]bool{"no-seat": true}, class: class}
	validate := &cachedValidate{misses: newBatchedValidate(f), valid: licensecache.New[*activationsv1.ValidateLicenseResponse](time.Hour), updates: answers}
	checked := askingAbout(t, checkUpdate, u)
	validated := func(key, instance string) {
		t.Helper()
		if _, err := validate.ValidateLicense(t.Context(), &activationsv1.ValidateLicenseRequest{Key: key, InstanceId: instance}); err != nil {
			t.Fatal(err)
		}
	}
	first, second, unseated, older := license.NewKey(), license.NewKey(), license.NewKey(), license.NewKey()
	validated(first, "host")
	if answers.classes.HoldsAbout(first) {
		t.Fatal("a class was kept with no answer of it held: memory for a vendor whose apps never check for updates")
	}
	checked(first, true)
	validated(second, "host")
	checked(second, false) // validated once the class's answer was held
	validated(unseated, "no-seat")
	checked(unseated, true) // valid false: no class
	f.class = ""
	validated(older, "host")
	checked(older, true) // an activations that names no class
}

// leaser stands in for activations' leases: every lease names class and the license's
// expiry.
type leaser struct {
	activationsv1.LeasesServiceClient
	class   string
	expires time.Time
}

func (l *leaser) CreateLeaseBatch(_ context.Context, req *activationsv1.CreateLeaseBatchRequest, _ ...grpc.CallOption) (*activationsv1.CreateLeaseBatchResponse, error) {
	resp := &activationsv1.CreateLeaseBatchResponse{}
	for range req.GetItems() {
		r := &activationsv1.CreateLeaseBatchResult{UpdateClass: l.class,
			Outcome: &activationsv1.CreateLeaseBatchResult_Response{Response: &activationsv1.CreateLeaseResponse{Lease: "header.claims.signature"}}}
		if !l.expires.IsZero() {
			r.LicenseExpiresAt = timestamppb.New(l.expires)
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

// A lease's answer names the license's class, which check-update keeps, no longer than
// the license lives.
func TestCheckUpdateLearnsTheClassALeaseNames(t *testing.T) {
	class := license.UpdateClass("tenant", "app")
	u := &updater{answer: &releasesv1.CheckUpdateResponse{}, class: class}
	answers := hourLongUpdateAnswers()
	checkUpdate := &cachedCheckUpdate{ReleasesServiceClient: u, misses: newBatchedCheckUpdate(u), answers: answers}
	l := &leaser{class: class}
	leases := newBatchedLeases(l, answers)
	checked := askingAbout(t, checkUpdate, u)
	leased := func(key string) {
		t.Helper()
		if _, err := leases.CreateLease(t.Context(), &activationsv1.CreateLeaseRequest{Key: key, InstanceId: "host"}); err != nil {
			t.Fatal(err)
		}
	}
	first, renewed, expired := license.NewKey(), license.NewKey(), license.NewKey()
	checked(first, true)
	leased(renewed)
	checked(renewed, false) // a lease's license, of a class whose answer is held
	l.expires = time.Now().Add(-time.Second)
	leased(expired)
	checked(expired, true) // the license's expiry bounds its class
}

// askingAbout returns ask: it asks c whether the app of key, on 1.0.0 of "app", has an
// update, and fails unless releases (u) was asked about it exactly when asked says.
func askingAbout(t *testing.T, c *cachedCheckUpdate, u *updater) (ask func(key string, asked bool)) {
	calls := u.calls.Load()
	return func(key string, asked bool) {
		t.Helper()
		if _, err := c.CheckUpdate(t.Context(), &releasesv1.CheckUpdateRequest{Key: key, ProductId: "app", CurrentVersion: "1.0.0"}); err != nil {
			t.Fatal(err)
		}
		if asked {
			calls++
		}
		if got := u.calls.Load(); got != calls {
			t.Fatalf("releases asked %d times, want %d (last: %s, asked: %v)", got, calls, key[:9], asked)
		}
	}
}
