package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/grpcx"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	"github.com/keyhouse/keyhouse/pkg/telemetry"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"github.com/keyhouse/keyhouse/services/licensing/internal/store"
	"google.golang.org/grpc/status"
)

// maxLookupBatch bounds the keys of one VerifyLicenseBatch or GetLicenses call.
const maxLookupBatch = 256

// VerifyLicenseBatch answers each item as VerifyLicense would answer it alone: the same
// answer or the same status, logged and counted as a VerifyLicense call with the item's
// request id. The licenses the cache does not hold are read in one query; when that
// query fails, every item that needed it fails as its own call would have.
func (s *Server) VerifyLicenseBatch(ctx context.Context, req *licensingv1.VerifyLicenseBatchRequest) (*licensingv1.VerifyLicenseBatchResponse, error) {
	items := req.GetItems()
	if len(items) > maxLookupBatch {
		return nil, apierr.Invalid("at most %d items in a batch", maxLookupBatch)
	}
	start := time.Now()
	keys := make([]string, 0, len(items))
	for _, item := range items {
		if r := item.GetRequest(); r.Key != nil {
			keys = append(keys, canonicalKey(r.GetKey()))
		}
	}
	var found map[string]*store.License
	var lookupErr error
	if len(keys) > 0 {
		found, lookupErr = s.store.GetMany(ctx, keys)
	}
	// The gateway's admission control shares capacity by the key's tenant.
	named := make([]string, 0, 2*len(found))
	for _, l := range found {
		named = append(named, l.Key, l.TenantID)
	}
	licensecache.AnnounceTenant(ctx, named...)
	resp := &licensingv1.VerifyLicenseBatchResponse{Results: make([]*licensingv1.VerifyLicenseBatchResult, len(items))}
	for i, item := range items {
		var l *store.License
		var err error = errMissingKey
		if r := item.GetRequest(); r.Key != nil {
			if err = lookupErr; err == nil {
				if l = found[canonicalKey(r.GetKey())]; l == nil {
					err = errNotFound
				}
			}
		}
		answer, err := s.verifyAnswer(l, err)
		result := &licensingv1.VerifyLicenseBatchResult{Outcome: &licensingv1.VerifyLicenseBatchResult_Response{Response: answer}}
		itemCtx := telemetry.WithRequestID(ctx, item.GetRequestId())
		if err = grpcx.ObserveCall(itemCtx, s.batchLog(), licensingv1.LicensingService_VerifyLicense_FullMethodName, time.Since(start), err); err != nil {
			st := status.Convert(err).Proto()
			result.Outcome = &licensingv1.VerifyLicenseBatchResult_Error{Error: &activationsv1.CallStatus{Code: st.GetCode(), Message: st.GetMessage(), Details: st.GetDetails()}}
		}
		resp.Results[i] = result
	}
	return resp, nil
}

var discardLog = slog.New(slog.DiscardHandler)

func (s *Server) batchLog() *slog.Logger {
	if s.cfg.Log == nil {
		return discardLog
	}
	return s.cfg.Log
}
