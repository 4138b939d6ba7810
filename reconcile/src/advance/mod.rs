//! Reconciliation's share of a sweep pass: the newest S3 Inventory report at `RECONCILE_INVENTORY`, read a data
//! file at a time — each file one transaction, its progress saved with it — until the share of the pass runs out,
//! resumed by the next pass, and compared once every file is in. A bucket of a billion keys reconciles without
//! anyone at a terminal.

use std::time::{Duration, Instant};

use serde::Serialize;
use sqlx::PgPool;

pub mod on_engine;

use super::adopt::Terms;
use super::engine::{Engine, NoEngine};
use super::read::Report;
use super::{Listed, Listing, ListingSource, ReconcileError};
use platform::approval::Tolerance;
use platform::aws::AwsFailure;
use platform::keys::KeyLayout;
use platform::location::InventoryLocation;
use platform::step::{Paced, Share, Step};
use platform::text_enum;

use on_engine::{OnEngine, Outside};

text_enum! {
    /// Why reconciliation stopped in a pass.
    pub enum Stop {
        /// Every file of the report is in, and it was compared and recorded.
        Compared = "compared",
        /// Its share of the pass ran out between two files; the next pass goes on from the next file.
        TimeShare = "time_share",
        /// The newest report at the location was compared already, or there is none yet.
        NoNewReport = "no_new_report",
        /// The engine outside the database is still comparing; a later pass collects what it found.
        EngineRunning = "engine_running",
    }
}

/// What reconciliation did in one pass: the sweep's run record keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Progress {
    /// The report being read (its manifest's address), if any.
    pub manifest: Option<String>,
    /// Its listing.
    pub listing: Option<i64>,
    /// Files read in this pass.
    pub files_read: u32,
    /// Files of the report read so far, in all passes.
    pub files_done: u32,
    /// Files of the report.
    pub files_total: u32,
    /// Keys inside the managed prefixes read in this pass.
    pub keys_read: u64,
    /// Why it stopped.
    pub stopped: Stop,
    /// When compared in this pass: keys no row knows, their bytes, the shared prefixes, assets lost (all, and
    /// newly), and those not confirmed.
    pub compared: Option<Compared>,
    /// An unfinished report given up in this pass because a newer one superseded it (its manifest's address).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub abandoned: Option<String>,
    /// When an engine outside the database compares the report: how far it got, and what it scans and costs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<OnEngine>,
}

/// A comparison's figures, as the run record keeps them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Compared {
    /// Keys no row knows.
    pub unknown_keys: i64,
    /// Their bytes.
    pub unknown_bytes: i64,
    /// Managed prefixes another writer shares.
    pub shared_prefixes: Vec<String>,
    /// Assets whose bytes are gone.
    pub lost: u64,
    /// Of them, found so in this pass for the first time.
    pub newly_lost: u64,
    /// Assets the report lacks that were not confirmed with the bucket this time.
    pub unconfirmed: u64,
    /// Keys adopted.
    pub adopted_keys: i64,
    /// Their bytes.
    pub adopted_bytes: i64,
    /// Prefixes whose keys no row knows wait for an operator's approval.
    pub awaiting_approval: Vec<String>,
    /// Approved prefixes whose adoptable keys jumped: their approvals are withdrawn.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub withdrawn: Vec<super::adopt::Withdrawn>,
}

/// Advances reconciliation within `pace`: resumes the unfinished report, or starts on the newest one at the
/// inventory location if it is new; reads files while time is left; compares when all are in. An unfinished report
/// a newer one has superseded is given up: whatever kept it from finishing (its files expired under the inventory
/// bucket's lifecycle, a row it cannot read), the newer report says the same and more.
pub(crate) async fn advance<E: Engine>(
    pool: &PgPool,
    s3: &aws_sdk_s3::Client,
    pace: Paced<'_, Reconciliation<'_, E>>,
) -> Result<Progress, ReconcileError> {
    let newest = newest_manifest(s3, pace.step.inventory).await?;
    let mut unfinished = sqlx::query!(
        r#"SELECT id, location, taken_at, files_done, engine,
                  keys_read > 0 AND NOT EXISTS (SELECT 1 FROM reconcile_keys k WHERE k.listing_id = l.id) AS "emptied!"
             FROM reconcile_listings l
            WHERE source = 'inventory' AND compared_at IS NULL AND abandoned_at IS NULL
            ORDER BY id DESC LIMIT 1"#
    )
    .fetch_optional(pool)
    .await?;
    let mut abandoned = None;
    let why = match (&unfinished, &newest) {
        // One on an engine is finished first: its export outlasts a day's report at the largest sizes, and a failing
        // query gives it up after a few attempts (`on_engine`).
        (Some(row), Some(newest)) if *newest != row.location && row.engine.is_none() => {
            Some(format!("superseded by {newest} before it was finished"))
        }
        // Begun on an engine no longer configured: the next report is compared where the settings now say.
        (Some(row), _) if row.engine.is_some() && pace.step.engine.is_none() => Some(format!(
            "begun on {}, which is no longer configured (RECONCILE_ENGINE)",
            row.engine.as_deref().unwrap_or_default()
        )),
        _ => None,
    };
    if let (Some(row), Some(why)) = (&unfinished, why) {
        sqlx::query!(
            "UPDATE reconcile_listings SET abandoned_at = now(), abandoned_why = $2 WHERE id = $1",
            row.id,
            why,
        )
        .execute(pool)
        .await?;
        super::forget_keys(pool, row.id).await?;
        abandoned = Some(row.location.clone());
        unfinished = None;
    }
    let on_engine = unfinished.as_ref().is_some_and(|row| row.engine.is_some());
    let (report, listing, mut files_done, on_engine) = match unfinished {
        Some(row) => {
            let report = Report::open(s3, &row.location, pace.step.bucket).await?;
            let mut done = row.files_done;
            // reconcile_keys is unlogged: a crash of the database empties it, and the report is read again.
            if row.emptied {
                sqlx::query!("UPDATE reconcile_listings SET files_done = 0, keys_read = 0 WHERE id = $1", row.id)
                    .execute(pool)
                    .await?;
                done = 0;
            }
            (report, Listing { id: row.id, taken_at: row.taken_at }, done, on_engine)
        }
        None => {
            let Some(manifest) = newest else {
                return Ok(nothing_new(None, abandoned));
            };
            let seen = sqlx::query_scalar!(
                r#"SELECT EXISTS (SELECT 1 FROM reconcile_listings WHERE location = $1) AS "seen!""#,
                manifest
            )
            .fetch_one(pool)
            .await?;
            if seen {
                return Ok(nothing_new(Some(manifest), abandoned));
            }
            let report = Report::open(s3, &manifest, pace.step.bucket).await?;
            let files = report.manifest.files.len();
            let mut tx = pool.begin().await?;
            let listing = super::open(&mut tx, ListingSource::Inventory, &manifest, report.taken_at(), files).await?;
            let outside = pace.step.engine.as_ref().filter(|outside| outside.takes(&report));
            if let Some(outside) = outside {
                on_engine::choose(&mut tx, listing.id, &report, outside.engine.name()).await?;
            }
            tx.commit().await?;
            (report, listing, 0, outside.is_some())
        }
    };
    let files_total = i32::try_from(report.manifest.files.len()).unwrap_or(i32::MAX);
    let mut progress = Progress {
        manifest: Some(report.location.clone()),
        listing: Some(listing.id),
        files_read: 0,
        files_done: 0,
        files_total: u32::try_from(files_total).unwrap_or(0),
        keys_read: 0,
        stopped: Stop::TimeShare,
        compared: None,
        abandoned,
        engine: None,
    };
    if on_engine && let Some(outside) = &pace.step.engine {
        return on_engine::advance(pool, pace, outside, &report, listing, progress).await;
    }
    while files_done < files_total {
        if Instant::now() >= pace.share.until {
            progress.files_done = u32::try_from(files_done).unwrap_or(0);
            return Ok(progress);
        }
        let mut tx = pool.begin().await?;
        allow_until(&mut tx, pace.share.deadline).await?;
        let file = usize::try_from(files_done).unwrap_or(usize::MAX);
        let ingested = report.ingest_file(&mut tx, listing.id, pace.step.layout, file).await?;
        sqlx::query!(
            "UPDATE reconcile_listings SET files_done = files_done + 1, keys_read = keys_read + $2 WHERE id = $1",
            listing.id,
            i64::try_from(ingested.keys).unwrap_or(i64::MAX),
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        fail::fail_point!("reconcile::file");
        files_done += 1;
        progress.files_read += 1;
        progress.keys_read += ingested.keys;
    }
    progress.files_done = u32::try_from(files_done).unwrap_or(0);
    // Every file is in; the comparison takes the next pass's share if this one is spent.
    if Instant::now() >= pace.share.until {
        return Ok(progress);
    }
    let mut tx = pool.begin().await?;
    allow_until(&mut tx, pace.share.deadline).await?;
    let compared = judge_and_record(&mut tx, pace, listing, Listed::Whole).await?;
    tx.commit().await?;
    progress.stopped = Stop::Compared;
    progress.compared = Some(compared);
    Ok(progress)
}

/// Judges listing `listing` (held in `reconcile_keys` as `listed` says), adopts what approved prefixes hold, and
/// records the findings, in the caller's transaction.
pub(crate) async fn judge_and_record<E: Engine>(
    tx: &mut sqlx::PgConnection,
    pace: Paced<'_, Reconciliation<'_, E>>,
    listing: Listing,
    listed: Listed<'_>,
) -> Result<Compared, ReconcileError> {
    let step = pace.step;
    let judge = super::Judge {
        s3: step.s3,
        bucket: step.bucket,
        layout: step.layout,
        grace: step.grace,
        confirm: step.confirm,
    };
    let mut findings = judge.findings(&mut *tx, listing, listed).await?;
    let terms = Terms { grace: step.grace, max: step.adopt_max, tolerance: step.tolerance };
    super::adopt::adopt(&mut *tx, listing, step.layout, &mut findings, terms).await?;
    let newly_lost = super::record(&mut *tx, listing, &findings).await?;
    let (unknown_keys, unknown_bytes) = findings.unknown_totals();
    Ok(Compared {
        unknown_keys,
        unknown_bytes,
        shared_prefixes: findings.off_pattern.iter().map(|o| o.prefix.clone()).collect(),
        lost: findings.lost.len() as u64,
        newly_lost,
        unconfirmed: findings.unconfirmed,
        adopted_keys: findings.adopted_totals().0,
        adopted_bytes: findings.adopted_totals().1,
        awaiting_approval: findings.awaiting_approval.clone(),
        withdrawn: findings.withdrawn.clone(),
    })
}

/// Lets the statements of the caller's transaction run until the pass's deadline (and at least the 30 s every
/// session has): a data file of millions of keys, or the comparison of a large bucket, takes longer than a
/// statement of the application's tables should, and `lock_timeout` still stops one behind an application's lock.
pub(crate) async fn allow_until(tx: &mut sqlx::PgConnection, deadline: Instant) -> Result<(), sqlx::Error> {
    platform::db::statements_until(tx, deadline, platform::db::STATEMENT_TIMEOUT).await
}

fn nothing_new(manifest: Option<String>, abandoned: Option<String>) -> Progress {
    Progress {
        manifest,
        listing: None,
        files_read: 0,
        files_done: 0,
        files_total: 0,
        keys_read: 0,
        stopped: Stop::NoNewReport,
        compared: None,
        abandoned,
        engine: None,
    }
}

/// The newest report's manifest at `location`: S3 writes each under a folder named for when its scan began
/// (`2026-11-30T00-00Z/manifest.json`), so the greatest such name is the newest.
async fn newest_manifest(
    s3: &aws_sdk_s3::Client,
    location: &InventoryLocation,
) -> Result<Option<String>, ReconcileError> {
    let mut pages =
        s3.list_objects_v2().bucket(&location.bucket).prefix(&location.prefix).delimiter("/").into_paginator().send();
    let mut newest: Option<String> = None;
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| AwsFailure::from_sdk(format!("ListObjectsV2 {location}"), &e))?;
        for folder in page.common_prefixes().iter().filter_map(|p| p.prefix()) {
            let name = folder.trim_start_matches(location.prefix.as_str()).trim_end_matches('/');
            if is_scan_time(name) && newest.as_deref().is_none_or(|n| folder > n) {
                newest = Some(folder.to_owned());
            }
        }
    }
    Ok(newest.map(|folder| format!("s3://{}/{folder}manifest.json", location.bucket)))
}

/// `YYYY-MM-DDTHH-MMZ`, as S3 names a report's folder (`hive/` and `data/` sit beside them).
fn is_scan_time(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() == 17
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 | 13 => *c == b'-',
            10 => *c == b'T',
            16 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

/// Reconciliation's share of a pass, with an inventory location configured and S3 at hand; with an engine outside
/// the database, which compares the reports it takes.
#[derive(Debug, Clone, Copy)]
pub struct Reconciliation<'a, E = NoEngine> {
    /// Which keys are ours.
    pub layout: &'a KeyLayout,
    /// Where the inventory reports land.
    pub inventory: &'a InventoryLocation,
    /// The asset bucket.
    pub bucket: &'a str,
    /// The grace period, for the count of young keys.
    pub grace: Duration,
    /// The most assets confirmed gone per comparison.
    pub confirm: usize,
    /// The most keys adopted per comparison.
    pub adopt_max: u32,
    /// How far a prefix's adoptable keys may grow over its approval and the previous report.
    pub tolerance: Tolerance,
    /// The client of the inventory and asset buckets.
    pub s3: &'a aws_sdk_s3::Client,
    /// An engine outside the database, and which reports it compares.
    pub engine: Option<Outside<'a, E>>,
}

impl<E: Engine> Step for Reconciliation<'_, E> {
    type Progress = Progress;
    type Standing = super::Standing;
    type Error = ReconcileError;
    const NAME: &'static str = "reconciliation";
    const ON_FAILURE: &'static str = "reconciliation failed: the next pass resumes it";

    async fn advance(&self, pool: &PgPool, share: Share) -> Result<Progress, ReconcileError> {
        let pace = Paced { step: self, share };
        advance(pool, self.s3, pace).await
    }

    async fn standing(conn: &mut sqlx::PgConnection) -> Result<super::Standing, sqlx::Error> {
        super::standing(conn).await
    }

    fn log(progress: &Progress) {
        tracing::info!(
            files_read = progress.files_read,
            keys_read = progress.keys_read,
            stopped = %progress.stopped,
            "reconciliation advanced"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reports_folder_is_named_for_its_scan_time() {
        assert!(is_scan_time("2026-11-30T00-00Z"));
        assert!(!is_scan_time("hive"));
        assert!(!is_scan_time("data"));
        assert!(!is_scan_time("2026-11-30T00:00Z"));
    }
}
