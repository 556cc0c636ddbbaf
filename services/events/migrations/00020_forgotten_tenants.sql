-- +goose Up
-- Deleted hosted tenants (tenant.deleted, pkg/tenantpurge), by the SHA-256 of their id:
-- an event of the tenant that reaches the log after its purge (another service's relay
-- was slower than the deletion) is dropped instead of stored, without the log keeping the
-- tenant's id. Rows go after a week, the event stream's age limit.
CREATE TABLE forgotten_tenants (
    tenant_sha256 text        PRIMARY KEY,
    forgotten_at  timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE forgotten_tenants;
