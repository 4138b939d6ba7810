//! Consumer benchmarks against Postgres and LocalStack, each beside its baseline in the same run:
//!
//! 1. Reference recheck latency (p50, p99) with 10 000, 100 000 and 1 000 000 owner documents, against a naive
//!    baseline that walks the JSON of every owner document for each asset.
//! 2. Settlement throughput (assets/s): batches of ten from the real queue, two consumers at once.
//!
//! Run with `scripts/bench-consumer`. `BENCH_OWNER_ROWS=10000,100000,1000000` sets the sizes,
//! `BENCH_SETTLE_ASSETS` (2000) the throughput run.

// Counts in tests and benchmarks are small and known: their casts, assertions included, stay as written.
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]

use std::time::{Duration, Instant};

use consumer_lambda::Consumer;
use integration_tests::fixtures::seed;
use integration_tests::{TestContext, acknowledge, receive_event};
use platform::AssetId;
use schema::recheck;
use sqlx::postgres::PgPoolOptions;
use sweep_lambda::Sweeper;
use uuid::Uuid;

const ASSETS: i64 = 2_000;
const SAMPLES: usize = 400;
const BASELINE_SAMPLES: usize = 10;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Owner documents: `rows` pages whose body nests one id several levels deep; one in ten names an asset.
/// Returns the assets that some document names.
async fn owner_documents(ctx: &TestContext, rows: i64) -> Vec<Uuid> {
    let pool = ctx.pool();
    sqlx::raw_sql(
        "CREATE TABLE pages (id bigserial PRIMARY KEY, body jsonb NOT NULL);
         INSERT INTO asset_reference_sources (table_name, column_name, json_path) VALUES ('pages', 'body', '$.**');",
    )
    .execute(pool)
    .await
    .expect("owner table");
    let ws = Uuid::new_v4();
    let assets: Vec<Uuid> = integration_tests::fixtures::insert_released(pool, ws, ASSETS, "1 day", 100).await;
    sqlx::query(
        "INSERT INTO pages (body)
         SELECT jsonb_build_object(
                    'title', 'page ' || i,
                    'blocks', jsonb_build_array(
                        jsonb_build_object('type', 'text', 'text', repeat('lorem ipsum ', 8)),
                        jsonb_build_object('type', 'figure', 'image', jsonb_build_object(
                            'asset', CASE WHEN i % 10 = 0 THEN ($1::uuid[])[1 + (i / 10) % $2] ELSE gen_random_uuid() END::text,
                            'alt', 'figure ' || i))))
           FROM generate_series(1, $3) AS i",
    )
    .bind(&assets)
    .bind(assets.len() as i64)
    .bind(rows)
    .execute(pool)
    .await
    .expect("documents");
    // The index an application declaring a `$.**` source is told to create (jsonb_ops answers `@?` on `**`).
    sqlx::raw_sql("CREATE INDEX pages_body ON pages USING gin (body); ANALYZE pages;")
        .execute(pool)
        .await
        .expect("index");
    integration_tests::install_guards(pool).await;
    // Documents 10, 20, ... name assets 2, 3, ... (1-based), wrapping around.
    let named = ((rows / 10) as usize).min(assets.len());
    assets.into_iter().cycle().skip(1).take(named).collect()
}

struct Latency {
    p50: Duration,
    p99: Duration,
}

async fn recheck_latency(rows: i64) -> (Latency, Latency) {
    let ctx = TestContext::new().await;
    let assets = owner_documents(&ctx, rows).await;
    let mut conn = ctx.pool().acquire().await.expect("connection");
    let map = schema::check(&mut conn, (&ctx.settings(&[])).into()).await.expect("valid map");

    let mut fast = Vec::with_capacity(SAMPLES);
    let mut referenced = 0;
    for (i, asset) in assets.iter().cycle().take(SAMPLES).enumerate() {
        // Half referenced assets, half ids no document names (the full answer for a destructive settle).
        let id = if i % 2 == 0 { *asset } else { Uuid::new_v4() };
        let started = Instant::now();
        let found = recheck::recheck(&mut conn, &map, AssetId(id)).await.expect("recheck");
        fast.push(started.elapsed());
        referenced += usize::from(found.referenced_by().is_some());
    }
    assert_eq!(referenced, SAMPLES / 2, "the referenced half, and only it, was found");

    let mut slow = Vec::with_capacity(BASELINE_SAMPLES);
    for (i, asset) in assets.iter().take(BASELINE_SAMPLES).enumerate() {
        let id = if i % 2 == 0 { *asset } else { Uuid::new_v4() };
        let started = Instant::now();
        // Walk every document's JSON, as a settle without an indexable query would.
        let found: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pages WHERE jsonb_path_exists(body, '$.** ? (@ == $id)', jsonb_build_object('id', $1::text)))",
        )
        .bind(id)
        .fetch_one(&mut *conn)
        .await
        .expect("baseline");
        slow.push(started.elapsed());
        assert_eq!(found, i % 2 == 0);
    }
    fast.sort();
    slow.sort();
    (
        Latency { p50: percentile(&fast, 0.5), p99: percentile(&fast, 0.99) },
        Latency { p50: percentile(&slow, 0.5), p99: percentile(&slow, 0.99) },
    )
}

/// Assets/s settled by two consumers taking batches of ten from the real queue.
async fn settlement_throughput(assets: usize) -> (usize, f64) {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    for i in 0..assets {
        // Half retire (no S3 call), half delete (one S3 call inside the transaction).
        let (state, age) = if i % 2 == 0 { ("released", "3 days") } else { ("pending", "8 days") };
        seed(&ctx, ws, state, age, &format!("{ws}/{i}.png")).await;
    }
    let settings = ctx.settings(&[("BRAKE_MAX_SHARE_PERCENT", "100")]);
    let sweeper = Sweeper::new(ctx.pool().clone(), ctx.sqs.clone(), settings.clone());
    sweeper.run_pass(Instant::now() + Duration::from_secs(600)).await.expect("sweep");

    let mut consumers = Vec::new();
    for _ in 0..2 {
        let pool = PgPoolOptions::new().max_connections(4).connect(&ctx.db.url).await.expect("pool");
        consumers.push(Consumer::new(pool, ctx.s3.clone(), settings.clone()));
    }
    let started = Instant::now();
    let runs = consumers.iter().map(|consumer| {
        let ctx = &ctx;
        async move {
            let mut settled = 0;
            let mut finished = started;
            loop {
                let event = receive_event(&ctx.sqs, &ctx.queue.url).await;
                if event.records.is_empty() {
                    // Timed to the last batch settled, not to the empty receive that ends the run.
                    return (settled, finished);
                }
                let response = consumer
                    .handle(lambda_runtime::LambdaEvent::new(event.clone(), lambda_runtime::Context::default()))
                    .await
                    .expect("handler");
                assert!(response.batch_item_failures.is_empty());
                settled += event.records.len();
                acknowledge(&ctx.sqs, &ctx.queue.url, &event, &response).await;
                finished = Instant::now();
            }
        }
    });
    let results = futures::future::join_all(runs).await;
    let settled: usize = results.iter().map(|(n, _)| n).sum();
    let elapsed = results.iter().map(|(_, at)| *at).max().unwrap_or(started) - started;
    assert_eq!(settled, assets);
    (settled, settled as f64 / elapsed.as_secs_f64())
}

#[tokio::main]
async fn main() {
    let sizes: Vec<i64> = std::env::var("BENCH_OWNER_ROWS")
        .unwrap_or_else(|_| "10000,100000,1000000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("BENCH_OWNER_ROWS: comma-separated row counts"))
        .collect();
    let settle_assets: usize = std::env::var("BENCH_SETTLE_ASSETS").ok().and_then(|n| n.parse().ok()).unwrap_or(2_000);

    let mut table = vec![
        "reference recheck, one declared JSONB source ($.**, GIN jsonb_ops), Postgres on this machine".to_owned(),
        format!(
            "{:>10} | {:>8} {:>8} | {:>13} {:>13} | {:>11} {:>11}",
            "owner rows", "p50 ms", "p99 ms", "naive p50 ms", "naive p99 ms", "p50 speedup", "p99 speedup"
        ),
    ];
    let mut first_p99 = None;
    for rows in sizes {
        let (fast, slow) = recheck_latency(rows).await;
        first_p99.get_or_insert(fast.p99);
        table.push(format!(
            "{:>10} | {:>8.3} {:>8.3} | {:>13.1} {:>13.1} | {:>10.0}x {:>10.0}x",
            rows,
            ms(fast.p50),
            ms(fast.p99),
            ms(slow.p50),
            ms(slow.p99),
            slow.p50.as_secs_f64() / fast.p50.as_secs_f64(),
            slow.p99.as_secs_f64() / fast.p99.as_secs_f64(),
        ));
        if let Some(first) = first_p99 {
            table.push(format!("{:>10} | p99 growth since the smallest size: {:.2}x", "", ms(fast.p99) / ms(first)));
        }
    }
    let (settled, rate) = settlement_throughput(settle_assets).await;
    table.push(String::new());
    table.push(format!(
        "settlement: {settled} assets (half retired, half deleted with their bytes), batches of 10, two consumers: {rate:.0} assets/s"
    ));
    println!("\n{}", table.join("\n"));
}
