package server

import (
	"strings"
	"testing"
	"time"

	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"github.com/keyhouse/keyhouse/services/licensing/internal/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Every item of a batch gets exactly what VerifyLicense gives the same request alone:
// the same answer, or the same status with the same details ("valid": false), each key's
// failure its own.
func TestVerifyLicenseBatchAnswersEachItemAsVerifyLicense(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, false)
	ctx := as("")
	until := clock.Add(time.Hour)
	valid := fx.seed("default", func(l *store.License) { l.ExpiresAt = &until; l.Limits = map[string]float64{"seats": 3} })
	perpetual := fx.seed("other-tenant")
	revokedKey := fx.seed("default", revoked)
	expiredKey := fx.seed("default", expiredAt(-time.Second))
	reqs := []*licensingv1.VerifyLicenseRequest{
		{Key: proto.String(valid)},
		{Key: proto.String("NO-SUCH-KEY")},
		{Key: proto.String(perpetual)},
		{},                              // no key: 400
		{Key: proto.String("")},         // empty: unknown
		{Key: proto.String(revokedKey)}, // 403 revoked
		{Key: proto.String(expiredKey)},
		{Key: proto.String(strings.ToLower(valid))}, // typed by hand: the same license
		{Key: proto.String(valid)},                  // twice in one batch
	}
	items := make([]*licensingv1.VerifyLicenseBatchItem, len(reqs))
	for i, r := range reqs {
		items[i] = &licensingv1.VerifyLicenseBatchItem{Request: r, RequestId: "req-" + string(rune('a'+i))}
	}
	resp, err := fx.srv.VerifyLicenseBatch(ctx, &licensingv1.VerifyLicenseBatchRequest{Items: items})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetResults()) != len(reqs) {
		t.Fatalf("%d results for %d items", len(resp.GetResults()), len(reqs))
	}
	failures := 0
	for i, r := range reqs {
		alone, aloneErr := fx.srv.VerifyLicense(ctx, r)
		got := resp.GetResults()[i]
		if aloneErr != nil {
			failures++
			want := status.Convert(aloneErr).Proto()
			e := got.GetError()
			if e == nil || e.GetCode() != want.GetCode() || e.GetMessage() != want.GetMessage() || len(e.GetDetails()) != len(want.GetDetails()) {
				t.Fatalf("item %d (%v): batch %v, alone %v", i, r, got, want)
			}
			for j := range e.GetDetails() {
				if !proto.Equal(e.GetDetails()[j], want.GetDetails()[j]) {
					t.Fatalf("item %d: detail %d differs: %v vs %v", i, j, e.GetDetails()[j], want.GetDetails()[j])
				}
			}
			continue
		}
		if !proto.Equal(got.GetResponse(), alone) {
			t.Fatalf("item %d (%v): batch %v, alone %v", i, r, got.GetResponse(), alone)
		}
	}
	if failures != 5 {
		t.Fatalf("%d failures, want 5 (unknown, missing, empty, revoked, expired)", failures)
	}
	if c := codes.Code(resp.GetResults()[3].GetError().GetCode()); c != codes.InvalidArgument {
		t.Fatalf("missing key: %v, want InvalidArgument", c)
	}
}

func TestVerifyLicenseBatchRefusesOversizedBatches(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, false)
	items := make([]*licensingv1.VerifyLicenseBatchItem, maxLookupBatch+1)
	for i := range items {
		items[i] = &licensingv1.VerifyLicenseBatchItem{Request: &licensingv1.VerifyLicenseRequest{Key: proto.String("K")}}
	}
	_, err := fx.srv.VerifyLicenseBatch(as(""), &licensingv1.VerifyLicenseBatchRequest{Items: items})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("got %v, want InvalidArgument", err)
	}
}

// GetLicenses answers each key as GetLicense does: the same license, in any tenant
// without one in the call, only the tenant's own with one, and no license for an unknown
// key.
func TestGetLicensesAnswersEachKeyAsGetLicense(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, false)
	mine := fx.seed("t1", revoked)
	theirs := fx.seed("t2", expiredAt(time.Hour))
	keys := []string{mine, "NO-SUCH-KEY", strings.ToLower(theirs), ""}
	for _, tenant := range []string{"", "t1"} {
		resp, err := fx.srv.GetLicenses(as(tenant), &licensingv1.GetLicensesRequest{Keys: keys})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetResults()) != len(keys) {
			t.Fatalf("%d results for %d keys", len(resp.GetResults()), len(keys))
		}
		for i, key := range keys {
			alone, err := fx.srv.GetLicense(as(tenant), &licensingv1.GetLicenseRequest{Key: key})
			got := resp.GetResults()[i].GetLicense()
			if err != nil {
				if status.Code(err) != codes.NotFound || got != nil {
					t.Fatalf("tenant %q, %q: batch %v, alone %v", tenant, key, got, err)
				}
				continue
			}
			if !proto.Equal(got, alone.GetLicense()) {
				t.Fatalf("tenant %q, %q: batch %v, alone %v", tenant, key, got, alone.GetLicense())
			}
		}
	}
	if resp, _ := fx.srv.GetLicenses(as("t1"), &licensingv1.GetLicensesRequest{Keys: []string{theirs}}); resp.GetResults()[0].GetLicense() != nil {
		t.Fatal("another tenant's license answered to a tenant's call")
	}
}
