-- +goose Up
-- Licenses deleted lately, kept as long as their license.deleted event (the LICENSING
-- stream's MaxAge, 7 days): until activations has purged a deleted license's seats (it may
-- be down, or NATS may be), the tenant-wide seat readers (admin/stats,
-- recent-activations) leave them out by these keys.
CREATE TABLE deleted_licenses (
    tenant_id  text        NOT NULL,
    key        text        NOT NULL,
    deleted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, key)
);
CREATE INDEX deleted_licenses_deleted_at ON deleted_licenses (tenant_id, deleted_at);

-- +goose Down
DROP TABLE deleted_licenses;
