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
//! spelling, noted in `asset_id_spellings` for the recheck (the reference guard notes those written later).
//! Batches are ranges of table blocks (`ctid` ranges, which Postgres reads without touching the rest of the
//! table), so a batch costs the same at the start of a table as at its end, and a table without a primary key is
//! read like any other.
//!
//! With reconciliation configured, each batch also reads the text and JSON values for keys of ours a record names
//! (`named`): an adopted asset, whose id nobody holds, is destroyed only once that scan has covered the schema and
//! no record names its key.
//!
//! Here: what the census reads (`targets`) and what its record says (`standing`, `summary`); `advance` runs one
//! pass's share; `scan` is one batch's statement, `named` its key scan, `unread` what happens to a block the batch
//! limit cuts short alone (read value by value; a value still too large or slow is read from its start and
//! recorded).

mod advance;
mod group;
pub(crate) mod ids;
mod named;
mod readers;
pub use readers::Readers;
mod relative;
pub(crate) use relative::candidates as relative_candidates;
pub mod replica;
mod scan;
pub mod unread;

use platform::keys::KeyLayout;
use platform::step::{Share, Step};
use serde::Serialize;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::map::{Candidate, ReferenceSource, SchemaProblem, SourceKind};

pub use advance::{Budget, Progress, Stop, advance};

/// Column `col` (an SQL expression) of `family` as text to search for ids: as written for strings and JSON, as hex
/// for a byte string (an id's 16 bytes are its 32 hex digits), and by its output function for everything else — a
/// cast to text of the application's own type would run the application's code.
pub(crate) fn text_of(col: &str, family: &str) -> String {
    match family {
        "value" => format!("format('%s', {col})"),
        "bytea" => format!("encode({col}, 'hex')"),
        _ => format!("{col}::text"),
    }
}

/// Whether `error` is the statement timeout cancelling a statement.
fn timed_out(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db) if db.code().as_deref() == Some("57014"))
}

/// Which of `candidates` (ids found spelled in text by [`ids::ids_in`]) are assets: one question for a batch or a
/// sample, however many values it searched.
pub(crate) async fn assets_among(
    conn: &mut PgConnection,
    candidates: &[Uuid],
) -> Result<std::collections::HashSet<Uuid>, sqlx::Error> {
    let found = sqlx::query_scalar!("SELECT id FROM assets WHERE id = ANY ($1)", candidates).fetch_all(conn).await?;
    Ok(found.into_iter().collect())
}

/// Which of `keys` are the storage keys of assets the key scan did not adopt, with their ids (asset rows that share
/// bytes share a key, and each is named): the sample's question and the census's, one statement for both.
pub(crate) async fn not_adopted_keys(
    conn: &mut PgConnection,
    keys: &[&str],
) -> Result<std::collections::HashMap<String, Vec<Uuid>>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT a.storage_key AS "storage_key!", a.id FROM assets a
            WHERE a.storage_key = ANY ($1)
              AND NOT EXISTS (SELECT 1 FROM adopted_assets d WHERE d.asset_id = a.id)"#,
        keys as &[&str]
    )
    .fetch_all(conn)
    .await?;
    let mut keyed: std::collections::HashMap<String, Vec<Uuid>> = std::collections::HashMap::new();
    for row in rows {
        keyed.entry(row.storage_key).or_default().push(row.id);
    }
    Ok(keyed)
}

/// An asset id found where no source is: the asset, the table holding the row (a partition's own), the column, and
/// the row's `ctid`.
pub(crate) struct Finding {
    pub(crate) asset: Uuid,
    pub(crate) relid: sqlx::postgres::types::Oid,
    pub(crate) column: String,
    pub(crate) record: String,
}

/// Keeps each finding in `census_findings`, seen now (one row per asset and column, naming the latest row): one
/// home for what the census's batches and the schema check's sample found. One statement, none without findings.
pub(crate) async fn note_findings(conn: &mut PgConnection, found: Vec<Finding>) -> Result<(), sqlx::Error> {
    if found.is_empty() {
        return Ok(());
    }
    let mut columns = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for f in found {
        columns.0.push(f.asset);
        columns.1.push(f.relid);
        columns.2.push(f.column);
        columns.3.push(f.record);
    }
    sqlx::query!(
        "INSERT INTO census_findings AS f (asset_id, relid, attnum, record)
         SELECT DISTINCT ON (t.a, t.r, c.attnum) t.a, t.r, c.attnum, t.at
           FROM unnest($1::uuid[], $2::oid[], $3::text[], $4::text[]) AS t(a, r, col, at)
           JOIN pg_attribute c ON c.attrelid = t.r AND c.attname = t.col AND NOT c.attisdropped
         ON CONFLICT (asset_id, relid, attnum) DO UPDATE SET record = EXCLUDED.record, seen_at = now()",
        &columns.0,
        &columns.1 as &[sqlx::postgres::types::Oid],
        &columns.2,
        &columns.3,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// A column the census reads, as the schema check names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The schema of its table.
    pub schema: String,
    /// Its table (a partitioned table's root).
    pub table: String,
    /// The column.
    pub column: String,
    /// `uuid`, `text`, `json`, `bytea` or `value` ([`crate::Candidate`]).
    pub family: String,
    /// `scalar` or `array`.
    pub shape: String,
    /// For a declared JSONB source, its declared paths (sorted); empty otherwise.
    pub json_paths: Vec<String>,
    /// `ids`, `keys` or `both` ([`crate::Candidate`]); `both` for a declared JSONB source.
    pub reads: String,
    /// The type (its oid) the reading was chosen for; a column of another type now is read by no batch.
    pub type_oid: u32,
}

impl Target {
    fn name(&self) -> String {
        format!("{}.{}.{}", self.schema, self.table, self.column)
    }
}

/// The oid of `jsonb`, the type a declared JSON source is read as (the schema check reads no other).
const JSONB: u32 = 3802;

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
            reads: c.reads.clone(),
            type_oid: c.type_oid,
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
                reads: "both".to_owned(),
                type_oid: JSONB,
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
    /// Columns that look like undeclared sources (many rows holding asset ids), as schema problems naming them.
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
    reads: Vec<String>,
    /// Each target's type as its reading was chosen.
    types: Vec<sqlx::postgres::types::Oid>,
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
            reads: targets.iter().map(|t| t.reads.clone()).collect(),
            types: targets.iter().map(|t| sqlx::postgres::types::Oid(t.type_oid)).collect(),
        }
    }
}

/// How many rows of a column that is no source must hold an asset id, at the least, for the column to look like an
/// undeclared source and refuse the pass; fewer are stray values (a link pasted into a comment), each held as a
/// finding.
pub const SOURCE_LIKE_ROWS: i64 = 10;

/// The share of a column's rows (the table's estimate, or the rows seen when it has none) that must hold an asset
/// id, besides [`SOURCE_LIKE_ROWS`], for it to look like an undeclared source.
pub const SOURCE_LIKE_SHARE: f64 = 0.2;

/// Whether `rows` of `of` rows holding an asset id make a column look like an undeclared source.
pub fn looks_like_source(rows: i64, of: i64) -> bool {
    #[allow(clippy::cast_precision_loss)]
    let share = rows as f64 / of.max(rows).max(1) as f64;
    rows >= SOURCE_LIKE_ROWS && share >= SOURCE_LIKE_SHARE
}

/// Reads the census's record for `targets`: which are proven on every table holding their rows (a target with
/// no such table holds nothing to read), and which look like an undeclared source (stray findings hold their
/// assets one by one and refuse nothing). One statement.
pub async fn standing(conn: &mut PgConnection, targets: &[Target]) -> Result<Standing, sqlx::Error> {
    if targets.is_empty() {
        return Ok(Standing::default());
    }
    let cols = Columns::of(targets);
    let rows = sqlx::query!(
        r#"SELECT l.position AS "position!",
                  bool_and(c.proven_at IS NOT NULL) AS "proven!",
                  (array_agg(c.found_asset) FILTER (WHERE c.found_asset IS NOT NULL))[1] AS found,
                  coalesce(sum(greatest(c.found_rows, c.scan_found_rows)), 0)::int8 AS "found_rows!",
                  coalesce(sum(greatest(k.reltuples, 0)), 0)::int8 AS "table_rows!"
             FROM asset_sweeper_census_leaves($1, $2, $3) l
             JOIN pg_class k ON k.oid = l.relid
             LEFT JOIN census_columns c
                    ON c.relid = l.relid AND c.attnum = l.attnum AND c.type_oid = l.type_oid
                   AND c.json_paths = ARRAY(SELECT jsonb_array_elements_text(($4::jsonb[])[l.position]))
                   AND c.reads = ($5::text[])[l.position]
            GROUP BY l.position
            ORDER BY l.position"#,
        &cols.schemas,
        &cols.tables,
        &cols.columns,
        &cols.paths,
        &cols.reads,
    )
    .fetch_all(conn)
    .await?;
    let mut standing = Standing::default();
    for row in rows {
        let Some(target) = usize::try_from(row.position - 1).ok().and_then(|i| targets.get(i)) else { continue };
        if let Some(asset_id) = row.found.filter(|_| looks_like_source(row.found_rows, row.table_rows)) {
            let (schema, table, column) = (target.schema.clone(), target.table.clone(), target.column.clone());
            standing.problems.push(if target.json_paths.is_empty() {
                SchemaProblem::FoundByCensus { schema, table, column, asset_id }
            } else {
                let json_path = target.json_paths.join(" or ");
                SchemaProblem::IdOutsideDeclaredPath { schema, table, column, json_path, asset_id }
            });
        }
        if !row.proven {
            standing.unproven.push(target.name());
        }
    }
    Ok(standing)
}

/// How a verdict names the hold of a census too slow for `RETENTION` ([`too_slow`]): as every column, as a verdict
/// from before the census was.
pub const TOO_SLOW: &str = "every column: the census's ";

/// Why no column's proof holds when the census reads the schema too slowly for `pace`
/// ([`crate::CensusPace`]): the cycle under way has run (or, past the rest, has not started for), or the last whole
/// one took, longer than half of the shortest time a retired asset waits for its purge less the rest. A value
/// written behind a scan is read by the next cycle; at that pace an asset its reference names could be retired and
/// purged first. Deletes and purges wait, retiring goes on, until a cycle ends in time.
pub(crate) async fn too_slow(conn: &mut PgConnection, pace: crate::CensusPace) -> Result<Option<String>, sqlx::Error> {
    // The shortest wait for a purge: RETENTION now, or a shorter one an asset still waiting was retired under (its
    // purge time stays); read from a partial index of the retired rows' windows. An abandoned upload's trial has
    // none (its purge time is its retirement): it is removed only after a census begun since has read everything.
    // One whose purge time has come counts no more: its purge waits for this very rule, and would hold it for ever.
    let state = sqlx::query!(
        r#"SELECT extract(epoch FROM now() - coalesce(s.cycle_started_at,
                                                       s.last_cycle_completed_at + $1 * interval '1 second'))::float8
                      AS running,
                  s.last_cycle_seconds,
                  (SELECT extract(epoch FROM min(a.purge_after - a.retired_at))::float8
                     FROM assets a
                    WHERE a.state = 'retired' AND a.purge_after - a.retired_at > interval '0'
                      AND a.purge_after > now()) AS shortest
             FROM census_state s"#,
        pace.rest.as_secs_f64(),
    )
    .fetch_optional(conn)
    .await?;
    let Some(state) = state else { return Ok(None) };
    let window = state.shortest.map_or(pace.retention.as_secs_f64(), |s| s.min(pace.retention.as_secs_f64()));
    let deadline = ((window - pace.rest.as_secs_f64()) / 2.0).max(0.0);
    let shown = |seconds: f64| humantime::format_duration(std::time::Duration::from_secs_f64(seconds.trunc().max(0.0)));
    let over = |seconds: Option<f64>| seconds.filter(|s| *s > deadline).map(shown);
    let why = |what: String| {
        format!(
            "{TOO_SLOW}{what}, longer than the {} a cycle may take (half of {} before a retired asset's purge, less \
             CENSUS_CYCLE_INTERVAL), so a reference written behind its scan could be read only after a purge",
            shown(deadline),
            shown(window)
        )
    };
    Ok(match (over(state.running), over(state.last_cycle_seconds)) {
        (Some(running), _) => Some(why(format!("cycle under way (or due since its rest ended) has run for {running}"))),
        (None, Some(took)) => Some(why(format!("last full cycle took {took}"))),
        (None, None) => None,
    })
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
    /// Values the census could not read whole within its batch limit: how many, and the newest ten.
    pub unread: i64,
    /// The newest of them.
    pub unread_sample: Vec<UnreadValue>,
    /// When the last complete cycle ended, and how long it took in seconds.
    pub last_cycle_completed_at: Option<String>,
    /// How long the last complete cycle took, in seconds.
    pub last_cycle_seconds: Option<f64>,
}

/// A value the census could not read whole: what is proven of it is its first `read_chars` characters.
#[derive(Debug, Clone, Serialize)]
pub struct UnreadValue {
    /// `schema.table.column`.
    pub column: String,
    /// The row's `ctid` when it was tried.
    pub record: String,
    /// Its size as stored, when known.
    pub stored_bytes: Option<i64>,
    /// The characters read from its start.
    pub read_chars: i32,
    /// Not tried yet: the pass's share ran out inside its block. Read before its column's scan may end.
    pub untried: bool,
    /// When it was tried (or left untried).
    pub recorded_at: String,
}

/// Reads where the census stands. Sizes come from the catalog, so this reads no application row.
pub async fn summary(conn: &mut PgConnection) -> Result<Summary, sqlx::Error> {
    let row = sqlx::query!(
        r#"WITH c AS (
               SELECT c.*, s.cycle, greatest(asset_sweeper_blocks(c.relid), 1)
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
                  ARRAY(SELECT DISTINCT name FROM c WHERE c.proven_at IS NULL ORDER BY name LIMIT 10)
                      AS "unproven_sample!",
                  ARRAY(SELECT DISTINCT name FROM c WHERE c.found_asset IS NOT NULL ORDER BY name) AS "found_names!",
                  ARRAY(SELECT DISTINCT ON (name) c.found_asset FROM c WHERE c.found_asset IS NOT NULL
                         ORDER BY name) AS "found_assets!: Vec<Uuid>"
             FROM census_state s"#
    )
    .fetch_one(&mut *conn)
    .await?;
    let unread = sqlx::query!(
        r#"SELECT format('%s.%s.%s', c.table_schema, c.table_name, c.column_name) AS "column!", u.record,
                  u.stored_bytes, u.read_chars, u.untried, u.recorded_at::text AS "recorded_at!",
                  count(*) OVER () AS "of!"
             FROM census_unread u JOIN census_columns c ON c.relid = u.relid AND c.attnum = u.attnum
            ORDER BY u.recorded_at DESC, 1, u.record
            LIMIT 10"#
    )
    .fetch_all(conn)
    .await?;
    Ok(Summary {
        unread: unread.first().map_or(0, |u| u.of),
        cycle: row.cycle,
        cycle_started_at: row.cycle_started_at,
        columns: row.columns,
        columns_done: row.done,
        columns_unproven: row.unproven,
        percent_done: row.percent,
        unproven_sample: row.unproven_sample,
        findings: row.found_names.into_iter().zip(row.found_assets).collect(),
        unread_sample: unread
            .into_iter()
            .map(|u| UnreadValue {
                column: u.column,
                record: u.record,
                stored_bytes: u.stored_bytes,
                read_chars: u.read_chars,
                untried: u.untried,
                recorded_at: u.recorded_at,
            })
            .collect(),
        last_cycle_completed_at: row.last_cycle_completed_at,
        last_cycle_seconds: row.last_cycle_seconds,
    })
}

/// The census's share of a pass: reads more of the columns that are not reference sources, before the schema check,
/// so the verdict the consumer settles on says what the census has proven (invariant 13).
#[derive(Debug, Clone, Copy)]
pub struct Census<'a> {
    /// The most statements a pass runs.
    pub max_batches: u32,
    /// Table blocks each statement reads.
    pub batch_blocks: u32,
    /// How long each statement may read.
    pub batch_timeout: std::time::Duration,
    /// How long after a cycle ends the next one begins.
    pub cycle_interval: std::time::Duration,
    /// Connections reading one table's batches at once, its own included: as many as the pool lends at once.
    pub readers: u32,
    /// The bucket's key layout, when keys of ours are scanned for too.
    pub layout: Option<&'a KeyLayout>,
    /// A physical standby to read from (`CENSUS_DATABASE_URL`), with `readers` connections ([`replica`]).
    pub replica: Option<&'a sqlx::postgres::PgConnectOptions>,
}

impl Census<'_> {
    /// Connections of the pass's pool to read beside the census's own, up to `readers` in all.
    async fn lent(&self, pool: &PgPool) -> Readers {
        let mut lent = Vec::new();
        for _ in 1..self.readers {
            // A pool with none to spare lends fewer: the census reads with what it has rather than wait.
            match tokio::time::timeout(std::time::Duration::from_secs(2), pool.acquire()).await {
                Ok(Ok(mut reader)) => {
                    // Closed when the census is done with it, not returned: whatever a reader's batch left set
                    // on its session (the batch limit, should a task stop midway) ends with it.
                    reader.close_on_drop();
                    lent.push(reader);
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "a census reader could not connect: reading with fewer");
                    break;
                }
                Err(_) => {
                    tracing::warn!("the pool lent no more census readers: reading with fewer");
                    break;
                }
            }
        }
        Readers::lent(lent)
    }
}

impl Step for Census<'_> {
    type Progress = Progress;
    type Standing = Summary;
    type Error = sqlx::Error;
    const NAME: &'static str = "census";
    const ON_FAILURE: &'static str = "the census could not read: unproven columns stay unproven";

    async fn advance(&self, pool: &PgPool, share: Share) -> Result<Progress, sqlx::Error> {
        let mut conn = pool.acquire().await?;
        let budget = Budget {
            until: share.until,
            max_batches: self.max_batches,
            batch_blocks: self.batch_blocks,
            batch_timeout: self.batch_timeout,
            cycle_interval: self.cycle_interval,
        };
        let derived = crate::derive::derive(&mut conn).await?;
        let targets = targets(&derived.sources, &derived.problems, &derived.candidates);
        let (mut readers, waited) = match self.replica {
            Some(options) => {
                let floor = replica::floor(&mut conn).await?;
                // A standby that lags waits at most one batch's limit, and never past the census's share.
                let until = share.until.min(std::time::Instant::now() + self.batch_timeout);
                let (connections, waited) = replica::readers(options, self.readers, &floor, until).await?;
                (Readers::on_replica(connections, floor), Some(waited))
            }
            None => (self.lent(pool).await, None),
        };
        let mut progress = advance(&mut conn, &mut readers, &targets, budget, self.layout).await?;
        progress.replica_wait_ms = waited.map(|w| u64::try_from(w.as_millis()).unwrap_or(u64::MAX));
        Ok(progress)
    }

    async fn standing(conn: &mut PgConnection) -> Result<Summary, sqlx::Error> {
        summary(conn).await
    }

    fn log(progress: &Progress) {
        tracing::info!(
            cycle = progress.cycle,
            batches = progress.batches,
            blocks = progress.blocks,
            columns = progress.columns,
            done = progress.columns_done,
            unproven = progress.columns_unproven,
            findings = progress.findings,
            stopped = ?progress.stopped,
            "census advanced"
        );
    }
}
