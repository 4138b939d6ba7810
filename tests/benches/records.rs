//! The records step and the quota check at a real application's size, each beside a baseline in the same run:
//!
//! - retention: `BENCH_TABLES` (200) application tables of `BENCH_TABLE_ROWS` (5 000) records and one large table
//!   of `BENCH_ROWS` (2 000 000), each with an index on its timestamp and a rule; a tenth of every table expired,
//!   scattered through the heap as an application's writes leave them. Timed: the whole step as a pass runs it
//!   (every rule weighed by its brake, then batches of 1 000 in their own transactions, each recorded in the run
//!   row). Baseline, on the same data built again: one plain `DELETE … WHERE <column> < <cutoff>` per table, the
//!   statement one would write first (and which holds every expired row of a table locked until it ends).
//! - quota: an upload transaction (its two inserts, rolled back) in a workspace holding `BENCH_ASSETS` (200 000)
//!   assets among 1 000 000: as before the quota, with the trigger that keeps usage, and with the trigger and
//!   `asset_sweeper_check_upload`; beside it, the count of the workspace's rows the first version of the check
//!   made on every upload.
//!
//! Run with `scripts/bench-records` (only Postgres).

// Counts in tests and benchmarks are small and known: their casts, assertions included, stay as written.
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]

use std::time::{Duration, Instant};

use integration_tests::TestDatabase;
use platform::step::{Share, Step};
use records::Records;
use sqlx::{AssertSqlSafe, PgPool};
use uuid::Uuid;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|n| n.parse().ok()).unwrap_or(default)
}

async fn exec(pool: &PgPool, sql: &str) {
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned())).execute(pool).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The application's tables, a tenth of each expired (older than 400 days; the rules keep a year).
async fn tables(pool: &PgPool, tables: usize, table_rows: usize, big_rows: usize) {
    let mut sql = String::new();
    for (name, rows) in std::iter::once(("events".to_owned(), big_rows))
        .chain((0..tables).map(|t| (format!("app_table_{t:03}"), table_rows)))
    {
        sql.push_str(&format!(
            "DROP TABLE IF EXISTS {name};
             CREATE TABLE {name} (id bigserial PRIMARY KEY, at timestamptz NOT NULL, kind text NOT NULL, payload text);
             INSERT INTO {name} (at, kind, payload)
             SELECT now() - CASE WHEN n % 10 = 0 THEN interval '400 days' ELSE interval '30 days' END
                          - (n % 1000) * interval '1 minute',
                    CASE WHEN n % 3 = 0 THEN 'audit' ELSE 'view' END, repeat('x', 60)
               FROM generate_series(1, {rows}) n;
             CREATE INDEX {name}_at ON {name} (at);
             ANALYZE {name};"
        ));
    }
    exec(pool, &sql).await;
}

async fn rules(pool: &PgPool, tables: usize) {
    exec(pool, "DELETE FROM retention_rules").await;
    exec(pool, "INSERT INTO retention_rules (table_name, timestamp_column, keep) VALUES ('events', 'at', '1 year')")
        .await;
    for t in 0..tables {
        exec(
            pool,
            &format!(
                "INSERT INTO retention_rules (table_name, timestamp_column, keep) VALUES ('app_table_{t:03}', 'at', '1 year')"
            ),
        )
        .await;
    }
}

async fn expired_left(pool: &PgPool, tables: usize) -> i64 {
    let mut left = 0;
    for name in std::iter::once("events".to_owned()).chain((0..tables).map(|t| format!("app_table_{t:03}"))) {
        let n: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT count(*) FROM {name} WHERE at < now() - interval '366 days'"
        )))
        .fetch_one(pool)
        .await
        .expect("count");
        left += n;
    }
    left
}

/// The quota's data: `total` assets in 50 workspaces but one, which holds `mine` of them; a third released.
async fn assets(pool: &PgPool, workspace: Uuid, mine: usize, total: usize) {
    exec(pool, "ALTER TABLE assets DISABLE TRIGGER USER").await;
    exec(
        pool,
        &format!(
            "CREATE TABLE numbered AS
               SELECT n, gen_random_uuid() AS id,
                      CASE WHEN n <= {mine} THEN '{workspace}'::uuid
                           ELSE ('00000000-0000-4000-8000-0000000000' || lpad((n % 50)::text, 2, '0'))::uuid END AS ws
                 FROM generate_series(1, {total}) n;
             INSERT INTO stored_objects (storage_key, content_hash, byte_size)
             SELECT ws || '/' || id, 'sha256:' || n, 1000 FROM numbered;
             INSERT INTO assets (id, workspace_id, storage_key, content_hash, byte_size, state)
             SELECT id, ws, ws || '/' || id, 'sha256:' || n, 1000,
                    CASE WHEN n % 3 = 0 THEN 'released' ELSE 'attached' END FROM numbered;
             DROP TABLE numbered;"
        ),
    )
    .await;
    exec(pool, "ALTER TABLE assets ENABLE TRIGGER USER").await;
    // Loaded with the triggers off: the usage the upload check reads is counted once, as after a migration.
    exec(pool, "SELECT asset_sweeper_recount_usage()").await;
    exec(pool, "VACUUM ANALYZE assets").await;
    exec(pool, "VACUUM ANALYZE stored_objects").await;
    exec(pool, "INSERT INTO schema_verdicts (valid, generation, fingerprint, role_name, role_fingerprint, sources, sample_rows, duration_ms, code_version) VALUES (true, 0, '', '', '', '[]', 0, 0, 'bench')").await;
    sqlx::query("INSERT INTO workspace_quotas (workspace_id, quota_bytes) VALUES ($1, $2)")
        .bind(workspace)
        .bind(10_000_000_000_i64)
        .execute(pool)
        .await
        .expect("quota");
}

/// Mean time of `calls` upload transactions, rolled back, with or without the check.
async fn uploads(pool: &PgPool, workspace: Uuid, calls: usize, check: bool) -> Duration {
    let started = Instant::now();
    for _ in 0..calls {
        let mut tx = pool.begin().await.expect("begin");
        if check {
            sqlx::query("SELECT asset_sweeper_check_upload($1, 1000)")
                .bind(workspace)
                .execute(&mut *tx)
                .await
                .expect("check");
        }
        let key = format!("{workspace}/{}", Uuid::new_v4());
        sqlx::query("INSERT INTO stored_objects (storage_key, content_hash, byte_size) VALUES ($1, 'h', 1000)")
            .bind(&key)
            .execute(&mut *tx)
            .await
            .expect("object");
        sqlx::query(
            "INSERT INTO assets (workspace_id, storage_key, content_hash, byte_size) VALUES ($1, $2, 'h', 1000)",
        )
        .bind(workspace)
        .bind(&key)
        .execute(&mut *tx)
        .await
        .expect("asset");
        tx.rollback().await.expect("rollback");
    }
    started.elapsed() / calls as u32
}

#[tokio::main]
async fn main() {
    let (n_tables, table_rows, big_rows) =
        (env_number("BENCH_TABLES", 200), env_number("BENCH_TABLE_ROWS", 5_000), env_number("BENCH_ROWS", 2_000_000));
    let (mine, total, calls) =
        (env_number("BENCH_ASSETS", 200_000), 1_000_000.max(env_number("BENCH_ASSETS", 200_000)), 200);
    let db = TestDatabase::new().await;
    let pool = &db.pool;
    let rows = big_rows + n_tables * table_rows;
    let expired = rows / 10;

    eprintln!("records: building {n_tables} tables of {table_rows} and one of {big_rows} records (baseline) ...");
    tables(pool, n_tables, table_rows, big_rows).await;
    let started = Instant::now();
    for name in std::iter::once("events".to_owned()).chain((0..n_tables).map(|t| format!("app_table_{t:03}"))) {
        exec(pool, &format!("DELETE FROM {name} WHERE at < (current_date - interval '1 year')")).await;
    }
    let baseline = started.elapsed();
    assert_eq!(expired_left(pool, n_tables).await, 0);

    eprintln!("records: building them again, with a rule each (the step) ...");
    tables(pool, n_tables, table_rows, big_rows).await;
    rules(pool, n_tables).await;
    let run_id = Uuid::new_v4();
    sqlx::query("INSERT INTO sweep_runs (id, code_version) VALUES ($1, 'bench')")
        .bind(run_id)
        .execute(pool)
        .await
        .expect("run");
    let records = Records {
        run_id,
        time_zone: "UTC",
        brake_share_percent: 50,
        new_rule_delay: Duration::ZERO,
        approval_tolerance: platform::approval::Tolerance(10),
    };
    let started = Instant::now();
    let progress = records.advance(pool, Share::of(100, started + Duration::from_secs(3600))).await.expect("the step");
    let step = started.elapsed();
    assert_eq!(expired_left(pool, n_tables).await, 0);
    assert_eq!(progress.deleted as usize, expired, "{progress:?}");
    let batches: u64 = progress.rules.iter().map(|r| r.batches).sum();

    println!("records: {} rules over {} tables, {rows} records, {expired} expired", progress.rules.len(), n_tables + 1);
    println!(
        "step:     {:.2} s, {batches} batches of at most 1 000 ({:.1} ms each on average), {:.0} records/s",
        step.as_secs_f64(),
        step.as_secs_f64() * 1000.0 / batches as f64,
        expired as f64 / step.as_secs_f64()
    );
    println!(
        "baseline: {:.2} s, one DELETE per table, every expired row of a table locked until it ends",
        baseline.as_secs_f64()
    );
    println!("ratio:    the step takes {:.2}x the plain DELETEs", step.as_secs_f64() / baseline.as_secs_f64());

    eprintln!("quota: {total} assets, {mine} of them in one workspace ...");
    let workspace = Uuid::new_v4();
    assets(pool, workspace, mine, total).await;
    // The upload as it was before the quota: without the trigger that keeps usage, and without the check.
    exec(pool, "ALTER TABLE assets DISABLE TRIGGER assets_count_usage").await;
    let plain = uploads(pool, workspace, calls, false).await;
    exec(pool, "ALTER TABLE assets ENABLE TRIGGER assets_count_usage").await;
    let counted = uploads(pool, workspace, calls, false).await;
    let checked = uploads(pool, workspace, calls, true).await;
    // What the check cost when it counted the workspace's rows on every upload (the first version).
    let started = Instant::now();
    for _ in 0..10 {
        sqlx::query(
            "SELECT coalesce(sum(bytes) FILTER (WHERE held), 0)::bigint, coalesce(sum(bytes), 0)::bigint
               FROM (SELECT max(byte_size) AS bytes, bool_or(asset_sweeper_holds(state)) AS held
                       FROM assets WHERE workspace_id = $1 GROUP BY storage_key) objects",
        )
        .bind(workspace)
        .execute(pool)
        .await
        .expect("recount");
    }
    let recount = started.elapsed() / 10;
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("quota:    {mine} assets in the workspace, {total} in all");
    println!(
        "upload:   {:.2} ms before the quota; {:.2} ms with the usage trigger; {:.2} ms with the trigger and the check \
         ({:.2}x the upload before the quota)",
        ms(plain),
        ms(counted),
        ms(checked),
        checked.as_secs_f64() / plain.as_secs_f64()
    );
    println!(
        "baseline: counting the workspace's rows per upload instead: {:.1} ms ({:.0}x the kept totals' check)",
        ms(recount),
        recount.as_secs_f64() / (checked.as_secs_f64() - counted.as_secs_f64()).max(1e-6)
    );
}
