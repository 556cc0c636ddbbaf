-- +goose Up
-- Which credential opened each console session, so that the session ends with it
-- (addendum §9): 'key' the tenant's key (self-hosted: the admin key; rotate-api-key ends
-- every session of the tenant anyway), 'api_key' an extra key, named by api_key_id
-- (deleting the key deletes its sessions in the same transaction, and a session is
-- resolved only while its key has not expired), 'password' the console password
-- (setting a new one ends the password sessions but the caller's). A session without it
-- (opened before this migration, or by an older billing binary during the upgrade) is
-- not resolved: its holder signs in again. Only adds: older binaries insert neither
-- column, which the checks allow.
ALTER TABLE console_sessions
    ADD COLUMN opened_with text CHECK (opened_with IN ('key', 'api_key', 'password')),
    ADD COLUMN api_key_id text REFERENCES api_keys (id) ON DELETE CASCADE,
    ADD CONSTRAINT console_sessions_api_key_named CHECK ((opened_with = 'api_key') = (api_key_id IS NOT NULL));
CREATE INDEX console_sessions_by_api_key ON console_sessions (api_key_id) WHERE api_key_id IS NOT NULL;

-- +goose Down
DROP INDEX console_sessions_by_api_key;
ALTER TABLE console_sessions DROP CONSTRAINT console_sessions_api_key_named,
    DROP COLUMN api_key_id, DROP COLUMN opened_with;
