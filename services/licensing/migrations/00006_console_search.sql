-- +goose Up
-- The console's support searches. list-licenses' key filter (a license key, whole or part)
-- is a case-insensitive substring match, answered by a trigram index like issued_to's
-- (00002, which created pg_trgm, in whichever schema it lives). Its expiring_within_days
-- filter (the overview's "expiring in the next 30 days") reads the active licenses with
-- an expiry, in expiry order.
-- +goose StatementBegin
DO $$
DECLARE
    trgm_schema text;
BEGIN
    SELECT n.nspname INTO trgm_schema FROM pg_extension e
        JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm';
    EXECUTE format('CREATE INDEX licenses_key_trgm ON licenses USING gin (key %I.gin_trgm_ops)', trgm_schema);
END
$$;
-- +goose StatementEnd
CREATE INDEX licenses_expiring ON licenses (tenant_id, expires_at) WHERE status = 'active' AND expires_at IS NOT NULL;

-- +goose Down
DROP INDEX licenses_expiring;
DROP INDEX licenses_key_trgm;
