-- The audit trail: every value `settlement_events.action` may hold, from `migrator::AUDIT_ACTIONS` (the list
-- `platform::audit::AuditAction` is checked against), so adding an action is one edit in Rust.
--
-- Applied by the migrator after the versioned migrations whenever this file's text changed. The constraint is
-- replaced only when the list it spells differs from the live one (as Postgres prints both), and then NOT VALID:
-- the rows already there passed the list before, which a new list only extends, and validating them would hold
-- the audit table, which every settle writes, for a scan of all of it.
DO $do$
DECLARE
    live   text;
    wanted text;
BEGIN
    SELECT pg_get_constraintdef(c.oid) INTO live
      FROM pg_constraint c
     WHERE c.conrelid = 'asset_sweeper_private.settlement_events'::regclass AND c.conname = 'settlement_events_action_check';
    CREATE TEMP TABLE pg_temp.asset_sweeper_action_probe (action text,
        CONSTRAINT probe CHECK (action IN ({{audit_actions}}))) ON COMMIT DROP;
    SELECT pg_get_constraintdef(c.oid) INTO wanted
      FROM pg_constraint c
     WHERE c.conrelid = 'pg_temp.asset_sweeper_action_probe'::regclass AND c.conname = 'probe';
    DROP TABLE pg_temp.asset_sweeper_action_probe;
    IF live IS DISTINCT FROM wanted THEN
        ALTER TABLE asset_sweeper_private.settlement_events DROP CONSTRAINT IF EXISTS settlement_events_action_check,
            ADD CONSTRAINT settlement_events_action_check CHECK (action IN ({{audit_actions}})) NOT VALID;
    END IF;
END
$do$;
