-- +goose Up
-- Why a past_due snapshot is not active (plan.State.Reason): payment_failed, unpaid or
-- paused, which api.md's status shows alike and the console tells apart. NULL for the other
-- statuses, and for snapshots recorded before this column (the console then says what is
-- true of every past_due case).
ALTER TABLE subscriptions ADD COLUMN snapshot_reason text
    CHECK (snapshot_reason IN ('payment_failed', 'unpaid', 'paused'));

-- The subscription ended without its first payment ever succeeding (Stripe's
-- incomplete_expired, or its deletion while incomplete): it counts for nothing in the
-- tenant's plan (plan.Sub.NeverPaid).
ALTER TABLE subscriptions ADD COLUMN never_paid boolean NOT NULL DEFAULT false;
ALTER TABLE subscriptions ADD CONSTRAINT subscriptions_never_paid_ended CHECK (ended OR NOT never_paid);

-- Until now such an end was taken for a paid subscription that ended, leaving a tenant
-- that had only opened Checkout canceled, and refused issuance. A subscription that was
-- ever paid has a snapshot before its end (the paid checkout or its active
-- customer.subscription.* event sets one), one that never paid has none (an unpaid
-- checkout and an incomplete subscription set none): the ended rows without a snapshot are
-- the ones that never paid.
UPDATE subscriptions SET never_paid = true WHERE ended AND snapshot_at IS NULL;

-- +goose Down
ALTER TABLE subscriptions DROP CONSTRAINT subscriptions_never_paid_ended;
ALTER TABLE subscriptions DROP COLUMN never_paid;
ALTER TABLE subscriptions DROP COLUMN snapshot_reason;
