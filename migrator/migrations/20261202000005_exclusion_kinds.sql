-- What an exclusion excludes. `ids`: the column holds no asset ids, so neither the census nor the schema check's
-- sample looks for any there; the key scan still reads it, so a file of ours its text names by key keeps its bytes.
-- `keys`: its text names no file of ours (the key scan passes over it); ids in it are still found and held. `both`:
-- nothing reads it. An exclusion made before this column existed was written on a refusal about ids: it means
-- `ids`, which reads more than it did (a named file is held), never less.
ALTER TABLE asset_reference_exclusions
    ADD COLUMN excludes text NOT NULL DEFAULT 'ids' CHECK (excludes IN ('ids', 'keys', 'both'));

-- What the census reads in a column: its ids, the keys it names, or both (the complement of its exclusion). A
-- change of what it reads starts the column's proof again.
ALTER TABLE census_columns
    ADD COLUMN reads text NOT NULL DEFAULT 'both' CHECK (reads IN ('ids', 'keys', 'both'));

-- The batch size a statement timeout halved for this table (every column of a table carries the same): remembered
-- across passes, so a table too wide or too TOASTed for the configured batch is not timed out again each pass.
-- NULL: the configured size.
ALTER TABLE census_columns
    ADD COLUMN batch_blocks integer CHECK (batch_blocks > 0);

-- A pass that had work and advanced none of it (a statement that outlived its share, a claim with no time left):
-- not `ok`, so the heartbeat alarm counts it as no pass at all.
ALTER TABLE sweep_runs DROP CONSTRAINT sweep_runs_outcome_check;
ALTER TABLE sweep_runs ADD CONSTRAINT sweep_runs_outcome_check
    CHECK (outcome IN ('running', 'ok', 'partial', 'refused', 'braked', 'skipped', 'failed', 'stalled'));
