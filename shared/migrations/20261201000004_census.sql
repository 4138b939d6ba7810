-- The census: the schema check samples each column that is not a reference source (a fast first look); the census
-- reads every such column completely, a bounded batch of table blocks at a time across sweep passes, and records
-- per column when a whole scan last found no asset id in it. Until every column of the schema as it stands has been
-- proven so, nothing is deleted or purged (retiring, which is reversible, goes on).

-- One row per column the census reads, on the table that holds its rows: a partitioned table's columns are read
-- on each leaf partition. A column is named by its table's oid and its attribute number, so a dropped and re-added
-- column, or a table created again under the same name, is a new column and must be proven afresh; a changed type
-- or declared paths reset the row.
CREATE TABLE census_columns (
    relid          oid         NOT NULL,
    attnum         smallint    NOT NULL,
    type_oid       oid         NOT NULL,
    -- For a declared JSONB source: its declared paths. Ids they select (spelled as the recheck matches them) are
    -- references; any other asset id in the document is a finding. Empty for every other column.
    json_paths     text[]      NOT NULL DEFAULT '{}',
    -- The column as the schema check names it (the partitioned root's name for a partition's column).
    table_schema   text        NOT NULL,
    table_name     text        NOT NULL,
    column_name    text        NOT NULL,
    family         text        NOT NULL CHECK (family IN ('uuid', 'text', 'json')),
    shape          text        NOT NULL CHECK (shape IN ('scalar', 'array')),
    added_at       timestamptz NOT NULL DEFAULT now(),
    -- The scan in progress: the next table block to read, and when this scan started.
    next_block     bigint      NOT NULL DEFAULT 0,
    scan_started_at timestamptz,
    -- The census cycle in which this column's last complete scan ended (0: never).
    done_cycle     bigint      NOT NULL DEFAULT 0,
    -- When the last complete scan that found nothing began: what it proves holds from then on.
    proven_at      timestamptz,
    -- What the last scan found: an asset id, and in which cycle.
    found_asset    uuid,
    found_at       timestamptz,
    found_cycle    bigint,
    PRIMARY KEY (relid, attnum)
);

-- The cycle: every column is read once per cycle; the next cycle starts at the pass after the last one ended.
CREATE TABLE census_state (
    singleton                boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    cycle                    bigint      NOT NULL DEFAULT 1,
    -- When the cycle's first batch ran (NULL until it has).
    cycle_started_at         timestamptz,
    last_cycle_completed_at  timestamptz,
    last_cycle_seconds       double precision
);
INSERT INTO census_state DEFAULT VALUES;

-- The verdict names the columns the census had not yet proven when it was recorded: while any is named, the
-- consumer deletes and purges nothing.
ALTER TABLE schema_verdicts ADD COLUMN unproven jsonb NOT NULL DEFAULT '[]';

-- What the census did in each pass.
ALTER TABLE sweep_runs ADD COLUMN census jsonb;

-- The tables that hold each named column's rows, with the column's attribute number and type there: the table
-- itself, or every leaf partition of a partitioned table (a foreign partition holds no rows here and is not read).
-- One home for the expansion: the census keeps its rows by it, and the schema check asks it which are proven.
CREATE FUNCTION asset_sweeper_census_leaves(schemas text[], tables text[], columns text[])
RETURNS TABLE ("position" bigint, relid oid, attnum smallint, type_oid oid)
LANGUAGE sql STABLE AS $$
    SELECT t.position, x.relid, a.attnum, a.atttypid
      FROM unnest(schemas, tables, columns) WITH ORDINALITY AS t(schema_name, table_name, column_name, position)
      JOIN pg_namespace n ON n.nspname = t.schema_name
      JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.table_name AND c.relkind IN ('r', 'p')
     CROSS JOIN LATERAL (
           SELECT c.oid AS relid WHERE c.relkind = 'r'
           UNION ALL
           SELECT p.relid FROM pg_partition_tree(c.oid) p WHERE c.relkind = 'p' AND p.isleaf
     ) x
      JOIN pg_class l ON l.oid = x.relid AND l.relkind = 'r'
      JOIN pg_attribute a ON a.attrelid = x.relid AND a.attname = t.column_name AND a.attnum > 0
                         AND NOT a.attisdropped
$$;
