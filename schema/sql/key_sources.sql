-- Key sources (docs/integrating.md, "Key sources"): a table whose rows name storage keys by a template of literal
-- text and `{column}` placeholders. Checked as each declaration is written, so a mistake is refused by name when the
-- application's migration runs, not at night in a pass. SECURITY DEFINER, on the system's path: it reads the catalog
-- whatever the writer may read, and runs nothing of the application's (the template is parsed here, never run).
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_check_key_source() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    rel       regclass := to_regclass(format('%I.%I', NEW.table_schema, NEW.table_name));
    kind      "char";
    nsp       text;
    col       text;
    col_type  regtype;
    rest      text;
    placeholders int := 0;
BEGIN
    IF rel IS NULL THEN
        RAISE EXCEPTION 'key source: table %.% does not exist', NEW.table_schema, NEW.table_name
            USING ERRCODE = 'undefined_table';
    END IF;
    SELECT c.relkind, n.nspname INTO kind, nsp FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE c.oid = rel;
    IF kind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION 'key source: %.% is not a table', NEW.table_schema, NEW.table_name
            USING ERRCODE = 'wrong_object_type';
    END IF;
    IF nsp IN ('asset_sweeper', 'asset_sweeper_private') OR nsp IN ('pg_catalog', 'information_schema') OR nsp LIKE 'pg\_%' THEN
        RAISE EXCEPTION 'key source: %.% is not a table of the application', NEW.table_schema, NEW.table_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A template, not an expression: no operator, quote, comment or call, so nothing of it can run.
    IF NEW.template ~ '(\|\||''|;|--|/\*)' THEN
        RAISE EXCEPTION 'key source on %.%: % is an SQL expression; a key source is a template of literal text and {column} placeholders, such as ''media/{file}''',
            NEW.table_schema, NEW.table_name, NEW.template USING ERRCODE = 'syntax_error';
    END IF;
    rest := regexp_replace(NEW.template, '\{[^{}]*\}', '', 'g');
    IF rest ~ '[A-Za-z_][A-Za-z_0-9]*\s*\(' THEN
        RAISE EXCEPTION 'key source on %.%: % calls a function; no function runs in a key source: write the key as literal text and {column} placeholders, such as ''media/{file}''',
            NEW.table_schema, NEW.table_name, NEW.template USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF rest ~ '[{}]' THEN
        RAISE EXCEPTION 'key source on %.%: % has an unmatched brace; placeholders are written {column}',
            NEW.table_schema, NEW.table_name, NEW.template USING ERRCODE = 'syntax_error';
    END IF;
    FOR col IN SELECT m[1] FROM regexp_matches(NEW.template, '\{([^{}]*)\}', 'g') AS m LOOP
        placeholders := placeholders + 1;
        SELECT a.atttypid::regtype INTO col_type FROM pg_attribute a
         WHERE a.attrelid = rel AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped;
        IF col_type IS NULL THEN
            RAISE EXCEPTION 'key source on %.%: the table has no column % (template %)', NEW.table_schema,
                NEW.table_name, col, NEW.template USING ERRCODE = 'undefined_column';
        END IF;
        -- Only types whose text the system makes: any other's text (an enum's aside, a domain's, the application's
        -- own type's) could run the application's code in the recheck, the guard or the census.
        IF col_type NOT IN ('text'::regtype, 'character varying'::regtype, 'character'::regtype, 'smallint'::regtype,
                            'integer'::regtype, 'bigint'::regtype, 'uuid'::regtype) THEN
            RAISE EXCEPTION 'key source on %.%: column % is %, not text: a key source reads text, varchar, char, integer or uuid columns',
                NEW.table_schema, NEW.table_name, col, col_type USING ERRCODE = 'datatype_mismatch';
        END IF;
    END LOOP;
    IF placeholders = 0 THEN
        RAISE EXCEPTION 'key source on %.%: % names no column; write the column holding the name as {column}, such as ''media/{file}''',
            NEW.table_schema, NEW.table_name, NEW.template USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER asset_key_sources_checked BEFORE INSERT OR UPDATE ON asset_sweeper_private.asset_key_sources
    FOR EACH ROW EXECUTE FUNCTION asset_sweeper.asset_sweeper_check_key_source();
-- A declaration is part of the reference map: any write to one is a schema change.
CREATE OR REPLACE TRIGGER asset_key_sources_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON asset_sweeper_private.asset_key_sources
    FOR EACH STATEMENT EXECUTE FUNCTION asset_sweeper.asset_sweeper_declarations_changed();
ALTER TABLE asset_sweeper_private.asset_key_sources ENABLE ALWAYS TRIGGER asset_key_sources_checked;
ALTER TABLE asset_sweeper_private.asset_key_sources ENABLE ALWAYS TRIGGER asset_key_sources_changed;
