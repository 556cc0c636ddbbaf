-- +goose Up
-- Leases (signed, short statements that a seat is good until a time), floating seats and
-- machine binding. A floating seat lives only while leased: lease_expires_at is set for
-- it (NULL for every other seat), and a seat past it counts nowhere even before the
-- sweeper removes it. components are the machine components the seat is bound to (NULL:
-- unbound).
ALTER TABLE seats ADD COLUMN lease_expires_at timestamptz;
ALTER TABLE seats ADD COLUMN components jsonb;
-- The license's product, kept on a floating seat so the sweeper that removes it after its
-- lease lapsed can announce it (seat.deactivated names the product) without asking
-- licensing inside its transaction.
ALTER TABLE seats ADD COLUMN product_id text;
CREATE INDEX seats_lease_expiry ON seats (lease_expires_at) WHERE lease_expires_at IS NOT NULL;

-- The policy of a product's tier ('*': the product's default).
CREATE TABLE lease_policies (
    tenant_id           text        NOT NULL,
    product_id          text        NOT NULL,
    tier                text        NOT NULL,
    floating            boolean     NOT NULL,
    lease_ttl_seconds   integer     NOT NULL,
    renew_after_seconds integer     NOT NULL,
    fingerprint_match   text        NOT NULL CHECK (fingerprint_match IN ('none', 'any', 'most', 'all')),
    entitlements        text[]      NOT NULL,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, product_id, tier),
    CHECK (renew_after_seconds >= 0 AND renew_after_seconds < lease_ttl_seconds)
);

-- Floating seats whose lease lapsed, by their token's hash, so a lease asked for with that
-- token answers "Seat lease has expired" (activate again) rather than "Invalid activation
-- token" for a day after the lapse.
CREATE TABLE lapsed_seats (
    token_hash  bytea       PRIMARY KEY,
    tenant_id   text        NOT NULL,
    license_key text        NOT NULL,
    instance_id text        NOT NULL,
    lapsed_at   timestamptz NOT NULL
);
CREATE INDEX lapsed_seats_age ON lapsed_seats (lapsed_at);

-- Ed25519 keys that sign leases, per tenant: one active, and those retiring until
-- retire_at. The private key is sealed with the installation's AES key (the licensing
-- keyring), never stored in the clear.
CREATE TABLE lease_keys (
    tenant_id      text        NOT NULL,
    kid            text        NOT NULL,
    public_key     bytea       NOT NULL,
    sealed_private bytea       NOT NULL,
    status         text        NOT NULL CHECK (status IN ('active', 'retiring')),
    created_at     timestamptz NOT NULL DEFAULT now(),
    retire_at      timestamptz,
    PRIMARY KEY (tenant_id, kid)
);
-- One active key per tenant: two replicas making a tenant's first key agree on one.
CREATE UNIQUE INDEX lease_keys_one_active ON lease_keys (tenant_id) WHERE status = 'active';

-- +goose Down
DROP TABLE lease_keys;
DROP TABLE lapsed_seats;
DROP TABLE lease_policies;
DROP INDEX seats_lease_expiry;
ALTER TABLE seats DROP COLUMN components;
ALTER TABLE seats DROP COLUMN lease_expires_at;
