-- +goose Up
-- The buyer address of a purchase, sealed (AES-256-GCM under the installation keyring,
-- purpose keyhouse-storefront-buyer-email), kept with the purchase's record so the vendor
-- can send the buyer email again (POST /v1/storefront/deliveries/{id}/resend-email) to the
-- address the buyer gave at checkout, never one typed in. No route shows it (the resend
-- answer masks it); it goes with the fulfillment after RECORD_RETENTION.
ALTER TABLE fulfillments ADD COLUMN buyer_email_sealed bytea NULL;

-- One row per resend: the per-purchase limit counts them (under the session's lock), and
-- they are kept as long as the purchase's record.
CREATE TABLE email_resends (
    id                  bigserial   PRIMARY KEY,
    tenant_id           text        NOT NULL,
    checkout_session_id text        NOT NULL,
    delivery_id         integer     NOT NULL,
    email_status        text        NOT NULL,
    sent_at             timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX email_resends_session ON email_resends (tenant_id, checkout_session_id, sent_at);

-- +goose Down
DROP TABLE email_resends;
ALTER TABLE fulfillments DROP COLUMN buyer_email_sealed;
