package webhooks

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/keyhouse/keyhouse/pkg/mail"
)

// Contacts finds where to write to a tenant ("" when nowhere: self-hosted).
type Contacts interface {
	TenantEmail(ctx context.Context, tenant string) (string, error)
}

// DisabledMailer tells a tenant that Keyhouse disabled one of its endpoints: the
// Worker.Disabled hook. A failure is logged, never retried: the endpoint's state, its
// disabled_reason and the webhook_endpoint.disabled event say the same.
type DisabledMailer struct {
	Mail     mail.Sender
	Contacts Contacts
	// ConsoleURL is PUBLIC_BASE_URL + "/console".
	ConsoleURL string
	Log        *slog.Logger
}

// Send mails the tenant about ep.
func (m *DisabledMailer) Send(ctx context.Context, ep *Endpoint) {
	to, err := m.Contacts.TenantEmail(ctx, ep.TenantID)
	if err != nil {
		m.Log.Warn("webhooks: no contact for the disabled endpoint's tenant", "tenant_id", ep.TenantID, "endpoint_id", ep.ID, "error", err.Error())
		return
	}
	if to == "" {
		return
	}
	msg := mail.Message{
		To:      to,
		Subject: "Keyhouse disabled a webhook endpoint",
		Text: fmt.Sprintf("Keyhouse disabled your webhook endpoint %s\n(%s)\nbecause every delivery to it failed for 72 hours.\n\n"+
			"Events recorded from now on are not sent to it. Once your receiver answers again, enable the endpoint and redeliver the events you need:\n%s/webhooks/%s\n",
			ep.ID, ep.URL, m.ConsoleURL, ep.ID),
		// An endpoint URL may carry a token: never in a log line.
		Secrets: []string{ep.URL},
	}
	if err := m.Mail.Send(ctx, msg); err != nil {
		m.Log.Warn("webhooks: mail about a disabled endpoint failed", "tenant_id", ep.TenantID, "endpoint_id", ep.ID, "error", err.Error())
	}
}
