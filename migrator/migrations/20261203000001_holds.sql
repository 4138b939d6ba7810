-- Windows in which nothing is destroyed (docs/operating.md, "Holds"): declared by the application around a
-- migration (`asset_sweeper_hold`, lifecycle/sql/lifecycle.sql) or by an operator (`asset-sweeper hold`). While one
-- is open, deletes and purges wait in every workspace until it ends or is released; retiring, which a restore
-- undoes, goes on. Written only through those functions and the operator's CLI: the application's roles may
-- declare and release their own, not read or change the table.
CREATE TABLE destruction_holds (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    reason      text        NOT NULL CHECK (length(btrim(reason)) BETWEEN 1 AND 500),
    declared_by text        NOT NULL,
    declared_at timestamptz NOT NULL DEFAULT now(),
    ends_at     timestamptz NOT NULL,
    released_by text,
    released_at timestamptz,
    CHECK (ends_at > declared_at),
    CHECK ((released_by IS NULL) = (released_at IS NULL))
);
CREATE INDEX destruction_holds_open ON destruction_holds (ends_at) WHERE released_at IS NULL;

-- Pins (docs/operating.md, "Pins"): an asset, a workspace or a key prefix kept as it is, for references the
-- database cannot show (another service's store, a link in a sent email, a page a CDN keeps). Discovery does not
-- make a pinned asset due, reconciliation does not adopt pinned keys, and a settle neither retires, deletes nor
-- purges one. Written by operators (`asset-sweeper pin`) and by the application (its own rows: who and when are
-- stamped, never given); each ends by itself, within a year.
CREATE TABLE asset_pins (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    asset_id     uuid,
    workspace_id uuid,
    key_prefix   text        CHECK (key_prefix <> ''),
    reason       text        NOT NULL CHECK (length(btrim(reason)) BETWEEN 1 AND 500),
    pinned_by    text        NOT NULL DEFAULT session_user,
    pinned_at    timestamptz NOT NULL DEFAULT now(),
    ends_at      timestamptz NOT NULL,
    released_by  text,
    released_at  timestamptz,
    CHECK (num_nonnulls(asset_id, workspace_id, key_prefix) = 1),
    CHECK (ends_at > pinned_at AND ends_at <= pinned_at + interval '366 days'),
    CHECK ((released_by IS NULL) = (released_at IS NULL))
);
CREATE INDEX asset_pins_open ON asset_pins (ends_at) WHERE released_at IS NULL;

-- A new or changed retention rule waits RECORDS_NEW_RULE_DELAY before its first delete (docs/design.md, "Record
-- retention"). Stamped by the owner's trigger when a rule is declared or its table, column, period or filter
-- change (records/sql/retention.sql); the rules already declared have applied for a while, and do not wait.
ALTER TABLE retention_rules ADD COLUMN changed_at timestamptz NOT NULL DEFAULT '-infinity';
ALTER TABLE retention_rules ALTER COLUMN changed_at SET DEFAULT now();
