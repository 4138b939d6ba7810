//! The census: the proof behind the schema check's sample (invariant 13). The sample reads the first values of
//! each column that is not a reference source; the census reads all of them, a bounded batch of table blocks per
//! statement across sweep passes, and records per column when a complete scan last found no asset id in it.
//!
//! A column is named by its table's oid and attribute number (a partitioned table's column by each leaf
//! partition's), so a column added, re-created or changed in type starts unproven. While any column of the schema
//! as it stands is unproven, the schema verdict names it and the consumer deletes and purges nothing; retiring,
//! which is reversible, goes on. An asset id found is a schema problem naming the column, like the sample's.
//!
//! What a batch reads: a uuid column's values; every uuid-shaped string (any letter case) inside a text or JSON
//! value, and a text value equal to a storage key; in a declared JSONB source, any asset id its declared paths do
//! not select (a field the format gained). An id at a declared path in mixed letter case is not a finding but a
//! spelling, noted in `asset_id_spellings` for the recheck (the reference guard notes those written later). Batches are ranges of table blocks
//! (`ctid` ranges, which Postgres reads without touching the rest of the table), so a batch costs the same at the
//! start of a table as at its end, and a table without a primary key is read like any other.

use std::time::{Duration, Instant};

use serde::Serialize;
use sqlx::{AssertSqlSafe, PgConnection};
use uuid::Uuid;

use crate::references::{Candidate, ReferenceSource, SchemaProblem, SourceKind, UUID_IN_TEXT, quote_ident};

/// A column the census reads, as the schema check names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The schema of its table.
    pub schema: String,
    /// Its table (a partitioned table's root).
    pub table: String,
    /// The column.
    pub column: String,
    /// `uuid`, `text` or `json`.
    pub family: String,
    /// `scalar` or `array`.
    pub shape: String,
    /// For a declared JSONB source, its declared paths (sorted); empty otherwise.
    pub json_paths: Vec<String>,
}

impl Target {
    fn name(&self) -> String {
        format!("{}.{}.{}", self.schema, self.table, self.column)
    }
}

/// What the census reads: every candidate column, and every declared JSONB source the check could read (one
/// target per column, with all its declared paths).
pub fn targets(sources: &[ReferenceSource], problems: &[SchemaProblem], candidates: &[Candidate]) -> Vec<Target> {
    let mut targets: Vec<Target> = candidates
        .iter()
        .map(|c| Target {
            schema: c.schema.clone(),
            table: c.table.clone(),
            column: c.column.clone(),
            family: c.family.clone(),
            shape: c.shape.clone(),
            json_paths: Vec::new(),
        })
        .collect();
    let troubled = |s: &ReferenceSource| problems.iter().any(|p| p.column() == Some((&s.schema, &s.table, &s.column)));
    for source in sources {
        let SourceKind::Json { json_path } = &source.kind else { continue };
        if source.column_type != "jsonb" || troubled(source) {
            continue;
        }
        let same = |t: &Target| t.schema == source.schema && t.table == source.table && t.column == source.column;
        match targets.iter_mut().find(|t| same(t)) {
            Some(target) => target.json_paths.push(json_path.clone()),
            None => targets.push(Target {
                schema: source.schema.clone(),
                table: source.table.clone(),
                column: source.column.clone(),
                family: "json".to_owned(),
                shape: "scalar".to_owned(),
                json_paths: vec![json_path.clone()],
            }),
        }
    }
    for target in &mut targets {
        target.json_paths.sort();
        target.json_paths.dedup();
    }
    targets
}

/// What the census's record says of the schema as it stands.
#[derive(Debug, Clone, Default)]
pub struct Standing {
    /// Targets not yet proven (`schema.table.column`).
    pub unproven: Vec<String>,
    /// Asset ids found, as schema problems naming their columns.
    pub problems: Vec<SchemaProblem>,
}

/// The columns arranged for one query: the targets' names and paths as parallel arrays.
struct Columns {
    schemas: Vec<String>,
    tables: Vec<String>,
    columns: Vec<String>,
    families: Vec<String>,
    shapes: Vec<String>,
    /// Each target's paths as a JSON array (Postgres has no arrays of arrays of varying length).
    paths: Vec<serde_json::Value>,
}

impl Columns {
    fn of(targets: &[Target]) -> Self {
        Columns {
            schemas: targets.iter().map(|t| t.schema.clone()).collect(),
            tables: targets.iter().map(|t| t.table.clone()).collect(),
            columns: targets.iter().map(|t| t.column.clone()).collect(),
            families: targets.iter().map(|t| t.family.clone()).collect(),
            shapes: targets.iter().map(|t| t.shape.clone()).collect(),
            paths: targets.iter().map(|t| serde_json::json!(t.json_paths)).collect(),
        }
    }
}

/// Reads the census's record for `targets`: which are proven on every table holding their rows (a target with
/// no such table holds nothing to read), and what was found. One statement.
pub async fn standing(conn: &mut PgConnection, targets: &[Target]) -> Result<Standing, sqlx::Error> {
    if targets.is_empty() {
        return Ok(Standing::default());
    }
    let cols = Columns::of(targets);
    let rows = sqlx::query!(
        r#"SELECT l.position AS "position!",
                  bool_and(c.proven_at IS NOT NULL AND c.found_asset IS NULL) AS "proven!",
                  (array_agg(c.found_asset) FILTER (WHERE c.found_asset IS NOT NULL))[1] AS found
             FROM asset_sweeper_census_leaves($1, $2, $3) l
             LEFT JOIN census_columns c
                    ON c.relid = l.relid AND c.attnum = l.attnum AND c.type_oid = l.type_oid
                   AND c.json_paths = ARRAY(SELECT jsonb_array_elements_text(($4::jsonb[])[l.position]))
            GROUP BY l.position
            ORDER BY l.position"#,
        &cols.schemas,
        &cols.tables,
        &cols.columns,
        &cols.paths,
    )
    .fetch_all(conn)
    .await?;
    let mut standing = Standing::default();
    for row in rows {
        let Some(target) = usize::try_from(row.position - 1).ok().and_then(|i| targets.get(i)) else { continue };
        if let Some(asset_id) = row.found {
            let (schema, table, column) = (target.schema.clone(), target.table.clone(), target.column.clone());
            standing.problems.push(if target.json_paths.is_empty() {
                SchemaProblem::FoundByCensus { schema, table, column, asset_id }
            } else {
                let json_path = target.json_paths.join(" or ");
                SchemaProblem::IdOutsideDeclaredPath { schema, table, column, json_path, asset_id }
            });
        } else if !row.proven {
            standing.unproven.push(target.name());
        }
    }
    Ok(standing)
}

/// How far a pass may go.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// No batch starts after this.
    pub until: Instant,
    /// The most statements this pass runs.
    pub max_batches: u32,
    /// Table blocks each statement reads.
    pub batch_blocks: u32,
    /// How long after a cycle ends the next one begins (columns never proven are read meanwhile).
    pub cycle_interval: Duration,
}

/// Why the census stopped in a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// Every column was read in this cycle: the next starts after the cycle interval.
    CycleComplete,
    /// The last cycle ended less than the cycle interval ago, and every column is proven: nothing to read.
    Resting,
    /// Its share of the pass's time ran out.
    TimeShare,
    /// It ran its most batches for one pass.
    BatchCap,
}

/// What the census did in one pass, and where it stands: the run record's `census`.
#[derive(Debug, Clone, Serialize)]
pub struct Progress {
    /// The cycle it worked on.
    pub cycle: i64,
    /// When that cycle's first batch ran.
    pub cycle_started_at: Option<String>,
    /// Statements run in this pass.
    pub batches: u64,
    /// Table blocks read in this pass.
    pub blocks: u64,
    /// Columns whose scan ended in this pass.
    pub columns_finished: u64,
    /// Columns in which this pass found an asset id.
    pub findings: u64,
    /// The longest batch of this pass, in milliseconds: how long one census statement held its snapshot.
    pub longest_batch_ms: u64,
    /// Time spent in the batches' reading statements, in milliseconds (the rest of the pass's census time is
    /// its bookkeeping).
    pub reading_ms: u64,
    /// Columns the census reads (one per table holding rows).
    pub columns: i64,
    /// Of those, read completely in the current cycle.
    pub columns_done: i64,
    /// Of those, never proven as they stand.
    pub columns_unproven: i64,
    /// How much of the cycle's reading is done, by table blocks, in percent.
    pub percent_done: f64,
    /// Columns whose last scan found an asset id.
    pub columns_found: u64,
    /// How long the last complete cycle took, in seconds.
    pub last_cycle_seconds: Option<f64>,
    /// Why it stopped.
    pub stopped: Stop,
}

/// Where the census stands: what `asset-sweeper status` shows and each pass records.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The cycle under way (or about to start).
    pub cycle: i64,
    /// When its first batch ran; `None` until it has.
    pub cycle_started_at: Option<String>,
    /// Columns the census reads (one per table holding rows).
    pub columns: i64,
    /// Of those, read completely in this cycle.
    pub columns_done: i64,
    /// Of those, never proven as they stand (deletes and purges wait while any is).
    pub columns_unproven: i64,
    /// How much of this cycle's reading is done, by table blocks, in percent.
    pub percent_done: f64,
    /// Up to ten unproven columns, `schema.table.column`.
    pub unproven_sample: Vec<String>,
    /// Columns whose last scan found an asset id, as `schema.table.column` and the asset.
    pub findings: Vec<(String, Uuid)>,
    /// When the last complete cycle ended, and how long it took in seconds.
    pub last_cycle_completed_at: Option<String>,
    /// How long the last complete cycle took, in seconds.
    pub last_cycle_seconds: Option<f64>,
}

/// Reads where the census stands. Sizes come from the catalog, so this reads no application row.
pub async fn summary(conn: &mut PgConnection) -> Result<Summary, sqlx::Error> {
    let row = sqlx::query!(
        r#"WITH c AS (
               SELECT c.*, s.cycle, greatest(pg_relation_size(c.relid) / current_setting('block_size')::bigint, 1)
                      AS blocks,
                      format('%s.%s.%s', c.table_schema, c.table_name, c.column_name) AS name
                 FROM census_columns c CROSS JOIN census_state s
           )
           SELECT s.cycle, s.cycle_started_at::text AS cycle_started_at, s.last_cycle_seconds,
                  s.last_cycle_completed_at::text AS last_cycle_completed_at,
                  (SELECT count(*) FROM c) AS "columns!",
                  (SELECT count(*) FROM c WHERE c.done_cycle >= c.cycle) AS "done!",
                  (SELECT count(*) FROM c WHERE c.proven_at IS NULL) AS "unproven!",
                  (SELECT coalesce(100.0 * sum(CASE WHEN c.done_cycle >= c.cycle THEN c.blocks
                                                    ELSE least(c.next_block, c.blocks) END)
                                   / nullif(sum(c.blocks), 0), 100)::float8 FROM c) AS "percent!",
                  ARRAY(SELECT DISTINCT name FROM c WHERE c.proven_at IS NULL ORDER BY name LIMIT 10) AS "unproven_sample!",
                  ARRAY(SELECT DISTINCT name FROM c WHERE c.found_asset IS NOT NULL ORDER BY name) AS "found_names!",
                  ARRAY(SELECT DISTINCT ON (name) c.found_asset FROM c WHERE c.found_asset IS NOT NULL
                         ORDER BY name) AS "found_assets!: Vec<Uuid>"
             FROM census_state s"#
    )
    .fetch_one(conn)
    .await?;
    Ok(Summary {
        cycle: row.cycle,
        cycle_started_at: row.cycle_started_at,
        columns: row.columns,
        columns_done: row.done,
        columns_unproven: row.unproven,
        percent_done: row.percent,
        unproven_sample: row.unproven_sample,
        findings: row.found_names.into_iter().zip(row.found_assets).collect(),
        last_cycle_completed_at: row.last_cycle_completed_at,
        last_cycle_seconds: row.last_cycle_seconds,
    })
}

/// Whether `error` is the statement timeout cancelling a statement.
fn timed_out(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db) if db.code().as_deref() == Some("57014"))
}

/// Brings the census's columns in step with `targets`, then reads batches until the cycle is complete, the time
/// runs out or the batch cap is reached. Each batch is its own short statement; nothing is held between them.
pub async fn advance(conn: &mut PgConnection, targets: &[Target], budget: Budget) -> Result<Progress, sqlx::Error> {
    fail::fail_point!("census::advance", |_| Err(sqlx::Error::Protocol("injected: the census failed".into())));
    sync(conn, targets).await?;
    let mut batches = 0u64;
    let mut blocks = 0u64;
    let mut columns_finished = 0u64;
    let mut findings = 0u64;
    let (mut longest, mut reading) = (Duration::ZERO, Duration::ZERO);
    // Halved for the rest of the pass when a batch outlasts the statement timeout (TOASTed documents can make a
    // few blocks hold far more than their 8 KiB).
    let mut batch_blocks = i64::from(budget.batch_blocks.max(1));
    let mut work = plan(conn, budget.cycle_interval).await?.into_iter();
    let mut group = work.next();
    if group.is_some() {
        sqlx::query!("UPDATE census_state SET cycle_started_at = coalesce(cycle_started_at, now())")
            .execute(&mut *conn)
            .await?;
    }
    let stopped = loop {
        let Some(current) = group.as_mut() else { break Stop::CycleComplete };
        if batches >= u64::from(budget.max_batches) {
            break Stop::BatchCap;
        }
        if Instant::now() >= budget.until {
            break Stop::TimeShare;
        }
        let mut end = current.next_block.saturating_add(batch_blocks).min(current.blocks);
        if end >= current.blocks {
            // The table may have grown since the work was planned: its end is where it ends now.
            current.blocks = blocks_now(conn, current.relid).await?.max(current.blocks);
            end = current.next_block.saturating_add(batch_blocks).min(current.blocks);
        }
        let started = Instant::now();
        let found = if current.next_block < end {
            match scan(conn, current, end).await {
                Ok(found) => found,
                Err(e) if timed_out(&e) && end - current.next_block > 1 => {
                    batch_blocks = ((end - current.next_block) / 2).max(1);
                    tracing::warn!(table = %current.heap, batch_blocks, "a census batch timed out: reading fewer blocks");
                    batches += 1;
                    continue;
                }
                Err(e) => return Err(e),
            }
        } else {
            Vec::new()
        };
        let took = started.elapsed();
        longest = longest.max(took);
        reading += took;
        let finished = end >= current.blocks;
        record(conn, current, end, finished, &found, took).await?;
        batches += 1;
        blocks += u64::try_from(end - current.next_block).unwrap_or(0);
        findings += found.iter().filter(|f| f.is_some()).count() as u64;
        current.next_block = end;
        if finished {
            columns_finished += current.columns.len() as u64;
            group = work.next();
        }
    };
    let state = summary(conn).await?;
    // Counted before a completed cycle ends, so the record shows the cycle this pass finished.
    let completed = if stopped == Stop::CycleComplete { complete_cycle(conn).await? } else { None };
    // Nothing left to read yet the cycle did not end here: it is resting between cycles.
    let stopped = if stopped == Stop::CycleComplete && completed.is_none() { Stop::Resting } else { stopped };
    Ok(Progress {
        cycle: state.cycle,
        cycle_started_at: state.cycle_started_at,
        batches,
        blocks,
        columns_finished,
        findings,
        longest_batch_ms: u64::try_from(longest.as_millis()).unwrap_or(u64::MAX),
        reading_ms: u64::try_from(reading.as_millis()).unwrap_or(u64::MAX),
        columns: state.columns,
        columns_done: state.columns_done,
        columns_unproven: state.columns_unproven,
        percent_done: state.percent_done,
        columns_found: state.findings.len() as u64,
        last_cycle_seconds: completed.or(state.last_cycle_seconds),
        stopped,
    })
}

/// Adds a row for every column of `targets` on every table holding its rows, resets a row whose type or declared
/// paths changed, and drops the rows of columns no longer read. One statement.
async fn sync(conn: &mut PgConnection, targets: &[Target]) -> Result<(), sqlx::Error> {
    let cols = Columns::of(targets);
    sqlx::query!(
        r#"WITH t AS (
               SELECT l.relid, l.attnum, l.type_oid, t.schema_name, t.table_name, t.column_name, t.family, t.shape,
                      ARRAY(SELECT jsonb_array_elements_text(t.paths)) AS json_paths
                 FROM asset_sweeper_census_leaves($1, $2, $3) l
                 JOIN unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::jsonb[])
                      WITH ORDINALITY AS t(schema_name, table_name, column_name, family, shape, paths, position)
                   ON t.position = l.position
           ),
           gone AS (
               DELETE FROM census_columns c
                WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.relid = c.relid AND t.attnum = c.attnum)
           )
           INSERT INTO census_columns AS c (relid, attnum, type_oid, json_paths, table_schema, table_name,
                                            column_name, family, shape)
           SELECT relid, attnum, type_oid, json_paths, schema_name, table_name, column_name, family, shape FROM t
           ON CONFLICT (relid, attnum) DO UPDATE
              SET table_schema = EXCLUDED.table_schema, table_name = EXCLUDED.table_name,
                  column_name = EXCLUDED.column_name, family = EXCLUDED.family, shape = EXCLUDED.shape,
                  type_oid = EXCLUDED.type_oid, json_paths = EXCLUDED.json_paths, added_at = now(),
                  next_block = 0, scan_started_at = NULL, done_cycle = 0, proven_at = NULL,
                  found_asset = NULL, found_at = NULL, found_cycle = NULL
            WHERE (c.type_oid, c.json_paths) IS DISTINCT FROM (EXCLUDED.type_oid, EXCLUDED.json_paths)
               OR (c.table_schema, c.table_name, c.column_name) IS DISTINCT FROM
                  (EXCLUDED.table_schema, EXCLUDED.table_name, EXCLUDED.column_name)"#,
        &cols.schemas,
        &cols.tables,
        &cols.columns,
        &cols.families,
        &cols.shapes,
        &cols.paths,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Columns of one table at the same point of their scans: read together, by one statement per batch.
struct Group {
    relid: sqlx::postgres::types::Oid,
    next_block: i64,
    /// `schema.table` of the table holding the rows, quoted.
    heap: String,
    /// Its size in blocks now.
    blocks: i64,
    columns: Vec<Column>,
}

struct Column {
    attnum: i16,
    name: String,
    family: String,
    shape: String,
    json_paths: Vec<String>,
}

/// The columns to read in this cycle, in order: never-proven columns first (they hold destruction back), then
/// table by table; columns of one table whose scans stand at the same block go together. Within `interval` of the
/// last cycle's end only never-proven columns are read. One statement per pass: each batch then costs only its
/// reading statement and the update that records it.
async fn plan(conn: &mut PgConnection, interval: Duration) -> Result<Vec<Group>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT c.relid, c.next_block,
                  quote_ident(n.nspname) || '.' || quote_ident(t.relname) AS "heap!",
                  pg_relation_size(c.relid) / current_setting('block_size')::bigint AS "blocks!",
                  array_agg(c.attnum ORDER BY c.attnum) AS "attnums!",
                  array_agg(a.attname::text ORDER BY c.attnum) AS "names!",
                  array_agg(c.family ORDER BY c.attnum) AS "families!",
                  array_agg(c.shape ORDER BY c.attnum) AS "shapes!",
                  jsonb_agg(to_jsonb(c.json_paths) ORDER BY c.attnum) AS "paths!"
             FROM census_columns c
            CROSS JOIN census_state s
             JOIN pg_class t ON t.oid = c.relid
             JOIN pg_namespace n ON n.oid = t.relnamespace
             JOIN pg_attribute a ON a.attrelid = c.relid AND a.attnum = c.attnum AND NOT a.attisdropped
            WHERE c.done_cycle < s.cycle
              AND (c.proven_at IS NULL OR s.cycle_started_at IS NOT NULL OR s.last_cycle_completed_at IS NULL
                   OR s.last_cycle_completed_at <= now() - $1 * interval '1 second')
            GROUP BY c.relid, c.next_block, n.nspname, t.relname
            ORDER BY bool_or(c.proven_at IS NULL) DESC, c.relid, c.next_block"#,
        interval.as_secs_f64(),
    )
    .fetch_all(conn)
    .await?;
    let mut groups = Vec::with_capacity(rows.len());
    for row in rows {
        let paths: Vec<Vec<String>> = serde_json::from_value(row.paths).unwrap_or_default();
        let columns = row
            .attnums
            .into_iter()
            .zip(row.names)
            .zip(row.families.into_iter().zip(row.shapes))
            .zip(paths.into_iter().chain(std::iter::repeat(Vec::new())))
            .map(|(((attnum, name), (family, shape)), json_paths)| Column { attnum, name, family, shape, json_paths })
            .collect();
        groups.push(Group {
            relid: row.relid,
            next_block: row.next_block,
            heap: row.heap,
            blocks: row.blocks,
            columns,
        });
    }
    Ok(groups)
}

/// The size of a table in blocks now (0 once it is gone).
async fn blocks_now(conn: &mut PgConnection, relid: sqlx::postgres::types::Oid) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT coalesce(pg_relation_size($1::oid) / current_setting('block_size')::bigint, 0) AS "blocks!""#,
        relid
    )
    .fetch_one(conn)
    .await
}

/// Failpoint `census::block_limit`: a batch of more blocks than its argument is cancelled by the server's own
/// statement timeout, as a batch of oversized documents would be.
fn injected_block_limit() -> Option<i64> {
    fail::fail_point!("census::block_limit", |limit: Option<String>| limit.and_then(|l| l.parse().ok()));
    None
}

/// Reads blocks `[group.next_block, end)` of the group's table; for each column, in order, one asset it holds.
/// Mixed-case spellings of ids at a declared path are noted for the recheck, not found.
async fn scan(conn: &mut PgConnection, group: &Group, end: i64) -> Result<Vec<Option<Uuid>>, sqlx::Error> {
    if injected_block_limit().is_some_and(|limit| end - group.next_block > limit) {
        let timed_out = sqlx::raw_sql("SET statement_timeout = 1; SELECT pg_sleep(1)").execute(&mut *conn).await;
        sqlx::raw_sql("RESET statement_timeout").execute(&mut *conn).await?;
        timed_out?;
    }
    let selected: Vec<String> = group.columns.iter().map(|c| quote_ident(&c.name)).collect();
    let mut finds = Vec::new();
    // Values searched for uuid-shaped strings, and text values compared with storage keys: gathered from every
    // column, so each search and each join with `assets` runs once per batch, not once per column. A hyphenated
    // uuid has four hyphens: a value without them is not searched at all (LIKE costs a fraction of the search).
    let (mut searched, mut keyed) = (Vec::new(), Vec::new());
    // $1, $2: the block range; $3: the uuid pattern; $4…: each declared source's paths.
    let mut paths: Vec<Vec<String>> = Vec::new();
    for (k, column) in group.columns.iter().enumerate() {
        let col = format!("r.{}", quote_ident(&column.name));
        match column.family.as_str() {
            "uuid" if column.shape == "array" => {
                finds.push(format!("SELECT {k}, e::uuid, NULL::text FROM r, unnest({col}) e"));
            }
            "uuid" => finds.push(format!("SELECT {k}, {col}::uuid, NULL::text FROM r WHERE {col} IS NOT NULL")),
            _ if !column.json_paths.is_empty() => {
                paths.push(column.json_paths.clone());
                let n = paths.len() + 3;
                // The strings the declared paths select, as the recheck reads them (a filter on strings).
                let at_paths = format!(
                    "unnest(${n}::text[]) p, jsonb_path_query({col}, (p || ' ? (@.type() == \"string\")')::jsonpath) v"
                );
                // Ids at a declared path are references; every other asset id in the document is a finding.
                finds.push(format!(
                    "SELECT {k}, m[1]::uuid, NULL::text FROM r, regexp_matches({col}::text, $3, 'g') m
                      WHERE {col}::text LIKE '%-%-%-%-%'
                        AND lower(m[1]) NOT IN (SELECT lower(v #>> '{{}}') FROM {at_paths})"
                ));
                // An id at a path in mixed case is a reference the recheck finds once its spelling is noted.
                finds.push(format!(
                    "SELECT {k}, (v #>> '{{}}')::uuid, v #>> '{{}}' FROM r, {at_paths}
                      WHERE v #>> '{{}}' ~ ('^' || $3 || '$')
                        AND v #>> '{{}}' NOT IN (lower(v #>> '{{}}'), upper(v #>> '{{}}'))"
                ));
            }
            family => {
                searched.push(format!("SELECT {k} AS k, {col}::text AS v FROM r WHERE {col} IS NOT NULL"));
                if family == "text" {
                    let texts =
                        if column.shape == "array" { format!("unnest({col})::text") } else { format!("{col}::text") };
                    keyed.push(format!("SELECT {k} AS k, {texts} AS v FROM r"));
                }
            }
        }
    }
    if !searched.is_empty() {
        finds.push(format!(
            "SELECT x.k, m[1]::uuid, NULL::text FROM ({}) x, regexp_matches(x.v, $3, 'g') m
              WHERE x.v LIKE '%-%-%-%-%'",
            searched.join(" UNION ALL ")
        ));
    }
    if !keyed.is_empty() {
        finds.push(format!(
            "SELECT x.k, a.id, NULL::text FROM ({}) x JOIN assets a ON a.storage_key = x.v",
            keyed.join(" UNION ALL ")
        ));
    }
    // Built here, not checked at compile time: the table and its columns are the application's, known only now.
    let sql = format!(
        "WITH r AS MATERIALIZED (SELECT {} FROM ONLY {} WHERE ctid >= $1::tid AND ctid < $2::tid),
              found(k, id, spelling) AS ({})
         SELECT DISTINCT ON (f.k, f.spelling) f.k, f.id, f.spelling
           FROM found f JOIN assets a ON a.id = f.id ORDER BY f.k, f.spelling",
        selected.join(", "),
        group.heap,
        finds.join(" UNION ALL "),
    );
    let mut query = sqlx::query_as::<_, (i32, Uuid, Option<String>)>(AssertSqlSafe(sql))
        .bind(format!("({},0)", group.next_block))
        .bind(format!("({end},0)"))
        .bind(UUID_IN_TEXT);
    for p in paths {
        query = query.bind(p);
    }
    let rows = query.persistent(false).fetch_all(&mut *conn).await?;
    let mut found = vec![None; group.columns.len()];
    let (mut ids, mut spellings) = (Vec::new(), Vec::new());
    for (k, id, spelling) in rows {
        match spelling {
            Some(spelling) => {
                ids.push(id);
                spellings.push(spelling);
            }
            None => {
                if let Some(slot) = usize::try_from(k).ok().and_then(|k| found.get_mut(k)) {
                    *slot = Some(id);
                }
            }
        }
    }
    if !ids.is_empty() {
        sqlx::query!(
            "INSERT INTO asset_id_spellings (asset_id, spelling) SELECT * FROM unnest($1::uuid[], $2::text[])
             ON CONFLICT DO NOTHING",
            &ids,
            &spellings,
        )
        .execute(conn)
        .await?;
    }
    Ok(found)
}

/// Moves the group's cursor to `end`; a finding is kept with its cycle. When the scan is `finished`, a column
/// that found nothing in this cycle is proven as of its scan's start, and its cursor wraps.
async fn record(
    conn: &mut PgConnection,
    group: &Group,
    end: i64,
    finished: bool,
    found: &[Option<Uuid>],
    took: Duration,
) -> Result<(), sqlx::Error> {
    let attnums: Vec<i16> = group.columns.iter().map(|c| c.attnum).collect();
    // A scan's first batch dates it: by the database's clock, from when that batch's reading began.
    let started_at = (group.next_block == 0).then_some(took.as_secs_f64());
    sqlx::query!(
        r#"UPDATE census_columns c
              SET next_block = CASE WHEN $3 THEN 0 ELSE $4::bigint END,
                  scan_started_at = CASE WHEN $6::float8 IS NOT NULL THEN now() - $6 * interval '1 second'
                                         ELSE c.scan_started_at END,
                  found_asset = CASE WHEN f.found IS NOT NULL THEN f.found
                                     WHEN $3 AND c.found_cycle IS DISTINCT FROM s.cycle THEN NULL
                                     ELSE c.found_asset END,
                  found_at = CASE WHEN f.found IS NOT NULL THEN now()
                                  WHEN $3 AND c.found_cycle IS DISTINCT FROM s.cycle THEN NULL
                                  ELSE c.found_at END,
                  found_cycle = CASE WHEN f.found IS NOT NULL THEN s.cycle ELSE c.found_cycle END,
                  proven_at = CASE WHEN f.found IS NOT NULL THEN NULL
                                   WHEN $3 AND c.found_cycle IS DISTINCT FROM s.cycle
                                        THEN CASE WHEN $6::float8 IS NOT NULL THEN now() - $6 * interval '1 second'
                                                  ELSE c.scan_started_at END
                                   ELSE c.proven_at END,
                  done_cycle = CASE WHEN $3 THEN s.cycle ELSE c.done_cycle END
             FROM unnest($2::int2[], $5::uuid[]) AS f(attnum, found), census_state s
            WHERE c.relid = $1 AND c.attnum = f.attnum"#,
        group.relid,
        &attnums,
        finished,
        end,
        found as &[Option<Uuid>],
        started_at,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Ends the cycle when every column has been read in it, and answers how long it took; the next one starts with
/// the next pass's first batch.
async fn complete_cycle(conn: &mut PgConnection) -> Result<Option<f64>, sqlx::Error> {
    sqlx::query_scalar!(
        "UPDATE census_state s
            SET last_cycle_completed_at = now(),
                last_cycle_seconds = extract(epoch FROM now() - s.cycle_started_at)::float8,
                cycle = s.cycle + 1, cycle_started_at = NULL
          WHERE s.cycle_started_at IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM census_columns c WHERE c.done_cycle < s.cycle)
          RETURNING s.last_cycle_seconds"
    )
    .fetch_optional(conn)
    .await
    .map(Option::flatten)
}
