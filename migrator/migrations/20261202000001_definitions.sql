-- The subsystems' SQL definitions (platform/sql, schema/sql, lifecycle/sql, records/sql: every function, trigger
-- and generated constraint, each written once) are applied by the migrator after these versioned migrations,
-- whenever a file's text changed: this records, per file, the digest of the text last applied. The definitions
-- in the migrations above are history: a file supersedes them when it is first applied, and again after it changes.
CREATE TABLE asset_sweeper_definitions (
    -- The file, as the migrator names it ('schema/sql/guards.sql').
    name       text        PRIMARY KEY,
    -- sha256, in hex, of the text applied (its placeholders filled in).
    digest     text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
