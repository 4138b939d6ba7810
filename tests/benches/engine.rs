//! The bucket comparison on an engine outside the database beside the comparison in it, at 10 000 000 keys, in one
//! run, both over the same S3 Inventory report (S3's Parquet, in LocalStack's S3) and the same rows:
//!
//! - the baseline, the comparison in the application's database: every key read into `reconcile_keys` (`COPY`), then
//!   both anti-joins;
//! - on the engine: the export of the known keys (written to S3 as Parquet, a file of 1 000 000 rows at a time, the
//!   only part that reads the application's database in bulk), the comparison's SQL text run by DataFusion over the
//!   report and the export in S3, and its output paged home and judged by the database's own rules.
//!
//! Printed: each part's time, the process's and the database server's peak resident memory, the bytes the engine
//! scanned (what Athena would bill) and at most could, the ratio of the two comparisons, and a projection to 10^9
//! and 10^10 keys of the time at this machine's pace and of Athena's bytes and price. Both find the same keys.
//!
//! Run with `scripts/bench-engine` (Postgres and LocalStack). `BENCH_KEYS` (10000000) and `BENCH_DRIFT` (10000, keys
//! without rows and rows without keys each) set the sizes.

// Counts in benchmarks are small and known: their casts stay as written.
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]

use std::time::{Duration, Instant};

use integration_tests::TestContext;
use integration_tests::bucket::{listed_keys, peak_resident_kib, reset_peak, rows};
use integration_tests::engine::LocalEngine;
use integration_tests::fixtures::put_bytes;
use integration_tests::reports::{self, Format, Row};
use ledger::scan::Scan;
use platform::keys::KeyLayout;
use platform::location::InventoryLocation;
use reconcile::engine::export::{self, Export, ROWS_PER_FILE};
use reconcile::engine::{self, Collected, Datasets, Engine, Reading, Running};
use reconcile::read::Report;
use reconcile::{Findings, Judge, ListingSource};

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|n| n.parse().ok()).unwrap_or(default)
}

const FILES: usize = 10;
const SCAN: &str = "2026-12-01T00-00Z";

/// The report of `keys` in S3's Parquet, `FILES` files in the test's bucket: its manifest's address and its bytes.
async fn report(ctx: &TestContext, keys: &[String]) -> (String, u64) {
    let modified = chrono::DateTime::parse_from_rfc3339("2025-06-01T10:00:00Z").expect("a time").timestamp_millis();
    let mut files = Vec::new();
    for (i, chunk) in keys.chunks(keys.len().div_ceil(FILES)).enumerate() {
        let key = format!("inventory/data/{i}.parquet");
        let rows: Vec<Row> = chunk.iter().map(|k| Row::current(k, 1000, modified)).collect();
        // Row groups of the size S3's writers make.
        let bytes = Format::Parquet.write(&ctx.bucket, &rows, 100_000);
        put_bytes(&ctx.s3, &ctx.bucket, &key, &bytes).await;
        files.push((key, bytes.len()));
    }
    let total = files.iter().map(|(_, size)| *size as u64).sum();
    let taken_at = chrono::Utc::now().timestamp_millis();
    let manifest = reports::manifest(&ctx.bucket, Format::Parquet, &files, taken_at);
    let key = format!("inventory/{SCAN}/manifest.json");
    put_bytes(&ctx.s3, &ctx.bucket, &key, manifest.as_bytes()).await;
    (format!("s3://{}/{key}", ctx.bucket), total)
}

/// The database server's process for `conn`, and its peak resident memory so far (0 on another machine).
async fn server_peak_kib(conn: &mut sqlx::PgConnection) -> u64 {
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(conn).await.expect("a pid");
    peak_resident_kib(&pid.to_string())
}

struct InDatabase {
    ingest: Duration,
    compare: Duration,
    server_kib: u64,
    findings: Findings,
}

async fn in_the_database(ctx: &TestContext, manifest: &str, layout: &KeyLayout) -> InDatabase {
    let mut tx = ctx.pool().begin().await.expect("tx");
    platform::db::statements_for(&mut tx, Duration::from_secs(3600)).await.expect("time");
    let started = Instant::now();
    let report = Report::open(&ctx.s3, manifest, &ctx.bucket).await.expect("the report");
    let listing = reconcile::open(&mut tx, ListingSource::Inventory, manifest, report.taken_at(), FILES)
        .await
        .expect("a listing");
    for file in 0..report.manifest.files.len() {
        report.ingest_file(&mut tx, listing.id, layout, file).await.expect("a file");
    }
    let ingest = started.elapsed();
    let started = Instant::now();
    // Confirming with the bucket is bounded per run and not part of either comparison's pace.
    let findings = reconcile::compare(&mut tx, &ctx.s3, &ctx.bucket, layout, listing, Duration::from_secs(86_400), 0)
        .await
        .expect("compare");
    let compare = started.elapsed();
    let server_kib = server_peak_kib(&mut tx).await;
    tx.rollback().await.expect("rollback");
    InDatabase { ingest, compare, server_kib, findings }
}

struct OnEngine {
    export: Duration,
    export_bytes: u64,
    export_server_kib: u64,
    query: Duration,
    scanned: u64,
    judge: Duration,
    rows_home: usize,
    findings: Findings,
}

async fn on_the_engine(ctx: &TestContext, manifest: &str, layout: &KeyLayout) -> OnEngine {
    let engine = LocalEngine::new(&[&ctx.bucket]);
    let report = Report::open(&ctx.s3, manifest, &ctx.bucket).await.expect("the report");
    let mut tx = ctx.pool().begin().await.expect("tx");
    platform::db::statements_for(&mut tx, Duration::from_secs(3600)).await.expect("time");
    let listing = reconcile::open(&mut tx, ListingSource::Inventory, manifest, report.taken_at(), FILES)
        .await
        .expect("a listing");
    let exports = InventoryLocation::parse(&format!("s3://{}/known/", ctx.bucket)).expect("a location");
    let started = Instant::now();
    let export = Export { s3: &ctx.s3, location: &exports, layout, listing: listing.id };
    let (mut after, mut number, mut export_bytes) = (None, 0, 0);
    loop {
        let written = export.write_file(&mut tx, number, after.as_deref(), ROWS_PER_FILE).await.expect("exported");
        export_bytes += written.bytes;
        number += 1;
        after = written.last_key;
        if written.done {
            break;
        }
    }
    let export_time = started.elapsed();
    let export_server_kib = server_peak_kib(&mut tx).await;
    let started = Instant::now();
    let folder = format!("s3://{}/{}", ctx.bucket, export::folder(&exports, listing.id));
    engine.attach(&Datasets { report: &report, export: &folder }).await.expect("attached");
    let reading = Reading { listing: listing.id, taken_at: report.taken_at(), folder: SCAN, versions: true };
    let id = engine.start(&engine::render(engine.dialect(), &reading, &layout.prefixes())).await.expect("ran");
    let Running::Succeeded { scanned } = engine.poll(&id).await.expect("polled") else { panic!("not finished") };
    let query = started.elapsed();
    let started = Instant::now();
    let (mut collected, mut token, mut rows_home) = (Collected::default(), None, 0);
    loop {
        let page = engine.page(&id, token.as_deref()).await.expect("a page");
        rows_home += page.rows.len();
        engine::collect(&mut tx, listing.id, layout, &page.rows, &mut collected).await.expect("collected");
        match page.next {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    let judge = Judge { s3: &ctx.s3, bucket: &ctx.bucket, layout, grace: Duration::from_secs(86_400), confirm: 0 };
    let findings = engine::compare(&mut tx, &judge, listing, &collected).await.expect("compared");
    let judged = started.elapsed();
    tx.rollback().await.expect("rollback");
    OnEngine {
        export: export_time,
        export_bytes,
        export_server_kib,
        query,
        scanned,
        judge: judged,
        rows_home,
        findings,
    }
}

#[tokio::main]
async fn main() {
    let keys = env_number("BENCH_KEYS", 10_000_000);
    let drift = env_number("BENCH_DRIFT", 10_000);
    let ctx = TestContext::new().await;
    eprintln!("engine: loading {keys} assets ...");
    rows(ctx.pool(), keys).await;
    let listed = listed_keys(ctx.pool(), drift).await;
    let (manifest, report_bytes) = report(&ctx, &listed).await;
    drop(listed);
    eprintln!("engine: report of {keys} keys in S3's Parquet, {report_bytes} bytes");
    let layout = KeyLayout::new("*", r"(?P<workspace>[0-9a-f-]{36})/[0-9a-f-]{36}\.png").expect("a layout");

    reset_peak();
    let db = in_the_database(&ctx, &manifest, &layout).await;
    let after_db_kib = peak_resident_kib("self");
    reset_peak();
    let on = on_the_engine(&ctx, &manifest, &layout).await;
    let after_engine_kib = peak_resident_kib("self");

    // Both find the same: the keys no row knows and the rows whose keys the report lacks (none confirmed here).
    assert_eq!(on.findings.unknown_totals(), db.findings.unknown_totals(), "the same keys no row knows");
    assert_eq!((on.findings.keys, on.findings.bytes), (db.findings.keys, db.findings.bytes), "the same totals");
    assert_eq!(on.findings.unconfirmed, db.findings.unconfirmed, "the same rows without keys");
    assert_eq!(db.findings.unknown_totals().0 as usize, drift);

    let mib = |kib: u64| kib / 1024;
    let in_db = db.ingest + db.compare;
    let engine_total = on.export + on.query + on.judge;
    println!(
        "engine: {keys} keys in {FILES} Parquet files ({report_bytes} bytes) against {keys} rows; {drift} each way"
    );
    println!(
        "database:   read and ingest {:.2} s, both anti-joins {:.2} s, together {:.2} s ({:.0} keys/s); server peak \
         resident {} MiB; this process {} MiB",
        db.ingest.as_secs_f64(),
        db.compare.as_secs_f64(),
        in_db.as_secs_f64(),
        keys as f64 / in_db.as_secs_f64(),
        mib(db.server_kib),
        mib(after_db_kib)
    );
    println!(
        "engine:     export of the known keys {:.2} s ({} bytes, server peak resident {} MiB); the query {:.2} s; \
         {} row(s) home, judged {:.2} s; together {:.2} s; this process's peak resident {} MiB (DataFusion in it)",
        on.export.as_secs_f64(),
        on.export_bytes,
        mib(on.export_server_kib),
        on.query.as_secs_f64(),
        on.rows_home,
        on.judge.as_secs_f64(),
        engine_total.as_secs_f64(),
        mib(after_engine_kib)
    );
    let at_most = report_bytes + on.export_bytes;
    println!(
        "scanned:    {} bytes ({} at Athena's price); at most {} bytes ({})",
        on.scanned,
        Scan::athena(on.scanned),
        at_most,
        Scan::athena(at_most)
    );
    println!(
        "ratio:      the engine's whole run is {:.2}x the database's; the database's own share (the export and \
         the judging) is {:.2}x",
        engine_total.as_secs_f64() / in_db.as_secs_f64(),
        (on.export + on.judge).as_secs_f64() / in_db.as_secs_f64()
    );
    for target in [1e9, 1e10] {
        let scale = target / keys as f64;
        let scanned = (on.scanned.max(1) as f64 * scale) as u64;
        println!(
            "projection: {target:.0e} keys: in the database {:.1} h of passes and a table of {target:.0e} rows; the \
             export {:.1} h of passes; this machine's engine {:.1} h; Athena scans about {} ({} per report)",
            in_db.as_secs_f64() * scale / 3600.0,
            on.export.as_secs_f64() * scale / 3600.0,
            on.query.as_secs_f64() * scale / 3600.0,
            ledger::gb(scanned),
            Scan::athena(scanned)
        );
    }
}
