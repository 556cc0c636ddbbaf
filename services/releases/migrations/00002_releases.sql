-- +goose Up
-- A release is metadata and a pointer URL; the artifact itself is never stored.
CREATE TABLE releases (
    id            integer     GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id     text        NOT NULL,
    product_id    text        NOT NULL,
    -- product_id trimmed and lower-cased (in Go, as licensing's product claim does):
    -- check-update compares product ids that way, so uniqueness, the 500 limit and
    -- selection all group by it.
    product_key   text        NOT NULL,
    version       text        NOT NULL,
    channel       text        NOT NULL,
    platform      text        NOT NULL,
    artifact_url  text        NOT NULL,
    checksum      text        NOT NULL,
    release_notes text        NOT NULL,
    status        text        NOT NULL DEFAULT 'published' CHECK (status IN ('published', 'unpublished')),
    -- Computed once at registration (addendum §5) and never again.
    signature     text        NOT NULL,
    -- SemVer 2.0.0 precedence as bytes whose order is the precedence (internal/semver
    -- Key); one 0x00 byte for a version that does not parse, below every real version.
    precedence    bytea       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    unpublished_at timestamptz
);

-- At most one published release per product/version/channel/platform; unpublished ones
-- may repeat (re-registering after unpublish makes a new release).
CREATE UNIQUE INDEX releases_published_once ON releases (tenant_id, product_key, channel, platform, version)
    WHERE status = 'published';

-- check-update's selection is the first entry of this index: highest precedence, then
-- the most recently registered. It also counts the published releases of a
-- product/channel/platform for the limit of 500.
CREATE INDEX releases_latest ON releases (tenant_id, product_key, channel, platform, precedence DESC, id DESC)
    WHERE status = 'published';

-- list-releases pages newest first, optionally by product.
CREATE INDEX releases_by_tenant ON releases (tenant_id, id DESC);
CREATE INDEX releases_by_product ON releases (tenant_id, product_key, id DESC);

-- Idempotency-Key on register-release (addendum §8): pkg/idempotency's TableSQL.
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
DROP TABLE releases;
