-- +goose Up
-- Outbound webhooks: the endpoints a tenant registered and one delivery per (event,
-- endpoint), with its attempts. Times are written by the service's clock, not now(), so
-- the retry schedule and the 72 h auto-disable can be tested with an injected clock.
CREATE TABLE webhook_endpoints (
    tenant_id             text        NOT NULL,
    id                    text        NOT NULL,
    url                   text        NOT NULL,
    events                text[]      NOT NULL,
    description           text,
    enabled               boolean     NOT NULL DEFAULT true,
    disabled_reason       text,
    -- The whsec_ secrets, sealed (pkg/seal); the old one signs too until it expires.
    secret                bytea       NOT NULL,
    old_secret            bytea,
    old_secret_expires_at timestamptz,
    -- The first failed attempt since the last success: 72 h later the endpoint is disabled.
    failing_since         timestamptz,
    created_at            timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, id)
);

CREATE TABLE webhook_deliveries (
    tenant_id       text        NOT NULL,
    id              text        NOT NULL,
    seq             bigserial   NOT NULL,
    endpoint_id     text        NOT NULL,
    event_id        text        NOT NULL,
    event_type      text        NOT NULL,
    -- The exact envelope bytes POSTed (a ping is in no log, so the body lives here).
    body            bytea       NOT NULL,
    -- A redelivery is a new delivery of an event the endpoint already had.
    redelivery      boolean     NOT NULL DEFAULT false,
    status          text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'succeeded', 'failed')),
    attempts        jsonb       NOT NULL DEFAULT '[]',
    -- When the next attempt is due. A claimed delivery's is pushed a lease ahead, so one
    -- whose process died mid-attempt is due again when the lease runs out.
    next_attempt_at timestamptz,
    created_at      timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, id),
    FOREIGN KEY (tenant_id, endpoint_id) REFERENCES webhook_endpoints (tenant_id, id) ON DELETE CASCADE
);

-- Each endpoint's due deliveries, oldest first: the worker takes a few per endpoint.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (tenant_id, endpoint_id, next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_by_endpoint ON webhook_deliveries (tenant_id, endpoint_id, seq DESC);
CREATE INDEX webhook_deliveries_by_event ON webhook_deliveries (tenant_id, event_id);
-- One fan-out delivery per event and endpoint, however often the event arrives.
CREATE UNIQUE INDEX webhook_deliveries_once ON webhook_deliveries (tenant_id, endpoint_id, event_id) WHERE NOT redelivery;

-- +goose Down
DROP TABLE webhook_deliveries;
DROP TABLE webhook_endpoints;
