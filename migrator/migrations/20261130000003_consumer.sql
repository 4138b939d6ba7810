-- The consumer: a settle that finds the asset inside its grace period or abandon window defers it, and says so.
ALTER TABLE settlement_events DROP CONSTRAINT settlement_events_action_check;
ALTER TABLE settlement_events ADD CONSTRAINT settlement_events_action_check
    CHECK (action IN ('keep', 'retire', 'delete', 'purge', 'defer', 'noop', 'reject', 'failed', 'restore',
                      'integrity', 'lost'));
