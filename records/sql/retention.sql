-- Record retention: the application declares, per table of its own, how long a record is kept (the
-- `retention_rules` table is a versioned migration's); each sweep pass deletes the expired records. Here: the
-- validation a rule passes as it is written, the function its filter becomes, and the check every batch makes.
--
-- Applied by the migrator after the versioned migrations, whenever this file's text changed; the migrator writes
-- `migrator::OWN_TABLES` into `asset_sweeper_own_tables()`.
--
-- A rule's writer is an application role; the sweep deletes for it. So nothing of the writer's runs as the sweeper:
-- the filter is parsed by Postgres into the body of a function the owner creates and owns (a SQL-standard body,
-- stored as a parsed tree, so what it calls is fixed when it is written and no later function, cast or operator can
-- change it), accepted only when that tree is built from the table's columns, constants, operators and immutable
-- built-ins; its digest is recorded, and every batch and every plan checks it, the writer's DELETE on the table and
-- the table's schema again.

-- The tables the project owns. A retention rule may not name one: deleting asset rows or stored objects directly
-- would leave bytes no row knows.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_own_tables() RETURNS text[] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT {{own_tables}}
$$;

-- The name of rule `rule_id`'s filter function, in this schema.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_retention_filter_name(rule_id bigint) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 'asset_sweeper_retention_filter_' || rule_id $$;

-- What a filter function is, as a digest: its parsed body, owner, settings, security, volatility and argument. A
-- function replaced or altered since its rule was written has another.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_retention_filter_digest(function_name text) RETURNS text
    LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT md5(concat_ws('|', p.prosqlbody::text, p.prosrc, p.proowner::regrole::text, p.proconfig::text,
                         p.prosecdef, p.provolatile, p.proleakproof, p.proargtypes::text, p.prorettype))
      FROM pg_proc p
     WHERE p.oid = to_regprocedure(function_name)
$$;

-- Whether a write to table `rel` would run code of the application's: a trigger (the sweeper's reference guards
-- aside) or a rule on it.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_runs_application_code(rel regclass) RETURNS boolean
    LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT EXISTS (SELECT 1 FROM pg_trigger t
                    WHERE t.tgrelid = rel AND NOT t.tgisinternal
                      AND t.tgfoid <> 'asset_sweeper.asset_sweeper_guard()'::regprocedure)
        OR EXISTS (SELECT 1 FROM pg_rewrite r WHERE r.ev_class = rel)
$$;

-- Why a table may not carry a rule (the sweeper's own, the system's, an extension's), or NULL.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_retention_table_refused(rel regclass) RETURNS text
    LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE
        WHEN n.nspname IN ('asset_sweeper', 'asset_sweeper_private') OR c.relname = ANY (asset_sweeper.asset_sweeper_own_tables())
            THEN format('%s belongs to asset-sweeper', rel)
        WHEN n.nspname IN ('pg_catalog', 'information_schema', 'pg_toast') OR n.nspname LIKE 'pg\_%'
            THEN format('%s belongs to the system', rel)
        WHEN EXISTS (SELECT 1 FROM pg_depend d
                      WHERE d.classid = 'pg_class'::regclass AND d.objid = rel AND d.deptype = 'e')
            THEN format('%s belongs to an extension', rel)
        -- What a DELETE of its rows would run besides the delete, as the sweep, in the sweep's session: the
        -- application's triggers (the sweeper's own reference guards aside) and rules on the table, and a foreign
        -- key from another table whose check or action needs a cast (the referring column of another type than
        -- the key it refers to) or fires that table's triggers or rules.
        WHEN asset_sweeper.asset_sweeper_runs_application_code(rel)
            THEN format('%s has triggers or rules of its own, which would run as the sweep: delete its records from the application', rel)
        WHEN EXISTS (SELECT 1
                       FROM pg_constraint k
                      CROSS JOIN LATERAL unnest(k.conkey, k.confkey) AS col(referring, referred)
                       JOIN pg_attribute fa ON fa.attrelid = k.conrelid AND fa.attnum = col.referring
                       JOIN pg_attribute pa ON pa.attrelid = k.confrelid AND pa.attnum = col.referred
                       JOIN pg_type ft ON ft.oid = fa.atttypid
                      WHERE k.contype = 'f' AND k.confrelid = rel
                        AND (fa.atttypid <> pa.atttypid AND ft.typbasetype <> pa.atttypid
                             OR (k.confdeltype NOT IN ('a', 'r')
                                 AND asset_sweeper.asset_sweeper_runs_application_code(k.conrelid::regclass))))
            THEN format('%s is referred to by a foreign key whose check or action would run the application''s code as the sweep', rel)
    END
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE c.oid = rel
$$;

-- Drops the filter function a rule names, found by its signature, and only if it is one in the filters' schema:
-- the row's text is never run as SQL.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_drop_filter_function(signature text) RETURNS void
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    found regprocedure;
BEGIN
    SELECT p.oid INTO found FROM pg_proc p
     WHERE p.oid = to_regprocedure(signature) AND p.pronamespace = to_regnamespace('asset_sweeper_filters');
    IF found IS NOT NULL THEN
        EXECUTE format('DROP FUNCTION %s', found);
    END IF;
EXCEPTION WHEN invalid_parameter_value OR syntax_error OR invalid_text_representation THEN
    NULL; -- not a signature: nothing of ours to drop
END
$$;

-- The writer's half of the check, run as the writer (no SECURITY DEFINER) and on the writer's own search path,
-- on purpose: the table is the one the writer means by its name. It calls only pg_catalog's functions, by name,
-- so nothing it runs is the writer's but the name's resolution. It stamps the rule with its writer and requires
-- that the writer may itself delete from the table: no role makes the sweeper delete what it could not.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_retention_rule_writer() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    rel regclass;
BEGIN
    NEW.declared_by := current_user;
    rel := pg_catalog.to_regclass(NEW.table_name);
    IF rel IS NULL THEN
        RAISE EXCEPTION 'retention rule: table % does not exist', NEW.table_name USING ERRCODE = 'undefined_table';
    END IF;
    SELECT pg_catalog.format('%I.%I', n.nspname, c.relname) INTO NEW.table_name
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
     WHERE c.oid OPERATOR(pg_catalog.=) rel;
    IF NOT pg_catalog.has_table_privilege(rel, 'DELETE') THEN
        RAISE EXCEPTION 'retention rule on %: % may not delete from it, so it may not declare a rule that does',
            NEW.table_name, current_user USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;

-- The filter functions' owner: a role with no privilege but its own schema, `asset_sweeper_filters`, which no
-- search path holds. Parsing a filter can run code (a literal of the table's row type runs its columns' input
-- functions, and a domain's check among them): it runs as this role, never as the migrating owner.
DO $do$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'asset_sweeper_filter_owner') THEN
        BEGIN
            CREATE ROLE asset_sweeper_filter_owner NOLOGIN;
        EXCEPTION
            WHEN insufficient_privilege THEN
                RAISE WARNING 'asset-sweeper: cannot create the role asset_sweeper_filter_owner (CREATEROLE needed): retention filters are refused until it exists';
            WHEN unique_violation OR duplicate_object THEN
                NULL;
        END;
    END IF;
    -- An owner that is not a superuser acts as the role only as a member of it: a role made by a CREATEROLE owner
    -- can be granted to it; one made by a superuser (for another database of the cluster) cannot, and then the
    -- migration goes on without filters rather than fail.
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'asset_sweeper_filter_owner')
       AND NOT pg_has_role(current_user, 'asset_sweeper_filter_owner', 'MEMBER') THEN
        BEGIN
            EXECUTE format('GRANT asset_sweeper_filter_owner TO %I', current_user);
        EXCEPTION WHEN insufficient_privilege OR invalid_grant_operation THEN
            NULL;
        END;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'asset_sweeper_filter_owner')
       AND to_regnamespace('asset_sweeper_filters') IS NULL THEN
        BEGIN
            CREATE SCHEMA asset_sweeper_filters AUTHORIZATION asset_sweeper_filter_owner;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE WARNING 'asset-sweeper: % cannot act as asset_sweeper_filter_owner (GRANT asset_sweeper_filter_owner TO %, then migrate again): retention filters are refused until then', current_user, current_user;
        END;
    END IF;
END
$do$;

-- Writes a filter into its function, as the filters' owner; called only by the owner's check below, which looks at
-- what Postgres made of it before anything else may call it. Returns the function's signature.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_create_retention_filter(name text, rel regclass, filter text,
                                                                               alias text) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    signature text := format('asset_sweeper_filters.%I(%s)', name, rel);
BEGIN
    EXECUTE format('CREATE FUNCTION asset_sweeper_filters.%I(r %s) RETURNS boolean LANGUAGE sql STABLE '
                   'BEGIN ATOMIC SELECT (%s) FROM pg_catalog.unnest(ARRAY[r]) AS %I; END', name, rel, filter, alias);
    EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', signature);
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'asset_sweeper_sweep') THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO asset_sweeper_sweep', signature);
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'asset_sweeper_operator') THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO asset_sweeper_operator', signature);
    END IF;
    RETURN signature;
END
$$;
REVOKE ALL ON FUNCTION asset_sweeper.asset_sweeper_create_retention_filter(text, regclass, text, text) FROM PUBLIC;
DO $do$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'asset_sweeper_filter_owner') THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION asset_sweeper.asset_sweeper_create_retention_filter(text, regclass, text, text) TO %I',
                       current_user);
        BEGIN
            ALTER FUNCTION asset_sweeper.asset_sweeper_create_retention_filter(text, regclass, text, text)
                OWNER TO asset_sweeper_filter_owner;
        EXCEPTION WHEN insufficient_privilege THEN
            -- Warned above: the filters' check refuses a filter while this function is not the role's.
            NULL;
        END;
    END IF;
END
$do$;

-- The owner's half, SECURITY DEFINER: validates the rule as it is written, so a malformed one is refused at once
-- by name rather than failing in a pass at night (the table is an ordinary table of the application, the column a
-- date or time of it), and writes the filter into the owner's function, checked node by node.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_check_retention_rule() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    rel       regclass := to_regclass(NEW.table_name);
    relname   text;
    rowtype   oid;
    kind      "char";
    col_type  regtype;
    refused   text;
    fname     text;
    body      text;
    calls     text;
    outside   text;
BEGIN
    IF rel IS NULL THEN
        RAISE EXCEPTION 'retention rule: table % does not exist', NEW.table_name USING ERRCODE = 'undefined_table';
    END IF;
    SELECT c.relname, c.relkind, c.reltype INTO relname, kind, rowtype FROM pg_class c WHERE c.oid = rel;
    refused := asset_sweeper.asset_sweeper_retention_table_refused(rel);
    IF refused IS NOT NULL THEN
        RAISE EXCEPTION 'retention rule: % is not a table of the application (%)', NEW.table_name, refused
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A partitioned table's rows are not told apart by ctid, which the batches delete by: declare a rule per
    -- partition instead. (An inheritance parent is deleted from alone: the statements read `ONLY` it.)
    IF kind <> 'r' THEN
        RAISE EXCEPTION 'retention rule: % is not an ordinary table (declare a rule per partition of a partitioned one)',
            NEW.table_name USING ERRCODE = 'wrong_object_type';
    END IF;
    SELECT a.atttypid::regtype INTO col_type
      FROM pg_attribute a
     WHERE a.attrelid = rel AND a.attname = NEW.timestamp_column AND a.attnum > 0 AND NOT a.attisdropped;
    IF col_type IS NULL THEN
        RAISE EXCEPTION 'retention rule: % has no column %', NEW.table_name, NEW.timestamp_column
            USING ERRCODE = 'undefined_column';
    END IF;
    IF col_type NOT IN ('timestamptz'::regtype, 'timestamp'::regtype, 'date'::regtype) THEN
        RAISE EXCEPTION 'retention rule: %.% is %, not a timestamptz, timestamp or date', NEW.table_name,
            NEW.timestamp_column, col_type USING ERRCODE = 'datatype_mismatch';
    END IF;
    IF TG_OP = 'UPDATE' THEN
        PERFORM asset_sweeper.asset_sweeper_drop_filter_function(OLD.filter_function);
    END IF;
    NEW.filter_function := NULL;
    NEW.filter_digest := NULL;
    IF NEW.filter IS NOT NULL THEN
        -- One condition, not a statement: a semicolon or a comment could end what the filter is written into.
        IF NEW.filter ~ '(;|--|/\*)' THEN
            RAISE EXCEPTION 'retention rule on %: filter % may not contain a semicolon or a comment', NEW.table_name,
                NEW.filter USING ERRCODE = 'syntax_error';
        END IF;
        -- The filters' owner writes it, as itself: whatever parsing it runs, runs with that role's nothing. Its
        -- writer must still be what this file made it (an owner may alter its own function's security or path).
        IF NOT EXISTS (SELECT 1 FROM pg_proc p
                        WHERE p.oid = to_regprocedure('asset_sweeper.asset_sweeper_create_retention_filter(text, regclass, text, text)')
                          AND p.prosecdef AND p.proowner = to_regrole('asset_sweeper_filter_owner')
                          AND p.proconfig = ARRAY['search_path=pg_catalog, pg_temp']) THEN
            RAISE EXCEPTION 'retention rule on %: filters are refused: the role asset_sweeper_filter_owner or its function asset_sweeper_create_retention_filter is missing or was altered (migrate again as the owner)',
                NEW.table_name USING ERRCODE = 'insufficient_privilege';
        END IF;
        -- Parsed and resolved now, on the writer function's path (pg_catalog only), into a stored tree. The row
        -- reaches the filter through unnest, so the function depends on the columns the filter reads (the
        -- application cannot change their type under it) and on no other.
        BEGIN
            fname := asset_sweeper.asset_sweeper_create_retention_filter(
                asset_sweeper.asset_sweeper_retention_filter_name(NEW.id), rel, NEW.filter, relname);
        EXCEPTION WHEN OTHERS THEN
            RAISE EXCEPTION 'retention rule on %: filter % is not a boolean condition over the table: %', NEW.table_name,
                NEW.filter, SQLERRM USING ERRCODE = 'invalid_parameter_value';
        END;
        SELECT p.prosqlbody::text INTO body FROM pg_proc p WHERE p.oid = to_regprocedure(fname);
        -- One plain SELECT of one boolean over the one row: no subquery, aggregate, window, set operation, domain
        -- check, XML, sequence or second table. Checked on the tree Postgres built, not on the text.
        IF (SELECT count(*) FROM regexp_matches(body, '\{QUERY ', 'g')) <> 1
           OR (SELECT count(*) FROM regexp_matches(body, '\{RANGETBLENTRY ', 'g')) <> 1
           OR (SELECT count(*) FROM regexp_matches(body, '\{TARGETENTRY ', 'g')) <> 1
           OR body !~ ':commandType 1 ' OR body ~ ':rtekind [^3]'
           OR body ~ ':(hasAggs|hasWindowFuncs|hasTargetSRFs|hasSubLinks|hasDistinctOn|hasRecursive|hasModifyingCTE|hasForUpdate) true'
           OR body ~ '\{(SUBLINK|AGGREF|WINDOWFUNC|GROUPINGFUNC|COERCETODOMAIN|XMLEXPR|CURRENTOFEXPR|NEXTVALUEEXPR|MERGESUPPORTFUNC|SQLVALUEFUNCTION|JSON[A-Z]*) '
           OR body ~ ':(cteList|groupClause|distinctClause|sortClause|windowClause|groupingSets) \('
           OR body ~ ':(havingQual|limitCount|limitOffset|setOperations) \{'
        THEN
            RAISE EXCEPTION 'retention rule on %: filter % must be one condition over the table''s own columns (no subquery, aggregate, other table or domain)',
                NEW.table_name, NEW.filter USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- Every type it names (a constant's, a conversion's, a result's): the system's, or an enum (whose input
        -- runs no code); the table's own column and row types only where it reads the row (a variable, the
        -- argument, the unnest that hands it over). A conversion into a type runs that type's input function, and a domain's or a composite's
        -- would run the application's checks as the sweep.
        SELECT string_agg(DISTINCT format_type(t.oid, NULL), ', ') INTO outside
          FROM regexp_matches(body, ':([a-z_]*type[a-z_]*|[a-z_]*typid) (\d+)', 'gi') AS m
          JOIN pg_type t ON t.oid = m[2]::oid
         WHERE m[1] NOT IN ('vartype', 'paramtype')
           AND NOT (t.oid < 16384 OR (t.typtype = 'e' AND t.typnamespace::regnamespace::text NOT LIKE 'pg\_temp%'))
           -- The row itself, as the argument and through unnest(ARRAY[r]): values that exist, never made.
           AND NOT (m[1] IN ('array_typeid', 'element_typeid', 'funcresulttype')
                    AND t.oid IN (rowtype, (SELECT typarray FROM pg_type WHERE oid = rowtype)));
        IF outside IS NOT NULL THEN
            RAISE EXCEPTION 'retention rule on %: filter % uses the type %, whose values it may not make', NEW.table_name,
                NEW.filter, outside USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- Every function it calls, directly or through an operator: the system's own, and immutable (nothing that
        -- writes, sets, locks, sleeps or reads the clock).
        SELECT string_agg(DISTINCT p.oid::regprocedure::text, ', ') INTO calls
          FROM (SELECT m[2]::oid AS oid FROM regexp_matches(body, ':(funcid|opfuncid|hashfuncid|negfuncid) (\d+)', 'g') AS m
                UNION
                SELECT o.oprcode::oid FROM regexp_matches(body, ':opno (\d+)', 'g') AS m
                  JOIN pg_operator o ON o.oid = m[1]::oid
                UNION
                SELECT o.oprcode::oid
                  FROM regexp_matches(body, ':opnos \(o ([0-9 ]+)\)', 'g') AS m
                 CROSS JOIN LATERAL unnest(string_to_array(btrim(m[1]), ' ')) AS n
                  JOIN pg_operator o ON o.oid = n::oid) AS used
          JOIN pg_proc p ON p.oid = used.oid
         WHERE used.oid <> 0
           AND (p.provolatile <> 'i' OR p.pronamespace <> 'pg_catalog'::regnamespace);
        IF calls IS NOT NULL THEN
            RAISE EXCEPTION 'retention rule on %: filter % calls %, which is not an immutable function of the system',
                NEW.table_name, NEW.filter, calls USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- What else it depends on: the table's own columns, its row type, this schema, an enum's type or a
        -- collation; never an object of the application's (its function, operator, type or another table).
        SELECT string_agg(pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid), ', ') INTO outside
          FROM pg_depend d
         WHERE d.classid = 'pg_proc'::regclass AND d.objid = to_regprocedure(fname)
           AND NOT (d.refclassid = 'pg_class'::regclass AND d.refobjid = rel)
           AND NOT (d.refclassid = 'pg_type'::regclass AND (d.refobjid = rowtype
                    OR EXISTS (SELECT 1 FROM pg_type t WHERE t.oid = d.refobjid AND t.typtype = 'e')))
           AND NOT (d.refclassid = 'pg_namespace'::regclass AND d.refobjid = 'asset_sweeper_filters'::regnamespace)
           AND d.refclassid <> 'pg_collation'::regclass;
        IF outside IS NOT NULL THEN
            RAISE EXCEPTION 'retention rule on %: filter % uses %, which is not the table''s own', NEW.table_name,
                NEW.filter, outside USING ERRCODE = 'invalid_parameter_value';
        END IF;
        NEW.filter_function := fname;
        NEW.filter_digest := asset_sweeper.asset_sweeper_retention_filter_digest(fname);
    END IF;
    IF TG_OP = 'UPDATE' AND (OLD.table_name, OLD.timestamp_column, OLD.keep, OLD.filter)
                            IS DISTINCT FROM (NEW.table_name, NEW.timestamp_column, NEW.keep, NEW.filter) THEN
        -- An approval was read against the rule as it was.
        NEW.approved_until := NULL;
        NEW.approved_by := NULL;
        NEW.approval_reason := NULL;
    END IF;
    -- A new rule, or one whose table, column, period or filter changed, waits RECORDS_NEW_RULE_DELAY before its
    -- first delete: a mistyped rule shows in `plan` and `status` a day before it acts.
    IF TG_OP = 'INSERT' OR (OLD.table_name, OLD.timestamp_column, OLD.keep, OLD.filter)
                           IS DISTINCT FROM (NEW.table_name, NEW.timestamp_column, NEW.keep, NEW.filter) THEN
        NEW.changed_at := now();
    END IF;
    RETURN NEW;
END
$$;

-- A deleted rule takes its filter's function with it.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_drop_retention_filter() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM asset_sweeper.asset_sweeper_drop_filter_function(OLD.filter_function);
    RETURN OLD;
END
$$;

-- Whether rule `rule_id` may run now, raising why not: every batch's and every plan's statement calls it (once per
-- statement, as it names no row). Its table is still an application's, its writer may still delete from it, and
-- its filter's function is the one the owner wrote, unreplaced and unaltered. A rule that fails it stops, by name.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_retention_rule_verified(rule_id bigint) RETURNS boolean
    LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r       record;
    rel     regclass;
    refused text;
BEGIN
    SELECT * INTO r FROM asset_sweeper_private.retention_rules WHERE id = rule_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'retention rule % no longer exists', rule_id USING ERRCODE = 'undefined_object';
    END IF;
    rel := to_regclass(r.table_name);
    IF rel IS NULL THEN
        RAISE EXCEPTION 'retention rule %: table % no longer exists', rule_id, r.table_name USING ERRCODE = 'undefined_table';
    END IF;
    refused := asset_sweeper.asset_sweeper_retention_table_refused(rel);
    IF refused IS NOT NULL THEN
        RAISE EXCEPTION 'retention rule % stopped: %', rule_id, refused USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF r.declared_by IS NULL OR NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r.declared_by)
       OR NOT has_table_privilege(r.declared_by, rel, 'DELETE') THEN
        RAISE EXCEPTION 'retention rule % stopped: its writer % may not delete from %', rule_id,
            coalesce(r.declared_by, '(unknown: write the rule again)'), r.table_name USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF r.filter IS NOT NULL AND (r.filter_digest IS NULL
       OR asset_sweeper.asset_sweeper_retention_filter_digest(r.filter_function) IS DISTINCT FROM r.filter_digest) THEN
        RAISE EXCEPTION 'retention rule % stopped: its filter function % was replaced, altered or dropped since the rule was written (write the rule''s filter again)',
            rule_id, coalesce(r.filter_function, '(none)') USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN true;
END
$$;

-- Whether the role running rule `rule_id`'s batches may carry them out, raising what it lacks and the GRANT that
-- gives it: a batch deletes (DELETE) the rows it locks first (FOR UPDATE SKIP LOCKED, which needs UPDATE of a
-- column). Postgres checks both as a statement starts, before anything in it runs, and says only "permission
-- denied": each batch asks this first. The grant goes to the sweep's group role when the role is its member.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_retention_rule_deletable(rule_id bigint) RETURNS boolean
    LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r       record;
    rel     regclass;
    lacks   text[] := '{}';
    grants  text[] := '{}';
    grantee text := quote_ident(current_user);
BEGIN
    SELECT * INTO r FROM asset_sweeper_private.retention_rules WHERE id = rule_id;
    rel := to_regclass(r.table_name);
    IF rel IS NULL THEN
        RETURN true; -- asset_sweeper_retention_rule_verified says so, by name
    END IF;
    IF NOT has_table_privilege(rel, 'DELETE') THEN
        lacks := lacks || 'DELETE'::text;
        grants := grants || 'DELETE'::text;
    END IF;
    IF NOT has_any_column_privilege(rel, 'UPDATE') THEN
        lacks := lacks || 'UPDATE of a column (a batch locks the rows it deletes FOR UPDATE)'::text;
        grants := grants || format('UPDATE (%I)', r.timestamp_column);
    END IF;
    IF cardinality(lacks) = 0 THEN
        RETURN true;
    END IF;
    IF to_regrole('asset_sweeper_sweep') IS NOT NULL AND pg_has_role(current_user, 'asset_sweeper_sweep', 'MEMBER') THEN
        grantee := 'asset_sweeper_sweep';
    END IF;
    RAISE EXCEPTION 'retention rule % stopped: the sweep''s role % lacks % on %: GRANT % ON % TO %', rule_id,
        current_user, array_to_string(lacks, ' and '), r.table_name, array_to_string(grants, ', '), r.table_name, grantee
        USING ERRCODE = 'insufficient_privilege';
END
$$;

DROP TRIGGER IF EXISTS retention_rules_check ON asset_sweeper_private.retention_rules;
DROP TRIGGER IF EXISTS retention_rules_drop_filter ON asset_sweeper_private.retention_rules;

-- Triggers of a table fire in the order of their names: the writer's half first.
CREATE OR REPLACE TRIGGER retention_rules_a_writer
    BEFORE INSERT OR UPDATE OF table_name, timestamp_column, keep, filter, description ON asset_sweeper_private.retention_rules
    FOR EACH ROW EXECUTE FUNCTION asset_sweeper.asset_sweeper_retention_rule_writer();
CREATE OR REPLACE TRIGGER retention_rules_b_owner
    BEFORE INSERT OR UPDATE OF table_name, timestamp_column, keep, filter ON asset_sweeper_private.retention_rules
    FOR EACH ROW EXECUTE FUNCTION asset_sweeper.asset_sweeper_check_retention_rule();
CREATE OR REPLACE TRIGGER retention_rules_drop_filter AFTER DELETE ON asset_sweeper_private.retention_rules
    FOR EACH ROW EXECUTE FUNCTION asset_sweeper.asset_sweeper_drop_retention_filter();
-- Also in replica sessions: no loader skips the check.
ALTER TABLE asset_sweeper_private.retention_rules ENABLE ALWAYS TRIGGER retention_rules_a_writer;
ALTER TABLE asset_sweeper_private.retention_rules ENABLE ALWAYS TRIGGER retention_rules_b_owner;
ALTER TABLE asset_sweeper_private.retention_rules ENABLE ALWAYS TRIGGER retention_rules_drop_filter;
