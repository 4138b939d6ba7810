-- The storage quota: per workspace, how many bytes its records may hold. A replaced or cleared file frees its
-- space at the save that releases it, not when the consumer removes it; every stored byte, replaced ones waiting
-- for removal included, may use at most twice the quota.
CREATE TABLE workspace_quotas (
    workspace_id uuid        PRIMARY KEY,
    quota_bytes  bigint      NOT NULL CHECK (quota_bytes > 0),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- One workspace's usage, each stored object counted once however many of its asset rows share it:
--   held:    bytes its records still hold: an object with a `pending` (an upload about to be used), `attached` or
--            `failed` (state unknown) row. While the newest schema check refused, or before the first one, every
--            stored byte: an unreadable reference must not look free.
--   stored:  every object any of its rows points at, `released` and `retired` ones (waiting for removal) included.
--   waiting: stored objects only `released` or `retired` rows point at.
--   headroom: the largest upload the check would let through now (NULL without a quota).
CREATE FUNCTION asset_sweeper_usage(workspace uuid)
    RETURNS TABLE (quota_bytes bigint, held_bytes bigint, stored_bytes bigint, waiting_bytes bigint,
                   headroom_bytes bigint, schema_refused boolean)
    LANGUAGE sql STABLE AS $$
    WITH objects AS (
        SELECT max(a.byte_size) AS bytes, bool_or(a.state IN ('pending', 'attached', 'failed')) AS held
          FROM assets a
         WHERE a.workspace_id = workspace
         GROUP BY a.storage_key
    ), totals AS (
        SELECT coalesce(sum(bytes) FILTER (WHERE held), 0)::bigint AS held,
               coalesce(sum(bytes), 0)::bigint AS stored
          FROM objects
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
