package console

import (
	"net/http"
	"strconv"

	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
)

// The overview (the console's home): the counts, what support looks at first (the
// licenses about to expire and the latest changes) and the recent activations.

const (
	// expiringWindowDays is the overview's "expiring soon": the next 30 days.
	expiringWindowDays = 30
	// overviewRows is how many expiring licenses and events the overview lists.
	overviewRows = 10
)

type dashboardData struct {
	Stats *licensingv1.GetStatsResponse
	// Expiring are the active licenses expiring within ExpiringDays, soonest first, of
	// ExpiringTotal.
	Expiring      []*licensingv1.LicenseRow
	ExpiringTotal int
	ExpiringDays  int
	// Events are the latest events; EventsUnavailable is set when the event log could
	// not be read (the rest of the overview still shows).
	Events            []*eventsv1.EventRecord
	EventsUnavailable bool
}

func (h *Handler) dashboard(w http.ResponseWriter, r *http.Request, s *session) {
	v := pageView(s, "Overview", "overview")
	v.Notice = notice(r)
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	stats, err := h.licensing.GetStats(ctx, &licensingv1.GetStatsRequest{})
	if err != nil {
		h.errorPage(w, r, s, asAPIError(err))
		return
	}
	expiring, err := h.licensing.ListLicenses(ctx, &licensingv1.ListLicensesRequest{
		ExpiringWithinDays: strconv.Itoa(expiringWindowDays), Limit: strconv.Itoa(overviewRows),
	})
	if err != nil {
		h.errorPage(w, r, s, asAPIError(err))
		return
	}
	d := &dashboardData{Stats: stats, Expiring: expiring.GetLicenses(), ExpiringTotal: int(expiring.GetTotal()), ExpiringDays: expiringWindowDays}
	events, err := h.events.ListEvents(ctx, &eventsv1.ListEventsRequest{Limit: strconv.Itoa(overviewRows)})
	if err != nil {
		if h.sessionEnded(w, r, err) {
			return
		}
		d.EventsUnavailable = true
	}
	d.Events = events.GetEvents()
	v.Data = d
	h.render(w, http.StatusOK, "dashboard", v)
}
