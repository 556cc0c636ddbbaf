package edge

import (
	"context"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	"github.com/keyhouse/keyhouse/pkg/metrics"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"google.golang.org/grpc"
)

// registerReleases wires the releases service: every route is an http.yaml rule.
// check-update's answers are served from updates while it holds them (nil: no cache).
// The client it returns is the one hotRoutes answers check-update with (one cache, one
// batcher).
func registerReleases(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn, updates *licensecache.Cache[*releasesv1.CheckUpdateResponse]) (*cachedCheckUpdate, error) {
	rpc := releasesv1.NewReleasesServiceClient(conn)
	client := &cachedCheckUpdate{ReleasesServiceClient: rpc, updates: updates, misses: newBatchedCheckUpdate(rpc)}
	return client, releasesv1.RegisterReleasesServiceHandlerClient(ctx, mux, client)
}

// cachedCheckUpdate answers check-update from releases' earlier answer to the same
// question (license key, product, channel, platform, current version) while the cache
// holds it. An answer is kept no longer than the second its manifest was issued in (a
// manifest is signed with its second: every answer within it is the same bytes) and the
// license's expiry (which releases names with it, licensecache.ValidUntilHeader). The
// cache drops a license's answers when the license changes, and everything when a release
// is registered or unpublished (license.ReleasesChangedSubject, and the answer of such a
// write through this gateway). Errors are never kept. The misses go to releases in
// batches (batchedCheckUpdate).
type cachedCheckUpdate struct {
	releasesv1.ReleasesServiceClient
	updates *licensecache.Cache[*releasesv1.CheckUpdateResponse]
	misses  *batchedCheckUpdate
}

func (c *cachedCheckUpdate) CheckUpdate(ctx context.Context, req *releasesv1.CheckUpdateRequest, opts ...grpc.CallOption) (*releasesv1.CheckUpdateResponse, error) {
	if req.GetKey() == "" {
		ctx, err := annotated(ctx)
		if err != nil {
			return nil, err
		}
		return c.ReleasesServiceClient.CheckUpdate(ctx, req, opts...)
	}
	asked := false
	resp, err := c.updates.GetUntil(license.CanonicalKey(req.GetKey()), checkUpdateQuestion(req), func() (*releasesv1.CheckUpdateResponse, time.Time, error) {
		asked = true
		resp, until, err := c.misses.CheckUpdate(ctx, req)
		if err != nil {
			return nil, time.Time{}, err
		}
		if issued := resp.GetRelease().GetIssuedAt(); issued != nil {
			if end := issued.AsTime().Add(time.Second); until.IsZero() || end.Before(until) {
				until = end
			}
		}
		return resp, until, nil
	})
	metrics.RecordAnswer(CheckUpdatePath, !asked)
	return resp, err
}

// checkUpdateQuestion is what the cache keeps check-update's answer under beside the key:
// the members the answer depends on, as the client wrote them.
func checkUpdateQuestion(req *releasesv1.CheckUpdateRequest) string {
	return strings.Join([]string{req.GetProductId(), req.GetChannel(), req.GetPlatform(), req.GetCurrentVersion()}, "\x00")
}

// checkUpdateQuestionOf decodes a check-update body cut before its last byte (closeCut)
// with the hot decoder, when it is the plain body that decoder takes; ok is false for
// anything else, and for a body the input policy refuses.
func checkUpdateQuestionOf(cut []byte) (req *releasesv1.CheckUpdateRequest, ok bool) {
	req = &releasesv1.CheckUpdateRequest{}
	done, err := decodeHotRequest(closeCut(cut), req)
	return req, done && err == nil
}
