// Package webhook holds the parts of outbound webhooks that do not depend on where
// endpoints and deliveries are stored: the Keyhouse-Signature scheme (Stripe's, so
// receivers reuse their code), the guard that keeps deliveries away from private networks
// (checked on the address actually dialed, so DNS rebinding does not get through), one
// attempt of a delivery with its outcome in words a vendor can act on, and the retry
// schedule. The events service stores endpoints and deliveries and drives these.
package webhook
