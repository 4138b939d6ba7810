-- asset-sweeper schema. The application writes `stored_objects` and `assets` with plain SQL; the sweeper owns
-- the lease, attempt, failure and retention columns and the audit tables.

-- Columns of this type in the application's own tables are reference sources. They are discovered from the
-- catalog (scalar or array), so no write path and no config file can forget one.
CREATE DOMAIN asset_id AS uuid;

-- One row per object in the bucket. Asset rows that share bytes share this row, and the consumer locks it
-- before deciding whether bytes may go (invariant 2).
CREATE TABLE stored_objects (
    storage_key  text        PRIMARY KEY CHECK (storage_key <> ''),
    content_hash text        NOT NULL,
    byte_size    bigint      NOT NULL CHECK (byte_size >= 0),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE assets (
    -- Plain uuid, not the asset_id domain: the domain marks references *to* assets, and the key is not one.
    id           uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    workspace_id uuid        NOT NULL,
    -- No cascade: a stored object cannot disappear under an asset row; the consumer removes rows first.
    storage_key  text        NOT NULL REFERENCES stored_objects (storage_key) ON DELETE RESTRICT,
    content_hash text        NOT NULL,
    byte_size    bigint      NOT NULL CHECK (byte_size >= 0),
    state        text        NOT NULL DEFAULT 'pending'
                             CHECK (state IN ('pending', 'attached', 'released', 'retired', 'failed')),
    due_at       timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),

    -- Owned by the sweeper.
    lease_token  uuid,
    leased_until timestamptz,
    attempts     integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error   text,
    retired_at   timestamptz,
    purge_after  timestamptz,
    failed_at    timestamptz,

    CHECK ((lease_token IS NULL) = (leased_until IS NULL)),
    CHECK (state <> 'retired' OR (retired_at IS NOT NULL AND purge_after IS NOT NULL))
);

-- The grace floor (invariant 3) counts from the newest write about an asset or its stored object. The
-- application is not trusted to maintain `updated_at`: these triggers do it. The trigger on `assets` fires only
-- for the columns that describe the asset (the consumer's own state changes move it too, which only makes the
-- floor more cautious). `due_at` is scheduling, not a write about the asset: the sweeper reschedules through it,
-- and a reschedule that moved the floor would push the asset's next look past its own grace end, forever.
CREATE FUNCTION asset_sweeper_touch_asset() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Only a real change counts: a statement that merely names a column (SET state = state) is no write.
    IF (NEW.workspace_id, NEW.storage_key, NEW.content_hash, NEW.byte_size, NEW.state)
       IS DISTINCT FROM (OLD.workspace_id, OLD.storage_key, OLD.content_hash, OLD.byte_size, OLD.state)
    THEN
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION asset_sweeper_touch_object() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.content_hash, NEW.byte_size) IS DISTINCT FROM (OLD.content_hash, OLD.byte_size) THEN
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER assets_touch
    BEFORE UPDATE OF workspace_id, storage_key, content_hash, byte_size, state ON assets
    FOR EACH ROW EXECUTE FUNCTION asset_sweeper_touch_asset();

CREATE TRIGGER stored_objects_touch
    BEFORE UPDATE OF content_hash, byte_size ON stored_objects
    FOR EACH ROW EXECUTE FUNCTION asset_sweeper_touch_object();

-- An upload that reuses existing bytes is a write about that stored object: it restarts the grace floor of
-- every asset sharing it.
CREATE FUNCTION asset_sweeper_touch_stored_object() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE stored_objects SET updated_at = now() WHERE storage_key = NEW.storage_key;
    RETURN NULL;
END
$$;

CREATE TRIGGER assets_touch_stored_object
    AFTER INSERT OR UPDATE OF storage_key ON assets
    FOR EACH ROW EXECUTE FUNCTION asset_sweeper_touch_stored_object();

-- The sweep claims due rows oldest first, per workspace for fairness; failed rows wait for an operator.
CREATE INDEX assets_due_by_workspace ON assets (workspace_id, due_at)
    WHERE due_at IS NOT NULL AND state <> 'failed';
CREATE INDEX assets_due ON assets (due_at)
    WHERE due_at IS NOT NULL AND state <> 'failed';
-- Sharer check before bytes go (invariant 2), and the brake's per-workspace totals.
CREATE INDEX assets_storage_key ON assets (storage_key);
CREATE INDEX assets_workspace_state ON assets (workspace_id, state);

-- JSONB documents that embed asset ids, declared by the application's own migrations. `json_path` selects the
-- values that are asset ids, e.g. '$.hero.asset_id' or '$.** ? (@.type() == "string")'; the jsonpath type
-- rejects an unreadable path when it is declared, not when a settle needs it.
CREATE TABLE asset_reference_sources (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    table_schema text        NOT NULL DEFAULT 'public',
    table_name   text        NOT NULL,
    column_name  text        NOT NULL,
    json_path    jsonpath    NOT NULL,
    note         text,
    created_at   timestamptz NOT NULL DEFAULT now()
);
-- jsonpath has no btree operator class: compare declarations by their text.
CREATE UNIQUE INDEX asset_reference_sources_unique
    ON asset_reference_sources (table_schema, table_name, column_name, (json_path::text));

-- Columns whose values look like asset ids but are not references (a log of ids, say). Listing one here is a
-- deliberate statement; without it such a column makes the schema check refuse (invariant 4).
CREATE TABLE asset_reference_exclusions (
    table_schema text        NOT NULL DEFAULT 'public',
    table_name   text        NOT NULL,
    column_name  text        NOT NULL,
    reason       text        NOT NULL CHECK (reason <> ''),
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (table_schema, table_name, column_name)
);

-- One row per sweep pass, written at its start and completed at its end, so a pass that dies says how far it got.
CREATE TABLE sweep_runs (
    id            uuid        PRIMARY KEY,
    started_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    outcome       text        NOT NULL DEFAULT 'running'
                              CHECK (outcome IN ('running', 'ok', 'partial', 'refused', 'braked', 'skipped', 'failed')),
    claimed       integer     NOT NULL DEFAULT 0,
    enqueued      integer     NOT NULL DEFAULT 0,
    released      integer     NOT NULL DEFAULT 0,
    per_workspace jsonb       NOT NULL DEFAULT '{}'::jsonb,
    duration_ms   bigint,
    reason        jsonb,
    error         text,
    code_version  text        NOT NULL
);
CREATE INDEX sweep_runs_started ON sweep_runs (started_at DESC);

-- One row per settlement decision. No foreign key to `assets`: the row outlives a deleted or purged asset,
-- and is what an operator undeletes from.
CREATE TABLE settlement_events (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    occurred_at   timestamptz NOT NULL DEFAULT now(),
    asset_id      uuid        NOT NULL,
    workspace_id  uuid,
    storage_key   text,
    action        text        NOT NULL
                              CHECK (action IN ('keep', 'retire', 'delete', 'purge', 'noop', 'reject',
                                                'failed', 'restore', 'integrity', 'lost')),
    sweep_run_id  uuid,
    message_id    text,
    -- The asset row as it was decided on, so a deleted asset can be brought back with its row.
    asset_row     jsonb,
    -- Sources checked and their answers, the grace floor, anything else the decision rested on.
    evidence      jsonb       NOT NULL,
    bytes_freed   bigint      NOT NULL DEFAULT 0 CHECK (bytes_freed >= 0),
    code_version  text        NOT NULL
);
CREATE INDEX settlement_events_asset ON settlement_events (asset_id, occurred_at);
CREATE INDEX settlement_events_occurred ON settlement_events (occurred_at);
