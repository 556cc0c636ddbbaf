package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/grpcx/grpcxtest"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

var now = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

func newTest(ls ...*licensingv1.License) (*Server, *fakeStore) {
	f := &fakeLicenses{byKey: map[string]*licensingv1.License{}}
	for _, l := range ls {
		f.byKey[l.GetKey()] = l
	}
	st := newFakeStore()
	s := New(st, f, slog.New(slog.DiscardHandler))
	s.now = func() time.Time { return now }
	return s, st
}

// wantErr fails unless err is the apierr with code and exact message.
func wantErr(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	var e *apierr.Error
	if !errors.As(err, &e) || e.Code != code || e.Message != msg {
		t.Fatalf("error %v, want %v %q", err, code, msg)
	}
}

func activate(t *testing.T, s *Server, key, instance string) *activationsv1.ActivateLicenseResponse {
	t.Helper()
	resp, err := s.ActivateLicense(context.Background(), &activationsv1.ActivateLicenseRequest{Key: key, InstanceId: instance})
	if err != nil {
		t.Fatalf("activate %s/%s: %v", key, instance, err)
	}
	return resp
}

func TestActivateReturnsTheTokenOnceAndStoresOnlyItsHash(t *testing.T) {
	s, st := newTest(lic("t1", "K1", 2, nil))
	first := activate(t, s, "K1", "host-a")
	if !first.GetActivated() || first.Token == nil || first.AlreadyActivated != nil || !strings.HasPrefix(first.GetToken(), tokenPrefix) {
		t.Fatalf("first activation %v", first)
	}
	sum := sha256.Sum256([]byte(first.GetToken()))
	if string(st.seats[0].hash) != string(sum[:]) {
		t.Fatal("the stored hash is not the token's SHA-256")
	}
	again := activate(t, s, "K1", "host-a")
	if !again.GetActivated() || again.Token != nil || !again.GetAlreadyActivated() {
		t.Fatalf("repeat activation %v", again)
	}
	// A repeat does not replace the seat's token.
	if string(st.seats[0].hash) != string(sum[:]) || len(st.seats) != 1 {
		t.Fatal("the repeat changed the seat")
	}
}

func TestActivateRefusals(t *testing.T) {
	s, _ := newTest(
		lic("t1", "CAP1", 1, nil),
		lic("t1", "REVOKED", 0, nil, revoked),
		lic("t1", "EXPIRED", 0, nil, expiresAt(now.Add(-time.Second))),
		lic("t1", "EXPIRES-NOW", 0, nil, expiresAt(now)),
		lic("t1", "REVOKED-EXPIRED", 0, nil, revoked, expiresAt(now.Add(-time.Hour))),
	)
	activate(t, s, "CAP1", "one")
	for _, tc := range []struct {
		name, key, instance string
		code                codes.Code
		msg                 string
	}{
		{"cap reached", "CAP1", "two", codes.PermissionDenied, "Activation limit exceeded for this license key"},
		{"unknown key", "NOPE", "x", codes.NotFound, "License key not found"},
		{"over-long key is unknown", strings.Repeat("K", 300), "x", codes.NotFound, "License key not found"},
		{"revoked", "REVOKED", "x", codes.PermissionDenied, "License is not active"},
		{"expired", "EXPIRED", "x", codes.PermissionDenied, "License has expired"},
		{"expiry is exclusive", "EXPIRES-NOW", "x", codes.PermissionDenied, "License has expired"},
		{"revoked wins over expired, as in verify-license", "REVOKED-EXPIRED", "x", codes.PermissionDenied, "License is not active"},
		{"missing key", "", "x", codes.InvalidArgument, "key is required"},
		{"missing instance_id", "CAP1", "", codes.InvalidArgument, "instance_id is required"},
		{"over-long instance_id", "CAP1", strings.Repeat("é", 257), codes.InvalidArgument, "instance_id must be at most 256 characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.ActivateLicense(context.Background(), &activationsv1.ActivateLicenseRequest{Key: tc.key, InstanceId: tc.instance})
			wantErr(t, err, tc.code, tc.msg)
		})
	}
	// The seat that exists is still there for its repeat, cap or not.
	if !activate(t, s, "CAP1", "one").GetAlreadyActivated() {
		t.Fatal("repeat at the cap")
	}
}

func TestActivateUnlimitedAndDeletedLicenses(t *testing.T) {
	s, st := newTest(lic("t1", "FREE", 0, nil), lic("t1", "GONE", 0, nil))
	for i := range 50 {
		activate(t, s, "FREE", strings.Repeat("i", i+1))
	}
	// The license's deletion was processed here while licensing still answered for it.
	st.deleted["t1/GONE"] = true
	_, err := s.ActivateLicense(context.Background(), &activationsv1.ActivateLicenseRequest{Key: "GONE", InstanceId: "x"})
	wantErr(t, err, codes.NotFound, "License key not found")
}

func TestOnlyTheTokenDeactivates(t *testing.T) {
	s, st := newTest(lic("t1", "K1", 3, nil), lic("t1", "K2", 3, nil))
	tok := activate(t, s, "K1", "host-a").GetToken()
	other := activate(t, s, "K2", "host-a").GetToken()
	ctx := context.Background()
	for _, tc := range []struct {
		name, key, token string
	}{
		{"instance_id is not a token", "K1", "host-a"},
		{"another license's token", "K1", other},
		{"unknown key", "NOPE", tok},
		{"over-long key", strings.Repeat("K", 1000), tok},
	} {
		resp, err := s.DeactivateLicense(ctx, &activationsv1.DeactivateLicenseRequest{Key: tc.key, Token: tc.token})
		if err != nil || resp.GetDeactivated() {
			t.Fatalf("%s: %v %v", tc.name, resp, err)
		}
	}
	resp, err := s.DeactivateLicense(ctx, &activationsv1.DeactivateLicenseRequest{Key: "K1", Token: tok})
	if err != nil || !resp.GetDeactivated() || len(st.seats) != 1 {
		t.Fatalf("deactivate with the token: %v %v", resp, err)
	}
	resp, err = s.DeactivateLicense(ctx, &activationsv1.DeactivateLicenseRequest{Key: "K1", Token: tok})
	if err != nil || resp.GetDeactivated() {
		t.Fatalf("second deactivation: %v %v", resp, err)
	}
	_, err = s.DeactivateLicense(ctx, &activationsv1.DeactivateLicenseRequest{Key: "K1"})
	wantErr(t, err, codes.InvalidArgument, "token is required")
	_, err = s.DeactivateLicense(ctx, &activationsv1.DeactivateLicenseRequest{Token: tok})
	wantErr(t, err, codes.InvalidArgument, "key is required")
}

func TestDeactivateWorksOnARevokedLicense(t *testing.T) {
	l := lic("t1", "K1", 1, nil)
	s, _ := newTest(l)
	tok := activate(t, s, "K1", "a").GetToken()
	revoked(l)
	resp, err := s.DeactivateLicense(context.Background(), &activationsv1.DeactivateLicenseRequest{Key: "K1", Token: tok})
	if err != nil || !resp.GetDeactivated() {
		t.Fatalf("%v %v", resp, err)
	}
}

func TestValidateIsValidOnlyForAUsableLicenseWithASeat(t *testing.T) {
	active := lic("t1", "K1", 2, nil)
	exp := lic("t1", "EXP", 2, nil)
	s, _ := newTest(active, exp)
	activate(t, s, "K1", "host-a")
	activate(t, s, "EXP", "host-a")
	exp.ExpiresAt = lic("", "", 0, nil, expiresAt(now.Add(-time.Minute))).ExpiresAt
	valid := func(key, instance string) bool {
		t.Helper()
		resp, err := s.ValidateLicense(context.Background(), &activationsv1.ValidateLicenseRequest{Key: key, InstanceId: instance})
		if err != nil {
			t.Fatalf("validate %s/%s: %v", key, instance, err)
		}
		return resp.GetValid()
	}
	if !valid("K1", "host-a") {
		t.Fatal("active license with a seat")
	}
	for _, c := range [][2]string{{"K1", "host-b"}, {"NOPE", "host-a"}, {"", "host-a"}, {"K1", ""}, {"EXP", "host-a"}, {strings.Repeat("K", 300), "host-a"}} {
		if valid(c[0], c[1]) {
			t.Fatalf("%v is valid", c)
		}
	}
	revoked(active)
	if valid("K1", "host-a") {
		t.Fatal("revoked license is valid")
	}
}

func TestValidateReportsAnOutageToGRPCCallers(t *testing.T) {
	s, _ := newTest()
	s.licenses.(*fakeLicenses).err = apierr.Unavailable("Licensing service unavailable, retry")
	_, err := s.ValidateLicense(context.Background(), &activationsv1.ValidateLicenseRequest{Key: "K", InstanceId: "i"})
	wantErr(t, err, codes.Unavailable, "Licensing service unavailable, retry")
}

func track(s *Server, key, token, metric string, inc *float64) (*activationsv1.TrackUsageResponse, error) {
	return s.TrackUsage(context.Background(), &activationsv1.TrackUsageRequest{Key: key, Token: token, Metric: metric, Increment: inc})
}

func TestTrackUsageAddsToTheRunningTotal(t *testing.T) {
	s, _ := newTest(lic("t1", "K1", 1, map[string]any{"api_calls_per_day": 10, "seats": 2.5}))
	tok := activate(t, s, "K1", "a").GetToken()
	for _, step := range []struct {
		metric string
		inc    *float64
		want   float64
	}{
		{"api_calls_per_day", nil, 1},
		{"api_calls_per_day", proto.Float64(4), 5},
		{"api_calls_per_day", proto.Float64(5), 10}, // landing exactly on the limit is allowed
		{"seats", proto.Float64(2), 2},              // a fractional limit still caps integer totals
	} {
		resp, err := track(s, "K1", tok, step.metric, step.inc)
		if err != nil || !resp.GetOk() || resp.GetMetric() != step.metric || resp.GetUsage() != step.want {
			t.Fatalf("%s +%v: %v %v, want %v", step.metric, step.inc, resp, err, step.want)
		}
	}
	_, err := track(s, "K1", tok, "api_calls_per_day", nil)
	wantErr(t, err, codes.PermissionDenied, "Usage limit exceeded for metric: api_calls_per_day")
	_, err = track(s, "K1", tok, "seats", nil)
	wantErr(t, err, codes.PermissionDenied, "Usage limit exceeded for metric: seats")
	// The refused increments changed nothing.
	usage, _ := s.store.Usage(context.Background(), "t1", "K1")
	if usage["api_calls_per_day"] != 10 || usage["seats"] != 2 {
		t.Fatalf("usage %v", usage)
	}
}

func TestTrackUsageRefusals(t *testing.T) {
	limits := map[string]any{"users": 5}
	active := lic("t1", "K1", 1, limits)
	s, _ := newTest(active, lic("t1", "REV", 1, limits), lic("t1", "EXP", 1, limits))
	tok := activate(t, s, "K1", "a").GetToken()
	revTok := activate(t, s, "REV", "a").GetToken()
	expTok := activate(t, s, "EXP", "a").GetToken()
	revoked(s.licenses.(*fakeLicenses).byKey["REV"])
	expiresAt(now.Add(-time.Hour))(s.licenses.(*fakeLicenses).byKey["EXP"])
	batch := &activationsv1.TrackUsageBatchRequest{}
	for _, tc := range []struct {
		name, key, token, metric string
		inc                      *float64
		code                     codes.Code
		msg                      string
	}{
		{"unknown key", "NOPE", tok, "users", nil, codes.NotFound, "License key not found"},
		{"revoked", "REV", revTok, "users", nil, codes.PermissionDenied, "License is not active"},
		{"expired", "EXP", expTok, "users", nil, codes.PermissionDenied, "License is expired"},
		{"instance_id is not a token", "K1", "a", "users", nil, codes.PermissionDenied, "Invalid activation token"},
		{"another license's token", "K1", revTok, "users", nil, codes.PermissionDenied, "Invalid activation token"},
		{"not allowlisted", "K1", tok, "storage", nil, codes.PermissionDenied, "Metric not allowed: storage"},
		{"allowlisted but not in limits", "K1", tok, "seats", nil, codes.PermissionDenied, "Metric not allowed: seats"},
		{"over the limit in one step", "K1", tok, "users", proto.Float64(6), codes.PermissionDenied, "Usage limit exceeded for metric: users"},
		{"zero increment", "K1", tok, "users", proto.Float64(0), codes.InvalidArgument, "increment must be a positive integer"},
		{"negative increment", "K1", tok, "users", proto.Float64(-1), codes.InvalidArgument, "increment must be a positive integer"},
		{"fractional increment", "K1", tok, "users", proto.Float64(1.5), codes.InvalidArgument, "increment must be a positive integer"},
		{"huge increment", "K1", tok, "users", proto.Float64(1e300), codes.InvalidArgument, "increment must be a positive integer"},
		{"missing metric", "K1", tok, "", nil, codes.InvalidArgument, "metric is required"},
		{"missing token", "K1", "", "users", nil, codes.InvalidArgument, "token is required"},
		{"missing key", "", tok, "users", nil, codes.InvalidArgument, "key is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := track(s, tc.key, tc.token, tc.metric, tc.inc)
			wantErr(t, err, tc.code, tc.msg)
		})
		batch.Items = append(batch.Items, &activationsv1.TrackUsageBatchItem{
			Request: &activationsv1.TrackUsageRequest{Key: tc.key, Token: tc.token, Metric: tc.metric, Increment: tc.inc},
		})
	}
	if usage, _ := s.store.Usage(context.Background(), "t1", "K1"); len(usage) != 0 {
		t.Fatalf("a refused call wrote usage %v", usage)
	}

	// The same calls as the items of one batch, with two good ones among them: each
	// refused with the very status TrackUsage gave, the good ones applied.
	good := &activationsv1.TrackUsageBatchItem{Request: &activationsv1.TrackUsageRequest{Key: "K1", Token: tok, Metric: "users", Increment: proto.Float64(2)}}
	batch.Items = append([]*activationsv1.TrackUsageBatchItem{good}, append(batch.Items, good)...)
	resp, err := s.TrackUsageBatch(context.Background(), batch)
	if err != nil || len(resp.GetResults()) != len(batch.Items) {
		t.Fatalf("%d answers for %d items, %v", len(resp.GetResults()), len(batch.Items), err)
	}
	for i, item := range batch.Items {
		got := resp.GetResults()[i]
		want, err := s.TrackUsage(context.Background(), item.GetRequest())
		if item == good {
			if got.GetResponse().GetUsage() != float64(2+2*min(i, 1)) {
				t.Errorf("item %d: %v, want usage %d", i, got, 2+2*min(i, 1))
			}
			continue
		}
		st := status.Convert(err).Proto()
		if e := got.GetError(); want != nil || !proto.Equal(e, &activationsv1.CallStatus{Code: st.GetCode(), Message: st.GetMessage(), Details: st.GetDetails()}) {
			t.Errorf("item %d: %v, want %v", i, got, st)
		}
	}
}

// Parallel increments: every success saw a distinct total, the total lands exactly on the
// limit, and the others are refused at the limit (no call loses a race).
func TestTrackUsageInParallelLandsExactlyOnTheLimit(t *testing.T) {
	s, _ := newTest(lic("t1", "K1", 1, map[string]any{"users": 50}))
	tok := activate(t, s, "K1", "a").GetToken()
	type result struct {
		total float64
		err   error
	}
	out := make(chan result, 80)
	for range 80 {
		go func() {
			r, err := track(s, "K1", tok, "users", nil)
			out <- result{r.GetUsage(), err}
		}()
	}
	seen := map[float64]bool{}
	ok := 0
	for range 80 {
		r := <-out
		switch {
		case r.err == nil:
			if seen[r.total] || r.total < 1 || r.total > 50 {
				t.Fatalf("total %v reported twice or out of range", r.total)
			}
			seen[r.total] = true
			ok++
		case apierr.Is(r.err, codes.PermissionDenied):
		default:
			t.Fatalf("unexpected %v", r.err)
		}
	}
	usage, _ := s.store.Usage(context.Background(), "t1", "K1")
	if ok != 50 || usage["users"] != 50 {
		t.Fatalf("total %d after %d successful increments, want 50 and 50", usage["users"], ok)
	}
}

func TestUsageReportIsALiveSnapshotOfEveryLimitKey(t *testing.T) {
	l := lic("t1", "K1", 1, map[string]any{"users": 5, "projects": 3, "rate_limit_rps": 0.5}, expiresAt(now.Add(time.Hour)))
	s, st := newTest(l)
	st.usage[usageKey("t1", "K1", "users")] = &usageRow{used: 2, version: 1}
	st.usage[usageKey("t1", "K1", "projects")] = &usageRow{used: 4, version: 2} // limit lowered after use
	st.usage[usageKey("t1", "K1", "features")] = &usageRow{used: 9, version: 3} // no longer a limit key
	resp, err := s.UsageReport(context.Background(), &activationsv1.UsageReportRequest{Key: "K1"})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetValid() || resp.GetStatus() != "active" || !resp.GetExpiresAt().AsTime().Equal(now.Add(time.Hour)) {
		t.Fatalf("report %v", resp)
	}
	var got []string
	for _, m := range resp.GetMetrics() {
		got = append(got, strings.Join([]string{m.GetMetric(), ftoa(m.GetUsed()), ftoa(m.GetLimit()), ftoa(m.GetRemaining()), btoa(m.GetExceeded())}, " "))
	}
	want := []string{"projects 4 3 0 true", "rate_limit_rps 0 0.5 0.5 false", "users 2 5 3 false"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("metrics\n got  %v\n want %v", got, want)
	}
	revoked(l)
	if resp, _ := s.UsageReport(context.Background(), &activationsv1.UsageReportRequest{Key: "K1"}); resp.GetValid() || resp.GetStatus() != "revoked" {
		t.Fatalf("revoked report %v", resp)
	}
	_, err = s.UsageReport(context.Background(), &activationsv1.UsageReportRequest{Key: "NOPE"})
	wantErr(t, err, codes.NotFound, "License key not found")
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func btoa(b bool) string { return strconv.FormatBool(b) }

func TestAdminRoutesAreScopedToTheCallersTenant(t *testing.T) {
	s, _ := newTest(lic("t1", "K1", 2, map[string]any{"users": 5}), lic("t2", "K2", 2, nil))
	activate(t, s, "K1", "host-a")
	activate(t, s, "K2", "host-a")
	ctx := as("t2")
	const notFound = "License key not found"
	_, err := s.ReissueToken(ctx, &activationsv1.ReissueTokenRequest{Key: "K1", InstanceId: "host-a"})
	wantErr(t, err, codes.NotFound, notFound)
	_, err = s.DeactivateByInstanceId(ctx, &activationsv1.DeactivateByInstanceIdRequest{Key: "K1", InstanceId: "host-a"})
	wantErr(t, err, codes.NotFound, notFound)
	_, err = s.ResetUsage(ctx, &activationsv1.ResetUsageRequest{Key: "K1"})
	wantErr(t, err, codes.NotFound, notFound)
	_, err = s.ListActivations(ctx, &activationsv1.ListActivationsRequest{Key: "K1"})
	wantErr(t, err, codes.NotFound, notFound)
	recent, err := s.RecentActivations(ctx, &activationsv1.RecentActivationsRequest{})
	if err != nil || len(recent.GetActivations()) != 1 || recent.GetActivations()[0].GetKey() != "K2" {
		t.Fatalf("recent of t2: %v %v", recent, err)
	}
	sums, err := s.GetSeatSummaries(ctx, &activationsv1.GetSeatSummariesRequest{Keys: []string{"K1", "K2"}})
	if err != nil || len(sums.GetSummaries()) != 1 || sums.GetSummaries()["K2"].GetActivationsCount() != 1 {
		t.Fatalf("summaries of t2: %v %v", sums, err)
	}
	stats, err := s.GetActivationStats(ctx, &activationsv1.GetActivationStatsRequest{})
	if err != nil || stats.GetTotalActivations() != 1 {
		t.Fatalf("stats of t2: %v %v", stats, err)
	}
	// Without a tenant the admin routes refuse.
	_, err = s.ListActivations(context.Background(), &activationsv1.ListActivationsRequest{Key: "K1"})
	wantErr(t, err, codes.Unauthenticated, "Unauthorized")
}

// Seats of a license licensing deleted stay here until the license.deleted purge runs
// (activations or NATS may have been down): the tenant-wide readers leave them out.
func TestTenantWideReadersLeaveOutDeletedLicenses(t *testing.T) {
	s, _ := newTest(lic("t1", "GONE", 2, nil), lic("t1", "KEPT", 2, nil))
	activate(t, s, "GONE", "host-a")
	activate(t, s, "GONE", "host-b")
	activate(t, s, "KEPT", "host-a")
	s.licenses.(*fakeLicenses).deleted = map[string][]string{"t1": {"GONE"}}
	ctx := as("t1")
	recent, err := s.RecentActivations(ctx, &activationsv1.RecentActivationsRequest{})
	if err != nil || len(recent.GetActivations()) != 1 || recent.GetActivations()[0].GetKey() != "KEPT" {
		t.Fatalf("recent: %v %v", recent, err)
	}
	stats, err := s.GetActivationStats(ctx, &activationsv1.GetActivationStatsRequest{ExcludeKeys: []string{"GONE"}})
	if err != nil || stats.GetTotalActivations() != 1 || len(stats.GetRecent()) != 1 {
		t.Fatalf("stats: %v %v", stats, err)
	}
	// recent-activations cannot tell without licensing: it says retry.
	s.licenses.(*fakeLicenses).err = apierr.Unavailable("Licensing service unavailable, retry")
	_, err = s.RecentActivations(ctx, &activationsv1.RecentActivationsRequest{})
	wantErr(t, err, codes.Unavailable, "Licensing service unavailable, retry")
}

func TestReissueTokenReplacesTheSeatsToken(t *testing.T) {
	s, _ := newTest(lic("t1", "K1", 2, map[string]any{"users": 5}))
	old := activate(t, s, "K1", "host-a").GetToken()
	ctx := as("t1")
	resp, err := s.ReissueToken(ctx, &activationsv1.ReissueTokenRequest{Key: "K1", InstanceId: "host-a"})
	if err != nil || !resp.GetReissued() || resp.GetToken() == old || !strings.HasPrefix(resp.GetToken(), tokenPrefix) {
		t.Fatalf("reissue %v %v", resp, err)
	}
	_, err = track(s, "K1", old, "users", nil)
	wantErr(t, err, codes.PermissionDenied, "Invalid activation token")
	if _, err := track(s, "K1", resp.GetToken(), "users", nil); err != nil {
		t.Fatal(err)
	}
	_, err = s.ReissueToken(ctx, &activationsv1.ReissueTokenRequest{Key: "K1", InstanceId: "host-b"})
	wantErr(t, err, codes.NotFound, "No activation found for that key and instance_id")
	_, err = s.ReissueToken(ctx, &activationsv1.ReissueTokenRequest{Key: "K1"})
	wantErr(t, err, codes.InvalidArgument, "instance_id is required")
	_, err = s.ReissueToken(ctx, &activationsv1.ReissueTokenRequest{InstanceId: "host-a"})
	wantErr(t, err, codes.InvalidArgument, "key is required")
}

func TestDeactivateByInstanceIdFreesTheSeat(t *testing.T) {
	s, _ := newTest(lic("t1", "K1", 1, nil))
	activate(t, s, "K1", "host-a")
	ctx := as("t1")
	resp, err := s.DeactivateByInstanceId(ctx, &activationsv1.DeactivateByInstanceIdRequest{Key: "K1", InstanceId: "host-a"})
	if err != nil || !resp.GetDeactivated() {
		t.Fatalf("%v %v", resp, err)
	}
	_, err = s.DeactivateByInstanceId(ctx, &activationsv1.DeactivateByInstanceIdRequest{Key: "K1", InstanceId: "host-a"})
	wantErr(t, err, codes.NotFound, "No activation found for that key and instance_id")
	// The freed seat can be taken again under the cap of 1.
	if activate(t, s, "K1", "host-b").Token == nil {
		t.Fatal("freed seat not available")
	}
}

func TestResetUsage(t *testing.T) {
	s, st := newTest(lic("t1", "K1", 1, map[string]any{"users": 5, "projects": 5}))
	st.usage[usageKey("t1", "K1", "users")] = &usageRow{used: 3, version: 1}
	st.usage[usageKey("t1", "K1", "projects")] = &usageRow{used: 2, version: 2}
	ctx := as("t1")
	resp, err := s.ResetUsage(ctx, &activationsv1.ResetUsageRequest{Key: "K1", Metric: proto.String("users")})
	if err != nil || resp.GetKey() != "K1" || len(resp.GetUsage()) != 2 || resp.GetUsage()["users"] != 0 || resp.GetUsage()["projects"] != 2 {
		t.Fatalf("reset users: %v %v", resp, err)
	}
	resp, err = s.ResetUsage(ctx, &activationsv1.ResetUsageRequest{Key: "K1"})
	if err != nil || len(resp.GetUsage()) != 0 {
		t.Fatalf("reset all: %v %v", resp, err)
	}
	_, err = s.ResetUsage(ctx, &activationsv1.ResetUsageRequest{Key: "K1", Metric: proto.String("storage")})
	wantErr(t, err, codes.InvalidArgument, "metric must be users, seats, admins, projects, environments, tenants, api_calls_per_day, rate_limit_rps, concurrent_sessions or features")
	_, err = s.ResetUsage(ctx, &activationsv1.ResetUsageRequest{Key: "NOPE"})
	wantErr(t, err, codes.NotFound, "License key not found")
}

func TestListAndRecentActivations(t *testing.T) {
	s, _ := newTest(lic("t1", "K1", 0, nil), lic("t1", "K2", 0, nil))
	activate(t, s, "K1", "a")
	activate(t, s, "K2", "b")
	activate(t, s, "K1", "c")
	ctx := as("t1")
	list, err := s.ListActivations(ctx, &activationsv1.ListActivationsRequest{Key: "K1"})
	if err != nil || list.GetKey() != "K1" || len(list.GetActivations()) != 2 ||
		list.GetActivations()[0].GetInstanceId() != "a" || list.GetActivations()[1].GetInstanceId() != "c" {
		t.Fatalf("list %v %v", list, err)
	}
	empty, err := s.ListActivations(ctx, &activationsv1.ListActivationsRequest{Key: "K2"})
	if err != nil || len(empty.GetActivations()) != 1 {
		t.Fatalf("list K2 %v %v", empty, err)
	}
	recent, err := s.RecentActivations(ctx, &activationsv1.RecentActivationsRequest{Limit: proto.Int32(2)})
	if err != nil || len(recent.GetActivations()) != 2 || recent.GetActivations()[0].GetInstanceId() != "c" || recent.GetActivations()[1].GetInstanceId() != "b" {
		t.Fatalf("recent %v %v", recent, err)
	}
	for _, bad := range []int32{0, -1, 1001} {
		_, err := s.RecentActivations(ctx, &activationsv1.RecentActivationsRequest{Limit: proto.Int32(bad)})
		wantErr(t, err, codes.InvalidArgument, "limit must be an integer between 1 and 1000")
	}
}

func TestSeatSummariesRefuseTooManyKeys(t *testing.T) {
	s, _ := newTest()
	_, err := s.GetSeatSummaries(as("t1"), &activationsv1.GetSeatSummariesRequest{Keys: make([]string, maxSummaryKeys+1)})
	wantErr(t, err, codes.InvalidArgument, "keys: at most 1000 per call")
	resp, err := s.GetSeatSummaries(as("t1"), &activationsv1.GetSeatSummariesRequest{})
	if err != nil || resp.GetSummaries() == nil {
		t.Fatalf("%v %v", resp, err)
	}
}

// Activations and deactivations as the items of one batch: each refused with the very
// status its own call gives, the good ones made and answered as their own calls would be.
func TestChangeSeatsBatchAnswersEachItemAsItsOwnCall(t *testing.T) {
	s, st := newTest(
		lic("t1", "CAP1", 1, nil),
		lic("t1", "K1", 3, nil),
		lic("t1", "REVOKED", 0, nil, revoked),
		lic("t1", "EXPIRED", 0, nil, expiresAt(now.Add(-time.Second))),
	)
	activate(t, s, "CAP1", "one")
	tok := activate(t, s, "K1", "host-a").GetToken()
	ctx := context.Background()
	act := func(key, instance string) *activationsv1.ChangeSeatsBatchItem {
		return &activationsv1.ChangeSeatsBatchItem{Change: &activationsv1.ChangeSeatsBatchItem_Activate{
			Activate: &activationsv1.ActivateLicenseRequest{Key: key, InstanceId: instance}}}
	}
	deact := func(key, token string) *activationsv1.ChangeSeatsBatchItem {
		return &activationsv1.ChangeSeatsBatchItem{Change: &activationsv1.ChangeSeatsBatchItem_Deactivate{
			Deactivate: &activationsv1.DeactivateLicenseRequest{Key: key, Token: token}}}
	}
	refused := []*activationsv1.ChangeSeatsBatchItem{
		act("CAP1", "two"), act("NOPE", "x"), act(strings.Repeat("K", 300), "x"), act("REVOKED", "x"),
		act("EXPIRED", "x"), act("", "x"), act("CAP1", ""), act("CAP1", strings.Repeat("é", 257)),
		deact("K1", ""), deact("", tok),
	}
	unchanged := []*activationsv1.ChangeSeatsBatchItem{act("CAP1", "one"), deact("NOPE", tok), deact("K1", "host-a")}
	batch := &activationsv1.ChangeSeatsBatchRequest{Items: append(append([]*activationsv1.ChangeSeatsBatchItem{
		act("K1", "host-b"), deact("K1", tok), {}}, refused...), unchanged...)}
	resp, err := s.ChangeSeatsBatch(ctx, batch)
	if err != nil || len(resp.GetResults()) != len(batch.GetItems()) {
		t.Fatalf("%d answers for %d items, %v", len(resp.GetResults()), len(batch.GetItems()), err)
	}
	results := resp.GetResults()
	if a := results[0].GetActivated(); !a.GetActivated() || !strings.HasPrefix(a.GetToken(), tokenPrefix) || a.AlreadyActivated != nil {
		t.Errorf("new seat: %v", results[0])
	}
	if d := results[1].GetDeactivated(); !d.GetDeactivated() {
		t.Errorf("deactivation with the token: %v", results[1])
	}
	if e := results[2].GetError(); codes.Code(e.GetCode()) != codes.InvalidArgument {
		t.Errorf("an item that is neither: %v", results[2])
	}
	for i, item := range batch.GetItems()[3:] {
		got := results[3+i]
		var want proto.Message
		if a := item.GetActivate(); a != nil {
			resp, err := s.ActivateLicense(ctx, a)
			want = resultOf(resp, err, func(r *activationsv1.ChangeSeatsBatchResult) {
				r.Outcome = &activationsv1.ChangeSeatsBatchResult_Activated{Activated: resp}
			})
		} else {
			resp, err := s.DeactivateLicense(ctx, item.GetDeactivate())
			want = resultOf(resp, err, func(r *activationsv1.ChangeSeatsBatchResult) {
				r.Outcome = &activationsv1.ChangeSeatsBatchResult_Deactivated{Deactivated: resp}
			})
		}
		if !proto.Equal(got, want) {
			t.Errorf("item %d: %v, want %v", 3+i, got, want)
		}
	}
	var instances []string
	for _, seat := range st.seats {
		instances = append(instances, seat.key+"/"+seat.instance)
	}
	if got := strings.Join(instances, " "); got != "CAP1/one K1/host-b" {
		t.Fatalf("seats %s, want CAP1/one K1/host-b", got)
	}
}

// A batch's items have their licenses looked up together, in one call however many
// items there are, and none alone; the answer names every item's tenant for the gateway
// in one header write (gRPC copies the header at each write).
func TestABatchLooksItsLicensesUpTogetherAndNamesTheirTenantsInOneHeaderWrite(t *testing.T) {
	s, _ := newTest(lic("t1", "K1", 5, nil), lic("t2", "K2", 5, nil), lic("t1", "K3", 5, nil))
	ctx, stream := grpcxtest.Call(context.Background(), "/keyhouse.activations.v1.Activations/ChangeSeatsBatch")
	var items []*activationsv1.ChangeSeatsBatchItem
	for i, key := range []string{"K1", "K2", "K3", "K1", "NOPE"} {
		items = append(items, &activationsv1.ChangeSeatsBatchItem{Change: &activationsv1.ChangeSeatsBatchItem_Activate{
			Activate: &activationsv1.ActivateLicenseRequest{Key: key, InstanceId: fmt.Sprintf("host-%d", i)}}})
	}
	if _, err := s.ChangeSeatsBatch(ctx, &activationsv1.ChangeSeatsBatchRequest{Items: items}); err != nil {
		t.Fatal(err)
	}
	header, writes := stream.Header()
	named := map[string]string{}
	licensecache.Tenants(header, func(key, tenant string) { named[key] = tenant })
	if writes != 1 || len(named) != 3 || named["K1"] != "t1" || named["K2"] != "t2" || named["K3"] != "t1" {
		t.Fatalf("%d header writes naming %v; want one naming K1, K2 and K3's tenants", writes, named)
	}
	if singles, togethers := s.licenses.(*fakeLicenses).calls(); singles != 0 || togethers != 1 {
		t.Fatalf("the batch of 5 seat changes asked for licenses %d times alone and %d together; want once together", singles, togethers)
	}

	usage := &activationsv1.TrackUsageBatchRequest{}
	for _, key := range []string{"K1", "K2", "", "NOPE", "K3"} {
		usage.Items = append(usage.Items, &activationsv1.TrackUsageBatchItem{
			Request: &activationsv1.TrackUsageRequest{Key: key, Token: "tok", Metric: "users"}})
	}
	if _, err := s.TrackUsageBatch(ctx, usage); err != nil {
		t.Fatal(err)
	}
	if singles, togethers := s.licenses.(*fakeLicenses).calls(); singles != 0 || togethers != 2 {
		t.Fatalf("after a batch of 5 usage increments: %d lookups alone, %d together; want 0 and 2", singles, togethers)
	}
}

// resultOf is a batch result as its own call's answer or error would make it.
func resultOf[R any](resp R, err error, set func(*activationsv1.ChangeSeatsBatchResult)) *activationsv1.ChangeSeatsBatchResult {
	r := &activationsv1.ChangeSeatsBatchResult{}
	if err != nil {
		st := status.Convert(err).Proto()
		r.Outcome = &activationsv1.ChangeSeatsBatchResult_Error{Error: &activationsv1.CallStatus{Code: st.GetCode(), Message: st.GetMessage(), Details: st.GetDetails()}}
		return r
	}
	set(r)
	return r
}
