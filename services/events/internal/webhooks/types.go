package webhooks

import (
	"slices"
	"strings"

	"github.com/keyhouse/keyhouse/pkg/apierr"
)

// EventTypes are the types an endpoint can subscribe to: addendum §11's table. `ping`
// is not among them: it goes to the one endpoint it is sent to, whatever it subscribed.
var EventTypes = []string{
	"license.issued", "license.revoked", "license.reactivated", "license.deleted",
	"license.terms_updated", "license.notes_updated",
	"seat.activated", "seat.deactivated", "seat.token_reissued",
	"usage.limit_reached", "usage.reset",
	"release.published", "release.unpublished",
	"storefront.delivery",
	"billing.plan_changed", "api_key.rotated", "api_key.created", "api_key.deleted", "lease_key.rotated",
	"webhook_endpoint.disabled",
}

// PingType is the type of the event POST /v1/webhook-endpoints/{id}/ping sends.
const PingType = "ping"

// maxSubscriptions bounds an endpoint's events list (every type and prefix fits).
const maxSubscriptions = 64

// checkSubscriptions validates an endpoint's events: ["*"], or known types and prefixes
// of known types ending in "." (e.g. "license."), without repeats.
func checkSubscriptions(events []string) *apierr.Error {
	if len(events) == 0 {
		return apierr.Invalid(`events is required: ["*"] or a list of event types`)
	}
	if len(events) > maxSubscriptions {
		return apierr.Invalid("events has more than %d entries", maxSubscriptions)
	}
	seen := make(map[string]bool, len(events))
	for _, e := range events {
		switch {
		case seen[e]:
			return apierr.Invalid("events lists %q twice", e)
		case e == "*":
			if len(events) > 1 {
				return apierr.Invalid(`events: "*" stands alone`)
			}
		case !knownSubscription(e):
			if len(e) > 64 {
				e = e[:64] + "…"
			}
			return apierr.Invalid("events: unknown event type %q", e)
		}
		seen[e] = true
	}
	return nil
}

func knownSubscription(e string) bool {
	if strings.HasSuffix(e, ".") {
		return slices.ContainsFunc(EventTypes, func(t string) bool { return strings.HasPrefix(t, e) })
	}
	return slices.Contains(EventTypes, e)
}

// Matches reports whether an endpoint subscribed to subs receives an event of type t.
func Matches(subs []string, t string) bool {
	for _, s := range subs {
		if s == "*" || s == t || (strings.HasSuffix(s, ".") && strings.HasPrefix(t, s)) {
			return true
		}
	}
	return false
}
