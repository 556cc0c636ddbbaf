package fulfill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/mailtest"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/billingclient"
	"github.com/keyhouse/keyhouse/pkg/mail"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/seal"
	"github.com/keyhouse/keyhouse/pkg/signing"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"github.com/keyhouse/keyhouse/services/storefront/internal/store"
	"github.com/keyhouse/keyhouse/services/storefront/internal/stripeevent"
	"github.com/keyhouse/keyhouse/services/storefront/migrations"
)

// These tests run the worker's handling against a real Postgres (the production
// migrations), with licensing and mail replaced by fakes that count what they were asked
// to do and can fail at chosen moments: invariant 5 step by step.

func TestMain(m *testing.M) { testkit.Main(m) }

var schema = testkit.Template{Name: "storefront", Migrate: pgxx.Migrations{Schema: "storefront", FS: migrations.FS}.Apply}

// fakeLicensing issues like licensing does: one license per Idempotency-Key.
type fakeLicensing struct {
	mu      sync.Mutex
	keys    map[string]string
	created int
	// crashAfterIssue makes the next call issue and then fail, as a worker crash (or a
	// lost answer) between the issue and recording its key would look.
	crashAfterIssue bool
	refuse          error
	// What the lifecycle set, by key.
	expiry  map[string]time.Time
	revoked map[string]bool
}

func (f *fakeLicensing) SetExpiry(_ context.Context, _, key string, at time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.expiry == nil {
		f.expiry = map[string]time.Time{}
	}
	f.expiry[key] = at
	return nil
}

// SetRevoked answers like licensing: 409 when the license is in that state already.
func (f *fakeLicensing) SetRevoked(_ context.Context, _, key string, revoked bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.revoked == nil {
		f.revoked = map[string]bool{}
	}
	if f.revoked[key] == revoked {
		state := "active"
		if revoked {
			state = "revoked"
		}
		return apierr.Conflict("License is already %s", state)
	}
	f.revoked[key] = revoked
	return nil
}

func (f *fakeLicensing) IssueLicense(_ context.Context, tenant, idemKey string, req *licensingv1.IssueLicenseRequest) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse != nil {
		return "", f.refuse
	}
	k, ok := f.keys[tenant+"/"+idemKey]
	if !ok {
		f.created++
		k = fmt.Sprintf("KEY-%d-%s", f.created, req.GetProductId())
		f.keys[tenant+"/"+idemKey] = k
		if at, err := time.Parse(time.RFC3339, req.GetExpiresAt().GetStringValue()); err == nil {
			if f.expiry == nil {
				f.expiry = map[string]time.Time{}
			}
			f.expiry[k] = at
		}
	}
	if f.crashAfterIssue {
		f.crashAfterIssue = false
		return "", errors.New("connection reset")
	}
	return k, nil
}

type fakeMail struct {
	mu    sync.Mutex
	sent  []mail.Message
	fails int
}

func (m *fakeMail) Provider() string { return mail.ProviderSMTP }

func (m *fakeMail) Send(_ context.Context, msg mail.Message) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fails > 0 {
		m.fails--
		return errors.New("connection refused")
	}
	m.sent = append(m.sent, msg)
	return nil
}

type keys struct{ k *signing.Keyring }

func (k keys) Keyring(context.Context) (*signing.Keyring, error) { return k.k, nil }

type fixture struct {
	t      *testing.T
	st     *store.Store
	w      *Worker
	lic    *fakeLicensing
	mail   *fakeMail
	keys   *signing.Keyring
	tenant string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	db, err := pgxx.Open(context.Background(), testkit.DatabaseURL(t, schema), "storefront", pgxx.WithMaxConns(32))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	k, err := signing.NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, st: store.New(db, nil), lic: &fakeLicensing{keys: map[string]string{}}, mail: &fakeMail{}, keys: k, tenant: "t1"}
	f.w = &Worker{Store: f.st, Licensing: f.lic, Keys: keys{k}, Mail: f.mail, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxAttempts: 5}
	link := "plink_test"
	noAnswer := func(*store.Mapping) ([]byte, error) { return nil, nil }
	if _, _, err := f.st.CreateMapping(context.Background(), "", nil, &store.Mapping{TenantID: f.tenant, PaymentLink: &link, ProductID: "app", Tier: "pro", Seats: 2}, noAnswer); err != nil {
		t.Fatal(err)
	}
	return f
}

// receive records an event as the callback does and returns its fulfillment job.
func (f *fixture) receive(eventID, typ, session, paymentStatus, email string) Job {
	f.t.Helper()
	link := "plink_test"
	var job Job
	sealed, err := seal.Seal(f.keys, seal.PurposeBuyerEmail, []byte(email))
	if err != nil {
		f.t.Fatal(err)
	}
	rec, err := f.st.RecordEvent(context.Background(), &store.Delivery{
		TenantID: f.tenant, WebhookID: "wh_x", EventID: eventID, EventType: typ, CheckoutSessionID: session,
		PaymentLink: &link, PaymentStatus: paymentStatus, SessionCreated: time.Now(), Outcome: store.OutcomeProcessing,
	}, func(d *store.Delivery) natsx.Message {
		job = Job{DeliveryID: d.ID, Email: sealed}
		return Message(d, sealed)
	})
	if err != nil {
		f.t.Fatal(err)
	}
	if !rec.Enqueued {
		job = Job{DeliveryID: rec.Delivery.ID, Email: sealed}
	}
	return job
}

func (f *fixture) delivery(id int32) *store.Delivery {
	f.t.Helper()
	d, err := f.st.Delivery(context.Background(), f.tenant, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return d
}

func val(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

// Ten deliveries of one session (new event ids), handled at once: one license, one email,
// every delivery issued with the same key.
func TestConcurrentDeliveriesOfOneSessionIssueOnce(t *testing.T) {
	f := newFixture(t)
	jobs := make([]Job, 10)
	for i := range jobs {
		jobs[i] = f.receive(fmt.Sprint("evt_", i), stripeevent.CheckoutCompleted, "cs_1", "paid", "buyer@example.com")
	}
	var wg sync.WaitGroup
	errs := make([]error, len(jobs))
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f.w.process(context.Background(), f.tenant, j, false)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
	}
	if f.lic.created != 1 || len(f.mail.sent) != 1 {
		t.Fatalf("%d licenses, %d emails; want 1 and 1", f.lic.created, len(f.mail.sent))
	}
	key := f.mail.sent[0].Text
	for _, j := range jobs {
		d := f.delivery(j.DeliveryID)
		if d.Outcome != store.OutcomeIssued || val(d.EmailStatus) != store.EmailSent || d.LicenseKey == nil {
			t.Fatalf("delivery %d: %s %s %s", d.ID, d.Outcome, val(d.EmailStatus), val(d.LicenseKey))
		}
		if want := "License key: " + *d.LicenseKey; !strings.Contains(key, want) {
			t.Fatalf("email %q lacks %q", key, want)
		}
	}
}

// A crash between the issue and recording its key: the retry gets the same key back
// (Idempotency-Key) and the buyer one email.
func TestCrashBetweenIssueAndRecordIssuesOnce(t *testing.T) {
	f := newFixture(t)
	j := f.receive("evt_1", stripeevent.CheckoutCompleted, "cs_1", "paid", "buyer@example.com")
	f.lic.crashAfterIssue = true
	if err := f.w.process(context.Background(), f.tenant, j, false); err == nil {
		t.Fatal("the crashed attempt reported success")
	}
	if d := f.delivery(j.DeliveryID); d.Outcome != store.OutcomeProcessing || d.LicenseKey != nil {
		t.Fatalf("after the crash: %s %s", d.Outcome, val(d.LicenseKey))
	}
	if err := f.w.process(context.Background(), f.tenant, j, false); err != nil {
		t.Fatal(err)
	}
	if f.lic.created != 1 || len(f.mail.sent) != 1 {
		t.Fatalf("%d licenses, %d emails", f.lic.created, len(f.mail.sent))
	}
}

// A failed send is recorded and retried without a second license; once sent, another
// handling sends nothing.
func TestFailedEmailIsRetriedWithoutReissuing(t *testing.T) {
	f := newFixture(t)
	j := f.receive("evt_1", stripeevent.CheckoutCompleted, "cs_1", "paid", "buyer@example.com")
	f.mail.fails = 2
	for range 2 {
		if err := f.w.process(context.Background(), f.tenant, j, false); err == nil {
			t.Fatal("a failed send reported success")
		}
		if d := f.delivery(j.DeliveryID); d.Outcome != store.OutcomeIssued || val(d.EmailStatus) != store.EmailFailed {
			t.Fatalf("after a failed send: %s %s", d.Outcome, val(d.EmailStatus))
		}
	}
	if err := f.w.process(context.Background(), f.tenant, j, false); err != nil {
		t.Fatal(err)
	}
	if err := f.w.process(context.Background(), f.tenant, j, false); err != nil {
		t.Fatal(err)
	}
	if d := f.delivery(j.DeliveryID); val(d.EmailStatus) != store.EmailSent || d.Error != nil {
		t.Fatalf("after recovery: %s %s", val(d.EmailStatus), val(d.Error))
	}
	if f.lic.created != 1 || len(f.mail.sent) != 1 {
		t.Fatalf("%d licenses, %d emails", f.lic.created, len(f.mail.sent))
	}
}

// An address the checkout gave that cannot be mailed is told apart from no address.
func TestUnusableBuyerEmailSaysSo(t *testing.T) {
	f := newFixture(t)
	j := f.receive("evt_1", stripeevent.CheckoutCompleted, "cs_1", "paid", "not an address")
	if err := f.w.process(context.Background(), f.tenant, j, false); err != nil {
		t.Fatal(err)
	}
	d := f.delivery(j.DeliveryID)
	if want := "The checkout session's customer email cannot be used (it is not an email address); no email was sent"; val(d.EmailStatus) != store.EmailFailed || val(d.Error) != want {
		t.Fatalf("email %s, error %q; want failed, %q", val(d.EmailStatus), val(d.Error), want)
	}
}

// A mail server that cannot be reached (a real dial to a closed local port): self-hosted
// the operator is the vendor, and the delivery names the server and why; hosted it says
// what failed without the server, which only the operator's log names. Either way it says
// whether the worker tries again.
func TestMailServerFailureIsShownToWhoRunsTheServer(t *testing.T) {
	down := mailtest.New(t)
	down.Stop()
	sender, err := mail.New(mail.Config{Provider: mail.ProviderSMTP, SMTPURL: down.URL(), From: "shop@example.com"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Self-hosted the text goes on with the dialer's own words (connection refused).
	selfHosted := "Email delivery failed: mail: smtp send to " + down.Addr + ": dial failed: dial tcp " + down.Addr + ": "
	hosted := "Email delivery failed: the connection to the mail server failed"
	for i, c := range []struct {
		hosted, last bool
		starts, ends string
	}{
		{false, false, selfHosted, "; retrying"},
		{false, true, selfHosted, "; redeliver the event to retry"},
		{true, false, hosted + "; retrying", ""},
		{true, true, hosted + "; redeliver the event to retry", ""},
	} {
		f := newFixture(t)
		f.w.Mail, f.w.Hosted = sender, c.hosted
		j := f.receive(fmt.Sprintf("evt_%d", i), stripeevent.CheckoutCompleted, fmt.Sprintf("cs_%d", i), "paid", "buyer@example.com")
		_ = f.w.process(context.Background(), f.tenant, j, c.last)
		d := f.delivery(j.DeliveryID)
		got := val(d.Error)
		if val(d.EmailStatus) != store.EmailFailed || !strings.HasPrefix(got, c.starts) || !strings.HasSuffix(got, c.ends) ||
			c.hosted && got != c.starts {
			t.Errorf("hosted %v, last %v: email %s, error %q; want failed, %q…%q", c.hosted, c.last, val(d.EmailStatus), got, c.starts, c.ends)
		}
	}
}

// An email that could not be built (the tenant's name unreadable: billing down) is
// recorded on the last attempt; hosted, without the error's text, which names the
// installation's internal address.
func TestAnEmailNotPreparedDoesNotShowTheInstallationToAHostedTenant(t *testing.T) {
	down := errors.New(`rpc error: code = Unavailable desc = connection error: dial tcp 10.0.3.7:9090: connect: connection refused`)
	for i, hosted := range []bool{false, true} {
		f := newFixture(t)
		f.w.Hosted, f.w.Vendors = hosted, unreachableVendors{down}
		j := f.receive(fmt.Sprintf("evt_%d", i), stripeevent.CheckoutCompleted, fmt.Sprintf("cs_%d", i), "paid", "buyer@example.com")
		if err := f.w.process(context.Background(), f.tenant, j, true); err != nil {
			t.Fatalf("hosted %v: last attempt returned %v, want it recorded", hosted, err)
		}
		d := f.delivery(j.DeliveryID)
		want := "Email not sent: the tenant's name and address could not be read: " + down.Error() + "; redeliver the event to retry"
		if hosted {
			want = "Email not sent: the email could not be prepared (an internal error); redeliver the event to retry"
		}
		if d.Outcome != store.OutcomeIssued || val(d.EmailStatus) != store.EmailFailed || val(d.Error) != want {
			t.Errorf("hosted %v: %s, email %s, error %q; want issued, failed, %q", hosted, d.Outcome, val(d.EmailStatus), val(d.Error), want)
		}
	}
}

// unreachableVendors answers every tenant's contact with err.
type unreachableVendors struct{ err error }

func (u unreachableVendors) TenantContact(context.Context, string) (billingclient.Contact, error) {
	return billingclient.Contact{}, u.err
}

// The last attempt records the failure instead of asking for another.
func TestLastAttemptRecordsTheFailure(t *testing.T) {
	f := newFixture(t)
	j := f.receive("evt_1", stripeevent.CheckoutCompleted, "cs_1", "paid", "buyer@example.com")
	f.lic.refuse = apierr.Unavailable("Licensing service unavailable, retry")
	if err := f.w.process(context.Background(), f.tenant, j, true); err != nil {
		t.Fatalf("last attempt returned %v, want it recorded", err)
	}
	if d := f.delivery(j.DeliveryID); d.Outcome != store.OutcomeError || d.Error == nil {
		t.Fatalf("%s %s", d.Outcome, val(d.Error))
	}
}

// Licensing's refusals become outcomes; a refusal stores no request, so a redelivery after
// the vendor fixed the cause builds it afresh and issues.
func TestRefusalsBecomeOutcomes(t *testing.T) {
	for _, tc := range []struct {
		err     error
		outcome string
	}{
		{apierr.Forbidden("License issuance quota exceeded"), store.OutcomeOverQuota},
		{apierr.Invalid("tier must be at most 200 characters"), store.OutcomeInvalidInput},
		{apierr.Forbidden("Subscription is not active"), store.OutcomeError},
	} {
		f := newFixture(t)
		j := f.receive("evt_1", stripeevent.CheckoutCompleted, "cs_1", "paid", "buyer@example.com")
		f.lic.refuse = tc.err
		if err := f.w.process(context.Background(), f.tenant, j, false); err != nil {
			t.Fatal(err)
		}
		d := f.delivery(j.DeliveryID)
		if d.Outcome != tc.outcome || val(d.Error) != tc.err.Error() || d.EmailStatus != nil {
			t.Fatalf("%v: %s %s %s", tc.err, d.Outcome, val(d.Error), val(d.EmailStatus))
		}
		f.lic.refuse = nil
		j = f.receive("evt_1", stripeevent.CheckoutCompleted, "cs_1", "paid", "buyer@example.com")
		if err := f.w.process(context.Background(), f.tenant, j, false); err != nil {
			t.Fatal(err)
		}
		if d := f.delivery(j.DeliveryID); d.Outcome != store.OutcomeIssued || f.lic.created != 1 {
			t.Fatalf("after the fix: %s, %d licenses", d.Outcome, f.lic.created)
		}
	}
}
