-- The storage quota: per workspace, how many bytes its records may hold. A replaced or cleared file frees its
-- space at the save that releases it, not when the consumer removes it; every stored byte, replaced ones waiting
-- for removal included, may use at most twice the quota.
CREATE TABLE workspace_quotas (
    workspace_id uuid        PRIMARY KEY,
    quota_bytes  bigint      NOT NULL CHECK (quota_bytes > 0),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- Usage is kept as the asset rows change, so the upload check reads a few rows whatever the workspace's size
-- (counted from `assets` on each upload it took 0.3 s for a workspace of 200 000 assets).
--
-- Per workspace and stored object: how many of the workspace's asset rows point at it, and how many of those hold
-- it (`pending`, an upload about to be used; `attached`; `failed`, whose state is unknown). A row here is written
-- only by writes about that object, which already wait for one another on `stored_objects`.
CREATE TABLE workspace_objects (
    workspace_id uuid    NOT NULL,
    storage_key  text    NOT NULL,
    byte_size    bigint  NOT NULL,
    asset_rows   integer NOT NULL CHECK (asset_rows > 0),
    holding_rows integer NOT NULL CHECK (holding_rows >= 0),
    PRIMARY KEY (workspace_id, storage_key)
);

-- A workspace's totals as of the last fold, and the changes since, appended by every asset write that moves them:
-- appending makes no writer wait for another (a settle holds its transaction across an S3 call), and each sweep
-- pass folds the changes into the totals.
CREATE TABLE workspace_usage (
    workspace_id uuid   PRIMARY KEY,
    held_bytes   bigint NOT NULL,
    stored_bytes bigint NOT NULL
);
CREATE TABLE workspace_usage_changes (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id uuid   NOT NULL,
    held_bytes   bigint NOT NULL,
    stored_bytes bigint NOT NULL
);
CREATE INDEX workspace_usage_changes_workspace ON workspace_usage_changes (workspace_id);

-- Whether an asset row in `state` holds its bytes for the quota.
CREATE FUNCTION asset_sweeper_holds(state text) RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT state IN ('pending', 'attached', 'failed')
$$;

-- Counts `rows` asset rows more (or fewer) on object `key` of workspace `ws`, `holding` of them holding it, and
-- appends what that changes of the workspace's held and stored bytes.
CREATE FUNCTION asset_sweeper_count_object(ws uuid, object text, bytes bigint, rows_by integer, holding_by integer)
    RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    after_rows    integer;
    after_holding integer;
    size          bigint;
    held          bigint := 0;
    stored        bigint := 0;
BEGIN
    IF rows_by = 0 AND holding_by = 0 THEN
        RETURN;
    END IF;
    IF rows_by > 0 THEN
        INSERT INTO workspace_objects AS o (workspace_id, storage_key, byte_size, asset_rows, holding_rows)
        VALUES (ws, object, bytes, rows_by, holding_by)
        ON CONFLICT (workspace_id, storage_key) DO UPDATE
           SET asset_rows = o.asset_rows + EXCLUDED.asset_rows, holding_rows = o.holding_rows + EXCLUDED.holding_rows
        RETURNING o.asset_rows, o.holding_rows, o.byte_size INTO after_rows, after_holding, size;
    ELSE
        -- Never fails the application's write: an object not counted (rows loaded with triggers off) is recounted
        -- by asset_sweeper_recount_usage().
        UPDATE workspace_objects o
           SET asset_rows = o.asset_rows + rows_by, holding_rows = greatest(o.holding_rows + holding_by, 0)
         WHERE o.workspace_id = ws AND o.storage_key = object AND o.asset_rows + rows_by > 0
        RETURNING o.asset_rows, o.holding_rows, o.byte_size INTO after_rows, after_holding, size;
        IF NOT FOUND THEN
            DELETE FROM workspace_objects o WHERE o.workspace_id = ws AND o.storage_key = object
            RETURNING 0, 0, o.byte_size INTO after_rows, after_holding, size;
            IF NOT FOUND THEN
                RETURN;
            END IF;
        END IF;
    END IF;
    IF (after_rows > 0) <> (after_rows - rows_by > 0) THEN
        stored := CASE WHEN after_rows > 0 THEN size ELSE -size END;
    END IF;
    IF (after_holding > 0) <> (after_holding - holding_by > 0) THEN
        held := CASE WHEN after_holding > 0 THEN size ELSE -size END;
    END IF;
    IF held <> 0 OR stored <> 0 THEN
        INSERT INTO workspace_usage_changes (workspace_id, held_bytes, stored_bytes) VALUES (ws, held, stored);
    END IF;
END
$$;

CREATE FUNCTION asset_sweeper_count_asset() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND (OLD.workspace_id, OLD.storage_key, OLD.byte_size)
                            IS NOT DISTINCT FROM (NEW.workspace_id, NEW.storage_key, NEW.byte_size) THEN
        PERFORM asset_sweeper_count_object(NEW.workspace_id, NEW.storage_key, NEW.byte_size, 0,
            asset_sweeper_holds(NEW.state)::int - asset_sweeper_holds(OLD.state)::int);
        RETURN NULL;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM asset_sweeper_count_object(OLD.workspace_id, OLD.storage_key, OLD.byte_size, -1,
            -asset_sweeper_holds(OLD.state)::int);
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        PERFORM asset_sweeper_count_object(NEW.workspace_id, NEW.storage_key, NEW.byte_size, 1,
            asset_sweeper_holds(NEW.state)::int);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER assets_count_usage AFTER INSERT OR DELETE OR UPDATE OF workspace_id, storage_key, byte_size, state
    ON assets FOR EACH ROW EXECUTE FUNCTION asset_sweeper_count_asset();

-- Folds the changes appended since into the totals (each sweep pass). One statement: a reader sees either the
-- changes or the totals they went into, never both or neither.
CREATE FUNCTION asset_sweeper_fold_usage() RETURNS bigint LANGUAGE sql AS $$
    WITH folded AS (
        DELETE FROM workspace_usage_changes RETURNING workspace_id, held_bytes, stored_bytes
    ), sums AS (
        SELECT workspace_id, sum(held_bytes)::bigint AS held, sum(stored_bytes)::bigint AS stored, count(*) AS n
          FROM folded GROUP BY workspace_id
    ), written AS (
        INSERT INTO workspace_usage AS u (workspace_id, held_bytes, stored_bytes)
        SELECT workspace_id, held, stored FROM sums
        ON CONFLICT (workspace_id) DO UPDATE
           SET held_bytes = u.held_bytes + EXCLUDED.held_bytes, stored_bytes = u.stored_bytes + EXCLUDED.stored_bytes
    )
    SELECT coalesce(sum(n), 0)::bigint FROM sums
$$;

-- Counts every workspace again from `assets`: after rows were loaded with triggers off. Locks the counts while it
-- works, so no write's change is lost between the count and the swap.
CREATE FUNCTION asset_sweeper_recount_usage() RETURNS void LANGUAGE sql AS $$
    LOCK TABLE workspace_objects, workspace_usage, workspace_usage_changes IN EXCLUSIVE MODE;
    DELETE FROM workspace_usage_changes;
    DELETE FROM workspace_usage;
    DELETE FROM workspace_objects;
    INSERT INTO workspace_objects (workspace_id, storage_key, byte_size, asset_rows, holding_rows)
    SELECT workspace_id, storage_key, max(byte_size), count(*), count(*) FILTER (WHERE asset_sweeper_holds(state))
      FROM assets GROUP BY workspace_id, storage_key;
    INSERT INTO workspace_usage (workspace_id, held_bytes, stored_bytes)
    SELECT workspace_id, coalesce(sum(byte_size) FILTER (WHERE holding_rows > 0), 0), sum(byte_size)
      FROM workspace_objects GROUP BY workspace_id;
$$;
SELECT asset_sweeper_recount_usage();

-- One workspace's usage, each stored object counted once however many of its asset rows share it:
--   held:    bytes its records still hold: an object with a `pending`, `attached` or `failed` row. While the newest
--            schema check refused, or before the first one, every stored byte: an unreadable reference must not
--            look free.
--   stored:  every object any of its rows points at, `released` and `retired` ones (waiting for removal) included.
--   waiting: stored objects only `released` or `retired` rows point at.
--   headroom: the largest upload the check would let through now (NULL without a quota).
CREATE FUNCTION asset_sweeper_usage(workspace uuid)
    RETURNS TABLE (quota_bytes bigint, held_bytes bigint, stored_bytes bigint, waiting_bytes bigint,
                   headroom_bytes bigint, schema_refused boolean)
    LANGUAGE sql STABLE AS $$
    WITH totals AS (
        SELECT coalesce(sum(held), 0)::bigint AS held, coalesce(sum(stored), 0)::bigint AS stored
          FROM (SELECT u.held_bytes AS held, u.stored_bytes AS stored FROM workspace_usage u
                 WHERE u.workspace_id = workspace
                UNION ALL
                SELECT c.held_bytes, c.stored_bytes FROM workspace_usage_changes c
                 WHERE c.workspace_id = workspace) AS parts
    ), verdict AS (
        SELECT coalesce((SELECT NOT v.valid FROM schema_verdicts v ORDER BY v.id DESC LIMIT 1), true) AS refused
    ), quota AS (
        SELECT (SELECT q.quota_bytes FROM workspace_quotas q WHERE q.workspace_id = workspace) AS bytes
    ), counted AS (
        SELECT quota.bytes AS quota, CASE WHEN verdict.refused THEN totals.stored ELSE totals.held END AS held,
               totals.stored, totals.stored - totals.held AS waiting, verdict.refused
          FROM totals, verdict, quota
    )
    SELECT quota, held, stored, waiting,
           CASE WHEN quota IS NOT NULL THEN greatest(least(quota - held, 2 * quota - stored), 0) END, refused
      FROM counted
$$;

-- Called by the application in its upload transaction, before it inserts the upload's rows, with the upload's
-- size: raises when the upload would take the workspace's held bytes past its quota, or its stored bytes past
-- twice the quota. It writes the workspace's quota row (a no-op update), which holds it until the transaction
-- ends, so two uploads of one workspace cannot both pass on the same figures: under read committed the second
-- waits and counts the first; under repeatable read or serializable it fails with a serialization error, to be
-- retried, rather than count from a snapshot taken before the first committed. Without a quota row it allows
-- everything.
CREATE FUNCTION asset_sweeper_check_upload(workspace_id uuid, byte_size bigint) RETURNS void
    LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    quota bigint;
    usage record;
BEGIN
    IF $2 IS NULL OR $2 < 0 THEN
        RAISE EXCEPTION 'asset_sweeper_check_upload: byte_size must be the upload''s size in bytes, got %',
            coalesce($2::text, 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE workspace_quotas q SET quota_bytes = q.quota_bytes WHERE q.workspace_id = $1 RETURNING q.quota_bytes INTO quota;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT * INTO usage FROM asset_sweeper_usage($1);
    IF usage.held_bytes + $2 > quota THEN
        RAISE EXCEPTION 'This workspace''s storage quota is used up: it holds % of % bytes, and this upload needs % more.',
            usage.held_bytes, quota, $2
            USING ERRCODE = 'configuration_limit_exceeded',
                  HINT = CASE WHEN usage.schema_refused
                              THEN 'The newest schema check refused (or none has run yet), so every stored byte counts as held until one passes.'
                              ELSE 'Remove or replace files to free space.' END;
    END IF;
    IF usage.stored_bytes + $2 > 2 * quota THEN
        RAISE EXCEPTION 'Too many replaced images are waiting to be removed tonight. Try again tomorrow.'
            USING ERRCODE = 'configuration_limit_exceeded',
                  DETAIL = format('workspace %s stores %s bytes (%s waiting for removal); the limit is twice its quota of %s',
                                  $1, usage.stored_bytes, usage.waiting_bytes, quota);
    END IF;
END
$$;
