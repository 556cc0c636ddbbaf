package edge

import (
	"context"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	"github.com/keyhouse/keyhouse/pkg/metrics"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"google.golang.org/grpc"
)

// registerReleases wires the releases service: every route is an http.yaml rule.
// check-update's answers are served from answers while it holds them (nil caches: no
// cache). The client it returns is the one hotRoutes answers check-update with (one set
// of caches, one batcher).
func registerReleases(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn, answers updateAnswers) (*cachedCheckUpdate, error) {
	rpc := releasesv1.NewReleasesServiceClient(conn)
	client := &cachedCheckUpdate{ReleasesServiceClient: rpc, answers: answers, misses: newBatchedCheckUpdate(rpc)}
	return client, releasesv1.RegisterReleasesServiceHandlerClient(ctx, mux, client)
}

// updateAnswers are check-update's answers as the gateway keeps them: in two parts,
// because all an answer depends on of its license, once the license is usable, is its
// tenant and product (releases names them as the answer's class), and the rest is the
// question and the second.
//
//   - classes: a usable license's class, by license key, kept until the license expires
//     (the answer's valid_until) or changes (the license change events, as verify-license's
//     answers): for LICENSE_CACHE_LIVE_TTL while the cache is proven live.
//   - updates: by class, the answer to each question (product, channel, platform, current
//     version, as the client wrote them), kept no longer than the second its manifest was
//     issued in (a manifest is signed with its second: every answer within it is the same
//     bytes), and dropped whenever a release is registered or unpublished
//     (license.ReleasesChangedSubject, and the answer of such a write through this
//     gateway).
//
// So one release check of a product per second and question answers the whole fleet of
// the product's licenses the gateway has seen, where a cache by license key answers only
// a license that asks twice within the second. Errors are never kept.
//
// A license's class is also known from verify-license's answer while the gateway holds
// it (verified): valid means usable, it names the product, and the services' answers
// named the key's tenant (tenantOf). An app checks its license and then for updates, so
// its first check-update finds its class known from the verify-license before it.
type updateAnswers struct {
	classes *licensecache.Cache[string]
	updates *licensecache.Cache[*releasesv1.CheckUpdateResponse]
	// verified are verify-license's answers, and tenantOf the tenant a service's answer
	// named for a license key (nil: classes are learned from releases only).
	verified *licensecache.Cache[*licensingv1.VerifyLicenseResponse]
	tenantOf func(key string) (tenant string, ok bool)
}

// classOf is the class of the license key, if the gateway knows it is a usable license's
// now and, by what it knows it from, still after d: check-update's answers, or a valid
// verify-license answer it holds. Both live until the license changes or expires, by the
// same change events (Caches.Follow, Caches.DropAnnounced).
func (a updateAnswers) classOf(key string, d time.Duration) (string, bool) {
	if class, ok := a.classes.Peek(key, "", d); ok {
		return class, true
	}
	if a.tenantOf == nil {
		return "", false
	}
	verified, ok := a.verified.Peek(key, "", d)
	if !ok || !verified.GetValid() {
		return "", false
	}
	tenant, ok := a.tenantOf(key)
	if !ok {
		return "", false
	}
	return license.UpdateClass(tenant, verified.GetProductId()), true
}

// knowsAbout reports whether classOf may know the key's class: false means it does not,
// without looking at how long what it holds lives, so a caller can skip reading the
// question of a request about a key the gateway knows nothing of.
func (a updateAnswers) knowsAbout(key string) bool {
	return a.classes.HoldsAbout(key) || a.tenantOf != nil && a.verified.HoldsAbout(key)
}

// learnFrom keeps class, which another route's answer named for the usable license key
// (load: started before the call that answered; until: the answer's end), when the
// gateway holds check-update answers of that class: the license's product is one whose
// apps check for updates through this gateway. Otherwise nothing is kept, so a vendor
// whose apps never check for updates pays no memory for classes.
func (a updateAnswers) learnFrom(load licensecache.Loading, key, class string, until time.Time) {
	if class != "" && a.updates.HoldsAbout(class) {
		a.classes.Keep(load, key, "", class, until)
	}
}

// held is the answer the caches hold for the license key's question, if they hold one
// now and, by its own life, still after d.
func (a updateAnswers) held(key, question string, d time.Duration) (*releasesv1.CheckUpdateResponse, bool) {
	class, ok := a.classOf(key, d)
	if !ok {
		return nil, false
	}
	return a.updates.Peek(class, question, d)
}

// cachedCheckUpdate answers check-update from the answers the gateway keeps
// (updateAnswers) while it holds them, and sends the misses to releases in batches
// (batchedCheckUpdate).
type cachedCheckUpdate struct {
	releasesv1.ReleasesServiceClient
	answers updateAnswers
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
	key, question := license.CanonicalKey(req.GetKey()), checkUpdateQuestion(req)
	class, known := c.answers.classOf(key, 0)
	if !known {
		metrics.RecordAnswer(CheckUpdatePath, false)
		return c.learn(ctx, req, key, question)
	}
	asked := false
	// A known class: one load of the question's answer for every license of the class
	// that asks it meanwhile. Each of them is usable (only usable licenses have a class
	// kept), so the answer is each one's own.
	resp, err := c.answers.updates.GetUntil(class, question, func() (*releasesv1.CheckUpdateResponse, time.Time, error) {
		asked = true
		resp, _, answered, err := c.misses.CheckUpdate(ctx, req)
		switch {
		case err != nil:
			return nil, time.Time{}, err
		case answered != class:
			// The license is no longer of the class kept for it (or this releases names
			// none): its answer is its own alone.
			return resp, licensecache.NotKept, nil
		}
		return resp, manifestEnd(resp), nil
	})
	metrics.RecordAnswer(CheckUpdatePath, !asked)
	return resp, err
}

// learn asks releases for the answer about a license whose class the gateway does not
// know, and keeps both the class and the answer.
func (c *cachedCheckUpdate) learn(ctx context.Context, req *releasesv1.CheckUpdateRequest, key, question string) (*releasesv1.CheckUpdateResponse, error) {
	classes, updates := c.answers.classes.StartLoad(), c.answers.updates.StartLoad()
	resp, until, class, err := c.misses.CheckUpdate(ctx, req)
	if err != nil || class == "" {
		return resp, err
	}
	c.answers.classes.Keep(classes, key, "", class, until)
	c.answers.updates.Keep(updates, class, question, resp, manifestEnd(resp))
	return resp, nil
}

// manifestEnd is when an answer stops being the one to give: the end of the second its
// manifest was issued in (zero for an answer without one, which holds until a release
// changes).
func manifestEnd(resp *releasesv1.CheckUpdateResponse) time.Time {
	if issued := resp.GetRelease().GetIssuedAt(); issued != nil {
		return issued.AsTime().Add(time.Second)
	}
	return time.Time{}
}

// checkUpdateQuestion is what check-update's answer is kept under beside the license's
// class: the members of the request the answer depends on, as the client wrote them.
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
