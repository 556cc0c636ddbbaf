// Package fulfill is the storefront's fulfillment worker: a durable JetStream consumer
// that turns each recorded delivery into at most one license per checkout session and,
// eventually, one buyer email (DESIGN.md invariant 5).
//
// How "exactly one" holds, step by step:
//   - the callback records the event and its fulfillment message in one transaction
//     (outbox), and answers 200 only after the commit;
//   - the worker takes a per-session lock (a Postgres advisory lock, released by a crash
//     with its connection), so concurrent deliveries of one session, on any replica, act
//     one after another and each sees what the previous one recorded;
//   - the IssueLicense request is fixed at the first attempt and sent with the
//     Idempotency-Key "storefront:<checkout session id>": a retry after a crash between
//     the issue and recording its key gets the same key back from licensing, and a new
//     event id for the same session finds the key already recorded;
//   - the email goes out only while email_status is not sent/logged, and is recorded right
//     after the send; a failed send is retried with backoff by redelivery.
package fulfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/mail"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/keyhouse/keyhouse/pkg/seal"
	"github.com/keyhouse/keyhouse/pkg/signing"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"github.com/keyhouse/keyhouse/services/storefront/internal/store"
	"github.com/keyhouse/keyhouse/services/storefront/internal/stripeevent"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// The storefront's JetStream stream. Work-queue retention: a message (which carries the
// sealed buyer address) is deleted once the worker acknowledges it.
const (
	Stream   = "STOREFRONT"
	Subjects = "keyhouse.storefront.>"
	Subject  = "keyhouse.storefront.delivery.received"
	Durable  = "storefront-fulfillment"
)

// StreamConfig is the stream the service ensures at start.
var StreamConfig = jetstream.StreamConfig{
	Name:       Stream,
	Subjects:   []string{Subjects},
	Retention:  jetstream.WorkQueuePolicy,
	Storage:    jetstream.FileStorage,
	MaxAge:     7 * 24 * time.Hour,
	Duplicates: 10 * time.Minute,
}

// Job is a fulfillment message: the delivery to act on and the buyer's address, sealed.
type Job struct {
	DeliveryID int32  `json:"delivery_id"`
	Email      []byte `json:"email,omitempty"`
}

// Message builds the outbox message for a delivery.
func Message(d *store.Delivery, sealedEmail []byte) natsx.Message {
	payload, _ := json.Marshal(Job{DeliveryID: d.ID, Email: sealedEmail})
	return natsx.Message{
		TenantID: d.TenantID,
		Subject:  Subject,
		MsgID:    fmt.Sprintf("storefront-delivery:%d:%d", d.ID, d.Receipts),
		Payload:  payload,
	}
}

// IdempotencyKey is the Idempotency-Key of a checkout session's issuance.
func IdempotencyKey(sessionID string) string { return "storefront:" + sessionID }

// Licensing issues licenses.
type Licensing interface {
	IssueLicense(ctx context.Context, tenant, idemKey string, req *licensingv1.IssueLicenseRequest) (string, error)
	// SetExpiry and SetRevoked follow a purchase after the sale (lifecycle.go).
	SetExpiry(ctx context.Context, tenant, key string, expiresAt time.Time) error
	SetRevoked(ctx context.Context, tenant, key string, revoked bool) error
}

// Keys yields the installation keyring (buyer addresses are sealed under it).
type Keys interface {
	Keyring(ctx context.Context) (*signing.Keyring, error)
}

// PortalLinks yields the end-user portal link of a license for the buyer email
// (addendum §9): licensingclient.Client in production. The email leaves the link out
// while PortalLink returns "" (the tenant switched the portal off).
type PortalLinks interface {
	PortalLink(ctx context.Context, tenant, licenseKey string) (string, error)
}

// NoPortal is PortalLinks without a portal: no link (tests).
type NoPortal struct{}

// PortalLink implements PortalLinks.
func (NoPortal) PortalLink(context.Context, string, string) (string, error) { return "", nil }

// Worker processes fulfillment messages.
type Worker struct {
	Store     *store.Store
	Licensing Licensing
	Keys      Keys
	Mail      mail.Sender
	Portal    PortalLinks
	// Vendors tells the tenant about a paid purchase that got no license (nil: nobody).
	Vendors VendorContacts
	Log     *slog.Logger
	// Hosted (MULTI_TENANT) keeps the mail server's address and replies out of what a
	// tenant sees: its deliveries show what failed, the operator's log the detail.
	Hosted bool
	// MaxAttempts is how many deliveries of one message are tried before the outcome (or
	// the email status) stays failed; the provider's redelivery starts over.
	MaxAttempts int
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
}

// Defaults of Run.
const (
	DefaultMaxAttempts = 20
	retryFirst         = time.Second
	retryMax           = 5 * time.Minute
	ackWait            = 30 * time.Second
)

// Run consumes with concurrency parallel handlers until ctx is done.
func (w *Worker) Run(ctx context.Context, js jetstream.JetStream, concurrency int) error {
	errs := make(chan error, concurrency)
	for range max(concurrency, 1) {
		go func() {
			errs <- natsx.Consume(ctx, js, Stream, jetstream.ConsumerConfig{
				Durable:       Durable,
				FilterSubject: Subject,
				Description:   "storefront: issue licenses and email buyers",
				AckWait:       ackWait,
			}, w.Handle, w.Log, natsx.WithRetryDelay(retryFirst, retryMax), natsx.WithPullBatch(4))
		}()
	}
	var first error
	for range max(concurrency, 1) {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (w *Worker) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

// Handle is the natsx.Handler.
func (w *Worker) Handle(ctx context.Context, msg jetstream.Msg) error {
	// What fulfillment changes, here (deliveries) and in licensing (the license it
	// issues), is the storefront's doing.
	ctx = events.OutgoingActor(ctx, events.ActorStorefront)
	var job Job
	if err := json.Unmarshal(msg.Data(), &job); err != nil || job.DeliveryID == 0 {
		return natsx.Permanent(errors.New("malformed fulfillment message"))
	}
	tenant := msg.Headers().Get(natsx.HeaderTenant)
	if tenant == "" {
		return natsx.Permanent(errors.New("fulfillment message without tenant"))
	}
	last := true
	if meta, err := msg.Metadata(); err == nil {
		last = w.MaxAttempts > 0 && meta.NumDelivered >= uint64(w.MaxAttempts)
	}
	return w.process(ctx, tenant, job, last)
}

// process acts on one delivery. last says no retry follows: failures are recorded as
// final instead of returned.
func (w *Worker) process(ctx context.Context, tenant string, job Job, last bool) error {
	d, err := w.Store.Delivery(ctx, tenant, job.DeliveryID)
	if errors.Is(err, store.ErrNotFound) {
		return natsx.Permanent(fmt.Errorf("delivery %d not found", job.DeliveryID))
	}
	if err != nil {
		return err
	}
	email, err := w.openEmail(ctx, job.Email)
	if err != nil {
		return err
	}
	x, err := w.Store.LockSession(ctx, tenant, d.CheckoutSessionID)
	if err != nil {
		return err
	}
	defer x.Unlock()
	// Read again under the lock: another worker may have acted meanwhile.
	if d, err = x.Delivery(ctx, job.DeliveryID); err != nil {
		return err
	}
	f, err := x.Fulfillment(ctx)
	if err != nil {
		return err
	}
	log := w.Log.With("tenant_id", tenant, "delivery_id", d.ID, "event_type", d.EventType)
	if stripeevent.IsLifecycle(d.EventType) {
		return w.lifecycle(ctx, x, f, d, log)
	}

	switch {
	case d.EventType == stripeevent.AsyncPaymentFailed:
		if err := x.CloseAwaiting(ctx, store.OutcomeError, msgPaymentFailed); err != nil {
			return err
		}
		log.Info("delayed payment failed")
		return x.SetOutcome(ctx, d.ID, store.OutcomeError, f.LicenseKey, nil, ptr(msgPaymentFailed))
	case f.LicenseKey == nil && d.EventType == stripeevent.CheckoutCompleted && d.PaymentStatus == stripeevent.PaymentStatusUnpaid:
		log.Info("awaiting payment")
		return x.SetOutcome(ctx, d.ID, store.OutcomeAwaitingPayment, nil, nil, nil)
	}

	if f.LicenseKey == nil {
		done, err := w.issue(ctx, x, f, d, last, log)
		if done || err != nil {
			return err
		}
	} else {
		// A delivery's email_status is its purchase's email: a later delivery of a purchase
		// whose email went out says sent (or logged), and sends none.
		status := f.EmailStatus
		if status == nil {
			status = ptr(store.EmailPending)
		}
		if err := x.SetOutcome(ctx, d.ID, store.OutcomeIssued, f.LicenseKey, status, nil); err != nil {
			return err
		}
	}
	// Events about this purchase that came before its license (a renewal, a refund).
	if _, _, err := w.sync(ctx, x, f); err != nil {
		return err
	}
	if err := w.catchUp(ctx, x, f, log); err != nil {
		return err
	}
	if store.EmailDelivered(f.EmailStatus) {
		return nil
	}
	return w.email(ctx, x, f, d, email, last, log)
}

const msgPaymentFailed = "The delayed payment failed; no license was issued"

// issue issues the session's license, recording the outcome. done reports that the
// delivery ended without a license (no email to send).
func (w *Worker) issue(ctx context.Context, x *store.Session, f *store.Fulfillment, d *store.Delivery, last bool, log *slog.Logger) (done bool, err error) {
	req := &licensingv1.IssueLicenseRequest{}
	if f.Request != nil {
		if err := proto.Unmarshal(f.Request, req); err != nil {
			return true, err
		}
	} else {
		m, err := x.Match(ctx, d.PaymentLink, d.ServiceRef)
		if errors.Is(err, store.ErrNotFound) {
			log.Info("no mapping matches the checkout session")
			if err := x.SetOutcome(ctx, d.ID, store.OutcomeUnmapped, nil, nil, ptr(unmappedText(d))); err != nil {
				return true, err
			}
			w.alertVendor(ctx, x, d, store.OutcomeUnmapped, unmappedText(d), log)
			return true, nil
		}
		if err != nil {
			return true, err
		}
		req = w.request(m, d, &f.Terms)
		if err := x.SaveTerms(ctx, &f.Terms); err != nil {
			return true, err
		}
		raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
		if err != nil {
			return true, err
		}
		if err := x.SetRequest(ctx, raw); err != nil {
			return true, err
		}
		f.Request = raw
	}
	key, err := w.Licensing.IssueLicense(ctx, d.TenantID, IdempotencyKey(d.CheckoutSessionID), req)
	if err != nil {
		return true, w.issueFailed(ctx, x, d, err, last, log)
	}
	if err := x.Issued(ctx, d.ID, key); err != nil {
		return true, err
	}
	f.LicenseKey = &key
	log.Info("license issued", "product_id", req.GetProductId())
	return false, nil
}

// issueFailed records why licensing refused, or schedules a retry when it did not answer.
func (w *Worker) issueFailed(ctx context.Context, x *store.Session, d *store.Delivery, err error, last bool, log *slog.Logger) error {
	var ae *apierr.Error
	outcome := ""
	if errors.As(err, &ae) {
		switch {
		case ae.Code == codes.PermissionDenied && ae.Message == "License issuance quota exceeded":
			outcome = store.OutcomeOverQuota
		case ae.Code == codes.InvalidArgument:
			outcome = store.OutcomeInvalidInput
		case ae.Code != codes.Unavailable:
			outcome = store.OutcomeError
		}
	}
	if outcome != "" {
		// A refusal stored nothing under the Idempotency-Key: after the vendor fixes the
		// cause (plan, mapping) a redelivery builds the request afresh.
		if err := x.SetRequest(ctx, nil); err != nil {
			return err
		}
		log.Info("licensing refused the license", "outcome", outcome, "error", ae.Message)
		if err := x.SetOutcome(ctx, d.ID, outcome, nil, nil, ptr(ae.Message)); err != nil {
			return err
		}
		if outcome == store.OutcomeOverQuota {
			w.alertVendor(ctx, x, d, outcome, ae.Message, log)
		}
		return nil
	}
	if last {
		log.Error("licensing unavailable, giving up", "error", err.Error())
		return x.SetOutcome(ctx, d.ID, store.OutcomeError, nil, nil, ptr("Licensing service unavailable; redeliver the event to retry"))
	}
	if rerr := x.SetOutcome(ctx, d.ID, store.OutcomeProcessing, nil, nil, ptr("Licensing service unavailable, retrying")); rerr != nil {
		return rerr
	}
	return err
}

// request builds the IssueLicense request of a mapping. It is built once per session and
// stored, so the expiry counts from the first attempt and retries send the same bytes.
//
// It also copies the mapping's follow-up terms into t. A subscription's license expires
// at its paid period's end plus the grace once an invoice was seen, before that after
// duration_days (subscriptionFirstDays when the mapping has none): never perpetual.
func (w *Worker) request(m *store.Mapping, d *store.Delivery, t *store.Terms) *licensingv1.IssueLicenseRequest {
	limits := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for k, v := range m.Limits {
		limits.Fields[k] = structpb.NewNumberValue(v)
	}
	var det stripeevent.Detail
	_ = json.Unmarshal(d.Detail, &det) // recorded by the callback; absent on older rows
	t.Mode, t.GraceDays, t.OnRefund = ptr(det.Mode), ptr(m.RenewalGraceDays), ptr(m.OnRefund)
	days := m.DurationDays
	if det.Mode == stripeevent.ModeSubscription && days == nil {
		days = ptr(int32(subscriptionFirstDays))
	}
	expires := structpb.NewNullValue()
	switch {
	case det.Mode == stripeevent.ModeSubscription && t.PaidUntil != nil:
		at := t.PaidUntil.Add(time.Duration(m.RenewalGraceDays) * 24 * time.Hour)
		t.ExpiryApplied = &at
		expires = structpb.NewStringValue(at.UTC().Format(time.RFC3339))
	case days != nil:
		at := w.now().UTC().Truncate(time.Second).Add(time.Duration(*days) * 24 * time.Hour)
		expires = structpb.NewStringValue(at.Format(time.RFC3339))
	}
	issuedTo := d.CheckoutSessionID
	if d.Customer != nil && *d.Customer != "" {
		issuedTo = *d.Customer
	}
	return &licensingv1.IssueLicenseRequest{
		Tier: m.Tier, ProductId: m.ProductID, IssuedTo: issuedTo, ExpiresAt: expires, Limits: limits,
		MaxActivations: structpb.NewNumberValue(float64(m.Seats)),
		Notes: structpb.NewStringValue(fmt.Sprintf("Storefront: Stripe checkout session %s (mapping %d)",
			d.CheckoutSessionID, m.ID)),
	}
}

func unmappedText(d *store.Delivery) string {
	var parts []string
	if d.PaymentLink != nil {
		parts = append(parts, "payment link "+*d.PaymentLink)
	}
	if d.ServiceRef != nil {
		parts = append(parts, "service_ref "+*d.ServiceRef)
	}
	if len(parts) == 0 {
		return "The checkout session has neither a payment link nor metadata.service_ref"
	}
	return "No mapping for " + strings.Join(parts, " or ")
}

func (w *Worker) openEmail(ctx context.Context, sealed []byte) (string, error) {
	if len(sealed) == 0 {
		return "", nil
	}
	k, err := w.Keys.Keyring(ctx)
	if err != nil {
		return "", err
	}
	pt, err := seal.Open(k, seal.PurposeBuyerEmail, sealed)
	if err != nil {
		// Sealed under another keyring (rotated meanwhile): nothing to send to.
		return "", nil
	}
	return string(pt), nil
}

// Texts of a buyer email that was not sent because of the address.
const (
	msgNoBuyerEmail       = "The checkout session has no customer email; no email was sent"
	msgUnusableBuyerEmail = "The checkout session's customer email cannot be used (%s); no email was sent"
)

// email sends the buyer email once and records it.
func (w *Worker) email(ctx context.Context, x *store.Session, f *store.Fulfillment, d *store.Delivery, to string, last bool, log *slog.Logger) error {
	if to == "" {
		return x.SetOutcome(ctx, d.ID, store.OutcomeIssued, f.LicenseKey, ptr(store.EmailFailed), ptr(msgNoBuyerEmail))
	}
	if _, err := mail.ParseRecipient(to); err != nil {
		return x.SetOutcome(ctx, d.ID, store.OutcomeIssued, f.LicenseKey, ptr(store.EmailFailed),
			ptr(fmt.Sprintf(msgUnusableBuyerEmail, recipientReason(err))))
	}
	msg, err := w.buyerMessage(ctx, f, d.TenantID, to, log)
	if err != nil {
		if last {
			log.Error("buyer email not prepared, giving up", "error", err.Error())
			return x.SetOutcome(ctx, d.ID, store.OutcomeIssued, f.LicenseKey, ptr(store.EmailFailed), ptr(w.notPreparedText(err)))
		}
		return err
	}
	sendErr := w.Mail.Send(ctx, msg)
	if sendErr == nil {
		status := w.sentStatus()
		log.Info("buyer email done", "email_status", status)
		return x.EmailDone(ctx, status)
	}
	log.Warn("buyer email failed", "error", sendErr.Error(), "final", last)
	permanent := permanentSendError(sendErr)
	if err := x.SetOutcome(ctx, d.ID, store.OutcomeIssued, f.LicenseKey, ptr(store.EmailFailed),
		ptr(w.sendFailedText(sendErr, permanent, last))); err != nil {
		return err
	}
	if last || permanent {
		return nil
	}
	return sendErr
}

// sendFailedText is the delivery's error for a send that failed: why, and whether the
// worker tries again. Hosted, the tenant does not run the installation's mail server: a
// failure of the server is said without its address or its reply's text
// (mail.ServerError.Summary), which the operator's log line keeps. Self-hosted, the
// operator is the vendor and reads all of it.
func (w *Worker) sendFailedText(err error, permanent, last bool) string {
	why := err.Error()
	var server *mail.ServerError
	if w.Hosted && errors.As(err, &server) {
		why = server.Summary()
	}
	text := "Email delivery failed: " + truncate(why, 300)
	switch {
	case permanent: // the address itself: the texts storefront.md quotes
		return text
	case last:
		return text + "; redeliver the event to retry"
	default:
		return text + "; retrying"
	}
}

// notPreparedText is the delivery's error when the email could not be built (the tenant's
// mail settings or name unreadable: a database or service failure). Hosted, such an error
// can name the installation's internal addresses ("dial tcp 10.0.3.7:9090"), so the
// tenant reads only that it happened; the operator's log line has the cause.
func (w *Worker) notPreparedText(err error) string {
	why := truncate(err.Error(), 300)
	if w.Hosted {
		why = "the email could not be prepared (an internal error)"
	}
	return "Email not sent: " + why + "; redeliver the event to retry"
}

// permanentSendError is a refusal no retry changes: the address itself.
func permanentSendError(err error) bool {
	return errors.Is(err, mail.ErrInvalidRecipient) || errors.Is(err, mail.ErrSMTPUTF8Unsupported)
}

// recipientReason is why ParseRecipient refused an address, without the package prefix.
func recipientReason(err error) string {
	return strings.TrimPrefix(err.Error(), mail.ErrInvalidRecipient.Error()+": ")
}

// sentStatus is the email_status of a send that succeeded.
func (w *Worker) sentStatus() string {
	if w.Mail.Provider() == mail.ProviderLog {
		return store.EmailLogged
	}
	return store.EmailSent
}

// buyerMessage builds the purchase's buyer email to to: the license as issued, the
// portal link as it is now, and the tenant's presentation (its mail settings; hosted,
// what it set none of defaults to its own name and address, so a buyer's reply reaches
// the vendor and not the installation's operator).
func (w *Worker) buyerMessage(ctx context.Context, f *store.Fulfillment, tenant, to string, log *slog.Logger) (mail.Message, error) {
	req := &licensingv1.IssueLicenseRequest{}
	if err := proto.Unmarshal(f.Request, req); err != nil {
		return mail.Message{}, err
	}
	link, err := w.portal().PortalLink(ctx, tenant, *f.LicenseKey)
	if err != nil {
		log.Warn("portal link unavailable, emailing without it", "error", err.Error())
		link = ""
	}
	settings, err := w.SenderSettings(ctx, tenant)
	if err != nil {
		return mail.Message{}, err
	}
	subscription := f.Terms.Mode != nil && *f.Terms.Mode == stripeevent.ModeSubscription
	return BuyerEmail(to, *f.LicenseKey, req, subscription, link, settings), nil
}

// SenderSettings are the tenant's buyer-email settings as its emails go out: what it set,
// with its name and address where it set none (withTenantDefaults). The portal shows the
// same sender and reply-to, so the holder asks whoever the email answers to.
func (w *Worker) SenderSettings(ctx context.Context, tenant string) (store.MailSettings, error) {
	settings, err := w.Store.MailSettings(ctx, tenant)
	if err != nil {
		return store.MailSettings{}, err
	}
	return w.withTenantDefaults(ctx, tenant, settings)
}

// withTenantDefaults fills the sender name and reply-to the tenant left empty with the
// name and email it was created with (hosted; self-hosted there are none and
// EMAIL_FROM/EMAIL_REPLY_TO stay the defaults). A value a header could not carry safely
// is left out rather than failing the email.
func (w *Worker) withTenantDefaults(ctx context.Context, tenant string, s store.MailSettings) (store.MailSettings, error) {
	if w.Vendors == nil || s.SenderName != "" && s.ReplyTo != "" {
		return s, nil
	}
	c, err := w.Vendors.TenantContact(ctx, tenant)
	if err != nil {
		return s, fmt.Errorf("the tenant's name and address could not be read: %w", err)
	}
	if s.SenderName == "" && mail.ValidDisplayName(c.Name) {
		s.SenderName = c.Name
	}
	if s.ReplyTo == "" && mail.ValidAddress(c.Email) {
		s.ReplyTo = c.Email
	}
	return s, nil
}

func (w *Worker) portal() PortalLinks {
	if w.Portal == nil {
		return NoPortal{}
	}
	return w.Portal
}

// BuyerEmail is the email a buyer receives: the key, product, tier, expiry, seats and,
// when the portal is on, the link to manage the license; from the tenant's sender name,
// with its reply-to, naming the product by its display name (settings, "" the default).
// A subscription's expiry says that each paid renewal moves it.
func BuyerEmail(to, key string, req *licensingv1.IssueLicenseRequest, subscription bool, portalLink string, settings store.MailSettings) mail.Message {
	product := req.GetProductId()
	if settings.ProductName != "" {
		product = settings.ProductName
	}
	expires := "never (perpetual license)"
	if s := req.GetExpiresAt().GetStringValue(); s != "" {
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			expires = t.UTC().Format("2006-01-02 15:04 UTC")
			if subscription {
				expires += " (renews with your subscription: each paid renewal extends it)"
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Thank you for your purchase. Here is your license.\n\n")
	fmt.Fprintf(&b, "License key: %s\n", key)
	fmt.Fprintf(&b, "Product:     %s\n", product)
	fmt.Fprintf(&b, "Tier:        %s\n", req.GetTier())
	fmt.Fprintf(&b, "Expires:     %s\n", expires)
	if n := req.GetMaxActivations().GetNumberValue(); n > 0 {
		fmt.Fprintf(&b, "Seats:       %d\n", int(n))
	}
	if portalLink != "" {
		fmt.Fprintf(&b, "\nManage your license and devices: %s\n", portalLink)
	}
	help := "Reply to it if you need help."
	if settings.SenderName != "" {
		help = "Reply to it if you need help from " + settings.SenderName + "."
	}
	fmt.Fprintf(&b, "\nKeep this email: the key activates the software. %s\n", help)
	return mail.Message{
		To: to, Subject: "Your license key for " + product, Text: b.String(), Secrets: []string{key, portalLink},
		SenderName: settings.SenderName, ReplyTo: settings.ReplyTo,
	}
}

func ptr[T any](v T) *T { return &v }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
