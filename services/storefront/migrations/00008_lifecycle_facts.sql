-- +goose Up
-- Why a license should be revoked becomes facts that each event only adds to, so any
-- delivery order gives the same answer: refunded (a charge of the purchase was refunded
-- in full) and disputes (every dispute seen; won_disputes are those closed as won, the
-- others are open or lost). revoked_for, a single reason, lost a refund when a dispute
-- was won after it, and a second dispute when the first was won.
-- revoked_elsewhere: when the storefront came to revoke, the license was already revoked
-- (by the vendor); the storefront never reactivates such a license.
-- paid_until_delivery: the delivery whose invoice set paid_until (its retry is still a
-- renewal; another invoice for the same period, a proration, is not).
ALTER TABLE fulfillments
    ADD COLUMN refunded            boolean NOT NULL DEFAULT false,
    ADD COLUMN disputes            text[]  NOT NULL DEFAULT '{}',
    ADD COLUMN revoked_elsewhere   boolean NOT NULL DEFAULT false,
    ADD COLUMN paid_until_delivery integer NULL;

-- The facts so far, from the purchase's deliveries (kept as long as its fulfillment, unless
-- no event came for RECORD_RETENTION). A dispute closed as lost counts from its next
-- event on, as it would have if it came now; a license revoked for a dispute whose
-- delivery is gone keeps an unnamed one, so it stays revoked.
UPDATE fulfillments f SET
    refunded = COALESCE(f.revoked_for, '') = 'refund' OR EXISTS (
        SELECT 1 FROM deliveries d
        WHERE d.tenant_id = f.tenant_id AND d.checkout_session_id = f.checkout_session_id
          AND d.event_type = 'charge.refunded'
          AND (d.detail->>'amount')::bigint > 0
          AND (d.detail->>'amount_refunded')::bigint >= (d.detail->>'amount')::bigint),
    disputes = ARRAY(
        SELECT id FROM (
            SELECT d.detail->>'dispute_id' AS id FROM deliveries d
            WHERE d.tenant_id = f.tenant_id AND d.checkout_session_id = f.checkout_session_id
              AND d.event_type IN ('charge.dispute.created', 'charge.dispute.closed')
              AND d.detail->>'dispute_id' IS NOT NULL
            UNION SELECT unnest(f.won_disputes)) seen
        ORDER BY id COLLATE "C");

UPDATE fulfillments SET disputes = array_append(disputes, '(an earlier dispute)')
WHERE revoked_for = 'dispute' AND NOT refunded AND disputes <@ won_disputes;

-- revoked_for stays, unread: a storefront of the release before this one, still running
-- while a rolling upgrade migrates (docs/operations.md, "Upgrades and rollbacks"), reads
-- and writes it, and migrations only add. A later release drops it.
COMMENT ON COLUMN fulfillments.revoked_for IS 'unused since 00008 (refunded, disputes); kept for the release before it';

-- +goose Down
COMMENT ON COLUMN fulfillments.revoked_for IS NULL;
UPDATE fulfillments SET revoked_for = CASE
    WHEN refunded THEN 'refund'
    WHEN NOT disputes <@ won_disputes THEN 'dispute' END;
ALTER TABLE fulfillments
    DROP COLUMN paid_until_delivery, DROP COLUMN revoked_elsewhere,
    DROP COLUMN disputes, DROP COLUMN refunded;
