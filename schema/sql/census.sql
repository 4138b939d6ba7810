-- The census: it reads every column that is not a reference source completely, a bounded batch of table blocks
-- at a time across sweep passes, and its key scan finds the keys of ours a record names. Here: a table's size in
-- blocks (the cursor's unit), the tables a named column's rows are on, a census column's name, and whether a
-- column leaves an adopted asset unscanned for keys. How a JSON document is matched against an asset id
-- (`asset_sweeper_id_matches`, `asset_sweeper_path_matching`) is in guards.sql, beside the guard that notes the
-- spellings it reads.
--
-- Applied by the migrator after the versioned migrations, whenever this file's text changed.

-- A table's size in blocks now (0 once it is gone): the census's cursor counts blocks, and so does its plan.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_blocks(relid oid) RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT coalesce(pg_relation_size(relid) / current_setting('block_size')::bigint, 0)
$$;

-- A table the sample's witness can vouch for (schema/src/sample/witness.rs): a plain table of Postgres's own heap,
-- which never changes a row version in place (another access method may), with no inheritance children, whose rows
-- a read of it would return as its own.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_plain_heap(relid oid) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT c.relkind = 'r' AND NOT c.relhassubclass AND a.amname = 'heap'
                       FROM pg_catalog.pg_class c JOIN pg_catalog.pg_am a ON a.oid = c.relam
                      WHERE c.oid = relid), false)
$$;

-- The tables that hold each named column's rows, with the column's attribute number and type there: the table or
-- materialized view itself, or every leaf partition of a partitioned table (a foreign partition holds no rows here
-- and is not read: the schema check refuses its column by name).
-- One home for the expansion: the census keeps its rows by it, and the schema check asks it which are proven.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_census_leaves(schemas text[], tables text[], columns text[])
RETURNS TABLE ("position" bigint, relid oid, attnum smallint, type_oid oid)
LANGUAGE sql STABLE AS $$
    -- In steps, so each join has both halves of its catalog index (a lateral union here made the planner look
    -- columns up by name alone, across every table: seconds for a thousand tables).
    WITH roots AS MATERIALIZED (
        SELECT t.position, t.column_name, c.oid, c.relkind
          FROM unnest(schemas, tables, columns) WITH ORDINALITY AS t(schema_name, table_name, column_name, position)
          JOIN pg_namespace n ON n.nspname = t.schema_name
          JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.table_name AND c.relkind IN ('r', 'p', 'm')
    ),
    leaves AS MATERIALIZED (
        SELECT r.position, r.column_name, r.oid AS relid FROM roots r WHERE r.relkind IN ('r', 'm')
        UNION ALL
        SELECT r.position, r.column_name, p.relid
          FROM roots r CROSS JOIN LATERAL pg_partition_tree(r.oid) p
         WHERE r.relkind = 'p' AND p.isleaf
    )
    SELECT l.position, l.relid, a.attnum, a.atttypid
      FROM leaves l
      JOIN pg_class k ON k.oid = l.relid AND k.relkind IN ('r', 'm')
      JOIN pg_attribute a ON a.attrelid = l.relid AND a.attname = l.column_name AND a.attnum > 0
                         AND NOT a.attisdropped
$$;

-- Whether column `c` leaves adopted asset `d` unscanned for keys: a column the key scan reads (text, JSON, or one
-- read by its output function, not excluded for keys) not key-scanned at all, not in a scan begun after the
-- adoption, or not with the layout that adopted it. One home for the test the sweep makes adopted assets due by
-- and the consumer holds them by.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_keys_unscanned(c asset_sweeper_private.census_columns, d asset_sweeper_private.adopted_assets) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN c.family IN ('text', 'json', 'value') AND c.reads <> 'ids'
           AND (c.keys_proven_at IS NULL OR c.keys_proven_at <= d.adopted_at OR c.keys_layout IS DISTINCT FROM d.layout);

-- A census column as the schema check names it: `schema.table.column`.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_column_name(c asset_sweeper_private.census_columns) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN format('%s.%s.%s', c.table_schema, c.table_name, c.column_name);

-- What each of `roots` (column types) is made of, however deep: itself, an array's element, a domain's base, a
-- composite's fields, and so on down, each with whether a composite stands on the way to it. One home for how
-- the schema check tells a column's shape: a reference source (the `asset_id` domain inside a composite) and a
-- census target (the family its values are read as) are both read off it. Walked down from the types columns
-- use, by the catalog's indexes, so its cost grows with the types in use, not with every type there is.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_type_parts(roots oid[])
RETURNS TABLE (root oid, part oid, nested boolean)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    WITH RECURSIVE walk(root, part, nested) AS (
        SELECT r, r, false FROM unnest(roots) AS r
        UNION
        SELECT w.root, c.child, w.nested OR t.typtype = 'c'
          FROM walk w
          JOIN pg_type t ON t.oid = w.part
         CROSS JOIN LATERAL (
              SELECT t.typelem WHERE t.typcategory = 'A' AND t.typelem <> 0 AND t.typtype <> 'd'
              UNION ALL
              SELECT t.typbasetype WHERE t.typtype = 'd'
              UNION ALL
              SELECT f.atttypid FROM pg_attribute f
               WHERE t.typtype = 'c' AND f.attrelid = t.typrelid AND f.attnum > 0 AND NOT f.attisdropped
         ) AS c(child)
    )
    SELECT root, part, nested FROM walk
$$;

-- Whether `name` names `storage_key` relative to a root: it is the key with leading path segments removed, down to
-- its file name, cut after a `/`. One home for the key scan's resolution in the database and the naming probe's.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_ends_key(storage_key text, name text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN right(storage_key, length(name) + 1) = '/' || name;

-- Whether `span`, kept by the key scan, names `storage_key`: it starts with it (the walk that made the span met the
-- key's end, since a key of ours matches the pattern). Written as a bytewise range `named_keys`' primary key (its
-- keys compared bytewise) answers, then exactly. One home for the test the sweep makes adopted assets due by and the consumer holds them by.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_names_key(span text, storage_key text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN span COLLATE "C" >= storage_key COLLATE "C"
           AND span COLLATE "C" < (storage_key || chr(1114111)) COLLATE "C"
           AND starts_with(span, storage_key);

-- Locks each of `relations` (quoted names) against a change of its columns' types until the caller's transaction
-- ends (ACCESS SHARE, which `ALTER TABLE ... TYPE` must wait for), then fails with SQLSTATE AS001, naming the
-- column, when one of `columns` is gone or its type is no longer `types` (an oid, or the name `format_type` or
-- `regtype` prints). What every statement of the sweeper's that reads an application's column by a reading
-- planned for its type asks first, in the same transaction: Postgres resolves a cast, an operator or a function
-- when it parses a statement, by the types the catalog shows then, so a column the application retyped to a type
-- of its own, with a cast of its own, would run that cast as the sweeper (docs/security.md, "The rule"). Not
-- pinned to a path: the type names are compared as the caller's session prints them.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_read_as_planned(relations text[], columns text[], types text[])
RETURNS void LANGUAGE plpgsql AS $$
    DECLARE
        relation text;
        changed record;
    BEGIN
        FOR relation IN SELECT DISTINCT r FROM pg_catalog.unnest(relations) AS r ORDER BY 1 LOOP
            -- A materialized view cannot be locked by name, and has no column whose type can change: it is dropped
            -- and made again (another relation under the same name, whose columns the check below reads). Reading
            -- nothing of it takes the same lock, until the transaction ends.
            IF (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = relation::regclass) = 'm' THEN
                EXECUTE pg_catalog.format('SELECT FROM ONLY %s LIMIT 0', relation::regclass);
            ELSE
                EXECUTE pg_catalog.format('LOCK TABLE ONLY %s IN ACCESS SHARE MODE', relation::regclass);
            END IF;
        END LOOP;
        SELECT p.relation, p.col, p.planned, pg_catalog.format_type(a.atttypid, a.atttypmod) AS now INTO changed
          FROM unnest(relations, columns, types) AS p(relation, col, planned)
          LEFT JOIN pg_catalog.pg_attribute a
                 ON a.attrelid = p.relation::regclass AND a.attname = p.col AND a.attnum > 0 AND NOT a.attisdropped
         WHERE a.atttypid IS NULL
            OR p.planned NOT IN (a.atttypid::text, pg_catalog.format_type(a.atttypid, a.atttypmod),
                                 a.atttypid::regtype::text)
         LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION USING
                ERRCODE = 'AS001',
                MESSAGE = pg_catalog.format('asset-sweeper: %s.%I is %s now, not the type its reading was planned for (%s): not read',
                                            changed.relation, changed.col, coalesce(changed.now, 'gone'),
                                            CASE WHEN changed.planned ~ '^[0-9]+$'
                                                 THEN pg_catalog.format_type(changed.planned::oid, NULL)
                                                 ELSE changed.planned END),
                HINT = 'The next pass plans the column for its new type; until its census reads it again, it is unproven.';
        END IF;
    END
$$;
