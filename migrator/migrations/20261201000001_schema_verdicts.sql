-- Scale: the sweep checks the schema once per pass and records its verdict; the consumer verifies in one
-- cheap statement that the catalog has not changed since, instead of checking it again for every batch.

-- The change detector: a generation number that every committed schema change moves. A row update, not a
-- sequence: a sequence moves before the change commits, so a check could record the new number while still
-- seeing the old catalog. The update is transactional: a check reads the generation before the catalog, so a
-- change that commits after that read always leaves the verdict's generation behind.
CREATE TABLE asset_sweeper_schema_state (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    generation bigint      NOT NULL DEFAULT 0,
    changed_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO asset_sweeper_schema_state DEFAULT VALUES;

-- SECURITY DEFINER with a pinned search_path: the application's own DDL (by a role that may not write this
-- table) moves the generation too.
DO $do$
BEGIN
    EXECUTE format($f$
        CREATE FUNCTION asset_sweeper_bump_schema_generation() RETURNS void
        LANGUAGE sql SECURITY DEFINER SET search_path = %I, pg_catalog AS $body$
            UPDATE asset_sweeper_schema_state SET generation = generation + 1, changed_at = now()
        $body$
    $f$, current_schema());
END
$do$;
-- Every role's DDL calls it (through the event trigger), whatever default privileges say.
GRANT EXECUTE ON FUNCTION asset_sweeper_bump_schema_generation() TO PUBLIC;

-- Declarations are part of the reference map: any write to them is a schema change.
-- Functions here call each other schema-qualified with a pinned search_path: a session whose search_path lacks
-- the sweeper's schema (a migration tool's, a tenant's) must still move the generation.
DO $do$
BEGIN
    EXECUTE format($f$
        CREATE FUNCTION asset_sweeper_declarations_changed() RETURNS trigger
        LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $body$
        BEGIN
            PERFORM %I.asset_sweeper_bump_schema_generation();
            RETURN NULL;
        END
        $body$
    $f$, current_schema());
END
$do$;
CREATE TRIGGER asset_reference_sources_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON asset_reference_sources
    FOR EACH STATEMENT EXECUTE FUNCTION asset_sweeper_declarations_changed();
CREATE TRIGGER asset_reference_exclusions_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON asset_reference_exclusions
    FOR EACH STATEMENT EXECUTE FUNCTION asset_sweeper_declarations_changed();
-- Also in replica sessions (logical replication apply, bulk loaders set session_replication_role = replica).
ALTER TABLE asset_reference_sources ENABLE ALWAYS TRIGGER asset_reference_sources_changed;
ALTER TABLE asset_reference_exclusions ENABLE ALWAYS TRIGGER asset_reference_exclusions_changed;

-- Every DDL command moves the generation, except those that cannot change the reference map (functions,
-- procedures, triggers, comments) and those on temporary objects (an application's per-request temp tables
-- would otherwise invalidate every verdict). Drops are judged by what they dropped, cascades included. The
-- generation's row lock makes concurrent DDL transactions take turns; an error here fails the DDL rather than
-- let a change pass unseen. Only a missing state table (dropped by hand) is let through: the consumer then
-- cannot read the generation and refuses.
DO $do$
BEGIN
    EXECUTE format($f$
        CREATE FUNCTION asset_sweeper_schema_changed() RETURNS event_trigger
        LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $body$
        BEGIN
            IF TG_EVENT = 'sql_drop' THEN
                IF EXISTS (SELECT 1 FROM pg_event_trigger_dropped_objects() d
                            WHERE NOT d.is_temporary
                              AND d.object_type NOT IN ('function', 'procedure', 'aggregate', 'trigger')) THEN
                    PERFORM %1$I.asset_sweeper_bump_schema_generation();
                END IF;
            ELSIF TG_TAG NOT LIKE 'DROP %%' THEN
                IF EXISTS (SELECT 1 FROM pg_event_trigger_ddl_commands() c
                            WHERE c.schema_name IS DISTINCT FROM 'pg_temp'
                              AND c.command_tag NOT IN ('CREATE FUNCTION', 'ALTER FUNCTION', 'CREATE PROCEDURE',
                                                        'ALTER PROCEDURE', 'CREATE AGGREGATE', 'ALTER AGGREGATE',
                                                        'CREATE TRIGGER', 'ALTER TRIGGER', 'COMMENT'))
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

-- Event triggers need a superuser (rds_superuser on RDS). Without one the detector is not installed and the
-- consumer compares the full catalog fingerprint instead: still exact, but its cost grows with the schema.
-- ENABLE ALWAYS: they fire in replica sessions too (pg_restore, logical replication apply).
DO $do$
BEGIN
    CREATE EVENT TRIGGER asset_sweeper_schema_changes ON ddl_command_end
        EXECUTE FUNCTION asset_sweeper_schema_changed();
    CREATE EVENT TRIGGER asset_sweeper_schema_drops ON sql_drop
        EXECUTE FUNCTION asset_sweeper_schema_changed();
    ALTER EVENT TRIGGER asset_sweeper_schema_changes ENABLE ALWAYS;
    ALTER EVENT TRIGGER asset_sweeper_schema_drops ENABLE ALWAYS;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'asset-sweeper: not a superuser, so no schema change detector: consumers verify the whole catalog fingerprint per batch';
END
$do$;

-- The detector as it stands: both event triggers, enabled always, and their catalog rows' versions (a trigger
-- disabled and enabled again between a check and a settle has a new xmin, so the generation alone is not
-- trusted across that gap). NULL when the detector is not fully in place.
CREATE FUNCTION asset_sweeper_detector_state() RETURNS text LANGUAGE sql STABLE AS $$
    WITH parts(ok, part) AS (
        SELECT count(*) = 2 AND bool_and(evtenabled = 'A'),
               string_agg(oid::text || ':' || xmin::text, ',' ORDER BY evtname)
          FROM pg_event_trigger
         WHERE evtname IN ('asset_sweeper_schema_changes', 'asset_sweeper_schema_drops')
           AND evtfoid = to_regproc('asset_sweeper_schema_changed')
        UNION ALL
        -- The declaration triggers, enabled always, and the detector's own functions as they are now: a trigger
        -- disabled or a function replaced since the check is a detector that may have missed something.
        SELECT count(*) = 2 AND bool_and(tgenabled = 'A'), string_agg(oid::text || ':' || xmin::text, ',' ORDER BY tgname)
          FROM pg_trigger
         WHERE tgname IN ('asset_reference_sources_changed', 'asset_reference_exclusions_changed')
           AND tgrelid IN (to_regclass('asset_reference_sources'), to_regclass('asset_reference_exclusions'))
        UNION ALL
        SELECT count(*) = 3, string_agg(oid::text || ':' || xmin::text, ',' ORDER BY proname)
          FROM pg_proc
         WHERE oid IN (to_regproc('asset_sweeper_schema_changed'), to_regproc('asset_sweeper_bump_schema_generation'),
                       to_regproc('asset_sweeper_declarations_changed'))
    )
    SELECT CASE WHEN bool_and(coalesce(ok, false)) THEN string_agg(part, ';') END FROM parts
$$;

-- Everything in the catalog the schema check reads, except the sampled values: user tables and their columns
-- (names, types, privileges), row-level security and owners, schemas and their privileges, domains, foreign keys,
-- indexes, and the declarations and exclusions. Equal fingerprints mean the check would derive the same map.
-- Its cost grows with the schema (a scan of pg_attribute): the detector's generation is the fast path.
CREATE FUNCTION asset_sweeper_catalog_fingerprint() RETURNS text LANGUAGE sql STABLE AS $$
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
    )
    SELECT md5(string_agg(coalesce(part, '-'), E'\n'))
      FROM parts
$$;

-- What the connected role may read: its own attributes and every role whose privileges it has. Role changes are
-- global objects, which no event trigger sees, so this is compared on every verification (it is small).
CREATE FUNCTION asset_sweeper_role_fingerprint() RETURNS text LANGUAGE sql STABLE AS $$
    SELECT md5(string_agg(format('%s %s %s', r.rolname, r.rolsuper, r.rolbypassrls), ',' ORDER BY r.rolname))
      FROM pg_roles r
     WHERE r.rolname = current_user OR pg_has_role(current_user, r.oid, 'USAGE')
$$;

-- One row per schema check a sweep pass made: its verdict, the map it derived, and the catalog state it covered.
-- The consumer settles only on the newest one, and only while the catalog still matches it.
CREATE TABLE schema_verdicts (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    checked_at       timestamptz NOT NULL DEFAULT now(),
    sweep_run_id     uuid,
    valid            boolean     NOT NULL,
    -- Read before the check: a change committed during it leaves these behind, so it is never trusted.
    generation       bigint      NOT NULL,
    detector         text,
    fingerprint      text        NOT NULL,
    role_name        text        NOT NULL,
    role_fingerprint text        NOT NULL,
    sources          jsonb       NOT NULL,
    problems         jsonb       NOT NULL DEFAULT '[]'::jsonb,
    warnings         jsonb       NOT NULL DEFAULT '[]'::jsonb,
    sample_rows      integer     NOT NULL,
    duration_ms      bigint      NOT NULL,
    code_version     text        NOT NULL
);
CREATE INDEX schema_verdicts_checked ON schema_verdicts (checked_at);

-- Only the application's writes move the grace floor (invariant 3). The sweeper's own state writes (a settle,
-- the final-receive `failed` mark, a redrive, a restore) run with `asset_sweeper.actor = 'sweeper'` set for their
-- transaction; were they to move it, a redriven asset would wait a whole grace period more for nothing.
CREATE OR REPLACE FUNCTION asset_sweeper_touch_asset() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Only a real change counts: a statement that merely names a column (SET state = state) is no write.
    IF current_setting('asset_sweeper.actor', true) IS DISTINCT FROM 'sweeper'
       AND (NEW.workspace_id, NEW.storage_key, NEW.content_hash, NEW.byte_size, NEW.state)
           IS DISTINCT FROM (OLD.workspace_id, OLD.storage_key, OLD.content_hash, OLD.byte_size, OLD.state)
    THEN
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION asset_sweeper_touch_stored_object() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('asset_sweeper.actor', true) IS DISTINCT FROM 'sweeper' THEN
        UPDATE stored_objects SET updated_at = now() WHERE storage_key = NEW.storage_key;
    END IF;
    RETURN NULL;
END
$$;
