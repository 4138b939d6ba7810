-- The storage quota: per workspace, how many bytes its records may hold (`workspace_quotas`), and the usage kept as
-- the asset rows change (`workspace_objects` and `workspace_usage` as of the last fold, `workspace_object_changes`
-- appended by every asset write since; the tables are a versioned migration's). Here: the trigger that appends the
-- changes, the fold each sweep pass runs, the readers, and the check the application's upload calls.
--
-- Applied by the migrator after the versioned migrations, whenever this file's text changed. SQL-language bodies
-- are checked when they are created, so what one calls comes before it.

-- The largest quota, in bytes: 1 EiB (2^60). Stored bytes may reach twice the quota, and every figure is a bigint;
-- far above any bucket's size, the limit keeps those sums in range, so a typo of a quota is refused when it is
-- written rather than failing every reader with "bigint out of range".
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_quota_limit() RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 1152921504606846976::bigint
$$;

-- Refuses a quota outside 1 byte .. the limit as it is written, saying which and how to mean "no limit". The upload
-- check's no-op update of a row written before the limit existed passes: its readers count it without overflow.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_check_quota() RETURNS trigger
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.quota_bytes = OLD.quota_bytes THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'workspace_quotas: a quota of % bytes for workspace % is out of range: a quota is from 1 to % bytes (1 EiB); delete the workspace''s row for no limit',
        NEW.quota_bytes, NEW.workspace_id, asset_sweeper.asset_sweeper_quota_limit()
        USING ERRCODE = 'numeric_value_out_of_range';
END
$$;

CREATE OR REPLACE TRIGGER workspace_quotas_in_range BEFORE INSERT OR UPDATE OF quota_bytes ON asset_sweeper_private.workspace_quotas
    FOR EACH ROW WHEN (NEW.quota_bytes NOT BETWEEN 1 AND asset_sweeper.asset_sweeper_quota_limit())
    EXECUTE FUNCTION asset_sweeper.asset_sweeper_check_quota();

-- Whether an asset row in `state` holds its bytes for the quota.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_holds(state text) RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT state IN ('pending', 'attached', 'failed')
$$;

-- Whether the rows a workspace has on an object make it retired for the workspace: every one of them retired, as
-- `usage <workspace>` counts it from the rows.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_all_retired(asset_rows integer, retired_rows integer) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN (asset_rows > 0 AND retired_rows >= asset_rows)::int;

-- SECURITY DEFINER: the application's asset writes append their changes to a table it may not write itself.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_count_asset() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- The stored object's size (it exists while an asset row points at it); the row's own if it does not.
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO asset_sweeper_private.workspace_object_changes (workspace_id, storage_key, byte_size, asset_rows, holding_rows,
                                                                    retired_rows)
        SELECT OLD.workspace_id, OLD.storage_key,
               coalesce((SELECT o.byte_size FROM asset_sweeper_private.stored_objects o WHERE o.storage_key = OLD.storage_key), OLD.byte_size),
               -1, -asset_sweeper.asset_sweeper_holds(OLD.state)::int, -(OLD.state = 'retired')::int;
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        INSERT INTO asset_sweeper_private.workspace_object_changes (workspace_id, storage_key, byte_size, asset_rows, holding_rows,
                                                                    retired_rows)
        SELECT NEW.workspace_id, NEW.storage_key,
               coalesce((SELECT o.byte_size FROM asset_sweeper_private.stored_objects o WHERE o.storage_key = NEW.storage_key), NEW.byte_size),
               1, asset_sweeper.asset_sweeper_holds(NEW.state)::int, (NEW.state = 'retired')::int;
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER assets_count_usage AFTER INSERT OR DELETE OR UPDATE OF workspace_id, storage_key, state
    ON asset_sweeper_private.assets FOR EACH ROW EXECUTE FUNCTION asset_sweeper.asset_sweeper_count_asset();

-- Per object of `ws` with changes not yet folded: its counts before them and after them. What a reader adds to
-- the workspace's folded totals, and what the fold writes.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_object_changes(ws uuid)
    RETURNS TABLE (storage_key text, byte_size bigint, rows_before integer, rows_after integer,
                   holding_before integer, holding_after integer)
    LANGUAGE sql STABLE AS $$
    SELECT c.storage_key, coalesce(o.byte_size, max(c.byte_size)),
           coalesce(o.asset_rows, 0), coalesce(o.asset_rows, 0) + sum(c.asset_rows)::int,
           coalesce(o.holding_rows, 0), coalesce(o.holding_rows, 0) + sum(c.holding_rows)::int
      FROM asset_sweeper_private.workspace_object_changes c
      LEFT JOIN asset_sweeper_private.workspace_objects o ON o.workspace_id = c.workspace_id AND o.storage_key = c.storage_key
     WHERE c.workspace_id = ws
     GROUP BY c.storage_key, o.byte_size, o.asset_rows, o.holding_rows
$$;

-- Held and stored bytes of `ws` now: the folded totals and what the changes since move.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_usage_now(ws uuid, OUT held bigint, OUT stored bigint) LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT u.held_bytes FROM asset_sweeper_private.workspace_usage u WHERE u.workspace_id = ws), 0)
           + coalesce(sum(c.byte_size * ((c.holding_after > 0)::int - (c.holding_before > 0)::int)), 0)::bigint,
           coalesce((SELECT u.stored_bytes FROM asset_sweeper_private.workspace_usage u WHERE u.workspace_id = ws), 0)
           + coalesce(sum(c.byte_size * ((c.rows_after > 0)::int - (c.rows_before > 0)::int)), 0)::bigint
      FROM asset_sweeper.asset_sweeper_object_changes(ws) c
$$;

-- Folds the changes appended since into the counts (each sweep pass, one at a time, in one transaction): a reader
-- sees either the changes or the counts they went into. Returns how many changes it folded.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_fold_usage() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    folded bigint;
BEGIN
    -- Totals kept before the retired objects were (`retired_bytes` NULL, after the upgrade that added them): counted
    -- once, from the rows, here, where one pass at a time folds, rather than beside a fold that could add the
    -- changes it read to the counts made without them.
    IF EXISTS (SELECT 1 FROM asset_sweeper_private.workspace_usage WHERE retired_bytes IS NULL) THEN
        SELECT count(*) INTO folded FROM asset_sweeper_private.workspace_object_changes;
        PERFORM asset_sweeper.asset_sweeper_recount_usage();
        RETURN folded;
    END IF;
    CREATE TEMP TABLE IF NOT EXISTS pg_temp.asset_sweeper_folding (id bigint) ON COMMIT DROP;
    INSERT INTO pg_temp.asset_sweeper_folding SELECT id FROM asset_sweeper_private.workspace_object_changes;
    GET DIAGNOSTICS folded = ROW_COUNT;
    IF folded = 0 THEN
        DROP TABLE pg_temp.asset_sweeper_folding;
        RETURN 0;
    END IF;
    CREATE TEMP TABLE pg_temp.asset_sweeper_folded ON COMMIT DROP AS
    SELECT c.workspace_id, c.storage_key, coalesce(o.byte_size, max(c.byte_size)) AS byte_size,
           coalesce(o.asset_rows, 0) AS rows_before, coalesce(o.asset_rows, 0) + sum(c.asset_rows)::int AS rows_after,
           coalesce(o.holding_rows, 0) AS holding_before,
           coalesce(o.holding_rows, 0) + sum(c.holding_rows)::int AS holding_after,
           asset_sweeper.asset_sweeper_all_retired(coalesce(o.asset_rows, 0), coalesce(o.retired_rows, 0)) AS retired_before,
           coalesce(o.retired_rows, 0) + sum(c.retired_rows)::int AS retired_rows_after
      FROM asset_sweeper_private.workspace_object_changes c
      JOIN pg_temp.asset_sweeper_folding f ON f.id = c.id
      LEFT JOIN asset_sweeper_private.workspace_objects o ON o.workspace_id = c.workspace_id AND o.storage_key = c.storage_key
     GROUP BY c.workspace_id, c.storage_key, o.byte_size, o.asset_rows, o.holding_rows, o.retired_rows;
    -- Retired objects: those every row of the workspace now leaves retired, less those it did before.
    INSERT INTO asset_sweeper_private.workspace_usage AS u (workspace_id, held_bytes, stored_bytes, retired_objects,
                                                            retired_bytes)
    SELECT workspace_id,
           sum(byte_size * ((holding_after > 0)::int - (holding_before > 0)::int)),
           sum(byte_size * ((rows_after > 0)::int - (rows_before > 0)::int)),
           sum(asset_sweeper.asset_sweeper_all_retired(rows_after, retired_rows_after) - retired_before),
           sum(byte_size * (asset_sweeper.asset_sweeper_all_retired(rows_after, retired_rows_after) - retired_before))
      FROM pg_temp.asset_sweeper_folded GROUP BY workspace_id
    ON CONFLICT (workspace_id) DO UPDATE
       SET held_bytes = u.held_bytes + EXCLUDED.held_bytes, stored_bytes = u.stored_bytes + EXCLUDED.stored_bytes,
           retired_objects = u.retired_objects + EXCLUDED.retired_objects,
           retired_bytes = u.retired_bytes + EXCLUDED.retired_bytes;
    DELETE FROM asset_sweeper_private.workspace_objects o USING pg_temp.asset_sweeper_folded f
     WHERE o.workspace_id = f.workspace_id AND o.storage_key = f.storage_key AND f.rows_after <= 0;
    INSERT INTO asset_sweeper_private.workspace_objects AS o (workspace_id, storage_key, byte_size, asset_rows, holding_rows,
                                                              retired_rows)
    SELECT workspace_id, storage_key, byte_size, rows_after, greatest(holding_after, 0), greatest(retired_rows_after, 0)
      FROM pg_temp.asset_sweeper_folded WHERE rows_after > 0
    ON CONFLICT (workspace_id, storage_key) DO UPDATE
       SET asset_rows = EXCLUDED.asset_rows, holding_rows = EXCLUDED.holding_rows, retired_rows = EXCLUDED.retired_rows;
    DELETE FROM asset_sweeper_private.workspace_object_changes c USING pg_temp.asset_sweeper_folding f WHERE c.id = f.id;
    DROP TABLE pg_temp.asset_sweeper_folded;
    DROP TABLE pg_temp.asset_sweeper_folding;
    RETURN folded;
END
$$;

-- Counts every workspace again from `assets`: after asset rows were loaded with triggers off, or `assets` was
-- truncated. Holds off asset writes' changes while it works, so none is lost between the count and the swap.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_recount_usage() RETURNS void LANGUAGE sql AS $$
    LOCK TABLE asset_sweeper_private.workspace_object_changes IN EXCLUSIVE MODE;
    DELETE FROM asset_sweeper_private.workspace_object_changes;
    -- Zeroed, not deleted: the sweep, which recounts in its fold after an upgrade, may not delete these rows.
    UPDATE asset_sweeper_private.workspace_usage
       SET held_bytes = 0, stored_bytes = 0, retired_objects = 0, retired_bytes = 0;
    DELETE FROM asset_sweeper_private.workspace_objects;
    INSERT INTO asset_sweeper_private.workspace_objects (workspace_id, storage_key, byte_size, asset_rows, holding_rows,
                                                         retired_rows)
    SELECT a.workspace_id, a.storage_key, max(o.byte_size), count(*), count(*) FILTER (WHERE asset_sweeper.asset_sweeper_holds(a.state)),
           count(*) FILTER (WHERE a.state = 'retired')
      FROM asset_sweeper_private.assets a JOIN asset_sweeper_private.stored_objects o ON o.storage_key = a.storage_key
     GROUP BY a.workspace_id, a.storage_key;
    INSERT INTO asset_sweeper_private.workspace_usage AS u (workspace_id, held_bytes, stored_bytes, retired_objects,
                                                            retired_bytes)
    SELECT workspace_id, coalesce(sum(byte_size) FILTER (WHERE holding_rows > 0), 0), sum(byte_size),
           sum(asset_sweeper.asset_sweeper_all_retired(asset_rows, retired_rows)),
           sum(byte_size * asset_sweeper.asset_sweeper_all_retired(asset_rows, retired_rows))
      FROM asset_sweeper_private.workspace_objects GROUP BY workspace_id
    ON CONFLICT (workspace_id) DO UPDATE
       SET held_bytes = EXCLUDED.held_bytes, stored_bytes = EXCLUDED.stored_bytes,
           retired_objects = EXCLUDED.retired_objects, retired_bytes = EXCLUDED.retired_bytes;
$$;


-- One workspace's usage, each stored object counted once however many of its asset rows share it:
--   held:    bytes its records still hold: an object with a `pending`, `attached` or `failed` row, or one whose
--            `released` or `retired` row the census found named in a column that is no source (a finding keeps its
--            asset, so its bytes are not free). While the newest schema check refused, or before the first one,
--            every stored byte: an unreadable reference must not look free.
--   stored:  every object any of its rows points at, `released` and `retired` ones (waiting for removal) included.
--   waiting: stored objects only `released` or `retired` rows point at.
--   headroom: the largest upload the check would let through now (NULL without a quota). Counted in numeric,
--            so a quota written before its limit reads too (at most the largest bigint).
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_usage(workspace uuid)
    RETURNS TABLE (quota_bytes bigint, held_bytes bigint, stored_bytes bigint, waiting_bytes bigint,
                   headroom_bytes bigint, schema_refused boolean)
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH totals AS (
        SELECT n.held, n.stored FROM asset_sweeper.asset_sweeper_usage_now(workspace) n
    ), verdict AS (
        SELECT coalesce((SELECT NOT v.valid FROM asset_sweeper_private.schema_verdicts v ORDER BY v.id DESC LIMIT 1), true) AS refused
    ), quota AS (
        SELECT (SELECT q.quota_bytes FROM asset_sweeper_private.workspace_quotas q WHERE q.workspace_id = workspace) AS bytes
    ), found AS (
        -- Objects only a finding holds: few while the schema check passes (a column where many rows name assets
        -- refuses it).
        SELECT coalesce(sum(x.byte_size), 0)::bigint AS bytes FROM (
            SELECT DISTINCT ON (a.storage_key) a.byte_size
              FROM asset_sweeper_private.census_findings f
              JOIN asset_sweeper_private.assets a ON a.id = f.asset_id AND a.workspace_id = workspace
             WHERE a.state IN ('released', 'retired')
               AND NOT EXISTS (SELECT 1 FROM asset_sweeper_private.assets h
                                WHERE h.storage_key = a.storage_key AND h.workspace_id = workspace
                                  AND h.state IN ('pending', 'attached', 'failed'))
        ) x
    ), counted AS (
        SELECT quota.bytes AS quota,
               CASE WHEN verdict.refused THEN totals.stored ELSE totals.held + found.bytes END AS held,
               totals.stored, totals.stored - totals.held - found.bytes AS waiting, verdict.refused
          FROM totals, verdict, quota, found
    )
    SELECT quota, held, stored, waiting,
           CASE WHEN quota IS NOT NULL
                THEN least(greatest(least(quota::numeric - held, 2 * quota::numeric - stored), 0),
                           9223372036854775807)::bigint END,
           refused
      FROM counted
$$;

-- Called by the application in its upload transaction, before it inserts the upload's rows, with the upload's
-- size: raises when the upload would take the workspace's held bytes past its quota, or its stored bytes past
-- twice the quota. It writes the workspace's quota row (a no-op update), which holds it until the transaction
-- ends, so two uploads of one workspace cannot both pass on the same figures: under read committed the second
-- waits and counts the first; under repeatable read or serializable it fails with a serialization error, to be
-- retried, rather than count from a snapshot taken before the first committed. Without a quota row it allows
-- everything. A NULL argument is a mistake of the caller's, never "no limit": it raises, naming the argument. The
-- sums are numeric, so no size or quota overflows them.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_check_upload(workspace_id uuid, byte_size bigint) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    quota bigint;
    usage record;
BEGIN
    IF $1 IS NULL THEN
        RAISE EXCEPTION 'asset_sweeper_check_upload: workspace_id must be the uploading workspace''s id, got NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF $2 IS NULL OR $2 < 0 THEN
        RAISE EXCEPTION 'asset_sweeper_check_upload: byte_size must be the upload''s size in bytes, got %',
            coalesce($2::text, 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE asset_sweeper_private.workspace_quotas q SET quota_bytes = q.quota_bytes WHERE q.workspace_id = $1 RETURNING q.quota_bytes INTO quota;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT * INTO usage FROM asset_sweeper.asset_sweeper_usage($1);
    IF usage.held_bytes::numeric + $2 > quota THEN
        RAISE EXCEPTION 'This workspace''s storage quota is used up: it holds % of % bytes, and this upload needs % more.',
            usage.held_bytes, quota, $2
            USING ERRCODE = 'configuration_limit_exceeded',
                  HINT = CASE WHEN usage.schema_refused
                              THEN 'The newest schema check refused (or none has run yet), so every stored byte counts as held until one passes.'
                              ELSE 'Remove or replace files to free space.' END;
    END IF;
    IF usage.stored_bytes::numeric + $2 > 2 * quota::numeric THEN
        RAISE EXCEPTION 'Too many replaced images are waiting to be removed tonight. Try again tomorrow.'
            USING ERRCODE = 'configuration_limit_exceeded',
                  DETAIL = format('workspace %s stores %s bytes (%s waiting for removal); the limit is twice its quota of %s',
                                  $1, usage.stored_bytes, usage.waiting_bytes, quota);
    END IF;
END
$$;
