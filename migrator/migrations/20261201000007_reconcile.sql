-- Reconciliation: the bucket's keys against stored_objects, both ways.

-- One reading of the bucket: an inventory report, or a listing made by this product.
CREATE TABLE reconcile_listings (
    id            bigserial   PRIMARY KEY,
    source        text        NOT NULL CHECK (source IN ('inventory', 'list')),
    -- The manifest's s3:// address, or the bucket and prefixes listed.
    location      text        NOT NULL,
    -- What the bucket held as of this time (an inventory's scan start; a listing's start): nothing written later
    -- is expected in it.
    taken_at      timestamptz NOT NULL,
    files_total   integer     NOT NULL DEFAULT 0 CHECK (files_total >= 0),
    files_done    integer     NOT NULL DEFAULT 0 CHECK (files_done >= 0),
    keys_read     bigint      NOT NULL DEFAULT 0,
    started_at    timestamptz NOT NULL DEFAULT now(),
    compared_at   timestamptz,
    -- A report given up unfinished (a newer one superseded it), and why.
    abandoned_at  timestamptz,
    abandoned_why text,
    -- What the comparison found: counts and bytes per prefix and workspace, refusals, lost assets.
    findings      jsonb
);

-- The keys of a listing inside the managed prefixes, as they are read. Unlogged: written in bulk by COPY without
-- the WAL, and rebuilt from the report if a crash empties it (a listing whose keys are gone is read again).
-- No index: the comparison is two hash anti-joins over all of it, which an index would only slow to write.
CREATE UNLOGGED TABLE reconcile_keys (
    listing_id    bigint      NOT NULL,
    storage_key   text        NOT NULL,
    byte_size     bigint      NOT NULL,
    last_modified timestamptz NOT NULL,
    -- The longest managed prefix the key starts with ('' for the whole bucket).
    prefix        text        NOT NULL,
    -- The workspace the key pattern names; NULL for a key off the pattern (another writer's).
    workspace_id  uuid
);

-- Assets whose bytes a reconciliation found gone, confirmed by reading the bucket: reported, never deleted, and
-- listed until a later reconciliation finds the bytes again or the asset row is gone.
CREATE TABLE lost_assets (
    asset_id           uuid        PRIMARY KEY,
    storage_key        text        NOT NULL,
    workspace_id       uuid        NOT NULL,
    -- A kept version the bytes could be brought back from (a delete marker hides it), if any.
    restorable_version text,
    listing_id         bigint      NOT NULL,
    found_at           timestamptz NOT NULL DEFAULT now(),
    confirmed_at       timestamptz NOT NULL DEFAULT now()
);

-- What reconciliation did in a pass.
ALTER TABLE sweep_runs ADD COLUMN reconcile jsonb;
