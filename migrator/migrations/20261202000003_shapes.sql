-- Every spelling of an id Postgres accepts (docs/integrating.md, "Shapes"): besides a mixed case, 32 hex digits
-- without hyphens, hyphens after any group of four, braces. A noted spelling is spliced into a JSON path by
-- `asset_sweeper_id_matches`, so the check keeps it to hex digits, hyphens and one pair of braces, and to the id
-- it names.
ALTER TABLE asset_id_spellings DROP CONSTRAINT asset_id_spellings_check;
ALTER TABLE asset_id_spellings ADD CONSTRAINT asset_id_spellings_spelling_check
    CHECK (spelling ~ '^(\{[0-9a-fA-F]{4}(-?[0-9a-fA-F]{4}){7}\}|[0-9a-fA-F]{4}(-?[0-9a-fA-F]{4}){7})$'
           AND spelling::uuid = asset_id);

-- The census reads every shape that can spell an id: `bytea` (an id's 16 bytes) and `value`, any other type read
-- by its output function (composites, hstore, xml, an extension's types).
ALTER TABLE census_columns DROP CONSTRAINT census_columns_family_check;
ALTER TABLE census_columns ADD CONSTRAINT census_columns_family_check
    CHECK (family IN ('uuid', 'text', 'json', 'bytea', 'value'));

-- What the census (and the sample) found where no source is: each asset id with the column and one row that holds
-- it. A finding holds its asset (it is neither retired, deleted nor purged) and is reported; only a column where
-- many rows hold ids refuses the pass (docs/design.md, "Findings hold assets"). A finding two complete scans of
-- its column did not see again is forgotten, as a named key is.
CREATE TABLE census_findings (
    asset_id uuid        NOT NULL,
    relid    oid         NOT NULL,
    attnum   smallint    NOT NULL,
    -- The row's `ctid` when it was seen: what an operator looks up.
    record   text        NOT NULL,
    seen_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (asset_id, relid, attnum)
);
CREATE INDEX census_findings_column ON census_findings (relid, attnum);

-- Rows holding an asset id: in the scan under way, and in the last complete one. The functions over the census's
-- row type hold it fixed: they go first, and census.sql (changed in the same release) creates them again.
DROP FUNCTION asset_sweeper_keys_unscanned(census_columns, adopted_assets);
DROP FUNCTION asset_sweeper_column_name(census_columns);
ALTER TABLE census_columns ADD COLUMN scan_found_rows bigint NOT NULL DEFAULT 0;
ALTER TABLE census_columns ADD COLUMN found_rows bigint NOT NULL DEFAULT 0;

-- The key scan keeps spans, not every cut of a key (schema/src/census/named.rs): a key is named when a span starts
-- with it, which this index answers by range (bytewise, so a prefix's range is exact whatever the collation).
CREATE INDEX named_keys_span ON named_keys (storage_key COLLATE "C");
