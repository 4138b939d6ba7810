-- Discovery (invariant 12): each sweep pass walks the assets nobody has scheduled (`attached`, or `released`
-- without a due time) in id order from a persisted cursor, and makes due the ones no reference source refers to.
-- It only schedules: the consumer's recheck under lock still decides.

-- One cycle walks every asset once; the next begins at the pass after the last one ended.
CREATE TABLE discovery_state (
    singleton                boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    cycle                    bigint      NOT NULL DEFAULT 1,
    -- When the cycle's first batch ran (NULL until it has).
    cycle_started_at         timestamptz,
    -- The first asset id the cycle has not looked at yet: the walk goes on from here.
    next_id                  uuid        NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000',
    -- This cycle's counts so far.
    scanned                  bigint      NOT NULL DEFAULT 0 CHECK (scanned >= 0),
    found                    bigint      NOT NULL DEFAULT 0 CHECK (found >= 0),
    last_cycle_started_at    timestamptz,
    last_cycle_completed_at  timestamptz,
    last_cycle_seconds       double precision,
    last_cycle_scanned       bigint,
    last_cycle_found         bigint
);
INSERT INTO discovery_state DEFAULT VALUES;

-- What discovery did in each pass.
ALTER TABLE sweep_runs ADD COLUMN discovery jsonb;

-- Discovery's scheduling is a decision about an asset: on record like every other.
ALTER TABLE settlement_events DROP CONSTRAINT settlement_events_action_check;
ALTER TABLE settlement_events ADD CONSTRAINT settlement_events_action_check
    CHECK (action IN ('keep', 'retire', 'delete', 'purge', 'defer', 'noop', 'reject', 'failed', 'restore',
                      'integrity', 'lost', 'redrive', 'undelete', 'discovered'));

-- Unscheduled: nobody has said when to look at it (attached, or released without a due time). Discovery walks
-- these; everything else is already on the way to a settle or waits for an operator.
CREATE FUNCTION asset_sweeper_unscheduled(a assets) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN a.due_at IS NULL AND a.state IN ('attached', 'released');
