-- +goose Up
-- Each tenant's buyer-email settings (console Settings, /v1/storefront/mail-settings): the
-- From display name, the reply-to address and the product's display name. No row, or an
-- empty value, is the default. The checks repeat the service's validation (pkg/mail's
-- ValidDisplayName and ValidAddress), so no write path can store a value that would add a
-- header to a mail.
CREATE TABLE mail_settings (
    tenant_id    text        PRIMARY KEY,
    sender_name  text        NOT NULL DEFAULT '' CHECK (char_length(sender_name) <= 100 AND sender_name !~ '[[:cntrl:]]'),
    reply_to     text        NOT NULL DEFAULT '' CHECK (char_length(reply_to) <= 254 AND reply_to !~ '[[:cntrl:]]'),
    product_name text        NOT NULL DEFAULT '' CHECK (char_length(product_name) <= 100 AND product_name !~ '[[:cntrl:]]'),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE mail_settings;
