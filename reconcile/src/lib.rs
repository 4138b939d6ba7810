//! Reconciliation: the bucket's keys against `stored_objects`, both ways (invariant 12 for bytes). Bytes no row
//! knows cost money forever and no sweep finds them, because the sweep starts from rows; rows whose bytes are
//! gone show readers a broken image. A reading of the bucket (an inventory report or a listing) streams into
//! `reconcile_keys` in bulk, and two anti-joins find both.
//!
//! - `platform::keys`: which keys are this product's (managed prefixes, key pattern, the workspace a key names).
//! - [`inventory`]: S3 Inventory's manifest and its data files, CSV, Parquet or ORC; [`ranged`]: an object in S3
//!   read at any offset (Parquet and ORC keep their index at the end); [`read`]: the report or a listing, streamed.
//! - [`ingest`]: `COPY` into `reconcile_keys`.
//! - [`adopt`]: bytes no row knows, under an approved prefix, become `pending` assets the pipeline settles.
//! - [`once`]: a whole reconciliation at once, as an operator (or the demo) runs it.
//! - [`advance`]: a sweep pass's share: the newest inventory report, a file at a time, resumed across passes.
//! - [`reads`]: a sweep pass's share of the bucket's access logs (S3's and CloudFront's), read in delivery order:
//!   each stored object's newest read, which keeps it (`lifecycle::reads`).
//!
//! Nothing here destroys anything. What no row knows is adopted (given a row the consumer settles like any other)
//! on prefixes an operator approved; what is gone is reported, after the bucket itself confirms it (a report can
//! be two days old), and never deleted.

pub mod adopt;
pub mod advance;
pub mod engine;
pub mod ingest;
pub mod inventory;
pub mod once;
pub mod ranged;
pub mod read;
pub mod reads;

use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::PgConnection;
use uuid::Uuid;

use inventory::InventoryError;
use lifecycle::adopted::AdoptedDue;
use platform::audit::{AuditAction, Event};
use platform::keys::KeyLayout;
use platform::objects::{self, Found, StorageError};
use platform::sql::quote_literal;
use platform::step::Step;
use platform::text_enum;
use platform::{AssetId, WorkspaceId};

/// One current object of the bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketKey {
    /// Its key.
    pub key: String,
    /// Its size.
    pub byte_size: i64,
    /// When it was last written.
    pub last_modified: DateTime<Utc>,
}

/// Why a reconciliation stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The inventory report cannot be used.
    #[error(transparent)]
    Inventory(#[from] InventoryError),
    /// An S3 call failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A key no database column can hold.
    #[error("a key in the bucket cannot be compared: {0}")]
    Key(String),
    /// The database failed.
    #[error("the database failed while reconciling: {0}")]
    Database(#[from] sqlx::Error),
    /// The export of the keys the rows know could not be written.
    #[error("the export of the known keys cannot be written: {0}")]
    Export(String),
    /// The engine comparing outside the database failed.
    #[error(transparent)]
    Engine(#[from] engine::EngineError),
}

impl From<platform::aws::AwsFailure> for ReconcileError {
    fn from(failure: platform::aws::AwsFailure) -> Self {
        ReconcileError::Storage(failure.into())
    }
}

text_enum! {
    /// How a listing read the bucket: the column `reconcile_listings.source`.
    pub enum ListingSource {
        /// An S3 Inventory report.
        Inventory = "inventory",
        /// `ListObjectsV2` over the managed prefixes.
        List = "list",
    }
}

/// One reading of the bucket, being ingested or compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listing {
    /// Its row in `reconcile_listings`.
    pub id: i64,
    /// What the bucket held as of this time.
    pub taken_at: DateTime<Utc>,
}

/// Starts a listing of `files_total` files (0 for a listing made here).
pub async fn open(
    conn: &mut PgConnection,
    source: ListingSource,
    location: &str,
    taken_at: DateTime<Utc>,
    files_total: usize,
) -> Result<Listing, sqlx::Error> {
    let id = sqlx::query_scalar!(
        "INSERT INTO reconcile_listings (source, location, taken_at, files_total) VALUES ($1, $2, $3, $4)
         RETURNING id",
        source as ListingSource,
        location,
        taken_at,
        i32::try_from(files_total).unwrap_or(i32::MAX),
    )
    .fetch_one(conn)
    .await?;
    Ok(Listing { id, taken_at })
}

/// Bytes in the bucket no row knows, of one prefix and workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unknown {
    /// The managed prefix.
    pub prefix: String,
    /// The workspace the keys name.
    pub workspace_id: Uuid,
    /// How many keys.
    pub keys: i64,
    /// Their bytes.
    pub bytes: i64,
    /// Of them, written within the grace period: an upload whose row may not have committed yet.
    pub young: i64,
    /// The first few keys, in key order.
    #[serde(default)]
    pub sample: Vec<String>,
}

/// Keys in a managed prefix that break the key pattern: another writer shares the prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffPattern {
    /// The managed prefix.
    pub prefix: String,
    /// How many keys.
    pub keys: i64,
    /// Of them, keys a `stored_objects` row names: the application's own writes the pattern does not describe.
    pub known: i64,
    /// The first few keys, in key order.
    pub sample: Vec<String>,
}

/// An asset whose bytes the listing does not hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Missing {
    /// The asset.
    pub asset_id: Uuid,
    /// Its workspace.
    pub workspace_id: Uuid,
    /// The key its bytes should be at.
    pub storage_key: String,
    /// Its state.
    pub state: String,
    /// Its size.
    pub byte_size: i64,
}

/// An asset whose bytes the bucket itself confirms are gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lost {
    /// What the listing showed.
    #[serde(flatten)]
    pub asset: Missing,
    /// A kept version hidden by a delete marker, which `asset-sweeper undelete`'s restore could bring back.
    pub restorable_version: Option<String>,
}

/// What one comparison found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Findings {
    /// Keys the listing holds inside the managed prefixes, and their bytes.
    pub keys: i64,
    /// Their bytes.
    pub bytes: i64,
    /// Bytes no row knows, per prefix and workspace.
    #[serde(deserialize_with = "platform::recorded::readable")]
    pub unknown: Vec<Unknown>,
    /// Managed prefixes another writer shares.
    #[serde(deserialize_with = "platform::recorded::readable")]
    pub off_pattern: Vec<OffPattern>,
    /// Assets the listing lacks, confirmed gone.
    #[serde(deserialize_with = "platform::recorded::readable")]
    pub lost: Vec<Lost>,
    /// Assets the listing lacks whose bytes the bucket does hold (written or restored since it was taken).
    pub present_after_all: u64,
    /// Their ids: a finding about them is forgotten.
    #[serde(skip)]
    pub present: Vec<Uuid>,
    /// Assets found lost before whose keys an engine's listing holds (one whose keys are all in `reconcile_keys`
    /// says so there): their findings are forgotten too.
    #[serde(skip)]
    pub listed_again: Vec<Uuid>,
    /// Assets the listing lacks that were not confirmed (more than one run confirms).
    pub unconfirmed: u64,
    /// Keys adopted, per prefix and workspace.
    #[serde(deserialize_with = "platform::recorded::readable")]
    pub adopted: Vec<adopt::Adopted>,
    /// Prefixes holding keys no row knows (older than the grace period) that nothing is adopted from until an
    /// operator approves them.
    #[serde(deserialize_with = "platform::recorded::readable")]
    pub awaiting_approval: Vec<String>,
    /// Approved prefixes whose adoptable keys jumped beyond their approval and the previous report: withdrawn.
    #[serde(skip_serializing_if = "Vec::is_empty", deserialize_with = "platform::recorded::readable")]
    pub withdrawn: Vec<adopt::Withdrawn>,
    /// What the application's records name of the keys no row knows, per prefix (by key source, by key, relative to
    /// a root, nothing): what an approval is read and refused on.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "platform::recorded::readable_or_none")]
    pub naming: Option<schema::naming::Naming>,
}

impl Findings {
    /// Keys no row knows, and their bytes.
    pub fn unknown_totals(&self) -> (i64, i64) {
        self.unknown.iter().fold((0, 0), |(k, b), u| (k + u.keys, b + u.bytes))
    }

    /// Keys adopted, and their bytes.
    pub fn adopted_totals(&self) -> (i64, i64) {
        self.adopted.iter().fold((0, 0), |(k, b), a| (k + a.keys, b + a.bytes))
    }

    /// The keys no row knows under `prefix`, every workspace's: what an approval of the prefix is granted on.
    pub fn under(&self, prefix: &str) -> UnderPrefix {
        let here: Vec<&Unknown> = self.unknown.iter().filter(|u| u.prefix == prefix).collect();
        let mut sample: Vec<String> = here.iter().flat_map(|u| u.sample.iter().cloned()).collect();
        sample.sort();
        sample.truncate(10);
        UnderPrefix {
            adoptable: here.iter().map(|u| u.keys - u.young).sum(),
            young: here.iter().map(|u| u.young).sum(),
            bytes: here.iter().map(|u| u.bytes).sum(),
            sample,
        }
    }
}

/// The keys no row knows under one prefix, as a comparison recorded them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnderPrefix {
    /// Older than the grace period: what an approval lets be adopted.
    pub adoptable: i64,
    /// Younger.
    pub young: i64,
    /// The bytes of all of them.
    pub bytes: i64,
    /// The first ten keys, in key order.
    pub sample: Vec<String>,
}

/// The newest compared listing, its findings read back through [`Findings`] (a row this build cannot read counts
/// as one that found nothing).
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Its row in `reconcile_listings`.
    pub id: i64,
    /// How it read the bucket.
    pub source: ListingSource,
    /// When the bucket was as it read it, as the database prints it.
    pub taken_at: String,
    /// When it was compared, as the database prints it.
    pub compared_at: String,
    /// What it found.
    pub findings: Findings,
}

/// The newest compared listing, if any was compared.
pub async fn newest_recorded(conn: &mut PgConnection) -> Result<Option<Recorded>, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT id, source AS "source: ListingSource", taken_at::text AS "taken_at!",
                  compared_at::text AS "compared_at!", findings
             FROM reconcile_listings WHERE compared_at IS NOT NULL
            ORDER BY compared_at DESC, id DESC LIMIT 1"#
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| Recorded {
        id: r.id,
        source: r.source,
        taken_at: r.taken_at,
        compared_at: r.compared_at,
        findings: r.findings.as_ref().and_then(|f| Findings::deserialize(f).ok()).unwrap_or_default(),
    }))
}

/// Keys listed per group in the findings.
const SAMPLE: i32 = 5;

/// Compares listing `listing` with `stored_objects`, both ways, and confirms what seems gone with the bucket
/// (`bucket`, at most `confirm` assets, 16 at once). Reads only.
pub async fn compare(
    conn: &mut PgConnection,
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    layout: &KeyLayout,
    listing: Listing,
    grace: Duration,
    confirm: usize,
) -> Result<Findings, ReconcileError> {
    let judge = Judge { s3, bucket, layout, grace, confirm };
    judge.findings(conn, listing, Listed::Whole).await
}

/// What a comparison is judged with: the bucket that confirms what seems gone, which keys are ours, and how far.
#[derive(Debug, Clone, Copy)]
pub struct Judge<'a> {
    /// The client of the asset bucket.
    pub s3: &'a aws_sdk_s3::Client,
    /// The asset bucket.
    pub bucket: &'a str,
    /// Which keys are ours.
    pub layout: &'a KeyLayout,
    /// Keys written within this are young: counted, never adopted.
    pub grace: Duration,
    /// The most missing assets confirmed with the bucket (16 at once).
    pub confirm: usize,
}

/// How much of a listing `reconcile_keys` holds.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Listed<'a> {
    /// Every key it listed under the managed prefixes: the comparison in the application's database.
    Whole,
    /// Only the keys no row knew and the first few known keys off the pattern; an engine counted the rest and found
    /// the gone keys ([`engine`]).
    Engine(&'a engine::Collected),
}

impl Judge<'_> {
    /// The findings of listing `listing`, read as `listed` says it is held. Reads only.
    pub(crate) async fn findings(
        &self,
        conn: &mut PgConnection,
        listing: Listing,
        listed: Listed<'_>,
    ) -> Result<Findings, ReconcileError> {
        let Judge { s3, bucket, layout, grace, confirm } = *self;
        // Just written in bulk: without statistics the planner would take a nested loop over a million keys. The
        // hash tables of the anti-joins hold every key, in parallel batches that fit at a million keys; a larger
        // bucket would spill them to disk with the default work_mem. Set for this transaction only.
        sqlx::query!("SELECT asset_sweeper_analyze_reconcile_keys()").execute(&mut *conn).await?;
        sqlx::query!("SELECT set_config('work_mem', '256MB', true)").fetch_one(&mut *conn).await?;
        let (keys, bytes) = match listed {
            Listed::Whole => {
                let totals = sqlx::query!(
                    r#"SELECT count(*) AS "keys!", coalesce(sum(byte_size), 0)::bigint AS "bytes!"
                         FROM reconcile_keys WHERE listing_id = $1"#,
                    listing.id
                )
                .fetch_one(&mut *conn)
                .await?;
                (totals.keys, totals.bytes)
            }
            Listed::Engine(collected) => (collected.keys, collected.bytes),
        };
        // Samples in key order as S3 lists keys (UTF-8 bytes), whatever the database's collation: the order an
        // engine outside it sorts in too.
        let unknown = sqlx::query_as!(
            Unknown,
            r#"SELECT k.prefix AS "prefix!", k.workspace_id AS "workspace_id!", count(*) AS "keys!",
                      sum(k.byte_size)::bigint AS "bytes!",
                      count(*) FILTER (WHERE k.last_modified > now() - $2 * interval '1 second') AS "young!",
                      (array_agg(k.storage_key ORDER BY k.storage_key COLLATE "C"))[1:$3] AS "sample!"
                 FROM reconcile_keys k
                WHERE k.listing_id = $1 AND k.workspace_id IS NOT NULL
                  AND NOT EXISTS (SELECT 1 FROM stored_objects o WHERE o.storage_key = k.storage_key)
                GROUP BY k.prefix, k.workspace_id
                ORDER BY k.prefix, k.workspace_id"#,
            listing.id,
            grace.as_secs_f64(),
            SAMPLE,
        )
        .fetch_all(&mut *conn)
        .await?;
        let mut off_pattern = sqlx::query_as!(
            OffPattern,
            r#"SELECT k.prefix AS "prefix!", count(*) AS "keys!", count(o.storage_key) AS "known!",
                      (array_agg(k.storage_key ORDER BY k.storage_key COLLATE "C"))[1:$2] AS "sample!"
                 FROM reconcile_keys k
                 LEFT JOIN stored_objects o ON o.storage_key = k.storage_key
                WHERE k.listing_id = $1 AND k.workspace_id IS NULL
                GROUP BY k.prefix
                ORDER BY k.prefix"#,
            listing.id,
            SAMPLE,
        )
        .fetch_all(&mut *conn)
        .await?;
        if let Listed::Engine(collected) = listed {
            // Home are the unknown keys off the pattern and the first few known ones; the engine counted the rest.
            for o in &mut off_pattern {
                let known = collected.known_off_pattern.get(&o.prefix).copied().unwrap_or(0);
                o.keys = o.keys - o.known + known;
                o.known = known;
            }
        }
        let prefixes: Vec<String> = layout.prefixes().into_iter().map(str::to_owned).collect();
        // Bytes are due in the bucket for an asset in use or restorable; an upload still pending may not have sent
        // them yet, and one never sent is the abandoned upload the lifecycle deletes. An asset row written after the
        // listing was taken may have bytes the listing could not show (its stored object, which the row's foreign
        // key makes older, is not read: a third hash join over every row, for nothing the row's own time does not
        // say).
        let missing = match listed {
            Listed::Whole => {
                sqlx::query_as!(
                    Missing,
                    r#"SELECT a.id AS asset_id, a.workspace_id, a.storage_key, a.state, a.byte_size
                         FROM assets a
                        WHERE a.state IN ('attached', 'released', 'retired') AND a.created_at < $2
                          AND EXISTS (SELECT 1 FROM unnest($3::text[]) p WHERE starts_with(a.storage_key, p))
                          AND NOT EXISTS (SELECT 1 FROM reconcile_keys k
                                           WHERE k.listing_id = $1 AND k.storage_key = a.storage_key)
                        ORDER BY (SELECT l.confirmed_at FROM lost_assets l WHERE l.asset_id = a.id) NULLS FIRST,
                                 a.storage_key, a.id"#,
                    listing.id,
                    listing.taken_at,
                    &prefixes,
                )
                .fetch_all(&mut *conn)
                .await?
            }
            // The engine found the keys from the export; their assets are read as they are now.
            Listed::Engine(collected) => {
                sqlx::query_as!(
                    Missing,
                    r#"SELECT a.id AS asset_id, a.workspace_id, a.storage_key, a.state, a.byte_size
                         FROM assets a
                        WHERE a.state IN ('attached', 'released', 'retired') AND a.created_at < $2
                          AND EXISTS (SELECT 1 FROM unnest($3::text[]) p WHERE starts_with(a.storage_key, p))
                          AND a.storage_key = ANY ($1)
                        ORDER BY (SELECT l.confirmed_at FROM lost_assets l WHERE l.asset_id = a.id) NULLS FIRST,
                                 a.storage_key, a.id"#,
                    &collected.gone,
                    listing.taken_at,
                    &prefixes,
                )
                .fetch_all(&mut *conn)
                .await?
            }
        };
        // Assets found lost before whose keys the engine's listing holds: their findings are forgotten, as a key in
        // `reconcile_keys` forgets them when every key is home.
        let listed_again = match listed {
            Listed::Whole => Vec::new(),
            Listed::Engine(collected) => {
                sqlx::query_scalar!(
                    "SELECT asset_id FROM lost_assets WHERE storage_key = ANY ($1) ORDER BY asset_id",
                    &collected.relisted
                )
                .fetch_all(&mut *conn)
                .await?
            }
        };
        // Those never confirmed come first, then those confirmed longest ago: a cap smaller than what is missing
        // reaches every asset over a few runs. A lookup that fails leaves its asset unconfirmed, not the run failed.
        let mut unconfirmed = missing.len().saturating_sub(confirm) as u64;
        let looked: Vec<(Missing, Result<Found, StorageError>)> =
            futures::stream::iter(missing.into_iter().take(confirm))
                .map(|asset| async move {
                    let found = objects::inspect(s3, bucket, &asset.storage_key).await;
                    (asset, found)
                })
                .buffered(16)
                .collect()
                .await;
        // A prefix another writer shares holds nothing of ours: its keys are reported as refused, not as unknown.
        let unknown: Vec<Unknown> =
            unknown.into_iter().filter(|u| !off_pattern.iter().any(|o| o.prefix == u.prefix)).collect();
        // What records name of them, before any is adopted: read from the key sources and a sample of every text
        // and JSON column (`schema::naming`).
        let naming = if unknown.is_empty() {
            None
        } else {
            let refused: Vec<String> = off_pattern.iter().map(|o| quote_literal(&o.prefix)).collect();
            let keys = format!(
                "SELECT k.storage_key, k.prefix FROM reconcile_keys k
                  WHERE k.listing_id = {} AND k.workspace_id IS NOT NULL AND k.prefix <> ALL (ARRAY[{}]::text[])
                    AND NOT EXISTS (SELECT 1 FROM stored_objects o WHERE o.storage_key = k.storage_key)",
                listing.id,
                refused.join(", ")
            );
            Some(schema::naming::probe(&mut *conn, layout, &keys).await?)
        };
        let mut findings = Findings { keys, bytes, unknown, off_pattern, naming, listed_again, ..Findings::default() };
        for (asset, found) in looked {
            match found {
                Ok(Found::Present) => findings.present.push(asset.asset_id),
                Ok(Found::Hidden { version_id }) => {
                    findings.lost.push(Lost { asset, restorable_version: Some(version_id) });
                }
                Ok(Found::Lost) => findings.lost.push(Lost { asset, restorable_version: None }),
                Err(e) => {
                    tracing::warn!(asset_id = %asset.asset_id, error = %e, "could not confirm missing bytes");
                    unconfirmed += 1;
                }
            }
        }
        findings.present_after_all = findings.present.len() as u64;
        findings.unconfirmed = unconfirmed;
        Ok(findings)
    }
}

/// Records what `listing` found, in the caller's transaction: the findings on the listing's row; each asset newly
/// found lost in `lost_assets` with its `lost` event; and forgets earlier findings whose bytes are back (in the
/// listing, or confirmed present now) or whose asset is gone. Returns how many assets were newly found lost. The listing's keys are removed.
pub async fn record(conn: &mut PgConnection, listing: Listing, findings: &Findings) -> Result<u64, sqlx::Error> {
    sqlx::query!(
        "DELETE FROM lost_assets l
          WHERE NOT EXISTS (SELECT 1 FROM assets a WHERE a.id = l.asset_id AND a.storage_key = l.storage_key)
             OR EXISTS (SELECT 1 FROM reconcile_keys k WHERE k.listing_id = $1 AND k.storage_key = l.storage_key)
             OR l.asset_id = ANY ($2) OR l.asset_id = ANY ($3)",
        listing.id,
        &findings.present,
        &findings.listed_again,
    )
    .execute(&mut *conn)
    .await?;
    let mut newly = Vec::new();
    for lost in &findings.lost {
        let inserted = sqlx::query_scalar!(
            "INSERT INTO lost_assets (asset_id, storage_key, workspace_id, restorable_version, listing_id)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (asset_id) DO UPDATE SET confirmed_at = now(), listing_id = EXCLUDED.listing_id,
                                                  restorable_version = EXCLUDED.restorable_version
             RETURNING (xmax = 0) AS \"inserted!\"",
            lost.asset.asset_id,
            lost.asset.storage_key,
            lost.asset.workspace_id,
            lost.restorable_version,
            listing.id,
        )
        .fetch_one(&mut *conn)
        .await?;
        if inserted {
            newly.push(lost);
        }
    }
    let evidence: Vec<_> = newly
        .iter()
        .map(|lost| {
            json!({
                "found_by": "reconciliation",
                "listing": listing.id,
                "listing_taken_at": listing.taken_at,
                "state": lost.asset.state,
                "restorable_version": lost.restorable_version,
            })
        })
        .collect();
    let events: Vec<Event<'_>> = newly
        .iter()
        .zip(evidence)
        .map(|(lost, evidence)| {
            Event::new(AssetId(lost.asset.asset_id), WorkspaceId(lost.asset.workspace_id), AuditAction::Lost, evidence)
                .storage_key(&lost.asset.storage_key)
        })
        .collect();
    platform::audit::write_all(&mut *conn, &events).await?;
    sqlx::query!(
        "UPDATE reconcile_listings SET compared_at = now(), findings = $2 WHERE id = $1",
        listing.id,
        serde_json::to_value(findings).unwrap_or_default(),
    )
    .execute(&mut *conn)
    .await?;
    forget_keys(conn, listing.id).await?;
    Ok(newly.len() as u64)
}

/// Removes the keys of listing `listing`, once compared or given up.
pub(crate) async fn forget_keys(conn: impl sqlx::PgExecutor<'_>, listing: i64) -> Result<(), sqlx::Error> {
    sqlx::query!("DELETE FROM reconcile_keys WHERE listing_id = $1", listing).execute(conn).await?;
    Ok(())
}

/// The newest compared listing, as `status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LastListing {
    /// Its row in `reconcile_listings`.
    pub id: i64,
    /// How it read the bucket.
    pub source: ListingSource,
    /// When the bucket was as it read it.
    pub taken_at: String,
    /// When it was compared.
    pub compared_at: String,
    /// Keys no row knows, and their bytes.
    pub unknown_keys: i64,
    /// Their bytes.
    pub unknown_bytes: i64,
    /// Managed prefixes it found shared with another writer.
    pub shared_prefixes: Vec<String>,
    /// Managed prefixes whose bytes no row knows wait for an operator's approval.
    pub awaiting_approval: Vec<String>,
    /// The engine outside the database it was compared on, and what that scanned and cost; none: in the database.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<(String, ledger::scan::Scan)>,
}

/// A report an engine outside the database is comparing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparing {
    /// Its listing.
    pub listing: i64,
    /// The report's manifest.
    pub location: String,
    /// The engine.
    pub engine: String,
    /// Files of the export written.
    pub export_files: i32,
    /// Rows of the export written.
    pub export_rows: i64,
    /// Whether the export is whole.
    pub exported: bool,
    /// The query, once started, and since when, as the database prints it.
    pub query: Option<(String, String)>,
    /// The most it scans, and what that costs: estimated as the report was chosen, exact once the export is whole.
    pub at_most: ledger::scan::Scan,
}

/// Where reconciliation stands: its newest compared listing and the assets whose bytes are gone.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Standing {
    /// The newest compared listing, if any.
    pub last: Option<LastListing>,
    /// A report an engine outside the database is comparing now.
    pub comparing: Option<Comparing>,
    /// Assets still found lost (their row unchanged since).
    pub lost: i64,
    /// The first few of them: (asset, key).
    pub lost_sample: Vec<(Uuid, String)>,
    /// Adopted assets not yet settled away.
    pub adopted: i64,
    /// Of them, those a record names by key: a record without an asset row, the integration gap to fix.
    pub named_without_row: i64,
    /// The first few of those: (key, `schema.table.column` naming it).
    pub named_sample: Vec<(String, String)>,
    /// Of those, named only relative to a root: an undeclared key source.
    pub relative_only: i64,
    /// The first few of those: (key, `schema.table.column`).
    pub relative_sample: Vec<(String, String)>,
    /// Adopted assets retired or removed that a record names now: for a person to restore or undelete.
    pub removed_named: i64,
    /// The first few of those: (key, state or `removed`, `schema.table.column`).
    pub removed_sample: Vec<(String, String, String)>,
    /// Assets a person restored or undeleted, which discovery passes over.
    pub kept_by_person: i64,
    /// Prefixes whose approval a jump in their adoptable keys withdrew, not approved since: what the withdrawal
    /// recorded.
    pub withdrawn: Vec<adopt::WithdrawnRecord>,
    /// What records named of the keys no row knew, as the newest compared listing found it (read with it; shown on
    /// its own).
    #[serde(skip)]
    pub naming: Option<schema::naming::Naming>,
}

/// What records named of the keys no row knew, as the newest compared listing found it (`schema::naming`), if it
/// held any.
pub async fn newest_naming(conn: &mut PgConnection) -> Result<Option<schema::naming::Naming>, sqlx::Error> {
    Ok(newest_recorded(conn).await?.and_then(|r| r.findings.naming))
}

/// Where reconciliation stands now.
pub async fn standing(conn: &mut PgConnection) -> Result<Standing, sqlx::Error> {
    let approved: Vec<String> =
        sqlx::query_scalar!("SELECT prefix FROM reconcile_prefixes WHERE approved_until > now()")
            .fetch_all(&mut *conn)
            .await?;
    let recorded = newest_recorded(&mut *conn).await?;
    let naming = recorded.as_ref().and_then(|r| r.findings.naming.clone());
    let scanned = match &recorded {
        Some(r) => {
            sqlx::query!(
                r#"SELECT engine AS "engine!", coalesce(scanned_bytes, 0) AS "scanned!" FROM reconcile_listings
                    WHERE id = $1 AND engine IS NOT NULL"#,
                r.id
            )
            .fetch_optional(&mut *conn)
            .await?
        }
        None => None,
    };
    let comparing = sqlx::query!(
        r#"SELECT id, location, engine AS "engine!", export_files, export_rows, exported_at IS NOT NULL AS "exported!",
                  query_id, query_started_at::text, coalesce(scan_at_most, 0) AS "at_most!"
             FROM reconcile_listings
            WHERE engine IS NOT NULL AND compared_at IS NULL AND abandoned_at IS NULL
            ORDER BY id DESC LIMIT 1"#
    )
    .fetch_optional(&mut *conn)
    .await?
    .map(|r| Comparing {
        listing: r.id,
        location: r.location,
        engine: r.engine,
        export_files: r.export_files,
        export_rows: r.export_rows,
        exported: r.exported,
        query: r.query_id.zip(r.query_started_at),
        at_most: ledger::scan::Scan::athena(u64::try_from(r.at_most).unwrap_or(0)),
    });
    let last = recorded.map(|r| {
        let (unknown_keys, unknown_bytes) = r.findings.unknown_totals();
        LastListing {
            id: r.id,
            source: r.source,
            taken_at: r.taken_at,
            compared_at: r.compared_at,
            unknown_keys,
            unknown_bytes,
            shared_prefixes: r.findings.off_pattern.iter().map(|o| o.prefix.clone()).collect(),
            awaiting_approval: r.findings.awaiting_approval.into_iter().filter(|p| !approved.contains(p)).collect(),
            engine: scanned.map(|s| (s.engine, ledger::scan::Scan::athena(u64::try_from(s.scanned).unwrap_or(0)))),
        }
    });
    let lost = sqlx::query!(
        r#"SELECT l.asset_id, l.storage_key, count(*) OVER () AS "total!"
             FROM lost_assets l JOIN assets a ON a.id = l.asset_id AND a.storage_key = l.storage_key
            ORDER BY l.found_at, l.asset_id LIMIT 5"#
    )
    .fetch_all(&mut *conn)
    .await?;
    let adopted = <AdoptedDue as Step>::standing(&mut *conn).await?;
    let withdrawn = sqlx::query_scalar!(
        r#"SELECT withdrawn AS "withdrawn!" FROM reconcile_prefixes
            WHERE withdrawn IS NOT NULL AND approved_at IS NULL ORDER BY prefix"#
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(Standing {
        last,
        comparing,
        lost: lost.first().map_or(0, |l| l.total),
        lost_sample: lost.into_iter().map(|l| (l.asset_id, l.storage_key)).collect(),
        adopted: adopted.adopted,
        named_without_row: adopted.named_without_row,
        named_sample: adopted.named_sample,
        relative_only: adopted.relative_only,
        relative_sample: adopted.relative_sample,
        removed_named: adopted.removed_named,
        removed_sample: adopted.removed_sample,
        kept_by_person: adopted.kept_by_person,
        // Read as the withdrawal wrote it; a record this build cannot read is passed over.
        withdrawn: withdrawn.iter().filter_map(|w| adopt::WithdrawnRecord::deserialize(w).ok()).collect(),
        naming,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn findings_read_back_entry_by_entry_and_an_entry_this_build_cannot_read_counts_for_nothing() {
        let ws = Uuid::from_u128(9);
        let read = Findings::deserialize(json!({
            "unknown": [
                {"prefix": "p/", "workspace_id": ws, "keys": 5, "bytes": 50, "young": 1, "sample": ["p/b", "p/a"]},
                {"prefix": "p/", "workspace_id": ws, "keys": 500, "bytes": 5000},
            ],
            "awaiting_approval": ["p/", 7],
            "naming": "not a naming",
        }))
        .expect("findings");
        let sample = vec!["p/a".to_owned(), "p/b".to_owned()];
        assert_eq!(read.under("p/"), UnderPrefix { adoptable: 4, young: 1, bytes: 50, sample });
        assert_eq!((read.awaiting_approval, read.naming), (vec!["p/".to_owned()], None));
    }
}
