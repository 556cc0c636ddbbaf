-- +goose Up
-- list-licenses' issued_to filter is a case-insensitive substring match; a trigram index
-- answers it without reading every license of the tenant. pg_trgm ships with PostgreSQL
-- and is a trusted extension (PostgreSQL 13+): the schema owner may create it. When an
-- operator already installed it in another schema, the index uses that one.
-- +goose StatementBegin
DO $$
DECLARE
    trgm_schema text;
BEGIN
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
    SELECT n.nspname INTO trgm_schema FROM pg_extension e
        JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm';
    EXECUTE format('CREATE INDEX licenses_issued_to_trgm ON licenses USING gin (issued_to %I.gin_trgm_ops)', trgm_schema);
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP INDEX licenses_issued_to_trgm;
