package edge

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
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
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := &updater{answer: tc.answer, until: tc.until}
			c := &cachedCheckUpdate{ReleasesServiceClient: u, misses: newBatchedCheckUpdate(u), updates: licensecache.New[*releasesv1.CheckUpdateResponse](time.Hour)}
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
