-- +goose Up
-- A floating renewal moves only its seat's lease end. With lease_expires_at indexed (the
-- sweeper's seats_lease_expiry), every renewal was a non-HOT update writing an entry in
-- each of the seats table's indexes. The sweeper now finds seats by lease_sweep_after
-- instead, a lower bound of the lease end that a renewal leaves as it is (it only ever
-- lowers it): a renewal changes no indexed column and is a HOT update, one heap write.
-- The sweeper raises lease_sweep_after to the lease end of the seats that were renewed
-- past it, once per lease rather than once per renewal.
--
-- Invariant: lease_sweep_after IS NULL exactly when lease_expires_at IS NULL, and
-- lease_sweep_after <= lease_expires_at, so every lapsed seat is found by the index.
ALTER TABLE seats ADD COLUMN lease_sweep_after timestamptz;
UPDATE seats SET lease_sweep_after = lease_expires_at WHERE lease_expires_at IS NOT NULL;
CREATE INDEX seats_lease_sweep ON seats (lease_sweep_after) WHERE lease_sweep_after IS NOT NULL;
DROP INDEX seats_lease_expiry;
-- Room on each page for the new version of a renewed row: a HOT update needs its page to
-- have space (new and rewritten pages; existing full pages gain it as rows are pruned).
ALTER TABLE seats SET (fillfactor = 90);

-- +goose Down
ALTER TABLE seats RESET (fillfactor);
CREATE INDEX seats_lease_expiry ON seats (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
DROP INDEX seats_lease_sweep;
ALTER TABLE seats DROP COLUMN lease_sweep_after;
