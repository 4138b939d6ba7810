-- The ledger: which settlements left a version behind, and S3's expiry rule for it, for the statements that count
-- versions by them (the costs' versions kept for undelete, the drift's believed bytes, a pass's money). Written once more, in Rust (`ledger::window::expiry_day`),
-- and held equal to it by a test.
--
-- Applied by the migrator after the versioned migrations, whenever this file's text changed.

-- The first day S3 no longer bills a version made noncurrent at `noncurrent_since` under a rule of
-- `noncurrent_days` (`NoncurrentDays`):
-- the days added, rounded up to the next midnight UTC (a time already at midnight goes to the next one). UTC's,
-- whatever the session's time zone.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_version_expires(noncurrent_since timestamptz, noncurrent_days integer)
    RETURNS date
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN (date_trunc('day', (noncurrent_since AT TIME ZONE 'UTC') + make_interval(days => noncurrent_days))
            + interval '1 day')::date;

-- A settlement that left a noncurrent version behind, billed until it expires: a delete or purge that freed bytes.
-- What the costs, the drift and a pass's money count versions by.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_left_a_version(e asset_sweeper_private.settlement_events)
    RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN e.action IN ('delete', 'purge') AND e.bytes_freed > 0;
