//! The bucket comparison on an engine outside the application's database, for buckets too large to copy into it
//! (invariant 31). Only the *finding* moves: the engine runs one SQL text (`comparison.sql`) over S3 Inventory's
//! report and the product's export of the keys its rows know ([`export`]), and hands back only the differences.
//! Those come home to `reconcile_keys` in bounded pages ([`collect`]), and the application's database re-checks and
//! judges them exactly as it judges a report it read itself ([`compare`]): the same findings, adoption, approvals
//! and brakes. What an engine may run and what it costs is said before it runs ([`cost`]).
//!
//! - [`Dialect`] and [`render`]: the one text, with what differs between engines confined to naming the two datasets.
//! - [`Engine`]: what runs it: Amazon Athena in a deployment (`sweep_lambda::athena`), a local engine in the tests.

pub mod cost;
pub mod export;

use std::collections::BTreeMap;
use std::future::Future;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;

use super::ingest::{Encoder, Ingested};
use super::{BucketKey, Findings, Judge, Listed, Listing, ReconcileError};
use platform::keys::KeyLayout;
use platform::text_enum;

/// The comparison, before [`render`] fills in what the dialect names.
pub const COMPARISON: &str = include_str!("comparison.sql");

/// Known keys off the pattern listed per prefix, at most: the comparison's `nth <= 5`.
pub const OFF_PATTERN_SAMPLE: usize = 5;

/// How an engine names what the comparison reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dialect {
    /// Tables registered as `inventory` (the report's data files) and `known` (the export's files): a local engine.
    Local,
    /// Amazon Athena: the inventory's table as AWS documents it (partitioned by `dt`, the report's scan time), and
    /// the export's table (partitioned by `listing`), both in `database`.
    Athena {
        /// The Glue database.
        database: String,
        /// The inventory's table.
        inventory: String,
        /// The export's table.
        known: String,
    },
}

/// The report a comparison reads, as the text needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading<'a> {
    /// The listing the export was written for.
    pub listing: i64,
    /// When S3 began the report's scan: an asset created later may have bytes the report cannot show.
    pub taken_at: DateTime<Utc>,
    /// The report's folder, `YYYY-MM-DDTHH-MMZ`: Athena's `dt` partition.
    pub folder: &'a str,
    /// A report of all versions (`is_latest`, `is_delete_marker`), not of current objects only.
    pub versions: bool,
}

/// The comparison for `reading`, of the keys under `prefixes`, in `dialect`.
pub fn render(dialect: &Dialect, reading: &Reading<'_>, prefixes: &[&str]) -> String {
    let (inventory, known) = match dialect {
        Dialect::Local => ("inventory".to_owned(), "known".to_owned()),
        Dialect::Athena { database, inventory, known } => (
            format!(
                "(SELECT * FROM {}.{} WHERE dt = {})",
                identifier(database),
                identifier(inventory),
                literal(&athena_partition(reading.folder))
            ),
            format!(
                "(SELECT * FROM {}.{} WHERE listing = {})",
                identifier(database),
                identifier(known),
                literal(&reading.listing.to_string())
            ),
        ),
    };
    let current = if reading.versions { "is_latest AND NOT coalesce(is_delete_marker, false)" } else { "true" };
    let managed = if prefixes.is_empty() {
        "false".to_owned()
    } else {
        prefixes.iter().map(|p| format!("starts_with(key, {})", literal(p))).collect::<Vec<_>>().join(" OR ")
    };
    // The prefixes last: a literal of the operator's is never read for a placeholder.
    COMPARISON
        .replace("{inventory}", &inventory)
        .replace("{known}", &known)
        .replace("{current}", current)
        .replace("{taken_at_ms}", &reading.taken_at.timestamp_millis().to_string())
        .replace("{managed}", &managed)
}

/// S3 names a report's folder `2026-11-30T00-00Z`; the partition AWS's documented table adds for it is
/// `dt=2026-11-30-00-00`.
pub fn athena_partition(folder: &str) -> String {
    folder.trim_end_matches('Z').replace('T', "-")
}

/// A text literal in standard SQL, which Athena and the local engine share: quotes doubled, backslashes as they are.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// A quoted identifier in standard SQL.
fn identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

text_enum! {
    /// What one row of the comparison's output is.
    pub enum Finding {
        /// A key the report lists that no row knows (one row per key).
        Unknown = "unknown",
        /// A key a row knows, due or found lost, that the report lacks (one row per key).
        Gone = "gone",
        /// Known keys off the key pattern of a prefix: one row for each of the first five, one for the rest.
        OffPattern = "off_pattern",
        /// Keys both hold, counted per prefix; one found lost before on a row of its own, with its key.
        Matched = "matched",
    }
}

/// One row of the comparison's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// What it is.
    pub finding: Finding,
    /// The managed prefix (none for an unknown key: this product classifies it when it comes home).
    pub prefix: Option<String>,
    /// The key, where the row is one key's.
    pub key: Option<String>,
    /// Keys counted.
    pub keys: i64,
    /// Their bytes.
    pub bytes: i64,
    /// The newest last-modified time among them, as the report has it.
    pub modified: Option<DateTime<Utc>>,
}

/// How a query stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Running {
    /// Queued or running.
    Running,
    /// Finished: its output can be read.
    Succeeded {
        /// The bytes the engine scanned, as it reports them.
        scanned: u64,
    },
    /// Failed or cancelled, with the engine's reason.
    Failed(String),
}

/// A page of the output: its rows, and where the next begins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    /// The rows.
    pub rows: Vec<Row>,
    /// The next page's token, if there is one.
    pub next: Option<String>,
}

/// What an engine failed at.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The engine refused or could not be reached.
    #[error("{engine}: {reason}")]
    Failed {
        /// Which engine.
        engine: &'static str,
        /// What it said.
        reason: String,
    },
    /// A row of its output is not what the comparison writes.
    #[error("{engine} answered a row the comparison does not write: {reason}")]
    Row {
        /// Which engine.
        engine: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// An engine that runs the comparison: it starts a query, says how it stands, and hands its output back a page at
/// a time. A query outlives a sweep pass: the pass that starts it keeps its id, and a later one collects.
pub trait Engine: Send + Sync {
    /// Its name, as the run record and `status` show it.
    fn name(&self) -> &'static str;

    /// How it names the report and the export.
    fn dialect(&self) -> &Dialect;

    /// Makes `datasets` what the text's two relations read, where the engine needs telling (Athena's tables find
    /// them by their partitions, and need nothing).
    fn attach(&self, datasets: &Datasets<'_>) -> impl Future<Output = Result<(), EngineError>> + Send;

    /// Starts `sql`; answers the query's id.
    fn start(&self, sql: &str) -> impl Future<Output = Result<String, EngineError>> + Send;

    /// How query `id` stands.
    fn poll(&self, id: &str) -> impl Future<Output = Result<Running, EngineError>> + Send;

    /// A page of query `id`'s output: the first with no token, then each page's `next`.
    fn page(&self, id: &str, token: Option<&str>) -> impl Future<Output = Result<Page, EngineError>> + Send;
}

/// No engine outside the database: every report is compared in it.
#[derive(Debug, Clone, Copy)]
pub enum NoEngine {}

impl Engine for NoEngine {
    fn name(&self) -> &'static str {
        match *self {}
    }

    fn dialect(&self) -> &Dialect {
        match *self {}
    }

    async fn attach(&self, _: &Datasets<'_>) -> Result<(), EngineError> {
        match *self {}
    }

    async fn start(&self, _: &str) -> Result<String, EngineError> {
        match *self {}
    }

    async fn poll(&self, _: &str) -> Result<Running, EngineError> {
        match *self {}
    }

    async fn page(&self, _: &str, _: Option<&str>) -> Result<Page, EngineError> {
        match *self {}
    }
}

/// The two datasets one comparison reads.
#[derive(Debug, Clone, Copy)]
pub struct Datasets<'a> {
    /// The report.
    pub report: &'a super::read::Report,
    /// The export's folder for this listing, `s3://bucket/prefix/listing=<id>/`.
    pub export: &'a str,
}

/// What the engine counted and listed besides the keys it hands home: what [`compare`] needs of the listing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Collected {
    /// Keys the report lists under the managed prefixes.
    pub keys: i64,
    /// Their bytes.
    pub bytes: i64,
    /// Per prefix, the known keys off the pattern (the first few of them are in `reconcile_keys`).
    pub known_off_pattern: BTreeMap<String, i64>,
    /// Known keys the report lacks whose bytes are due or were found lost.
    pub gone: Vec<String>,
    /// Known keys the report lists that were found lost before (and the sampled keys off the pattern): a finding
    /// about their assets is forgotten, as one whose key is in `reconcile_keys` is.
    pub relisted: Vec<String>,
    /// Keys that came home into `reconcile_keys`.
    pub ingested: u64,
}

/// Takes `rows` home: each key no row knows, and each known key off the pattern the output lists, into listing
/// `listing`'s `reconcile_keys` (classified by `layout`, one `COPY`), the counts and the gone keys into `collected`.
pub async fn collect(
    conn: &mut PgConnection,
    listing: i64,
    layout: &KeyLayout,
    rows: &[Row],
    collected: &mut Collected,
) -> Result<Ingested, ReconcileError> {
    let mut encoder = Encoder::new(listing, layout);
    for row in rows {
        let bad = |what: &str| ReconcileError::Key(format!("the engine's {} row {row:?} has no {what}", row.finding));
        match row.finding {
            Finding::Gone => {
                collected.gone.push(row.key.clone().ok_or_else(|| bad("key"))?);
                continue;
            }
            Finding::OffPattern => {
                let prefix = row.prefix.clone().ok_or_else(|| bad("prefix"))?;
                *collected.known_off_pattern.entry(prefix).or_default() += row.keys;
            }
            Finding::Unknown | Finding::Matched => {}
        }
        collected.keys += row.keys;
        collected.bytes += row.bytes;
        if let (Finding::Matched | Finding::OffPattern, Some(key)) = (row.finding, &row.key) {
            collected.relisted.push(key.clone());
        }
        if let (Finding::Unknown | Finding::OffPattern, Some(key)) = (row.finding, &row.key) {
            let last_modified = row.modified.ok_or_else(|| bad("last-modified time"))?;
            encoder
                .push(&BucketKey { key: key.clone(), byte_size: row.bytes, last_modified })
                .map_err(ReconcileError::Key)?;
        }
    }
    let (data, ingested) = encoder.take();
    if ingested.keys > 0 {
        let mut copy = super::ingest::begin(conn).await?;
        copy.send(data.as_bytes()).await?;
        copy.finish().await?;
    }
    collected.ingested += ingested.keys;
    Ok(ingested)
}

/// Judges listing `listing` as an engine found it, in the application's database: the keys no row knows re-checked
/// against `stored_objects` now, the gone keys' assets read now and confirmed with the bucket, the keys off the
/// pattern counted with the engine's — the findings [`super::compare`] would make had it read every key itself.
pub async fn compare(
    conn: &mut PgConnection,
    judge: &Judge<'_>,
    listing: Listing,
    collected: &Collected,
) -> Result<Findings, ReconcileError> {
    judge.findings(conn, listing, Listed::Engine(collected)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading() -> Reading<'static> {
        let taken_at = DateTime::from_timestamp_millis(1_764_547_200_000).expect("a time");
        Reading { listing: 42, taken_at, folder: "2026-11-30T00-00Z", versions: true }
    }

    #[test]
    fn the_dialects_differ_only_in_naming_the_two_datasets() {
        let athena =
            Dialect::Athena { database: "assets".into(), inventory: "inv\"entory".into(), known: "known".into() };
        let prefixes = ["ws/", "it's/"];
        let local = render(&Dialect::Local, &reading(), &prefixes);
        let remote = render(&athena, &reading(), &prefixes);
        assert!(local.contains("FROM inventory inventory") && local.contains("FULL OUTER JOIN known k"), "{local}");
        assert!(
            remote.contains(r#"FROM (SELECT * FROM "assets"."inv""entory" WHERE dt = '2026-11-30-00-00') inventory"#),
            "{remote}"
        );
        assert!(
            remote.contains(r#"FULL OUTER JOIN (SELECT * FROM "assets"."known" WHERE listing = '42') k"#),
            "{remote}"
        );
        let without = |text: &str, names: &[&str]| names.iter().fold(text.to_owned(), |t, n| t.replace(n, "_"));
        assert_eq!(
            without(&local, &["FROM inventory inventory", "JOIN known k"]),
            without(
                &remote,
                &[
                    r#"FROM (SELECT * FROM "assets"."inv""entory" WHERE dt = '2026-11-30-00-00') inventory"#,
                    r#"JOIN (SELECT * FROM "assets"."known" WHERE listing = '42') k"#
                ]
            ),
            "the rest of the text is the same"
        );
        // The prefixes as standard literals, the report's time in milliseconds, every placeholder filled.
        assert!(local.contains("starts_with(key, 'ws/') OR starts_with(key, 'it''s/')"), "{local}");
        assert!(local.contains("k.due_since_ms < 1764547200000"), "{local}");
        assert!(local.contains("is_latest AND NOT coalesce(is_delete_marker, false)"));
        assert!(!local.contains('{') && !remote.contains('{'), "{local}");
        let current_only = render(&Dialect::Local, &Reading { versions: false, ..reading() }, &prefixes);
        assert!(current_only.contains("WHERE true") && !current_only.contains("is_latest"), "{current_only}");
        assert!(render(&Dialect::Local, &reading(), &[]).contains("AND (false)"), "no prefix: no key");
    }
}
