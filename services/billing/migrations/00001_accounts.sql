-- +goose Up
-- One row per installation: the stable watermark build-info reports.
CREATE TABLE installation (
    singleton    boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    watermark_id text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
INSERT INTO installation (watermark_id) VALUES (gen_random_uuid()::text);

CREATE TABLE tenants (
    tenant_id    text PRIMARY KEY,
    name         text NOT NULL,
    email        text NOT NULL,
    -- SHA-256 of the current API key; the plaintext is shown once and never stored.
    api_key_hash text NOT NULL UNIQUE,
    key_rotated_at timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE tenants;
DROP TABLE installation;
