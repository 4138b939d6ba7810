-- The bucket comparison on an engine outside the database (reconcile::engine): which engine a listing is compared
-- on (none: in the database), how far the export of the known keys got (the next file begins after
-- export_after), and the engine's query: its id, the most it scans as it starts, and what it scanned.
ALTER TABLE reconcile_listings
    ADD COLUMN engine           text,
    ADD COLUMN export_files     integer     NOT NULL DEFAULT 0 CHECK (export_files >= 0),
    ADD COLUMN export_after     text,
    ADD COLUMN export_rows      bigint      NOT NULL DEFAULT 0 CHECK (export_rows >= 0),
    ADD COLUMN export_bytes     bigint      NOT NULL DEFAULT 0 CHECK (export_bytes >= 0),
    ADD COLUMN exported_at      timestamptz,
    ADD COLUMN query_id         text,
    -- Queries started for this listing: each failed one is started again, up to a few, under a new token.
    ADD COLUMN query_attempts   integer     NOT NULL DEFAULT 0 CHECK (query_attempts >= 0),
    ADD COLUMN query_started_at timestamptz,
    ADD COLUMN scan_at_most     bigint,
    ADD COLUMN scanned_bytes    bigint;
