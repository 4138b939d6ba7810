-- The sweeper's tables move into a schema no role of the application can use, `asset_sweeper_private`, and the
-- application keeps the names its contract gives it as views in `asset_sweeper` (docs/security.md, "Nobody stalls
-- the sweeper"). Postgres waits for a relation's lock before it checks whether the role may touch the relation at
-- all (CREATE TRIGGER, CREATE RULE, a foreign key's REFERENCES, DROP): any role that can name a table could queue an
-- exclusive lock on it behind one of its own open transactions, and every later writer of the table waited behind
-- that lock. A table in a schema a role has no USAGE on cannot be named by it. What the views may do to the tables
-- under them, and who owns them, is roles.sql's; a view's DELETE is contract.sql's.
CREATE SCHEMA asset_sweeper_private;
REVOKE ALL ON SCHEMA asset_sweeper_private FROM PUBLIC;

DO $move$
DECLARE
    item record;
BEGIN
    -- Every table this role owns in the sweeper's schema, with its sequences, indexes, constraints and triggers;
    -- the migrations' and definitions' records among them (the migrator finds them on its search path).
    FOR item IN SELECT c.relname FROM pg_class c
                 WHERE c.relnamespace = 'asset_sweeper'::regnamespace AND c.relkind IN ('r', 'p')
                   AND c.relowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)
    LOOP
        EXECUTE format('ALTER TABLE asset_sweeper.%I SET SCHEMA asset_sweeper_private', item.relname);
    END LOOP;
END
$move$;

-- The contract's names: what docs/integrating.md asks the application to read and write, and nothing else.
CREATE VIEW asset_sweeper.stored_objects AS SELECT * FROM asset_sweeper_private.stored_objects;
CREATE VIEW asset_sweeper.assets AS SELECT * FROM asset_sweeper_private.assets;
CREATE VIEW asset_sweeper.asset_reference_sources AS SELECT * FROM asset_sweeper_private.asset_reference_sources;
CREATE VIEW asset_sweeper.asset_reference_exclusions AS SELECT * FROM asset_sweeper_private.asset_reference_exclusions;
CREATE VIEW asset_sweeper.asset_key_sources AS SELECT * FROM asset_sweeper_private.asset_key_sources;
CREATE VIEW asset_sweeper.workspace_quotas AS SELECT * FROM asset_sweeper_private.workspace_quotas;
CREATE VIEW asset_sweeper.retention_rules AS SELECT * FROM asset_sweeper_private.retention_rules;
CREATE VIEW asset_sweeper.asset_pins AS SELECT * FROM asset_sweeper_private.asset_pins;

-- What a DBA granted on those tables to a role of the application (an upload service's own login, say) moves to
-- the view of the same name: the role keeps what it could do, by the name it used, and loses its reach to the
-- table. The sweeper's own roles and the group of the application are roles.sql's to grant.
DO $grants$
DECLARE
    g record;
    contract text[] := ARRAY['stored_objects', 'assets', 'asset_reference_sources', 'asset_reference_exclusions',
                             'asset_key_sources', 'workspace_quotas', 'retention_rules', 'asset_pins'];
    own text[] := ARRAY['asset_sweeper_sweep', 'asset_sweeper_consumer', 'asset_sweeper_operator',
                        'asset_sweeper_application'];
BEGIN
    FOR g IN SELECT c.relname, a.grantee::regrole::text AS grantee, a.privilege_type, NULL::text AS col
               FROM pg_class c, aclexplode(c.relacl) a
              WHERE c.relnamespace = 'asset_sweeper_private'::regnamespace AND c.relname = ANY (contract)
                AND a.grantee <> 0 AND a.grantee <> c.relowner
                AND a.privilege_type IN ('SELECT', 'INSERT', 'UPDATE', 'DELETE')
             UNION ALL
             SELECT c.relname, a.grantee::regrole::text, a.privilege_type, att.attname::text
               FROM pg_class c JOIN pg_attribute att ON att.attrelid = c.oid AND att.attnum > 0
                    AND NOT att.attisdropped, aclexplode(att.attacl) a
              WHERE c.relnamespace = 'asset_sweeper_private'::regnamespace AND c.relname = ANY (contract)
                AND a.grantee <> 0 AND a.grantee <> c.relowner
                AND a.privilege_type IN ('SELECT', 'INSERT', 'UPDATE')
    LOOP
        CONTINUE WHEN g.grantee = ANY (own);
        IF g.col IS NULL THEN
            EXECUTE format('GRANT %s ON asset_sweeper.%I TO %s', g.privilege_type, g.relname, g.grantee);
            EXECUTE format('REVOKE %s ON asset_sweeper_private.%I FROM %s', g.privilege_type, g.relname, g.grantee);
        ELSE
            EXECUTE format('GRANT %s (%I) ON asset_sweeper.%I TO %s', g.privilege_type, g.col, g.relname, g.grantee);
            EXECUTE format('REVOKE %s (%I) ON asset_sweeper_private.%I FROM %s', g.privilege_type, g.col, g.relname,
                           g.grantee);
        END IF;
    END LOOP;
END
$grants$;
