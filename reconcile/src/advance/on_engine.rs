//! Reconciliation's share of a sweep pass when an engine outside the database compares a report. Three steps, each
//! resumed by the next pass from what the listing's row says:
//!
//! 1. the export of the known keys, a file at a time, each file's last key saved with it;
//! 2. the query, started once the export is whole (its cost, at most, recorded as it starts), then polled: a query
//!    outlives a pass, and the pass that finds it finished collects it;
//! 3. its output paged home, judged, adopted and recorded in one transaction, as a report read into the database is.
//!
//! A query that fails is forgotten and the error reported: the next pass starts it again.

use std::time::Instant;

use serde::Serialize;
use sqlx::PgPool;

use super::{Progress, Reconciliation, Stop};
use crate::engine::cost::Estimate;
use crate::engine::export::{self, Export, ROWS_PER_FILE};
use crate::engine::{Collected, Datasets, Engine, EngineError, Reading, Running};
use crate::read::Report;
use crate::{Listed, Listing, ReconcileError};
use ledger::scan::Scan;
use platform::location::InventoryLocation;
use platform::step::Paced;

/// An engine outside the database, and when a report is compared on it.
#[derive(Debug, Clone, Copy)]
pub struct Outside<'a, E> {
    /// The engine.
    pub engine: &'a E,
    /// Where the export of the known keys is written: the location of the export's table.
    pub export: &'a InventoryLocation,
    /// Compare on it only reports whose data files add up to more than this many bytes; `None`: every report it
    /// can read.
    pub above_bytes: Option<u64>,
}

impl<E: Engine> Outside<'_, E> {
    /// Whether `report` is compared on the engine: a Parquet or ORC report (a CSV one stays in the database) above
    /// the threshold.
    pub fn takes(&self, report: &Report) -> bool {
        report.columnar() && self.above_bytes.is_none_or(|above| report.data_bytes() > above)
    }
}

/// Queries started for one listing at most: the last failure gives the listing up.
pub const ATTEMPTS: i32 = 3;

/// Where a comparison on an engine stands, as the run record keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OnEngine {
    /// The engine.
    pub engine: String,
    /// Files of the export written so far.
    pub export_files: u32,
    /// Of them, written in this pass.
    pub written_now: u32,
    /// Rows of the export written so far.
    pub export_rows: u64,
    /// The query, once started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// The most it scans, and what that costs at Athena's price: said before it starts.
    pub at_most: Scan,
    /// What it scanned, once finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scanned: Option<Scan>,
}

/// What the listing's row says of the comparison.
struct Saved {
    engine: String,
    export_files: i32,
    export_after: Option<String>,
    export_rows: i64,
    export_bytes: i64,
    exported: bool,
    query_id: Option<String>,
    /// The most the query scans, as estimated when the report was chosen.
    estimated: i64,
    /// Queries started so far.
    attempts: i32,
}

async fn saved(pool: &PgPool, listing: i64) -> Result<Saved, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT engine AS "engine!", export_files, export_after, export_rows, export_bytes,
                  exported_at IS NOT NULL AS "exported!", query_id, coalesce(scan_at_most, 0) AS "estimated!",
                  query_attempts
             FROM reconcile_listings WHERE id = $1"#,
        listing
    )
    .fetch_one(pool)
    .await?;
    Ok(Saved {
        engine: row.engine,
        export_files: row.export_files,
        export_after: row.export_after,
        export_rows: row.export_rows,
        export_bytes: row.export_bytes,
        exported: row.exported,
        query_id: row.query_id,
        estimated: row.estimated,
        attempts: row.query_attempts,
    })
}

/// Marks `listing` (of `report`) as compared on `engine`, with the most it will scan as estimated now, in the
/// caller's transaction: the one that opened the listing, so no crash leaves a report chosen for an engine to be
/// copied into the database instead.
pub(crate) async fn choose(
    conn: &mut sqlx::PgConnection,
    listing: i64,
    report: &Report,
    engine: &str,
) -> Result<(), sqlx::Error> {
    let known_bytes = crate::engine::cost::export_estimate(&mut *conn).await?;
    let estimate = Estimate { inventory_bytes: report.data_bytes(), known_bytes, known_estimated: true };
    sqlx::query!(
        "UPDATE reconcile_listings SET engine = $2, scan_at_most = $3 WHERE id = $1",
        listing,
        engine,
        i64::try_from(estimate.athena().bytes).unwrap_or(i64::MAX),
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Advances the comparison of `report` (listing `listing`) on `outside`'s engine within `pace`.
pub(crate) async fn advance<E: Engine>(
    pool: &PgPool,
    pace: Paced<'_, Reconciliation<'_, E>>,
    outside: &Outside<'_, E>,
    report: &Report,
    listing: Listing,
    mut progress: Progress,
) -> Result<Progress, ReconcileError> {
    let mut saved = saved(pool, listing.id).await?;
    // Estimated as the report was chosen; exact once the export is whole.
    let at_most = |saved: &Saved| match saved.exported {
        true => Estimate {
            inventory_bytes: report.data_bytes(),
            known_bytes: u64::try_from(saved.export_bytes).unwrap_or(0),
            known_estimated: false,
        }
        .athena(),
        false => Scan::athena(u64::try_from(saved.estimated).unwrap_or(0)),
    };
    let mut written_now = 0;
    let on_engine = |saved: &Saved, written_now: u32| OnEngine {
        engine: saved.engine.clone(),
        export_files: u32::try_from(saved.export_files).unwrap_or(0),
        written_now,
        export_rows: u64::try_from(saved.export_rows).unwrap_or(0),
        query: saved.query_id.clone(),
        at_most: at_most(saved),
        scanned: None,
    };
    let export = Export { s3: pace.step.s3, location: outside.export, layout: pace.step.layout, listing: listing.id };
    while !saved.exported {
        if Instant::now() >= pace.share.until {
            progress.engine = Some(on_engine(&saved, written_now));
            return Ok(progress);
        }
        let mut conn = pool.acquire().await?;
        let number = u32::try_from(saved.export_files).unwrap_or(u32::MAX);
        let written = export.write_file(&mut conn, number, saved.export_after.as_deref(), ROWS_PER_FILE).await?;
        let row = sqlx::query!(
            r#"UPDATE reconcile_listings
                  SET export_files = export_files + 1, export_after = $2, export_rows = export_rows + $3,
                      export_bytes = export_bytes + $4, exported_at = CASE WHEN $5 THEN now() END
                WHERE id = $1
            RETURNING export_files, export_rows, export_bytes"#,
            listing.id,
            written.last_key,
            i64::try_from(written.rows).unwrap_or(i64::MAX),
            i64::try_from(written.bytes).unwrap_or(i64::MAX),
            written.done,
        )
        .fetch_one(&mut *conn)
        .await?;
        fail::fail_point!("reconcile::export");
        saved.export_files = row.export_files;
        saved.export_rows = row.export_rows;
        saved.export_bytes = row.export_bytes;
        saved.export_after = written.last_key;
        saved.exported = written.done;
        written_now += 1;
    }
    let engine = outside.engine;
    let id = match saved.query_id.clone() {
        Some(id) => id,
        None => {
            let folder = format!("s3://{}/{}", outside.export.bucket, export::folder(outside.export, listing.id));
            engine.attach(&Datasets { report, export: &folder }).await?;
            let reading = Reading {
                listing: listing.id,
                taken_at: listing.taken_at,
                folder: report.folder(),
                versions: report.versions(),
            };
            // Each attempt its own text, so Athena's idempotency token (a digest of it) starts a new query after a
            // failed one, while a pass that crashed before saving the id gets the same one back.
            let sql = format!(
                "{}-- asset-sweeper: listing {}, attempt {}\n",
                crate::engine::render(engine.dialect(), &reading, &pace.step.layout.prefixes()),
                listing.id,
                saved.attempts + 1
            );
            let id = engine.start(&sql).await?;
            sqlx::query!(
                "UPDATE reconcile_listings
                    SET query_id = $2, query_started_at = now(), scan_at_most = $3, query_attempts = query_attempts + 1
                  WHERE id = $1",
                listing.id,
                id,
                i64::try_from(at_most(&saved).bytes).unwrap_or(i64::MAX),
            )
            .execute(pool)
            .await?;
            saved.query_id = Some(id.clone());
            id
        }
    };
    let mut state = on_engine(&saved, written_now);
    let scanned = match engine.poll(&id).await? {
        Running::Running => {
            progress.stopped = Stop::EngineRunning;
            progress.engine = Some(state);
            return Ok(progress);
        }
        Running::Failed(reason) => {
            // Started again by the next pass, up to ATTEMPTS in all: a query that fails as often fails for a reason
            // a person must read (a table's definition, the workgroup's limits), and each attempt may be billed.
            let attempts = saved.attempts + 1;
            let given_up = attempts >= ATTEMPTS;
            let then = if given_up {
                format!("it failed {attempts} times: the listing is given up, and the next report is compared anew")
            } else {
                "the next pass starts it again".to_owned()
            };
            let reason = format!("query {id} of listing {} failed, and {then}: {reason}", listing.id);
            sqlx::query!(
                "UPDATE reconcile_listings
                    SET query_id = NULL,
                        abandoned_at = CASE WHEN $2 THEN now() END,
                        abandoned_why = CASE WHEN $2 THEN $3 END
                  WHERE id = $1",
                listing.id,
                given_up,
                reason,
            )
            .execute(pool)
            .await?;
            return Err(EngineError::Failed { engine: engine.name(), reason }.into());
        }
        Running::Succeeded { scanned } => scanned,
    };
    state.scanned = Some(Scan::athena(scanned));
    progress.engine = Some(state);
    // The output is collected, judged and recorded by a pass with time for it.
    if Instant::now() >= pace.share.until {
        return Ok(progress);
    }
    let mut tx = pool.begin().await?;
    super::allow_until(&mut tx, pace.share.deadline).await?;
    // A collection cut short by a crash left nothing: its transaction rolled back.
    let mut collected = Collected::default();
    let mut token: Option<String> = None;
    loop {
        let page = engine.page(&id, token.as_deref()).await?;
        crate::engine::collect(&mut tx, listing.id, pace.step.layout, &page.rows, &mut collected).await?;
        match page.next {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    sqlx::query!(
        "UPDATE reconcile_listings SET keys_read = $2, scanned_bytes = $3 WHERE id = $1",
        listing.id,
        collected.keys,
        i64::try_from(scanned).unwrap_or(i64::MAX),
    )
    .execute(&mut *tx)
    .await?;
    progress.keys_read = u64::try_from(collected.keys).unwrap_or(0);
    let compared = super::judge_and_record(&mut tx, pace, listing, Listed::Engine(&collected)).await?;
    tx.commit().await?;
    progress.stopped = Stop::Compared;
    progress.compared = Some(compared);
    Ok(progress)
}
