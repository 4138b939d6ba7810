-- Record retention: the application declares, per table of its own, how long a record is kept; each sweep pass
-- deletes the expired records before it looks for unreferenced assets, so the assets those records were the last
-- reference to are found in the same pass. No application code runs: the rule is a condition of the DELETE.

-- The tables the project owns. A retention rule may not name one: deleting asset rows or stored objects directly
-- would leave bytes no row knows. The schema check's list (`OWN_TABLES`) is tested to be this one.
CREATE FUNCTION asset_sweeper_own_tables() RETURNS text[] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ARRAY['assets', 'stored_objects', 'asset_reference_sources', 'asset_reference_exclusions', 'sweep_runs',
                 'settlement_events', 'brake_approvals', 'asset_sweeper_migrations', 'asset_sweeper_schema_state',
                 'schema_verdicts', 'census_columns', 'census_state', 'asset_id_spellings', 'discovery_state',
                 'reconcile_listings', 'reconcile_keys', 'lost_assets', 'reconcile_prefixes', 'adopted_assets',
                 'named_keys', 'retention_rules', 'workspace_quotas']
$$;

CREATE TABLE retention_rules (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- As declared ('sessions', 'app.sessions'); rewritten to the schema-qualified, quoted name when written.
    table_name       text        NOT NULL,
    -- A timestamptz, timestamp or date column of that table: a record is expired once it is older than `keep`
    -- at the start of the pass's day in the application's time zone.
    timestamp_column text        NOT NULL,
    keep             interval    NOT NULL CHECK (keep > interval '0'),
    -- A boolean SQL condition over the table's columns that narrows the rule (NULL: every record).
    filter           text        CHECK (filter IS NULL OR btrim(filter) <> ''),
    description      text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    -- An operator's release from the rule brake (`asset-sweeper approve --rule`); cleared when the rule changes.
    approved_until   timestamptz,
    approved_by      text,
    approval_reason  text,
    -- When the rule last had its turn in a pass: a pass gives the rule that waited longest its turn first, so a rule
    -- with a long backlog cannot keep the others from their share.
    last_turn_at     timestamptz,
    CHECK ((approved_until IS NULL) = (approved_by IS NULL))
);

-- Validates a rule as it is written, so a malformed one is refused at once by name rather than failing in a pass
-- at night: the table exists and is an ordinary table of the application, the column is a date or time of it,
-- and the filter is a boolean condition Postgres can plan against that table.
CREATE FUNCTION asset_sweeper_check_retention_rule() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    rel       regclass;
    qualified text;
    kind      "char";
    own       boolean;
    col_type  regtype;
BEGIN
    rel := to_regclass(NEW.table_name);
    IF rel IS NULL THEN
        RAISE EXCEPTION 'retention rule: table % does not exist', NEW.table_name USING ERRCODE = 'undefined_table';
    END IF;
    SELECT format('%I.%I', n.nspname, c.relname), c.relkind, c.relname = ANY (asset_sweeper_own_tables())
      INTO qualified, kind, own
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE c.oid = rel;
    IF own THEN
        RAISE EXCEPTION 'retention rule: % is a table of asset-sweeper, not of the application', qualified
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A partitioned table's rows are not told apart by ctid, which the batches delete by: declare a rule per
    -- partition instead.
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
    IF NEW.filter IS NOT NULL THEN
        -- One condition, not a statement: a semicolon or a comment could end the condition the DELETE puts it in.
        IF NEW.filter ~ '(;|--|/\*)' THEN
            RAISE EXCEPTION 'retention rule on %: filter % may not contain a semicolon or a comment', qualified,
                NEW.filter USING ERRCODE = 'syntax_error';
        END IF;
        BEGIN
            -- Planned, never run: Postgres parses the condition, resolves its columns against the table and
            -- requires it to be boolean.
            EXECUTE format('EXPLAIN SELECT FROM %s WHERE (%s)', qualified, NEW.filter);
        EXCEPTION WHEN OTHERS THEN
            RAISE EXCEPTION 'retention rule on %: filter % is not a boolean condition over the table: %', qualified,
                NEW.filter, SQLERRM USING ERRCODE = 'invalid_parameter_value';
        END;
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

CREATE TRIGGER retention_rules_check BEFORE INSERT OR UPDATE OF table_name, timestamp_column, keep, filter
    ON retention_rules FOR EACH ROW EXECUTE FUNCTION asset_sweeper_check_retention_rule();

-- What the records step did in the pass: per rule, the records deleted, whether it finished, and its error.
ALTER TABLE sweep_runs ADD COLUMN records jsonb;
