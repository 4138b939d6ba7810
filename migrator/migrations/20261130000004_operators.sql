-- The operator CLI: a redrive makes a failed asset claimable again, an undelete brings a deleted or purged one
-- back from its kept bytes and its audit row. Both are decisions about an asset, so both are on record.
ALTER TABLE settlement_events DROP CONSTRAINT settlement_events_action_check;
ALTER TABLE settlement_events ADD CONSTRAINT settlement_events_action_check
    CHECK (action IN ('keep', 'retire', 'delete', 'purge', 'defer', 'noop', 'reject', 'failed', 'restore',
                      'integrity', 'lost', 'redrive', 'undelete'));
