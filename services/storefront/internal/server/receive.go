package server

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/keyhouse/keyhouse/pkg/seal"
	"github.com/keyhouse/keyhouse/pkg/signing"
	"github.com/keyhouse/keyhouse/pkg/stripeinput"
	storefrontv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/storefront/v1"
	"github.com/keyhouse/keyhouse/services/storefront/internal/fulfill"
	"github.com/keyhouse/keyhouse/services/storefront/internal/store"
	"github.com/keyhouse/keyhouse/services/storefront/internal/stripeevent"
)

// ReceiveEvent is the provider callback: verify, record durably with its fulfillment
// message (one transaction), answer. Fulfillment happens in the worker.
func (s *Server) ReceiveEvent(ctx context.Context, req *storefrontv1.ReceiveEventRequest) (*storefrontv1.ReceiveEventResponse, error) {
	if !validWebhookID(req.GetWebhookId()) {
		return nil, errWebhookNotFound
	}
	w, err := s.store.WebhookByID(ctx, req.GetWebhookId())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, errWebhookNotFound
	case err != nil:
		return nil, err
	case w.State == store.StateDisabled:
		return nil, errWebhookNotFound
	case w.State != store.StateActive:
		return nil, errWebhookNotActive
	}
	k, err := s.licensing.Keyring(ctx)
	if err != nil {
		return nil, err
	}
	secret, err := openSecret(k, w.SecretSealed)
	if err != nil {
		return nil, err
	}
	ev, err := stripeevent.Parse(req.GetPayload(), req.GetSignature(), secret)
	var refused *stripeinput.Error
	switch {
	case errors.Is(err, stripeevent.ErrSignature):
		return nil, errInvalidSignature
	case errors.As(err, &refused):
		// Signed, so the sender is who it says: tell it what is wrong (nothing is recorded).
		return nil, apierr.Invalid("Invalid payload: %s", refused.Reason)
	case err != nil:
		return nil, errInvalidPayload
	}
	if ev.Session == nil {
		// Not a checkout: a lifecycle event (held until its purchase is known), or an event
		// the storefront does not act on, recorded as ignored with why (ev.Ignored) so the
		// provider stops sending it.
		return s.recordFollowUp(ctx, w, ev)
	}
	detail, err := json.Marshal(stripeevent.Detail{Mode: ev.Session.Mode})
	if err != nil {
		return nil, err
	}
	d := &store.Delivery{
		TenantID: w.TenantID, WebhookID: w.ID, EventID: ev.ID, EventType: ev.Type,
		CheckoutSessionID: ev.Session.ID, PaymentLink: nonEmpty(ev.Session.PaymentLink),
		ServiceRef: nonEmpty(ev.Session.ServiceRef), PaymentStatus: ev.Session.PaymentStatus,
		Customer: nonEmpty(ev.Session.Customer), SessionCreated: ev.Session.Created,
		Outcome: store.OutcomeProcessing, Refs: ev.Session.Refs, Detail: detail,
	}
	var sealedEmail []byte
	// Sealed as the provider sent it: the worker takes the address out of it or records
	// why it cannot be mailed (mail.ParseRecipient).
	if email := ev.Session.Email; strings.TrimSpace(email) != "" {
		if sealedEmail, err = seal.Seal(k, seal.PurposeBuyerEmail, []byte(email)); err != nil {
			return nil, err
		}
	}
	rec, err := s.store.RecordEvent(ctx, d, func(d *store.Delivery) natsx.Message {
		return fulfill.Message(d, sealedEmail)
	})
	if err != nil {
		return nil, err
	}
	if rec.Enqueued {
		s.notify()
	}
	return &storefrontv1.ReceiveEventResponse{Received: true}, nil
}

// recordFollowUp records an event that is not a checkout. A lifecycle event goes to the
// worker once its purchase is known (store.RecordEvent links or holds it).
func (s *Server) recordFollowUp(ctx context.Context, w *store.Webhook, ev *stripeevent.Event) (*storefrontv1.ReceiveEventResponse, error) {
	d := &store.Delivery{
		TenantID: w.TenantID, WebhookID: w.ID, EventID: ev.ID, EventType: ev.Type,
		SessionCreated: ev.Created, Outcome: store.OutcomeIgnored, Error: ptr(ev.Ignored),
	}
	if ev.Lifecycle != nil {
		detail, err := json.Marshal(ev.Lifecycle.Detail)
		if err != nil {
			return nil, err
		}
		d.Outcome, d.Error, d.Refs, d.Detail = store.OutcomeProcessing, nil, ev.Lifecycle.Refs, detail
	}
	rec, err := s.store.RecordEvent(ctx, d, func(d *store.Delivery) natsx.Message {
		return fulfill.Message(d, nil)
	})
	if err != nil {
		return nil, err
	}
	if rec.Enqueued {
		s.notify()
	}
	return &storefrontv1.ReceiveEventResponse{Received: true}, nil
}

func ptr[T any](v T) *T { return &v }

var errInvalidPayload = apierr.Invalid("Invalid payload: not a Stripe event")

var errSecretSealedUnderOldKeyring = apierr.Unavailable("Webhook signing secret must be saved again: the signing keyring was replaced since it was saved, retry")

func nonEmpty(s string) *string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	return &s
}

func sealSecret(k *signing.Keyring, secret string) ([]byte, error) {
	return seal.Seal(k, seal.PurposeWebhookSecret, []byte(secret))
}

func openSecret(k *signing.Keyring, sealed []byte) (string, error) {
	pt, err := seal.Open(k, seal.PurposeWebhookSecret, sealed)
	if err != nil {
		// The keyring was replaced since the secret was saved (docs/licensing.md,
		// "Rotating"): no delivery can be verified until the vendor saves the secret again.
		// A 503 that says so, not a 500: the provider keeps retrying (Stripe for three
		// days), and its retries are accepted once the secret is saved.
		return "", errSecretSealedUnderOldKeyring
	}
	return string(pt), nil
}
