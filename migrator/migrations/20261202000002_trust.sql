-- The trust model (docs/security.md): everything of the sweeper lives in the schema `asset_sweeper`, which only
-- the owner (the role that migrates) may create in; the migrator creates the schema and runs every migration with
-- it first on the path, and moves an older install's objects into it before this runs. Here: the tables the
-- schema change detector and the retention filters need under that model. The grants are in platform/sql/roles.sql.

-- The change detector without a row anyone can hold: every DDL command and declaration write appends a row
-- (inserts never wait for each other), and the generation is the folded count in `asset_sweeper_schema_state`
-- plus the rows appended since. Each sweep pass folds them. No role of the application may read or write it.
CREATE TABLE asset_sweeper_schema_changes (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    changed_at timestamptz NOT NULL DEFAULT now()
);

-- A retention rule's writer, stamped by a trigger from the role that wrote it (never from the row): the writer must
-- hold DELETE on the rule's table, when it declares the rule and at every batch after.
ALTER TABLE retention_rules ADD COLUMN declared_by text;
-- The filter's function as the owner created it: its name and a digest of its definition (body, owner, settings,
-- volatility, argument), checked before every batch and every plan. Written only by the owner's trigger.
ALTER TABLE retention_rules ADD COLUMN filter_function text;
ALTER TABLE retention_rules ADD COLUMN filter_digest text;
