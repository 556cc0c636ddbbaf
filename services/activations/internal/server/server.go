// Package server holds the activations service's gRPC handlers and the rules of seats,
// tokens and usage metering (api.md: Activation, activate-license … recent-activations).
package server

import (
	"context"
	cryptorand "crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"log/slog"
	"math"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/grpcx"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/input"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	"github.com/keyhouse/keyhouse/pkg/licensingclient"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/telemetry"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"github.com/keyhouse/keyhouse/services/activations/internal/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Store is the SQL the handlers need (store.Store; fakes in unit tests).
type Store interface {
	ChangeSeats(ctx context.Context, changes []store.SeatChange) ([]store.SeatChanged, error)
	DeactivateInstance(ctx context.Context, tenant, key, productID, instance, reason string) (bool, error)
	HasSeat(ctx context.Context, tenant, key, instance string) (bool, *time.Time, error)
	LiveSeats(ctx context.Context, seats []store.SeatKey) ([]store.LiveSeat, error)
	Reissue(ctx context.Context, tenant, key, productID, instance string, tokenHash []byte) (bool, error)
	AddUsages(ctx context.Context, incs []store.Increment) ([]store.Added, error)
	// AddUsageOnce adds inc under an Idempotency-Key; answer makes the stored answer.
	AddUsageOnce(ctx context.Context, idemKey string, requestHash []byte, inc store.Increment, answer func(store.Added) ([]byte, error)) ([]byte, error)
	Usage(ctx context.Context, tenant, key string) (map[string]int64, error)
	ResetUsage(ctx context.Context, tenant, key, productID string, metric *string) (map[string]int64, error)
	Seats(ctx context.Context, tenant, key string) ([]store.Seat, error)
	// Recent and CountSeats leave out the seats of the exclude keys.
	Recent(ctx context.Context, tenant string, limit int, exclude []string) ([]store.Seat, error)
	CountSeats(ctx context.Context, tenant string, exclude []string) (int, error)
	Summaries(ctx context.Context, tenant string, keys []string) (map[string]*store.Summary, error)
	// ImportUsage writes starting totals where a metric has none (store.ImportUsage).
	ImportUsage(ctx context.Context, tenant string, usage map[string]map[string]int64) (int, error)
}

// Licenses looks licenses up (licensingclient.Client; fakes in unit tests). tenant ""
// (public routes) finds the key in any tenant; the license carries its tenant_id either
// way; an unknown key is license.ErrNotFound.
type Licenses interface {
	License(ctx context.Context, tenant, key string) (*licensingv1.License, error)
	// Licenses is License in any tenant for several keys with one call (batches): by
	// canonical key, an unknown key absent.
	Licenses(ctx context.Context, keys []string) (map[string]*licensingv1.License, error)
	// DeletedKeys lists the tenant's licenses deleted lately, whose seats the purge may
	// not have removed yet.
	DeletedKeys(ctx context.Context, tenant string) ([]string, error)
}

// Messages of api.md's Errors table and addendum §6, verbatim (the license's own refusals
// are pkg/license's).
var (
	errCapReached   = apierr.Forbidden("Activation limit exceeded for this license key")
	errBadToken     = apierr.Forbidden("Invalid activation token")
	errNoSeat       = apierr.NotFound("No activation found for that key and instance_id")
	errUsageRace    = apierr.Retry("Usage was changed by a concurrent update; please retry")
	errMissingToken = apierr.Invalid("token is required")
	errMissingKey   = apierr.Invalid("key is required")
)

const (
	// maxFieldLen caps instance_id, and any key longer than this is unknown without
	// asking licensing (issued keys are 34 characters).
	maxFieldLen = 256
	// maxIncrement keeps every total exact in a JSON number (2^53 - 1).
	maxIncrement        = 1<<53 - 1
	defaultRecentLimit  = 50
	maxRecentLimit      = 1000
	maxSummaryKeys      = 1000
	defaultStatsRecent  = 10
	tokenPrefix         = "act_"
	tokenRandomBytesLen = 32
)

// Server implements ActivationsService and ActivationsInternalService.
type Server struct {
	activationsv1.UnimplementedActivationsServiceServer
	activationsv1.UnimplementedActivationsInternalServiceServer
	store    Store
	licenses Licenses
	now      func() time.Time
	// log receives the lines of the items of a batch call (grpcx.ObserveCall).
	log *slog.Logger
	// floating: a new seat of a license under a floating lease policy is floating
	// (WithLeases); false: no seat is floating.
	floating bool
}

// WithLeases has activations of licenses under a floating policy make floating seats.
func (s *Server) WithLeases(l *Leases) *Server {
	s.floating = l != nil
	return s
}

// New returns a Server.
func New(s Store, l Licenses, log *slog.Logger) *Server {
	return &Server{store: s, licenses: l, now: time.Now, log: log}
}

// Register adds both services to g.
func Register(g *grpc.Server, s *Server) {
	activationsv1.RegisterActivationsServiceServer(g, s)
	activationsv1.RegisterActivationsInternalServiceServer(g, s)
}

// newToken returns a fresh activation token and the hash that is stored instead of it.
func newToken() (string, []byte) {
	b := make([]byte, tokenRandomBytesLen)
	if _, err := cryptorand.Read(b); err != nil {
		panic(err)
	}
	tok := tokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	return tok, hashToken(tok)
}

// hashToken is how tokens are stored and looked up: SHA-256. A token carries 256 random
// bits, so a fast unsalted hash is enough, and the lookup is an index probe on the hash
// (the comparison happens on hashes, so its timing says nothing about the token).
func hashToken(tok string) []byte {
	sum := sha256.Sum256([]byte(tok))
	return sum[:]
}

func checkField(name, v string) error {
	if v == "" {
		return apierr.Invalid("%s is required", name)
	}
	if utf8.RuneCountInString(v) > maxFieldLen {
		return apierr.Invalid("%s must be at most %d characters", name, maxFieldLen)
	}
	if pgxx.HasNUL(v) {
		return apierr.Invalid("%s must not contain NUL characters", name)
	}
	return nil
}

// checkRequired is checkField for a value that must hold more than white space: a blank
// one is "<name> is required", as licensing and releases answer a blank product_id.
func checkRequired(name, v string) error {
	if strings.TrimSpace(v) == "" {
		return apierr.Invalid("%s is required", name)
	}
	return checkField(name, v)
}

// lookup finds the license of key, in tenant or (tenant "", the public routes) in any
// tenant.
func (s *Server) lookup(ctx context.Context, tenant, key string) (*licensingv1.License, error) {
	if err := keyError(key); err != nil {
		return nil, err
	}
	return s.licenses.License(ctx, tenant, key)
}

// keyError is what a lookup of key answers before asking anyone: errMissingKey for none,
// and an over-long key is answered like any other unknown string.
func keyError(key string) error {
	switch {
	case key == "":
		return errMissingKey
	case utf8.RuneCountInString(key) > maxFieldLen:
		return license.ErrNotFound
	}
	return nil
}

// findLicense finds the license of a key in any tenant (the public routes), as a call's
// checks need it: a call alone asks licenses (inAnyTenant), a batch's item finds it among
// the licenses its batch looked up together (lookUpTogether).
type findLicense func(ctx context.Context, key string) (*licensingv1.License, error)

// inAnyTenant is findLicense for a call alone: the cache's answer, or licensing's.
func inAnyTenant(licenses Licenses) findLicense {
	return func(ctx context.Context, key string) (*licensingv1.License, error) {
		if err := keyError(key); err != nil {
			return nil, err
		}
		return licenses.License(ctx, "", key)
	}
}

// lookUpTogether looks the licenses of a batch's keys up in one Licenses call (one call
// to licensing for those the cache lacks, rather than one each) and returns the
// findLicense its items' checks use: each key answered as inAnyTenant would answer it
// alone, or with the error of the whole lookup.
func lookUpTogether(ctx context.Context, licenses Licenses, keys []string) findLicense {
	asked := make([]string, 0, len(keys))
	for _, key := range keys {
		if keyError(key) == nil {
			asked = append(asked, key)
		}
	}
	var found map[string]*licensingv1.License
	var lookupErr error
	if len(asked) > 0 {
		found, lookupErr = licenses.Licenses(ctx, asked)
	}
	return func(_ context.Context, key string) (*licensingv1.License, error) {
		if err := keyError(key); err != nil {
			return nil, err
		}
		if lookupErr != nil {
			return nil, lookupErr
		}
		if l := found[license.CanonicalKey(key)]; l != nil {
			return l, nil
		}
		return nil, license.ErrNotFound
	}
}

func isNotFound(err error) bool { return apierr.Is(err, codes.NotFound) }

// usable is pkg/license's rule; track-usage passes its own wording of the expiry
// (license.ErrIsExpired), every other route license.ErrExpired.
func (s *Server) usable(l *licensingv1.License, expired *apierr.Error) error {
	err := licensingclient.Usable(l, s.now())
	if err == license.ErrExpired {
		return expired
	}
	return err
}

// ActivateLicense creates the seat key + instance_id, or reports it exists.
func (s *Server) ActivateLicense(ctx context.Context, req *activationsv1.ActivateLicenseRequest) (*activationsv1.ActivateLicenseResponse, error) {
	c, err := s.activation(ctx, req, inAnyTenant(s.licenses))
	if err != nil {
		return nil, err
	}
	changed, err := s.store.ChangeSeats(ctx, []store.SeatChange{c.change})
	if err != nil {
		return nil, err
	}
	return c.answer(changed[0])
}

// seatCall is a checked activate or deactivate call: the change to make, and what its
// answer needs. A deactivation of an unknown key has no change (answer says so).
type seatCall struct {
	change store.SeatChange
	token  string
	none   bool
}

// activation checks an activate call and turns it into the change it asks for.
func (s *Server) activation(ctx context.Context, req *activationsv1.ActivateLicenseRequest, find findLicense) (seatCall, error) {
	if req.GetKey() == "" {
		return seatCall{}, errMissingKey
	}
	if err := checkField("instance_id", req.GetInstanceId()); err != nil {
		return seatCall{}, err
	}
	l, err := find(ctx, req.GetKey())
	if err != nil {
		return seatCall{}, err
	}
	if err := s.usable(l, license.ErrExpired); err != nil {
		return seatCall{}, err
	}
	var maxSeats *int32
	if m := l.GetMaxActivations(); m != nil {
		maxSeats = proto.Int32(m.GetValue())
	}
	// Whether the seat floats is the license's lease policy's, read by the statement
	// that makes the seat (store.SeatChange.Tier).
	var tier *string
	if s.floating {
		tier = proto.String(l.GetTier())
	}
	tok, hash := newToken()
	return seatCall{token: tok, change: store.SeatChange{Tenant: l.GetTenantId(), Key: l.GetKey(), ProductID: l.GetProductId(), Activate: true,
		Instance: req.GetInstanceId(), TokenHash: hash, MaxSeats: maxSeats, Tier: tier, RequestID: telemetry.RequestID(ctx)}}, nil
}

// answer is ActivateLicense's answer to the change's outcome.
func (c seatCall) answer(changed store.SeatChanged) (*activationsv1.ActivateLicenseResponse, error) {
	switch {
	case errors.Is(changed.Err, store.ErrCapReached):
		return nil, errCapReached
	case errors.Is(changed.Err, store.ErrLicenseDeleted):
		return nil, license.ErrNotFound
	case changed.Err != nil:
		return nil, changed.Err
	case changed.Already:
		return &activationsv1.ActivateLicenseResponse{Activated: true, AlreadyActivated: proto.Bool(true)}, nil
	}
	return &activationsv1.ActivateLicenseResponse{Activated: true, Token: proto.String(c.token)}, nil
}

// DeactivateLicense frees the seat the token belongs to. Only the token is a credential:
// a token that matches no seat of this key is deactivated false, not an error.
func (s *Server) DeactivateLicense(ctx context.Context, req *activationsv1.DeactivateLicenseRequest) (*activationsv1.DeactivateLicenseResponse, error) {
	c, err := s.deactivation(ctx, req, inAnyTenant(s.licenses))
	if err != nil {
		return nil, err
	}
	if c.none {
		return &activationsv1.DeactivateLicenseResponse{Deactivated: false}, nil
	}
	changed, err := s.store.ChangeSeats(ctx, []store.SeatChange{c.change})
	if err != nil {
		return nil, err
	}
	return &activationsv1.DeactivateLicenseResponse{Deactivated: changed[0].Removed}, nil
}

// deactivation checks a deactivate call and turns it into the change it asks for.
func (s *Server) deactivation(ctx context.Context, req *activationsv1.DeactivateLicenseRequest, find findLicense) (seatCall, error) {
	if req.GetKey() == "" {
		return seatCall{}, errMissingKey
	}
	if req.GetToken() == "" {
		return seatCall{}, errMissingToken
	}
	l, err := find(ctx, req.GetKey())
	if isNotFound(err) {
		return seatCall{none: true}, nil
	}
	if err != nil {
		return seatCall{}, err
	}
	return seatCall{change: store.SeatChange{Tenant: l.GetTenantId(), Key: l.GetKey(), ProductID: l.GetProductId(),
		TokenHash: hashToken(req.GetToken()), RequestID: telemetry.RequestID(ctx)}}, nil
}

// ValidateLicense answers valid only for an active, unexpired license with a seat for the
// instance. Whatever it cannot validate is valid false; only an outage is an error here
// (gRPC callers can tell it apart), which the REST edge still answers as valid false.
func (s *Server) ValidateLicense(ctx context.Context, req *activationsv1.ValidateLicenseRequest) (*activationsv1.ValidateLicenseResponse, error) {
	invalid := &activationsv1.ValidateLicenseResponse{Valid: false}
	if req.GetKey() == "" || checkField("instance_id", req.GetInstanceId()) != nil {
		return invalid, nil
	}
	l, err := s.lookup(ctx, "", req.GetKey())
	if isNotFound(err) {
		return invalid, nil
	}
	if err != nil {
		return nil, err
	}
	if s.usable(l, license.ErrExpired) != nil {
		return invalid, nil
	}
	ok, leaseEnds, err := s.store.HasSeat(ctx, l.GetTenantId(), l.GetKey(), req.GetInstanceId())
	if err != nil {
		return nil, err
	}
	// A valid answer holds until the license expires or, for a floating seat, its lease
	// ends, whichever is first: a cache (the gateway's) keeps it no longer.
	if until := validUntil(l, leaseEnds); ok && until != nil {
		licensecache.AnnounceValidUntil(ctx, *until)
	}
	return &activationsv1.ValidateLicenseResponse{Valid: ok}, nil
}

// validUntil is the earlier of the license's expiry and a floating seat's lease end (nil:
// neither).
func validUntil(l *licensingv1.License, leaseEnds *time.Time) *time.Time {
	until := leaseEnds
	if e := l.GetExpiresAt(); e != nil {
		if t := e.AsTime(); until == nil || t.Before(*until) {
			until = &t
		}
	}
	return until
}

// limitOf returns the license's limit for metric, if it has a numeric one.
func limitOf(l *licensingv1.License, metric string) (float64, bool) {
	v, ok := l.GetLimits().GetFields()[metric]
	if !ok {
		return 0, false
	}
	n, ok := v.GetKind().(*structpb.Value_NumberValue)
	if !ok {
		return 0, false
	}
	return n.NumberValue, true
}

// TrackUsage adds increment to the metric's running total. The store adds it in one
// conditional statement that holds the row's lock, so concurrent calls queue instead of
// racing: an increment is applied once or not at all, the limit is never passed, and no
// call loses a race (api.md's 503 for a lost race is never needed here). A 503 means the
// increment was not applied (usageStoreError). With an Idempotency-Key, the first answer
// is stored with the increment and a retry gets it back without adding again.
func (s *Server) TrackUsage(ctx context.Context, req *activationsv1.TrackUsageRequest) (*activationsv1.TrackUsageResponse, error) {
	idemKey, err := idempotency.Key(ctx)
	if err != nil {
		return nil, err
	}
	inc, err := s.usageIncrement(ctx, req, inAnyTenant(s.licenses))
	if err != nil {
		return nil, err
	}
	if idemKey != "" {
		return s.trackUsageOnce(ctx, idemKey, req, inc)
	}
	added, err := s.store.AddUsages(ctx, []store.Increment{inc})
	if err != nil {
		return nil, usageStoreError(err)
	}
	return usageAnswer(inc, added[0])
}

// trackUsageOnce is TrackUsage under an Idempotency-Key. The key is the license's
// tenant's, as on every create.
func (s *Server) trackUsageOnce(ctx context.Context, idemKey string, req *activationsv1.TrackUsageRequest, inc store.Increment) (*activationsv1.TrackUsageResponse, error) {
	raw, err := s.store.AddUsageOnce(ctx, idemKey, idempotency.RequestHash("TrackUsage", req), inc, func(added store.Added) ([]byte, error) {
		resp, err := usageAnswer(inc, added)
		if err != nil {
			return nil, err
		}
		return proto.Marshal(resp)
	})
	if err != nil {
		return nil, usageStoreError(err)
	}
	resp := &activationsv1.TrackUsageResponse{}
	if err := proto.Unmarshal(raw, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// usageStoreError is the status of a usage change's failure: a 503 (retry) only when
// the change is known not to be applied. When that could not be learned in time
// (store.ErrNoAnswer) the answer is a 500, which api.md does not tell clients to retry:
// only a retry with the same Idempotency-Key is then safe.
func usageStoreError(err error) error {
	if errors.Is(err, store.ErrNotApplied) {
		return apierr.Unavailable(grpcx.DatabaseUnavailable)
	}
	return err
}

// maxBatchItems bounds the items of one batch call (TrackUsageBatch, ChangeSeatsBatch).
const maxBatchItems = 256

// batchItem is an item of a batch call once checked: its context (carrying the item's
// request id), what it asks of the store, or the error its own call fails with.
type batchItem[C any] struct {
	ctx    context.Context
	change C
	err    error
}

// checkBatch checks the items of a batch call, each as its own call would check it, with
// the licenses of their keys (keyOf) looked up together first (lookUpTogether): one call
// to licensing for those the cache lacks, named to the gateway in one header write.
func checkBatch[I interface{ GetRequestId() string }, C any](ctx context.Context, licenses Licenses, items []I,
	keyOf func(I) string, check func(context.Context, I, findLicense) (C, error)) ([]batchItem[C], error) {
	if len(items) > maxBatchItems {
		return nil, apierr.Invalid("at most %d items in a batch", maxBatchItems)
	}
	keys := make([]string, len(items))
	for i, item := range items {
		keys[i] = keyOf(item)
	}
	find := lookUpTogether(ctx, licenses, keys)
	checked := make([]batchItem[C], len(items))
	for i, item := range items {
		b := &checked[i]
		b.ctx = telemetry.WithRequestID(ctx, item.GetRequestId())
		b.change, b.err = check(b.ctx, item, find)
	}
	return checked, nil
}

// observeItem logs and counts a batch item as a call of method (grpcx.ObserveCall), and
// returns the status its own call would have failed with, or nil.
func (s *Server) observeItem(ctx context.Context, method string, start time.Time, err error) *activationsv1.CallStatus {
	if err = grpcx.ObserveCall(ctx, s.log, method, time.Since(start), err); err == nil {
		return nil
	}
	st := status.Convert(err).Proto()
	return &activationsv1.CallStatus{Code: st.GetCode(), Message: st.GetMessage(), Details: st.GetDetails()}
}

// TrackUsageBatch answers each item as TrackUsage would: the same checks, the same
// answer or error, logged and counted as a TrackUsage call of the item's request id. The
// items that pass the checks are added in one store call (one round trip, one
// transaction), in the order given.
func (s *Server) TrackUsageBatch(ctx context.Context, req *activationsv1.TrackUsageBatchRequest) (*activationsv1.TrackUsageBatchResponse, error) {
	// TrackUsage honours an Idempotency-Key; one key cannot stand for a batch's items
	// (each its own call, of any tenant), so it is refused rather than ignored.
	if err := idempotency.RefuseKey(ctx); err != nil {
		return nil, err
	}
	start := time.Now()
	checked, err := checkBatch(ctx, s.licenses, req.GetItems(), func(item *activationsv1.TrackUsageBatchItem) string {
		return item.GetRequest().GetKey()
	}, func(ctx context.Context, item *activationsv1.TrackUsageBatchItem, find findLicense) (store.Increment, error) {
		return s.usageIncrement(ctx, item.GetRequest(), find)
	})
	if err != nil {
		return nil, err
	}
	var incs []store.Increment
	for _, b := range checked {
		if b.err == nil {
			incs = append(incs, b.change)
		}
	}
	var added []store.Added
	var addErr error
	if len(incs) > 0 {
		added, addErr = s.store.AddUsages(ctx, incs)
		addErr = usageStoreError(addErr)
	}
	resp := &activationsv1.TrackUsageBatchResponse{Results: make([]*activationsv1.TrackUsageBatchResult, len(checked))}
	for i, b := range checked {
		var answer *activationsv1.TrackUsageResponse
		switch {
		case b.err != nil:
		case addErr != nil:
			b.err = addErr
		default:
			answer, b.err = usageAnswer(b.change, added[0])
			added = added[1:]
		}
		result := &activationsv1.TrackUsageBatchResult{Outcome: &activationsv1.TrackUsageBatchResult_Response{Response: answer}}
		if st := s.observeItem(b.ctx, activationsv1.ActivationsService_TrackUsage_FullMethodName, start, b.err); st != nil {
			result.Outcome = &activationsv1.TrackUsageBatchResult_Error{Error: st}
		}
		resp.Results[i] = result
	}
	return resp, nil
}

// ChangeSeatsBatch answers each item as ActivateLicense or DeactivateLicense would: the
// same checks, the same answer or error, logged and counted as a call of that method with
// the item's request id. The changes of the items that pass the checks are made in one
// store call (one round trip, one transaction).
func (s *Server) ChangeSeatsBatch(ctx context.Context, req *activationsv1.ChangeSeatsBatchRequest) (*activationsv1.ChangeSeatsBatchResponse, error) {
	start := time.Now()
	items := req.GetItems()
	checked, err := checkBatch(ctx, s.licenses, items, func(item *activationsv1.ChangeSeatsBatchItem) string {
		if a := item.GetActivate(); a != nil {
			return a.GetKey()
		}
		return item.GetDeactivate().GetKey()
	}, func(ctx context.Context, item *activationsv1.ChangeSeatsBatchItem, find findLicense) (seatCall, error) {
		switch change := item.GetChange().(type) {
		case *activationsv1.ChangeSeatsBatchItem_Activate:
			return s.activation(ctx, change.Activate, find)
		case *activationsv1.ChangeSeatsBatchItem_Deactivate:
			return s.deactivation(ctx, change.Deactivate, find)
		}
		return seatCall{}, apierr.Invalid("a batch item is an activation or a deactivation")
	})
	if err != nil {
		return nil, err
	}
	var changes []store.SeatChange
	for _, b := range checked {
		if b.err == nil && !b.change.none {
			changes = append(changes, b.change.change)
		}
	}
	var changed []store.SeatChanged
	var changeErr error
	if len(changes) > 0 {
		changed, changeErr = s.store.ChangeSeats(ctx, changes)
	}
	resp := &activationsv1.ChangeSeatsBatchResponse{Results: make([]*activationsv1.ChangeSeatsBatchResult, len(checked))}
	for i, b := range checked {
		result := &activationsv1.ChangeSeatsBatchResult{}
		var outcome store.SeatChanged
		switch {
		case b.err != nil || b.change.none:
		case changeErr != nil:
			b.err = changeErr
		default:
			outcome, changed = changed[0], changed[1:]
		}
		method := activationsv1.ActivationsService_DeactivateLicense_FullMethodName
		switch {
		case items[i].GetActivate() != nil:
			method = activationsv1.ActivationsService_ActivateLicense_FullMethodName
			if b.err == nil {
				var activated *activationsv1.ActivateLicenseResponse
				activated, b.err = b.change.answer(outcome)
				result.Outcome = &activationsv1.ChangeSeatsBatchResult_Activated{Activated: activated}
			}
		case items[i].GetDeactivate() != nil:
			result.Outcome = &activationsv1.ChangeSeatsBatchResult_Deactivated{Deactivated: &activationsv1.DeactivateLicenseResponse{Deactivated: outcome.Removed}}
		default:
			method = activationsv1.ActivationsService_ChangeSeatsBatch_FullMethodName
		}
		if st := s.observeItem(b.ctx, method, start, b.err); st != nil {
			result.Outcome = &activationsv1.ChangeSeatsBatchResult_Error{Error: st}
		}
		resp.Results[i] = result
	}
	return resp, nil
}

// usageIncrement checks a track-usage request against the license and says what to add.
func (s *Server) usageIncrement(ctx context.Context, req *activationsv1.TrackUsageRequest, find findLicense) (store.Increment, error) {
	if req.GetKey() == "" {
		return store.Increment{}, errMissingKey
	}
	if req.GetToken() == "" {
		return store.Increment{}, errMissingToken
	}
	metric := req.GetMetric()
	if metric == "" {
		return store.Increment{}, apierr.Invalid("metric is required")
	}
	if pgxx.HasNUL(metric) {
		return store.Increment{}, apierr.Invalid("metric must not contain NUL characters")
	}
	inc := 1.0
	if req.Increment != nil {
		inc = req.GetIncrement()
		if inc < 1 || inc > maxIncrement || inc != math.Trunc(inc) {
			return store.Increment{}, apierr.Invalid("increment must be a positive integer")
		}
	}
	l, err := find(ctx, req.GetKey())
	if err != nil {
		return store.Increment{}, err
	}
	if err := s.usable(l, license.ErrIsExpired); err != nil {
		return store.Increment{}, err
	}
	limit, limited := limitOf(l, metric)
	return store.Increment{
		Tenant: l.GetTenantId(), Key: l.GetKey(), ProductID: l.GetProductId(), TokenHash: hashToken(req.GetToken()),
		Metric: metric, Inc: int64(inc), RequestID: telemetry.RequestID(ctx),
		// A total must stay exact in a JSON number.
		Limit:   math.Min(limit, maxIncrement),
		Allowed: license.LimitKeys[metric] && limited,
	}, nil
}

// usageAnswer is track-usage's answer once the store decided the increment.
func usageAnswer(inc store.Increment, added store.Added) (*activationsv1.TrackUsageResponse, error) {
	switch {
	case !added.SeatOK:
		return nil, errBadToken
	case !inc.Allowed:
		return nil, apierr.Forbidden("Metric not allowed: %s", inc.Metric)
	case !added.Applied:
		return nil, apierr.Forbidden("Usage limit exceeded for metric: %s", inc.Metric)
	}
	return &activationsv1.TrackUsageResponse{Ok: true, Metric: inc.Metric, Usage: float64(added.Used)}, nil
}

// UsageReport is a live snapshot of every limit key of the license.
func (s *Server) UsageReport(ctx context.Context, req *activationsv1.UsageReportRequest) (*activationsv1.UsageReportResponse, error) {
	l, err := s.lookup(ctx, "", req.GetKey())
	if err != nil {
		return nil, err
	}
	usage, err := s.store.Usage(ctx, l.GetTenantId(), l.GetKey())
	if err != nil {
		return nil, err
	}
	return &activationsv1.UsageReportResponse{
		Valid:     s.usable(l, license.ErrExpired) == nil,
		Status:    l.GetStatus(),
		ExpiresAt: l.GetExpiresAt(),
		Metrics:   reportMetrics(l, usage),
	}, nil
}

// reportMetrics lists every limit key, sorted, with remaining = max(0, limit - used) and
// exceeded = used > limit (addendum §7).
func reportMetrics(l *licensingv1.License, usage map[string]int64) []*activationsv1.UsageMetric {
	names := make([]string, 0, len(l.GetLimits().GetFields()))
	for name := range l.GetLimits().GetFields() {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make([]*activationsv1.UsageMetric, 0, len(names))
	for _, name := range names {
		limit, _ := limitOf(l, name)
		used := float64(usage[name])
		out = append(out, &activationsv1.UsageMetric{
			Metric: name, Used: used, Limit: limit, Remaining: math.Max(0, limit-used), Exceeded: used > limit,
		})
	}
	return out
}

// tenantLicense resolves the caller's tenant and its license key (another tenant's key is
// not found).
func (s *Server) tenantLicense(ctx context.Context, key string) (*licensingv1.License, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	l, err := s.lookup(ctx, tenant, key)
	if err != nil {
		return nil, err
	}
	if l.GetTenantId() != tenant {
		return nil, license.ErrNotFound
	}
	return l, nil
}

// ReissueToken gives an existing seat a new token; the old one stops working at once.
func (s *Server) ReissueToken(ctx context.Context, req *activationsv1.ReissueTokenRequest) (*activationsv1.ReissueTokenResponse, error) {
	if err := checkField("instance_id", req.GetInstanceId()); err != nil {
		return nil, err
	}
	l, err := s.tenantLicense(ctx, req.GetKey())
	if err != nil {
		return nil, err
	}
	tok, hash := newToken()
	ok, err := s.store.Reissue(ctx, l.GetTenantId(), l.GetKey(), l.GetProductId(), req.GetInstanceId(), hash)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errNoSeat
	}
	return &activationsv1.ReissueTokenResponse{Reissued: true, Token: tok}, nil
}

// DeactivateByInstanceId is the administrator's way to free a seat without its token.
func (s *Server) DeactivateByInstanceId(ctx context.Context, req *activationsv1.DeactivateByInstanceIdRequest) (*activationsv1.DeactivateByInstanceIdResponse, error) {
	if err := checkField("instance_id", req.GetInstanceId()); err != nil {
		return nil, err
	}
	l, err := s.tenantLicense(ctx, req.GetKey())
	if err != nil {
		return nil, err
	}
	ok, err := s.store.DeactivateInstance(ctx, l.GetTenantId(), l.GetKey(), l.GetProductId(), req.GetInstanceId(), events.ReasonAdmin)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errNoSeat
	}
	return &activationsv1.DeactivateByInstanceIdResponse{Deactivated: true}, nil
}

// ResetUsage zeroes one metric or clears them all, in one statement: a concurrent
// track-usage adds to the total either before the reset or after it.
func (s *Server) ResetUsage(ctx context.Context, req *activationsv1.ResetUsageRequest) (*activationsv1.ResetUsageResponse, error) {
	if req.Metric != nil && !license.LimitKeys[req.GetMetric()] {
		return nil, input.NotOneOf("metric", license.AllowedLimitKeys...)
	}
	l, err := s.tenantLicense(ctx, req.GetKey())
	if err != nil {
		return nil, err
	}
	usage, err := s.store.ResetUsage(ctx, l.GetTenantId(), l.GetKey(), l.GetProductId(), req.Metric)
	if pgxx.IsSerializationFailure(err) {
		return nil, errUsageRace
	}
	if err != nil {
		return nil, usageStoreError(err)
	}
	return &activationsv1.ResetUsageResponse{Key: l.GetKey(), Usage: toDoubles(usage)}, nil
}

func toDoubles(m map[string]int64) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = float64(v)
	}
	return out
}

// ListActivations lists a license's seats, oldest first.
func (s *Server) ListActivations(ctx context.Context, req *activationsv1.ListActivationsRequest) (*activationsv1.ListActivationsResponse, error) {
	l, err := s.tenantLicense(ctx, req.GetKey())
	if err != nil {
		return nil, err
	}
	seats, err := s.store.Seats(ctx, l.GetTenantId(), l.GetKey())
	if err != nil {
		return nil, err
	}
	out := &activationsv1.ListActivationsResponse{Key: l.GetKey(), Activations: []*activationsv1.Activation{}}
	for _, st := range seats {
		out.Activations = append(out.Activations, &activationsv1.Activation{InstanceId: st.InstanceID, ActivatedAt: timestamppb.New(st.ActivatedAt)})
	}
	return out, nil
}

// RecentActivations lists the tenant's newest seats, without those of licenses deleted
// lately: the license.deleted purge may not have reached this service yet (it, or NATS,
// was down at delete time), and a deleted license has no seats.
func (s *Server) RecentActivations(ctx context.Context, req *activationsv1.RecentActivationsRequest) (*activationsv1.RecentActivationsResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	limit := defaultRecentLimit
	if req.Limit != nil {
		if req.GetLimit() < 1 || req.GetLimit() > maxRecentLimit {
			return nil, apierr.Invalid("limit must be an integer between 1 and %d", maxRecentLimit)
		}
		limit = int(req.GetLimit())
	}
	deleted, err := s.licenses.DeletedKeys(ctx, tenant)
	if err != nil {
		return nil, err
	}
	seats, err := s.store.Recent(ctx, tenant, limit, deleted)
	if err != nil {
		return nil, err
	}
	return &activationsv1.RecentActivationsResponse{Activations: recentOf(seats)}, nil
}

func recentOf(seats []store.Seat) []*activationsv1.RecentActivation {
	out := make([]*activationsv1.RecentActivation, 0, len(seats))
	for _, st := range seats {
		out = append(out, &activationsv1.RecentActivation{Key: st.Key, InstanceId: st.InstanceID, ActivatedAt: timestamppb.New(st.ActivatedAt)})
	}
	return out
}

// GetSeatSummaries gives licensing the seat count and usage of up to 1000 of the
// caller's license keys.
func (s *Server) GetSeatSummaries(ctx context.Context, req *activationsv1.GetSeatSummariesRequest) (*activationsv1.GetSeatSummariesResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	if len(req.GetKeys()) > maxSummaryKeys {
		return nil, apierr.Invalid("keys: at most %d per call", maxSummaryKeys)
	}
	out := &activationsv1.GetSeatSummariesResponse{Summaries: map[string]*activationsv1.SeatSummary{}}
	if len(req.GetKeys()) == 0 {
		return out, nil
	}
	sums, err := s.store.Summaries(ctx, tenant, req.GetKeys())
	if err != nil {
		return nil, err
	}
	for k, sum := range sums {
		out.Summaries[k] = &activationsv1.SeatSummary{ActivationsCount: int32(sum.Seats), Usage: toDoubles(sum.Usage)}
	}
	return out, nil
}

// GetActivationStats gives licensing's admin/stats the tenant's seat total and newest
// seats, without those of the licenses licensing says it deleted (exclude_keys).
func (s *Server) GetActivationStats(ctx context.Context, req *activationsv1.GetActivationStatsRequest) (*activationsv1.GetActivationStatsResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	limit := int(req.GetRecentLimit())
	if limit <= 0 {
		limit = defaultStatsRecent
	}
	limit = min(limit, maxRecentLimit)
	n, err := s.store.CountSeats(ctx, tenant, req.GetExcludeKeys())
	if err != nil {
		return nil, err
	}
	seats, err := s.store.Recent(ctx, tenant, limit, req.GetExcludeKeys())
	if err != nil {
		return nil, err
	}
	return &activationsv1.GetActivationStatsResponse{TotalActivations: int32(n), Recent: recentOf(seats)}, nil
}
