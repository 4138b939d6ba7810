-- Reference guards, and how a JSON document is matched against an asset id: the guard notes the mixed-case
-- spellings it sees, and `asset_sweeper_id_matches` builds the recheck's and discovery's paths from them, so the
-- two live here together. (The census's own functions are in census.sql.)
--
-- Applied by the migrator after the versioned migrations, whenever this file's text changed; the migrator writes
-- `migrator::UUID_WHOLE` into the guard. Never dropped: the guard triggers `asset-sweeper guards install` puts on
-- the application's tables depend on `asset_sweeper_guard()`, which is replaced in place.

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
--
-- At a declared path it notes mixed-case spellings (whether or not the asset exists yet: an application may write
-- an id before its row), it reads the path as the recheck does (a filter on strings, so a path that selects an
-- array reaches the ids in it), and a strict path that does not match a document selects nothing instead of
-- failing the write, as `@?` does for the recheck.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    DECLARE
        value jsonb;
        previous jsonb;
        ids uuid[];
        previous_ids uuid[];
        -- For a JSON source: the uuid-shaped strings its path selects, as written.
        spelled text[];
        removed uuid[];
        -- For a key source: the storage key the row names.
        key text;
    BEGIN
        -- The guarded column alone: the row as a whole would run the cast to JSON of every other column's type,
        -- the application's code among them, as the owner. A source column is an asset_id (or a domain over it,
        -- whose casts Postgres ignores), an array of them, or jsonb.
        -- Every update, whatever it names: a trigger of the application's may change the column in a statement
        -- that does not. One statement reads the new value and the old (OLD is NULL on an insert).
        -- A composite holding asset_id is read by its output function alone (`asset_sweeper_nested_ids`): its JSON
        -- form would run any cast to JSON the application gave one of its types, as the owner.
        -- A key source names assets by their storage key, which its template makes of the row's columns: the assets
        -- under that key are the ones the write refers to. An insert or an update that leaves the key as it was
        -- names nothing new.
        IF TG_ARGV[1] = 'key' THEN
            key := asset_sweeper.asset_sweeper_key_of(NEW, TG_ARGV[2]);
            IF key IS NULL OR (TG_OP = 'UPDATE' AND key IS NOT DISTINCT FROM asset_sweeper.asset_sweeper_key_of(OLD, TG_ARGV[2])) THEN
                RETURN NULL;
            END IF;
            ids := ARRAY(SELECT a.id FROM asset_sweeper.assets a WHERE a.storage_key = key);
        ELSIF TG_ARGV[1] = 'nested' THEN
            EXECUTE format('SELECT asset_sweeper.asset_sweeper_nested_ids(($1).%1$I),
                                   asset_sweeper.asset_sweeper_nested_ids(($2).%1$I)', TG_ARGV[0])
                INTO ids, previous_ids USING NEW, OLD;
            IF coalesce(cardinality(ids), 0) = 0 OR (TG_OP = 'UPDATE' AND ids IS NOT DISTINCT FROM previous_ids) THEN
                RETURN NULL;
            END IF;
        ELSE
            EXECUTE format('SELECT to_jsonb(($1).%1$I), to_jsonb(($2).%1$I)', TG_ARGV[0]) INTO value, previous
                USING NEW, OLD;
            IF value IS NULL OR value = 'null'::jsonb OR (TG_OP = 'UPDATE' AND value IS NOT DISTINCT FROM previous) THEN
                RETURN NULL;
            END IF;
        END IF;
        IF TG_ARGV[1] = 'json' THEN
            spelled := ARRAY(
                SELECT v #>> '{}'
                  FROM jsonb_path_query(value, (TG_ARGV[2] || ' ? (@.type() == "string")')::jsonpath, '{}', true) AS v
                 WHERE (v #>> '{}') ~* '{{uuid_pattern}}');
        END IF;
        ids := CASE TG_ARGV[1]
            WHEN 'domain' THEN ARRAY[(value #>> '{}')::uuid]
            WHEN 'domain_array' THEN
                ARRAY(SELECT e::uuid FROM jsonb_array_elements_text(value) AS e WHERE e IS NOT NULL)
            WHEN 'json' THEN ARRAY(SELECT s::uuid FROM unnest(spelled) AS s)
            WHEN 'nested' THEN ids
            WHEN 'key' THEN ids
        END;
        IF ids IS NULL THEN
            RAISE EXCEPTION 'asset-sweeper guard on %.%: unknown source kind %', TG_TABLE_NAME, TG_ARGV[0], TG_ARGV[1];
        END IF;
        IF cardinality(ids) = 0 THEN
            RETURN NULL;
        END IF;
        PERFORM 1 FROM asset_sweeper.assets WHERE id = ANY (ids) FOR KEY SHARE;
        -- Every spelling but the id's own lowercase and uppercase is noted: a mixed case, no hyphens or other
        -- groupings, braces (any string Postgres reads as the id).
        IF TG_ARGV[1] = 'json' AND EXISTS (SELECT 1 FROM unnest(spelled) AS s
                                            WHERE s NOT IN (s::uuid::text, upper(s::uuid::text))) THEN
            INSERT INTO asset_sweeper.asset_id_spellings (asset_id, spelling)
            SELECT DISTINCT s::uuid, s FROM unnest(spelled) AS s WHERE s NOT IN (s::uuid::text, upper(s::uuid::text))
            ON CONFLICT DO NOTHING;
        END IF;
        SELECT array_agg(DISTINCT i) INTO removed FROM unnest(ids) AS i
         WHERE NOT EXISTS (SELECT 1 FROM asset_sweeper.assets a WHERE a.id = i)
           AND EXISTS (SELECT 1 FROM asset_sweeper.settlement_events e WHERE e.asset_id = i AND e.action IN ('delete', 'purge'));
        IF removed IS NOT NULL THEN
            RAISE EXCEPTION USING
                ERRCODE = 'foreign_key_violation',
                MESSAGE = format('asset-sweeper: %I.%I.%I refers to asset %s, which asset-sweeper has removed',
                                 TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[0], array_to_string(removed, ', ')),
                HINT = 'Refer to an asset that exists; asset-sweeper undelete brings a removed one back while the bucket keeps its bytes.';
        END IF;
        RETURN NULL;
    END
$$;

-- The storage key `template` (a key source's: literal text and `{column}` placeholders) makes of `row`, or NULL when
-- a column it reads is NULL. A column is read as text only while its type is one whose text the system makes (the
-- key source's check allows no other): an application that changed the type since gets no key read, and the schema
-- check refuses the map until the declaration is fixed. Called by the guard, as the owner: nothing of the
-- application's may run here.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_key_of(row_value anyelement, template text) RETURNS text
    LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
    DECLARE
        part text[];
        typ regtype;
        value text;
        key text := '';
    BEGIN
        FOR part IN SELECT m FROM regexp_matches(template, '([^{}]*)(\{([^{}]*)\})?', 'g') AS m LOOP
            key := key || part[1];
            CONTINUE WHEN part[3] IS NULL;
            EXECUTE format('SELECT pg_typeof(($1).%I)', part[3]) INTO typ USING row_value;
            IF typ NOT IN ('text'::regtype, 'character varying'::regtype, 'character'::regtype, 'smallint'::regtype,
                           'integer'::regtype, 'bigint'::regtype, 'uuid'::regtype) THEN
                RETURN NULL;
            END IF;
            EXECUTE format('SELECT ($1).%I::text', part[3]) INTO value USING row_value;
            IF value IS NULL THEN
                RETURN NULL;
            END IF;
            key := key || value;
        END LOOP;
        RETURN key;
    END
$$;

-- A JSON document refers to an asset when a string at its declared path spells the asset's id: lowercase,
-- uppercase, or any other spelling Postgres reads as the id that the reference guard or the census noted. The
-- recheck (one id, bound as constants so each `@?` is planned with its values) and discovery (a batch, inside one
-- statement) both build their paths here. The table's check keeps a noted spelling to hex digits, hyphens and
-- braces that read as the id, and so does the filter here: splicing it into a path cannot inject.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_id_matches(id uuid) RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN format('@ == "%s" || @ == "%s"', id, upper(id::text))
           || coalesce((SELECT string_agg(format(' || @ == "%s"', s.spelling), '' ORDER BY s.spelling)
                          FROM asset_sweeper.asset_id_spellings s
                         WHERE s.asset_id = id AND s.spelling ~ '^[{}0-9a-fA-F-]+$' AND s.spelling::uuid = id), '');

-- `path` narrowed to the strings `matches` (from asset_sweeper_id_matches) accepts: what `@?` asks of a document.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_path_matching(path text, matches text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN format('%s ? (%s)', path, matches);

-- The asset ids a value of a composite type holds, however deep (a composite inside a composite, an array of
-- them, the `asset_id` domain anywhere inside), as its output function writes them: what the recheck, discovery
-- and the reference guard ask of a composite source, and what its GIN index holds
-- (`CREATE INDEX ... USING gin (asset_sweeper.asset_sweeper_nested_ids(column))`). Any uuid in the value counts,
-- a text field's too: more references, never fewer. The output function, not a cast: a cast to text of the
-- application's type would run the application's code. IMMUTABLE for the index: a uuid's output depends on no
-- setting. Anyone may call it (a write to the indexed table runs it as the writer); it reads nothing.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_nested_ids(value anyelement) RETURNS uuid[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
    SELECT ARRAY(SELECT DISTINCT m[1]::uuid FROM regexp_matches(format('%s', value), '{{uuid_in_text}}', 'g') AS m
                  ORDER BY 1)
$$;
