// Package importer turns the license-key exports of other systems into the licenses of
// POST /v1/licenses/import and sends them in calls of 1,000 (keyhousectl import).
package importer

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// License is one item of POST /v1/licenses/import.
type License struct {
	Key            string         `json:"key"`
	ProductID      string         `json:"product_id"`
	Tier           string         `json:"tier"`
	IssuedTo       string         `json:"issued_to"`
	IssuedAt       *string        `json:"issued_at,omitempty"`
	ExpiresAt      *string        `json:"expires_at"`
	Status         string         `json:"status"`
	Limits         map[string]any `json:"limits,omitempty"`
	MaxActivations *int           `json:"max_activations"`
	Notes          *string        `json:"notes,omitempty"`
	// Where the license is in its export ("line 7", "page 2, license 14 (id)"), so that
	// the API's answer about it can be reported by its position in the file.
	Where string `json:"-"`
}

// Rejected is a record of an export that cannot become a license (no key, a date or an
// activation limit that does not read), by its position in the file. The other records
// of the file still convert.
type Rejected struct {
	Where  string
	Reason string
}

// Options fill in what an export does not say.
type Options struct {
	// Product is the product_id of every license; empty: the source's product id,
	// prefixed with the source's name (e.g. "lemonsqueezy-8").
	Product string
	// Tier of every license (default "pro").
	Tier string
}

// Sources are the formats keyhousectl reads, by --from name. Each returns the licenses
// of the export and the records it rejected; an error means the file as a whole does not
// read (not CSV, or not JSON), and then nothing of it is returned.
var Sources = map[string]func(io.Reader, Options) ([]License, []Rejected, error){
	"lemonsqueezy": LemonSqueezy,
	"keygen":       Keygen,
	"gumroad":      Gumroad,
}

func (o Options) product(source, id string) string {
	if o.Product != "" {
		return o.Product
	}
	if id == "" {
		return source
	}
	return source + "-" + id
}

func (o Options) tier() string {
	if o.Tier != "" {
		return o.Tier
	}
	return "pro"
}

// csvRows reads a CSV with a header row into maps keyed by the header's names, lower-cased
// and trimmed, so column order and case do not matter. Each row's "#line" is the line of
// the file its record starts on (a quoted field may span lines).
func csvRows(r io.Reader) ([]map[string]string, error) {
	cr := csv.NewReader(withoutBOM(r))
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("reading the header row: %w", err)
	}
	for i, h := range header {
		header[i] = strings.ToLower(strings.TrimSpace(h))
	}
	var rows []map[string]string
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return rows, nil
		}
		if err != nil {
			// A record that is not CSV leaves no telling where the next one starts.
			return nil, err
		}
		line, _ := cr.FieldPos(0)
		row := map[string]string{"#line": "line " + strconv.Itoa(line)}
		for i, v := range rec {
			if i < len(header) {
				row[header[i]] = strings.TrimSpace(v)
			}
		}
		rows = append(rows, row)
	}
}

// withoutBOM is r without the UTF-8 byte order mark a file saved by Excel or Windows tools
// starts with. Read as data, it would be part of the first header's name, and before a
// quoted one ("\ufeff\"key\"") it makes the header row not CSV at all; before JSON, not
// JSON.
func withoutBOM(r io.Reader) io.Reader {
	br := bufio.NewReader(r)
	if b, err := br.Peek(3); err == nil && string(b) == "\ufeff" {
		_, _ = br.Discard(3)
	}
	return br
}

// first is the first non-empty of the named columns.
func first(row map[string]string, names ...string) string {
	for _, n := range names {
		if v := row[n]; v != "" {
			return v
		}
	}
	return ""
}

// timestamp reads the date forms these exports use into RFC 3339 (nil: empty).
func timestamp(v string) (*string, error) {
	if v == "" || strings.EqualFold(v, "null") || strings.EqualFold(v, "never") {
		return nil, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05", "2006-01-02 15:04:05 MST", "2006-01-02 15:04:05 -0700", "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			s := t.UTC().Truncate(time.Second).Format(time.RFC3339)
			return &s, nil
		}
	}
	return nil, fmt.Errorf("%q is not a date", v)
}

// activationCap reads an activation limit: empty or 0 is unlimited (null).
func activationCap(v string) (*int, error) {
	if v == "" {
		return nil, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return nil, fmt.Errorf("%q is not an activation limit", v)
	}
	if n == 0 {
		return nil, nil
	}
	return &n, nil
}

func yes(v string) bool {
	switch strings.ToLower(v) {
	case "true", "yes", "1":
		return true
	}
	return false
}

func note(s string) *string { return &s }

// LemonSqueezy reads the license keys CSV of Lemon Squeezy, whose columns are the
// license key object's attributes: key, status (inactive, active, expired, disabled),
// activation_limit, instances_count, expires_at, created_at, user_name, user_email,
// product_id, order_id. "disabled" is imported as revoked; an expired key keeps its
// expires_at and so answers "License has expired". The export carries no refund or
// dispute of its own: Lemon Squeezy disables a key when its order is refunded.
func LemonSqueezy(r io.Reader, o Options) ([]License, []Rejected, error) {
	rows, err := csvRows(r)
	if err != nil {
		return nil, nil, err
	}
	out := make([]License, 0, len(rows))
	var rejected []Rejected
	for _, row := range rows {
		l := License{
			Key: first(row, "key", "license key"), Tier: o.tier(),
			ProductID: o.product("lemonsqueezy", first(row, "product_id", "product id")),
			IssuedTo:  first(row, "user_email", "customer email", "user_name", "customer name"),
			Status:    "active", Where: row["#line"],
		}
		if reason := lemonSqueezyTerms(&l, row); reason != "" {
			rejected = append(rejected, Rejected{Where: l.Where, Reason: reason})
			continue
		}
		out = append(out, l)
	}
	return out, rejected, nil
}

// lemonSqueezyTerms fills in l from row, or says why the row is no license.
func lemonSqueezyTerms(l *License, row map[string]string) (reason string) {
	var err error
	if l.Key == "" {
		return "no key"
	}
	if yes(row["disabled"]) || strings.EqualFold(row["status"], "disabled") {
		l.Status = "revoked"
	}
	if l.IssuedAt, err = timestamp(first(row, "created_at", "created")); err != nil {
		return "created_at: " + err.Error()
	}
	if l.ExpiresAt, err = timestamp(first(row, "expires_at", "expires")); err != nil {
		return "expires_at: " + err.Error()
	}
	if l.MaxActivations, err = activationCap(first(row, "activation_limit", "activation limit")); err != nil {
		return "activation_limit: " + err.Error()
	}
	if id := first(row, "order_id", "order id"); id != "" {
		l.Notes = note("Lemon Squeezy order " + id)
	}
	return ""
}

// keygenPage is one page of Keygen's GET /v1/accounts/{account}/licenses (JSON:API).
type keygenPage struct {
	Data []keygenLicense `json:"data"`
}

type keygenLicense struct {
	ID         string `json:"id"`
	Type       string `json:"type"`
	Attributes struct {
		Name        *string        `json:"name"`
		Key         string         `json:"key"`
		Expiry      *string        `json:"expiry"`
		Status      string         `json:"status"`
		Suspended   bool           `json:"suspended"`
		MaxMachines *int           `json:"maxMachines"`
		Metadata    map[string]any `json:"metadata"`
		Created     string         `json:"created"`
	} `json:"attributes"`
	Relationships struct {
		Product struct {
			Data *struct {
				ID string `json:"id"`
			} `json:"data"`
		} `json:"product"`
	} `json:"relationships"`
}

// Keygen reads one or more list-licenses pages of Keygen's API, concatenated as the API
// returned them ({"data": [...], "links": {...}} each). A suspended or banned license is
// imported as revoked; maxMachines null is unlimited; the license's id goes to notes.
// Keygen has no payments, so no refund or dispute to follow.
func Keygen(r io.Reader, o Options) ([]License, []Rejected, error) {
	dec := json.NewDecoder(withoutBOM(r))
	var out []License
	var rejected []Rejected
	for page := 1; ; page++ {
		var p keygenPage
		if err := dec.Decode(&p); err == io.EOF {
			return out, rejected, nil
		} else if err != nil {
			return nil, nil, fmt.Errorf("page %d: %w", page, err)
		}
		for i, d := range p.Data {
			l := License{Where: fmt.Sprintf("page %d, license %d (%s)", page, i+1, d.ID)}
			if reason := keygenTerms(&l, d, o); reason != "" {
				rejected = append(rejected, Rejected{Where: l.Where, Reason: reason})
				continue
			}
			out = append(out, l)
		}
	}
}

// keygenTerms fills in l from d, or says why d is no license.
func keygenTerms(l *License, d keygenLicense, o Options) (reason string) {
	a := d.Attributes
	if a.Key == "" {
		return "no key"
	}
	product := ""
	if d.Relationships.Product.Data != nil {
		product = d.Relationships.Product.Data.ID
	}
	l.Key, l.Tier, l.ProductID, l.Status = a.Key, o.tier(), o.product("keygen", product), "active"
	l.MaxActivations, l.Notes = a.MaxMachines, note("Keygen license "+d.ID)
	email := "" // an empty metadata.email falls through to the name, as an absent one does
	if v := a.Metadata["email"]; v != nil {
		email = fmt.Sprint(v)
	}
	switch {
	case email != "":
		l.IssuedTo = email
	case a.Name != nil && *a.Name != "":
		l.IssuedTo = *a.Name
	default:
		l.IssuedTo = d.ID
	}
	if a.Suspended || strings.EqualFold(a.Status, "SUSPENDED") || strings.EqualFold(a.Status, "BANNED") {
		l.Status = "revoked"
	}
	var err error
	if l.IssuedAt, err = timestamp(a.Created); err != nil {
		return "created: " + err.Error()
	}
	if a.Expiry != nil {
		if l.ExpiresAt, err = timestamp(*a.Expiry); err != nil {
			return "expiry: " + err.Error()
		}
	}
	return ""
}

// Gumroad reads Gumroad's sales CSV (Sales → Download) of a product with license keys.
// Columns used: License Key, Purchase Email (or Buyer Email), Sale Date and Sale Time,
// Item Name or Product ID, Refunded?, Partial Refund, Fully Refunded?, Disputed?,
// Dispute Won?, Subscription End Date, Sale ID. Sales without a license key (products
// without licenses) are left out. A sale is imported revoked by the storefront's rule
// for a Stripe sale (docs/storefront.md, "After the sale"): refunded in full, or disputed
// and the dispute not won; a partial refund or a won dispute leaves it active. Gumroad
// keys have no activation limit of their own: each gets max_activations null
// (unlimited) unless the vendor changes terms later.
func Gumroad(r io.Reader, o Options) ([]License, []Rejected, error) {
	rows, err := csvRows(r)
	if err != nil {
		return nil, nil, err
	}
	var out []License
	var rejected []Rejected
	for _, row := range rows {
		key := first(row, "license key", "license_key")
		if key == "" {
			continue
		}
		l := License{Key: key, Tier: o.tier(), Status: "active", Where: row["#line"],
			ProductID: o.product("gumroad", first(row, "product id", "product_id", "item name")),
			IssuedTo:  first(row, "purchase email", "buyer email", "email", "buyer name")}
		if gumroadRefundedInFull(row) || (yes(row["disputed?"]) && !yes(row["dispute won?"])) {
			l.Status = "revoked"
		}
		when := first(row, "sale date", "date")
		if t := first(row, "sale time", "time"); when != "" && t != "" {
			when += " " + t
		}
		if l.IssuedAt, err = timestamp(when); err != nil {
			rejected = append(rejected, Rejected{Where: l.Where, Reason: "sale date: " + err.Error()})
			continue
		}
		if l.ExpiresAt, err = timestamp(first(row, "subscription end date")); err != nil {
			rejected = append(rejected, Rejected{Where: l.Where, Reason: "subscription end date: " + err.Error()})
			continue
		}
		if id := first(row, "sale id", "purchase id"); id != "" {
			l.Notes = note("Gumroad sale " + id)
		}
		out = append(out, l)
	}
	return out, rejected, nil
}

// gumroadRefundedInFull reads a sale's refund. Gumroad sets "Refunded?" for a partial
// refund too; "Fully Refunded?" says which it was. An export without that column is
// refunded in full when "Refunded?" is set and no partial amount is given.
func gumroadRefundedInFull(row map[string]string) bool {
	if full, ok := row["fully refunded?"]; ok && full != "" {
		return yes(full)
	}
	if !yes(row["refunded?"]) {
		return false
	}
	for col, v := range row {
		// "Partial Refund ($)", "Partial Refund (€)", …
		if strings.HasPrefix(col, "partial refund") {
			if n, err := strconv.ParseFloat(strings.TrimLeft(v, "$€£¥ "), 64); err == nil && n > 0 {
				return false
			}
		}
	}
	return true
}
