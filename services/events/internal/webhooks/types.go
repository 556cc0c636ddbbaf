package webhooks

import (
	"fmt"
	"strings"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/input"
)

// PingType is the type of the event POST /v1/webhook-endpoints/{id}/ping sends.
const PingType = "ping"

// maxSubscriptions bounds an endpoint's events list (every type and prefix fits).
const maxSubscriptions = 64

// checkSubscriptions validates an endpoint's events: ["*"], or the types of the log and
// prefixes of them ending in "." (e.g. "license."), without repeats. `ping` is not among
// them: it goes to the one endpoint it is sent to, whatever it subscribed.
func checkSubscriptions(subs []string) *apierr.Error {
	if len(subs) == 0 {
		return apierr.Invalid(`events is required: ["*"] or a list of event types`)
	}
	if len(subs) > maxSubscriptions {
		return apierr.Invalid("events has more than %d entries", maxSubscriptions)
	}
	seen := make(map[string]bool, len(subs))
	for i, e := range subs {
		switch {
		case seen[e]:
			return apierr.Invalid("events lists %q twice", e)
		case e == "*":
			if len(subs) > 1 {
				return apierr.Invalid(`events: "*" stands alone`)
			}
		case !events.IsLoggedTypeOrPrefix(e):
			// The entry by its index, as the log's type filter words it, not echoed.
			return input.NotOneOf(fmt.Sprintf("events[%d]", i), events.LoggedTypeOrPrefix)
		}
		seen[e] = true
	}
	return nil
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
