-- The retired objects of each workspace, kept with its held and stored bytes: `status`, `plan` and every money
-- figure read them from the totals each pass folds, not from the asset rows (an anti-join over every retired row,
-- 0.2-1.6 s at 1 000 000 assets). An object is retired for a workspace when every row of the workspace on it is
-- retired. The existing totals' retired figures stay NULL (read as 0) until the next pass's fold
-- (records/sql/quota.sql), under the sweep's lock, recounts every workspace from the rows, once.
ALTER TABLE asset_sweeper_private.workspace_objects
    ADD COLUMN retired_rows integer NOT NULL DEFAULT 0 CHECK (retired_rows >= 0);
ALTER TABLE asset_sweeper_private.workspace_object_changes ADD COLUMN retired_rows integer NOT NULL DEFAULT 0;
ALTER TABLE asset_sweeper_private.workspace_usage ADD COLUMN retired_objects bigint, ADD COLUMN retired_bytes bigint;

-- `status` counts and lists the failed assets on every call: the rows of a small index, not a scan of every asset.
-- (Changing `state` already updates an index, so this one costs no update that was HOT before.)
CREATE INDEX assets_failed ON asset_sweeper_private.assets (failed_at) WHERE state = 'failed';

-- How long the census may take is bounded by the shortest wait a retired asset has for its purge (RETENTION when
-- it was retired): its minimum, read on every schema check from this index's first entry.
CREATE INDEX assets_retired_window ON asset_sweeper_private.assets ((purge_after - retired_at)) WHERE state = 'retired';
