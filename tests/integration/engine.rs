//! The bucket comparison's one SQL text on a real engine (DataFusion, reading S3's own Parquet and ORC inventories
//! and the product's Parquet export from LocalStack) against the comparison in the application's database, on the
//! same report and the same rows: the findings, and what recording them leaves in `lost_assets`, are the same.

use std::time::{Duration, Instant};

use chrono::Utc;
use platform::step::{Share, Step};
use reconcile::advance::on_engine::Outside;
use reconcile::advance::{Reconciliation, Stop};
use uuid::Uuid;

use integration_tests::TestContext;
use integration_tests::engine::LocalEngine;
use integration_tests::fixtures::{put_bytes, seed};
use integration_tests::reports::{Format, Row};
use platform::keys::KeyLayout;
use platform::location::InventoryLocation;
use reconcile::engine::export::{self, Export};
use reconcile::engine::{self, Collected, Engine, Reading, Running};
use reconcile::read::Report;
use reconcile::{Findings, Judge, Listing, ListingSource};

use crate::reconcile::{PATTERN, put_files};

/// 2025-01-01, in milliseconds: long before any test runs.
const OLD_MS: i64 = 1_735_689_600_000;
/// The report's folder, as S3 names it.
const SCAN: &str = "2026-11-30T00-00Z";

/// What a comparison found, and the assets `lost_assets` holds after it is recorded.
type Outcome = (Findings, Vec<(Uuid, String)>);

struct Fixture {
    layout: KeyLayout,
    rows: Vec<Row>,
}

/// The rows and the report: keys both hold (some with characters SQL, CSV and COPY treat specially), keys no row
/// knows (old, young, with noncurrent versions, in another letter case, deleted behind a marker), assets whose bytes
/// are gone (never written; hidden by a delete marker), assets not due (pending; created after the report), findings
/// of earlier reconciliations (bytes back; still gone; no longer due), a prefix another writer shares (seven known
/// keys off the pattern, two unknown), and keys outside every managed prefix.
async fn fixture(ctx: &TestContext) -> Fixture {
    let (ws, shared) = (Uuid::new_v4(), Uuid::new_v4());
    let settings =
        ctx.settings(&[("RECONCILE_PREFIXES", &format!("{ws}/,{shared}/")), ("RECONCILE_KEY_PATTERN", PATTERN)]);
    let layout = settings.reconcile.layout.expect("a layout");
    let now = Utc::now().timestamp_millis();
    let mut rows = Vec::new();
    for (i, state) in ["attached", "released", "retired"].into_iter().enumerate() {
        let key = format!("{ws}/known-{i}.png");
        seed(ctx, ws, state, "3 days", &key).await;
        listed(&mut rows, &key, 100 + i as i64);
    }
    for name in ["it's \"quoted\" + 100%.png", "ünï cödé 日本.png", "back\\slash\ttab.png", "a,comma;semi.png"] {
        let key = format!("{ws}/{name}");
        seed(ctx, ws, "attached", "3 days", &key).await;
        listed(&mut rows, &key, 7);
    }
    for name in ["orphan one.png", "orphan+plus%25.png", "'quoted'.png"] {
        listed(&mut rows, &format!("{ws}/{name}"), 11);
    }
    // Outside: a managed prefix is matched as written, and its workspace's folder in capitals is not under it.
    listed(&mut rows, &format!("{}/Orphan.PNG", ws.to_string().to_uppercase()), 13);
    // Known, off the pattern, in the shared prefix: seven, before the two unknown ones in key order, so the sample of
    // five is all known keys and leaves two out.
    for i in 0..7 {
        let key = format!("{shared}/nested/known-{i}.bin");
        sqlx::query(
            "INSERT INTO stored_objects (storage_key, content_hash, byte_size) VALUES ($1, 'sha256:' || md5($1), 5)",
        )
        .bind(&key)
        .execute(ctx.pool())
        .await
        .expect("a stored object");
        listed(&mut rows, &key, 5);
    }
    listed(&mut rows, &format!("{shared}/nested/y-unknown.bin"), 3);
    listed(&mut rows, &format!("{shared}/nested/z-unknown.bin"), 3);
    listed(&mut rows, &format!("{shared}/on-pattern.png"), 3);
    listed(&mut rows, "exports/report.csv", 1_000);
    listed(&mut rows, &format!("x{ws}/not-under-a-prefix.png"), 1_000);
    // Young: within the grace period.
    rows.push(Row::current(&format!("{ws}/young.png"), 17, now - 60_000));
    // Noncurrent versions beside a current one, and a key whose newest version is a delete marker.
    let versioned = format!("{ws}/versioned.png");
    rows.push(Row::current(&versioned, 19, OLD_MS));
    rows.push(Row { key: versioned, latest: false, delete_marker: false, size: Some(23), modified: OLD_MS - 1 });
    let deleted = format!("{ws}/deleted-orphan.png");
    rows.push(Row { key: deleted.clone(), latest: true, delete_marker: true, size: None, modified: OLD_MS });
    rows.push(Row { key: deleted, latest: false, delete_marker: false, size: Some(29), modified: OLD_MS - 1 });
    // Gone: never written; and hidden by a delete marker (a kept version can bring it back).
    let never = format!("{ws}/never.png");
    crate::reconcile::row_without_bytes_at(ctx, ws, "attached", &never).await;
    let hidden = format!("{ws}/hidden.png");
    seed(ctx, ws, "attached", "3 days", &hidden).await;
    ctx.s3.delete_object().bucket(&ctx.bucket).key(&hidden).send().await.expect("a delete marker");
    rows.push(Row { key: hidden.clone(), latest: true, delete_marker: true, size: None, modified: OLD_MS });
    rows.push(Row { key: hidden, latest: false, delete_marker: false, size: Some(31), modified: OLD_MS - 1 });
    // Not due: an upload still pending, and an asset created after the report was taken.
    crate::reconcile::row_without_bytes_at(ctx, ws, "pending", &format!("{ws}/pending.png")).await;
    crate::reconcile::row_without_bytes_at(ctx, ws, "attached", &format!("{ws}/later.png")).await;
    sqlx::query("UPDATE assets SET created_at = now() + interval '1 day' WHERE storage_key = $1")
        .bind(format!("{ws}/later.png"))
        .execute(ctx.pool())
        .await
        .expect("created later");
    // Found lost before: its bytes back since; still gone; gone but no longer due.
    let back = format!("{ws}/back.png");
    let back_id = seed(ctx, ws, "attached", "3 days", &back).await;
    listed(&mut rows, &back, 37);
    let still_id = crate::reconcile::row_without_bytes_at(ctx, ws, "retired", &format!("{ws}/still.png")).await;
    let undue_key = format!("{ws}/undue.png");
    let undue_id = crate::reconcile::row_without_bytes_at(ctx, ws, "pending", &undue_key).await;
    let earlier: i64 = sqlx::query_scalar(
        "INSERT INTO reconcile_listings (source, location, taken_at, files_total, compared_at)
         VALUES ('list', 'earlier', now() - interval '2 days', 0, now() - interval '2 days') RETURNING id",
    )
    .fetch_one(ctx.pool())
    .await
    .expect("an earlier listing");
    for id in [back_id, still_id, undue_id] {
        sqlx::query(
            "INSERT INTO lost_assets (asset_id, storage_key, workspace_id, listing_id)
             SELECT id, storage_key, workspace_id, $2 FROM assets WHERE id = $1",
        )
        .bind(id)
        .bind(earlier)
        .execute(ctx.pool())
        .await
        .expect("found lost before");
    }
    put_bytes(&ctx.s3, &ctx.bucket, "exports/report.csv", b"not ours").await;
    Fixture { layout, rows }
}

/// A current object of the report, written long ago.
fn listed(rows: &mut Vec<Row>, key: &str, size: i64) {
    rows.push(Row::current(key, size, OLD_MS));
}

/// Where the sweep's reconciliation reads the reports and writes the export, in the test's bucket.
struct Locations {
    inventory: InventoryLocation,
    exports: InventoryLocation,
}

impl Locations {
    fn of(ctx: &TestContext) -> Locations {
        let at = |folder: &str| InventoryLocation::parse(&format!("s3://{}/{folder}", ctx.bucket)).expect("a location");
        Locations { inventory: at("inventory/"), exports: at("exports/known/") }
    }
}

/// Reconciliation's step of a sweep pass, comparing every report on `engine`.
fn sweeping<'a>(
    ctx: &'a TestContext,
    layout: &'a KeyLayout,
    locations: &'a Locations,
    engine: &'a LocalEngine,
) -> Reconciliation<'a, LocalEngine> {
    let settings = ctx.settings(&[]);
    Reconciliation {
        layout,
        inventory: &locations.inventory,
        bucket: &ctx.bucket,
        grace: settings.grace,
        confirm: 100,
        adopt_max: 100,
        tolerance: settings.approval_tolerance,
        s3: &ctx.s3,
        engine: Some(Outside { engine, export: &locations.exports, above_bytes: None }),
    }
}

/// A share of a pass with time for everything.
fn ample() -> Share {
    Share { until: Instant::now() + Duration::from_secs(60), deadline: Instant::now() + Duration::from_secs(120) }
}

fn judge<'a>(ctx: &'a TestContext, layout: &'a KeyLayout) -> Judge<'a> {
    Judge { s3: &ctx.s3, bucket: &ctx.bucket, layout, grace: ctx.settings(&[]).grace, confirm: 100 }
}

async fn lost_after(tx: &mut sqlx::PgConnection) -> Vec<(Uuid, String)> {
    sqlx::query_as("SELECT asset_id, storage_key FROM lost_assets ORDER BY asset_id").fetch_all(tx).await.expect("lost")
}

/// The comparison in the database: every key of the report read into `reconcile_keys`, then judged and recorded.
async fn in_the_database(ctx: &TestContext, layout: &KeyLayout, location: &str) -> Outcome {
    let report = Report::open(&ctx.s3, location, &ctx.bucket).await.expect("the report");
    let mut tx = ctx.pool().begin().await.expect("tx");
    let files = report.manifest.files.len();
    let listing =
        reconcile::open(&mut tx, ListingSource::Inventory, location, report.taken_at(), files).await.expect("open");
    for file in 0..files {
        report.ingest_file(&mut tx, listing.id, layout, file).await.expect("read");
    }
    let grace = ctx.settings(&[]).grace;
    let findings =
        reconcile::compare(&mut tx, &ctx.s3, &ctx.bucket, layout, listing, grace, 100).await.expect("compared");
    reconcile::record(&mut tx, listing, &findings).await.expect("recorded");
    let lost = lost_after(&mut tx).await;
    tx.rollback().await.expect("rollback");
    (findings, lost)
}

/// The comparison on the engine: the export written three rows a file (so it resumes after a key, file by file),
/// the text run, its output paged home and judged in the database.
async fn on_the_engine(ctx: &TestContext, layout: &KeyLayout, location: &str, engine: &LocalEngine) -> Outcome {
    let report = Report::open(&ctx.s3, location, &ctx.bucket).await.expect("the report");
    let mut tx = ctx.pool().begin().await.expect("tx");
    let files = report.manifest.files.len();
    let listing: Listing =
        reconcile::open(&mut tx, ListingSource::Inventory, location, report.taken_at(), files).await.expect("open");
    let exports = InventoryLocation::parse(&format!("s3://{}/exports/known/", ctx.bucket)).expect("a location");
    let export = Export { s3: &ctx.s3, location: &exports, layout, listing: listing.id };
    let (mut after, mut number, mut rows) = (None, 0, 0);
    loop {
        let written = export.write_file(&mut tx, number, after.as_deref(), 3).await.expect("exported");
        rows += written.rows;
        number += 1;
        after = written.last_key;
        if written.done {
            break;
        }
    }
    assert!(number > 3, "the export is written in several files, each resumed after the last key: {number}");
    assert_eq!(rows, 21, "every stored object under the managed prefixes, once");
    engine.register_report(&ctx.bucket, &report.manifest).await;
    let folder = format!("s3://{}/{}", ctx.bucket, export::folder(&exports, listing.id));
    engine.register_known(&folder).await.expect("the export");
    let reading = Reading { listing: listing.id, taken_at: report.taken_at(), folder: SCAN, versions: true };
    let sql = engine::render(engine.dialect(), &reading, &layout.prefixes());
    let id = engine.start(&sql).await.expect("started");
    assert!(matches!(engine.poll(&id).await.expect("polled"), Running::Succeeded { .. }));
    let mut collected = Collected::default();
    let mut token = None;
    loop {
        let page = engine.page(&id, token.as_deref()).await.expect("a page");
        engine::collect(&mut tx, listing.id, layout, &page.rows, &mut collected).await.expect("collected");
        match page.next {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    let findings = engine::compare(&mut tx, &judge(ctx, layout), listing, &collected).await.expect("compared");
    reconcile::record(&mut tx, listing, &findings).await.expect("recorded");
    let lost = lost_after(&mut tx).await;
    tx.rollback().await.expect("rollback");
    (findings, lost)
}

#[tokio::test]
async fn the_comparison_on_an_engine_finds_exactly_what_the_database_finds_in_parquet_and_orc() {
    let ctx = TestContext::new().await;
    let Fixture { layout, rows } = fixture(&ctx).await;
    let engine = LocalEngine::new(&[&ctx.bucket]);
    for format in [Format::Parquet, Format::Orc] {
        let files: Vec<Vec<u8>> = rows.chunks(9).map(|chunk| format.write(&ctx.bucket, chunk, 4)).collect();
        let folder = format!("inventory/{}/", format.name());
        let manifest = put_files(&ctx, &folder, SCAN, format, &files, None).await;
        let location = format!("s3://{}/{manifest}", ctx.bucket);
        let (whole, lost_whole) = in_the_database(&ctx, &layout, &location).await;
        let (mut found, lost_found) = on_the_engine(&ctx, &layout, &location, &engine).await;

        // Not an empty agreement: what the fixture holds is found.
        let (unknown_keys, _) = whole.unknown_totals();
        assert_eq!(unknown_keys, 5, "{format:?}: {whole:#?}");
        assert_eq!(whole.unknown.iter().map(|u| u.young).sum::<i64>(), 1, "{format:?}");
        assert_eq!(whole.off_pattern.len(), 1, "{format:?}: {whole:#?}");
        assert_eq!((whole.off_pattern[0].keys, whole.off_pattern[0].known), (9, 7), "{format:?}");
        assert_eq!(whole.off_pattern[0].sample.len(), 5);
        assert_eq!(whole.lost.len(), 3, "never written, hidden, still gone: {format:?}: {whole:#?}");
        assert_eq!(whole.lost.iter().filter(|l| l.restorable_version.is_some()).count(), 1);
        assert_eq!(lost_whole.len(), 4, "three gone and the one no longer due; the one whose bytes are back forgotten");

        // The same sets, the same figures, the same record.
        assert!(!found.listed_again.is_empty(), "the asset whose bytes came back is listed again");
        found.listed_again.clear();
        assert_eq!(found, whole, "{format:?}");
        assert_eq!(lost_found, lost_whole, "{format:?}");
    }
}

#[tokio::test]
async fn the_sweep_exports_starts_the_query_and_a_later_pass_collects_it_and_a_failed_query_starts_again() {
    let ctx = TestContext::new().await;
    let Fixture { layout, rows } = fixture(&ctx).await;
    let files: Vec<Vec<u8>> = rows.chunks(9).map(|chunk| Format::Parquet.write(&ctx.bucket, chunk, 4)).collect();
    put_files(&ctx, "inventory/", SCAN, Format::Parquet, &files, None).await;
    let locations = Locations::of(&ctx);
    let engine = LocalEngine::new(&[&ctx.bucket]).failing_once().running_for(1);
    let step = sweeping(&ctx, &layout, &locations, &engine);
    let spent = || Share { until: Instant::now(), deadline: Instant::now() + Duration::from_secs(60) };
    let report_bytes: u64 = files.iter().map(|f| f.len() as u64).sum();

    // Before anything runs, a dry run says what the report would cost on Athena.
    let manifest = format!("s3://{}/inventory/{SCAN}/manifest.json", ctx.bucket);
    let prefixes = layout.prefixes().join(",");
    let env = [("RECONCILE_PREFIXES", prefixes.as_str()), ("RECONCILE_KEY_PATTERN", PATTERN)];
    let args = ["--json", "reconcile", "--inventory", manifest.as_str(), "--dry-run"];
    let (_, dry) = crate::cli::json_with_code(&crate::cli::run_with(&ctx.db.url, Some(&ctx), &env, &args));
    let at_most = &dry["on_athena"]["at_most"];
    assert!(at_most["bytes"].as_u64().is_some_and(|b| b >= report_bytes), "{dry}");
    assert_eq!(
        (&at_most["cents"], &dry["on_athena"]["export_estimated"]),
        (&serde_json::json!(1), &serde_json::json!(true))
    );

    // A pass whose share is spent chooses the engine for the report and says what it will cost; it exports nothing.
    let first = step.advance(ctx.pool(), spent()).await.expect("a pass");
    assert_eq!(first.stopped, Stop::TimeShare);
    let on = first.engine.expect("on the engine");
    assert_eq!((on.engine.as_str(), on.export_files, on.query.as_deref()), ("datafusion", 0, None));
    assert!(on.at_most.bytes >= report_bytes, "{on:?}");
    assert_eq!(on.at_most.cents, 1, "Athena's ten-megabyte minimum");
    let standing =
        <Reconciliation<'_, LocalEngine> as Step>::standing(&mut ctx.pool().acquire().await.expect("a connection"))
            .await
            .expect("standing");
    let comparing = standing.comparing.expect("a comparison under way, with its cost");
    assert_eq!((comparing.engine.as_str(), comparing.exported, comparing.query), ("datafusion", false, None));

    // The next exports and starts the query; the engine fails it: the pass fails naming it, and forgets it.
    let e = step.advance(ctx.pool(), ample()).await.expect_err("a failed query").to_string();
    assert!(e.contains("failed, and the next pass starts it again: the test's engine fails this one"), "{e}");
    let row: (i32, i64, Option<String>) =
        sqlx::query_as("SELECT export_files, export_rows, query_id FROM reconcile_listings ORDER BY id DESC LIMIT 1")
            .fetch_one(ctx.pool())
            .await
            .expect("the listing");
    assert_eq!(row, (1, 21, None), "exported once, the failed query forgotten");

    // Started again, and still running when the pass polls: a later pass collects it.
    let running = step.advance(ctx.pool(), ample()).await.expect("a pass");
    assert_eq!(running.stopped, Stop::EngineRunning, "{running:?}");
    assert!(running.engine.is_some_and(|on| on.query.is_some() && on.scanned.is_none()));
    let third = step.advance(ctx.pool(), ample()).await.expect("a pass");
    assert_eq!(third.stopped, Stop::Compared, "{third:?}");
    let compared = third.compared.expect("compared");
    assert_eq!((compared.unknown_keys, compared.lost, compared.newly_lost), (5, 3, 2), "{compared:?}");
    let on = third.engine.expect("on the engine");
    assert!(on.query.is_some() && on.scanned.is_some_and(|s| s.bytes > 0), "{on:?}");
    let keys: i64 =
        sqlx::query_scalar("SELECT count(*) FROM reconcile_keys").fetch_one(ctx.pool()).await.expect("keys");
    assert_eq!(keys, 0, "a compared listing's keys go");
    let standing =
        <Reconciliation<'_, LocalEngine> as Step>::standing(&mut ctx.pool().acquire().await.expect("a connection"))
            .await
            .expect("standing");
    assert!(standing.comparing.is_none());
    let (engine_name, scanned) = standing.last.and_then(|l| l.engine).expect("compared on the engine");
    assert_eq!(engine_name, "datafusion");
    assert!(scanned.bytes > 0);
    // Nothing new: the report was compared.
    assert_eq!(step.advance(ctx.pool(), ample()).await.expect("a pass").stopped, Stop::NoNewReport);
}

#[tokio::test]
async fn a_query_that_keeps_failing_gives_its_listing_up_after_a_few_attempts_each_a_new_query() {
    let ctx = TestContext::new().await;
    let Fixture { layout, rows } = fixture(&ctx).await;
    let files: Vec<Vec<u8>> = rows.chunks(9).map(|chunk| Format::Orc.write(&ctx.bucket, chunk, 4)).collect();
    put_files(&ctx, "inventory/", SCAN, Format::Orc, &files, None).await;
    let locations = Locations::of(&ctx);
    let engine = LocalEngine::new(&[&ctx.bucket]).failing(reconcile::advance::on_engine::ATTEMPTS as u32);
    let step = sweeping(&ctx, &layout, &locations, &engine);
    for attempt in 1..=reconcile::advance::on_engine::ATTEMPTS {
        let e = step.advance(ctx.pool(), ample()).await.expect_err("a failed query").to_string();
        let last = attempt == reconcile::advance::on_engine::ATTEMPTS;
        assert_eq!(e.contains("the listing is given up"), last, "attempt {attempt}: {e}");
    }
    let row: (i32, Option<String>, Option<String>) = sqlx::query_as(
        "SELECT query_attempts, query_id, abandoned_why FROM reconcile_listings ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(ctx.pool())
    .await
    .expect("the listing");
    assert_eq!((row.0, row.1), (reconcile::advance::on_engine::ATTEMPTS, None));
    assert!(row.2.is_some_and(|why| why.contains("failed 3 times")));
    // Given up, the report is not read again: the next one is compared anew.
    assert_eq!(step.advance(ctx.pool(), ample()).await.expect("a pass").stopped, Stop::NoNewReport);
}
