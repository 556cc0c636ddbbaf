-- +goose Up
-- The outbox of this service's events (pkg/events.Emit writes a row in the transaction of
-- the change; pkg/natsx's relay publishes it): natsx.OutboxTableSQL, verbatim.
CREATE TABLE outbox (
    id          bigserial   PRIMARY KEY,
    tenant_id   text        NOT NULL,
    subject     text        NOT NULL,
    msg_id      text        NOT NULL UNIQUE,
    payload     bytea       NOT NULL,
    headers     jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    sent_at     timestamptz NULL,
    attempts    integer     NOT NULL DEFAULT 0,
    last_error  text        NULL,
    failures    integer     NOT NULL DEFAULT 0,
    retry_at    timestamptz NULL,
    parked_at   timestamptz NULL,
    park_reason text        NULL
);
CREATE INDEX outbox_pending ON outbox (id) WHERE sent_at IS NULL AND parked_at IS NULL;
CREATE INDEX outbox_pending_tenant ON outbox (tenant_id, id) WHERE sent_at IS NULL AND parked_at IS NULL;
CREATE INDEX outbox_sent_at ON outbox (sent_at) WHERE sent_at IS NOT NULL;
CREATE INDEX outbox_parked ON outbox (parked_at) WHERE parked_at IS NOT NULL;

-- +goose Down
DROP TABLE outbox;
