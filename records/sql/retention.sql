-- Record retention: the application declares, per table of its own, how long a record is kept (the
-- `retention_rules` table is a versioned migration's); each sweep pass deletes the expired records. Here: the
-- validation a rule passes as it is written, and the function its filter becomes.
--
-- Applied by the migrator after the versioned migrations, whenever this file's text changed; the migrator writes
-- `migrator::OWN_TABLES` into `asset_sweeper_own_tables()`.

-- The tables the project owns. A retention rule may not name one: deleting asset rows or stored objects directly
-- would leave bytes no row knows.
CREATE OR REPLACE FUNCTION asset_sweeper_own_tables() RETURNS text[] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT {{own_tables}}
$$;

-- The function a rule's filter becomes: the filter is the whole of its body, evaluated over one row of the table,
-- so whatever the filter says it can only answer yes or no for that row; the DELETE puts the cutoff beside the
-- call, where no filter can reach it. Polymorphic, so it does not tie the table's row type: the application may
-- still drop or change its table (the rule then fails, by name, in the pass).
CREATE OR REPLACE FUNCTION asset_sweeper_retention_filter_name(rule_id bigint) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 'asset_sweeper_retention_filter_' || rule_id $$;

-- Validates a rule as it is written, so a malformed one is refused at once by name rather than failing in a pass
-- at night: the table exists and is an ordinary table of the application, the column is a date or time of it,
-- and the filter is a boolean condition over that table that calls nothing volatile; then writes the filter's
-- function.
CREATE OR REPLACE FUNCTION asset_sweeper_check_retention_rule() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    rel       regclass;
    qualified text;
    relname   text;
    schema    text;
    kind      "char";
    col_type  regtype;
    volatile  text;
    columns   int;
    booleans  int;
BEGIN
    rel := to_regclass(NEW.table_name);
    IF rel IS NULL THEN
        RAISE EXCEPTION 'retention rule: table % does not exist', NEW.table_name USING ERRCODE = 'undefined_table';
    END IF;
    SELECT format('%I.%I', n.nspname, c.relname), c.relname, n.nspname, c.relkind
      INTO qualified, relname, schema, kind
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE c.oid = rel;
    IF relname = ANY (asset_sweeper_own_tables()) OR schema IN ('pg_catalog', 'information_schema')
       OR schema LIKE 'pg\_%' OR EXISTS (SELECT 1 FROM pg_depend d
                                         WHERE d.classid = 'pg_class'::regclass AND d.objid = rel AND d.deptype = 'e')
    THEN
        RAISE EXCEPTION 'retention rule: % is not a table of the application (it belongs to asset-sweeper, the system or an extension)',
            qualified USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A partitioned table's rows are not told apart by ctid, which the batches delete by: declare a rule per
    -- partition instead. (An inheritance parent is deleted from alone: the statements read `ONLY` it.)
    IF kind <> 'r' THEN
        RAISE EXCEPTION 'retention rule: % is not an ordinary table (declare a rule per partition of a partitioned one)',
            qualified USING ERRCODE = 'wrong_object_type';
    END IF;
    SELECT a.atttypid::regtype INTO col_type
      FROM pg_attribute a
     WHERE a.attrelid = rel AND a.attname = NEW.timestamp_column AND a.attnum > 0 AND NOT a.attisdropped;
    IF col_type IS NULL THEN
        RAISE EXCEPTION 'retention rule: % has no column %', qualified, NEW.timestamp_column
            USING ERRCODE = 'undefined_column';
    END IF;
    IF col_type NOT IN ('timestamptz'::regtype, 'timestamp'::regtype, 'date'::regtype) THEN
        RAISE EXCEPTION 'retention rule: %.% is %, not a timestamptz, timestamp or date', qualified,
            NEW.timestamp_column, col_type USING ERRCODE = 'datatype_mismatch';
    END IF;
    IF TG_OP = 'UPDATE' THEN
        EXECUTE format('DROP FUNCTION IF EXISTS %I.%I(anyelement)', TG_TABLE_SCHEMA,
                       asset_sweeper_retention_filter_name(OLD.id));
    END IF;
    IF NEW.filter IS NOT NULL THEN
        -- One condition, not a statement: a semicolon or a comment could end what the filter is written into.
        IF NEW.filter ~ '(;|--|/\*)' THEN
            RAISE EXCEPTION 'retention rule on %: filter % may not contain a semicolon or a comment', qualified,
                NEW.filter USING ERRCODE = 'syntax_error';
        END IF;
        BEGIN
            -- Parsed and resolved against the table, as one boolean column of a view: what it calls is then on
            -- record, and nothing is run.
            EXECUTE format('CREATE TEMP VIEW asset_sweeper_filter_check AS SELECT (%s) AS keep FROM ONLY %s AS %I',
                           NEW.filter, qualified, relname);
        EXCEPTION WHEN OTHERS THEN
            RAISE EXCEPTION 'retention rule on %: filter % is not a boolean condition over the table: %', qualified,
                NEW.filter, SQLERRM USING ERRCODE = 'invalid_parameter_value';
        END;
        -- Exactly one column, and boolean: not a number Postgres would cast to one.
        SELECT count(*), count(*) FILTER (WHERE atttypid = 'boolean'::regtype) INTO columns, booleans FROM pg_attribute
         WHERE attrelid = 'asset_sweeper_filter_check'::regclass AND attnum > 0;
        -- What it calls that may change something (set_config, nextval, an advisory lock, an application's
        -- function that writes): the functions and operators on record for the view (the application's own), and
        -- every function the deparsed view names (the system's are not on record), by name, erring towards refusal.
        SELECT string_agg(DISTINCT p.oid::regprocedure::text, ', ') INTO volatile
          FROM pg_proc p
         WHERE p.provolatile = 'v'
           AND (p.oid IN (SELECT coalesce(o.oprcode::oid, d.refobjid)
                            FROM pg_rewrite rw
                            JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = rw.oid
                            LEFT JOIN pg_operator o ON d.refclassid = 'pg_operator'::regclass AND o.oid = d.refobjid
                           WHERE rw.ev_class = 'asset_sweeper_filter_check'::regclass
                             AND d.refclassid IN ('pg_proc'::regclass, 'pg_operator'::regclass))
                OR p.proname IN (SELECT m[1] FROM regexp_matches(
                                     pg_get_viewdef('asset_sweeper_filter_check'::regclass),
                                     '"?([A-Za-z_][A-Za-z0-9_$]*)"?\s*\(', 'g') AS m));
        DROP VIEW asset_sweeper_filter_check;
        IF columns <> 1 OR booleans <> 1 THEN
            RAISE EXCEPTION 'retention rule on %: filter % is not a boolean condition over the table', qualified,
                NEW.filter USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF volatile IS NOT NULL THEN
            RAISE EXCEPTION 'retention rule on %: filter % calls % , which may change something or answer differently each time',
                qualified, NEW.filter, volatile USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- Beside retention_rules, whatever the writer's search_path.
        EXECUTE format('CREATE FUNCTION %I.%I(r anyelement) RETURNS boolean LANGUAGE sql STABLE AS %L',
                       TG_TABLE_SCHEMA, asset_sweeper_retention_filter_name(NEW.id),
                       format('SELECT (%s) FROM (SELECT ($1).*) AS %I', NEW.filter, relname));
    END IF;
    NEW.table_name := qualified;
    IF TG_OP = 'UPDATE' AND (OLD.table_name, OLD.timestamp_column, OLD.keep, OLD.filter)
                            IS DISTINCT FROM (NEW.table_name, NEW.timestamp_column, NEW.keep, NEW.filter) THEN
        -- An approval was read against the rule as it was.
        NEW.approved_until := NULL;
        NEW.approved_by := NULL;
        NEW.approval_reason := NULL;
    END IF;
    RETURN NEW;
END
$$;

-- A deleted rule takes its filter's function with it.
CREATE OR REPLACE FUNCTION asset_sweeper_drop_retention_filter() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('DROP FUNCTION IF EXISTS %I.%I(anyelement)', TG_TABLE_SCHEMA,
                   asset_sweeper_retention_filter_name(OLD.id));
    RETURN OLD;
END
$$;

CREATE OR REPLACE TRIGGER retention_rules_drop_filter AFTER DELETE ON retention_rules
    FOR EACH ROW EXECUTE FUNCTION asset_sweeper_drop_retention_filter();

CREATE OR REPLACE TRIGGER retention_rules_check BEFORE INSERT OR UPDATE OF table_name, timestamp_column, keep, filter
    ON retention_rules FOR EACH ROW EXECUTE FUNCTION asset_sweeper_check_retention_rule();
