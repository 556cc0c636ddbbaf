-- +goose Up
-- Console credentials (addendum §9). A session is a tenant credential like the API key:
-- only its SHA-256 is stored; it ends after 12 h without use, on logout, and when the
-- tenant's API key is rotated (same transaction). tenant_id has no foreign key: the
-- self-hosted tenant "default" has no row in tenants.
CREATE TABLE console_sessions (
    token_hash   text        PRIMARY KEY,
    tenant_id    text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX console_sessions_by_tenant ON console_sessions (tenant_id);
CREATE INDEX console_sessions_by_last_seen ON console_sessions (last_seen_at);

-- Hosted console password: an argon2id PHC string; rotate-api-key leaves it alone.
ALTER TABLE tenants ADD COLUMN password_hash text;
CREATE INDEX tenants_by_email ON tenants (lower(email));

-- +goose Down
DROP INDEX tenants_by_email;
ALTER TABLE tenants DROP COLUMN password_hash;
DROP TABLE console_sessions;
