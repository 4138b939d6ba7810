-- Three SQL functions, each written once where it was written out in several statements before: S3's expiry rule
-- for a noncurrent version (`asset_sweeper_version_expires`) and which settlements left such a version
-- (`asset_sweeper_left_a_version`), both in ledger/sql/money.sql, for the costs, the drift and a pass's money; and
-- what a redrive resets an asset to (`asset_sweeper_redriven_state`, lifecycle/sql/lifecycle.sql), for the reset and
-- the CLI's dry run. No table changes: this migration marks the change of the definition files, so a build older
-- than it refuses the database instead of putting back functions without them.
SELECT 1;
