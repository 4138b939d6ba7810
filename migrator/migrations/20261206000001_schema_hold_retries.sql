-- A settle's confirmation of the schema (asset_sweeper_hold_schema, schema/sql/detector.sql) asks again for its
-- lock, without queueing, for a third of a second before it holds the asset: autovacuum's few milliseconds on the
-- change detector's table made settles hold abandoned uploads for 20 minutes. The function is a definition, applied
-- after this migration; this migration marks the build that ships it, so an older build refuses the database.
SELECT 1;
