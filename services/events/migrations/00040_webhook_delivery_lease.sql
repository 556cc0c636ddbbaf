-- +goose Up
-- A claim's lease goes in a column of its own, which no index names, so the claim is a HOT
-- update (a new row version on the same page, no index entry) instead of moving
-- next_attempt_at, which wrote a new version of the row, body included, into every index.
-- A pending delivery is due when next_attempt_at has come and no lease runs. The
-- fillfactor leaves each page room for those versions (new pages only).
ALTER TABLE webhook_deliveries ADD COLUMN leased_until timestamptz;
ALTER TABLE webhook_deliveries SET (fillfactor = 80);
-- The due index gains seq, so a lane's cursor (due time, seq) names one delivery: the
-- deliveries of one fan-out batch share their due time, and a cursor on the time alone
-- made each claim re-read every entry of the batch that earlier claims had left behind.
CREATE INDEX webhook_deliveries_due_seq ON webhook_deliveries (tenant_id, endpoint_id, next_attempt_at, seq) WHERE status = 'pending';
DROP INDEX webhook_deliveries_due;

-- +goose Down
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (tenant_id, endpoint_id, next_attempt_at) WHERE status = 'pending';
DROP INDEX webhook_deliveries_due_seq;
UPDATE webhook_deliveries SET next_attempt_at = leased_until WHERE leased_until > next_attempt_at;
ALTER TABLE webhook_deliveries DROP COLUMN leased_until;
ALTER TABLE webhook_deliveries RESET (fillfactor);
