-- +goose Up
-- Licenses follow the money after the first sale: subscriptions renew and end, refunds
-- and disputes revoke, a dispute won reactivates.

-- What a full refund or a dispute does (revoke or keep), and how long a subscription's
-- license stays valid past the paid period.
ALTER TABLE mappings
    ADD COLUMN renewal_grace_days integer NOT NULL DEFAULT 3 CHECK (renewal_grace_days BETWEEN 0 AND 90),
    ADD COLUMN on_refund          text    NOT NULL DEFAULT 'revoke' CHECK (on_refund IN ('revoke', 'keep'));

-- A delivery of a lifecycle event (invoice, subscription, charge, dispute) names the
-- purchase through Stripe ids (refs); checkout_session_id stays '' until one of them is
-- linked to a checkout session (the event is held until then). detail holds the few
-- fields of the event the worker acts on (period end, amounts, dispute status).
ALTER TABLE deliveries
    ADD COLUMN refs   text[] NOT NULL DEFAULT '{}',
    ADD COLUMN detail jsonb  NULL,
    -- The vendor was mailed about this delivery (over_quota, unmapped): once per delivery.
    ADD COLUMN vendor_alerted boolean NOT NULL DEFAULT false;
CREATE INDEX deliveries_held ON deliveries USING gin (refs) WHERE checkout_session_id = '';

-- Stripe ids that lead to a checkout session: the session's subscription, payment intent
-- and invoice, and those of the invoices and charges seen for it since.
CREATE TABLE purchase_refs (
    tenant_id           text NOT NULL,
    ref                 text NOT NULL,
    checkout_session_id text NOT NULL,
    PRIMARY KEY (tenant_id, ref)
);

-- The purchase's terms after the sale (copied from the mapping when the license request
-- is built) and the state the license should be in: paid_until only moves forward;
-- revoked_for is why it should be revoked (refund, dispute) or NULL. expiry_applied and
-- revoked_applied are what licensing has been told, so each change is sent until it lands.
ALTER TABLE fulfillments
    ADD COLUMN mode            text        NULL,
    ADD COLUMN grace_days      integer     NULL,
    ADD COLUMN on_refund       text        NULL,
    ADD COLUMN paid_until      timestamptz NULL,
    ADD COLUMN expiry_applied  timestamptz NULL,
    ADD COLUMN revoked_for     text        NULL,
    ADD COLUMN revoked_applied boolean     NOT NULL DEFAULT false,
    ADD COLUMN won_disputes    text[]      NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE fulfillments
    DROP COLUMN won_disputes, DROP COLUMN revoked_applied, DROP COLUMN revoked_for,
    DROP COLUMN expiry_applied, DROP COLUMN paid_until, DROP COLUMN on_refund,
    DROP COLUMN grace_days, DROP COLUMN mode;
DROP TABLE purchase_refs;
DROP INDEX deliveries_held;
ALTER TABLE deliveries DROP COLUMN vendor_alerted, DROP COLUMN detail, DROP COLUMN refs;
ALTER TABLE mappings DROP COLUMN on_refund, DROP COLUMN renewal_grace_days;
