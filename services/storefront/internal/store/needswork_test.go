package store

import (
	"testing"
	"time"
)

// Which receipts of an event go to the worker: a new event; a redelivery only when there
// is something left to do and no message is on its way.
func TestNeedsWork(t *testing.T) {
	sent, failed, pending := EmailSent, EmailFailed, EmailPending
	fresh, stale := time.Now(), time.Now().Add(-time.Hour)
	for _, tc := range []struct {
		name     string
		d        Delivery
		inserted bool
		want     bool
	}{
		{"new event", Delivery{Outcome: OutcomeProcessing, UpdatedAt: fresh}, true, true},
		{"copy while queued (20 at once)", Delivery{Outcome: OutcomeProcessing, UpdatedAt: fresh}, false, false},
		{"copy of one stuck in processing (message lost)", Delivery{Outcome: OutcomeProcessing, UpdatedAt: stale}, false, true},
		{"issued and sent", Delivery{Outcome: OutcomeIssued, EmailStatus: &sent}, false, false},
		{"issued, email failed", Delivery{Outcome: OutcomeIssued, EmailStatus: &failed}, false, true},
		{"issued, email pending (worker crashed)", Delivery{Outcome: OutcomeIssued, EmailStatus: &pending}, false, true},
		{"unmapped (mapping added since)", Delivery{Outcome: OutcomeUnmapped}, false, true},
		{"over quota (plan upgraded since)", Delivery{Outcome: OutcomeOverQuota}, false, true},
		{"awaiting payment", Delivery{Outcome: OutcomeAwaitingPayment}, false, true},
		{"error", Delivery{Outcome: OutcomeError}, false, true},
	} {
		if got := needsWork(&tc.d, tc.inserted); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
