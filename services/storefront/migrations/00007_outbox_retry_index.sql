-- +goose Up
-- The outbox drops an index no query reads and indexes the rows waiting to retry
-- (pkg/natsx OutboxRetryIndexMigration, copied verbatim).
DROP INDEX outbox_pending;
CREATE INDEX outbox_retrying ON outbox (tenant_id, id) WHERE retry_at IS NOT NULL AND sent_at IS NULL AND parked_at IS NULL;

-- +goose Down
DROP INDEX outbox_retrying;
CREATE INDEX outbox_pending ON outbox (id) WHERE sent_at IS NULL AND parked_at IS NULL;
