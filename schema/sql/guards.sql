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
--
-- Two halves (docs/security.md, "The rule"). The trigger function runs as the writer: it reads the row's value,
-- whose type is the application's and whose casts (to JSON, to text) may be the application's code, so that code
-- runs with the writer's rights and no more. It hands plain uuids, strings and a key to
-- `asset_sweeper_guard_refers`, the one privileged half, which takes nothing of the application's types and reads
-- the sweeper's tables whatever the writer may read, as a foreign key's check runs as the table's owner.
--
-- This is the shared guard: a key source's, and every guard an older release installed. `guards install` makes a
-- function of the same shape for each other guarded column (`asset_sweeper_guard_of_<hash>`, schema/src/guards.rs),
-- which names its column in its text: this one must build a statement to read a column it learns from its
-- arguments, and Postgres parses and plans that statement on every write.
--
-- `guards install` puts two triggers on each column, one after an insert whose value is there and one after an
-- update that changed it (a condition Postgres evaluates on the row as written, without calling this function),
-- and the conditions name the column: Postgres refuses to retype or drop it while they are in place. The fourth
-- argument is the type `install` validated the column as (its oid), which the schema check compares with the
-- catalog's.
--
-- At a declared path it notes mixed-case spellings (whether or not the asset exists yet: an application may write
-- an id before its row), it reads the path as the recheck does (a filter on strings, so a path that selects an
-- array reaches the ids in it), and a strict path that does not match a document selects nothing instead of
-- failing the write, as `@?` does for the recheck.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_guard() RETURNS trigger
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
    DECLARE
        value jsonb;
        previous jsonb;
        ids uuid[];
        previous_ids uuid[];
        -- For a JSON source: the uuid-shaped strings its path selects, as written.
        spelled text[];
        -- For a key source: the storage key the row names.
        key text;
    BEGIN
        -- The guarded column alone: the row as a whole would run the cast to JSON of every other column's type.
        -- A source column is an asset_id (or a domain over it, whose casts Postgres ignores), an array of them, or
        -- jsonb.
        -- One statement reads the new value and the old (OLD is NULL on an insert); an update whose trigger is
        -- the old single one (before `guards install` ran again) is compared here.
        -- A composite holding asset_id is read by its output function alone (`asset_sweeper_nested_ids`).
        -- A key source names assets by their storage key, which its template makes of the row's columns: the assets
        -- under that key are the ones the write refers to. An insert or an update that leaves the key as it was
        -- names nothing new.
        -- A column renamed since `guards install` is not read: the write goes through, and the schema check names
        -- the guard until `guards install` runs again.
        BEGIN
            IF TG_ARGV[1] = 'key' THEN
                key := asset_sweeper.asset_sweeper_key_of(NEW, TG_ARGV[2]);
                IF key IS NULL OR (TG_OP = 'UPDATE' AND key IS NOT DISTINCT FROM asset_sweeper.asset_sweeper_key_of(OLD, TG_ARGV[2])) THEN
                    RETURN NULL;
                END IF;
                ids := '{}';
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
        EXCEPTION WHEN undefined_column THEN
            RETURN NULL;
        END;
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
        IF cardinality(ids) = 0 AND key IS NULL THEN
            RETURN NULL;
        END IF;
        PERFORM asset_sweeper.asset_sweeper_guard_refers(TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[0], ids, spelled, key);
        RETURN NULL;
    END
$$;

-- The guard's privileged half: the write it runs for refers to the assets `ids`, and to those stored under `key`.
-- Locks them FOR KEY SHARE, notes the mixed-case `spelled` ids (any string Postgres reads as the id but its own
-- lowercase and uppercase), and fails naming the column when one of them is an asset the sweeper removed.
-- SECURITY DEFINER, on uuids and text alone: nothing of the application's types reaches it, so nothing of the
-- application's runs here (docs/security.md, "The rule"). It only keeps: a lock, a spelling that matches more.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_guard_refers(
    table_schema text, table_name text, column_name text, ids uuid[], spelled text[], key text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    DECLARE
        removed uuid[];
        locked bigint;
    BEGIN
        IF key IS NOT NULL THEN
            ids := coalesce(ids, '{}') || ARRAY(SELECT a.id FROM asset_sweeper_private.assets a WHERE a.storage_key = key);
        END IF;
        IF coalesce(cardinality(ids), 0) = 0 THEN
            RETURN;
        END IF;
        PERFORM 1 FROM asset_sweeper_private.assets WHERE id = ANY (ids) FOR KEY SHARE;
        GET DIAGNOSTICS locked = ROW_COUNT;
        IF spelled IS NOT NULL THEN
            IF EXISTS (SELECT 1 FROM unnest(spelled) AS s
                        WHERE s ~* '{{uuid_pattern}}' AND s NOT IN (s::uuid::text, upper(s::uuid::text))) THEN
                INSERT INTO asset_sweeper_private.asset_id_spellings (asset_id, spelling)
                SELECT DISTINCT s::uuid, s FROM unnest(spelled) AS s
                 WHERE s ~* '{{uuid_pattern}}' AND s NOT IN (s::uuid::text, upper(s::uuid::text))
                ON CONFLICT DO NOTHING;
            END IF;
        END IF;
        -- Every id locked is an asset that is there: nothing was removed (the common write, one statement).
        IF locked >= cardinality(ids) THEN
            RETURN;
        END IF;
        -- A new statement, so a snapshot taken after the lock's wait: a settle that removed an asset while this
        -- write waited for it has committed its audit row.
        SELECT array_agg(DISTINCT i) INTO removed FROM unnest(ids) AS i
         WHERE NOT EXISTS (SELECT 1 FROM asset_sweeper_private.assets a WHERE a.id = i)
           AND EXISTS (SELECT 1 FROM asset_sweeper_private.settlement_events e WHERE e.asset_id = i AND e.action IN ('delete', 'purge'));
        IF removed IS NOT NULL THEN
            RAISE EXCEPTION USING
                ERRCODE = 'foreign_key_violation',
                MESSAGE = format('asset-sweeper: %I.%I.%I refers to asset %s, which asset-sweeper has removed',
                                 table_schema, table_name, column_name, array_to_string(removed, ', ')),
                HINT = 'Refer to an asset that exists; asset-sweeper undelete brings a removed one back while the bucket keeps its bytes.';
        END IF;
    END
$$;

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
                          FROM asset_sweeper_private.asset_id_spellings s
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
