-- Two definitions change with this migration, which marks the build that ships them (so an older build refuses the
-- database rather than put its older functions back); both are applied after it:
-- - a settle's confirmation of the schema (asset_sweeper_hold_schema, schema/sql/detector.sql) asks again for its
--   lock, without queueing, for a third of a second before it holds the asset: autovacuum's few milliseconds on the
--   change detector's table made settles hold abandoned uploads for 20 minutes;
-- - the sweeper's logins no longer write the migrator's records or the change detector's tables
--   (platform/sql/roles.sql); the sweep folds the detector's count through a definer function.
SELECT 1;
