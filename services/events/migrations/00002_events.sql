-- +goose Up
-- The event log (addendum §11): one row per event of every service, stored once (the
-- primary key is the event id, so a redelivered message changes nothing). body is the
-- event's JSON exactly as it is listed and delivered; the other columns are what the log
-- routes filter and order by. Rows are never updated; the retention loop deletes them.
CREATE TABLE events (
    id          text        PRIMARY KEY,
    tenant_id   text        NOT NULL,
    type        text        NOT NULL,
    license_key text        NULL,
    created_at  timestamptz NOT NULL,
    stored_at   timestamptz NOT NULL DEFAULT now(),
    body        bytea       NOT NULL
);
-- GET /v1/events: a tenant's newest first, the cursor being (created_at, id).
CREATE INDEX events_tenant_newest ON events (tenant_id, created_at DESC, id DESC);
-- ?license_key=…
CREATE INDEX events_tenant_license ON events (tenant_id, license_key, created_at DESC, id DESC)
    WHERE license_key IS NOT NULL;
-- The retention sweep.
CREATE INDEX events_created_at ON events (created_at);

-- +goose Down
DROP TABLE events;
