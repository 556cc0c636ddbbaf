-- +goose Up
-- The outcome of each usage change (track-usage, reset-usage), kept for a few minutes so
-- that a change whose COMMIT got no reply can be told applied or not: the change inserts
-- its op_id first, in its own transaction; whoever then needs the truth inserts the same
-- op_id with fenced = true. Exactly one of the two inserts wins: if the change's did, it
-- committed (its items say what each increment did); if the fence's did, the change can
-- never commit (its own insert would now fail), so "not applied" is final.
CREATE TABLE usage_commits (
    op_id      bytea       PRIMARY KEY,
    fenced     boolean     NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX usage_commits_created ON usage_commits (created_at);

-- What each increment of a committed change did (store.Added), by its place in the call.
CREATE TABLE usage_commit_items (
    op_id   bytea   NOT NULL,
    item    integer NOT NULL,
    seat_ok boolean NOT NULL,
    used    bigint,
    PRIMARY KEY (op_id, item)
);

-- Idempotency-Key on track-usage (addendum §8): pkg/idempotency's TableSQL.
CREATE TABLE idempotency_keys (
    tenant_id    text        NOT NULL,
    idem_key     text        NOT NULL,
    request_hash bytea       NOT NULL,
    response     bytea,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, idem_key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);

-- +goose Down
DROP TABLE idempotency_keys;
DROP TABLE usage_commit_items;
DROP TABLE usage_commits;
