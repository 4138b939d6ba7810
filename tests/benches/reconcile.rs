//! Reconciliation's throughput at a real bucket's size, beside the per-key lookup one would write first, in one run:
//!
//! - reconciliation as it runs: an S3 Inventory report (manifest and data files as S3 writes them) read from local
//!   disk, each file decoded as it streams, its keys classified and copied into `reconcile_keys` in batches of
//!   10 000 (`COPY`), then both anti-joins: the keys no row knows and the rows whose keys the report lacks. The same
//!   keys in each of S3's three formats: gzipped CSV, Parquet (Snappy) and ORC (ZLIB), CSV the baseline of the
//!   other two;
//! - the baseline: one indexed lookup of `stored_objects` per key, over a sample of the same keys.
//!
//! The bucket: 1 000 000 keys in 100 workspaces, in ten files; the rows: 1 000 000 assets with their stored
//! objects. 10 000 keys have no row and 10 000 rows have no key. Printed, per format: the report's size, the time to
//! decode it alone and the process's peak resident memory after, the time to read and ingest, to compare, and both
//! together (twice, so a slow moment of the machine falls on both), keys per second and the ratio to CSV; then the
//! per-key baseline's rate, the ratio, and how long a billion-key bucket takes at this pace.
//!
//! Run with `scripts/bench-reconcile` (only Postgres). `BENCH_KEYS` (1000000), `BENCH_DRIFT` (10000, keys without
//! rows and rows without keys each) and `BENCH_SAMPLE` (20000, the baseline's keys) set the sizes.

// Counts in tests and benchmarks are small and known: their casts, assertions included, stay as written.
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]

use std::path::Path;
use std::time::{Duration, Instant};

use integration_tests::TestDatabase;
use integration_tests::reports::{Format, Row};
use platform::keys::KeyLayout;
use reconcile::inventory::{self, Manifest};
use reconcile::read::Report;
use reconcile::{self, Findings, ListingSource};
use sqlx::PgPool;
use uuid::Uuid;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|n| n.parse().ok()).unwrap_or(default)
}

const FILES: usize = 10;
const BUCKET: &str = "bench-assets";

/// The report of `keys` in `format`, in `FILES` files with S3's schema, under `dir`: the manifest's path.
fn report(dir: &Path, format: Format, keys: &[String]) -> String {
    let prefix = format!("inventory/{BUCKET}/{}", format.name());
    let modified = chrono::DateTime::parse_from_rfc3339("2025-06-01T10:00:00Z").expect("a time").timestamp_millis();
    let mut files = Vec::new();
    for (i, chunk) in keys.chunks(keys.len().div_ceil(FILES)).enumerate() {
        let key = format!("{prefix}/data/{i}.{}", format.extension());
        let path = dir.join(&key);
        std::fs::create_dir_all(path.parent().expect("a folder")).expect("dir");
        let rows: Vec<Row> = chunk.iter().map(|k| Row::current(k, 1000, modified)).collect();
        // Row groups and stripes of a size S3's writers make (about 128 MiB of keys would hold a million).
        let bytes = format.write(BUCKET, &rows, 100_000);
        std::fs::write(&path, &bytes).expect("a file");
        files.push((key, bytes.len()));
    }
    let manifest = integration_tests::reports::manifest(BUCKET, format, &files, chrono::Utc::now().timestamp_millis());
    let path = dir.join(format!("{prefix}/2026-12-01T00-00Z/manifest.json"));
    std::fs::create_dir_all(path.parent().expect("a folder")).expect("dir");
    std::fs::write(&path, manifest).expect("manifest");
    path.display().to_string()
}

/// One reconciliation of the report, rolled back: (read and ingest, compare, findings).
async fn reconcile_once(
    pool: &PgPool,
    s3: &aws_sdk_s3::Client,
    manifest: &str,
    layout: &KeyLayout,
) -> (Duration, Duration, Findings) {
    let mut tx = pool.begin().await.expect("tx");
    let started = Instant::now();
    let report = Report::open(s3, manifest, BUCKET).await.expect("the report");
    let listing = reconcile::open(&mut tx, ListingSource::Inventory, manifest, report.taken_at(), FILES)
        .await
        .expect("a listing");
    for file in 0..report.manifest.files.len() {
        report.ingest_file(&mut tx, listing.id, layout, file).await.expect("a file");
    }
    let ingest = started.elapsed();
    let started = Instant::now();
    // Confirming with the bucket is bounded per run and not part of the comparison's pace.
    let findings = reconcile::compare(&mut tx, s3, BUCKET, layout, listing, Duration::from_secs(86_400), 0)
        .await
        .expect("compare");
    let compare = started.elapsed();
    tx.rollback().await.expect("rollback");
    (ingest, compare, findings)
}

/// One format's figures.
struct Measured {
    format: Format,
    bytes: u64,
    decode: Duration,
    peak_kib: u64,
    runs: [(Duration, Duration); 2],
}

impl Measured {
    fn best(&self) -> Duration {
        self.runs.iter().map(|(ingest, compare)| *ingest + *compare).min().unwrap_or_default()
    }
}

#[tokio::main]
async fn main() {
    let keys = env_number("BENCH_KEYS", 1_000_000);
    let drift = env_number("BENCH_DRIFT", 10_000);
    let sample = env_number("BENCH_SAMPLE", 20_000);
    let db = TestDatabase::new().await;
    eprintln!("reconcile: loading {keys} assets ...");
    integration_tests::bucket::rows(&db.pool, keys).await;
    let listed = integration_tests::bucket::listed_keys(&db.pool, drift).await;
    let dir = std::env::temp_dir().join(format!("reconcile-bench-{}", Uuid::new_v4()));
    let layout = KeyLayout::new("*", r"(?P<workspace>[0-9a-f-]{36})/[0-9a-f-]{36}\.png").expect("a layout");
    // Never called: nothing is confirmed with the bucket in this run.
    let s3 = aws_sdk_s3::Client::from_conf(aws_sdk_s3::Config::builder().behavior_version_latest().build());

    let mut measured = Vec::new();
    for format in Format::ALL {
        let manifest = report(&dir, format, &listed);
        let bytes = walk_size(&dir.join(format!("inventory/{BUCKET}/{}", format.name())));
        eprintln!("reconcile: report of {} keys written in {} ({bytes} bytes)", listed.len(), format.name());
        // Where the time of reading goes: decoding alone, without Postgres.
        let decode = parse_only(&manifest).await;
        let peak_kib = integration_tests::bucket::peak_resident_kib("self");
        let mut runs = [(Duration::ZERO, Duration::ZERO); 2];
        for run in &mut runs {
            let (ingest, compare, findings) = reconcile_once(&db.pool, &s3, &manifest, &layout).await;
            let (unknown, _) = findings.unknown_totals();
            assert_eq!((unknown as usize, findings.unconfirmed as usize), (drift, drift), "the drift, both ways");
            *run = (ingest, compare);
        }
        measured.push(Measured { format, bytes, decode, peak_kib, runs });
    }
    let _ = std::fs::remove_dir_all(&dir);

    // The baseline: one lookup per key, as a loop over the report would ask.
    let mut conn = db.pool.acquire().await.expect("connection");
    let started = Instant::now();
    let mut unknown_in_sample = 0usize;
    for key in listed.iter().rev().take(sample) {
        let known: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM stored_objects WHERE storage_key = $1)")
            .bind(key)
            .fetch_one(&mut *conn)
            .await
            .expect("lookup");
        unknown_in_sample += usize::from(!known);
    }
    let naive = started.elapsed();
    drop(conn);

    println!(
        "reconcile: {} keys in {FILES} files against {keys} rows; {drift} without rows, {drift} rows without keys",
        listed.len()
    );
    let csv = &measured[0];
    for m in &measured {
        println!(
            "reconcile: {:<7} {:>10} bytes; decoding alone {:.2} s ({:.0} keys/s, {:.2}x CSV's time), peak resident \
             memory after {} MiB",
            m.format.name(),
            m.bytes,
            m.decode.as_secs_f64(),
            listed.len() as f64 / m.decode.as_secs_f64(),
            m.decode.as_secs_f64() / csv.decode.as_secs_f64(),
            m.peak_kib / 1024
        );
        for (run, (ingest, compare)) in ["first", "second"].iter().zip(&m.runs) {
            let together = *ingest + *compare;
            println!(
                "reconcile:   {run}: read and ingest {:.2} s, both anti-joins {:.2} s, together {:.2} s ({:.0} keys/s)",
                ingest.as_secs_f64(),
                compare.as_secs_f64(),
                together.as_secs_f64(),
                listed.len() as f64 / together.as_secs_f64()
            );
        }
        println!(
            "ratio:      {} reconciles in {:.2}x CSV's time (best runs)",
            m.format.name(),
            m.best().as_secs_f64() / csv.best().as_secs_f64()
        );
    }
    let rate = listed.len() as f64 / csv.best().as_secs_f64();
    let naive_rate = sample.min(listed.len()) as f64 / naive.as_secs_f64();
    println!(
        "baseline:   a lookup per key over {} keys: {:.2} s, {naive_rate:.0} keys/s ({unknown_in_sample} unknown); \
         {:.0} s for the whole report",
        sample.min(listed.len()),
        naive.as_secs_f64(),
        listed.len() as f64 / naive_rate
    );
    println!("ratio:      reconciliation (CSV) is {:.1}x the per-key lookup (best run)", rate / naive_rate);
    println!(
        "pace:       a bucket of 1 000 000 000 keys takes {:.1} h of ingest and comparison at this rate",
        1e9 / rate / 3600.0
    );
}

/// Every file of the report decoded, the keys dropped.
async fn parse_only(manifest: &str) -> Duration {
    let bytes = std::fs::read(manifest).expect("the manifest");
    let (parsed, format) = Manifest::parse(&bytes, BUCKET).expect("a manifest");
    let root = Path::new(manifest).ancestors().find(|d| d.join(&parsed.files[0].key).is_file()).expect("the root");
    let started = Instant::now();
    for file in &parsed.files {
        let opened = std::fs::File::open(root.join(&file.key)).expect("a file");
        match format {
            inventory::Format::Csv(columns) => {
                let body = std::io::BufReader::new(opened);
                inventory::csv::read_file(&file.key, body, columns, 10_000, |_| Ok(())).expect("parsed")
            }
            inventory::Format::Columnar(kind) => {
                inventory::columnar::read_file(&file.key, kind, opened, 10_000, |_| Ok(())).expect("decoded")
            }
        };
    }
    started.elapsed()
}

fn walk_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(
                    |e| {
                        if e.path().is_dir() {
                            walk_size(&e.path())
                        } else {
                            e.metadata().map(|m| m.len()).unwrap_or(0)
                        }
                    },
                )
                .sum()
        })
        .unwrap_or(0)
}
