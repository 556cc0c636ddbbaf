-- +goose Up
-- Deleted hosted tenants (tenant.deleted, pkg/tenantpurge), by the SHA-256 of their id:
-- the purge leaves one, and a write for a tenant that comes after its purge (a buyer
-- activating a license another service still holds, an internal caller naming it) finds
-- it and is refused, so no row of a deleted tenant is written after its purge. The id
-- itself is not kept.
CREATE TABLE forgotten_tenants (
    tenant_sha256 text        PRIMARY KEY,
    forgotten_at  timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE forgotten_tenants;
