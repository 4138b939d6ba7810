-- No code of the application runs with the sweeper's rights (docs/security.md, "The rule"). The reference guard
-- now runs as the writer and hands uuids, text and a key to `asset_sweeper_guard_refers`, the one privileged half
-- (guards.sql); each guard carries the type its column was validated as, so guards installed before this version
-- are reinstalled by `asset-sweeper guards install` (the schema check names them until then). Every statement
-- that reads an application's column by a reading planned for its type confirms the type first, under the
-- table's lock (`asset_sweeper_read_as_planned`, census.sql). Both are definition files; this migration marks the
-- version they came with.
SELECT 1;
