package webhooks

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/mailtest"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/mail"
)

type contacts map[string]string

func (c contacts) TenantEmail(_ context.Context, tenant string) (string, error) {
	return c[tenant], nil
}

// The tenant of an endpoint Keyhouse disabled gets a mail through a real SMTP server,
// naming the endpoint and where to enable it again; a tenant without an address (self-
// hosted) gets none.
func TestDisabledEndpointMailsTheTenant(t *testing.T) {
	testkit.Integration(t)
	sink := mailtest.New(t)
	sender, err := mail.New(mail.Config{Provider: mail.ProviderSMTP, SMTPURL: sink.URL(), From: "Keyhouse <hooks@keyhouse.test>"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	m := &DisabledMailer{Mail: sender, Contacts: contacts{"t1": "vendor@example.com"}, ConsoleURL: "https://keys.example.com/console", Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ep := &Endpoint{TenantID: "t1", ID: "we_1", URL: "https://crm.example.com/hook?token=s3cret", CreatedAt: time.Now()}
	m.Send(context.Background(), ep)
	m.Send(context.Background(), &Endpoint{TenantID: "default", ID: "we_2", URL: "http://10.0.0.1/"})
	got := sink.Messages()
	if len(got) != 1 || got[0].To[0] != "vendor@example.com" || got[0].Subject != "Keyhouse disabled a webhook endpoint" {
		t.Fatalf("mail %+v", got)
	}
	body := got[0].Body
	for _, want := range []string{"we_1", "failed for 72 hours", "https://keys.example.com/console/webhooks/we_1"} {
		if !strings.Contains(body, want) {
			t.Fatalf("the mail does not say %q:\n%s", want, body)
		}
	}
}
