-- +goose Up
-- Idempotency-Key on POST /v1/webhook-endpoints (addendum §8): pkg/idempotency's TableSQL,
-- verbatim. The answers stored show a secret once, so they are stored sealed (DoSealed).
CREATE TABLE idempotency_keys (
    tenant_id    text        NOT NULL,
    idem_key     text        NOT NULL,
    request_hash bytea       NOT NULL,
    response     bytea,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, idem_key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);

-- +goose Down
DROP TABLE idempotency_keys;
