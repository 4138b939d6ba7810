-- A log location is read only while its bucket's policy keeps everybody but AWS's log delivery from writing below
-- it. Since when that was seen, without a break: an object delivered before then may be read (a read only keeps a
-- file) but does not tell the consumer how far the logs reach, as anybody may have written it.
ALTER TABLE asset_sweeper_private.log_sources ADD COLUMN trusted_since timestamptz;

-- A location several buckets log to holds lines of theirs: passed over, counted here, and an object of theirs
-- alone is no delivery of the asset bucket's logs.
ALTER TABLE asset_sweeper_private.log_sources ADD COLUMN other_bucket_lines bigint NOT NULL DEFAULT 0;
