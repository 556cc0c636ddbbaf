package e2e

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	"github.com/keyhouse/keyhouse/stack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Floating seats (addendum §12, invariant 11). The contract's shortest lease_ttl is 60 s;
// these stacks lower it with LEASE_MIN_TTL (a test-only override) so that leases lapse
// within a test's time.

// floatingStack is a stack whose policies may lease for a second, swept every sweep.
func floatingStack(t *testing.T, sweep time.Duration) *stack.Stack {
	t.Helper()
	s := startStack(t, map[string]string{"LEASE_MIN_TTL": "1s", "LEASE_SWEEP_INTERVAL": sweep.String()})
	t.Cleanup(s.Stop)
	return s
}

// seatRows counts a license's seat rows, and those live at this moment.
func seatRows(t testing.TB, db *pgx.Conn, key string) (rows, live int) {
	t.Helper()
	err := db.QueryRow(t.Context(), `SELECT count(*), count(*) FILTER (WHERE lease_expires_at IS NULL OR lease_expires_at >= clock_timestamp())
		FROM activations.seats WHERE license_key = $1`, key).Scan(&rows, &live)
	if err != nil {
		t.Fatal(err)
	}
	return rows, live
}

// A floating seat lives while leased: renewals keep it, a lapse frees it for the cap,
// validate-license and track-usage at once (before the sweeper removed it), its token
// then answers "Seat lease has expired", the sweeper removes it within its interval, and
// deactivate-license frees a seat at once.
func TestFloatingSeatLivesOnlyWhileLeased(t *testing.T) {
	t.Parallel()
	s := floatingStack(t, 15*time.Second)
	a, c := admin(t, s), anon(t, s)
	db := dbConn(t, s)
	// Each attempt renews its seats about every second. A request that reaches the server
	// after a lease ended finds the seat lapsed, rightly; on a machine too loaded to renew
	// a 3 s lease in time, the attempt starts over with a lease twice as long. A lapse
	// answered before the lease could have ended fails the test.
attempts:
	for ttl := 3 * time.Second; ; ttl *= 2 {
		p := product("floating")
		putPolicy(t, a, p, "*", map[string]any{"floating": true, "lease_ttl_seconds": int(ttl / time.Second), "renew_after_seconds": 1})
		key := issueLicense(t, a, lic(p, "max_activations", 1, "limits", map[string]any{"projects": 10}))

		// lapsedLate reports whether an answer that the seat lapsed came after the earliest
		// moment its lease could end, so that the machine's slowness explains it.
		lapsedLate := func(what string, lapsed bool, leasedUntil time.Time) bool {
			if !lapsed || time.Now().Before(leasedUntil) {
				return false
			}
			if ttl >= 24*time.Second {
				t.Fatalf("%s: the seat lapsed although renewed every second with a %s lease", what, ttl)
			}
			t.Logf("%s came after the %s lease ended; trying again with a lease twice as long", what, ttl)
			return true
		}
		// activate seats an instance and returns its token and the earliest moment its
		// lease may end (the server truncates a lease's start to the second).
		activate := func(instance string) (string, time.Time) {
			t.Helper()
			sent := time.Now()
			return seat(t, c, key, instance), sent.Add(ttl - time.Second)
		}
		// renew renews a seat's lease and returns its new end, which must lie ttl after a
		// moment of the exchange; ok is false when the renewal came after the lease ended.
		renew := func(what, tok string, leasedUntil time.Time) (end time.Time, ok bool) {
			t.Helper()
			sent := time.Now()
			resp := lease(c, map[string]any{"key": key, "token": tok})
			if lapsedLate(what, resp.IsError(403, errLeaseLapsed), leasedUntil) {
				return time.Time{}, false
			}
			end, err := time.Parse(time.RFC3339, resp.Expect(t, 200).JSON(t)["expires_at"].(string))
			if err != nil || end.Before(sent.Add(ttl-time.Second)) || end.After(time.Now().Add(ttl)) {
				t.Fatalf("%s: the lease ends at %s (%v), want %s after the renewal", what, end, err, ttl)
			}
			return end, true
		}

		tok, leasedUntil := activate("first")
		c.Post("/v1/activate-license", map[string]string{"key": key, "instance_id": "second"}).ExpectError(t, 403, errCap)
		// Renewed every second, the seat outlives its lease.
		for i := range int(ttl/time.Second) + 2 {
			time.Sleep(time.Second)
			var ok bool
			if leasedUntil, ok = renew(fmt.Sprint("renewal ", i+1), tok, leasedUntil); !ok {
				continue attempts
			}
		}
		if valid := validate(t, c, key, "first"); !valid {
			if lapsedLate("validate-license", true, leasedUntil) {
				continue attempts
			}
			t.Fatal("a renewed floating seat is not valid")
		}
		resp := trackUsage(c, key, tok, "projects")
		if lapsedLate("track-usage", resp.Status == 403, leasedUntil) {
			continue attempts
		}
		resp.Expect(t, 200)

		// Not renewed: once its lease passed, it counts for nothing, though still a row.
		var lapsedAt time.Time
		for {
			time.Sleep(250 * time.Millisecond)
			if rows, live := seatRows(t, db, key); rows == 1 && live == 0 {
				lapsedAt = time.Now()
				break
			}
		}
		if validate(t, c, key, "first") {
			t.Error("a lapsed floating seat is still valid")
		}
		// Nor is it listed, though its row waits for the sweep: the admin's lists and the
		// console show active seats. (Checked only while the row is still there after the
		// lists were read; a sweep in between would make them empty anyway.)
		listed := a.Get("/v1/list-activations/"+key).Expect(t, 200).JSON(t)["activations"].([]any)
		recent := string(a.Get("/v1/recent-activations").Expect(t, 200).Body)
		licenses := string(a.Get("/v1/list-licenses?product_id="+p).Expect(t, 200).Body)
		if rows, _ := seatRows(t, db, key); rows == 1 {
			if len(listed) != 0 {
				t.Errorf("list-activations lists a lapsed floating seat: %v", listed)
			}
			if strings.Contains(recent, key) {
				t.Errorf("recent-activations lists a lapsed floating seat: %s", recent)
			}
			if !strings.Contains(licenses, `"activations_count":0`) {
				t.Errorf("list-licenses counts a lapsed floating seat: %s", licenses)
			}
		}
		trackUsage(c, key, tok, "projects").ExpectError(t, 403, errBadToken)
		lease(c, map[string]any{"key": key, "token": tok}).ExpectError(t, 403, errLeaseLapsed)
		second, secondUntil := activate("second")

		// The sweeper (every 15 s here) removes the lapsed row; its token still answers the
		// lapse. The second seat is renewed meanwhile, so it stays.
		for {
			var ok bool
			if secondUntil, ok = renew("a renewal of the second seat", second, secondUntil); !ok {
				continue attempts
			}
			var first int
			if err := db.QueryRow(t.Context(), `SELECT count(*) FROM activations.seats WHERE license_key = $1 AND instance_id = 'first'`, key).Scan(&first); err != nil {
				t.Fatal(err)
			}
			if first == 0 {
				break
			}
			if time.Since(lapsedAt) > 20*time.Second {
				t.Fatal("the lapsed seat was not removed within the sweep interval")
			}
			time.Sleep(250 * time.Millisecond)
		}
		lease(c, map[string]any{"key": key, "token": tok}).ExpectError(t, 403, errLeaseLapsed)

		// Releasing a floating seat frees it at once.
		resp = c.Post("/v1/deactivate-license", map[string]string{"key": key, "token": second})
		if lapsedLate("deactivate-license", resp.Status == 403, secondUntil) {
			continue attempts
		}
		resp.ExpectBody(t, `{"deactivated":true}`)
		seat(t, c, key, "third")
		return
	}
}

// Invariant 11 under contention: 200 clients making 2,000 activations and renewals
// against floating licenses with caps 1, 5 and 50, through two gateways and two
// activations replicas (plus activations straight to each replica over gRPC, past the
// gateway's per-key activation limit), while leases lapse (a third of the clients stop
// renewing halfway for longer than lease_ttl); a sampler counts the live seats with SQL
// all along. No sample is above its cap, no sample finds a seat held more than 15 s past
// its lease end (a stopped client's seat is free within lease_ttl + 15 s of its last
// lease), and once every client stops, every seat is gone within lease_ttl + 15 s.
func TestFloatingCapHoldsUnderContention(t *testing.T) {
	t.Parallel()
	s := floatingStack(t, time.Second)
	a := admin(t, s)
	db, samplerDB := dbConn(t, s), dbConn(t, s)
	ctx := t.Context()
	replica, err := s.StartServiceReplica(ctx, "activations", nil)
	if err != nil {
		t.Fatal(err)
	}
	gateway2, err := s.StartGateway(ctx, 0, map[string]string{"ACTIVATIONS_ADDR": replica})
	if err != nil {
		t.Fatal(err)
	}
	var direct []activationsv1.ActivationsServiceClient
	for _, addr := range []string{s.Env("ACTIVATIONS_ADDR"), replica} {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		direct = append(direct, activationsv1.NewActivationsServiceClient(conn))
	}
	const ttl = 2
	p := product("floating-race")
	putPolicy(t, a, p, "*", map[string]any{"floating": true, "lease_ttl_seconds": ttl, "renew_after_seconds": 1})
	caps := []int{1, 1, 5, 5, 50}
	keys := make([]string, len(caps))
	restBudget := make([]atomic.Int32, len(caps))
	for i, n := range caps {
		keys[i] = issueLicense(t, a, lic(p, "max_activations", n))
		restBudget[i].Store(18) // under the 20 activations per key and window
	}

	stop := make(chan struct{})
	var sampled atomic.Int64
	var over []string
	var samplerDone sync.WaitGroup
	samplerDone.Go(func() {
		for {
			rows, err := samplerDB.Query(ctx, `SELECT license_key, count(*) FROM activations.seats
				WHERE license_key = ANY($1) AND (lease_expires_at IS NULL OR lease_expires_at >= clock_timestamp())
				GROUP BY license_key`, keys)
			if err != nil {
				over = append(over, err.Error())
				return
			}
			var key string
			var n int
			_, _ = pgx.ForEachRow(rows, []any{&key, &n}, func() error {
				for i, k := range keys {
					if k == key && n > caps[i] {
						over = append(over, fmt.Sprintf("%d live seats on a license of cap %d", n, caps[i]))
					}
				}
				return nil
			})
			// A seat whose client stopped renewing lapses at its lease end (iat + lease_ttl of
			// its last lease) and must be gone 15 s later: no row may be older than that.
			var stale int
			if err := samplerDB.QueryRow(ctx, `SELECT count(*) FROM activations.seats WHERE license_key = ANY($1)
				AND lease_expires_at < clock_timestamp() - interval '15 seconds'`, keys).Scan(&stale); err != nil {
				over = append(over, err.Error())
				return
			}
			if stale > 0 {
				over = append(over, fmt.Sprintf("%d seats still held more than 15 s after their lease ended", stale))
			}
			sampled.Add(1)
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})

	const clients, opsPerClient = 200, 10
	var activated, capped, renewed, lapsed, unexpected atomic.Int64
	var wg sync.WaitGroup
	for i := range clients {
		lic, gw := i%len(caps), i%2
		base := s.URL
		if gw == 1 {
			base = gateway2
		}
		client := newClient(t, base, "")
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			var tok string
			for n := range opsPerClient {
				if n == opsPerClient/2 && i%3 == 0 {
					time.Sleep((ttl + 1) * time.Second) // stops renewing: the seat lapses
				}
				time.Sleep(time.Duration(100+rng.IntN(500)) * time.Millisecond)
				if tok != "" {
					resp := lease(client, map[string]any{"key": keys[lic], "token": tok})
					switch {
					case resp.Status == 200:
						renewed.Add(1)
					case resp.IsError(403, errLeaseLapsed):
						lapsed.Add(1)
						tok = ""
					default:
						unexpected.Add(1)
						t.Errorf("lease: %d %s", resp.Status, resp.Body)
					}
					continue
				}
				instance := fmt.Sprintf("client-%d-%d", i, n)
				if restBudget[lic].Add(-1) >= 0 {
					resp := client.Post("/v1/activate-license", map[string]string{"key": keys[lic], "instance_id": instance})
					switch {
					case resp.Status == 200:
						activated.Add(1)
						tok, _ = resp.JSON(t)["token"].(string)
					case resp.IsError(403, errCap):
						capped.Add(1)
					default:
						unexpected.Add(1)
						t.Errorf("activate-license: %d %s", resp.Status, resp.Body)
					}
					continue
				}
				resp, err := direct[gw].ActivateLicense(ctx, &activationsv1.ActivateLicenseRequest{Key: keys[lic], InstanceId: instance})
				switch {
				case err == nil:
					activated.Add(1)
					tok = resp.GetToken()
				case status.Convert(err).Message() == errCap:
					capped.Add(1)
				default:
					unexpected.Add(1)
					t.Errorf("ActivateLicense: %v", err)
				}
			}
		})
	}
	wg.Wait()
	stoppedAt := time.Now()
	// Every client stopped renewing: every seat is free within lease_ttl + 15 s.
	for {
		var left int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM activations.seats WHERE license_key = ANY($1)`, keys).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			break
		}
		if time.Since(stoppedAt) > (ttl+15)*time.Second {
			t.Fatalf("%d seats still held %s after the last renewal (lease_ttl %ds + 15 s)", left, time.Since(stoppedAt), ttl)
		}
		time.Sleep(200 * time.Millisecond)
	}
	close(stop)
	samplerDone.Wait()
	for _, o := range over {
		t.Error(o)
	}
	t.Logf("%d samples; %d activated, %d at the cap, %d renewed, %d lapsed", sampled.Load(), activated.Load(), capped.Load(), renewed.Load(), lapsed.Load())
	if activated.Load()+capped.Load()+renewed.Load()+lapsed.Load()+unexpected.Load() != clients*opsPerClient {
		t.Errorf("not every call was answered")
	}
	if capped.Load() == 0 || lapsed.Load() == 0 || renewed.Load() == 0 || sampled.Load() < 10 {
		t.Errorf("the run did not contend: %d at the cap, %d lapsed, %d renewed, %d samples", capped.Load(), lapsed.Load(), renewed.Load(), sampled.Load())
	}
	// A freed license takes new seats up to its cap again.
	c := anon(t, s)
	seat(t, c, keys[0], "after")
	c.Post("/v1/activate-license", map[string]string{"key": keys[0], "instance_id": "after-2"}).ExpectError(t, 403, errCap)
}

// lapseCase is one license of TestALapsedSeatLapsesOnceWhateverMeetsItFirst: the seat
// that lapses (its instance and token), and the answers of the calls that met it.
type lapseCase struct {
	product, key, instance, token string
	answers                       []*Response
}

// anyToken is an activation token in an answer.
var anyToken = regexp.MustCompile(`act_[A-Za-z0-9_-]{43}`)

// seatEventLog is a license's events as "type", "type instance" and, for a removal,
// "type instance reason actor".
func seatEventLog(evs []logEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
		if instance, ok := e.Data["instance_id"]; ok {
			out[i] += fmt.Sprint(" ", instance)
		}
		if reason, ok := e.Data["reason"]; ok {
			out[i] += fmt.Sprint(" ", reason, " ", e.Actor["type"])
		}
	}
	return out
}

// A floating seat whose lease ran out lapses once (seat.deactivated, reason lease_expired,
// the system's), before whatever takes its place, and its token answers "Seat lease has
// expired", whatever meets it before the sweeper does (addendum §11, §12). Per round, at
// once across rounds (each its own licenses and clients): the lapsed seat's instance
// activated again, twice at once (the outside probe's case: the lapse and its record were
// lost, the event log counted one seat too many for ever); another instance taking the
// cap's only slot, two at once; the seat deactivated by its token, by its instance and
// its token reissued (no live seat: false, 404, 404, then the sweeper lapses it); its
// license deleted. A sweep between the lapse and the calls changes none of the answers or
// events; the log says how many lapsed seats the calls met before any sweep.
func TestALapsedSeatLapsesOnceWhateverMeetsItFirst(t *testing.T) {
	t.Parallel()
	s := floatingStack(t, 15*time.Second)
	db := dbConn(t, s)
	const rounds = 5
	type round struct {
		a, c              *Client
		again, slot, gone lapseCase
		deleted           lapseCase
	}
	leaseFor := func(seconds int) map[string]any {
		return map[string]any{"floating": true, "lease_ttl_seconds": seconds, "renew_after_seconds": 0}
	}
	rs := make([]*round, rounds)
	var keys []string
	for i := range rs {
		r := &round{a: admin(t, s), c: anon(t, s)}
		for j, lc := range []*lapseCase{&r.again, &r.slot, &r.gone, &r.deleted} {
			lc.product, lc.instance = product(fmt.Sprintf("lapse-%d-%d", i, j)), fmt.Sprintf("seat-%d-%d", i, j)
			putPolicy(t, r.a, lc.product, "*", leaseFor(1))
			lc.key = issueLicense(t, r.a, lic(lc.product, "max_activations", 1))
			keys = append(keys, lc.key)
		}
		rs[i] = r
	}
	// The sweeper may take a lapsed seat before the calls, which then meet none. Right
	// after a sweep (a sentinel seat's removal tells), the next is an interval away, and
	// the seats made then lapse and meet the calls first.
	a := admin(t, s)
	sentinel := product("lapse-sentinel")
	putPolicy(t, a, sentinel, "*", leaseFor(1))
	sentinelKey := issueLicense(t, a, lic(sentinel))
	seat(t, anon(t, s), sentinelKey, "sentinel")
	eventually(t, "a sweep", func() bool { rows, _ := seatRows(t, db, sentinelKey); return rows == 0 })
	for _, r := range rs {
		for _, lc := range []*lapseCase{&r.again, &r.slot, &r.gone, &r.deleted} {
			lc.token = seat(t, r.c, lc.key, lc.instance)
		}
	}
	// Every seat's one-second lease runs out; the seats that take their places are leased
	// for an hour, so that no second lapse adds to the events.
	lapsedRows := func() (rows, live int) {
		t.Helper()
		if err := db.QueryRow(t.Context(), `SELECT count(*), count(*) FILTER (WHERE lease_expires_at >= clock_timestamp())
			FROM activations.seats WHERE license_key = ANY($1)`, keys).Scan(&rows, &live); err != nil {
			t.Fatal(err)
		}
		return rows, live
	}
	eventually(t, "every floating seat lapsed", func() bool { _, live := lapsedRows(); return live == 0 })
	for _, r := range rs {
		putPolicy(t, r.a, r.again.product, "*", leaseFor(3600))
		putPolicy(t, r.a, r.slot.product, "*", leaseFor(3600))
	}
	met, _ := lapsedRows()

	// Every call of every round at once.
	var wg sync.WaitGroup
	var failed sync.Mutex
	var errs []error
	call := func(lc *lapseCase, c *Client, method, path string, body map[string]any) {
		wg.Go(func() {
			resp, err := c.Try(method, path, body)
			failed.Lock()
			defer failed.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			lc.answers = append(lc.answers, resp)
		})
	}
	for i, r := range rs {
		again, slot, gone, deleted := &r.again, &r.slot, &r.gone, &r.deleted
		call(again, r.c, "POST", "/v1/activate-license", map[string]any{"key": again.key, "instance_id": again.instance})
		call(again, r.c, "POST", "/v1/activate-license", map[string]any{"key": again.key, "instance_id": again.instance})
		call(slot, r.c, "POST", "/v1/activate-license", map[string]any{"key": slot.key, "instance_id": fmt.Sprintf("taker-%d-a", i)})
		call(slot, r.c, "POST", "/v1/activate-license", map[string]any{"key": slot.key, "instance_id": fmt.Sprintf("taker-%d-b", i)})
		call(gone, r.c, "POST", "/v1/deactivate-license", map[string]any{"key": gone.key, "token": gone.token})
		call(gone, r.a, "POST", "/v1/admin/deactivate-by-instance-id", map[string]any{"key": gone.key, "instance_id": gone.instance})
		call(gone, r.a, "POST", "/v1/admin/reissue-token", map[string]any{"key": gone.key, "instance_id": gone.instance})
		call(deleted, r.a, "DELETE", "/v1/delete-license", map[string]any{"key": deleted.key})
	}
	wg.Wait()
	for _, err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d of %d lapsed seats were still there for the calls to meet (the rest the sweeper took first)", met, len(keys))

	bodies := func(lc *lapseCase) []string {
		var out []string
		for _, resp := range lc.answers {
			out = append(out, fmt.Sprint(resp.Status, " ", anyToken.ReplaceAllString(string(resp.Body), "…")))
		}
		slices.Sort(out)
		return out
	}
	for _, r := range rs {
		// Activated again: one new seat, one alreadyActivated; one lapse, before it.
		if got, want := bodies(&r.again), []string{`200 {"activated":true,"alreadyActivated":true}`, `200 {"activated":true,"token":"…"}`}; !slices.Equal(got, want) {
			t.Errorf("activations of the lapsed seat's instance answered %q, want %q", got, want)
		}
		got := seatEventLog(eventsOf(t, r.a, r.again.key, 4))
		if want := []string{"license.issued", "seat.activated " + r.again.instance, "seat.deactivated " + r.again.instance + " lease_expired system",
			"seat.activated " + r.again.instance}; !slices.Equal(got, want) {
			t.Errorf("events of the seat activated again %q, want %q", got, want)
		}

		// Another instance takes the only slot: one of two, after the lapse.
		if got, want := bodies(&r.slot), []string{`200 {"activated":true,"token":"…"}`, `403 {"error":"` + errCap + `"}`}; !slices.Equal(got, want) {
			t.Errorf("activations over the lapsed seat answered %q, want %q", got, want)
		}
		got = seatEventLog(eventsOf(t, r.a, r.slot.key, 4))
		if len(got) != 4 || !slices.Equal(got[:3], []string{"license.issued", "seat.activated " + r.slot.instance,
			"seat.deactivated " + r.slot.instance + " lease_expired system"}) || !strings.HasPrefix(got[3], "seat.activated taker-") {
			t.Errorf("events of the seat whose slot was taken %q", got)
		}

		// No live seat to deactivate or reissue; the sweeper lapses it.
		if got, want := bodies(&r.gone), []string{`200 {"deactivated":false}`, `404 {"error":"` + errNoSeat + `"}`,
			`404 {"error":"` + errNoSeat + `"}`}; !slices.Equal(got, want) {
			t.Errorf("deactivations and the reissue of the lapsed seat answered %q, want %q", got, want)
		}
		got = seatEventLog(eventsOf(t, r.a, r.gone.key, 3))
		if want := []string{"license.issued", "seat.activated " + r.gone.instance, "seat.deactivated " + r.gone.instance + " lease_expired system"}; !slices.Equal(got, want) {
			t.Errorf("events of the seat deactivated after its lapse %q, want %q", got, want)
		}

		// The deleted license's seat had lapsed before: its removal is its lapse, before or
		// after the deletion's event as the sweeper came or not.
		if got := bodies(&r.deleted); len(got) != 1 || !strings.HasPrefix(got[0], "200 ") {
			t.Errorf("delete-license answered %q", got)
		}
		got = seatEventLog(eventsOf(t, r.a, r.deleted.key, 4))
		slices.Sort(got[2:])
		if want := []string{"license.issued", "seat.activated " + r.deleted.instance, "license.deleted", "seat.deactivated " + r.deleted.instance + " lease_expired system"}; !slices.Equal(got, want) {
			t.Errorf("events of the deleted license's lapsed seat %q, want %q (in some order after the activation)", got, want)
		}

		// Every lapsed seat's token answers the lapse, whoever removed the seat.
		for _, lc := range []*lapseCase{&r.again, &r.slot, &r.gone} {
			lease(r.c, map[string]any{"key": lc.key, "token": lc.token}).ExpectError(t, 403, errLeaseLapsed)
		}
	}
}
