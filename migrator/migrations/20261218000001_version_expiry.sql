-- S3's expiry rule for a noncurrent version as one SQL function (`asset_sweeper_version_expires`,
-- ledger/sql/money.sql), which the costs and the drift now call instead of each writing the rule out; and what a
-- redrive resets an asset to (`asset_sweeper_redriven_state`, lifecycle/sql/lifecycle.sql), which the reset and the
-- CLI's dry run share. No table changes: this migration marks the change of the definition files, so a build older than it refuses the database
-- instead of putting back functions without it.
SELECT 1;
