-- Approvals bound to what a person read (docs/operating.md, "Approvals"): each records the plan it was granted on,
-- and covers a later plan only while that has not grown beyond APPROVAL_TOLERANCE_PERCENT over it. An approval
-- recorded before this migration read no plan: it is taken to have covered nothing, so the brake, the rule or the
-- prefix it released waits for a person again rather than go on with a plan nobody read.

-- The workspace's due assets and bytes when the brake was released, and the first candidates `approve` printed.
ALTER TABLE brake_approvals
    ADD COLUMN due_assets bigint NOT NULL DEFAULT 0 CHECK (due_assets >= 0),
    ADD COLUMN due_bytes  bigint NOT NULL DEFAULT 0 CHECK (due_bytes >= 0),
    ADD COLUMN sample     jsonb  NOT NULL DEFAULT '[]';
ALTER TABLE brake_approvals ALTER COLUMN due_assets DROP DEFAULT, ALTER COLUMN due_bytes DROP DEFAULT;

-- The records the rule would have deleted, and its table's, when it was released from the rule brake.
ALTER TABLE retention_rules
    ADD COLUMN approved_rows       bigint CHECK (approved_rows >= 0),
    ADD COLUMN approved_table_rows bigint CHECK (approved_table_rows >= 0);
UPDATE retention_rules SET approved_rows = 0, approved_table_rows = 0 WHERE approved_until IS NOT NULL;
ALTER TABLE retention_rules ADD CHECK ((approved_until IS NULL) OR (approved_rows IS NOT NULL));

-- A prefix's approval ends (as the others do); it records the adoptable keys and bytes the newest report showed the
-- person, and every comparison records the prefix's count (`reported_keys`): a report whose count jumps beyond the
-- tolerance over both withdraws the approval, `withdrawn` saying from what to what, until a person approves again.
ALTER TABLE reconcile_prefixes
    ADD COLUMN approved_until timestamptz,
    ADD COLUMN approved_keys  bigint CHECK (approved_keys >= 0),
    ADD COLUMN approved_bytes bigint CHECK (approved_bytes >= 0),
    ADD COLUMN reported_keys  bigint CHECK (reported_keys >= 0),
    ADD COLUMN withdrawn      jsonb;
UPDATE reconcile_prefixes
   SET approved_until = approved_at + interval '24 hours', approved_keys = 0, approved_bytes = 0
 WHERE approved_at IS NOT NULL;
ALTER TABLE reconcile_prefixes
    ADD CHECK ((approved_at IS NULL) = (approved_until IS NULL)),
    ADD CHECK ((approved_at IS NULL) = (approved_keys IS NULL));
