-- The role model (docs/security.md): who may do what with the sweeper's schemas. The owner is the role that
-- migrates; it owns the schemas `asset_sweeper` (functions, types, the application's views) and
-- `asset_sweeper_private` (every table) and everything in them, and no other role may create there. Four group
-- roles (NOLOGIN) carry the grants; a DBA makes each login a member of exactly one:
--
--   asset_sweeper_sweep        the sweep function         GRANT asset_sweeper_sweep TO sweep_login;
--   asset_sweeper_consumer     the consumer function      GRANT asset_sweeper_consumer TO consumer_login;
--   asset_sweeper_operator     people with the CLI        GRANT asset_sweeper_operator TO alice;
--   asset_sweeper_application  the application's roles    GRANT asset_sweeper_application TO app;
--
-- A fifth, `asset_sweeper_contract`, has no member but the owner: it owns the application's views, so what a view
-- may do to its table is what this role holds (contract.sql says why).
--
-- What the functions read and delete of the application's own tables is granted by the application's DBA, to the
-- function roles (docs/security.md lists it); nothing here reaches outside the sweeper's schema.
--
-- Applied by the migrator after the versioned migrations, whenever this file's text changed, and after every new
-- migration (the newest one is written in here: {{newest_migration}}), so a table a migration adds has its grants
-- before the migrate ends. Creating the group roles needs CREATEROLE; without it they must exist already (the
-- migrate says so), and grants go only to those that do.

DO $do$
DECLARE
    name text;
BEGIN
    FOREACH name IN ARRAY ARRAY['asset_sweeper_sweep', 'asset_sweeper_consumer', 'asset_sweeper_operator',
                                'asset_sweeper_application', 'asset_sweeper_contract'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = name) THEN
            BEGIN
                EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', name);
            EXCEPTION
                WHEN insufficient_privilege THEN
                    RAISE WARNING 'asset-sweeper: cannot create the role % (CREATEROLE needed): create it, then migrate again', name;
                WHEN unique_violation OR duplicate_object THEN
                    NULL; -- another database of this cluster created it first
            END;
        END IF;
    END LOOP;
END
$do$;

-- Nothing for anyone but the owner unless granted below: no schema usage, and no function a role was not given.
REVOKE ALL ON SCHEMA asset_sweeper, asset_sweeper_private FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA asset_sweeper, asset_sweeper_private FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA asset_sweeper, asset_sweeper_private FROM PUBLIC;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA asset_sweeper FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA asset_sweeper REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
-- But one: a composite source's GIN index runs it on every write to the application's table, as the writer, and
-- it reads nothing (docs/integrating.md, "Shapes").
GRANT EXECUTE ON FUNCTION asset_sweeper.asset_sweeper_nested_ids(anyelement) TO PUBLIC;

DO $do$
DECLARE
    name text;
    g record;
BEGIN
    -- The sweeper's own roles: each has exactly the statements its function issues, table by table (the table in
    -- docs/security.md, which a test compares with the catalog). No DDL, no TRUNCATE, no CREATE anywhere: what they
    -- do to the schema is the owner's to migrate. Nobody but the owner writes the migrator's records
    -- (asset_sweeper_definitions, asset_sweeper_migrations: a digest or a row a login wrote would make `migrate`
    -- skip a later release's fix) or the change detector's tables (a change row deleted would hide DDL from a
    -- settle); nobody changes or deletes the audit trail (settlement_events), and the consumer, which writes most of
    -- it, does not read it. What grants are, first taken away, so an upgrade narrows what an older release gave.
    FOREACH name IN ARRAY ARRAY['asset_sweeper_sweep', 'asset_sweeper_consumer', 'asset_sweeper_operator'] LOOP
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = name);
        EXECUTE pg_catalog.format('REVOKE ALL ON ALL TABLES IN SCHEMA asset_sweeper, asset_sweeper_private FROM %I',
                                  name);
        EXECUTE pg_catalog.format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA asset_sweeper, asset_sweeper_private FROM %I',
                                  name);
        EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA asset_sweeper, asset_sweeper_private TO %I', name);
        EXECUTE pg_catalog.format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA asset_sweeper TO %I', name);
        -- Writing a filter's function is the owner's check's alone (it looks at what Postgres made of it first).
        EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION
            asset_sweeper.asset_sweeper_create_retention_filter(text, regclass, text, text) FROM %I', name);
        -- Holding the application's DDL off until a settle commits is the consumer's alone; the census's lock on
        -- the adoptions the sweep's; statistics of a listing's keys the sweep's and the operator's (reconcile).
        IF name <> 'asset_sweeper_consumer' THEN
            EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION asset_sweeper.asset_sweeper_hold_schema() FROM %I',
                                      name);
        ELSE
            EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION
                asset_sweeper.asset_sweeper_analyze_reconcile_keys() FROM %I', name);
        END IF;
        IF name <> 'asset_sweeper_sweep' THEN
            EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION asset_sweeper.asset_sweeper_lock_adoptions() FROM %I',
                                      name);
        END IF;
        -- The retention filters' functions, which the sweep calls and the operator's plan weighs with.
        IF pg_catalog.to_regnamespace('asset_sweeper_filters') IS NOT NULL AND name <> 'asset_sweeper_consumer' THEN
            EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA asset_sweeper_filters TO %I', name);
        END IF;
    END LOOP;
    IF pg_catalog.to_regnamespace('asset_sweeper_filters') IS NOT NULL
       AND EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'asset_sweeper_consumer') THEN
        REVOKE USAGE ON SCHEMA asset_sweeper_filters FROM asset_sweeper_consumer;
    END IF;
    -- Why each: docs/security.md. An UPDATE a role never issues is still granted on one column where a row lock
    -- needs it (`FOR UPDATE OF a, o` asks UPDATE of `o`'s table).
    FOR g IN SELECT * FROM (VALUES
        ('asset_sweeper_sweep', 'adopted_assets', 'SELECT, INSERT'),
        ('asset_sweeper_sweep', 'asset_id_spellings', 'SELECT, INSERT'),
        ('asset_sweeper_sweep', 'asset_key_sources', 'SELECT'),
        ('asset_sweeper_sweep', 'asset_pins', 'SELECT'),
        ('asset_sweeper_sweep', 'asset_reference_exclusions', 'SELECT'),
        ('asset_sweeper_sweep', 'asset_reference_sources', 'SELECT'),
        ('asset_sweeper_sweep', 'asset_sweeper_schema_changes', 'SELECT'),
        ('asset_sweeper_sweep', 'asset_sweeper_schema_state', 'SELECT'),
        ('asset_sweeper_sweep', 'assets', 'SELECT, INSERT, UPDATE (lease_token, leased_until, state, due_at)'),
        ('asset_sweeper_sweep', 'brake_approvals', 'SELECT'),
        ('asset_sweeper_sweep', 'bucket_measurements', 'SELECT, INSERT'),
        ('asset_sweeper_sweep', 'census_columns', 'SELECT, INSERT, UPDATE, DELETE'),
        ('asset_sweeper_sweep', 'census_findings', 'SELECT, INSERT, UPDATE, DELETE'),
        ('asset_sweeper_sweep', 'census_state', 'SELECT, UPDATE'),
        ('asset_sweeper_sweep', 'census_unread', 'SELECT, INSERT, UPDATE, DELETE'),
        ('asset_sweeper_sweep', 'destruction_holds', 'SELECT'),
        ('asset_sweeper_sweep', 'discovery_state', 'SELECT, UPDATE'),
        ('asset_sweeper_sweep', 'lost_assets', 'SELECT, INSERT, UPDATE, DELETE'),
        ('asset_sweeper_sweep', 'log_objects', 'SELECT, INSERT, DELETE'),
        ('asset_sweeper_sweep', 'log_sources', 'SELECT, INSERT, UPDATE, DELETE'),
        ('asset_sweeper_sweep', 'named_keys', 'SELECT, INSERT, DELETE'),
        ('asset_sweeper_sweep', 'named_sightings', 'SELECT, INSERT, DELETE'),
        ('asset_sweeper_sweep', 'observed_reads', 'SELECT, INSERT, UPDATE, DELETE'),
        ('asset_sweeper_sweep', 'reconcile_keys', 'SELECT, INSERT, DELETE'),
        ('asset_sweeper_sweep', 'reconcile_listings', 'SELECT, INSERT, UPDATE'),
        ('asset_sweeper_sweep', 'reconcile_prefixes', 'SELECT, INSERT, UPDATE'),
        ('asset_sweeper_sweep', 'retention_rules', 'SELECT, UPDATE (last_turn_at)'),
        ('asset_sweeper_sweep', 'sample_witnesses', 'SELECT, INSERT, UPDATE, DELETE'),
        ('asset_sweeper_sweep', 'schema_verdicts', 'SELECT, INSERT, DELETE'),
        ('asset_sweeper_sweep', 'settlement_events', 'SELECT, INSERT'),
        ('asset_sweeper_sweep', 'stored_objects', 'SELECT, INSERT'),
        ('asset_sweeper_sweep', 'sweep_runs', 'SELECT, INSERT, UPDATE'),
        ('asset_sweeper_sweep', 'workspace_object_changes', 'SELECT, DELETE'),
        ('asset_sweeper_sweep', 'workspace_objects', 'SELECT, INSERT, UPDATE, DELETE'),
        ('asset_sweeper_sweep', 'workspace_usage', 'SELECT, INSERT, UPDATE'),
        ('asset_sweeper_consumer', 'adopted_assets', 'SELECT'),
        ('asset_sweeper_consumer', 'asset_id_spellings', 'SELECT'),
        ('asset_sweeper_consumer', 'asset_pins', 'SELECT'),
        ('asset_sweeper_consumer', 'asset_reference_exclusions', 'SELECT'),
        ('asset_sweeper_consumer', 'asset_reference_sources', 'SELECT'),
        ('asset_sweeper_consumer', 'asset_sweeper_schema_changes', 'SELECT'),
        ('asset_sweeper_consumer', 'asset_sweeper_schema_state', 'SELECT'),
        ('asset_sweeper_consumer', 'assets', 'SELECT, UPDATE (state, due_at, lease_token, leased_until, retired_at, '
                                             'purge_after, last_error, kept_by, kept_since, attempts, failed_at), DELETE'),
        ('asset_sweeper_consumer', 'census_columns', 'SELECT'),
        ('asset_sweeper_consumer', 'census_findings', 'SELECT'),
        ('asset_sweeper_consumer', 'destruction_holds', 'SELECT'),
        ('asset_sweeper_consumer', 'log_sources', 'SELECT'),
        ('asset_sweeper_consumer', 'named_keys', 'SELECT'),
        ('asset_sweeper_consumer', 'observed_reads', 'SELECT'),
        ('asset_sweeper_consumer', 'schema_verdicts', 'SELECT'),
        ('asset_sweeper_consumer', 'settlement_events', 'INSERT'),
        ('asset_sweeper_consumer', 'stored_objects', 'SELECT, UPDATE (updated_at), DELETE'),
        ('asset_sweeper_operator', 'adopted_assets', 'SELECT, INSERT'),
        ('asset_sweeper_operator', 'asset_id_spellings', 'SELECT'),
        ('asset_sweeper_operator', 'asset_key_sources', 'SELECT'),
        ('asset_sweeper_operator', 'asset_pins', 'SELECT, INSERT, UPDATE (released_by, released_at)'),
        ('asset_sweeper_operator', 'asset_reference_exclusions', 'SELECT'),
        ('asset_sweeper_operator', 'asset_reference_sources', 'SELECT'),
        ('asset_sweeper_operator', 'asset_sweeper_schema_changes', 'SELECT'),
        ('asset_sweeper_operator', 'asset_sweeper_schema_state', 'SELECT'),
        ('asset_sweeper_operator', 'assets', 'SELECT, INSERT, UPDATE (state, failed_at, attempts, due_at, lease_token, '
                                             'leased_until, retired_at, purge_after, kept_by, kept_since)'),
        ('asset_sweeper_operator', 'brake_approvals', 'SELECT, INSERT'),
        ('asset_sweeper_operator', 'bucket_measurements', 'SELECT'),
        ('asset_sweeper_operator', 'census_columns', 'SELECT'),
        ('asset_sweeper_operator', 'census_findings', 'SELECT'),
        ('asset_sweeper_operator', 'census_state', 'SELECT'),
        ('asset_sweeper_operator', 'census_unread', 'SELECT'),
        ('asset_sweeper_operator', 'destruction_holds', 'SELECT, UPDATE (released_by, released_at)'),
        ('asset_sweeper_operator', 'discovery_state', 'SELECT'),
        ('asset_sweeper_operator', 'lost_assets', 'SELECT, INSERT, UPDATE, DELETE'),
        ('asset_sweeper_operator', 'log_objects', 'SELECT'),
        ('asset_sweeper_operator', 'log_sources', 'SELECT'),
        ('asset_sweeper_operator', 'named_keys', 'SELECT'),
        ('asset_sweeper_operator', 'observed_reads', 'SELECT'),
        ('asset_sweeper_operator', 'reconcile_keys', 'SELECT, INSERT, DELETE'),
        ('asset_sweeper_operator', 'reconcile_listings', 'SELECT, INSERT, UPDATE'),
        ('asset_sweeper_operator', 'reconcile_prefixes', 'SELECT, INSERT, UPDATE'),
        ('asset_sweeper_operator', 'retention_rules', 'SELECT, UPDATE (approved_until, approved_by, approval_reason, '
                                                      'approved_rows, approved_table_rows)'),
        ('asset_sweeper_operator', 'sample_witnesses', 'SELECT'),
        ('asset_sweeper_operator', 'schema_verdicts', 'SELECT'),
        ('asset_sweeper_operator', 'settlement_events', 'SELECT, INSERT'),
        ('asset_sweeper_operator', 'stored_objects', 'SELECT, INSERT'),
        ('asset_sweeper_operator', 'sweep_runs', 'SELECT'),
        ('asset_sweeper_operator', 'workspace_quotas', 'SELECT'),
        ('asset_sweeper_operator', 'workspace_usage', 'SELECT')
    ) AS v(grantee, tbl, privileges)
    WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = v.grantee) LOOP
        EXECUTE pg_catalog.format('GRANT %s ON asset_sweeper_private.%I TO %I', g.privileges, g.tbl, g.grantee);
    END LOOP;
    -- The one sequence a sweeper statement draws from (a listing's id; the rest are identity columns).
    FOREACH name IN ARRAY ARRAY['asset_sweeper_sweep', 'asset_sweeper_operator'] LOOP
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = name);
        EXECUTE pg_catalog.format('GRANT USAGE ON SEQUENCE asset_sweeper_private.reconcile_listings_id_seq TO %I', name);
    END LOOP;

    -- The owner of the application's views: what a view may do to its table (granted below, from the application's
    -- grants on the views), never UPDATE, DELETE or TRUNCATE of a whole table, which would let a lock of the view
    -- reach the table in any mode; a view's deletes are contract.sql's function's.
    name := 'asset_sweeper_contract';
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = name) THEN
        REVOKE ALL ON ALL TABLES IN SCHEMA asset_sweeper, asset_sweeper_private FROM asset_sweeper_contract;
        REVOKE ALL ON ALL SEQUENCES IN SCHEMA asset_sweeper, asset_sweeper_private FROM asset_sweeper_contract;
        -- Handing a view over needs the owner to act as the new owner, and the new owner to be allowed to create
        -- where the view is; the second is taken back at once, and nobody logs in as this role. An owner that may
        -- not make itself a member (no CREATEROLE, no admin of the role) leaves the views its own, and says so.
        BEGIN
            IF NOT pg_catalog.pg_has_role(current_user, 'asset_sweeper_contract', 'USAGE') THEN
                EXECUTE pg_catalog.format('GRANT asset_sweeper_contract TO %I', current_user);
            END IF;
            GRANT CREATE ON SCHEMA asset_sweeper TO asset_sweeper_contract;
            FOR g IN SELECT c.relname FROM pg_catalog.pg_class c
                      WHERE c.relnamespace = 'asset_sweeper'::regnamespace AND c.relkind = 'v'
                        AND c.relowner <> 'asset_sweeper_contract'::regrole LOOP
                EXECUTE pg_catalog.format('ALTER VIEW asset_sweeper.%I OWNER TO asset_sweeper_contract', g.relname);
            END LOOP;
            REVOKE CREATE ON SCHEMA asset_sweeper FROM asset_sweeper_contract;
        EXCEPTION
            WHEN insufficient_privilege THEN
                RAISE WARNING 'asset-sweeper: % cannot hand the application''s views to asset_sweeper_contract (GRANT asset_sweeper_contract TO %, then migrate again): until then a role that may delete a declaration may lock its table', current_user, current_user;
        END;
    ELSE
        RAISE WARNING 'asset-sweeper: the role asset_sweeper_contract is missing: the application''s views are the owner''s, so a role that may delete a declaration may lock its table; create the role, then migrate again';
    END IF;

    -- The application: what docs/integrating.md asks it to write, and nothing of the sweeper's own columns,
    -- records or approvals. Its declarations and rules are validated by the owner's triggers as they are written.
    name := 'asset_sweeper_application';
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = name) THEN
        -- The tables are not its to name, so not its to lock: it writes them through the views of the same names.
        REVOKE ALL ON SCHEMA asset_sweeper_private FROM asset_sweeper_application;
        REVOKE ALL ON ALL TABLES IN SCHEMA asset_sweeper_private FROM asset_sweeper_application;
        REVOKE ALL ON ALL SEQUENCES IN SCHEMA asset_sweeper_private FROM asset_sweeper_application;
        REVOKE ALL ON ALL TABLES IN SCHEMA asset_sweeper FROM asset_sweeper_application;
        GRANT USAGE ON SCHEMA asset_sweeper TO asset_sweeper_application;
        -- The contract's columns only: the lease, attempts, failure and retire and purge times are the sweeper's.
        GRANT SELECT ON asset_sweeper.stored_objects, asset_sweeper.assets TO asset_sweeper_application;
        GRANT INSERT (storage_key, content_hash, byte_size, created_at, updated_at)
            ON asset_sweeper.stored_objects TO asset_sweeper_application;
        GRANT INSERT (id, workspace_id, storage_key, content_hash, byte_size, state, due_at, created_at, updated_at)
            ON asset_sweeper.assets TO asset_sweeper_application;
        -- No REFERENCES (a view takes none, and the table is out of reach): Postgres checks a foreign key to
        -- assets as the owner of assets, with whatever cast the referring column's type has, which would be the
        -- application's code run as the owner. The owner adds a foreign key to a `uuid` column where one is
        -- wanted; the `asset_id` domain needs nothing.
        GRANT UPDATE (content_hash, byte_size) ON asset_sweeper.stored_objects TO asset_sweeper_application;
        GRANT UPDATE (workspace_id, storage_key, content_hash, byte_size, state, due_at)
            ON asset_sweeper.assets TO asset_sweeper_application;
        GRANT SELECT, INSERT, UPDATE, DELETE
            ON asset_sweeper.asset_reference_sources, asset_sweeper.asset_reference_exclusions,
               asset_sweeper.asset_key_sources, asset_sweeper.workspace_quotas
            TO asset_sweeper_application;
        -- A rule's approval is an operator's; its stamp, function and digest are the owner's trigger's.
        GRANT SELECT, DELETE ON asset_sweeper.retention_rules TO asset_sweeper_application;
        GRANT INSERT (table_name, timestamp_column, keep, filter, description),
              UPDATE (table_name, timestamp_column, keep, filter, description)
            ON asset_sweeper.retention_rules TO asset_sweeper_application;
        -- The reference guard's privileged half, which every write to a guarded column calls as its writer: it
        -- takes uuids and text, and only keeps (a lock, a spelling).
        GRANT EXECUTE ON FUNCTION asset_sweeper.asset_sweeper_guard_refers(text, text, text, uuid[], text[], text)
            TO asset_sweeper_application;
        GRANT EXECUTE ON FUNCTION asset_sweeper.asset_sweeper_check_upload(uuid, bigint),
                                  asset_sweeper.asset_sweeper_usage(uuid)
            TO asset_sweeper_application;
        -- The range a quota's trigger checks as it is written, in the writer's session: a constant.
        GRANT EXECUTE ON FUNCTION asset_sweeper.asset_sweeper_quota_limit() TO asset_sweeper_application;
        -- A migration window, declared and released through these alone (a hold only keeps); the table of holds
        -- is not the application's to read or change.
        GRANT EXECUTE ON FUNCTION asset_sweeper.asset_sweeper_hold(timestamptz, text),
                                  asset_sweeper.asset_sweeper_release_hold(bigint)
            TO asset_sweeper_application;
        -- Pins it writes: what is pinned, why and until when; who and when are stamped. It reads every pin (so it
        -- sees an operator's), and neither changes nor ends one: each ends by itself, or by an operator.
        GRANT SELECT, INSERT (asset_id, workspace_id, key_prefix, reason, ends_at)
            ON asset_sweeper.asset_pins TO asset_sweeper_application;
        GRANT USAGE ON SEQUENCE asset_sweeper_private.asset_pins_id_seq TO asset_sweeper_application;
    END IF;

    -- What the views' owner holds on each table is what the application holds on its view, written once above: a
    -- whole view's UPDATE becomes one of every column (a whole table's would let a lock of the view reach the table
    -- in any mode), and no DELETE (contract.sql's trigger deletes, as the owner).
    IF pg_catalog.to_regrole('asset_sweeper_contract') IS NOT NULL
       AND pg_catalog.to_regrole('asset_sweeper_application') IS NOT NULL THEN
        FOR g IN SELECT c.relname, a.privilege_type,
                        CASE WHEN a.privilege_type = 'UPDATE' THEN
                            (SELECT string_agg(pg_catalog.quote_ident(t.attname), ', ' ORDER BY t.attnum)
                               FROM pg_catalog.pg_attribute t
                              WHERE t.attrelid = c.oid AND t.attnum > 0 AND NOT t.attisdropped)
                        END AS cols
                   FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
                  WHERE c.relnamespace = 'asset_sweeper'::regnamespace AND c.relkind = 'v'
                    AND a.grantee = 'asset_sweeper_application'::regrole
                    AND a.privilege_type IN ('SELECT', 'INSERT', 'UPDATE')
                 UNION ALL
                 SELECT c.relname, a.privilege_type, pg_catalog.quote_ident(t.attname)
                   FROM pg_catalog.pg_class c
                   JOIN pg_catalog.pg_attribute t ON t.attrelid = c.oid AND t.attnum > 0 AND NOT t.attisdropped,
                        pg_catalog.aclexplode(t.attacl) a
                  WHERE c.relnamespace = 'asset_sweeper'::regnamespace AND c.relkind = 'v'
                    AND a.grantee = 'asset_sweeper_application'::regrole
                    AND a.privilege_type IN ('SELECT', 'INSERT', 'UPDATE') LOOP
            EXECUTE pg_catalog.format('GRANT %s%s ON asset_sweeper_private.%I TO asset_sweeper_contract',
                                      g.privilege_type, coalesce(' (' || g.cols || ')', ''), g.relname);
        END LOOP;
    END IF;
END
$do$;
