package fulfill

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/events/eventstest"
	"github.com/keyhouse/keyhouse/services/storefront/internal/store"
	"github.com/keyhouse/keyhouse/services/storefront/internal/stripeevent"
)

// Each delivery whose outcome settles is exactly one storefront.delivery event, written
// with the outcome, also when ten deliveries of one session are handled at once; handling
// a delivery again that changes nothing emits nothing.
func TestEverySettledDeliveryIsOneEvent(t *testing.T) {
	f := newFixture(t)
	out := eventstest.Watch(t, f.st.Pool())
	jobs := make([]Job, 10)
	for i := range jobs {
		jobs[i] = f.receive(fmt.Sprint("evt_", i), stripeevent.CheckoutCompleted, "cs_ev", "paid", "buyer@example.com")
	}
	if evs := out.Next(t); len(evs) != 0 {
		t.Fatalf("deliveries still processing emitted %v", eventstest.Types(evs))
	}
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() {
			if err := f.w.process(context.Background(), f.tenant, j, false); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	evs := out.Next(t)
	var ids []string
	for _, ev := range evs {
		d := ev.GetStorefrontDelivery()
		if ev.GetType() != events.TypeStorefrontDelivery || d.GetOutcome() != store.OutcomeIssued ||
			d.GetCheckoutSessionId() != "cs_ev" || d.GetLicenseKey() == nil || ev.GetTenantId() != f.tenant {
			t.Errorf("event %v", ev)
		}
		ids = append(ids, d.GetDeliveryId())
	}
	slices.Sort(ids)
	if len(ids) != len(jobs) || len(slices.Compact(ids)) != len(jobs) {
		t.Fatalf("events for deliveries %v, want one for each of %d", ids, len(jobs))
	}
	// Handled again (a redelivered message): nothing moves, nothing is emitted.
	if err := f.w.process(context.Background(), f.tenant, jobs[0], false); err != nil {
		t.Fatal(err)
	}
	if evs := out.Next(t); len(evs) != 0 {
		t.Fatalf("a delivery handled again emitted %v", eventstest.Types(evs))
	}
	// Every method is decided: the writes that move an outcome emit (tested above and by
	// the refusals' outcomes), the others change nothing addendum §11 names.
	eventstest.RequireListed(t, f.st, []string{"RecordEvent", "LockSession"},
		// The buyer-email settings are not in addendum §11 either.
		[]string{"CreateWebhook", "SaveSecret", "Disable", "CreateMapping", "DeleteMapping", "SaveMailSettings"},
		[]string{"Pool", "Webhooks", "WebhookByID", "Mappings", "Delivery", "Deliveries", "MailSettings"})
	eventstest.RequireListed(t, (*store.Session)(nil), []string{"Issued", "SetOutcome", "CloseAwaiting"},
		// The session's own record and the email status are not outcomes.
		// Nor are the purchase's terms after the sale and the vendor alert's claim.
		[]string{"Fulfillment", "SetRequest", "EmailDone", "SaveTerms", "ClaimVendorAlert"},
		[]string{"Unlock", "Match", "Delivery", "HeldDeliveries"})
}
