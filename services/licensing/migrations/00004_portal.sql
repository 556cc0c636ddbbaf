-- +goose Up
-- End-user portal links (addendum §9). A license has at most one live link; its token is
-- derived from the HMAC secret and nonce (so the console can show the same link again)
-- and only the token's SHA-256 is stored. The link goes with its license.
CREATE TABLE portal_links (
    key_hash   bytea       PRIMARY KEY REFERENCES licenses (key_hash) ON DELETE CASCADE,
    tenant_id  text        NOT NULL,
    nonce      bytea       NOT NULL,
    token_hash bytea       NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The tenant's portal switch; no row = on.
CREATE TABLE portal_settings (
    tenant_id  text        PRIMARY KEY,
    enabled    boolean     NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE portal_settings;
DROP TABLE portal_links;
