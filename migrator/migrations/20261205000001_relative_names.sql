-- A file is protected by the name the application gives it (docs/design.md, "Adoption"): most frameworks store a
-- path relative to a storage root (Django's `location`, a Laravel disk's `root`), not the key.

-- An adopted key's file name (what follows its last `/`, the whole key at the bucket's root): the census looks up
-- every short value it reads by the file name it ends with, then keeps the adopted keys the value is a whole-segment
-- suffix of. Indexed, so that lookup is one probe per value that survives the census's own filter.
ALTER TABLE adopted_assets ADD COLUMN file_name text GENERATED ALWAYS AS (substring(storage_key FROM '[^/]*$')) STORED;
CREATE INDEX adopted_assets_file_name ON adopted_assets (file_name);

-- Whether a record names the key only relative to a root (the value equals the key with leading path segments
-- removed), never as the key itself: what `status` and the approval count per prefix, so the operator can declare
-- the key source instead. A span seen both ways is not relative.
ALTER TABLE named_keys ADD COLUMN relative boolean NOT NULL DEFAULT false;

-- Key sources: where the application's rows hold storage keys in a name of their own making (a root plus a
-- relative path, a template over an id and a file name). Declared like reference sources, by the application's
-- own migrations or its operator; validated as they are written by the owner's trigger (schema/sql/key_sources.sql):
-- the table is the application's, each `{column}` of the template exists and is of a type whose text is the system's
-- to make (text, varchar, char, smallint, integer, bigint, uuid), and the template is no SQL: nothing of it runs.
CREATE TABLE asset_key_sources (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    table_schema text        NOT NULL DEFAULT 'public',
    table_name   text        NOT NULL,
    -- Literal text and `{column}` placeholders: 'media/{file}', '{key}', 'uploads/{id}/{filename}'.
    template     text        NOT NULL,
    note         text,
    declared_by  text        NOT NULL DEFAULT session_user,
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (table_schema, table_name, template)
);

-- An adoption approval records what records named of the keys it lets be adopted (the probe's figures the person
-- read, `schema::naming`), and whether it was given despite most of them being named by no key source and no key
-- while a column names them relative to a root: an explicit override, recorded.
ALTER TABLE reconcile_prefixes ADD COLUMN approved_naming jsonb,
                               ADD COLUMN approved_despite_unnamed boolean NOT NULL DEFAULT false;

-- The brake asks per workspace whether its adoption is a first one.
CREATE INDEX adopted_assets_workspace ON adopted_assets (workspace_id);

-- A way back sticks: an asset a person restored or undeleted is kept by that person's word, which discovery does not
-- overrule on the same evidence (nothing refers to it) that removed it. Cleared when the evidence changes: a settle
-- finds a reference to it. The application's own release of it (`released`, with a due time) is new evidence too.
ALTER TABLE assets ADD COLUMN kept_by text, ADD COLUMN kept_since timestamptz;

-- Each census cycle writes every (key, column) it sees again, to move `seen_at`: with `seen_at` in an index none of
-- those updates could stay on its page, and every one rewrote the two long key indexes too. The forgetting of a
-- column's unseen keys finds them by (relid, attnum) alone, and room is left on each page for the new version.
DROP INDEX named_keys_column;
CREATE INDEX named_keys_column ON named_keys (relid, attnum);
ALTER TABLE named_keys SET (fillfactor = 70);
