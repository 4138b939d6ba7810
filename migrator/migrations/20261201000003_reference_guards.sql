-- Reference guards for every source that is not a foreign key, and the change detector taught to see them: a guard
-- created, replaced or dropped is a schema change (other function and trigger DDL still is not), and the catalog
-- fingerprint covers the guards as they stand.

-- Reference guards: what a foreign key does for its column, for every other kind of source (an `asset_id` column
-- or array, a declared JSONB document). `asset-sweeper guards install` puts one trigger on each such column,
-- running this function, and the schema check refuses while a source lacks its guard.
--
-- A write that commits a reference locks the referenced asset rows FOR KEY SHARE, as a foreign key's check does:
-- a settle holding an asset (FOR UPDATE) makes the write wait; if the settle then removed the asset, nothing is
-- left to lock and the write fails, naming it. A write that locked first makes the settle wait until it commits,
-- and the settle's recheck then sees the reference and keeps the asset. Ids that were never assets are left
-- alone (a declared path such as `$.**` sees every string in a document); only an id the sweeper removed fails.
-- SECURITY DEFINER: the check reads the sweeper's own tables whatever the writing role may read, as a foreign
-- key's check runs as the table's owner.
DO $do$
BEGIN
    EXECUTE format($f$
        CREATE FUNCTION asset_sweeper_guard() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = %I, pg_catalog, pg_temp AS $body$
        DECLARE
            value jsonb := to_jsonb(NEW) -> TG_ARGV[0];
            ids uuid[];
            removed uuid[];
        BEGIN
            IF value IS NULL OR value = 'null'::jsonb
               OR (TG_OP = 'UPDATE' AND value IS NOT DISTINCT FROM to_jsonb(OLD) -> TG_ARGV[0]) THEN
                RETURN NULL;
            END IF;
            ids := CASE TG_ARGV[1]
                WHEN 'domain' THEN ARRAY[(value #>> '{}')::uuid]
                WHEN 'domain_array' THEN
                    ARRAY(SELECT e::uuid FROM jsonb_array_elements_text(value) AS e WHERE e IS NOT NULL)
                WHEN 'json' THEN
                    ARRAY(SELECT (v #>> '{}')::uuid FROM jsonb_path_query(value, TG_ARGV[2]::jsonpath) AS v
                           WHERE jsonb_typeof(v) = 'string'
                             AND (v #>> '{}') ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$')
            END;
            IF ids IS NULL THEN
                RAISE EXCEPTION 'asset-sweeper guard on %%.%%: unknown source kind %%', TG_TABLE_NAME, TG_ARGV[0], TG_ARGV[1];
            END IF;
            IF cardinality(ids) = 0 THEN
                RETURN NULL;
            END IF;
            PERFORM 1 FROM assets WHERE id = ANY (ids) FOR KEY SHARE;
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

-- The detector: as before, and a guard's trigger or function DDL counts as a change.
DO $do$
BEGIN
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION asset_sweeper_schema_changed() RETURNS event_trigger
        LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $body$
        BEGIN
            IF TG_EVENT = 'sql_drop' THEN
                IF EXISTS (SELECT 1 FROM pg_event_trigger_dropped_objects() d
                            WHERE NOT d.is_temporary
                              AND (d.object_type NOT IN ('function', 'procedure', 'aggregate', 'trigger')
                                   OR d.object_identity LIKE '%%asset\_sweeper\_guard%%')) THEN
                    PERFORM %1$I.asset_sweeper_bump_schema_generation();
                END IF;
            ELSIF TG_TAG NOT LIKE 'DROP %%' THEN
                IF EXISTS (SELECT 1 FROM pg_event_trigger_ddl_commands() c
                            WHERE c.schema_name IS DISTINCT FROM 'pg_temp'
                              AND c.command_tag NOT IN ('CREATE FUNCTION', 'ALTER FUNCTION', 'CREATE PROCEDURE',
                                                        'ALTER PROCEDURE', 'CREATE AGGREGATE', 'ALTER AGGREGATE',
                                                        'CREATE TRIGGER', 'ALTER TRIGGER', 'COMMENT')
                                   OR c.object_identity LIKE '%%asset\_sweeper\_guard%%')
                   OR NOT EXISTS (SELECT 1 FROM pg_event_trigger_ddl_commands()) THEN
                    PERFORM %1$I.asset_sweeper_bump_schema_generation();
                END IF;
            END IF;
        EXCEPTION WHEN undefined_table THEN
            -- Only the state table dropped by hand passes (the consumer then cannot read it and refuses);
            -- anything else fails the DDL rather than let a change pass unseen.
            IF to_regclass(%1$L) IS NOT NULL THEN
                RAISE;
            END IF;
            RAISE WARNING 'asset-sweeper: the schema change detector has lost its state table; settles refuse until it is restored';
        END
        $body$
    $f$, current_schema(), current_schema() || '.asset_sweeper_schema_state');
END
$do$;

CREATE OR REPLACE FUNCTION asset_sweeper_catalog_fingerprint() RETURNS text LANGUAGE sql STABLE AS $$
    WITH user_ns AS (
        SELECT oid, nspname, nspacl FROM pg_namespace
         WHERE nspname NOT IN ('pg_catalog', 'information_schema') AND nspname NOT LIKE 'pg\_%'
    ),
    rels AS (
        SELECT c.oid, c.relname, c.relnamespace, c.relkind, c.relispartition, c.relrowsecurity,
               c.relforcerowsecurity, c.relowner, c.relacl
          FROM pg_class c JOIN user_ns n ON n.oid = c.relnamespace
         WHERE c.relkind IN ('r', 'p')
    ),
    parts(part) AS (
        SELECT 'a' || (SELECT oid FROM pg_class WHERE oid = 'assets'::regclass)::text
        UNION ALL
        SELECT string_agg(format('n%s %s %s', oid, nspname, nspacl), ',' ORDER BY oid) FROM user_ns
        UNION ALL
        SELECT string_agg(format('r%s %s %s %s %s %s %s %s %s', oid, relname, relnamespace, relkind, relispartition,
                                 relrowsecurity, relforcerowsecurity, relowner, relacl), ',' ORDER BY oid) FROM rels
        UNION ALL
        SELECT string_agg(format('c%s %s %s %s', a.attrelid, a.attnum, a.attname, a.atttypid) ||
                          coalesce(' ' || a.attacl::text, ''), ',' ORDER BY a.attrelid, a.attnum)
          FROM pg_attribute a JOIN rels r ON r.oid = a.attrelid
         WHERE a.attnum > 0 AND NOT a.attisdropped
        UNION ALL
        SELECT string_agg(format('t%s %s %s %s', oid, typname, typnamespace, typbasetype), ',' ORDER BY oid)
          FROM pg_type WHERE typtype = 'd'
        UNION ALL
        SELECT string_agg(format('f%s %s %s %s %s %s %s', oid, conrelid, conkey, confrelid, confkey, confdeltype,
                                 conparentid), ',' ORDER BY oid)
          FROM pg_constraint WHERE contype = 'f'
        UNION ALL
        SELECT string_agg(format('i%s %s %s %s %s %s %s %s', i.indexrelid, i.indrelid, i.indkey, i.indisprimary,
                                 i.indisvalid, i.indpred IS NULL, i.indexprs IS NULL, ic.relam), ','
                          ORDER BY i.indexrelid)
          FROM pg_index i JOIN rels r ON r.oid = i.indrelid JOIN pg_class ic ON ic.oid = i.indexrelid
        UNION ALL
        SELECT string_agg(format('s%s %s %s %s %s', id, table_schema, table_name, column_name, json_path), ','
                          ORDER BY id)
          FROM asset_reference_sources
        UNION ALL
        SELECT string_agg(format('x%s %s %s', table_schema, table_name, column_name), ','
                          ORDER BY table_schema, table_name, column_name)
          FROM asset_reference_exclusions
        UNION ALL
        -- The reference guards as they stand, and the function they run.
        SELECT string_agg(format('g%s %s %s %s %s %s %s %s', t.oid, t.tgrelid, t.tgname, t.tgenabled, t.tgfoid,
                                 t.tgtype, t.tgattr, encode(t.tgargs, 'hex')), ',' ORDER BY t.oid)
          FROM pg_trigger t WHERE t.tgname LIKE 'asset\_sweeper\_guard\_%'
        UNION ALL
        SELECT string_agg(format('p%s %s', p.oid, md5(p.prosrc)), ',' ORDER BY p.oid)
          FROM pg_proc p WHERE p.oid = to_regproc('asset_sweeper_guard')
    )
    SELECT md5(string_agg(coalesce(part, '-'), E'\n'))
      FROM parts
$$;
