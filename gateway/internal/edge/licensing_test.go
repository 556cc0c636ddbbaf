package edge

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// verifier stands in for licensing: it answers from answers (nil: not found) and counts
// the calls.
type verifier struct {
	licensingv1.LicensingServiceClient
	answers map[string]*licensingv1.VerifyLicenseResponse
	calls   int
}

func (v *verifier) VerifyLicense(_ context.Context, req *licensingv1.VerifyLicenseRequest, _ ...grpc.CallOption) (*licensingv1.VerifyLicenseResponse, error) {
	v.calls++
	if a := v.answers[license.CanonicalKey(req.GetKey())]; a != nil {
		return a, nil
	}
	return nil, license.ErrNotFound
}

// VerifyLicenseBatch: this stand-in is a licensing from before the batch call, so each
// miss is asked alone (batchedVerify's fallback).
func (v *verifier) VerifyLicenseBatch(context.Context, *licensingv1.VerifyLicenseBatchRequest, ...grpc.CallOption) (*licensingv1.VerifyLicenseBatchResponse, error) {
	return nil, status.Error(codes.Unimplemented, "unknown method VerifyLicenseBatch")
}

func TestCachedVerifyServesValidAnswersUntilTheirExpiry(t *testing.T) {
	perpetualKey, expiringKey, unknownKey := license.NewKey(), license.NewKey(), license.NewKey()
	expires := time.Now().Add(300 * time.Millisecond)
	perpetual := &licensingv1.VerifyLicenseResponse{Valid: true, Status: "active"}
	expiring := &licensingv1.VerifyLicenseResponse{Valid: true, Status: "active", ExpiresAt: timestamppb.New(expires)}
	src := &verifier{answers: map[string]*licensingv1.VerifyLicenseResponse{
		perpetualKey: perpetual,
		expiringKey:  expiring,
	}}
	c := &cachedVerify{LicensingServiceClient: src, verified: licensecache.New[*licensingv1.VerifyLicenseResponse](time.Hour), misses: newBatchedVerify(src)}
	verify := func(key *string) (*licensingv1.VerifyLicenseResponse, error) {
		return c.VerifyLicense(t.Context(), &licensingv1.VerifyLicenseRequest{Key: key})
	}
	calls := func(want int, what string) {
		t.Helper()
		if src.calls != want {
			t.Fatalf("%s: licensing asked %d times in all, want %d", what, src.calls, want)
		}
	}

	for range 3 {
		if got, err := verify(proto.String(perpetualKey)); err != nil || got != perpetual {
			t.Fatalf("verify: %v, %v", got, err)
		}
	}
	calls(1, "a valid answer is asked once")
	if _, err := verify(proto.String(strings.ToLower(strings.ReplaceAll(perpetualKey, "-", "")))); err != nil {
		t.Fatal(err)
	}
	calls(1, "the key is cached in its canonical form")

	for range 2 {
		if _, err := verify(proto.String(unknownKey)); err != license.ErrNotFound {
			t.Fatalf("unknown key: %v", err)
		}
	}
	calls(3, "an unknown key asks every time")
	for range 2 {
		_, _ = verify(nil)
	}
	calls(5, "a request without a key is licensing's to refuse")

	_, _ = verify(proto.String(expiringKey))
	_, _ = verify(proto.String(expiringKey))
	calls(6, "an answer that has not expired is served")
	time.Sleep(time.Until(expires))
	_, _ = verify(proto.String(expiringKey))
	_, _ = verify(proto.String(expiringKey))
	calls(8, "once its expires_at has come, licensing decides every time")
}
