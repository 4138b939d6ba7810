-- The bucket against the rows on an engine outside the application's database: S3 Inventory's report (`listed`)
-- and the product's export of the stored objects its rows know (`known`, one row per key, classified by this
-- product's key layout as it was written), each read once. Filled in by `reconcile::engine::render`; the dialect
-- supplies the two relations, the report's filter of current objects and the managed prefixes as literals.
--
-- One row out per key no row knows (`unknown`) and per known key the report lacks whose bytes are due or were
-- found lost (`gone`); per prefix, the count of keys both hold (`matched`, with each one found lost before on its
-- own row: its bytes are back) and of known keys off the key pattern (`off_pattern`, with its first five keys in
-- key order on rows of their own). The output is as small as the differences: the
-- application's database re-checks every one of them against its rows before anything is recorded or adopted.
WITH listed AS (
    SELECT key, size, last_modified_date AS modified
      FROM {inventory} inventory
     WHERE {current}
       AND ({managed})
),
paired AS (
    SELECT coalesce(l.key, k.storage_key) AS key,
           coalesce(l.size, k.byte_size) AS size,
           l.modified,
           k.prefix,
           coalesce(k.found_lost, false) AS found_lost,
           CASE WHEN k.storage_key IS NULL THEN 'unknown'
                WHEN l.key IS NULL THEN 'gone'
                WHEN k.off_pattern THEN 'off_pattern'
                ELSE 'matched' END AS finding
      FROM listed l
      FULL OUTER JOIN {known} k ON k.storage_key = l.key
     WHERE l.key IS NOT NULL OR k.due_since_ms < {taken_at_ms} OR k.found_lost
),
-- A known key off the pattern is ranked within its prefix; every other key alone, so the window's partitions stay
-- as spread as the keys.
ranked AS (
    SELECT finding, prefix, key, size, modified, found_lost,
           row_number() OVER (PARTITION BY finding, prefix, CASE WHEN finding = 'off_pattern' THEN '' ELSE key END
                                  ORDER BY key) AS nth
      FROM paired
),
shown AS (
    SELECT finding, prefix, size, modified,
           CASE WHEN finding IN ('unknown', 'gone') OR (finding = 'off_pattern' AND nth <= 5) OR found_lost THEN key
           END AS key
      FROM ranked
)
SELECT finding, prefix, key, count(*) AS keys, sum(size) AS bytes, max(modified) AS modified
  FROM shown
 GROUP BY finding, prefix, key
