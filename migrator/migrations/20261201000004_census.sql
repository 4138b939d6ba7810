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
    -- The scan in progress: the next table block to read, when this scan started, and the table's file then. A
    -- rewrite (VACUUM FULL, CLUSTER, a type change) gives the table a new file whose rows sit at other blocks: the
    -- scan starts again rather than trust a cursor into the old one.
    next_block     bigint      NOT NULL DEFAULT 0,
    scan_started_at timestamptz,
    filenode       oid,
    -- The census cycle in which this column's last complete scan ended (0: never).
    done_cycle     bigint      NOT NULL DEFAULT 0,
    -- When the last complete scan that found nothing began. What it proves: every row of the table as the scan met
    -- it; a row written, or moved by an update into a block already read, while the scan ran is the next cycle's.
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
-- consumer deletes and purges nothing. NULL in a verdict recorded before the census existed, which the consumer
-- reads as nothing proven.
ALTER TABLE schema_verdicts ADD COLUMN unproven jsonb;

-- What the census did in each pass.
ALTER TABLE sweep_runs ADD COLUMN census jsonb;

-- A table's size in blocks now (0 once it is gone): the census's cursor counts blocks, and so does its plan.
CREATE FUNCTION asset_sweeper_blocks(relid oid) RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT coalesce(pg_relation_size(relid) / current_setting('block_size')::bigint, 0)
$$;

-- The tables that hold each named column's rows, with the column's attribute number and type there: the table
-- itself, or every leaf partition of a partitioned table (a foreign partition holds no rows here and is not read).
-- One home for the expansion: the census keeps its rows by it, and the schema check asks it which are proven.
CREATE FUNCTION asset_sweeper_census_leaves(schemas text[], tables text[], columns text[])
RETURNS TABLE ("position" bigint, relid oid, attnum smallint, type_oid oid)
LANGUAGE sql STABLE AS $$
    -- In steps, so each join has both halves of its catalog index (a lateral union here made the planner look
    -- columns up by name alone, across every table: seconds for a thousand tables).
    WITH roots AS MATERIALIZED (
        SELECT t.position, t.column_name, c.oid, c.relkind
          FROM unnest(schemas, tables, columns) WITH ORDINALITY AS t(schema_name, table_name, column_name, position)
          JOIN pg_namespace n ON n.nspname = t.schema_name
          JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.table_name AND c.relkind IN ('r', 'p')
    ),
    leaves AS MATERIALIZED (
        SELECT r.position, r.column_name, r.oid AS relid FROM roots r WHERE r.relkind = 'r'
        UNION ALL
        SELECT r.position, r.column_name, p.relid
          FROM roots r CROSS JOIN LATERAL pg_partition_tree(r.oid) p
         WHERE r.relkind = 'p' AND p.isleaf
    )
    SELECT l.position, l.relid, a.attnum, a.atttypid
      FROM leaves l
      JOIN pg_class k ON k.oid = l.relid AND k.relkind = 'r'
      JOIN pg_attribute a ON a.attrelid = l.relid AND a.attname = l.column_name AND a.attnum > 0
                         AND NOT a.attisdropped
$$;

-- Ids in mixed letter case. The recheck finds a JSON reference through the document's GIN index, which matches
-- strings exactly; it asks for the id written all lowercase, all uppercase, and every other spelling noted here.
-- The reference guard notes the spelling of each asset id a write puts at a declared path in mixed case (in the
-- writing transaction, so a settle that sees the document sees the note), and the census notes those it finds in
-- documents written before the guard. A note outliving its document costs one more alternative in the recheck.
CREATE TABLE asset_id_spellings (
    asset_id  uuid        NOT NULL,
    spelling  text        NOT NULL CHECK (lower(spelling) = asset_id::text),
    noted_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (asset_id, spelling)
);

-- The guard, as before, with three changes: it notes mixed-case spellings at a declared path (whether or not the
-- asset exists yet: an application may write an id before its row), it reads the path as the recheck does (a
-- filter on strings, so a path that selects an array reaches the ids in it), and a strict path that does not
-- match a document selects nothing instead of failing the write, as `@?` does for the recheck.
DO $do$
BEGIN
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION asset_sweeper_guard() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = %I, pg_catalog, pg_temp AS $body$
        DECLARE
            value jsonb := to_jsonb(NEW) -> TG_ARGV[0];
            ids uuid[];
            -- For a JSON source: the uuid-shaped strings its path selects, as written.
            spelled text[];
            removed uuid[];
        BEGIN
            IF value IS NULL OR value = 'null'::jsonb
               OR (TG_OP = 'UPDATE' AND value IS NOT DISTINCT FROM to_jsonb(OLD) -> TG_ARGV[0]) THEN
                RETURN NULL;
            END IF;
            IF TG_ARGV[1] = 'json' THEN
                spelled := ARRAY(
                    SELECT v #>> '{}'
                      FROM jsonb_path_query(value, (TG_ARGV[2] || ' ? (@.type() == "string")')::jsonpath, '{}', true) AS v
                     WHERE (v #>> '{}') ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$');
            END IF;
            ids := CASE TG_ARGV[1]
                WHEN 'domain' THEN ARRAY[(value #>> '{}')::uuid]
                WHEN 'domain_array' THEN
                    ARRAY(SELECT e::uuid FROM jsonb_array_elements_text(value) AS e WHERE e IS NOT NULL)
                WHEN 'json' THEN ARRAY(SELECT s::uuid FROM unnest(spelled) AS s)
            END;
            IF ids IS NULL THEN
                RAISE EXCEPTION 'asset-sweeper guard on %%.%%: unknown source kind %%', TG_TABLE_NAME, TG_ARGV[0], TG_ARGV[1];
            END IF;
            IF cardinality(ids) = 0 THEN
                RETURN NULL;
            END IF;
            PERFORM 1 FROM assets WHERE id = ANY (ids) FOR KEY SHARE;
            IF TG_ARGV[1] = 'json' AND EXISTS (SELECT 1 FROM unnest(spelled) AS s WHERE s NOT IN (lower(s), upper(s))) THEN
                INSERT INTO asset_id_spellings (asset_id, spelling)
                SELECT DISTINCT s::uuid, s FROM unnest(spelled) AS s WHERE s NOT IN (lower(s), upper(s))
                ON CONFLICT DO NOTHING;
            END IF;
            SELECT array_agg(DISTINCT i) INTO removed FROM unnest(ids) AS i
             WHERE NOT EXISTS (SELECT 1 FROM assets a WHERE a.id = i)
               AND EXISTS (SELECT 1 FROM settlement_events e WHERE e.asset_id = i AND e.action IN ('delete', 'purge'));
            IF removed IS NOT NULL THEN
                RAISE EXCEPTION USING
                    ERRCODE = 'foreign_key_violation',
                    MESSAGE = format('asset-sweeper: %%I.%%I.%%I refers to asset %%s, which asset-sweeper has removed',
                                     TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[0], array_to_string(removed, ', ')),
                    HINT = 'Refer to an asset that exists; asset-sweeper undelete brings a removed one back while the bucket keeps its bytes.';
            END IF;
            RETURN NULL;
        END
        $body$
    $f$, current_schema());
END
$do$;
