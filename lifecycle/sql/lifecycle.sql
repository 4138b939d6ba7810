-- The lifecycle: the triggers that keep the grace floor's `updated_at` and give an upload its first due time, and
-- the formulas every query of the lifecycle calls.
--
-- Applied by the migrator after the versioned migrations, whenever this file's text changed.

-- The grace floor (invariant 3) counts from the newest write about an asset or its stored object. The
-- application is not trusted to maintain `updated_at`: these triggers do it. The trigger on `assets` fires only
-- for the columns that describe the asset (the consumer's own state changes move it too, which only makes the
-- floor more cautious). `due_at` is scheduling, not a write about the asset: the sweeper reschedules through it,
-- and a reschedule that moved the floor would push the asset's next look past its own grace end, forever.
--
-- Only the application's writes move the grace floor (invariant 3). The sweeper's own state writes (a settle,
-- the final-receive `failed` mark, a redrive, a restore) run with `asset_sweeper.actor = 'sweeper'` set for their
-- transaction; were they to move it, a redriven asset would wait a whole grace period more for nothing.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_touch_asset() RETURNS trigger
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- Only a real change counts: a statement that merely names a column (SET state = state) is no write.
    IF current_setting('asset_sweeper.actor', true) IS DISTINCT FROM 'sweeper'
       AND (NEW.workspace_id, NEW.storage_key, NEW.content_hash, NEW.byte_size, NEW.state)
           IS DISTINCT FROM (OLD.workspace_id, OLD.storage_key, OLD.content_hash, OLD.byte_size, OLD.state)
    THEN
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_touch_object() RETURNS trigger
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF (NEW.content_hash, NEW.byte_size) IS DISTINCT FROM (OLD.content_hash, OLD.byte_size) THEN
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER assets_touch
    BEFORE UPDATE OF workspace_id, storage_key, content_hash, byte_size, state ON asset_sweeper_private.assets
    FOR EACH ROW EXECUTE FUNCTION asset_sweeper.asset_sweeper_touch_asset();

CREATE OR REPLACE TRIGGER stored_objects_touch
    BEFORE UPDATE OF content_hash, byte_size ON asset_sweeper_private.stored_objects
    FOR EACH ROW EXECUTE FUNCTION asset_sweeper.asset_sweeper_touch_object();

-- An upload that reuses existing bytes is a write about that stored object: it restarts the grace floor of
-- every asset sharing it (the application's writes only, as above).
-- SECURITY DEFINER: the application may not write `updated_at` itself.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_touch_stored_object() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF current_setting('asset_sweeper.actor', true) IS DISTINCT FROM 'sweeper' THEN
        UPDATE asset_sweeper_private.stored_objects SET updated_at = now() WHERE storage_key = NEW.storage_key;
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER assets_touch_stored_object
    AFTER INSERT OR UPDATE OF storage_key ON asset_sweeper_private.assets
    FOR EACH ROW EXECUTE FUNCTION asset_sweeper.asset_sweeper_touch_stored_object();

-- An upload that is never attached must still be looked at. The application need not set `due_at` on a
-- `pending` row: it is due one day after the upload (the default grace period), and settlement decides then
-- whether it has been abandoned long enough to delete or should be looked at again later.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_pending_due() RETURNS trigger
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    NEW.due_at := NEW.created_at + interval '24 hours';
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER assets_pending_due
    BEFORE INSERT ON asset_sweeper_private.assets
    FOR EACH ROW WHEN (NEW.state = 'pending' AND NEW.due_at IS NULL)
    EXECUTE FUNCTION asset_sweeper.asset_sweeper_pending_due();

-- The lifecycle's formulas, each written once and called by every query that needs it (the settle, the claim, the
-- brake, the operator's plan, status and explain, discovery). They are plain SQL functions without SET clauses, so
-- the planner inlines them: a query using them reads as if the expression were written in place, and the partial
-- indexes on (due_at) WHERE due_at IS NOT NULL AND state <> 'failed' still serve it. Their bodies are checked when
-- they are created, so what one calls comes before it.

-- The grace floor's part an asset row holds by itself, which discovery reads while walking (reading each asset's
-- stored object there cost twice the rest of the batch); the whole floor is built on it, so the two cannot drift.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_row_grace_ends(a asset_sweeper_private.assets, grace interval) RETURNS timestamptz
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN greatest(a.updated_at, a.created_at) + grace;

-- The grace floor (invariant 3): nothing is retired or deleted before the newest write about the asset or its
-- stored object is `grace` old.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_grace_ends(a asset_sweeper_private.assets, o asset_sweeper_private.stored_objects, grace interval) RETURNS timestamptz
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN greatest(asset_sweeper.asset_sweeper_row_grace_ends(a, grace), o.updated_at + grace);

-- What a redrive resets a failed asset to: `retired` when it had been retired (its purge still ahead of it), else
-- `released`. The reset writes with it and the CLI's dry run shows it, so the two cannot say different things.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_redriven_state(a asset_sweeper_private.assets) RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN CASE WHEN a.retired_at IS NOT NULL THEN 'retired' ELSE 'released' END;

-- Due: its time has come and it is not waiting for an operator. Claimed or not: the brake counts claims in flight.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_due(a asset_sweeper_private.assets) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN a.due_at IS NOT NULL AND a.state <> 'failed' AND a.due_at <= now();

-- A workspace's adoption, as the brake weighs it: its adopted assets due now, and whether one adopted asset of it was
-- ever retired, deleted or purged. Until one was, an adoption is a first one, held by the brake whatever its size.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_adoption_of(ws uuid, OUT adopted_due bigint,
                                                                   OUT adopted_removed_before boolean)
    LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT (SELECT count(*) FROM asset_sweeper_private.adopted_assets d JOIN asset_sweeper_private.assets a ON a.id = d.asset_id
             WHERE d.workspace_id = ws AND asset_sweeper.asset_sweeper_due(a)),
           EXISTS (SELECT 1 FROM asset_sweeper_private.adopted_assets d
                     JOIN asset_sweeper_private.settlement_events e ON e.asset_id = d.asset_id
                    WHERE d.workspace_id = ws AND e.action IN ('retire', 'delete', 'purge'))
$$;

-- Tried: retired, and every column the census reads for ids was last proven by a scan that began after the
-- retirement (`proven_at` is a scan's start), so a census since the decision has read every value written before it
-- (docs/design.md, "The trial"). A delete or purge waits for it; a finding holds its asset on its own.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_tried(a asset_sweeper_private.assets) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN a.state = 'retired'
           AND NOT EXISTS (SELECT 1 FROM asset_sweeper_private.census_columns c
                            WHERE c.reads <> 'keys' AND (c.proven_at IS NULL OR c.proven_at <= a.retired_at));

-- Claimable: due, and no pass holds a live lease on it.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_claimable(a asset_sweeper_private.assets) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN asset_sweeper.asset_sweeper_due(a) AND (a.leased_until IS NULL OR a.leased_until <= now());

-- Unscheduled: nobody has said when to look at it (attached, or released without a due time). Discovery walks
-- these; everything else is already on the way to a settle or waits for an operator. An attached asset a person
-- restored or undeleted (`kept_by`) is not walked: their word stands until the evidence changes.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_unscheduled(a asset_sweeper_private.assets) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN a.due_at IS NULL AND a.state IN ('attached', 'released') AND NOT (a.state = 'attached' AND a.kept_by IS NOT NULL);

-- A migration window (docs/integrating.md, "Migrations"): the application calls this before a migration that
-- moves, backfills or rewrites references, and nothing is deleted or purged anywhere until `ends_at` or until it
-- calls `asset_sweeper_release_hold`. Any role it is granted to may declare one, since a hold only keeps; at most
-- a week ahead, so a window a failed migration forgot ends by itself (declare another if the work takes longer).
-- SECURITY DEFINER: the caller writes the table through this alone, stamped with its own login.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_hold(ends_at timestamptz, reason text) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    declared bigint;
BEGIN
    IF reason IS NULL OR btrim(reason) = '' THEN
        RAISE EXCEPTION 'asset-sweeper: a hold needs a reason (the migration, and who to ask about it)';
    END IF;
    IF length(reason) > 500 THEN
        RAISE EXCEPTION 'asset-sweeper: a hold''s reason is at most 500 characters (it has %)', length(reason);
    END IF;
    IF ends_at IS NULL OR ends_at <= now() THEN
        RAISE EXCEPTION 'asset-sweeper: a hold must end after now, not at %', ends_at;
    END IF;
    IF ends_at > now() + interval '7 days' THEN
        RAISE EXCEPTION 'asset-sweeper: a hold ends within 7 days, not at %: declare another before it ends', ends_at;
    END IF;
    INSERT INTO asset_sweeper_private.destruction_holds (reason, declared_by, ends_at)
         VALUES (btrim(reason), session_user, ends_at)
      RETURNING id INTO declared;
    RETURN declared;
END
$$;

-- Ends a window early, as the login that declared it (an operator's CLI releases any: `asset-sweeper hold
-- release`). True when it was open.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_release_hold(hold bigint) RETURNS boolean
    LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH released AS (
        UPDATE asset_sweeper_private.destruction_holds
           SET released_by = session_user, released_at = now()
         WHERE id = hold AND declared_by = session_user AND released_at IS NULL AND ends_at > now()
        RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM released)
$$;

-- The pin that keeps an asset now, if any: on the asset itself, on its workspace, or on a prefix of its key (of
-- several, the one that ends last). A few rows at most: read per settle, per adoption candidate and per asset
-- discovery is about to make due, never per asset a batch looks at.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_pin_of(asset uuid, workspace uuid, storage_key text)
    RETURNS bigint LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT p.id FROM asset_sweeper_private.asset_pins p
     WHERE p.released_at IS NULL AND p.ends_at > now()
       AND (p.asset_id = asset OR p.workspace_id = workspace OR starts_with(storage_key, p.key_prefix))
     ORDER BY p.ends_at DESC LIMIT 1
$$;

-- Two statements the sweep's and the operator's roles issue that Postgres grants by more than they need
-- (docs/security.md, "The roles"). The census reads the adopted keys under a SHARE lock taken without waiting, so no
-- adoption is half written; `LOCK TABLE` in that mode needs UPDATE, DELETE or TRUNCATE on the whole table, any of
-- which would let the sweep's role undo an adoption's hold. A comparison of a bucket's keys needs their statistics,
-- and only the owner may `ANALYZE` (a non-owner's is skipped with a warning, and the planner takes a nested loop
-- over a million keys). Each runs as the owner and does that one thing.
CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_lock_adoptions() RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    BEGIN
        LOCK TABLE asset_sweeper_private.adopted_assets IN SHARE MODE NOWAIT;
    END
$$;

CREATE OR REPLACE FUNCTION asset_sweeper.asset_sweeper_analyze_reconcile_keys() RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    BEGIN
        ANALYZE asset_sweeper_private.reconcile_keys;
    END
$$;
