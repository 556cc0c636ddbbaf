-- +goose Up
-- The tenant's license counts (admin/stats, the console's overview, list-licenses' total
-- with no filter or only a status), kept as they change instead of counted on every read:
-- counting 200,000 licenses cost Postgres 50-100 ms of CPU per overview page.
--
-- Every statement that inserts, deletes or changes the status of licenses appends one row
-- per tenant it touched, holding the change of each count (triggers, so every writer
-- counts: issue, import, revoke, delete, a tenant's purge). Appending takes no lock that
-- another writer waits for, which a row per tenant updated in place would: every
-- issue-license of a tenant would queue on it until the one before committed. A tenant's
-- counts are the sums of its rows; the service folds them into one row every few seconds
-- (store.FoldCounts), so a read sums a few thousand rows at most.
CREATE TABLE license_counts (
    tenant_id text   NOT NULL,
    active    bigint NOT NULL,
    revoked   bigint NOT NULL
);
CREATE INDEX license_counts_by_tenant ON license_counts (tenant_id);

-- +goose StatementBegin
CREATE FUNCTION license_counts_change() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    -- A transition table is only defined for the event its trigger names.
    IF TG_OP = 'INSERT' THEN
        INSERT INTO license_counts
        SELECT tenant_id, count(*) FILTER (WHERE status = 'active'), count(*) FILTER (WHERE status = 'revoked')
        FROM new_rows GROUP BY tenant_id;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO license_counts
        SELECT tenant_id, -count(*) FILTER (WHERE status = 'active'), -count(*) FILTER (WHERE status = 'revoked')
        FROM old_rows GROUP BY tenant_id;
    ELSE
        -- Most updates change no status (notes, terms): they net to nothing and add no row.
        INSERT INTO license_counts
        SELECT tenant_id, sum(active), sum(revoked) FROM (
            SELECT tenant_id, (status = 'active')::int AS active, (status = 'revoked')::int AS revoked FROM new_rows
            UNION ALL
            SELECT tenant_id, -(status = 'active')::int, -(status = 'revoked')::int FROM old_rows
        ) change GROUP BY tenant_id HAVING sum(active) <> 0 OR sum(revoked) <> 0;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- Creating the triggers locks licenses against writes until this migration commits, so
-- no write of a replica still running the previous version falls between the triggers and
-- the count below.
CREATE TRIGGER license_counts_insert AFTER INSERT ON licenses
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION license_counts_change();
CREATE TRIGGER license_counts_delete AFTER DELETE ON licenses
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION license_counts_change();
CREATE TRIGGER license_counts_update AFTER UPDATE ON licenses
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION license_counts_change();

INSERT INTO license_counts
SELECT tenant_id, count(*) FILTER (WHERE status = 'active'), count(*) FILTER (WHERE status = 'revoked')
FROM licenses GROUP BY tenant_id;

-- +goose Down
DROP TRIGGER license_counts_update ON licenses;
DROP TRIGGER license_counts_delete ON licenses;
DROP TRIGGER license_counts_insert ON licenses;
DROP FUNCTION license_counts_change();
DROP TABLE license_counts;
