-- The schema change detector: a generation number every committed schema change moves (the tables,
-- asset_sweeper_schema_state and asset_sweeper_schema_changes, are versioned migrations'), the event triggers and declaration triggers that move
-- it, and the fingerprints a verification compares when the generation alone is not to be trusted.
--
-- Applied by the migrator after the versioned migrations, whenever this file's text changed: the live definition of
-- each function and trigger here, once (the migrations' older copies are history). Triggers are replaced in place,
-- which resets them to fire on origin only, so each is enabled always again below.

-- No function of the detector can be called: a trigger function runs only as its trigger, so no role can report
-- a change that did not happen. Each change appends a row to `asset_sweeper_schema_changes` (inserts never wait
-- for each other, and no role but the owner can write it or lock it beyond reading, so no session can hold up
-- another's DDL);
-- the generation is the count folded into `asset_sweeper_schema_state` plus the rows appended since, and each sweep
-- pass folds them. Every function here runs SECURITY DEFINER as the owner with `search_path = pg_catalog,
-- pg_temp` and names the sweeper's objects by schema: the application's DDL runs them, on its own path.

-- The generation now. Folding leaves it where it was.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_schema_generation() RETURNS bigint
    LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT s.generation + (SELECT count(*) FROM asset_sweeper_private.asset_sweeper_schema_changes)
      FROM asset_sweeper_private.asset_sweeper_schema_state s
$$;

-- When the schema last changed, folded or not: deletes and purges wait a quiet period after it
-- (SCHEMA_QUIET_PERIOD), since a migration half done may still fill a column the census has read empty.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_schema_changed_at() RETURNS timestamptz
    LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT greatest(s.changed_at, (SELECT max(c.changed_at) FROM asset_sweeper_private.asset_sweeper_schema_changes c))
      FROM asset_sweeper_private.asset_sweeper_schema_state s
$$;

-- Folds the changes appended since the last fold into the state row, in one statement: a reader sees either the
-- rows or the count they went into. The sweep, one at a time, calls it before each schema check. SECURITY DEFINER:
-- the sweeper's logins may not write the detector's tables (a change row deleted would hide a DDL change); this
-- only moves rows into the count, which never goes down.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_fold_schema_changes() RETURNS bigint
    LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH folded AS (DELETE FROM asset_sweeper_private.asset_sweeper_schema_changes RETURNING changed_at),
         moved AS (UPDATE asset_sweeper_private.asset_sweeper_schema_state
                      SET generation = generation + (SELECT count(*) FROM folded),
                          changed_at = greatest(changed_at, (SELECT max(changed_at) FROM folded))
                    WHERE (SELECT count(*) FROM folded) > 0
                   RETURNING 1)
    SELECT count(*) FROM folded
$$;

-- Declarations are part of the reference map: any write to them is a schema change.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_declarations_changed() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO asset_sweeper_private.asset_sweeper_schema_changes DEFAULT VALUES;
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER asset_reference_sources_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON asset_sweeper_private.asset_reference_sources
    FOR EACH STATEMENT EXECUTE FUNCTION asset_sweeper.asset_sweeper_declarations_changed();
CREATE OR REPLACE TRIGGER asset_reference_exclusions_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON asset_sweeper_private.asset_reference_exclusions
    FOR EACH STATEMENT EXECUTE FUNCTION asset_sweeper.asset_sweeper_declarations_changed();
-- Also in replica sessions (logical replication apply, bulk loaders set session_replication_role = replica).
ALTER TABLE asset_sweeper_private.asset_reference_sources ENABLE ALWAYS TRIGGER asset_reference_sources_changed;
ALTER TABLE asset_sweeper_private.asset_reference_exclusions ENABLE ALWAYS TRIGGER asset_reference_exclusions_changed;

-- The older detector's bump, which any role could call and hold the generation's row with, is gone.
DROP FUNCTION IF EXISTS asset_sweeper.asset_sweeper_bump_schema_generation();

-- Every DDL command is a change, except those that cannot change the reference map (functions, procedures,
-- comments; a trigger can: a guard renamed and dropped, or one of the application's that rewrites a guarded column) and those on temporary objects (an application's per-request temp tables would otherwise
-- invalidate every verdict). Drops are judged by what they dropped, cascades included. An error here fails the DDL
-- rather than let a change pass unseen. Only a missing changes table (dropped by hand) is let through: the
-- consumer then cannot read the generation and refuses. A reference guard's trigger or function DDL is a change
-- all the same: the schema check refuses while a source lacks its guard.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_schema_changed() RETURNS event_trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_EVENT = 'sql_drop' THEN
        IF EXISTS (SELECT 1 FROM pg_event_trigger_dropped_objects() d
                    WHERE NOT d.is_temporary
                      AND (d.object_type NOT IN ('function', 'procedure', 'aggregate')
                           OR d.object_identity LIKE '%asset\_sweeper\_guard%')) THEN
            INSERT INTO asset_sweeper_private.asset_sweeper_schema_changes DEFAULT VALUES;
        END IF;
    ELSIF TG_TAG NOT LIKE 'DROP %' THEN
        IF EXISTS (SELECT 1 FROM pg_event_trigger_ddl_commands() c
                    WHERE c.schema_name IS DISTINCT FROM 'pg_temp'
                      AND c.command_tag NOT IN ('CREATE FUNCTION', 'ALTER FUNCTION', 'CREATE PROCEDURE',
                                                'ALTER PROCEDURE', 'CREATE AGGREGATE', 'ALTER AGGREGATE', 'COMMENT')
                           OR c.object_identity LIKE '%asset\_sweeper\_guard%')
           OR NOT EXISTS (SELECT 1 FROM pg_event_trigger_ddl_commands()) THEN
            INSERT INTO asset_sweeper_private.asset_sweeper_schema_changes DEFAULT VALUES;
        END IF;
    END IF;
EXCEPTION WHEN undefined_table THEN
    -- Only the changes table dropped by hand passes (the consumer then cannot read it and refuses); anything else
    -- fails the DDL rather than let a change pass unseen.
    IF to_regclass('asset_sweeper_private.asset_sweeper_schema_changes') IS NOT NULL THEN
        RAISE;
    END IF;
    RAISE WARNING 'asset-sweeper: the schema change detector has lost its table; settles refuse until it is restored';
END
$$;

-- Event triggers need a superuser (rds_superuser on RDS). Without one the detector is not installed and the
-- consumer compares the full catalog fingerprint instead: still exact, but its cost grows with the schema.
-- ENABLE ALWAYS: they fire in replica sessions too (pg_restore, logical replication apply). They have no
-- OR REPLACE, so they are created afresh.
DO $do$
BEGIN
    DROP EVENT TRIGGER IF EXISTS asset_sweeper_schema_changes;
    DROP EVENT TRIGGER IF EXISTS asset_sweeper_schema_drops;
    CREATE EVENT TRIGGER asset_sweeper_schema_changes ON ddl_command_end
        EXECUTE FUNCTION asset_sweeper.asset_sweeper_schema_changed();
    CREATE EVENT TRIGGER asset_sweeper_schema_drops ON sql_drop
        EXECUTE FUNCTION asset_sweeper.asset_sweeper_schema_changed();
    ALTER EVENT TRIGGER asset_sweeper_schema_changes ENABLE ALWAYS;
    ALTER EVENT TRIGGER asset_sweeper_schema_drops ENABLE ALWAYS;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'asset-sweeper: not a superuser, so no schema change detector: consumers verify the whole catalog fingerprint per batch';
END
$do$;

-- The detector as it stands: both event triggers, enabled always, and their catalog rows' versions (a trigger
-- disabled and enabled again between a check and a settle has a new xmin, so the generation alone is not
-- trusted across that gap). NULL when the detector is not fully in place.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_detector_state() RETURNS text
    LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    WITH parts(ok, part) AS (
        SELECT count(*) = 2 AND bool_and(evtenabled = 'A'),
               string_agg(oid::text || ':' || xmin::text, ',' ORDER BY evtname)
          FROM pg_event_trigger
         WHERE evtname IN ('asset_sweeper_schema_changes', 'asset_sweeper_schema_drops')
           AND evtfoid = to_regproc('asset_sweeper.asset_sweeper_schema_changed')
        UNION ALL
        -- The declaration triggers, enabled always, and the detector's own functions as they are now: a trigger
        -- disabled or a function replaced since the check is a detector that may have missed something.
        SELECT count(*) = 2 AND bool_and(tgenabled = 'A'), string_agg(oid::text || ':' || xmin::text, ',' ORDER BY tgname)
          FROM pg_trigger
         WHERE tgname IN ('asset_reference_sources_changed', 'asset_reference_exclusions_changed')
           AND tgrelid IN (to_regclass('asset_sweeper_private.asset_reference_sources'),
                           to_regclass('asset_sweeper_private.asset_reference_exclusions'))
        UNION ALL
        SELECT count(*) = 2, string_agg(oid::text || ':' || xmin::text, ',' ORDER BY proname)
          FROM pg_proc
         WHERE oid IN (to_regproc('asset_sweeper.asset_sweeper_schema_changed'),
                       to_regproc('asset_sweeper.asset_sweeper_declarations_changed'))
    )
    SELECT CASE WHEN bool_and(coalesce(ok, false)) THEN string_agg(part, ';') END FROM parts
$$;

-- Everything in the catalog the schema check reads, except the sampled values: user tables and their columns
-- (names, types, privileges), row-level security and owners, schemas and their privileges, domains, foreign keys,
-- indexes, the declarations and exclusions, and the reference guards with the function they run. Equal
-- fingerprints mean the check would derive the same map. Its cost grows with the schema (a scan of pg_attribute):
-- the detector's generation is the fast path.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_catalog_fingerprint() RETURNS text
    LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
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
        SELECT 'a' || (SELECT oid FROM pg_class WHERE oid = 'asset_sweeper_private.assets'::regclass)::text
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
        -- Composite types' fields: an `asset_id` field added to one makes every column of it a source.
        SELECT string_agg(format('k%s %s %s', a.attrelid, a.attnum, a.atttypid), ',' ORDER BY a.attrelid, a.attnum)
          FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid AND c.relkind = 'c'
          JOIN user_ns n ON n.oid = c.relnamespace
         WHERE a.attnum > 0 AND NOT a.attisdropped
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
          FROM asset_sweeper_private.asset_reference_sources
        UNION ALL
        SELECT string_agg(format('x%s %s %s %s', table_schema, table_name, column_name, excludes), ','
                          ORDER BY table_schema, table_name, column_name)
          FROM asset_sweeper_private.asset_reference_exclusions
        UNION ALL
        -- The reference guards as they stand, and the function they run.
        SELECT string_agg(format('g%s %s %s %s %s %s %s %s', t.oid, t.tgrelid, t.tgname, t.tgenabled, t.tgfoid,
                                 t.tgtype, t.tgattr, encode(t.tgargs, 'hex')), ',' ORDER BY t.oid)
          FROM pg_trigger t WHERE t.tgname LIKE 'asset\_sweeper\_guard\_%'
        UNION ALL
        SELECT string_agg(format('p%s %s', p.oid, md5(p.prosrc)), ',' ORDER BY p.oid)
          FROM pg_proc p WHERE p.oid = to_regproc('asset_sweeper.asset_sweeper_guard')
    )
    SELECT md5(string_agg(coalesce(part, '-'), E'\n'))
      FROM parts
$$;

-- What a role may read: its own attributes and every role whose privileges it has (the verdict's role, which the
-- sweep checked the schema as). Role changes are global objects, which no event trigger sees, so this is compared
-- on every verification (it is small).
DROP FUNCTION IF EXISTS asset_sweeper.asset_sweeper_role_fingerprint();
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_role_fingerprint(role_name text DEFAULT current_user)
    RETURNS text LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    -- A superuser reads everything whatever roles come and go: its own attributes are the whole of its rights.
    SELECT CASE WHEN (SELECT s.rolsuper FROM pg_roles s WHERE s.rolname = role_name)
                THEN md5(format('%s superuser', role_name))
                ELSE md5(string_agg(format('%s %s %s', r.rolname, r.rolsuper, r.rolbypassrls), ',' ORDER BY r.rolname))
           END
      FROM pg_roles r
     WHERE r.rolname = role_name
        OR CASE WHEN EXISTS (SELECT 1 FROM pg_roles m WHERE m.rolname = role_name)
                THEN pg_has_role(role_name, r.oid, 'USAGE') ELSE false END
$$;

-- A settle's confirmation, inside its own transaction, that the catalog it destroys under is the one its verdict
-- was made on (docs/design.md, "The schema at commit"): a lock that every DDL command's change row must wait for,
-- then the generation as it stands. A DDL command committed before it has moved the generation; one in flight
-- holds the lock's conflicting mode, so the settle does not get it; one that starts after waits for the settle's
-- commit. The lock is never queued for: a settle that queued behind a migration (waiting on a table the settle's
-- recheck read) would make that migration a deadlock's victim. Autovacuum holds a conflicting mode too, for the few
-- milliseconds it takes to vacuum or analyze this small table (the fold deletes its rows), so a refused lock is
-- asked again, without queueing, for about a third of a second before the settle holds the asset. NULL when the lock
-- stayed taken. SECURITY DEFINER: no role but the owner may lock the changes table otherwise.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_hold_schema() RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    generation bigint;
BEGIN
    FOR attempt IN 0..5 LOOP
        BEGIN
            LOCK TABLE asset_sweeper_private.asset_sweeper_schema_changes IN SHARE MODE NOWAIT;
            -- A statement of its own, so its snapshot is taken with the lock held.
            SELECT asset_sweeper.asset_sweeper_schema_generation() INTO generation;
            RETURN generation;
        EXCEPTION WHEN lock_not_available THEN
            -- 10, 20, 40, 80, 160 ms: 310 ms in all, and no wait at the end.
            IF attempt < 5 THEN
                PERFORM pg_sleep(0.01 * power(2, attempt));
            END IF;
        END;
    END LOOP;
    RETURN NULL;
END
$$;
