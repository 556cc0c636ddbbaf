-- +goose Up
-- The outbox parks a row that can never be published instead of retrying it forever
-- (pkg/natsx OutboxParkingMigration, copied verbatim).
ALTER TABLE outbox
    ADD COLUMN failures    integer     NOT NULL DEFAULT 0,
    ADD COLUMN retry_at    timestamptz NULL,
    ADD COLUMN parked_at   timestamptz NULL,
    ADD COLUMN park_reason text        NULL;
DROP INDEX outbox_unsent;
CREATE INDEX outbox_pending ON outbox (id) WHERE sent_at IS NULL AND parked_at IS NULL;
CREATE INDEX outbox_pending_tenant ON outbox (tenant_id, id) WHERE sent_at IS NULL AND parked_at IS NULL;
CREATE INDEX outbox_parked ON outbox (parked_at) WHERE parked_at IS NOT NULL;

-- +goose Down
DROP INDEX outbox_parked;
DROP INDEX outbox_pending_tenant;
DROP INDEX outbox_pending;
CREATE INDEX outbox_unsent ON outbox (id) WHERE sent_at IS NULL;
ALTER TABLE outbox
    DROP COLUMN park_reason,
    DROP COLUMN parked_at,
    DROP COLUMN retry_at,
    DROP COLUMN failures;
