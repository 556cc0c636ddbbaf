package edge

import (
	"bytes"
	"time"

	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
)

// Caches keep the services' answers on the three read routes every installed app calls
// (cachedVerify, cachedValidate, cachedCheckUpdate). They follow the change events over
// NATS (Follow), and the connections to the services must drop what a write's answer
// announces (DropAnnounced), so that a write through this gateway counts here at once.
type Caches struct {
	Verified   *licensecache.Cache[*licensingv1.VerifyLicenseResponse]
	ValidSeats *licensecache.Cache[*activationsv1.ValidateLicenseResponse]
	// UpdateClasses and Updates are check-update's answers in their two parts
	// (updateAnswers): the class of each usable license, and each class's answers.
	UpdateClasses *licensecache.Cache[string]
	Updates       *licensecache.Cache[*releasesv1.CheckUpdateResponse]
	// TenantOf, when set, is the tenant the services' answers named for a license key
	// (admission.Tenants.Owner): with a valid verify-license answer held, it makes the
	// license's check-update class known (updateAnswers.classOf). Set it before serving.
	TenantOf func(key string) (tenant string, ok bool)
}

// NewCaches returns caches whose entries live at most ttl (LICENSE_CACHE_TTL), or liveTTL
// (LICENSE_CACHE_LIVE_TTL) while they can prove they have seen every change event
// (pkg/licensecache's liveness); ttl <= 0 returns nil caches, which ask the services every
// time.
func NewCaches(ttl, liveTTL time.Duration) *Caches {
	return &Caches{
		Verified:      licensecache.NewLive[*licensingv1.VerifyLicenseResponse](ttl, liveTTL),
		ValidSeats:    licensecache.NewLive[*activationsv1.ValidateLicenseResponse](ttl, liveTTL),
		UpdateClasses: licensecache.NewLive[string](ttl, liveTTL),
		Updates:       licensecache.NewLive[*releasesv1.CheckUpdateResponse](ttl, liveTTL),
	}
}

// updateAnswers is check-update's part of the caches.
func (c *Caches) updateAnswers() updateAnswers {
	return updateAnswers{classes: c.UpdateClasses, updates: c.Updates, verified: c.Verified, tenantOf: c.TenantOf}
}

// AnswersFromMemory reports whether the gateway would answer a request on path about the
// license key from its cache now: verify-license's, whose answer the key alone names;
// validate-license's and check-update's for the instance or question the body as read
// names (cut: all of it but its last byte, nil when not read the plain way), decoded by
// the handler's own plain decoder (plainValidateRequest, decodeHotRequest) so that both
// read one question. Admission control lets such a request through without a slot. The
// answer must still be held answerMargin from now.
func (c *Caches) AnswersFromMemory(path string, key, cut []byte) bool {
	switch path {
	case VerifyLicensePath:
		return c.Verified.Holds(license.CanonicalKey(string(key)), "", answerMargin)
	case ValidateLicensePath:
		// Most requests are about keys the cache holds nothing about: no decode for them.
		if !c.ValidSeats.HoldsAbout(license.CanonicalKey(string(key))) {
			return false
		}
		req, done := plainValidateRequest(closeCut(cut))
		return done && req != nil && c.ValidSeats.Holds(license.CanonicalKey(req.GetKey()), req.GetInstanceId(), answerMargin)
	case CheckUpdatePath:
		// Most requests are about keys whose class the gateway does not know: no decode for them.
		answers := c.updateAnswers()
		if !answers.knowsAbout(license.CanonicalKey(string(key))) {
			return false
		}
		req, ok := checkUpdateQuestionOf(cut)
		if !ok {
			return false
		}
		_, held := answers.held(license.CanonicalKey(req.GetKey()), checkUpdateQuestion(req), answerMargin)
		return held
	}
	return false
}

// closeCut is a plain JSON object cut before its last byte (admission control reads no
// further) with that byte put back: the closing brace, unless the cut holds it already
// (the last byte followed it). A body whose last byte was anything else is refused by the
// handler's decoder (400), whatever the answer from the cache. nil gives nil.
func closeCut(cut []byte) []byte {
	body := bytes.TrimSpace(cut)
	if len(body) == 0 || body[len(body)-1] == '}' {
		return body
	}
	// A copy: the request's body stays as the client sent it.
	return append(body[:len(body):len(body)], '}')
}

// answerMargin is how long an answer must still live for its request to pass admission
// control without a slot. On a saturated gateway a request waits hundreds of
// milliseconds for its handler; one whose answer expired meanwhile is a miss, which
// takes a slot then or is refused (WithSlotOnMiss), after the handler's work up to the
// cache. Before the late slot such misses reached the services holding none: with answers
// kept 1 s and no margin, one tenant's flood of them joined every other tenant's batches
// (the quiet tenant's p99 1.1 s and 67% of its checks refused, against 0.42-0.45 s and
// 25-27% with the margin; make bench's isolation report). With the late slot, no margin
// measured the same as this one (the quiet tenant's checks 29-39% refused, against
// 24-29%), so the margin stays and keeps such requests at the door, where a refusal
// costs least. An answer kept while the cache is proven live has minutes left.
const answerMargin = time.Second

// Follow subscribes every cache to the events that change its answers: license changes
// for those kept by license key, seat removals for validate-license's, release changes
// (which empty it) for check-update's answers by class. stop undoes it.
func (c *Caches) Follow(nc *nats.Conn) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	for _, follow := range []func() (func(), error){
		func() (func(), error) { return c.Verified.Subscribe(nc) },
		func() (func(), error) { return c.ValidSeats.Subscribe(nc, license.SeatRemovedSubject) },
		func() (func(), error) { return c.UpdateClasses.Subscribe(nc) },
		func() (func(), error) { return c.Updates.ClearOn(nc, license.ReleasesChangedSubject) },
	} {
		s, err := follow()
		if err != nil {
			stop()
			return nil, err
		}
		stops = append(stops, s)
	}
	return stop, nil
}

// DropAnnounced is the client interceptor of the connections to licensing, activations
// and releases: what a call's answer announces leaves every cache before the answer
// reaches the client. check-update's answers are kept by class, not by license key, so
// only a release change (a clear) reaches them.
func (c *Caches) DropAnnounced() grpc.UnaryClientInterceptor {
	return licensecache.DropAnnouncedFrom(c.Verified, c.ValidSeats, c.UpdateClasses, c.Updates.ClearsOnly())
}
