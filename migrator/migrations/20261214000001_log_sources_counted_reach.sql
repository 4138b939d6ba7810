-- How far a source's logs reach as the consumer counts it, and status shows it: only the newest delivery made since
-- the location was last found to be AWS's alone. One rule in one place; an object delivered before then (an older
-- build's reach, or one from a time the policy was open) counts for nothing.
ALTER TABLE asset_sweeper_private.log_sources ADD COLUMN counted_reach timestamptz
    GENERATED ALWAYS AS (CASE WHEN newest_delivered_at >= trusted_since THEN newest_delivered_at END) STORED;
