//! Freed against billed at a real application's size: what the daily comparison costs, and what it would cost at a
//! billion objects, beside the ways one would write it first, in one run.
//!
//! The application: `BENCH_OBJECTS` (1 000 000) asset rows with their stored objects, in 1 000 workspaces, their
//! usage totals counted; 100 000 deletes and purges over the last 90 days; a reconciliation's findings.
//!
//! Printed, each the best of several runs:
//! - the comparison as the sweep makes it (`ledger::drift::believed` then `compare`): from the folded
//!   per-workspace totals, the settlements within the window (by their time index) and the newest findings;
//! - baseline one, the believed side by scanning the rows (`sum(byte_size)` over `stored_objects`);
//! - baseline two, the reported side from an inventory report instead of S3's storage metrics: 1 000 000 keys of
//!   gzipped CSV decoded and their sizes added up;
//! - the pass's money (`ledger::holdings::waste`, every workspace) and the CLI's ledger (`ledger::holdings::ledger`,
//!   which reads the asset rows);
//!
//! with the ratios to the comparison, and each extrapolated to 1 000 000 000 objects: a scan grows with the rows, the
//! comparison with the workspaces and the settlements in the window only.
//!
//! Then the operator's commands as an operator runs them (the `asset-sweeper` binary, its queue and bucket on
//! LocalStack): `status` and `plan` on this database beside the same commands on an empty one, the fastest of three.
//!
//! Run with `scripts/bench-drift` (Postgres and LocalStack; it builds the CLI first).

// Counts in tests and benchmarks are small and known: their casts stay as written.
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]

use std::time::{Duration, Instant};

use chrono::Utc;
use integration_tests::reports::{Format, Row};
use integration_tests::{TestContext, TestDatabase};
use ledger::Window;
use ledger::drift::{self, Reported};
use ledger::holdings;
use sqlx::{AssertSqlSafe, PgPool};

const BILLION: f64 = 1e9;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|n| n.parse().ok()).unwrap_or(default)
}

async fn exec(pool: &PgPool, sql: &str) {
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned())).execute(pool).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The best of `runs` timings of `f`.
async fn best<F, Fut, T>(runs: usize, mut f: F) -> (Duration, T)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let mut best: Option<(Duration, T)> = None;
    for _ in 0..runs {
        let started = Instant::now();
        let value = f().await;
        let took = started.elapsed();
        if best.as_ref().is_none_or(|(b, _)| took < *b) {
            best = Some((took, value));
        }
    }
    best.expect("at least one run")
}

/// The `asset-sweeper` binary beside this benchmark's (`scripts/bench-drift` builds it).
fn cli_binary() -> std::path::PathBuf {
    let bench = std::env::current_exe().expect("the benchmark's path");
    let dir = bench.parent().and_then(std::path::Path::parent).expect("the target directory");
    let binary = dir.join(format!("asset-sweeper{}", std::env::consts::EXE_SUFFIX));
    assert!(binary.exists(), "{} is not built: run scripts/bench-drift", binary.display());
    binary
}

/// The fastest of three runs of the CLI with `args` on the database at `url`, with `ctx`'s queue and bucket.
fn time_cli(url: &str, ctx: &TestContext, args: &[&str]) -> Duration {
    (0..3)
        .map(|_| {
            let started = Instant::now();
            let output = std::process::Command::new(cli_binary())
                .args(args)
                .env("DATABASE_URL", url)
                .env_remove("DATABASE_SECRET_ARN")
                .env("CLEANUP_QUEUE_URL", &ctx.queue.url)
                .env("ASSET_BUCKET", &ctx.bucket)
                .env("S3_FORCE_PATH_STYLE", "true")
                .output()
                .expect("the CLI runs");
            let took = started.elapsed();
            // `status` says whether a person is needed by its exit code (1); anything else is the command failing.
            assert!(
                matches!(output.status.code(), Some(0 | 1)),
                "{args:?}: {}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
            took
        })
        .min()
        .expect("three runs")
}

#[tokio::main]
async fn main() {
    let objects = env_number("BENCH_OBJECTS", 1_000_000);
    let db = TestDatabase::new().await;
    let pool = db.pool.clone();
    let started = Instant::now();
    // Loading, not the application writing: the triggers would record each row as a change to fold.
    exec(&pool, "ALTER TABLE assets DISABLE TRIGGER USER").await;
    exec(
        &pool,
        &format!(
            "CREATE TABLE numbered AS
               SELECT n, gen_random_uuid() AS id,
                      ('00000000-0000-4000-8000-' || lpad((n % 1000)::text, 12, '0'))::uuid AS ws
                 FROM generate_series(1, {objects}) n;
             INSERT INTO stored_objects (storage_key, content_hash, byte_size)
             SELECT ws || '/' || id || '.png', 'sha256:' || n, 100000 + n % 1000 FROM numbered;
             INSERT INTO assets (id, workspace_id, storage_key, content_hash, byte_size, state, retired_at, purge_after,
                                 due_at)
             SELECT id, ws, ws || '/' || id || '.png', 'sha256:' || n, 100000 + n % 1000,
                    (ARRAY['attached', 'attached', 'attached', 'released', 'retired'])[1 + n % 5],
                    CASE WHEN n % 5 = 4 THEN now() END, CASE WHEN n % 5 = 4 THEN now() + interval '30 days' END,
                    CASE WHEN n % 5 = 4 THEN now() + interval '30 days' WHEN n % 5 = 3 THEN now() + interval '1 day' END
               FROM numbered;
             DROP TABLE numbered;
             INSERT INTO settlement_events (occurred_at, asset_id, workspace_id, storage_key, action, evidence,
                                            bytes_freed, code_version)
             SELECT now() - (n % 90) * interval '1 day', gen_random_uuid(),
                    ('00000000-0000-4000-8000-' || lpad((n % 1000)::text, 12, '0'))::uuid, 'gone/' || n,
                    CASE WHEN n % 2 = 0 THEN 'delete' ELSE 'purge' END, '{{}}', 100000, 'bench'
               FROM generate_series(1, 100000) n;
             INSERT INTO reconcile_listings (source, location, taken_at, compared_at, findings)
             SELECT 'list', 'bench', now(), now(),
                    jsonb_build_object('adopted', '[]'::jsonb, 'unknown', jsonb_agg(jsonb_build_object(
                        'prefix', '', 'workspace_id', ('00000000-0000-4000-8000-' || lpad(n::text, 12, '0')),
                        'keys', 10, 'bytes', 1000000, 'young', 0, 'sample', '[]'::jsonb)))
               FROM generate_series(0, 999) n;
             ALTER TABLE assets ENABLE TRIGGER USER;
             SELECT asset_sweeper_recount_usage();"
        ),
    )
    .await;
    // Outside the load's implicit transaction, where VACUUM cannot run.
    exec(&pool, "VACUUM ANALYZE stored_objects, assets, settlement_events, workspace_usage").await;
    println!(
        "loaded {objects} objects in 1 000 workspaces, 100 000 settlements, in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let day = Utc::now().date_naive() - chrono::Days::new(1);
    let window = Window::Days(30);
    let (comparison, (believed, expired)) = best(5, || {
        let pool = pool.clone();
        async move {
            drift::believed(&mut pool.acquire().await.expect("a connection"), window, day).await.expect("believed")
        }
    })
    .await;
    let reported = Reported {
        metric_day: day,
        bytes: believed.bytes(),
        objects: None,
        by_type: [("StandardStorage".to_owned(), believed.bytes())].into_iter().collect(),
    };
    let compared = drift::compare("bench", reported, believed, expired, 20, false);
    assert!(!compared.drifted(), "{compared:?}");

    // Baseline one: the rows' bytes summed where they are.
    let (scan, scanned) = best(3, || {
        let pool = pool.clone();
        async move {
            sqlx::query_as::<_, (i64, i64)>("SELECT coalesce(sum(byte_size), 0)::bigint, count(*) FROM stored_objects")
                .fetch_one(&pool)
                .await
                .expect("the scan")
        }
    })
    .await;
    assert_eq!(scanned.0 as u64, believed.current.bytes, "the totals agree with the rows");

    // Baseline two: S3's side from an inventory report: 1 000 000 keys of gzipped CSV, decoded and summed.
    let rows: Vec<Row> =
        (0..objects).map(|n| Row::current(&format!("ws/{n}.png"), 100_000, 1_700_000_000_000)).collect();
    let csv = Format::Csv.write("bench", &rows, 100_000);
    drop(rows);
    let columns = reconcile::inventory::csv::Columns::of(Format::Csv.schema()).expect("columns");
    let (inventory, summed) = best(3, || {
        let csv = &csv;
        async move {
            let mut total = 0_i64;
            let body = std::io::BufReader::new(&csv[..]);
            reconcile::inventory::csv::read_file("bench.csv.gz", body, columns, 10_000, |keys| {
                total += keys.iter().map(|k| k.byte_size).sum::<i64>();
                Ok(())
            })
            .expect("decoded");
            total
        }
    })
    .await;
    assert_eq!(summed, objects as i64 * 100_000);

    let (waste, _) = best(3, || {
        let pool = pool.clone();
        async move { holdings::waste(&mut pool.acquire().await.expect("a connection"), window).await.expect("waste") }
    })
    .await;
    let (ledger, _) = best(3, || {
        let pool = pool.clone();
        async move {
            holdings::ledger(&mut pool.acquire().await.expect("a connection"), None, window).await.expect("ledger")
        }
    })
    .await;
    // One workspace counted exactly from its rows (`usage <workspace>`, `explain`).
    let one = uuid::Uuid::parse_str("00000000-0000-4000-8000-000000000007").expect("a workspace");
    let (exact, _) = best(3, || {
        let pool = pool.clone();
        async move {
            holdings::ledger(&mut pool.acquire().await.expect("a connection"), Some(one), window).await.expect("ledger")
        }
    })
    .await;

    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let per_billion = |d: Duration| d.as_secs_f64() * BILLION / objects as f64;
    println!("\nfreed against billed, {objects} objects (best of several runs):");
    let in_window: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM settlement_events WHERE action IN ('delete', 'purge') AND occurred_at > now() - interval '31 days'",
    )
    .fetch_one(&pool)
    .await
    .expect("count");
    println!(
        "  comparison as the sweep makes it (totals, window, findings): {:>9.1} ms    1.0×   at 1e9 objects: the totals stay ({} workspaces); the settlements in the window ({in_window} here) grow with deletions: {:.0} s if they grow with the bucket",
        ms(comparison),
        1000,
        per_billion(comparison)
    );
    println!(
        "  baseline: scan the rows' bytes                             {:>9.1} ms {:>6.1}×   at 1e9 objects: {:.0} s",
        ms(scan),
        ms(scan) / ms(comparison),
        per_billion(scan)
    );
    println!(
        "  baseline: decode an inventory report and add it up         {:>9.1} ms {:>6.1}×   at 1e9 objects: {:.0} s ({:.1} MB of gzipped CSV here)",
        ms(inventory),
        ms(inventory) / ms(comparison),
        per_billion(inventory),
        csv.len() as f64 / 1e6
    );
    println!(
        "  the pass's money (waste per workspace, from totals)        {:>9.1} ms {:>6.1}×   at 1e9 objects: about the same",
        ms(waste),
        ms(waste) / ms(comparison)
    );
    println!(
        "  the CLI's ledger of every workspace (status, plan)         {:>9.1} ms {:>6.1}×   at 1e9 objects: grows with the workspaces ({:.0} s if it grew with the objects)",
        ms(ledger),
        ms(ledger) / ms(comparison),
        per_billion(ledger)
    );
    println!(
        "  the CLI's ledger of one workspace (usage WS, its rows)     {:>9.1} ms {:>6.1}×   at 1e9 objects: grows with that workspace's rows ({} here)",
        ms(exact),
        ms(exact) / ms(comparison),
        objects / 1000
    );
    println!(
        "  S3's side itself: two CloudWatch calls (ListMetrics, GetMetricData), whatever the bucket's size; once a day"
    );

    // The operator's commands: on this database, and on an empty one (the queue and bucket's own database).
    let ctx = TestContext::new().await;
    println!(
        "\nthe operator's commands, {objects} assets in 1 000 workspaces against an empty database (fastest of three):"
    );
    for args in [&["status", "--json"][..], &["plan"][..]] {
        let at_size = time_cli(&db.url, &ctx, args);
        let empty = time_cli(&ctx.db.url, &ctx, args);
        println!(
            "  {:<14} {:>9.1} ms   empty: {:>7.1} ms   {:>5.1}×   (goal: under 2 s)",
            args[0],
            ms(at_size),
            ms(empty),
            ms(at_size) / ms(empty)
        );
    }
}
