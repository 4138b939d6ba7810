-- The audit trail: every value `settlement_events.action` may hold, from `migrator::AUDIT_ACTIONS` (the list
-- `platform::audit::AuditAction` is checked against), so adding an action is one edit in Rust and no migration.
--
-- Applied by the migrator after the versioned migrations, whenever this file's text changed (the list did): the
-- constraint is replaced, which checks every audit row again.
ALTER TABLE settlement_events DROP CONSTRAINT IF EXISTS settlement_events_action_check,
    ADD CONSTRAINT settlement_events_action_check CHECK (action IN ({{audit_actions}}));
