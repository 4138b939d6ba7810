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
