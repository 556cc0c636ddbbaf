-- +goose Up
-- A seat is one (license key, instance_id) pair. Only the SHA-256 of its token is kept:
-- the token is shown once, by the activation that created the seat.
CREATE TABLE seats (
    tenant_id    text        NOT NULL,
    license_key  text        NOT NULL,
    instance_id  text        NOT NULL,
    token_hash   bytea       NOT NULL,
    activated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, license_key, instance_id)
);
-- Token holders are found by the hash alone (deactivate, track-usage); 256 random bits
-- make a collision impossible in practice, and uniqueness makes it an error if not.
CREATE UNIQUE INDEX seats_token_hash ON seats (token_hash);
CREATE INDEX seats_recent ON seats (tenant_id, activated_at DESC);

-- Running totals per metric. version is drawn from one sequence on every write, so a
-- row that was deleted (license purge) and written again never repeats a version a
-- reader may still hold: the compare-and-swap of track-usage has no ABA case.
CREATE SEQUENCE usage_version;
CREATE TABLE usage (
    tenant_id   text   NOT NULL,
    license_key text   NOT NULL,
    metric      text   NOT NULL,
    used        bigint NOT NULL CHECK (used >= 0),
    version     bigint NOT NULL,
    PRIMARY KEY (tenant_id, license_key, metric)
);

-- Licenses whose deletion was processed. An activation that read the license just
-- before it was deleted checks here (under the same per-license lock as the purge), so
-- it cannot leave a seat behind for a license that no longer exists.
CREATE TABLE deleted_licenses (
    tenant_id   text        NOT NULL,
    license_key text        NOT NULL,
    deleted_at  timestamptz NOT NULL,
    purged_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, license_key)
);

-- +goose Down
DROP TABLE deleted_licenses;
DROP TABLE usage;
DROP SEQUENCE usage_version;
DROP TABLE seats;
