-- +goose Up
-- The service does not store the buyer's email address (api.md, the storefront callback's
-- rule 4): it travels sealed in the fulfillment message only, and there is no resend
-- route. 00009 kept it, sealed, on the purchase's record for a resend route that was
-- withdrawn before any release; this drops that column and the resends' table, and with
-- them every buyer address already stored there (they are erased, not moved). No binary
-- of a release reads either; a storefront replica of a development build that had 00009
-- must be stopped before this runs.
ALTER TABLE fulfillments DROP COLUMN buyer_email_sealed;
DROP TABLE email_resends;

-- +goose Down
-- Re-created empty: the addresses the Up erased are gone.
CREATE TABLE email_resends (
    id                  bigserial   PRIMARY KEY,
    tenant_id           text        NOT NULL,
    checkout_session_id text        NOT NULL,
    delivery_id         integer     NOT NULL,
    email_status        text        NOT NULL,
    sent_at             timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX email_resends_session ON email_resends (tenant_id, checkout_session_id, sent_at);
ALTER TABLE fulfillments ADD COLUMN buyer_email_sealed bytea NULL;
