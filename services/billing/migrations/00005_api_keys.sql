-- +goose Up
-- A tenant's extra API keys (POST /v1/api-keys), besides the one rotate-api-key rotates
-- (tenants.api_key_hash). Only the SHA-256 is stored; the prefix ("kh_" and 8 more) tells
-- keys apart in a list. tenant_id has no foreign key: self-hosted, the keys belong to the
-- implicit tenant "default", which has no row in tenants.
CREATE TABLE api_keys (
    id           text        PRIMARY KEY,
    tenant_id    text        NOT NULL,
    name         text        NOT NULL,
    prefix       text        NOT NULL,
    scope        text        NOT NULL CHECK (scope IN ('full', 'read')),
    key_hash     text        NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- Moved forward at most once a minute (the lookup writes only when it is older).
    last_used_at timestamptz,
    expires_at   timestamptz
);
CREATE INDEX api_keys_by_tenant ON api_keys (tenant_id, created_at, id);

-- Set while the operator has the tenant suspended: its credentials answer 403.
ALTER TABLE tenants ADD COLUMN suspended_at timestamptz;

-- +goose Down
ALTER TABLE tenants DROP COLUMN suspended_at;
DROP TABLE api_keys;
