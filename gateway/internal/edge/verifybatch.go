package edge

import (
	"context"

	"github.com/keyhouse/keyhouse/pkg/telemetry"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
)

// verifyBatchesInFlight: verify-license's misses are reads, so a batch that waits holds
// nothing up but itself; two out at once keep the one that is being answered from
// delaying the misses that arrive meanwhile by a whole round trip. (Measured in make
// bench: see docs/PERFORMANCE.md.)
const verifyBatchesInFlight = 2

// batchedVerify sends verify-license's cache misses to licensing through
// VerifyLicenseBatch: the misses that arrive while a batch is out go together, and
// licensing reads their licenses with one query. A lone miss goes at once, so an idle
// gateway adds no wait. Each caller gets the very answer or status VerifyLicense would
// give it, and its own cancellation or deadline: a caller that leaves is answered at once
// (the batch goes on for the others), and a batch lasts as long as its longest-waiting
// caller may.
type batchedVerify struct {
	client licensingv1.LicensingServiceClient
	batch  batcher[*licensingv1.VerifyLicenseBatchItem, *licensingv1.VerifyLicenseBatchResult]
}

func newBatchedVerify(client licensingv1.LicensingServiceClient) *batchedVerify {
	b := &batchedVerify{client: client}
	b.batch.Reads = true
	b.batch.MaxInFlight = verifyBatchesInFlight
	b.batch.Send = func(ctx context.Context, items []*licensingv1.VerifyLicenseBatchItem) ([]*licensingv1.VerifyLicenseBatchResult, error) {
		resp, err := client.VerifyLicenseBatch(ctx, &licensingv1.VerifyLicenseBatchRequest{Items: items})
		return resp.GetResults(), err
	}
	return b
}

// VerifyLicense answers req through a batch, or alone from a licensing without the batch
// call (a rolling upgrade that replaced the gateways first).
func (b *batchedVerify) VerifyLicense(ctx context.Context, req *licensingv1.VerifyLicenseRequest) (*licensingv1.VerifyLicenseResponse, error) {
	item := &licensingv1.VerifyLicenseBatchItem{Request: req, RequestId: telemetry.RequestID(ctx)}
	return answer(ctx, &b.batch, item, (*licensingv1.VerifyLicenseBatchResult).GetResponse,
		func() (*licensingv1.VerifyLicenseResponse, error) {
			return b.client.VerifyLicense(ctx, req)
		})
}
