package console

import (
	"context"
	"encoding/json"
	"html/template"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	accountsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	billingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/billing/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The stack tests (stack/e2e/console_*_test.go) drive the console against the real
// services; these pin what needs a configuration or a volume those tests do not have.

type fakeAccounts struct {
	accountsv1.UnimplementedConsoleAccountsServiceServer
}

func bearer(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get("authorization")
	if len(v) == 0 {
		return ""
	}
	return strings.TrimPrefix(v[0], "Bearer ")
}

func (fakeAccounts) SignIn(_ context.Context, r *accountsv1.SignInRequest) (*accountsv1.SignInResponse, error) {
	if r.GetApiKey() != "good" {
		return nil, status.Error(codes.Unauthenticated, "Invalid credentials")
	}
	return &accountsv1.SignInResponse{SessionToken: "khs_session", TenantId: "t_1"}, nil
}

func (fakeAccounts) GetAccount(ctx context.Context, _ *accountsv1.GetAccountRequest) (*accountsv1.GetAccountResponse, error) {
	if bearer(ctx) != "khs_session" {
		return nil, status.Error(codes.Unauthenticated, "Unauthorized")
	}
	return &accountsv1.GetAccountResponse{TenantId: "t_1", TenantName: "Acme <&> Co", Email: "a@example.com", MultiTenant: true}, nil
}

// fakeLicensing answers ListLicenses with n rows, newest first, and records the request.
type fakeLicensing struct {
	licensingv1.UnimplementedLicensingServiceServer
	n    int
	last *licensingv1.ListLicensesRequest
}

func (f *fakeLicensing) ListLicenses(_ context.Context, r *licensingv1.ListLicensesRequest) (*licensingv1.ListLicensesResponse, error) {
	f.last = r
	out := &licensingv1.ListLicensesResponse{Total: int32(f.n)}
	limits, _ := structpb.NewStruct(map[string]any{"users": 5.0})
	for i := range pageRows(f.n, r.GetLimit(), r.GetOffset()) {
		out.Licenses = append(out.Licenses, &licensingv1.LicenseRow{
			Key: "KEY-" + string(rune('A'+i%26)), Tier: "pro", ProductId: "app", IssuedTo: "<buyer>&co",
			IssuedAt: timestamppb.Now(), Status: "active", Limits: limits, Usage: map[string]float64{"users": 2},
		})
	}
	return out, nil
}

// pageRows is how many of n rows a list call's limit and offset (decimal strings, as the
// requests carry them; empty: none) leave, at most 1000.
func pageRows(n int, limit, offset string) int {
	off, _ := strconv.Atoi(offset)
	rows := min(max(n-off, 0), 1000)
	if l, err := strconv.Atoi(limit); err == nil {
		rows = min(rows, l)
	}
	return rows
}

// fakeReleases answers ListReleases with the page of n releases the request asks for.
type fakeReleases struct {
	releasesv1.UnimplementedReleasesServiceServer
	n int
}

func (f *fakeReleases) ListReleases(_ context.Context, r *releasesv1.ListReleasesRequest) (*releasesv1.ListReleasesResponse, error) {
	out := &releasesv1.ListReleasesResponse{Total: int32(f.n)}
	for i := range pageRows(f.n, r.GetLimit(), r.GetOffset()) {
		out.Releases = append(out.Releases, &releasesv1.ReleaseRow{Id: int32(i + 1), ProductId: "app", Version: "1.0." + strconv.Itoa(i),
			Channel: "stable", Platform: "linux-x64", ArtifactUrl: "https://example.test/app", Status: "published"})
	}
	return out, nil
}

func (f *fakeLicensing) GetStats(context.Context, *licensingv1.GetStatsRequest) (*licensingv1.GetStatsResponse, error) {
	return &licensingv1.GetStatsResponse{ActiveLicenses: int32(f.n)}, nil
}

// fakeBilling answers the status record of a tenant with no billing history, or status
// when set (on plan free when canceled, else pro), and the details' reason.
type fakeBilling struct {
	billingv1.UnimplementedBillingServiceServer
	status string
	reason billingv1.PastDueReason
}

func (f *fakeBilling) GetBillingStatus(context.Context, *billingv1.GetBillingStatusRequest) (*billingv1.GetBillingStatusResponse, error) {
	out := &billingv1.GetBillingStatusResponse{Status: "active", LicensesUsed: wrapperspb.Int32(3), LicenseLimit: wrapperspb.Int32(5)}
	if f.status != "" {
		out.Status, out.Plan = f.status, wrapperspb.String("pro")
		if f.status == "canceled" {
			out.Plan = wrapperspb.String("free")
		}
	}
	return out, nil
}

// fakeBillingDetails is BillingConsoleService over a fakeBilling.
type fakeBillingDetails struct {
	billingv1.UnimplementedBillingConsoleServiceServer
	billing *fakeBilling
}

func (f fakeBillingDetails) GetBillingDetails(ctx context.Context, _ *billingv1.GetBillingDetailsRequest) (*billingv1.GetBillingDetailsResponse, error) {
	st, err := f.billing.GetBillingStatus(ctx, nil)
	return &billingv1.GetBillingDetailsResponse{Status: st, PastDueReason: f.billing.reason}, err
}

type fakeSeats struct {
	activationsv1.UnimplementedActivationsConsoleServiceServer
}

func (fakeSeats) ListActivationsForKeys(_ context.Context, r *activationsv1.ListActivationsForKeysRequest) (*activationsv1.ListActivationsForKeysResponse, error) {
	if len(r.GetKeys()) > 1000 {
		return nil, status.Error(codes.InvalidArgument, "too many keys")
	}
	return &activationsv1.ListActivationsForKeysResponse{}, nil
}

func newTestHandler(t *testing.T, base string, lic *fakeLicensing) *Handler {
	return newTestHandlerBilling(t, base, lic, &fakeBilling{})
}

func newTestHandlerBilling(t *testing.T, base string, lic *fakeLicensing, billing *fakeBilling) *Handler {
	return newTestHandlerReleases(t, base, lic, billing, &fakeReleases{})
}

func newTestHandlerReleases(t *testing.T, base string, lic *fakeLicensing, billing *fakeBilling, rel *fakeReleases) *Handler {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	g := grpc.NewServer()
	accountsv1.RegisterConsoleAccountsServiceServer(g, fakeAccounts{})
	licensingv1.RegisterLicensingServiceServer(g, lic)
	activationsv1.RegisterActivationsConsoleServiceServer(g, fakeSeats{})
	billingv1.RegisterBillingServiceServer(g, billing)
	billingv1.RegisterBillingConsoleServiceServer(g, fakeBillingDetails{billing: billing})
	releasesv1.RegisterReleasesServiceServer(g, rel)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return lis.Dial() }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	h, err := New(Options{Conns: Conns{Licensing: conn, Activations: conn, Releases: conn, Billing: conn, Storefront: conn, Events: conn},
		MultiTenant: true, PublicBaseURL: base})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// signIn posts the sign-in form and returns the response; extra are more fields, as
// name, value pairs.
func signIn(t *testing.T, h http.Handler, key string, extra ...string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/console/login", nil))
	var csrf *http.Cookie
	for _, c := range rec.Result().Cookies() {
		if c.Name == loginCSRFCookie {
			csrf = c
		}
	}
	if csrf == nil {
		t.Fatal("the sign-in page sets no CSRF cookie")
	}
	form := url.Values{"csrf": {loginFormToken(t, rec.Body.String())}, "api_key": {key}}
	for i := 0; i+1 < len(extra); i += 2 {
		form.Set(extra[i], extra[i+1])
	}
	req := httptest.NewRequest("POST", "/console/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(csrf)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

var loginTokenField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func loginFormToken(t *testing.T, page string) string {
	t.Helper()
	m := loginTokenField.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("the sign-in page has no csrf field")
	}
	return m[1]
}

// The sign-in form's token is bound to the pre-login session (the kh_csrf cookie) by
// the server's key: the cookie's own value, a token of another pre-login session, a
// pair the client made up and the token under another server key are all refused.
func TestSignInCSRFTokenIsBoundToThePreLoginSession(t *testing.T) {
	h := newTestHandler(t, "http://localhost:8080", &fakeLicensing{})
	loginPage := func() (*http.Cookie, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/console/login", nil))
		for _, c := range rec.Result().Cookies() {
			if c.Name == loginCSRFCookie {
				return c, loginFormToken(t, rec.Body.String())
			}
		}
		t.Fatal("no pre-login cookie")
		return nil, ""
	}
	post := func(cookie *http.Cookie, token string) int {
		form := url.Values{"csrf": {token}, "api_key": {"good"}}
		req := httptest.NewRequest("POST", "/console/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(cookie)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	a, tokenA := loginPage()
	b, tokenB := loginPage()
	madeUp := &http.Cookie{Name: loginCSRFCookie, Value: strings.Repeat("x", 43)}
	other, err := New(Options{Conns: Conns{}, CSRFKey: "another server"})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		cookie *http.Cookie
		token  string
	}{
		"the cookie's own value":     {a, a.Value},
		"another pre-login's token":  {a, tokenB},
		"a made-up pair":             {madeUp, madeUp.Value},
		"another server key's token": {a, other.loginCSRF(a.Value)},
		"no token":                   {a, ""},
	} {
		if code := post(tc.cookie, tc.token); code != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, code)
		}
	}
	if code := post(a, tokenA); code != http.StatusSeeOther {
		t.Fatalf("the page's own token: %d, want 303", code)
	}
	if code := post(b, tokenB); code != http.StatusSeeOther {
		t.Fatalf("the other page's own token: %d, want 303", code)
	}
}

func TestCookiesAreSecureWhenThePublicURLIsHTTPS(t *testing.T) {
	for _, tc := range []struct {
		base   string
		secure bool
	}{{"https://keys.example.com", true}, {"http://localhost:8080", false}} {
		resp := signIn(t, newTestHandler(t, tc.base, &fakeLicensing{}), "good")
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("%s: sign-in answered %d", tc.base, resp.StatusCode)
		}
		var found bool
		for _, c := range resp.Cookies() {
			if c.Name != sessionCookie {
				continue
			}
			found = true
			if c.Secure != tc.secure || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode {
				t.Fatalf("%s: kh_session %+v, want Secure=%v HttpOnly SameSite=Lax", tc.base, c, tc.secure)
			}
		}
		if !found {
			t.Fatalf("%s: no kh_session cookie", tc.base)
		}
	}
}

func TestSignInFailureSaysInvalidCredentialsAndSetsNoSession(t *testing.T) {
	resp := signIn(t, newTestHandler(t, "http://localhost:8080", &fakeLicensing{}), "bad")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for _, c := range resp.Cookies() {
		if c.Name == sessionCookie {
			t.Fatal("a failed sign-in set a session")
		}
	}
}

func TestExportAsksForTheNewest1000AndLeavesOutNotes(t *testing.T) {
	lic := &fakeLicensing{n: 1500}
	h := newTestHandler(t, "http://localhost:8080", lic)
	h.opts.Now = func() time.Time { return time.Date(2026, 12, 1, 3, 4, 5, 123456789, time.UTC) }
	rec := getSignedIn(t, h, "/console/export")
	// To the microsecond, as the API's times (it had nine fractional digits).
	if !strings.HasPrefix(rec.Body.String(), "{\n  \"exported_at\": \"2026-12-01T03:04:05.123456Z\"") {
		t.Fatalf("exported_at: %.80s", rec.Body.String())
	}
	if lic.last.GetLimit() != "1000" || lic.last.GetOffset() != "0" || lic.last.GetStatus() != "" {
		t.Fatalf("export asked licensing for %v, want the first 1000 of every status", lic.last)
	}
	var f struct {
		Account  map[string]string `json:"account"`
		Licenses []json.RawMessage `json:"licenses"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &f); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rec.Body.String(), `"billing": {
    "status": "active",
    "plan": null,
    "cancelAtPeriodEnd": false,
    "currentPeriodEnd": null,
    "licensesUsed": 3,
    "licenseLimit": 5
  }`) {
		t.Fatalf("export billing is not the billing status record: %.400s", rec.Body.String())
	}
	if len(f.Licenses) != 1000 || f.Account["tenant_name"] != "Acme <&> Co" {
		t.Fatalf("%d licenses, account %v", len(f.Licenses), f.Account)
	}
	// JSON as JSON.stringify writes it: no \u003c for "<".
	if !strings.Contains(rec.Body.String(), `"issued_to": "<buyer>&co"`) {
		t.Fatalf("export escapes HTML characters: %.300s", rec.Body.String())
	}
	var first map[string]json.RawMessage
	_ = json.Unmarshal(f.Licenses[0], &first)
	want := []string{"key", "product_id", "tier", "status", "issued_to", "issued_at", "expires_at", "limits", "usage", "max_activations", "revoked_at", "activations"}
	if len(first) != len(want) {
		t.Fatalf("license fields %v, want exactly %v", first, want)
	}
	for _, k := range want {
		if _, ok := first[k]; !ok {
			t.Fatalf("license lacks %s", k)
		}
	}
}

// A tenant whose Pro subscription ended is told why issuing is refused (addendum §7).
func TestBillingPageSaysACanceledSubscriptionBlocksWrites(t *testing.T) {
	for status, want := range map[string]bool{"canceled": true, "": false} {
		h := newTestHandlerBilling(t, "http://localhost:8080", &fakeLicensing{}, &fakeBilling{status: status})
		rec := getSignedIn(t, h, "/console/billing")
		if got := strings.Contains(rec.Body.String(), "The Pro subscription has ended. Subscribe again"); got != want {
			t.Fatalf("status %q: ended notice shown %t, want %t", status, got, want)
		}
	}
}

// api.md's status says past_due for every subscription held that collects no money; the
// page says which case it is, and never that a payment failed when none did (a paused
// subscription: a trial that ended without a payment method).
func TestBillingPageSaysWhyASubscriptionIsPastDue(t *testing.T) {
	const failed = "The last payment failed."
	for reason, want := range map[billingv1.PastDueReason][2]string{
		billingv1.PastDueReason_PAST_DUE_REASON_PAYMENT_FAILED: {"past due", failed + " Update the payment method to keep issuing licenses."},
		billingv1.PastDueReason_PAST_DUE_REASON_UNPAID:         {"unpaid", "Stripe has stopped retrying them: the subscription is unpaid until its open invoice is paid."},
		billingv1.PastDueReason_PAST_DUE_REASON_PAUSED:         {"paused", "The Pro subscription is paused, and bills nothing until it is resumed"},
		billingv1.PastDueReason_PAST_DUE_REASON_UNSPECIFIED:    {"past due", "The Pro subscription is not active: a payment is outstanding or the subscription is paused."},
	} {
		h := newTestHandlerBilling(t, "http://localhost:8080", &fakeLicensing{}, &fakeBilling{status: "past_due", reason: reason})
		body := getSignedIn(t, h, "/console/billing").Body.String()
		if !strings.Contains(body, `<span class="badge expired">`+want[0]+`</span>`) || !strings.Contains(body, want[1]) {
			t.Errorf("%s: the page lacks the badge %q or %q:\n%s", reason, want[0], want[1], planCard(body))
		}
		if reason != billingv1.PastDueReason_PAST_DUE_REASON_PAYMENT_FAILED && strings.Contains(body, failed) {
			t.Errorf("%s: the page says a payment failed", reason)
		}
	}
	// Active: none of it.
	body := getSignedIn(t, newTestHandlerBilling(t, "http://localhost:8080", &fakeLicensing{}, &fakeBilling{}), "/console/billing").Body.String()
	if strings.Contains(body, "error-text") {
		t.Errorf("an active tenant's page shows an error: %s", planCard(body))
	}
}

// planCard is the Billing page's Plan card.
func planCard(body string) string {
	_, card, _ := strings.Cut(body, `id="plan-title"`)
	card, _, _ = strings.Cut(card, "</section>")
	return card
}

// Stripe Checkout sends the person back to the Billing page (payments.CheckoutURL), which
// says whether they paid or gave up: the plan itself changes when Stripe's event arrives.
func TestBillingPageSaysHowTheCheckoutEnded(t *testing.T) {
	h := newTestHandlerBilling(t, "http://localhost:8080", &fakeLicensing{}, &fakeBilling{})
	for notice, want := range map[string]string{
		"checkout-paid":     "Payment received. Pro starts when Stripe confirms the subscription",
		"checkout-canceled": "Checkout canceled: nothing was charged and the plan is unchanged.",
	} {
		if body := getSignedIn(t, h, "/console/billing?notice="+notice).Body.String(); !strings.Contains(body, want) {
			t.Fatalf("notice %s: the Billing page does not say %q", notice, want)
		}
	}
}

// getSignedIn GETs path with the fakes' session and requires a 200.
func getSignedIn(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest("GET", path, nil)
	req.AddCookie(&http.Cookie{Name: sessionCookie, Value: "khs_session"})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("GET %s: %d: %s", path, rec.Code, rec.Body)
	}
	return rec
}

func TestClipShortensLongCellValuesAndKeepsThemWholeForKeyboardAndScreenReader(t *testing.T) {
	if got := clip("cs_test_123"); got != "cs_test_123" {
		t.Fatalf("short value: %q", got)
	}
	long := "cs_" + strings.Repeat("é", 900) + `<"&>`
	full, short := template.HTMLEscapeString(long), "cs_"+strings.Repeat("é", maxCellRunes-4)+"…"
	got := string(clip(long))
	want := `<span class="clipped" tabindex="0" title="` + full + `"><span class="clip-short" aria-hidden="true">` + short +
		`</span><span class="clip-full">` + full + `</span></span>`
	if got != want {
		t.Fatalf("long value:\n got  %.300s\n want %.300s", got, want)
	}
	// In a link, the link is the focus stop.
	if got := string(clip(long, "link")); strings.Contains(got, "tabindex") || !strings.Contains(got, `<span class="clip-full">`+full) {
		t.Fatalf("long value in a link: %.300s", got)
	}
	if got := clip(strings.Repeat("a", maxCellRunes)); got != template.HTML(strings.Repeat("a", maxCellRunes)) {
		t.Fatalf("a value of exactly the cap is cut: %q", got)
	}
}

// A session that ends sends the person to sign in and, after, back to the console page
// they were on; next never leads anywhere else (an open redirect).
func TestSignInReturnsToTheConsolePageItWasOnAndNowhereElse(t *testing.T) {
	h := newTestHandler(t, "", &fakeLicensing{n: 1})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/console/licenses?page=2", nil))
	if loc := rec.Header().Get("Location"); loc != "/console/login?next=%2Fconsole%2Flicenses%3Fpage%3D2" {
		t.Fatalf("no session: sent to %q", loc)
	}
	// A form posted after the session ended returns to the page it was posted from.
	req := httptest.NewRequest("POST", "/console/licenses/K/notes", strings.NewReader("csrf=x&notes=y"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Referer", "http://example.com/console/licenses/K")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if loc := rec.Header().Get("Location"); loc != "/console/login?next=%2Fconsole%2Flicenses%2FK" {
		t.Fatalf("a form without a session: sent to %q", loc)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/console/login?next=%2Fconsole%2Flicenses%3Fpage%3D2", nil))
	if !strings.Contains(rec.Body.String(), `name="next" value="/console/licenses?page=2"`) {
		t.Fatal("the sign-in form does not carry next")
	}
	if loc := signIn(t, h, "good", "next", "/console/licenses?page=2").Header.Get("Location"); loc != "/console/licenses?page=2" {
		t.Fatalf("signed in with next: sent to %q", loc)
	}
	for _, foreign := range []string{"https://evil.example/console/", "//evil.example/console/", "/\\evil.example/", "/console/../..//evil.example",
		"http:/console/x", "/consolex", "javascript:alert(1)", "/console/login?next=https://evil.example", "/console/\\evil.example", ""} {
		if loc := signIn(t, h, "good", "next", foreign).Header.Get("Location"); loc != "/console/" {
			t.Errorf("next %q: sent to %q, want /console/", foreign, loc)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/console/login?"+url.Values{"next": {foreign}}.Encode(), nil))
		if strings.Contains(rec.Body.String(), `name="next"`) {
			t.Errorf("next %q is carried by the sign-in form", foreign)
		}
	}
}

// A list page after the last one (an old link, a list that shrank) says so and links to
// the last page, on every list paged by offset: the releases page counted "page 9 of 2"
// with a Previous link to another empty page, and "No releases yet." while there were.
func TestAListPagePastItsEndLinksToTheLastPage(t *testing.T) {
	h := newTestHandlerReleases(t, "http://localhost:8080", &fakeLicensing{n: 120}, &fakeBilling{}, &fakeReleases{n: 70})
	for _, tc := range []struct{ path, pages, last, total string }{
		{"/console/licenses?status=active&page=9", "3 pages", "/console/licenses?page=3&amp;status=active", "120 licenses"},
		{"/console/releases?channel=stable&page=9", "2 pages", "/console/releases?channel=stable&amp;page=2", "70 releases"},
	} {
		body := getSignedIn(t, h, tc.path).Body.String()
		want := `Page 9 is past the end of the list: it has ` + tc.pages + `. <a href="` + tc.last + `">Go to the last page</a>.`
		if !strings.Contains(body, want) {
			t.Errorf("%s: no %q in the page:\n%s", tc.path, want, body)
		}
		if !strings.Contains(body, tc.total+" · page 9 is past the last page") || strings.Contains(body, "page 9 of") || strings.Contains(body, `rel="prev"`) {
			t.Errorf("%s: the pager counts a page that is not there:\n%s", tc.path, body)
		}
		if strings.Contains(body, "yet.") {
			t.Errorf("%s: an empty page past the end says the list is empty", tc.path)
		}
	}
	// Within the list the pager counts the rows shown, with the filters in every link.
	body := getSignedIn(t, h, "/console/releases?channel=stable&page=2").Body.String()
	if !strings.Contains(body, "51–70 of 70 · page 2 of 2") || !strings.Contains(body, `href="/console/releases?channel=stable&amp;page=1"`) {
		t.Errorf("page 2 of the releases: %s", body)
	}
	// A filter that matches nothing is not an empty list.
	body = getSignedIn(t, newTestHandlerReleases(t, "http://localhost:8080", &fakeLicensing{}, &fakeBilling{}, &fakeReleases{}), "/console/releases?channel=beta").Body.String()
	if !strings.Contains(body, "No release matches.") || !strings.Contains(body, "0 releases · page 1 of 1") {
		t.Errorf("a filter matching no release: %s", body)
	}
}
