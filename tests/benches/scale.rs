//! Scale benchmarks against Postgres and LocalStack, each beside its baseline in the same run:
//!
//! 1. The real consumer's cost per invocation (a batch of ten) with no application tables, then 300 and 1 000
//!    of them (8 columns, 2 000 rows each), beside the full schema check the consumer used to run per invocation
//!    and the catalog-fingerprint comparison it falls back to without the change detector.
//! 2. Settlement throughput with two consumers over the 1 000-table schema and ten reference sources (6 foreign
//!    keys, 2 `asset_id` columns, 2 declared JSONB documents, 100 000 rows each): half the assets deleted with
//!    their bytes, then none (every delete is one S3 call, which LocalStack serves on the same two cores).
//! 3. The sweep against a slow consumer, with the queue's ceiling and without it (the baseline): queue depth
//!    after each pass and how many assets were sent twice.
//!
//! Run with `scripts/bench-scale`. `BENCH_TABLES=0,300,1000`, `BENCH_OWNER_ROWS` (100000), `BENCH_SETTLE_ASSETS`
//! (2000) and `BENCH_STALL_SECONDS` (20) set the sizes; `BENCH_ONLY=throughput` runs part 2 alone.

// Counts in tests and benchmarks are small and known: their casts, assertions included, stay as written.
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use consumer_lambda::Consumer;
use integration_tests::fixtures::{grow_application, insert_released, seed};
use integration_tests::{TestContext, acknowledge, receive_event};
use lifecycle::CleanupMessage;
use platform::{AssetId, WorkspaceId};
use sqlx::AssertSqlSafe;
use sweep_lambda::Sweeper;
use uuid::Uuid;

const INVOCATIONS: usize = 40;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn env_list(name: &str, default: &str) -> Vec<usize> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(|s| s.trim().parse().unwrap_or_else(|_| panic!("{name}: comma-separated numbers")))
        .collect()
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|n| n.parse().ok()).unwrap_or(default)
}

fn batch(messages: impl IntoIterator<Item = CleanupMessage>) -> SqsEvent {
    let mut event = SqsEvent::default();
    for (i, message) in messages.into_iter().enumerate() {
        let mut record = SqsMessage::default();
        record.message_id = Some(format!("m-{i}"));
        record.body = Some(message.to_body());
        record.attributes.insert("ApproximateReceiveCount".into(), "1".into());
        event.records.push(record);
    }
    event
}

struct InvocationCost {
    tables: usize,
    consumer: Duration,
    full_check: Duration,
    fingerprint: Duration,
}

/// Part 1: the real consumer answering batches of ten messages that name assets it does not know (every record
/// a read of its row), after the sweep recorded the verdict at this size.
async fn invocation_costs(sizes: &[usize]) -> Vec<InvocationCost> {
    let ctx = TestContext::new().await;
    let settings = ctx.settings(&[]);
    let consumer = Consumer::new(ctx.pool().clone(), ctx.s3.clone(), settings.clone());
    let sweeper = Sweeper::new(ctx.pool().clone(), ctx.sqs.clone(), settings.clone());
    let mut grown = 0;
    let mut costs = Vec::new();
    for &tables in sizes {
        eprintln!("scale: {tables} application tables ...");
        grow_application(ctx.pool(), grown, tables, 2_000).await;
        grown = tables;
        let report = sweeper.run_pass(Instant::now() + Duration::from_secs(600)).await.expect("sweep");
        assert_eq!(report.outcome, lifecycle::runs::RunOutcome::Ok, "{:?}", report.reason);

        let mut samples = Vec::with_capacity(INVOCATIONS);
        for _ in 0..INVOCATIONS {
            let ws = WorkspaceId(Uuid::new_v4());
            let messages =
                (0..10).map(|_| CleanupMessage::new(AssetId(Uuid::new_v4()), ws, Uuid::new_v4(), report.run_id));
            let event = batch(messages);
            let started = Instant::now();
            let response = consumer
                .handle(lambda_runtime::LambdaEvent::new(event, lambda_runtime::Context::default()))
                .await
                .expect("handler");
            samples.push(started.elapsed());
            assert!(response.batch_item_failures.is_empty(), "unknown assets are a success");
        }

        // The baseline: what the consumer ran per invocation before (the full check with its sampling).
        let mut conn = ctx.pool().acquire().await.expect("connection");
        let mut full = Vec::new();
        for _ in 0..3 {
            let started = Instant::now();
            schema::check(&mut conn, (&settings).into()).await.expect("valid");
            full.push(started.elapsed());
        }
        // Without the change detector the consumer compares the catalog fingerprint instead.
        let mut fingerprint = Vec::new();
        for _ in 0..10 {
            let started = Instant::now();
            let _: String = sqlx::query_scalar("SELECT asset_sweeper_catalog_fingerprint()")
                .fetch_one(&mut *conn)
                .await
                .expect("fp");
            fingerprint.push(started.elapsed());
        }
        eprintln!(
            "scale: {tables} tables: consumer {:.1} ms per batch, full check {:.1} ms",
            ms(median(samples.clone())),
            ms(median(full.clone()))
        );
        costs.push(InvocationCost {
            tables,
            consumer: median(samples),
            full_check: median(full),
            fingerprint: median(fingerprint),
        });
    }
    costs
}

/// Part 2: ten owner tables of `rows` rows over the application schema, one in ten naming an asset; two consumers
/// settle `assets` while the sources are rechecked for each, once per share of deletes (each delete is one S3
/// call inside the transaction; the rest retire). Returns (delete share, settled, assets/s) per round.
async fn throughput(tables: usize, rows: usize, assets: usize, delete_shares: &[usize]) -> Vec<(usize, usize, f64)> {
    let ctx = TestContext::new().await;
    eprintln!("scale: throughput over {tables} tables and 10 sources of {rows} rows ...");
    grow_application(ctx.pool(), 0, tables, 2_000).await;
    let kept = insert_released(ctx.pool(), Uuid::new_v4(), 1_000, "1 day", 10).await;
    sqlx::query("UPDATE assets SET state = 'attached', due_at = NULL WHERE id = ANY ($1)")
        .bind(&kept)
        .execute(ctx.pool())
        .await
        .expect("attached");
    let mut ddl = String::new();
    for i in 0..6 {
        ddl.push_str(&format!(
            "CREATE TABLE owner_fk_{i} (id bigserial PRIMARY KEY, title text, asset uuid REFERENCES assets (id));
             CREATE INDEX ON owner_fk_{i} (asset);"
        ));
    }
    for i in 0..2 {
        ddl.push_str(&format!(
            "CREATE TABLE owner_domain_{i} (id bigserial PRIMARY KEY, title text, asset asset_id);
             CREATE INDEX ON owner_domain_{i} (asset);"
        ));
    }
    for i in 0..2 {
        ddl.push_str(&format!(
            "CREATE TABLE owner_doc_{i} (id bigserial PRIMARY KEY, body jsonb NOT NULL);
             INSERT INTO asset_reference_sources (table_name, column_name, json_path)
             VALUES ('owner_doc_{i}', 'body', '$.blocks[*].asset_id');"
        ));
    }
    sqlx::raw_sql(AssertSqlSafe(ddl)).execute(ctx.pool()).await.expect("owner tables");
    let fill = |table: &str, column: &str| {
        format!(
            "INSERT INTO {table} (title, {column})
             SELECT 'record ' || g, CASE WHEN g % 10 = 0 THEN ($1::uuid[])[1 + g % cardinality($1::uuid[])] END
               FROM generate_series(1, $2) g"
        )
    };
    for i in 0..6 {
        sqlx::query(AssertSqlSafe(fill(&format!("owner_fk_{i}"), "asset")))
            .bind(&kept)
            .bind(rows as i64)
            .execute(ctx.pool())
            .await
            .expect("fk rows");
    }
    for i in 0..2 {
        sqlx::query(AssertSqlSafe(fill(&format!("owner_domain_{i}"), "asset")))
            .bind(&kept)
            .bind(rows as i64)
            .execute(ctx.pool())
            .await
            .expect("domain rows");
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO owner_doc_{i} (body)
             SELECT jsonb_build_object('title', 'page ' || g, 'blocks', jsonb_build_array(
                        jsonb_build_object('type', 'text', 'text', repeat('lorem ', 6)),
                        jsonb_build_object('type', 'image', 'asset_id',
                            CASE WHEN g % 10 = 0 THEN ($1::uuid[])[1 + g % cardinality($1::uuid[])]
                                 ELSE gen_random_uuid() END::text)))
               FROM generate_series(1, $2) g"
        )))
        .bind(&kept)
        .bind(rows as i64)
        .execute(ctx.pool())
        .await
        .expect("documents");
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE INDEX ON owner_doc_{i} USING gin (body jsonb_path_ops)")))
            .execute(ctx.pool())
            .await
            .expect("document index");
    }
    sqlx::raw_sql("ANALYZE").execute(ctx.pool()).await.expect("analyze");
    // After the fill, as an operator adopting the product on a populated database would.
    integration_tests::install_guards(ctx.pool()).await;
    // The census reads the whole application before deletes may go (at this size, more than one pass's share).
    integration_tests::prove_schema(ctx.pool()).await;
    let mut rounds = Vec::new();
    for &share in delete_shares {
        let (settled, rate) = settle_round(&ctx, assets, share).await;
        rounds.push((share, settled, rate));
    }
    rounds
}

/// Seeds `assets` due assets of a new workspace (`delete_share` percent abandoned uploads, the rest released),
/// sweeps them in one pass, and lets two consumers settle them: (settled, assets/s).
async fn settle_round(ctx: &TestContext, assets: usize, delete_share: usize) -> (usize, f64) {
    let ws = Uuid::new_v4();
    for i in 0..assets {
        let deleted = i * delete_share / 100 != (i + 1) * delete_share / 100;
        let (state, age) = if deleted { ("pending", "8 days") } else { ("released", "3 days") };
        seed(ctx, ws, state, age, &format!("{ws}/{i}.png")).await;
    }
    // The whole backlog in one pass: the queue's ceiling (part 3) is not what this measures.
    let settings = ctx.settings(&[("BRAKE_MAX_SHARE_PERCENT", "100"), ("SWEEP_QUEUE_CEILING", "100000")]);
    let sweeper = Sweeper::new(ctx.pool().clone(), ctx.sqs.clone(), settings.clone());
    let report = sweeper.run_pass(Instant::now() + Duration::from_secs(900)).await.expect("sweep");
    assert_eq!(report.enqueued as usize, assets, "{:?} {:?}", report.stopped, report.reason);

    let mut consumers = Vec::new();
    for _ in 0..2 {
        // Each consumer its own pool, as two Lambda instances have (DATABASE_MAX_CONNECTIONS, 4, each).
        let pool = platform::db::pool(&settings.database);
        consumers.push(Consumer::new(pool, ctx.s3.clone(), settings.clone()));
    }
    let started = Instant::now();
    let runs = consumers.iter().map(|consumer| {
        async move {
            let mut settled = 0;
            let mut finished = started;
            let mut handling = Duration::ZERO;
            // As Lambda's poller does, the next batch is received while this one is handled and acknowledged.
            let mut event = receive_event(&ctx.sqs, &ctx.queue.url).await;
            loop {
                if event.records.is_empty() {
                    return (settled, finished, handling);
                }
                let settle = async {
                    let handled = Instant::now();
                    let response = consumer
                        .handle(lambda_runtime::LambdaEvent::new(event.clone(), lambda_runtime::Context::default()))
                        .await
                        .expect("handler");
                    let took = handled.elapsed();
                    assert!(response.batch_item_failures.is_empty());
                    acknowledge(&ctx.sqs, &ctx.queue.url, &event, &response).await;
                    took
                };
                let (took, next) = tokio::join!(settle, receive_event(&ctx.sqs, &ctx.queue.url));
                handling += took;
                settled += event.records.len();
                finished = Instant::now();
                event = next;
            }
        }
    });
    let results = futures::future::join_all(runs).await;
    let settled: usize = results.iter().map(|(n, _, _)| n).sum();
    let elapsed = results.iter().map(|(_, at, _)| *at).max().unwrap_or(started) - started;
    let handling: Duration = results.iter().map(|(_, _, h)| *h).sum();
    eprintln!(
        "scale: {settled} settled in {:.1} s; the handler's share of the two consumers' time: {:.0}%",
        elapsed.as_secs_f64(),
        100.0 * handling.as_secs_f64() / (2.0 * elapsed.as_secs_f64())
    );
    assert_eq!(settled, assets);
    let gone: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM settlement_events WHERE workspace_id = $1 AND action IN ('retire', 'delete')",
    )
    .bind(ws)
    .fetch_one(ctx.pool())
    .await
    .expect("events");
    assert_eq!(gone as usize, assets, "every asset was retired or deleted, none kept by mistake");
    (settled, settled as f64 / elapsed.as_secs_f64())
}

struct StallRun {
    passes: usize,
    sent: usize,
    sent_twice: usize,
    max_depth: u64,
}

/// Part 3: a backlog, a sweep pass every two seconds, and a consumer that settles one batch of ten a second,
/// with leases short enough (QUEUE_VISIBILITY_TIMEOUT 2s: a 6 s lease) that a message waiting longer than that
/// in the queue is claimed and sent again.
async fn stalled_consumer(ceiling: &str, seconds: u64) -> StallRun {
    let ctx = TestContext::new().await;
    insert_released(ctx.pool(), Uuid::new_v4(), 1_000, "1 hour", 10).await;
    let overrides = [
        ("QUEUE_VISIBILITY_TIMEOUT", "2s"),
        ("MAX_RECEIVE_COUNT", "2"),
        ("SWEEP_QUEUE_CEILING", ceiling),
        ("BRAKE_MAX_SHARE_PERCENT", "100"),
    ];
    let settings = ctx.settings(&overrides);
    let sweeper = Sweeper::new(ctx.pool().clone(), ctx.sqs.clone(), settings.clone());
    let consumer = Consumer::new(ctx.pool().clone(), ctx.s3.clone(), settings);
    let mut sent: HashMap<Uuid, usize> = HashMap::new();
    let mut run = StallRun { passes: 0, sent: 0, sent_twice: 0, max_depth: 0 };
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut next_pass = Instant::now();
    while Instant::now() < end {
        if Instant::now() >= next_pass {
            sweeper.run_pass(Instant::now() + Duration::from_secs(60)).await.expect("sweep");
            run.passes += 1;
            run.max_depth = run.max_depth.max(ctx.queue_depth().await);
            next_pass += Duration::from_secs(2);
        }
        let tick = Instant::now();
        let event = receive_event(&ctx.sqs, &ctx.queue.url).await;
        for record in &event.records {
            if let Some(message) = record.body.as_deref().and_then(|b| CleanupMessage::parse(b).ok()) {
                *sent.entry(message.asset_id.0).or_default() += 1;
            }
        }
        if !event.records.is_empty() {
            let response = consumer
                .handle(lambda_runtime::LambdaEvent::new(event.clone(), lambda_runtime::Context::default()))
                .await
                .expect("handler");
            acknowledge(&ctx.sqs, &ctx.queue.url, &event, &response).await;
        }
        tokio::time::sleep(Duration::from_secs(1).saturating_sub(tick.elapsed())).await;
    }
    // What is still queued was sent too.
    for body in ctx.drain_queue().await {
        if let Ok(message) = CleanupMessage::parse(&body) {
            *sent.entry(message.asset_id.0).or_default() += 1;
        }
    }
    run.sent = sent.values().sum();
    run.sent_twice = sent.values().filter(|n| **n > 1).count();
    run
}

#[tokio::main]
async fn main() {
    let sizes = env_list("BENCH_TABLES", "0,300,1000");
    let rows = env_number("BENCH_OWNER_ROWS", 100_000);
    let assets = env_number("BENCH_SETTLE_ASSETS", 2_000);
    let stall_seconds = env_number("BENCH_STALL_SECONDS", 20) as u64;
    let largest = sizes.iter().copied().max().unwrap_or(0);

    // BENCH_ONLY=throughput runs part 2 alone (when tuning it).
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let shares = [50, 0];
    if only == "throughput" {
        for (share, settled, rate) in throughput(largest, rows, assets, &shares).await {
            println!("settlement: {settled} assets, {share}% deleted: {rate:.0} assets/s");
        }
        return;
    }
    let costs = invocation_costs(&sizes).await;
    let rounds = throughput(largest, rows, assets, &shares).await;
    let ceiling = stalled_consumer("30", stall_seconds).await;
    let baseline = stalled_consumer("100000000", stall_seconds).await;

    let mut out = vec![
        String::new(),
        format!(
            "1. consumer cost per invocation (batch of 10, median of {INVOCATIONS}), Postgres and LocalStack on this machine"
        ),
        format!(
            "{:>7} | {:>11} {:>9} | {:>24} {:>9} | {:>21}",
            "tables", "consumer ms", "vs empty", "full check per batch ms", "vs now", "fingerprint ms (no detector)"
        ),
    ];
    let empty = costs.first().map(|c| c.consumer).unwrap_or_default();
    for c in &costs {
        out.push(format!(
            "{:>7} | {:>11.1} {:>8.2}x | {:>24.1} {:>8.0}x | {:>21.1}",
            c.tables,
            ms(c.consumer),
            c.consumer.as_secs_f64() / empty.as_secs_f64(),
            ms(c.full_check),
            c.full_check.as_secs_f64() / c.consumer.as_secs_f64(),
            ms(c.fingerprint),
        ));
    }
    out.push(String::new());
    out.push(format!(
        "2. settlement over {largest} tables + 10 sources (6 fk, 2 asset_id, 2 jsonb; {rows} rows each), two consumers:"
    ));
    for (share, settled, rate) in &rounds {
        out.push(format!(
            "   {settled} assets, {share:>2}% deleted with their bytes (one S3 call each), the rest retired: {rate:.0} assets/s"
        ));
    }
    out.push(String::new());
    out.push(format!("3. sweep every 2 s against a consumer settling 10/s, 1000 due, 6 s leases, {stall_seconds} s:"));
    for (name, r) in [("ceiling 30", &ceiling), ("no ceiling (baseline)", &baseline)] {
        out.push(format!(
            "   {name:<22} passes {:>3}  sent {:>5}  assets sent twice {:>5}  deepest queue after a pass {:>5}",
            r.passes, r.sent, r.sent_twice, r.max_depth
        ));
    }
    println!("{}", out.join("\n"));
}
