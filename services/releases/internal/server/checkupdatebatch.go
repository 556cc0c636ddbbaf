package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/grpcx"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensingclient"
	"github.com/keyhouse/keyhouse/pkg/telemetry"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"github.com/keyhouse/keyhouse/services/releases/internal/store"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// maxBatchItems bounds the items of one CheckUpdateBatch call.
const maxBatchItems = 256

// CheckUpdateBatch answers each item as CheckUpdate would answer it alone: the same
// answer or the same status, the same time the answer holds until (the result's
// valid_until, CheckUpdate's licensecache.ValidUntilHeader), logged and counted as a
// CheckUpdate call with the item's request id. The items' licenses are looked up
// together (one call to licensing for those its cache lacks) and the latest releases of
// the channels they ask about read with one query; when either fails, every item that
// needed it fails as its own call would have.
func (s *Server) CheckUpdateBatch(ctx context.Context, req *releasesv1.CheckUpdateBatchRequest) (*releasesv1.CheckUpdateBatchResponse, error) {
	items := req.GetItems()
	if len(items) > maxBatchItems {
		return nil, apierr.Invalid("at most %d items in a batch", maxBatchItems)
	}
	start := time.Now()
	answers := make([]*releasesv1.CheckUpdateResponse, len(items))
	errs := make([]error, len(items))
	validUntil := make([]*timestamppb.Timestamp, len(items))
	classes := make([]string, len(items))

	// What CheckUpdate refuses before asking licensing.
	var keys []string
	var asking []int
	for i, item := range items {
		if errs[i] = checkUpdateFields(item.GetRequest()); errs[i] == nil {
			keys = append(keys, item.GetRequest().GetKey())
			asking = append(asking, i)
		}
	}

	// The licenses, then the latest release of each channel asked with a usable one.
	var found map[string]*licensingv1.License
	var lookupErr error
	if len(keys) > 0 {
		found, lookupErr = s.licensing.Licenses(ctx, keys)
	}
	var channels []store.Channel
	var channelOf []int
	for _, i := range asking {
		r := items[i].GetRequest()
		l := found[license.CanonicalKey(r.GetKey())]
		switch {
		case lookupErr != nil:
			errs[i] = lookupErr
			continue
		case l == nil:
			errs[i] = license.ErrNotFound
			continue
		}
		if errs[i] = licensingclient.Usable(l, s.now()); errs[i] != nil {
			continue
		}
		validUntil[i] = l.GetExpiresAt()
		// All of l that the answer depends on once l is usable (latestAsked).
		classes[i] = licensingclient.UpdateClass(l)
		asked, ok := latestAsked(l, r)
		if !ok {
			answers[i] = noUpdate()
			continue
		}
		channels = append(channels, asked)
		channelOf = append(channelOf, i)
	}
	var latest []*store.Release
	var latestErr error
	if len(channels) > 0 {
		latest, latestErr = s.store.LatestOf(ctx, channels)
	}
	for j, i := range channelOf {
		if latestErr != nil {
			errs[i] = latestErr
			continue
		}
		answers[i], errs[i] = s.updateAnswer(ctx, items[i].GetRequest(), latest[j])
	}

	results := make([]*releasesv1.CheckUpdateBatchResult, len(items))
	for i, item := range items {
		result := &releasesv1.CheckUpdateBatchResult{Outcome: &releasesv1.CheckUpdateBatchResult_Response{Response: answers[i]}}
		itemCtx := telemetry.WithRequestID(ctx, item.GetRequestId())
		if err := grpcx.ObserveCall(itemCtx, s.batchLog(), releasesv1.ReleasesService_CheckUpdate_FullMethodName, time.Since(start), errs[i]); err != nil {
			st := status.Convert(err).Proto()
			result.Outcome = &releasesv1.CheckUpdateBatchResult_Error{Error: &activationsv1.CallStatus{Code: st.GetCode(), Message: st.GetMessage(), Details: st.GetDetails()}}
		} else {
			result.ValidUntil, result.UpdateClass = validUntil[i], classes[i]
		}
		results[i] = result
	}
	return &releasesv1.CheckUpdateBatchResponse{Results: results}, nil
}

var discardLog = slog.New(slog.DiscardHandler)

func (s *Server) batchLog() *slog.Logger {
	if s.cfg.Log == nil {
		return discardLog
	}
	return s.cfg.Log
}
