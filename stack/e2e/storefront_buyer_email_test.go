package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/stack"
)

// A buyer lost the key email: docs/storefront.md's runbook, run as written. Keyhouse
// keeps no buyer address and sends a purchase's email once: Stripe's Resend of the event
// (the same event id, and a new one for the same session) sends nothing more, and the new
// delivery shows the purchase's email, sent. The vendor finds the purchase by the Stripe
// customer or checkout session (the runbook's curl commands, key included), and the
// console's license page shows the portal link the email carried, to send from their own
// mailbox. The email answers to the vendor (hosted: the tenant's name and address when it
// set no others), never to the installation's operator.
func TestStorefrontLostKeyRunbook(t *testing.T) {
	t.Parallel()
	s, sink := storefrontStack(t)
	n := uniq("")
	vendorName, vendorEmail := "Acme Tools "+n, "acme-"+n+"@example.com"
	resp := admin(t, s).Post("/v1/operator/tenants", map[string]string{"name": vendorName, "email": vendorEmail}).Expect(t, 200)
	vendor := newClient(t, s.URL, resp.JSON(t)["api_key"].(string))
	sh := connectShop(t, vendor)
	link := uniq("plink_")
	sh.mapping(map[string]any{"payment_link": link, "product_id": product("sf-lost"), "tier": "pro", "seats": 2})

	buyer := uniq("lost") + "@example.com"
	sess := newSession(link, buyer)
	ev1 := uniq("evt_")
	sh.deliver(event(ev1, "checkout.session.completed", sess)).Expect(t, 200)
	first := sh.await(ev1, outcome("issued", "sent"))
	key := first["license_key"].(string)
	got := awaitMail(t, sink, buyer, 1)[0]
	if from := got.HeaderText("From"); from != fmt.Sprintf("%q <shop@example.com>", vendorName) {
		t.Errorf("From %q, want the vendor's name on EMAIL_FROM's address", from)
	}
	if rt := got.HeaderText("Reply-To"); rt != "<"+vendorEmail+">" {
		t.Errorf("Reply-To %q, want the vendor's <%s>, not the operator's EMAIL_REPLY_TO", rt, vendorEmail)
	}
	if !strings.Contains(got.Body, "Reply to it if you need help from "+vendorName+".") {
		t.Errorf("the email does not say who helps:\n%s", got.Body)
	}

	// Stripe's Resend: the same event id, and a new event id for the same session.
	sh.deliver(event(ev1, "checkout.session.completed", sess)).Expect(t, 200)
	ev2 := uniq("evt_")
	sh.deliver(event(ev2, "checkout.session.completed", sess)).Expect(t, 200)
	second := sh.await(ev2, outcome("issued"))
	if second["email_status"] != "sent" || second["license_key"] != key || second["error"] != nil {
		t.Fatalf("second delivery %v, want the purchase's key and its email sent", second)
	}
	if d := sh.delivery(ev1); d["email_status"] != "sent" {
		t.Fatalf("the delivery the email went out with now says %v", d["email_status"])
	}
	time.Sleep(2 * time.Second) // whatever is in flight settles: still one email
	if n := len(sink.To(buyer)); n != 1 {
		t.Fatalf("%d emails after Stripe's resends, want 1", n)
	}

	// The runbook's filters, and what they refuse.
	for _, q := range []string{"customer=" + sess.Customer, "checkout_session_id=" + sess.ID} {
		if ds, total := sh.deliveries(q); total != 2 || len(ds) != 2 || ds[0]["event_id"] != ev2 {
			t.Fatalf("deliveries?%s: %v (total %d)", q, ds, total)
		}
	}
	if _, total := sh.deliveries("customer=cus_nobody"); total != 0 {
		t.Fatalf("another customer matches %d deliveries", total)
	}
	sh.c.Get("/v1/storefront/deliveries?customer="+"cus%20x").ExpectError(t, 400, "customer must be a Stripe id (letters, digits and underscores)")

	// The runbook's commands as written, with its example ids replaced by this purchase's.
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	blocks, answer := runbookExamples(t, filepath.Join(root, "docs", "storefront.md"))
	for _, block := range blocks {
		script := strings.NewReplacer(runbookCustomer, sess.Customer, runbookSession, sess.ID).Replace(block)
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
		cmd.Env = append(os.Environ(), "KH="+s.URL, "ADMIN=Authorization: Bearer "+vendor.Token)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
		var list struct {
			Deliveries []json.RawMessage `json:"deliveries"`
			Total      int               `json:"total"`
		}
		if err := json.Unmarshal(out, &list); err != nil || list.Total != 2 || len(list.Deliveries) != 2 {
			t.Fatalf("%s answered %s (%v), want the purchase's two deliveries", script, out, err)
		}
		for _, raw := range list.Deliveries {
			var d map[string]any
			_ = json.Unmarshal(raw, &d)
			if d["license_key"] != key || d["email_status"] != "sent" || d["checkout_session_id"] != sess.ID {
				t.Fatalf("%s: delivery %s, want the purchase's key, sent", script, raw)
			}
			if fields, shown := (&Response{Body: raw}).Keys(t), (&Response{Body: answer}).Keys(t); !slices.Equal(fields, shown) {
				t.Fatalf("a delivery's fields are %v; the runbook shows %v", fields, shown)
			}
		}
	}

	// The portal link to send with the key: the console's license page shows the one the
	// email carried.
	web := newWebClient(t, s)
	web.signIn(vendor.Token)
	if path := portalPath(t, web, key); !strings.Contains(got.Body, "https://licenses.example.com"+path) {
		t.Fatalf("the license page's portal link %s is not the email's:\n%s", path, got.Body)
	}
}

// The example ids of docs/storefront.md's "A buyer lost the key email".
const (
	runbookCustomer = "cus_QF3xY7aB9cD2eF"
	runbookSession  = "cs_test_a1B2c3D4e5F6"
)

// runbookExamples are the sh blocks of docs/storefront.md's "A buyer lost the key email",
// and the first json block: the answer it shows, whose first delivery it returns.
func runbookExamples(t *testing.T, doc string) (blocks []string, answer json.RawMessage) {
	t.Helper()
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "\n## A buyer lost the key email\n")
	if start < 0 {
		t.Fatalf("%s has no section \"A buyer lost the key email\"", doc)
	}
	section := text[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		blocks = append(blocks, m[1])
	}
	shown := regexp.MustCompile("(?s)```json\n(.*?)```").FindStringSubmatch(section)
	if len(blocks) != 2 || shown == nil || !strings.Contains(section, runbookCustomer) || !strings.Contains(section, runbookSession) {
		t.Fatalf("the runbook has %d sh blocks (want 2: by customer, by checkout session) and the answer %v", len(blocks), shown != nil)
	}
	var list struct {
		Deliveries []json.RawMessage `json:"deliveries"`
	}
	if err := json.Unmarshal([]byte(shown[1]), &list); err != nil || len(list.Deliveries) == 0 {
		t.Fatalf("the runbook's answer is not a deliveries list: %v\n%s", err, shown[1])
	}
	return blocks, list.Deliveries[0]
}

// Keyhouse stores no buyer address (api.md, the storefront callback's rule 4): after the
// migrations no column or table of the storefront's schema is meant to hold one (the
// sealed address of 00009 and its resends are dropped), no text column holds a buyer's
// address after a purchase, and there is no resend route: the gateway answers it as any
// unknown route.
func TestStorefrontKeepsNoBuyerAddress(t *testing.T) {
	t.Parallel()
	s, sink := storefrontStack(t)
	tenant := newTenant(t, s)
	sh := connectShop(t, tenant)
	link := uniq("plink_")
	sh.mapping(map[string]any{"payment_link": link, "product_id": product("sf-noaddr"), "tier": "pro"})
	buyer := uniq("kept") + "@example.com"
	ev := uniq("evt_")
	sh.deliver(event(ev, "checkout.session.completed", newSession(link, buyer))).Expect(t, 200)
	d := sh.await(ev, outcome("issued", "sent"))
	awaitMail(t, sink, buyer, 1)

	ctx := t.Context()
	conn := dbConn(t, s)
	rows, err := conn.Query(ctx, `SELECT table_name, column_name, data_type FROM information_schema.columns
		WHERE table_schema = 'storefront' ORDER BY table_name, ordinal_position`)
	if err != nil {
		t.Fatal(err)
	}
	type column struct{ table, name, typ string }
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		return c, r.Scan(&c.table, &c.name, &c.typ)
	})
	if err != nil {
		t.Fatal(err)
	}
	var texts []column
	for _, c := range cols {
		// The outbox carries the fulfillment message (the address sealed in it) until it is
		// published; email_status is the email's state, reply_to the vendor's own address.
		if c.table == "email_resends" || strings.Contains(c.name, "email") && c.name != "email_status" {
			t.Errorf("storefront.%s.%s may hold a buyer address", c.table, c.name)
		}
		if c.typ == "text" || c.typ == "jsonb" || c.typ == "character varying" {
			texts = append(texts, c)
		}
	}
	if len(texts) < 10 {
		t.Fatalf("only %d text columns in the storefront schema: %v", len(texts), cols)
	}
	for _, c := range texts {
		var n int
		q := fmt.Sprintf(`SELECT count(*) FROM storefront.%s WHERE %s::text LIKE '%%' || $1 || '%%'`,
			pgx.Identifier{c.table}.Sanitize(), pgx.Identifier{c.name}.Sanitize())
		if err := conn.QueryRow(ctx, q, buyer).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("storefront.%s.%s holds the buyer's address", c.table, c.name)
		}
	}

	for _, path := range []string{fmt.Sprintf("/v1/storefront/deliveries/%v/resend-email", d["id"]), "/v1/storefront/deliveries/1/resend-email"} {
		r := tenant.Do(http.MethodPost, path, map[string]any{}, "Idempotency-Key", uniq("resend-"))
		if r.Status != 404 || string(r.Body) != `{"error":"Not found"}` {
			t.Errorf("POST %s answered %d %s, want 404 {\"error\":\"Not found\"}", path, r.Status, r.Body)
		}
	}
	time.Sleep(time.Second)
	if n := len(sink.To(buyer)); n != 1 {
		t.Fatalf("%d emails to the buyer, want the purchase's one", n)
	}
}

// Every address a checkout may carry: what can be mailed is (a name-addr's address, a
// quoted local part, an internationalized domain in punycode), and what cannot says why,
// not that there was none. The sink offers no SMTPUTF8, so a non-ASCII local part is
// refused with nothing sent.
func TestStorefrontBuyerAddressesAreMailedOrRefusedWithTheReason(t *testing.T) {
	t.Parallel()
	s, sink := storefrontStack(t)
	sh := connectShop(t, newTenant(t, s))
	link := uniq("plink_")
	sh.mapping(map[string]any{"payment_link": link, "product_id": product("sf-addr"), "tier": "pro"})
	u := uniq("")
	for _, c := range []struct {
		given, rcpt, status, err string
	}{
		{"Jane Doe <jane" + u + "@example.com>", "jane" + u + "@example.com", "sent", ""},
		{`"john smith` + u + `"@example.com`, "john smith" + u + "@example.com", "sent", ""},
		{"user" + u + "@münchen.de", "user" + u + "@xn--mnchen-3ya.de", "sent", ""},
		{"not an address " + u, "", "failed", "The checkout session's customer email cannot be used (it is not an email address); no email was sent"},
		{"zoë" + u + "@example.com", "", "failed", "Email delivery failed: mail: the recipient's address has a non-ASCII local part, which needs SMTPUTF8 (RFC 6531), and the mail server does not offer it"},
	} {
		ev := uniq("evt_")
		sh.deliver(event(ev, "checkout.session.completed", newSession(link, c.given))).Expect(t, 200)
		d := sh.await(ev, func(d map[string]any) bool { return d["email_status"] == "sent" || d["email_status"] == "failed" })
		if d["email_status"] != c.status || c.err != "" && d["error"] != c.err {
			t.Errorf("%q: email %v, error %v; want %s %q", c.given, d["email_status"], d["error"], c.status, c.err)
			continue
		}
		if c.rcpt != "" {
			m := awaitMail(t, sink, c.rcpt, 1)[0]
			if !strings.Contains(m.Body, d["license_key"].(string)) {
				t.Errorf("%q: the email to %s lacks the key", c.given, c.rcpt)
			}
		}
	}
	for _, m := range sink.Messages() {
		for _, r := range m.To {
			if strings.ContainsAny(r, "üë") {
				t.Errorf("a non-ASCII address went out raw: %q", r)
			}
		}
	}
}
