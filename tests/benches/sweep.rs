//! Claim-and-enqueue throughput of one sweep pass against Postgres and LocalStack SQS, beside a naive baseline
//! (one claim statement and one `SendMessage` per row) measured in the same run on the same data.
//!
//! Run with `scripts/bench` (it starts the services). `BENCH_SIZES=10000,100000` sets the backlog sizes. The
//! baseline makes one SQS call per row, so on large backlogs it stops after `BENCH_BASELINE_ROWS` (10 000)
//! rows of the full-size backlog and is compared by rate.

// Counts in tests and benchmarks are small and known: their casts, assertions included, stay as written.
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]

use std::time::{Duration, Instant};

use integration_tests::TestContext;
use integration_tests::fixtures::insert_released;
use lifecycle::CleanupMessage;
use sweep_lambda::Sweeper;
use uuid::Uuid;

const WORKSPACES: i64 = 10;

struct Measured {
    rows: u64,
    elapsed: Duration,
    sqs_calls: u64,
}

impl Measured {
    fn rate(&self) -> f64 {
        self.rows as f64 / self.elapsed.as_secs_f64()
    }
}

/// A fresh database and queue holding `n` due rows across [`WORKSPACES`] workspaces.
async fn backlog(n: i64) -> TestContext {
    let ctx = TestContext::new().await;
    for _ in 0..WORKSPACES {
        insert_released(ctx.pool(), Uuid::new_v4(), n / WORKSPACES, "1 day", 1_000).await;
    }
    sqlx::query("ANALYZE assets").execute(ctx.pool()).await.expect("analyze");
    ctx
}

async fn sweep(n: i64) -> Measured {
    let ctx = backlog(n).await;
    // The brake would rightly hold back a backlog that is all of each workspace, and the queue's ceiling one bigger
    // than two consumers clear in half a lease: this measures the claim path, so both are opened.
    let settings = ctx.settings(&[
        ("BRAKE_MAX_SHARE_PERCENT", "100"),
        ("BRAKE_MAX_ASSETS", "100000000"),
        ("SWEEP_MAX_PER_PASS", "10000000"),
        ("SWEEP_QUEUE_CEILING", "100000000"),
    ]);
    let sweeper = Sweeper::new(ctx.pool().clone(), ctx.sqs.clone(), settings);
    let started = Instant::now();
    let report = sweeper.run_pass(Instant::now() + Duration::from_secs(840)).await.expect("sweep pass");
    let elapsed = started.elapsed();
    assert_eq!(report.enqueued, n as u64, "the pass enqueued every due row: {report:?}");
    assert_eq!(ctx.queue_depth().await, n as u64);
    Measured { rows: report.enqueued, elapsed, sqs_calls: report.sqs_calls }
}

/// The obvious implementation: claim the oldest due row, send it, repeat; at most `limit` rows.
async fn naive(n: i64, limit: u64) -> Measured {
    let ctx = backlog(n).await;
    let started = Instant::now();
    let mut calls = 0;
    while calls < limit {
        let claimed: Option<(Uuid, Uuid, Uuid)> = sqlx::query_as(
            "UPDATE assets SET lease_token = gen_random_uuid(), leased_until = now() + interval '1 hour'
              WHERE id = (SELECT a.id FROM assets a WHERE asset_sweeper_claimable(a)
                           ORDER BY a.due_at LIMIT 1 FOR UPDATE SKIP LOCKED)
              RETURNING id, workspace_id, lease_token",
        )
        .fetch_optional(ctx.pool())
        .await
        .expect("claim one");
        let Some((id, workspace, token)) = claimed else { break };
        let body =
            CleanupMessage::new(platform::AssetId(id), platform::WorkspaceId(workspace), token, Uuid::nil()).to_body();
        ctx.sqs.send_message().queue_url(&ctx.queue.url).message_body(body).send().await.expect("send one");
        calls += 1;
    }
    let elapsed = started.elapsed();
    assert_eq!(calls, limit.min(n as u64));
    Measured { rows: calls, elapsed, sqs_calls: calls }
}

#[tokio::main]
async fn main() {
    let sizes: Vec<i64> = std::env::var("BENCH_SIZES")
        .unwrap_or_else(|_| "10000,100000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("BENCH_SIZES: comma-separated row counts"))
        .collect();
    let baseline_rows: u64 = std::env::var("BENCH_BASELINE_ROWS")
        .map(|s| s.trim().parse().expect("BENCH_BASELINE_ROWS: a row count"))
        .unwrap_or(10_000);
    let mut table = vec![
        format!("sweep claim + enqueue, {WORKSPACES} workspaces, Postgres + LocalStack SQS on this machine"),
        format!(
            "{:>8} | {:>8} {:>8} {:>9} | {:>10} {:>8} {:>8} {:>9} | {:>7}",
            "backlog", "sweep s", "rows/s", "SQS calls", "naive rows", "naive s", "rows/s", "SQS calls", "speedup"
        ),
    ];
    for n in sizes {
        let fast = sweep(n).await;
        let slow = naive(n, baseline_rows).await;
        table.push(format!(
            "{:>8} | {:>8.2} {:>8.0} {:>9} | {:>10} {:>8.2} {:>8.0} {:>9} | {:>6.1}x",
            n,
            fast.elapsed.as_secs_f64(),
            fast.rate(),
            fast.sqs_calls,
            slow.rows,
            slow.elapsed.as_secs_f64(),
            slow.rate(),
            slow.sqs_calls,
            fast.rate() / slow.rate()
        ));
    }
    // After the passes' own metric lines, so the table reads as one block.
    println!("\n{}", table.join("\n"));
}
