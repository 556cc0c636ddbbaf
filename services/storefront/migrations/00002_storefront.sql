-- +goose Up
-- Webhooks the payment provider calls. The signing secret is sealed (AES-256-GCM under
-- the installation keyring) and never leaves the service. One active webhook per provider
-- per tenant: the partial unique index holds it under concurrent saves.
CREATE TABLE webhooks (
    id            text        PRIMARY KEY,
    tenant_id     text        NOT NULL,
    provider      text        NOT NULL,
    state         text        NOT NULL CHECK (state IN ('pending', 'active', 'disabled')),
    secret_sealed bytea       NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhooks_tenant ON webhooks (tenant_id, created_at);
CREATE UNIQUE INDEX webhooks_one_active ON webhooks (tenant_id, provider) WHERE state = 'active';

-- Mappings: a payment link or a metadata.service_ref → license terms. Never edited.
CREATE TABLE mappings (
    id            serial      PRIMARY KEY,
    tenant_id     text        NOT NULL,
    payment_link  text        NULL,
    service_ref   text        NULL,
    product_id    text        NOT NULL,
    tier          text        NOT NULL,
    seats         integer     NOT NULL CHECK (seats > 0),
    limits        jsonb       NOT NULL DEFAULT '{}'::jsonb,
    duration_days integer     NULL CHECK (duration_days > 0),
    created_at    timestamptz NOT NULL DEFAULT now(),
    CHECK ((payment_link IS NULL) <> (service_ref IS NULL))
);
CREATE UNIQUE INDEX mappings_payment_link ON mappings (tenant_id, payment_link) WHERE payment_link IS NOT NULL;
CREATE UNIQUE INDEX mappings_service_ref ON mappings (tenant_id, service_ref) WHERE service_ref IS NOT NULL;

-- One row per provider event received (a redelivery of the same event id counts in
-- receipts). The checkout session's fields fulfillment needs are copied here, except the
-- buyer's email address, which is never stored: it travels sealed in the event message.
CREATE TABLE deliveries (
    id                  serial      PRIMARY KEY,
    tenant_id           text        NOT NULL,
    webhook_id          text        NOT NULL,
    event_id            text        NOT NULL,
    event_type          text        NOT NULL,
    checkout_session_id text        NOT NULL,
    payment_link        text        NULL,
    service_ref         text        NULL,
    payment_status      text        NOT NULL,
    customer            text        NULL,
    session_created     timestamptz NOT NULL,
    outcome             text        NOT NULL,
    email_status        text        NULL,
    license_key         text        NULL,
    error               text        NULL,
    receipts            integer     NOT NULL DEFAULT 1,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, event_id)
);
CREATE INDEX deliveries_list ON deliveries (tenant_id, id DESC);
CREATE INDEX deliveries_outcome ON deliveries (tenant_id, outcome, id DESC);
CREATE INDEX deliveries_session ON deliveries (tenant_id, checkout_session_id);

-- One row per checkout session: what was issued for it and whether its email went out.
-- request is the IssueLicense request fixed at the first attempt, so every retry sends
-- the same request under the same Idempotency-Key.
CREATE TABLE fulfillments (
    tenant_id           text        NOT NULL,
    checkout_session_id text        NOT NULL,
    request             bytea       NULL,
    license_key         text        NULL,
    email_status        text        NULL,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, checkout_session_id)
);

CREATE TABLE outbox (
    id         bigserial   PRIMARY KEY,
    tenant_id  text        NOT NULL,
    subject    text        NOT NULL,
    msg_id     text        NOT NULL UNIQUE,
    payload    bytea       NOT NULL,
    headers    jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    sent_at    timestamptz NULL,
    attempts   integer     NOT NULL DEFAULT 0,
    last_error text        NULL
);
CREATE INDEX outbox_unsent ON outbox (id) WHERE sent_at IS NULL;
CREATE INDEX outbox_sent_at ON outbox (sent_at) WHERE sent_at IS NOT NULL;

-- +goose Down
DROP TABLE outbox;
DROP TABLE fulfillments;
DROP TABLE deliveries;
DROP TABLE mappings;
DROP TABLE webhooks;
