-- +goose Up
-- The log lists events in the order they reached it (docs/events.md, "Following the
-- log"): seq, which the transaction that stores an event gives it while holding the log's
-- append lock (store.InsertAll), a lock it keeps until it has committed. So a transaction
-- gives out seqs only after every transaction that gave out lower ones has committed or
-- rolled back: a reader that lists an event has every event of lower seq in its snapshot,
-- and none can appear below it later. GET /v1/events orders by seq and pages by it
-- (starting_after).
--
-- seq is a clock in microseconds: the created_at of the event (its microseconds since
-- 1970), or one more than the last seq given when that is higher. So seq >= created_at
-- always, and the log's order is created_at's but where an event arrived after events
-- created later. since bounds seq from below (seq >= since). An event whose seq is more
-- than a second past its created_at is late (arrived after events created more than a
-- second after it): until bounds the seq of the others from above (seq <= until + 1 s),
-- and the late ones have an index of their own. events_seq holds the last seq given.
CREATE SEQUENCE events_seq AS bigint;
ALTER TABLE events ADD COLUMN seq bigint, ADD COLUMN late boolean NOT NULL DEFAULT false;
-- The events already stored keep the order they were listed in, created_at then id.
UPDATE events SET seq = o.seq, late = o.seq - o.us > 1000000
FROM (SELECT id, us, n + max(us - n) OVER (ORDER BY n) AS seq
      FROM (SELECT id, (extract(epoch FROM created_at) * 1000000)::bigint AS us,
                   row_number() OVER (ORDER BY created_at, id) AS n
            FROM events) AS r) AS o
WHERE events.id = o.id;
SELECT setval('events_seq', max(seq)) FROM events HAVING max(seq) IS NOT NULL;
ALTER TABLE events ALTER COLUMN seq SET NOT NULL;
-- A binary from before this migration stores events without seq (its pods during a
-- rolling upgrade, or after a rollback, which runs no migration: docs/operations.md,
-- "Upgrades and rollbacks"): they take the next seq, past every seq given, without the
-- append lock, so the log keeps growing (without this release's guarantee) instead of
-- refusing them.
ALTER TABLE events ALTER COLUMN seq SET DEFAULT nextval('events_seq');
ALTER SEQUENCE events_seq OWNED BY events.seq;
-- GET /v1/events: a tenant's newest first, the cursor being seq, which since and until bound.
CREATE INDEX events_tenant_seq ON events (tenant_id, seq);
CREATE INDEX events_tenant_late ON events (tenant_id, seq) WHERE late;
-- ?license_key=…
CREATE INDEX events_tenant_license_seq ON events (tenant_id, license_key, seq) WHERE license_key IS NOT NULL;
-- events_tenant_newest and events_tenant_license (created_at order) are what a binary from
-- before this migration lists by; migrations only add, so they stay until a later release
-- drops them.

-- +goose Down
DROP INDEX events_tenant_license_seq;
DROP INDEX events_tenant_late;
DROP INDEX events_tenant_seq;
ALTER TABLE events DROP COLUMN seq, DROP COLUMN late;
