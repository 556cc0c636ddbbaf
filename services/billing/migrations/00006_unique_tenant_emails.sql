-- +goose Up
-- A tenant's email is unique, compared case-insensitively: password sign-in finds one
-- tenant by it. Duplicates made before this migration are resolved, not refused: the
-- oldest tenant keeps the address; every later one gets it plus-addressed with its tenant
-- id ("ops@acme.test" -> "ops+t_abc…@acme.test", still delivered by most mail systems),
-- and each rename is recorded in tenant_email_renames so the operator can tell the
-- tenant (docs/operations.md, "Tenant emails").
CREATE TABLE tenant_email_renames (
    tenant_id  text        PRIMARY KEY,
    old_email  text        NOT NULL,
    new_email  text        NOT NULL,
    renamed_at timestamptz NOT NULL DEFAULT now()
);

WITH ranked AS (
    SELECT tenant_id, email,
           row_number() OVER (PARTITION BY lower(email) ORDER BY created_at, tenant_id) AS n
    FROM tenants
), renamed AS (
    UPDATE tenants t
    SET email = regexp_replace(r.email, '@([^@]*)$', '+' || t.tenant_id || '@\1')
    FROM ranked r
    WHERE r.tenant_id = t.tenant_id AND r.n > 1
    RETURNING t.tenant_id, r.email AS old_email, t.email AS new_email
)
INSERT INTO tenant_email_renames (tenant_id, old_email, new_email)
SELECT tenant_id, old_email, new_email FROM renamed;

DROP INDEX tenants_by_email;
CREATE UNIQUE INDEX tenants_email_unique ON tenants (lower(email));

-- +goose Down
DROP INDEX tenants_email_unique;
CREATE INDEX tenants_by_email ON tenants (lower(email));
DROP TABLE tenant_email_renames;
