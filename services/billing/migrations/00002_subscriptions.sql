-- +goose Up
-- Hosted billing (docs/billing.md). A tenant's plan is derived from its Stripe
-- subscriptions (services/billing/internal/plan); a tenant without any has no billing
-- history: Free, active.

-- The Stripe customer each tenant checked out as (checkout.session.completed), so later
-- events that name only the customer find the tenant.
CREATE TABLE stripe_customers (
    customer_id text PRIMARY KEY,
    tenant_id   text NOT NULL REFERENCES tenants (tenant_id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX stripe_customers_tenant ON stripe_customers (tenant_id);

-- One row per Stripe subscription, as its events left it (plan.Sub). Each part moves only
-- forward, by the (event time, rank) order of the event that set it.
CREATE TABLE subscriptions (
    subscription_id      text PRIMARY KEY,
    tenant_id            text NOT NULL REFERENCES tenants (tenant_id) ON DELETE CASCADE,
    -- The latest snapshot (customer.subscription.* or a paid checkout).
    snapshot_plan        text CHECK (snapshot_plan IN ('free', 'pro')),
    snapshot_status      text CHECK (snapshot_status IN ('active', 'past_due', 'canceled')),
    cancel_at_period_end boolean NOT NULL DEFAULT false,
    current_period_end   timestamptz,
    snapshot_at          timestamptz,
    snapshot_rank        int,
    -- The latest invoice.payment_failed.
    failed_at            timestamptz,
    failed_rank          int,
    ended                boolean NOT NULL DEFAULT false,
    updated_at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX subscriptions_tenant ON subscriptions (tenant_id);

-- Every handled Stripe event by id: a replay is a no-op. An event that names neither a
-- known customer nor a tenant is parked (payload kept, tenant_id NULL) until the
-- checkout.session.completed that ties its customer to a tenant arrives.
CREATE TABLE stripe_events (
    event_id    text PRIMARY KEY,
    type        text NOT NULL,
    created     timestamptz NOT NULL,
    customer_id text,
    tenant_id   text,
    payload     bytea,
    received_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX stripe_events_parked ON stripe_events (customer_id) WHERE payload IS NOT NULL;

-- +goose Down
DROP TABLE stripe_events;
DROP TABLE subscriptions;
DROP TABLE stripe_customers;
