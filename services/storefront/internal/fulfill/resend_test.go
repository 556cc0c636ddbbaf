package fulfill

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/services/storefront/internal/store"
	"github.com/keyhouse/keyhouse/services/storefront/internal/stripeevent"
	"google.golang.org/grpc/codes"
)

// Twenty resends of one purchase at once, while its event is handled again: the buyer
// gets the first email and exactly MaxResends more, each to the address the checkout
// gave, and every other resend is refused with 429; the limit holds under concurrency
// because it is counted under the purchase's lock (the same lock on every replica).
func TestConcurrentResendsHoldThePerPurchaseLimit(t *testing.T) {
	f := newFixture(t)
	j := f.receive("evt_1", stripeevent.CheckoutCompleted, "cs_1", "paid", "buyer@example.com")
	if err := f.w.process(context.Background(), f.tenant, j, false); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = f.resend(j.DeliveryID, "")
		})
	}
	wg.Go(func() { _ = f.w.process(context.Background(), f.tenant, j, false) })
	wg.Wait()
	var ok, limited int
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case apierr.Is(err, codes.ResourceExhausted) && strings.Contains(err.Error(), "resent 5 times in the last 24 hours; retry after "):
			limited++
		default:
			t.Fatalf("resend: %v", err)
		}
	}
	if ok != MaxResends || limited != len(errs)-MaxResends {
		t.Fatalf("%d resends sent, %d refused; want %d and %d", ok, limited, MaxResends, len(errs)-MaxResends)
	}
	if len(f.mail.sent) != 1+MaxResends || f.lic.created != 1 {
		t.Fatalf("%d emails, %d licenses; want %d and 1", len(f.mail.sent), f.lic.created, 1+MaxResends)
	}
	for _, m := range f.mail.sent {
		if m.To != "buyer@example.com" || m.Text != f.mail.sent[0].Text {
			t.Fatalf("resent %q to %q, want the first email to the buyer", m.Text, m.To)
		}
	}
}

// A resend answers what it did, and a failed email turns sent once a resend gets through.
func TestResendSendsTheSameEmailAndHealsAFailedOne(t *testing.T) {
	f := newFixture(t)
	j := f.receive("evt_1", stripeevent.CheckoutCompleted, "cs_1", "paid", "jane.doe@example.com")
	f.mail.fails = 1
	if err := f.w.process(context.Background(), f.tenant, j, true); err != nil {
		t.Fatal(err)
	}
	if d := f.delivery(j.DeliveryID); val(d.EmailStatus) != store.EmailFailed {
		t.Fatalf("after the failed send: %s", val(d.EmailStatus))
	}
	r, err := f.resend(j.DeliveryID, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.EmailStatus != store.EmailSent || r.SentTo != "j***@example.com" || r.CheckoutSessionID != "cs_1" || r.ResendsInWindow != 1 {
		t.Fatalf("resent %+v", r)
	}
	if d := f.delivery(j.DeliveryID); val(d.EmailStatus) != store.EmailSent || d.Error != nil {
		t.Fatalf("after the resend: %s %s", val(d.EmailStatus), val(d.Error))
	}
}

// What cannot be resent says why, and sends nothing.
func TestResendRefusals(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.resend(999_999, ""); !errors.Is(err, ErrDeliveryNotFound) {
		t.Fatalf("unknown delivery: %v", err)
	}
	noEmail := f.receive("evt_1", stripeevent.CheckoutCompleted, "cs_1", "paid", "")
	noEmail.Email = nil
	if err := f.w.process(ctx, f.tenant, noEmail, false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.resend(noEmail.DeliveryID, ""); err == nil || err.Error() != "No buyer address is on record for this purchase" {
		t.Fatalf("no address: %v", err)
	}
	unpaid := f.receive("evt_2", stripeevent.CheckoutCompleted, "cs_2", stripeevent.PaymentStatusUnpaid, "b@example.com")
	if err := f.w.process(ctx, f.tenant, unpaid, false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.resend(unpaid.DeliveryID, ""); err == nil || !strings.HasPrefix(err.Error(), "No license was issued") {
		t.Fatalf("nothing issued: %v", err)
	}
	// Another tenant's delivery is not found.
	if _, err := f.w.Resend(ctx, "t2", noEmail.DeliveryID, "", nil, keepResent(new(*Resent))); !errors.Is(err, ErrDeliveryNotFound) {
		t.Fatalf("another tenant's delivery: %v", err)
	}
	if len(f.mail.sent) != 0 {
		t.Fatalf("%d emails sent", len(f.mail.sent))
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

// keepResent is an answer func that keeps what Resend did.
func keepResent(into **Resent) func(*Resent) ([]byte, error) {
	return func(r *Resent) ([]byte, error) { *into = r; return []byte("ok"), nil }
}

// resend is Worker.Resend for the fixture's tenant.
func (f *fixture) resend(deliveryID int32, idemKey string) (*Resent, error) {
	var r *Resent
	_, err := f.w.Resend(context.Background(), f.tenant, deliveryID, idemKey, []byte("hash"), keepResent(&r))
	return r, err
}

// Eight resends at once on a pool of four connections: each holds at most one connection,
// waiting for the purchase's lock without one, so none starves the one holding it.
func TestResendsQueuedOnOnePurchaseDoNotExhaustThePool(t *testing.T) {
	f := newFixture(t)
	small, err := pgxx.Open(context.Background(), f.dbURL, "storefront", pgxx.WithMaxConns(4))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(small.Close)
	j := f.receive("evt_1", stripeevent.CheckoutCompleted, "cs_1", "paid", "buyer@example.com")
	if err := f.w.process(context.Background(), f.tenant, j, false); err != nil {
		t.Fatal(err)
	}
	w := *f.w
	w.Store = store.New(small, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			var r *Resent
			_, errs[i] = w.Resend(ctx, f.tenant, j.DeliveryID, "", nil, keepResent(&r))
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && !apierr.Is(err, codes.ResourceExhausted) {
			t.Fatalf("resend: %v", err)
		}
	}
	if len(f.mail.sent) != 1+MaxResends {
		t.Fatalf("%d emails, want %d", len(f.mail.sent), 1+MaxResends)
	}
}

// An Idempotency-Key replays the first resend's answer and mails nothing more.
func TestResendIdempotencyKeyMailsOnce(t *testing.T) {
	f := newFixture(t)
	j := f.receive("evt_1", stripeevent.CheckoutCompleted, "cs_1", "paid", "buyer@example.com")
	if err := f.w.process(context.Background(), f.tenant, j, false); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := f.resend(j.DeliveryID, "ticket-1"); err != nil {
			t.Fatal(err)
		}
	}
	if len(f.mail.sent) != 2 {
		t.Fatalf("%d emails, want the first and one resend", len(f.mail.sent))
	}
}
