-- Adoption: bytes no row knows become assets the ordinary pipeline settles, on prefixes a person approved, and
-- never while a record names their key.

-- A managed prefix, as reconciliation has met it. Nothing under it is adopted until an operator approves it
-- (`asset-sweeper approve --prefix`), after reading what a reconciliation reported of it.
CREATE TABLE reconcile_prefixes (
    -- '' is the whole bucket.
    prefix        text        PRIMARY KEY,
    -- The layout (prefixes and key pattern) it was met with: another one needs a new approval.
    layout        text        NOT NULL,
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    approved_at   timestamptz,
    approved_by   text,
    reason        text,
    CHECK ((approved_at IS NULL) = (approved_by IS NULL))
);

-- Each asset row adoption wrote: the consumer destroys one only when no record names its key and the key scan
-- has covered the schema as it stands. Kept after the asset goes, as the record of what was adopted.
CREATE TABLE adopted_assets (
    asset_id     uuid        PRIMARY KEY,
    storage_key  text        NOT NULL,
    workspace_id uuid        NOT NULL,
    listing_id   bigint      NOT NULL,
    -- When the bucket said the bytes were last written.
    last_modified timestamptz NOT NULL,
    -- The layout that adopted it: only a key scan with this layout can tell whether a record names its key.
    layout       text        NOT NULL,
    -- The clock, not the transaction's start: a key scan must begin after this to cover the adoption.
    adopted_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX adopted_assets_key ON adopted_assets (storage_key);

-- Keys of ours that a record names in a text or JSON column (a key, a path, a URL), as the census's key scan
-- found them: one row per key and column, dated by when a scan last saw it. A scan that ends forgets its column's
-- keys that neither it nor the scan before it saw (a row an update moved behind a scan is missed by one scan).
CREATE TABLE named_keys (
    storage_key text        NOT NULL,
    relid       oid         NOT NULL,
    attnum      smallint    NOT NULL,
    seen_at     timestamptz NOT NULL,
    PRIMARY KEY (storage_key, relid, attnum)
);
CREATE INDEX named_keys_column ON named_keys (relid, attnum, seen_at);

-- The key scan rides on the census's batches. `keys_layout`: the layout (prefixes and pattern) the scan in
-- progress extracts with, NULL once it changed mid-scan; `keys_proven_at`: when the last complete scan with the
-- layout configured now began (NULL: not covered, and adopted bytes wait).
ALTER TABLE census_columns ADD COLUMN keys_layout text, ADD COLUMN keys_proven_at timestamptz;

ALTER TABLE settlement_events DROP CONSTRAINT settlement_events_action_check;
ALTER TABLE settlement_events ADD CONSTRAINT settlement_events_action_check
    CHECK (action IN ('keep', 'retire', 'delete', 'purge', 'defer', 'noop', 'reject', 'failed', 'restore',
                      'integrity', 'lost', 'redrive', 'undelete', 'discovered', 'adopted'));

-- Whether column `c` leaves adopted asset `d` unscanned for keys: a text or JSON column not key-scanned at all,
-- not in a scan begun after the adoption, or not with the layout that adopted it. One home for the test the
-- sweep makes adopted assets due by and the consumer holds them by.
CREATE FUNCTION asset_sweeper_keys_unscanned(c census_columns, d adopted_assets) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN c.family <> 'uuid'
           AND (c.keys_proven_at IS NULL OR c.keys_proven_at <= d.adopted_at OR c.keys_layout IS DISTINCT FROM d.layout);

-- A census column as the schema check names it: `schema.table.column`.
CREATE FUNCTION asset_sweeper_column_name(c census_columns) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN format('%s.%s.%s', c.table_schema, c.table_name, c.column_name);
