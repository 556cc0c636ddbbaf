-- +goose Up
-- A license is looked up by the SHA-256 of its key, never by the key itself: the index
-- probe then compares hashes, so how long a lookup takes says nothing about how much of a
-- guessed key was right.
CREATE TABLE licenses (
    key_hash        bytea       PRIMARY KEY,
    key             text        NOT NULL,
    tenant_id       text        NOT NULL,
    tier            text        NOT NULL,
    product_id      text        NOT NULL,
    issued_to       text        NOT NULL,
    issued_at       timestamptz NOT NULL DEFAULT now(),
    -- NULL: perpetual.
    expires_at      timestamptz,
    status          text        NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'revoked')),
    limits          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    -- NULL: unlimited activations.
    max_activations integer     CHECK (max_activations > 0),
    revoked_at      timestamptz,
    notes           text
);
-- list-licenses pages newest first, optionally by product or status; the quota counts
-- a tenant's active licenses.
CREATE INDEX licenses_by_tenant ON licenses (tenant_id, issued_at DESC, key);
CREATE INDEX licenses_by_product ON licenses (tenant_id, product_id, issued_at DESC, key);
CREATE INDEX licenses_by_status ON licenses (tenant_id, status, issued_at DESC, key);

-- Hosted product ownership: the first tenant to issue or register under a product_id
-- owns it. product_key is the product_id trimmed and lower-cased, the way check-update
-- compares product ids, so "App" and " app" cannot belong to two tenants.
CREATE TABLE products (
    product_key text        PRIMARY KEY,
    product_id  text        NOT NULL,
    tenant_id   text        NOT NULL,
    claimed_at  timestamptz NOT NULL DEFAULT now()
);

-- Idempotency-Key (addendum §8): pkg/idempotency's TableSQL.
CREATE TABLE idempotency_keys (
    tenant_id    text        NOT NULL,
    idem_key     text        NOT NULL,
    request_hash bytea       NOT NULL,
    response     bytea,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, idem_key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);

-- The signing keyring generated on first start when the operator supplies none
-- (SIGNING_KEYS_FILE). One row, written once: every replica reads the same keys.
CREATE TABLE signing_keyring (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    document   bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
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
DROP TABLE signing_keyring;
DROP TABLE idempotency_keys;
DROP TABLE products;
DROP TABLE licenses;
