package e2e

import (
	"context"
	"net/mail"
	"net/url"
	"strings"
	"testing"

	storefrontv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/storefront/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A tenant's buyer-email settings: the sender name shown on From (with EMAIL_FROM's
// address), the reply-to and the product's display name reach the buyer's email through
// a real SMTP server; a value that could add a header (CR, LF) is a 400 naming the field
// and changes nothing; another tenant keeps the defaults; the console shows and saves them.
func TestStorefrontBuyerEmailUsesTheTenantsSenderSettings(t *testing.T) {
	t.Parallel()
	s, sink := storefrontStack(t)
	c := newTenant(t, s)
	defaults := `{"settings":{"sender_name":"","reply_to":"","product_name":""}}`
	c.Get("/v1/storefront/mail-settings").ExpectBody(t, defaults)

	// The REST edge refuses a control character in any string field; the service's own
	// check (which the console's gRPC calls meet) is tested through the console below.
	for _, bad := range []struct {
		body map[string]string
		want string
	}{
		{map[string]string{"sender_name": "Acme\r\nBcc: victim@example.com"}, "sender_name must not contain control characters"},
		{map[string]string{"sender_name": strings.Repeat("A", 101)}, "sender_name must be at most 100 characters with no line break or other control character"},
		{map[string]string{"reply_to": "help@acme.example\r\nBcc: victim@example.com"}, "reply_to must not contain control characters"},
		{map[string]string{"reply_to": "Help <help@acme.example>"}, "reply_to must be one email address, like support@example.com"},
		{map[string]string{"sender_name": "Acme Support", "product_name": "Editor\nX-Injected: 1"}, "product_name must not contain control characters"},
	} {
		c.Post("/v1/storefront/mail-settings", bad.body).ExpectError(t, 400, bad.want)
	}
	c.Get("/v1/storefront/mail-settings").ExpectBody(t, defaults)

	c.Post("/v1/storefront/mail-settings", map[string]string{"sender_name": " Acme Support ", "reply_to": "help@acme.example", "product_name": "Acme Editor Pro"}).
		ExpectBody(t, `{"settings":{"sender_name":"Acme Support","reply_to":"help@acme.example","product_name":"Acme Editor Pro"}}`)
	newTenant(t, s).Get("/v1/storefront/mail-settings").ExpectBody(t, defaults)

	sh := connectShop(t, c)
	product, link := product("sf-mail"), uniq("plink_")
	sh.mapping(map[string]any{"payment_link": link, "product_id": product, "tier": "pro"})
	buyer := uniq("buyer") + "@example.com"
	evID := uniq("evt_")
	sh.deliver(event(evID, "checkout.session.completed", newSession(link, buyer))).ExpectBody(t, `{"received":true}`)
	sh.await(evID, outcome("issued", "sent"))

	m := awaitMail(t, sink, buyer, 1)[0]
	from, err := mail.ParseAddress(m.Header.Get("From"))
	if err != nil || from.Name != "Acme Support" || from.Address != "shop@example.com" {
		t.Errorf("From %q (%v), want Acme Support <shop@example.com>", m.Header.Get("From"), err)
	}
	if rt := m.HeaderText("Reply-To"); rt != "<help@acme.example>" {
		t.Errorf("Reply-To %q, want the tenant's <help@acme.example>", rt)
	}
	if m.Subject != "Your license key for Acme Editor Pro" || !strings.Contains(m.Body, "Product:     Acme Editor Pro\n") {
		t.Errorf("subject %q, body:\n%s", m.Subject, m.Body)
	}
	if len(m.Header["Bcc"]) != 0 || len(m.Header["X-Injected"]) != 0 {
		t.Errorf("the email carries a header nobody set: %v", m.Header)
	}

	// The console shows the settings and puts a refused value's message beside its field.
	w := newWebClient(t, s)
	csrf := w.signIn(c.Token)
	w.get("/console/settings").expect(t, 200, "Buyer emails", `value="Acme Support"`, `value="help@acme.example"`, `value="Acme Editor Pro"`)
	page := w.post("/console/settings/mail", url.Values{"csrf": {csrf}, "sender_name": {"Acme Support"}, "reply_to": {"not an address"}, "product_name": {"Acme Editor Pro"}})
	page.expect(t, 400, `id="reply_to-error">reply_to must be one email address, like support@example.com`, `value="not an address"`)
	// The console's input policy refuses a line break in a form field before any call.
	w.post("/console/settings/mail", url.Values{"csrf": {csrf}, "sender_name": {"Acme\r\nBcc: victim@example.com"}}).
		expect(t, 400, "sender_name must not contain control characters")
	c.Get("/v1/storefront/mail-settings").ExpectBody(t, `{"settings":{"sender_name":"Acme Support","reply_to":"help@acme.example","product_name":"Acme Editor Pro"}}`)
	// A gRPC caller reaches the storefront past both: the service itself refuses.
	conn, err := grpc.NewClient(s.Env("STOREFRONT_ADDR"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+c.Token)
	for _, req := range []*storefrontv1.UpdateMailSettingsRequest{
		{SenderName: "Acme\r\nBcc: victim@example.com"}, {ProductName: "Editor\nX-Injected: 1"}, {ReplyTo: "help@acme.example\r\nBcc: victim@example.com"},
	} {
		_, err := storefrontv1.NewStorefrontServiceClient(conn).UpdateMailSettings(ctx, req)
		if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "must") {
			t.Errorf("UpdateMailSettings(%v) over gRPC: %v, want InvalidArgument", req, err)
		}
	}
	c.Get("/v1/storefront/mail-settings").ExpectBody(t, `{"settings":{"sender_name":"Acme Support","reply_to":"help@acme.example","product_name":"Acme Editor Pro"}}`)
	w.post("/console/settings/mail", url.Values{"csrf": {csrf}, "sender_name": {"Acme Licensing"}, "reply_to": {""}, "product_name": {""}}).
		redirectsTo(t, "/console/settings?notice=mail-saved")
	c.Get("/v1/storefront/mail-settings").ExpectBody(t, `{"settings":{"sender_name":"Acme Licensing","reply_to":"","product_name":""}}`)
}
