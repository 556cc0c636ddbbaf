package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// personalDataIn lists the columns (schema.table.column) of every table of every schema
// where needle occurs: any text, json or array column, case-insensitive, and any bytea
// (the event log's and the deliveries' bodies) as bytes. What docs/privacy.md promises
// about where a person's data lives is held to it.
func personalDataIn(t *testing.T, conn *pgx.Conn, needle string) []string {
	t.Helper()
	ctx := context.Background()
	rows, err := conn.Query(ctx, `SELECT c.table_schema, c.table_name, c.column_name, c.data_type
		FROM information_schema.columns c JOIN information_schema.tables t USING (table_schema, table_name)
		WHERE t.table_type = 'BASE TABLE' AND c.table_schema NOT IN ('pg_catalog', 'information_schema')
		  AND c.data_type IN ('text', 'character varying', 'character', 'jsonb', 'json', 'bytea', 'ARRAY', 'USER-DEFINED')`)
	if err != nil {
		t.Fatal(err)
	}
	type column struct{ schema, table, name, typ string }
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		err := r.Scan(&c.schema, &c.table, &c.name, &c.typ)
		return c, err
	})
	if err != nil {
		t.Fatal(err)
	}
	var hits []string
	for _, c := range cols {
		table, col := pgx.Identifier{c.schema, c.table}.Sanitize(), pgx.Identifier{c.name}.Sanitize()
		cond := col + `::text ILIKE '%' || $1 || '%'`
		if c.typ == "bytea" {
			cond = `position(convert_to($1, 'UTF8') in ` + col + `) > 0`
		}
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE `+cond, needle).Scan(&n); err != nil {
			t.Fatalf("%s.%s: %v", table, col, err)
		}
		if n > 0 {
			hits = append(hits, c.schema+"."+c.table+"."+c.name)
		}
	}
	slices.Sort(hits)
	return hits
}

// A person's data erased as docs/privacy.md tells a vendor to: delete the license, then
// redact its events. Afterwards no column of any schema holds the person's name, email or
// machine (the issue's stored Idempotency-Key answer holds only the key); the log keeps
// each event's id, type, time and key with the personal fields null, GET and a redelivery
// show that body, a second redaction changes nothing, and the route refuses bad input
// naming the field.
func TestDeleteThenRedactLeavesNoPersonalData(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	adm := admin(t, s)
	conn := dbConn(t, s)
	m := fmt.Sprintf("zqpriv%d", time.Now().UnixNano())
	person, host := "Zelda "+m+"@Example.eu", "laptop-of-"+m
	rc := newWebhookReceiver(t)
	ep := adm.Post("/v1/webhook-endpoints", map[string]any{"url": rc.URL + "/hook", "events": []string{"license.", "seat."}}).Expect(t, 200).JSON(t)
	epID := ep["id"].(string)
	t.Cleanup(func() { adm.Delete("/v1/webhook-endpoints/"+epID, nil) })

	key := adm.Do(http.MethodPost, "/v1/issue-license", map[string]any{"tier": "pro", "product_id": product("privacy"),
		"issued_to": person, "notes": "phone +49 170 " + m}, "Idempotency-Key", fmt.Sprint("order-", time.Now().UnixNano())).Expect(t, 200).JSON(t)["key"].(string)
	anon(t, s).Post("/v1/activate-license", map[string]any{"key": key, "instance_id": host}).Expect(t, 200)
	adm.Delete("/v1/delete-license", map[string]any{"key": key}).Expect(t, 200)
	evs := eventsOf(t, adm, key, 4) // issued, seat.activated, deleted, seat.deactivated (the purge)
	eventually(t, "the four deliveries", func() bool {
		n := 0
		for _, d := range rc.deliveries() {
			if strings.Contains(string(d.body), key) {
				n++
			}
		}
		return n == 4
	})
	if hits := personalDataIn(t, conn, m); !slices.Contains(hits, "events.events.body") || !slices.Contains(hits, "events.webhook_deliveries.body") {
		t.Fatalf("before the redaction the person is not where the test looks: %v", hits)
	}

	// Any spelling the log's filter takes.
	spelled := strings.ToLower(strings.ReplaceAll(key, "-", ""))
	r := adm.Post("/v1/events/redact", map[string]any{"license_key": spelled}).Expect(t, 200)
	r.ExpectBody(t, `{"license_key":"`+key+`","events_redacted":3,"deliveries_redacted":3}`)
	if hits := personalDataIn(t, conn, m); len(hits) != 0 {
		t.Fatalf("after delete and redact the person is still in %v", hits)
	}
	if hits := personalDataIn(t, conn, host); len(hits) != 0 {
		t.Fatalf("after delete and redact the machine is still in %v", hits)
	}

	// The log keeps every event, its id, type, time and key; the personal fields are null.
	after := eventsOf(t, adm, key, 4)
	for i, ev := range after {
		if ev.ID != evs[i].ID || ev.Type != evs[i].Type || ev.CreatedAt != evs[i].CreatedAt || ev.Data["key"] != key {
			t.Fatalf("event %d changed beyond its personal data: %+v, was %+v", i, ev, evs[i])
		}
	}
	issued := evs[0]
	got := adm.Get("/v1/events/"+issued.ID).Expect(t, 200)
	if strings.Contains(string(got.Body), m) || !strings.Contains(string(got.Body), `"issued_to":null`) || !strings.Contains(string(got.Body), `"tier":"pro"`) {
		t.Fatalf("GET of the redacted event: %s", got.Body)
	}
	// A redelivery sends the redacted body.
	before := len(rc.deliveries())
	adm.Post("/v1/events/"+issued.ID+"/redeliver", map[string]any{"endpoint_id": epID}).Expect(t, 200)
	eventually(t, "the redelivery", func() bool { return len(rc.deliveries()) > before })
	if d := rc.deliveries()[before]; !strings.Contains(string(d.body), `"issued_to":null`) || strings.Contains(string(d.body), m) {
		t.Fatalf("redelivered body %s", d.body)
	}
	// Nothing is left to redact; an unknown key has nothing (as the log's filter lists nothing).
	adm.Post("/v1/events/redact", map[string]any{"license_key": key}).
		ExpectBody(t, `{"license_key":"`+key+`","events_redacted":0,"deliveries_redacted":0}`)
	adm.Post("/v1/events/redact", map[string]any{"license_key": "NOPE-" + m}).Expect(t, 200).
		ExpectBody(t, `{"license_key":"NOPE-`+m+`","events_redacted":0,"deliveries_redacted":0}`)
	for body, msg := range map[string]string{
		`{}`:                  "license_key is required",
		`{"license_key":""}`:  "license_key is required",
		`{"license_key":" "}`: "license_key must be a license key",
		`{"license_key":"` + strings.Repeat("A", 300) + `"}`: "license_key must be a license key",
	} {
		adm.Do(http.MethodPost, "/v1/events/redact", body).ExpectError(t, 400, msg)
	}
	adm.Do(http.MethodPost, "/v1/events/redact", `{"license_key":7}`).Expect(t, 400)
	anon(t, s).Post("/v1/events/redact", map[string]any{"license_key": key}).ExpectError(t, 403, "Unauthorized")
}

// Hosted, a tenant redacts only its own events: another tenant's redaction of its key
// changes nothing, and once the key is free and another tenant's, redacting it touches
// only the redacting tenant's events.
func TestRedactTouchesOnlyTheTenantsOwnEvents(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	conn := dbConn(t, s)
	m := fmt.Sprintf("zqhost%d", time.Now().UnixNano())
	key := "IMP-" + m
	a, b := newTenant(t, s), newTenant(t, s)
	imp := func(c *Client, who string) {
		c.Post("/v1/licenses/import", map[string]any{"licenses": []map[string]any{{"key": key, "product_id": product("privh"),
			"tier": "pro", "issued_to": who, "status": "active"}}}).Expect(t, 200)
	}
	imp(a, "Zelda A "+m)
	stored := eventsOf(t, a, key, 1)[0].Data["key"].(string) // the key as stored (canonical)
	b.Post("/v1/events/redact", map[string]any{"license_key": key}).
		ExpectBody(t, `{"license_key":"`+stored+`","events_redacted":0,"deliveries_redacted":0}`)
	if ev := eventsOf(t, a, key, 1)[0]; ev.Data["issued_to"] != "Zelda A "+m {
		t.Fatalf("another tenant's redaction touched the event: %+v", ev)
	}
	// The key, deleted by A, is B's now: each tenant has a license.issued of it.
	a.Delete("/v1/delete-license", map[string]any{"key": key}).Expect(t, 200)
	imp(b, "Zelda B "+m)
	eventsOf(t, b, key, 1)
	a.Post("/v1/events/redact", map[string]any{"license_key": key}).
		ExpectBody(t, `{"license_key":"`+stored+`","events_redacted":1,"deliveries_redacted":0}`)
	if ev := eventsOf(t, a, key, 2)[0]; ev.Type != "license.issued" || ev.Data["issued_to"] != nil {
		t.Fatalf("tenant A's event not redacted: %+v", ev)
	}
	if ev := eventsOf(t, b, key, 1)[0]; ev.Data["issued_to"] != "Zelda B "+m {
		t.Fatalf("tenant B's event was touched: %+v", ev)
	}
	if hits := personalDataIn(t, conn, "Zelda A "+m); len(hits) != 0 {
		t.Fatalf("tenant A's person is still in %v", hits)
	}
}

// Concurrent redactions of one key, through two events replicas, all succeed, and their
// counts add up to what there was to redact: each event and delivery is changed once.
func TestConcurrentRedactsOfOneKeyAddUp(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	adm := admin(t, s)
	conn := dbConn(t, s)
	second := newClient(t, secondGateway(t, s, "events", "EVENTS_ADDR"), s.AdminKey)
	m := fmt.Sprintf("zqconc%d", time.Now().UnixNano())
	rc := newWebhookReceiver(t)
	for range 2 {
		ep := adm.Post("/v1/webhook-endpoints", map[string]any{"url": rc.URL + "/hook", "events": []string{"license.issued", "seat."}}).Expect(t, 200).JSON(t)
		t.Cleanup(func() { adm.Delete("/v1/webhook-endpoints/"+ep["id"].(string), nil) })
	}
	key := issueLicense(t, adm, map[string]any{"tier": "pro", "product_id": product("privc"), "issued_to": "Zelda " + m, "max_activations": 3})
	for i := range 3 {
		anon(t, s).Post("/v1/activate-license", map[string]any{"key": key, "instance_id": fmt.Sprint("pc-", i, "-", m)}).Expect(t, 200)
	}
	adm.Delete("/v1/delete-license", map[string]any{"key": key}).Expect(t, 200)
	evs := eventsOf(t, adm, key, 8) // issued, 3 activated, deleted, 3 deactivated
	var ids []string
	for _, ev := range evs {
		if ev.Type != "license.deleted" {
			ids = append(ids, ev.ID)
		}
	}
	// Every delivery of those events, to these endpoints and to any other test's on the
	// shared stack's one tenant.
	var want int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM events.webhook_deliveries WHERE event_id = ANY($1)`, ids).Scan(&want); err != nil {
		t.Fatal(err)
	}
	if want < 14 {
		t.Fatalf("%d deliveries of the 7 events to 2 endpoints", want)
	}
	const calls = 6
	type counts struct{ events, deliveries int }
	got := make([]counts, calls)
	var wg sync.WaitGroup
	for i := range calls {
		c := adm
		if i%2 == 1 {
			c = second
		}
		wg.Go(func() {
			r := newClient(t, c.Base, c.Token).Post("/v1/events/redact", map[string]any{"license_key": key})
			if r.Status != 200 {
				t.Errorf("redact %d: %d %s", i, r.Status, r.Body)
				return
			}
			j := r.JSON(t)
			got[i] = counts{int(j["events_redacted"].(float64)), int(j["deliveries_redacted"].(float64))}
		})
	}
	wg.Wait()
	var sum counts
	for _, c := range got {
		sum.events += c.events
		sum.deliveries += c.deliveries
	}
	if sum.events != 7 || sum.deliveries != want {
		t.Fatalf("the redactions changed %+v in all (%+v), want 7 events and %d deliveries", sum, got, want)
	}
	if hits := personalDataIn(t, conn, m); len(hits) != 0 {
		t.Fatalf("the person is still in %v", hits)
	}
}
