package events

import (
	"maps"
	"time"

	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The constructors below build one event each, with its tenant, type and data; Emit adds
// the id, time and actor. Pointers mean "or null" (a perpetual expiry, unlimited seats, no
// license key, every metric).

// LicenseIssued is license.issued.
func LicenseIssued(tenant, key, productID, tier, issuedTo string, expiresAt *time.Time, maxActivations *int32, limits map[string]float64) *eventsv1.Event {
	return &eventsv1.Event{TenantId: tenant, Type: TypeLicenseIssued, Data: &eventsv1.Event_LicenseIssued{LicenseIssued: &eventsv1.LicenseIssued{
		Key: key, ProductId: productID, Tier: tier, IssuedTo: issuedTo, ExpiresAt: timeOrNull(expiresAt),
		MaxActivations: int32OrNull(maxActivations), Limits: maps.Clone(limits),
	}}}
}

// LicenseRevoked is license.revoked.
func LicenseRevoked(tenant, key, productID string) *eventsv1.Event {
	return &eventsv1.Event{TenantId: tenant, Type: TypeLicenseRevoked, Data: &eventsv1.Event_LicenseRevoked{LicenseRevoked: ref(key, productID)}}
}

// LicenseReactivated is license.reactivated.
func LicenseReactivated(tenant, key, productID string) *eventsv1.Event {
	return &eventsv1.Event{TenantId: tenant, Type: TypeLicenseReactivated, Data: &eventsv1.Event_LicenseReactivated{LicenseReactivated: ref(key, productID)}}
}

// LicenseDeleted is license.deleted.
func LicenseDeleted(tenant, key, productID string) *eventsv1.Event {
	return &eventsv1.Event{TenantId: tenant, Type: TypeLicenseDeleted, Data: &eventsv1.Event_LicenseDeleted{LicenseDeleted: ref(key, productID)}}
}

// LicenseTermsUpdated is license.terms_updated, with the terms after the change.
func LicenseTermsUpdated(tenant, key, productID string, expiresAt *time.Time, maxActivations *int32, limits map[string]float64) *eventsv1.Event {
	return &eventsv1.Event{TenantId: tenant, Type: TypeLicenseTermsUpdated, Data: &eventsv1.Event_LicenseTermsUpdated{LicenseTermsUpdated: &eventsv1.LicenseTermsUpdated{
		Key: key, ProductId: productID, ExpiresAt: timeOrNull(expiresAt), MaxActivations: int32OrNull(maxActivations), Limits: maps.Clone(limits),
	}}}
}

// LicenseNotesUpdated is license.notes_updated (the notes themselves are not in it).
func LicenseNotesUpdated(tenant, key, productID string) *eventsv1.Event {
	return &eventsv1.Event{TenantId: tenant, Type: TypeLicenseNotesUpdated, Data: &eventsv1.Event_LicenseNotesUpdated{LicenseNotesUpdated: ref(key, productID)}}
}

// SeatActivated is seat.activated.
func SeatActivated(tenant, key, productID, instanceID string) *eventsv1.Event {
	return &eventsv1.Event{TenantId: tenant, Type: TypeSeatActivated, Data: &eventsv1.Event_SeatActivated{SeatActivated: seat(key, productID, instanceID)}}
}

// SeatDeactivated is seat.deactivated; reason is one of the Reason constants.
func SeatDeactivated(tenant, key, productID, instanceID, reason string) *eventsv1.Event {
	return &eventsv1.Event{TenantId: tenant, Type: TypeSeatDeactivated, Data: &eventsv1.Event_SeatDeactivated{SeatDeactivated: &eventsv1.SeatDeactivated{
		Key: key, ProductId: productID, InstanceId: instanceID, Reason: reason,
	}}}
}

// SeatTokenReissued is seat.token_reissued (the token itself is never in an event).
func SeatTokenReissued(tenant, key, productID, instanceID string) *eventsv1.Event {
	return &eventsv1.Event{TenantId: tenant, Type: TypeSeatTokenReissued, Data: &eventsv1.Event_SeatTokenReissued{SeatTokenReissued: seat(key, productID, instanceID)}}
}

// UsageLimitReached is usage.limit_reached: the increment whose total is exactly limit.
func UsageLimitReached(tenant, key, productID, metric string, used, limit float64) *eventsv1.Event {
	return &eventsv1.Event{TenantId: tenant, Type: TypeUsageLimitReached, Data: &eventsv1.Event_UsageLimitReached{UsageLimitReached: &eventsv1.UsageLimitReached{
		Key: key, ProductId: productID, Metric: metric, Used: used, Limit: limit,
	}}}
}

// UsageReset is usage.reset; metric nil means every metric.
func UsageReset(tenant, key, productID string, metric *string) *eventsv1.Event {
	d := &eventsv1.UsageReset{Key: key, ProductId: productID}
	if metric != nil {
		d.Metric = wrapperspb.String(*metric)
	}
	return &eventsv1.Event{TenantId: tenant, Type: TypeUsageReset, Data: &eventsv1.Event_UsageReset{UsageReset: d}}
}

// ReleasePublished is release.published.
func ReleasePublished(tenant string, id int32, productID, version, channel, platform string) *eventsv1.Event {
	return &eventsv1.Event{TenantId: tenant, Type: TypeReleasePublished, Data: &eventsv1.Event_ReleasePublished{ReleasePublished: &eventsv1.Release{
		Id: id, ProductId: productID, Version: version, Channel: channel, Platform: platform,
	}}}
}

// ReleaseUnpublished is release.unpublished.
func ReleaseUnpublished(tenant string, id int32, productID, version, channel, platform string) *eventsv1.Event {
	return &eventsv1.Event{TenantId: tenant, Type: TypeReleaseUnpublished, Data: &eventsv1.Event_ReleaseUnpublished{ReleaseUnpublished: &eventsv1.Release{
		Id: id, ProductId: productID, Version: version, Channel: channel, Platform: platform,
	}}}
}

// StorefrontDelivery is storefront.delivery; licenseKey nil when none was issued.
func StorefrontDelivery(tenant, deliveryID, checkoutSessionID, outcome string, licenseKey *string) *eventsv1.Event {
	d := &eventsv1.StorefrontDelivery{DeliveryId: deliveryID, CheckoutSessionId: checkoutSessionID, Outcome: outcome}
	if licenseKey != nil {
		d.LicenseKey = wrapperspb.String(*licenseKey)
	}
	return &eventsv1.Event{TenantId: tenant, Type: TypeStorefrontDelivery, Data: &eventsv1.Event_StorefrontDelivery{StorefrontDelivery: d}}
}

// BillingPlanChanged is billing.plan_changed; plan nil is Free.
func BillingPlanChanged(tenant string, plan *string, status string) *eventsv1.Event {
	d := &eventsv1.BillingPlanChanged{Status: status}
	if plan != nil {
		d.Plan = wrapperspb.String(*plan)
	}
	return &eventsv1.Event{TenantId: tenant, Type: TypeBillingPlanChanged, Data: &eventsv1.Event_BillingPlanChanged{BillingPlanChanged: d}}
}

// APIKeyRotated is api_key.rotated (no data: the key never is in an event).
func APIKeyRotated(tenant string) *eventsv1.Event {
	return &eventsv1.Event{TenantId: tenant, Type: TypeAPIKeyRotated, Data: &eventsv1.Event_ApiKeyRotated{ApiKeyRotated: &eventsv1.Empty{}}}
}

// APIKeyCreated is api_key.created: an extra API key (POST /v1/api-keys), named, never shown.
func APIKeyCreated(tenant, id, name, scope string) *eventsv1.Event {
	return &eventsv1.Event{TenantId: tenant, Type: TypeAPIKeyCreated, Data: &eventsv1.Event_ApiKeyCreated{ApiKeyCreated: &eventsv1.ApiKeyRef{Id: id, Name: name, Scope: scope}}}
}

// APIKeyDeleted is api_key.deleted: an extra API key stopped working.
func APIKeyDeleted(tenant, id, name, scope string) *eventsv1.Event {
	return &eventsv1.Event{TenantId: tenant, Type: TypeAPIKeyDeleted, Data: &eventsv1.Event_ApiKeyDeleted{ApiKeyDeleted: &eventsv1.ApiKeyRef{Id: id, Name: name, Scope: scope}}}
}

// TenantDeleted is tenant.deleted: the operator deleted the tenant (internal; no data).
func TenantDeleted(tenant string) *eventsv1.Event {
	return &eventsv1.Event{TenantId: tenant, Type: TypeTenantDeleted, Data: &eventsv1.Event_TenantDeleted{TenantDeleted: &eventsv1.Empty{}}}
}

// LeaseKeyRotated is lease_key.rotated: kid signs from now on, retiringKid verifies until it
// retires; retiringKid nil when no key retired (the rotation made the tenant's first key).
func LeaseKeyRotated(tenant, kid string, retiringKid *string) *eventsv1.Event {
	d := &eventsv1.LeaseKeyRotated{Kid: kid}
	if retiringKid != nil {
		d.RetiringKid = wrapperspb.String(*retiringKid)
	}
	return &eventsv1.Event{TenantId: tenant, Type: TypeLeaseKeyRotated, Data: &eventsv1.Event_LeaseKeyRotated{LeaseKeyRotated: d}}
}

// WebhookEndpointDisabled is webhook_endpoint.disabled.
func WebhookEndpointDisabled(tenant, endpointID, reason string) *eventsv1.Event {
	return &eventsv1.Event{TenantId: tenant, Type: TypeWebhookEndpointDisabled, Data: &eventsv1.Event_WebhookEndpointDisabled{WebhookEndpointDisabled: &eventsv1.WebhookEndpointDisabled{
		EndpointId: endpointID, Reason: reason,
	}}}
}

// Ping is ping (a webhook endpoint's test event).
func Ping(tenant string) *eventsv1.Event {
	return &eventsv1.Event{TenantId: tenant, Type: TypePing, Data: &eventsv1.Event_Ping{Ping: &eventsv1.Empty{}}}
}

func ref(key, productID string) *eventsv1.LicenseRef {
	return &eventsv1.LicenseRef{Key: key, ProductId: productID}
}

func seat(key, productID, instanceID string) *eventsv1.Seat {
	return &eventsv1.Seat{Key: key, ProductId: productID, InstanceId: instanceID}
}

func timeOrNull(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}

func int32OrNull(n *int32) *wrapperspb.Int32Value {
	if n == nil {
		return nil
	}
	return wrapperspb.Int32(*n)
}
