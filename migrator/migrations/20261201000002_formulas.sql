-- The lifecycle's formulas, each written once and called by every query that needs it (the settle, the claim, the
-- brake, the operator's plan, status and explain). They are plain SQL functions without SET clauses, so the
-- planner inlines them: a query using them reads as if the expression were written in place, and the partial
-- indexes on (due_at) WHERE due_at IS NOT NULL AND state <> 'failed' still serve it.

-- The grace floor (invariant 3): nothing is retired or deleted before the newest write about the asset or its
-- stored object is `grace` old.
CREATE FUNCTION asset_sweeper_grace_ends(a assets, o stored_objects, grace interval) RETURNS timestamptz
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN greatest(a.updated_at, a.created_at, o.updated_at) + grace;

-- Due: its time has come and it is not waiting for an operator. Claimed or not: the brake counts claims in flight.
CREATE FUNCTION asset_sweeper_due(a assets) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN a.due_at IS NOT NULL AND a.state <> 'failed' AND a.due_at <= now();

-- Claimable: due, and no pass holds a live lease on it.
CREATE FUNCTION asset_sweeper_claimable(a assets) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN asset_sweeper_due(a) AND (a.leased_until IS NULL OR a.leased_until <= now());
