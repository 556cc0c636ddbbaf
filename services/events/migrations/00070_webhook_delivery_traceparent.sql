-- +goose Up
-- A delivery keeps the W3C traceparent of what caused it (docs/observability.md, "Traces"):
-- for a fan-out, the one its event's NATS message carried (the request that wrote the
-- event's outbox row); for a ping or a redelivery, the request that queued it. Each
-- attempt's span links to it, so an operator goes from a license change's trace to the
-- attempts that delivered it.
--
-- Migrations only add (docs/operations.md, "Upgrades and rollbacks"): the column is
-- nullable, without a default (no table rewrite); a process of the release before neither
-- writes nor reads it, and its deliveries' attempts have no link.
ALTER TABLE webhook_deliveries ADD COLUMN traceparent text NULL;

-- +goose Down
ALTER TABLE webhook_deliveries DROP COLUMN traceparent;
