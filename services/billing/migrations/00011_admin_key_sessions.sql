-- +goose Up
-- A self-hosted console session opened with the admin key records which admin key
-- (opened_with 'admin_key', admin_key_fingerprint: auth.AdminKeyFingerprint, an HMAC keyed
-- with the key, never the key), so that it ends once ADMIN_API_KEY changes: billing
-- resolves it only while the fingerprint is that of ADMIN_API_KEY or, during a rotation,
-- ADMIN_API_KEY_PREVIOUS. Hosted sessions opened with the tenant's key stay 'key'. A
-- self-hosted session from before this migration ('key', or one an older billing replica
-- opens during the upgrade) does not say which admin key opened it and is not resolved:
-- its holder signs in again, as migration 10 did with the sessions before it. Older
-- binaries never write 'admin_key', and resolve such a session without comparing the
-- key, as they did every session, until they are replaced.
ALTER TABLE console_sessions
    DROP CONSTRAINT console_sessions_opened_with_check,
    ADD CONSTRAINT console_sessions_opened_with_check CHECK (opened_with IN ('key', 'admin_key', 'api_key', 'password')),
    ADD COLUMN admin_key_fingerprint text,
    ADD CONSTRAINT console_sessions_admin_key_named CHECK ((opened_with = 'admin_key') = (admin_key_fingerprint IS NOT NULL));

-- +goose Down
DELETE FROM console_sessions WHERE opened_with = 'admin_key';
ALTER TABLE console_sessions
    DROP CONSTRAINT console_sessions_admin_key_named,
    DROP COLUMN admin_key_fingerprint,
    DROP CONSTRAINT console_sessions_opened_with_check,
    ADD CONSTRAINT console_sessions_opened_with_check CHECK (opened_with IN ('key', 'api_key', 'password'));
