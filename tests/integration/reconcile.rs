//! Reconciliation against LocalStack S3 and a real database: a listing and an inventory report (S3's own manifest
//! and gzipped CSV files, in S3 and copied to disk) compared with the rows both ways; what no row knows counted
//! per prefix and workspace, a prefix another writer shares refused, and assets whose bytes are gone reported,
//! confirmed with the bucket, recorded once, and forgotten when their bytes come back.

use std::io::{Read as _, Write as _};

use chrono::Utc;
use std::time::{Duration, Instant};

use integration_tests::fixtures::{object_exists, put_bytes, seed, state};
use integration_tests::reports::{self, Format, Row};
use integration_tests::{FAILPOINTS, TestContext};
use platform::keys::KeyLayout;
use reconcile::advance::Stop;
use reconcile::ingest::Ingested;
use reconcile::ranged;
use reconcile::read::{self, Report};
use reconcile::{self, Findings, Listing, ListingSource};
use sweep_lambda::Sweeper;
use uuid::Uuid;

use crate::pipeline::{actions, key};

/// Our keys: a workspace's folder, then any file name.
pub(crate) const PATTERN: &str = r"(?P<workspace>[0-9a-f-]{36})/[^/]+";

fn layout(ctx: &TestContext, prefixes: &str) -> KeyLayout {
    let settings = ctx.settings(&[("RECONCILE_PREFIXES", prefixes), ("RECONCILE_KEY_PATTERN", PATTERN)]);
    settings.reconcile.layout.expect("a layout")
}

/// Lists the bucket and compares, in `tx`: what the CLI's `reconcile --list` does.
async fn listing(ctx: &TestContext, tx: &mut sqlx::PgConnection, layout: &KeyLayout) -> (Listing, Ingested, Findings) {
    let listing = reconcile::open(tx, ListingSource::List, "test", Utc::now(), 0).await.expect("a listing");
    let ingested = read::ingest_listing(&ctx.s3, &ctx.bucket, tx, listing.id, layout).await.expect("listed");
    let grace = ctx.settings(&[]).grace;
    let findings = reconcile::compare(tx, &ctx.s3, &ctx.bucket, layout, listing, grace, 100).await.expect("compared");
    (listing, ingested, findings)
}

/// An asset row, `attached` three days, whose bytes were never put in the bucket.
pub(crate) async fn row_without_bytes(ctx: &TestContext, ws: Uuid, state: &str) -> (Uuid, String) {
    let key = key(ws);
    (row_without_bytes_at(ctx, ws, state, &key).await, key)
}

/// [`row_without_bytes`], at `key`.
pub(crate) async fn row_without_bytes_at(ctx: &TestContext, ws: Uuid, state: &str, key: &str) -> Uuid {
    let id = seed(ctx, ws, state, "3 days", key).await;
    delete_every_version(ctx, key).await;
    id
}

async fn delete_every_version(ctx: &TestContext, key: &str) {
    let versions = ctx.s3.list_object_versions().bucket(&ctx.bucket).prefix(key).send().await.expect("versions");
    for v in versions.versions() {
        ctx.s3
            .delete_object()
            .bucket(&ctx.bucket)
            .key(key)
            .set_version_id(v.version_id().map(str::to_owned))
            .send()
            .await
            .expect("delete a version");
    }
}

async fn count(ctx: &TestContext, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned())).fetch_one(ctx.pool()).await.expect(sql)
}

#[tokio::test]
async fn a_listing_counts_what_no_row_knows_refuses_a_shared_prefix_and_reports_rows_whose_bytes_are_gone() {
    let ctx = TestContext::new().await;
    let (ws, shared_ws) = (Uuid::new_v4(), Uuid::new_v4());
    let known = seed(&ctx, ws, "attached", "3 days", &key(ws)).await;
    let orphan = key(ws);
    put_bytes(&ctx.s3, &ctx.bucket, &orphan, b"orphan bytes").await;
    put_bytes(&ctx.s3, &ctx.bucket, "exports/report.csv", b"not ours").await;
    let another_writers = format!("{shared_ws}/backup.tar.gz/part-1");
    put_bytes(&ctx.s3, &ctx.bucket, &another_writers, b"another system's").await;
    // Deleted behind the row's back in a versioned bucket: a delete marker hides a kept version.
    let hidden_key = key(ws);
    let hidden = seed(&ctx, ws, "attached", "3 days", &hidden_key).await;
    ctx.s3.delete_object().bucket(&ctx.bucket).key(&hidden_key).send().await.expect("delete behind its back");
    let (never, _) = row_without_bytes(&ctx, ws, "retired").await;
    // An upload still pending has not necessarily sent its bytes: not lost.
    let (pending, _) = row_without_bytes(&ctx, ws, "pending").await;
    let layout = layout(&ctx, &format!("{ws}/,{shared_ws}/"));

    // A dry run: everything in a transaction rolled back.
    let mut tx = ctx.pool().begin().await.expect("tx");
    let (_, ingested, findings) = listing(&ctx, &mut tx, &layout).await;
    tx.rollback().await.expect("rollback");
    // A listing reads the managed prefixes only: exports/ is never asked about.
    assert_eq!(ingested, Ingested { keys: 3, outside: 0 }, "the known, the orphan and the other writer's key");
    assert_eq!(findings.unknown.len(), 1, "{findings:?}");
    let unknown = &findings.unknown[0];
    assert_eq!((unknown.workspace_id, unknown.keys, unknown.bytes, unknown.young), (ws, 1, 12, 1));
    assert_eq!(unknown.sample, vec![orphan.clone()]);
    assert_eq!(findings.off_pattern.len(), 1, "{findings:?}");
    assert_eq!(findings.off_pattern[0].prefix, format!("{shared_ws}/"));
    assert_eq!(findings.off_pattern[0].sample, vec![another_writers.clone()]);
    let lost: Vec<(Uuid, bool)> =
        findings.lost.iter().map(|l| (l.asset.asset_id, l.restorable_version.is_some())).collect();
    assert_eq!(lost.len(), 2, "{lost:?}");
    assert!(lost.contains(&(hidden, true)) && lost.contains(&(never, false)), "{lost:?}");
    assert!(!lost.iter().any(|(id, _)| *id == pending || *id == known));
    assert_eq!(count(&ctx, "SELECT count(*) FROM reconcile_listings").await, 0, "a dry run writes nothing");
    assert_eq!(count(&ctx, "SELECT count(*) FROM reconcile_keys").await, 0);

    // Recorded: each lost asset once, with its event; nothing else changes.
    let mut tx = ctx.pool().begin().await.expect("tx");
    let (first, _, findings) = listing(&ctx, &mut tx, &layout).await;
    assert_eq!(reconcile::record(&mut tx, first, &findings).await.expect("recorded"), 2);
    tx.commit().await.expect("commit");
    assert_eq!(actions(&ctx, hidden).await, vec!["lost"]);
    assert_eq!(actions(&ctx, never).await, vec!["lost"]);
    assert_eq!(count(&ctx, "SELECT count(*) FROM lost_assets").await, 2);
    assert_eq!(count(&ctx, "SELECT count(*) FROM reconcile_keys").await, 0, "a compared listing's keys go");
    for id in [known, hidden, never] {
        assert!(state(&ctx, id).await.is_some(), "a row is never deleted for lost bytes");
    }
    assert!(
        object_exists(&ctx.s3, &ctx.bucket, &orphan).await
            && object_exists(&ctx.s3, &ctx.bucket, &another_writers).await
    );
    assert_eq!(count(&ctx, "SELECT count(*) FROM stored_objects WHERE storage_key LIKE '%.png' AND NOT EXISTS (SELECT 1 FROM assets a WHERE a.storage_key = stored_objects.storage_key)").await, 0);

    // The hidden bytes come back; the next reconciliation forgets that finding and does not repeat the other.
    put_bytes(&ctx.s3, &ctx.bucket, &hidden_key, b"restored").await;
    let mut tx = ctx.pool().begin().await.expect("tx");
    let (second, _, findings) = listing(&ctx, &mut tx, &layout).await;
    assert_eq!(reconcile::record(&mut tx, second, &findings).await.expect("recorded"), 0);
    tx.commit().await.expect("commit");
    let still: Vec<Uuid> =
        sqlx::query_scalar("SELECT asset_id FROM lost_assets").fetch_all(ctx.pool()).await.expect("lost");
    assert_eq!(still, vec![never]);
    assert_eq!(actions(&ctx, never).await, vec!["lost"], "a lost asset is reported once");
    let recorded: serde_json::Value = sqlx::query_scalar("SELECT findings FROM reconcile_listings WHERE id = $1")
        .bind(second.id)
        .fetch_one(ctx.pool())
        .await
        .expect("findings");
    assert_eq!(recorded["lost"].as_array().map(Vec::len), Some(1), "{recorded}");
}

/// One row of a CSV inventory of all versions, as S3 writes it: every field quoted, the key URL-encoded.
pub(crate) fn row(
    bucket: &str,
    encoded_key: &str,
    latest: bool,
    delete_marker: bool,
    size: i64,
    modified: &str,
) -> String {
    format!(
        "\"{bucket}\",\"{encoded_key}\",\"v1\",\"{latest}\",\"{delete_marker}\",\"{size}\",\"{modified}\",\"etag\"\n"
    )
}

/// Writes an inventory report of the test's bucket as S3 does: `files` (CSV rows) gzipped under `{folder}data/`, and
/// the manifest in `{folder}{scan}/manifest.json`, taken a second from now; with a copy below `local` when given.
/// Returns the manifest's key.
pub(crate) async fn put_report(
    ctx: &TestContext,
    folder: &str,
    scan: &str,
    files: &[String],
    local: Option<&std::path::Path>,
) -> String {
    let files: Vec<Vec<u8>> = files.iter().map(|text| gzipped(text)).collect();
    put_files(ctx, folder, scan, Format::Csv, &files, local).await
}

/// Writes data `files` in `format` under `{folder}data/` and their manifest in `{folder}{scan}/manifest.json`,
/// taken a second from now, as S3 does; with a copy below `local` when given. Returns the manifest's key.
pub(crate) async fn put_files(
    ctx: &TestContext,
    folder: &str,
    scan: &str,
    format: Format,
    files: &[Vec<u8>],
    local: Option<&std::path::Path>,
) -> String {
    let b = ctx.bucket.as_str();
    let mut entries = Vec::new();
    for (i, bytes) in files.iter().enumerate() {
        let file_key = format!("{folder}data/{scan}-{i}.{}", format.extension());
        put_bytes(&ctx.s3, b, &file_key, bytes).await;
        if let Some(dir) = local {
            std::fs::create_dir_all(dir.join(format!("{folder}data"))).expect("dir");
            std::fs::write(dir.join(&file_key), bytes).expect("a local copy");
        }
        entries.push((file_key, bytes.len()));
    }
    let manifest = reports::manifest(b, format, &entries, Utc::now().timestamp_millis() + 1000);
    let manifest_key = format!("{folder}{scan}/manifest.json");
    put_bytes(&ctx.s3, b, &manifest_key, manifest.as_bytes()).await;
    if let Some(dir) = local {
        let path = dir.join(&manifest_key);
        std::fs::create_dir_all(path.parent().expect("a folder")).expect("dir");
        std::fs::write(&path, &manifest).expect("a local manifest");
    }
    manifest_key
}

/// 2025-01-01, in milliseconds: long before any test runs.
const OLD_MS: i64 = 1_735_689_600_000;

/// Each file's rows written in `format`, two rows to a row group or stripe.
fn written(bucket: &str, format: Format, files: &[Vec<Row>]) -> Vec<Vec<u8>> {
    files.iter().map(|rows| format.write(bucket, rows, 2)).collect()
}

fn gzipped(text: &str) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(text.as_bytes()).expect("gzip");
    encoder.finish().expect("gzip")
}

#[tokio::test]
async fn an_inventory_report_in_each_format_s3_writes_is_read_from_s3_and_from_disk_alike() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let known = key(ws);
    seed(&ctx, ws, "attached", "3 days", &known).await;
    let (missing_bytes, _) = row_without_bytes(&ctx, ws, "attached").await;
    // Written after S3's scan in truth, though its row is older: the report lacks it, the bucket holds it.
    seed(&ctx, ws, "attached", "3 days", &key(ws)).await;
    let old = OLD_MS;
    let young = Utc::now().timestamp_millis();
    let version =
        |key: &str, latest: bool, delete_marker: bool| Row { latest, delete_marker, ..Row::current(key, 7, old) };
    // CSV writes a key URL-encoded (a space as `+`, a `+` as `%2B`); Parquet and ORC write it as it is, so a key
    // that looks encoded is taken as written.
    let (spaced, looks_encoded) = (format!("{ws}/an old photo+1.png"), format!("{ws}/100%2Bsure ü.png"));
    let files = [
        vec![Row::current(&known, 100, old), Row::current(&spaced, 1000, old), Row::current(&looks_encoded, 3, old)],
        vec![
            version(&format!("{ws}/replaced.png"), false, false),
            version(&format!("{ws}/deleted.png"), true, true),
            Row::current("exports/x.csv", 5, old),
        ],
        vec![Row::current(&format!("{ws}/fresh.png"), 30, young)],
    ];
    let layout = layout(&ctx, &format!("{ws}/"));
    let grace = ctx.settings(&[]).grace;
    let b = ctx.bucket.clone();

    for format in Format::ALL {
        let dir = std::env::temp_dir().join(format!("inventory-{}", Uuid::new_v4()));
        // A row group (Parquet) or stripe (ORC) per row: a file of several.
        let written: Vec<Vec<u8>> = files.iter().map(|rows| format.write(&b, rows, 1)).collect();
        let folder = format!("inventory/{b}/{}/", format.name());
        let manifest_key = put_files(&ctx, &folder, "2026-12-01T00-00Z", format, &written, Some(&dir)).await;
        let local = dir.join(&manifest_key);
        for location in [format!("s3://{b}/{manifest_key}"), local.display().to_string()] {
            let report = Report::open(&ctx.s3, &location, &b).await.expect("the report opens");
            assert_eq!(report.manifest.files.len(), 3);
            let mut tx = ctx.pool().begin().await.expect("tx");
            let listing = reconcile::open(&mut tx, ListingSource::Inventory, &location, report.taken_at(), 3)
                .await
                .expect("a listing");
            let mut per_file = Vec::new();
            for file in 0..3 {
                per_file.push(report.ingest_file(&mut tx, listing.id, &layout, file).await.expect("a file"));
            }
            assert_eq!(
                per_file,
                vec![
                    Ingested { keys: 3, outside: 0 },
                    Ingested { keys: 0, outside: 1 },
                    Ingested { keys: 1, outside: 0 }
                ],
                "{format:?} from {location}: noncurrent versions and delete markers are not objects"
            );
            let times: Vec<(String, i64, chrono::DateTime<Utc>)> = sqlx::query_as(
                "SELECT storage_key, byte_size, last_modified FROM reconcile_keys WHERE listing_id = $1 ORDER BY 1",
            )
            .bind(listing.id)
            .fetch_all(&mut *tx)
            .await
            .expect("keys");
            let fresh = times.iter().find(|(k, _, _)| k.ends_with("fresh.png")).expect("the fresh key");
            assert_eq!((fresh.1, fresh.2.timestamp_millis()), (30, young), "{format:?}: size and time as written");
            let findings =
                reconcile::compare(&mut tx, &ctx.s3, &b, &layout, listing, grace, 100).await.expect("compared");
            tx.rollback().await.expect("rollback");
            assert_eq!(findings.unknown.len(), 1, "{format:?}: {findings:?}");
            let unknown = &findings.unknown[0];
            assert_eq!((unknown.keys, unknown.bytes, unknown.young), (3, 1033, 1), "{format:?}: {unknown:?}");
            let mut sample = unknown.sample.clone();
            sample.sort();
            assert_eq!(sample, vec![looks_encoded.clone(), spaced.clone(), format!("{ws}/fresh.png")], "{format:?}");
            assert!(findings.off_pattern.is_empty(), "{findings:?}");
            let lost: Vec<Uuid> = findings.lost.iter().map(|l| l.asset.asset_id).collect();
            assert_eq!(lost, vec![missing_bytes], "{format:?}: {findings:?}");
            assert_eq!(findings.present_after_all, 1, "confirmed present, so not lost: {findings:?}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[tokio::test]
async fn the_sweep_reads_the_newest_report_a_file_at_a_time_resumes_next_pass_and_records_what_it_found() {
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let known = key(ws);
    seed(&ctx, ws, "attached", "3 days", &known).await;
    let (lost, _) = row_without_bytes(&ctx, ws, "released").await;
    let b = ctx.bucket.clone();
    // The first two files hold no key of the managed prefix: a pass that reads only them writes no row.
    let files: Vec<Vec<Row>> = vec![
        vec![Row::current("exports/a.csv", 5, OLD_MS)],
        vec![Row::current("exports/b.csv", 5, OLD_MS)],
        (0..3)
            .map(|i| Row::current(&format!("{ws}/orphan-{i}.png"), 10, OLD_MS))
            .chain([Row::current(&known, 100, OLD_MS)])
            .collect(),
    ];
    let folder = format!("inventory/{b}/daily/");
    // An older report in CSV (the team has since moved its inventory to Parquet), and the folders S3 writes beside
    // the dated ones: only the newest report is read.
    let older = written(&b, Format::Csv, &files[..1]);
    put_files(&ctx, &folder, "2026-11-29T00-00Z", Format::Csv, &older, None).await;
    put_bytes(&ctx.s3, &b, &format!("{folder}hive/dt=2026-11-30-00-00/symlink.txt"), b"ignored").await;
    let parquet = written(&b, Format::Parquet, &files);
    let newest = put_files(&ctx, &folder, "2026-11-30T00-00Z", Format::Parquet, &parquet, None).await;
    let prefixes = format!("{ws}/");
    let inventory = format!("s3://{b}/{folder}");
    let overrides = [
        ("RECONCILE_PREFIXES", prefixes.as_str()),
        ("RECONCILE_KEY_PATTERN", PATTERN),
        ("RECONCILE_INVENTORY", inventory.as_str()),
        ("RECONCILE_TIME_SHARE_PERCENT", "1"),
    ];
    let sweeper =
        || Sweeper::new(ctx.pool().clone(), ctx.sqs.clone(), ctx.settings(&overrides)).with_storage(ctx.s3.clone());

    // 1 % of a 600 s pass is 6 s, and each file takes 4 s: the second file starts before the share runs out, the
    // third would not.
    fail::cfg("reconcile::file", "sleep(4000)").expect("failpoint");
    let first = sweeper().run_pass(Instant::now() + Duration::from_secs(600)).await.expect("sweep pass");
    fail::remove("reconcile::file");
    let progress = first.reconcile.clone().expect("reconciled");
    assert_eq!(progress.manifest.as_deref(), Some(format!("s3://{b}/{newest}").as_str()));
    assert_eq!(progress.stopped, Stop::TimeShare, "{progress:?}");
    assert_eq!((progress.files_read, progress.files_done, progress.files_total), (2, 2, 3), "{progress:?}");
    assert!(progress.compared.is_none());
    assert!(actions(&ctx, lost).await.is_empty(), "nothing is recorded before every file is in");

    let second = sweeper().run_pass(Instant::now() + Duration::from_secs(600)).await.expect("sweep pass");
    let resumed = second.reconcile.clone().expect("reconciled");
    assert_eq!(resumed.stopped, Stop::Compared, "{resumed:?}");
    assert_eq!((resumed.files_done, resumed.files_total), (3, 3));
    assert_eq!((progress.keys_read, resumed.files_read), (0, 1), "resumed, not read again: {resumed:?}");
    assert_eq!(resumed.keys_read, 4);
    let compared = resumed.compared.clone().expect("compared");
    assert_eq!((compared.unknown_keys, compared.unknown_bytes, compared.lost, compared.newly_lost), (3, 30, 1, 1));
    assert_eq!(actions(&ctx, lost).await, vec!["lost"]);
    let line = sweep_lambda::record::metrics_line(&second);
    assert!(line.contains("\"AssetsLost\":1") && line.contains("\"UnknownKeys\":3"), "{line}");
    let recorded: serde_json::Value = sqlx::query_scalar("SELECT reconcile FROM sweep_runs WHERE id = $1")
        .bind(second.run_id)
        .fetch_one(ctx.pool())
        .await
        .expect("the run row");
    assert_eq!(recorded["stopped"], "compared", "{recorded}");

    // The same report is not read twice, and the lost asset's row is kept.
    let third = sweeper().run_pass(Instant::now() + Duration::from_secs(600)).await.expect("sweep pass");
    assert_eq!(third.reconcile.expect("reconciled").stopped, Stop::NoNewReport);
    assert_eq!(state(&ctx, lost).await.as_deref(), Some("released"), "a lost asset's row is kept");
}

/// Sweep passes with reconciliation of the inventory reports in `folder`, 1 % of each 600 s pass.
fn reconciling_sweeper(ctx: &TestContext, overrides: &[(&str, &str)]) -> Sweeper {
    Sweeper::new(ctx.pool().clone(), ctx.sqs.clone(), ctx.settings(overrides)).with_storage(ctx.s3.clone())
}

#[tokio::test]
async fn a_report_a_crash_emptied_is_read_again_and_one_stuck_unfinished_is_given_up_for_a_newer_one() {
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let known = key(ws);
    seed(&ctx, ws, "attached", "3 days", &known).await;
    let b = ctx.bucket.clone();
    // In ORC: the resume is a data file at a time whatever the format.
    let rows: Vec<Vec<Row>> = (0..3)
        .map(|i| vec![Row::current(&format!("{ws}/orphan-{i}.png"), 10, OLD_MS), Row::current(&known, 100, OLD_MS)])
        .collect();
    let files = written(&b, Format::Orc, &rows);
    let folder = format!("inventory/{b}/daily/");
    put_files(&ctx, &folder, "2026-11-28T00-00Z", Format::Orc, &files, None).await;
    let (prefixes, inventory) = (format!("{ws}/"), format!("s3://{b}/{folder}"));
    let overrides = [
        ("RECONCILE_PREFIXES", prefixes.as_str()),
        ("RECONCILE_KEY_PATTERN", PATTERN),
        ("RECONCILE_INVENTORY", inventory.as_str()),
        ("RECONCILE_TIME_SHARE_PERCENT", "1"),
    ];
    let pass = || async {
        reconciling_sweeper(&ctx, &overrides)
            .run_pass(Instant::now() + Duration::from_secs(600))
            .await
            .expect("sweep pass")
    };

    fail::cfg("reconcile::file", "sleep(4000)").expect("failpoint");
    let first = pass().await.reconcile.expect("reconciled");
    fail::remove("reconcile::file");
    assert_eq!((first.files_done, first.keys_read), (2, 4), "{first:?}");
    // A crash of the database empties the unlogged keys: the report is read again from its first file.
    sqlx::query("TRUNCATE reconcile_keys").execute(ctx.pool()).await.expect("truncate");
    let again = pass().await.reconcile.expect("reconciled");
    assert_eq!((again.files_read, again.stopped), (3, Stop::Compared), "{again:?}");
    assert_eq!(again.compared.expect("compared").unknown_keys, 3, "no key is lost to the crash");

    // A report whose second file expired before it was read: every pass fails on it, with the reason recorded...
    let stuck = put_files(&ctx, &folder, "2026-11-29T00-00Z", Format::Orc, &files, None).await;
    let gone = format!("{folder}data/2026-11-29T00-00Z-1.orc");
    ctx.s3.delete_object().bucket(&b).key(&gone).send().await.expect("expire a data file");
    for _ in 0..2 {
        let failed = pass().await;
        assert!(failed.reconcile.is_none());
        let error = failed.reconcile_error.expect("the reason");
        assert!(error.contains(&gone), "{error}");
    }
    // ...until a newer report supersedes it: given up, with why, and the newer one read.
    let newer = put_files(&ctx, &folder, "2026-11-30T00-00Z", Format::Orc, &files[..1], None).await;
    let resumed = pass().await.reconcile.expect("reconciled");
    assert_eq!(resumed.abandoned.as_deref(), Some(format!("s3://{b}/{stuck}").as_str()), "{resumed:?}");
    assert_eq!(resumed.manifest.as_deref(), Some(format!("s3://{b}/{newer}").as_str()));
    assert_eq!(resumed.stopped, Stop::Compared);
    let why: String = sqlx::query_scalar("SELECT abandoned_why FROM reconcile_listings WHERE location = $1")
        .bind(format!("s3://{b}/{stuck}"))
        .fetch_one(ctx.pool())
        .await
        .expect("the given-up listing");
    assert!(why.contains("superseded by"), "{why}");
    let left: i64 =
        sqlx::query_scalar("SELECT count(*) FROM reconcile_keys").fetch_one(ctx.pool()).await.expect("keys");
    assert_eq!(left, 0, "a given-up or compared report leaves no keys behind");
}

#[tokio::test]
async fn an_object_read_at_any_offset_costs_a_request_a_window_keeps_few_and_refuses_a_length_its_manifest_got_wrong() {
    let ctx = TestContext::new().await;
    // More windows than are kept, not a multiple of the window, and every byte telling where it is.
    let window = ranged::WINDOW as usize;
    let len = (ranged::KEPT + 1) * window + 12_345;
    let bytes: Vec<u8> = (0..len).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let key = "inventory/data/big.parquet";
    put_bytes(&ctx.s3, &ctx.bucket, key, &bytes).await;
    let (s3, b, runtime) = (ctx.s3.clone(), ctx.bucket.clone(), tokio::runtime::Handle::current());
    tokio::task::spawn_blocking(move || {
        let object = ranged::Object::new(s3.clone(), &b, key, len as u64, runtime.clone());
        // Front to back in small reads, as a page reader asks: a request per window, not per read.
        let (mut read, mut buffer) = (Vec::new(), vec![0; 64 * 1024]);
        let mut reader = object.reader(0);
        loop {
            let n = reader.read(&mut buffer).expect("a read");
            if n == 0 {
                break;
            }
            read.extend_from_slice(&buffer[..n]);
        }
        assert!(read == bytes, "the bytes as stored");
        let windows = ranged::KEPT as u64 + 2;
        assert_eq!(object.requests(), windows, "a request a window");
        let again = object.bytes((len - 1000) as u64, 1000).expect("kept");
        assert_eq!((&again[..], object.requests()), (&bytes[len - 1000..], windows), "the last window, kept");
        // An ask of a window or more is fetched as asked, and not kept.
        let whole = object.bytes(1, ranged::WINDOW + 1).expect("a large ask");
        assert!(whole[..] == bytes[1..window + 2]);
        assert_eq!(object.requests(), windows + 1);

        // Asked a window apart: the oldest window goes once more are held than are kept.
        let object = ranged::Object::new(s3.clone(), &b, key, len as u64, runtime.clone());
        for i in 0..=ranged::KEPT {
            assert!(object.bytes((i * window) as u64, 20).expect("a read")[..] == bytes[i * window..][..20]);
        }
        let kept = ranged::KEPT as u64 + 1;
        assert_eq!(object.requests(), kept);
        object.bytes((ranged::KEPT * window + 100) as u64, 20).expect("the newest, kept");
        assert_eq!(object.requests(), kept);
        object.bytes(100, 20).expect("the oldest, let go");
        assert_eq!(object.requests(), kept + 1, "the oldest window was let go");

        let past = object.bytes(len as u64 - 5, 10).expect_err("past the end");
        assert!(past.to_string().contains("run past the end of s3://"), "{past}");
        // A manifest that got the file's size wrong: the first GET finds out, and says both.
        let wrong = ranged::Object::new(s3, &b, key, len as u64 + 1, runtime);
        let e = wrong.bytes(0, 10).expect_err("a wrong length");
        assert!(e.to_string().contains(&format!("is {len} bytes, not the {} its manifest says", len + 1)), "{e}");
    })
    .await
    .expect("the reads");
}

#[tokio::test]
async fn a_parquet_or_orc_report_this_product_cannot_read_is_refused_naming_the_file_and_what_is_wrong() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let b = ctx.bucket.clone();
    let layout = layout(&ctx, &format!("{ws}/"));
    let good = vec![Row::current(&key(ws), 10, OLD_MS), Row::current(&key(ws), 20, OLD_MS)];
    let ingest_error = |manifest_key: String| {
        let (ctx, layout) = (&ctx, &layout);
        async move {
            let location = format!("s3://{}/{manifest_key}", ctx.bucket);
            let report = Report::open(&ctx.s3, &location, &ctx.bucket).await.expect("the manifest is fine");
            let mut tx = ctx.pool().begin().await.expect("tx");
            let listing = reconcile::open(&mut tx, ListingSource::Inventory, &location, report.taken_at(), 1)
                .await
                .expect("a listing");
            let e = report.ingest_file(&mut tx, listing.id, layout, 0).await.expect_err("refused");
            tx.rollback().await.expect("rollback");
            e.to_string()
        }
    };

    for format in [Format::Parquet, Format::Orc] {
        let folder = format!("inventory/{b}/{}/", format.name());
        let data = |scan: &str| format!("{folder}data/{scan}-0.{}", format.extension());
        // Gzipped CSV under a manifest that says otherwise.
        let csv = Format::Csv.write(&b, &good, 2);
        let e = ingest_error(put_files(&ctx, &folder, "2026-11-01T00-00Z", format, &[csv], None).await).await;
        assert!(e.starts_with(&format!("inventory file {} cannot be read: ", data("2026-11-01T00-00Z"))), "{e}");
        // Cut short, as an interrupted copy leaves it: its index at the end is gone.
        let whole = format.write(&b, &good, 1);
        let cut = whole[..whole.len() / 2].to_vec();
        let e = ingest_error(put_files(&ctx, &folder, "2026-11-02T00-00Z", format, &[cut], None).await).await;
        assert!(e.starts_with(&format!("inventory file {} cannot be read: ", data("2026-11-02T00-00Z"))), "{e}");
        // A current object without its size: named by file, row and key.
        let sizeless = vec![good[0].clone(), Row { size: None, ..good[1].clone() }];
        let file = format.write(&b, &sizeless, 2);
        let e = ingest_error(put_files(&ctx, &folder, "2026-11-03T00-00Z", format, &[file], None).await).await;
        let expected =
            format!("inventory file {}, row 2: the size of {:?} is missing", data("2026-11-03T00-00Z"), good[1].key);
        assert_eq!(e, expected);
    }

    // A file whose own schema lacks a column its manifest promised.
    let schema = std::sync::Arc::new(arrow_schema::Schema::new(vec![
        arrow_schema::Field::new("bucket", arrow_schema::DataType::Utf8, false),
        arrow_schema::Field::new("key", arrow_schema::DataType::Utf8, false),
    ]));
    let mut orc = Vec::new();
    let mut writer = orc_rust::ArrowWriterBuilder::new(&mut orc, schema.clone()).try_build().expect("a writer");
    let columns: Vec<arrow_array::ArrayRef> = vec![
        std::sync::Arc::new(arrow_array::StringArray::from(vec![b.as_str()])),
        std::sync::Arc::new(arrow_array::StringArray::from(vec![key(ws)])),
    ];
    writer.write(&arrow_array::RecordBatch::try_new(schema, columns).expect("a batch")).expect("written");
    writer.close().expect("a file");
    let folder = format!("inventory/{b}/narrow/");
    let e = ingest_error(put_files(&ctx, &folder, "2026-11-04T00-00Z", Format::Orc, &[orc], None).await).await;
    assert!(e.ends_with("its schema has no size column (it has bucket, key)"), "{e}");

    // A manifest whose schema lacks it is refused before any file is read.
    let manifest = reports::manifest(&b, Format::Parquet, &[], OLD_MS).replace(" optional int64 size;", "");
    put_bytes(&ctx.s3, &b, "inventory/sizeless/manifest.json", manifest.as_bytes()).await;
    let e = Report::open(&ctx.s3, &format!("s3://{b}/inventory/sizeless/manifest.json"), &b)
        .await
        .expect_err("refused")
        .to_string();
    assert!(e.contains("has no size field; add Size and Last modified to the inventory's fields"), "{e}");
}
