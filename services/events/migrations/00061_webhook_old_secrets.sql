-- +goose Up
-- Every secret a roll superseded while promising it an overlap keeps signing until its own
-- promised end (docs/webhooks.md, "Verifying the signature"): one row each, sealed as the
-- current secret is (pkg/seal). webhook_endpoints.old_secret held one, so a second roll
-- within the overlap ended the first roll's secret early.
--
-- Migrations only add (docs/operations.md, "Upgrades and rollbacks"): old_secret and
-- old_secret_expires_at stay, and a roll still writes them (the secret it superseded, or
-- the newest one still signing), so a process of the release before, during a rolling
-- upgrade or after a rollback, signs with that one as it always did; this release signs
-- with the rows here and with old_secret too, so a roll that such a process made is
-- honoured as well.
CREATE TABLE webhook_endpoint_old_secrets (
    tenant_id     text        NOT NULL,
    endpoint_id   text        NOT NULL,
    secret        bytea       NOT NULL,
    -- The roll that superseded it, and the end that roll promised.
    superseded_at timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL,
    FOREIGN KEY (tenant_id, endpoint_id) REFERENCES webhook_endpoints (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX webhook_endpoint_old_secrets_by_endpoint ON webhook_endpoint_old_secrets (tenant_id, endpoint_id, expires_at);
-- The old secret of a roll made before this migration is honoured here too.
INSERT INTO webhook_endpoint_old_secrets (tenant_id, endpoint_id, secret, superseded_at, expires_at)
SELECT tenant_id, id, old_secret, now(), old_secret_expires_at FROM webhook_endpoints
WHERE old_secret IS NOT NULL AND old_secret_expires_at > now();

-- +goose Down
DROP TABLE webhook_endpoint_old_secrets;
