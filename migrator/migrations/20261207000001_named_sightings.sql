-- The key scan no longer rewrites what it saw the scan before (docs/design.md, "Adoption"; docs/developing.md, the
-- census benchmark): each cycle moved `seen_at` on every (key, column) a record names, a million row versions and
-- 800 MB of `named_keys` for a million named keys, half a cycle's time. A pair is now written once, when a scan
-- first sees it (`seen_at` is that time), and every later sighting is a hash in a batch's row of `named_sightings`,
-- appended. A scan that ends forgets a pair first seen before the previous scan began that neither it nor the
-- previous scan sighted: the rule as before. Two keys whose hashes collide keep each other a while longer, never
-- the reverse.
CREATE TABLE named_sightings (
    relid    oid         NOT NULL,
    attnum   smallint    NOT NULL,
    relative boolean     NOT NULL,
    seen_at  timestamptz NOT NULL DEFAULT now(),
    -- hashtextextended(storage_key, 0) of each key the batch saw the column name this way.
    keys     bigint[]    NOT NULL
);
CREATE INDEX named_sightings_column ON named_sightings (relid, attnum);

-- A key named both whole and relative to a root has a row each way, so neither way's sighting is taken for the
-- other's and a pair is never written twice: `status` counts a key as named only relatively when every row of it
-- is relative. Rows are no longer updated: no room is left on a page for a new version.
-- The keys are compared bytewise (`COLLATE "C"`): every pair a batch sees probes the primary key once, and a
-- locale's comparison cost a good part of that; the bytewise range `asset_sweeper_names_key` asks is then the primary
-- key's own, and the index kept for it alone goes.
ALTER TABLE named_keys DROP CONSTRAINT named_keys_pkey;
DROP INDEX named_keys_span;
ALTER TABLE named_keys ALTER COLUMN storage_key TYPE text COLLATE "C";
ALTER TABLE named_keys ADD PRIMARY KEY (storage_key, relid, attnum, relative);
ALTER TABLE named_keys RESET (fillfactor);

-- Also shipped: `named_sightings` joins the tables the project owns (`asset_sweeper_own_tables()`,
-- records/sql/retention.sql), on which no retention rule may be declared; and `asset_sweeper_ends_key`
-- (schema/sql/census.sql), the one test of a name relative to a root the database makes.

-- No proof covers a value that was not read (docs/design.md, "When it cannot read"): a value left untried when the
-- census's share of a pass ran out inside a block it was reading value by value is recorded `untried`, and read
-- (whole, or its first part when it alone outlasts the batch limit) before its column's scan may end. Before, it was
-- recorded with nothing read and the column proven over it.
ALTER TABLE census_unread ADD COLUMN untried boolean NOT NULL DEFAULT false;
