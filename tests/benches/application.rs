//! A real application as it is: a schema of GitLab's shape generated at its size, the product adopted beside it as
//! a team would adopt it, and what each part of the sweep costs there, in one run against Postgres and LocalStack.
//!
//! The schema: `BENCH_TABLES` (800) plain tables of eleven columns with two foreign keys and five indexes each;
//! `BENCH_PARTITIONED` (90) tables partitioned by week into `BENCH_LEAVES` (20) leaves each, with a foreign key and
//! two indexes that every leaf inherits; one table of 200 text and JSON columns; and the references GitLab's own
//! migrations would add: an `asset_id` column on `uploads` and on a 23-leaf partitioned copy, avatar foreign keys on
//! `users`, `namespaces` and `projects`, an `asset_id[]` on `notes`, declared JSONB on a partitioned CI table and on
//! `abuse_reports`. `BENCH_ROWS` (1 000) rows per plain table and per partitioned table, `BENCH_ASSETS` (100 000)
//! attached assets each named by one source row, but for 1 % whose row is gone.
//!
//! Printed: the schema's shape as the catalog counts it; the schema check (`asset-sweeper references`); each sweep
//! pass until the census has read every column and discovery has walked every asset (the census's and
//! discovery's share of it, blocks and assets); and the settle of what discovery made due, through the real
//! consumer, in assets per second. The baseline in the same run is the first pass's cost before any reading: a
//! pass over the same schema with the census and discovery already done.
//!
//! Run with `scripts/bench-application`.

// Counts in tests and benchmarks are small and known: their casts, assertions included, stay as written.
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]

use std::time::{Duration, Instant};

use consumer_lambda::Consumer;
use integration_tests::fixtures::{attached_catalogue, grow_wide_table};
use integration_tests::{TestContext, acknowledge, receive_event};
use sqlx::{AssertSqlSafe, PgPool};
use sweep_lambda::Sweeper;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|n| n.parse().ok()).unwrap_or(default)
}

async fn exec(pool: &PgPool, sql: &str) {
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned())).execute(pool).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The application's own tables, none of them a reference source.
async fn application(pool: &PgPool, tables: usize, partitioned: usize, leaves: usize, rows: usize) {
    for i in 0..tables {
        // Two keys to earlier tables, as a real schema's web of projects, users and their children has.
        let (parent, owner) = (i.saturating_sub(1), (i * 7) / 10);
        let keys = if i == 0 {
            "parent_id bigint, owner_id bigint".to_owned()
        } else {
            format!("parent_id bigint REFERENCES app_t{parent} (id), owner_id bigint REFERENCES app_t{owner} (id)")
        };
        let refs = if i == 0 { ("NULL", "NULL") } else { ("1 + g % 50", "1 + g % 20") };
        exec(
            pool,
            &format!(
                "CREATE TABLE app_t{i} (id bigserial PRIMARY KEY, {keys}, title text, description text, settings jsonb,
                                        state smallint, external_ref uuid, tags text[], created_at timestamptz,
                                        updated_at timestamptz);
                 INSERT INTO app_t{i} (parent_id, owner_id, title, description, settings, state, external_ref, tags,
                                       created_at, updated_at)
                 SELECT {p}, {o}, 'title ' || g, 'See /help/' || g || ' for the 2026-11-30 change',
                        jsonb_build_object('visibility', g % 3, 'label', 'l' || g), g % 5, gen_random_uuid(),
                        ARRAY['t' || g % 7], now() - g * interval '1 minute', now()
                   FROM generate_series(1, {rows}) g;
                 CREATE INDEX ON app_t{i} (parent_id); CREATE INDEX ON app_t{i} (owner_id);
                 CREATE INDEX ON app_t{i} (state, updated_at); CREATE INDEX ON app_t{i} (external_ref);",
                p = refs.0,
                o = refs.1,
            ),
        )
        .await;
    }
    for p in 0..partitioned {
        let leaves_sql: String = (0..leaves)
            .map(|l| {
                format!(
                    "CREATE TABLE app_p{p}_{l} PARTITION OF app_p{p}
                       FOR VALUES FROM ('2026-01-05'::timestamptz + {l} * interval '7 days')
                                    TO ('2026-01-05'::timestamptz + {next} * interval '7 days');",
                    next = l + 1
                )
            })
            .collect();
        exec(
            pool,
            &format!(
                "CREATE TABLE app_p{p} (id bigint NOT NULL, created_at timestamptz NOT NULL,
                                        project_id bigint REFERENCES app_t{project} (id), message text, payload jsonb,
                                        PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at);
                 CREATE INDEX ON app_p{p} (project_id);
                 {leaves_sql}
                 INSERT INTO app_p{p} SELECT g, '2026-01-05'::timestamptz + (g % ({leaves} * 7)) * interval '1 day',
                                             1 + g % 50, 'event ' || g, jsonb_build_object('n', g)
                   FROM generate_series(1, {rows}) g;",
                project = p % tables.max(1),
            ),
        )
        .await;
    }
    grow_wide_table(pool, "app_settings_wide", 200, rows).await;
}

/// The references, as GitLab's migrations would add them, and the assets they name: asset `n` is named by source
/// `n % 8`, but for 1 % (`n % 100 = 0`) whose row is gone.
async fn references(pool: &PgPool, assets: usize) {
    attached_catalogue(pool, assets).await;
    let leaves: String = (0..23)
        .map(|l| {
            format!(
                "CREATE TABLE uploads_part_{l} PARTITION OF uploads_part FOR VALUES WITH (MODULUS 23, REMAINDER {l});"
            )
        })
        .collect();
    let ci_leaves: String = (0..12)
        .map(|l| format!("CREATE TABLE ci_metadata_{l} PARTITION OF ci_metadata FOR VALUES IN ({l});"))
        .collect();
    exec(
        pool,
        &format!(
            "CREATE TABLE uploads (id bigserial PRIMARY KEY, asset_id asset_id, path text, model_type text);
             CREATE TABLE uploads_part (id bigint NOT NULL, asset_id asset_id, path text, PRIMARY KEY (id))
                 PARTITION BY HASH (id);
             {leaves}
             CREATE TABLE users (id bigserial PRIMARY KEY, username text, avatar uuid REFERENCES assets (id));
             CREATE TABLE namespaces (id bigserial PRIMARY KEY, path text, avatar uuid REFERENCES assets (id));
             CREATE TABLE projects (id bigserial PRIMARY KEY, name text, avatar uuid REFERENCES assets (id));
             CREATE TABLE notes (id bigserial PRIMARY KEY, note text, attachments asset_id[]);
             CREATE TABLE ci_metadata (id bigint NOT NULL, partition_id int NOT NULL, config jsonb,
                                       PRIMARY KEY (id, partition_id)) PARTITION BY LIST (partition_id);
             {ci_leaves}
             CREATE TABLE abuse_reports (id bigserial PRIMARY KEY, message text, evidence jsonb);
             INSERT INTO uploads (asset_id, path, model_type)
                 SELECT id, 'uploads/' || n, 'Note' FROM numbered WHERE n % 8 = 0 AND n % 100 <> 0;
             INSERT INTO uploads_part SELECT n, id, 'uploads/' || n FROM numbered WHERE n % 8 = 1;
             INSERT INTO users (username, avatar) SELECT 'user' || n, id FROM numbered WHERE n % 8 = 2;
             INSERT INTO namespaces (path, avatar) SELECT 'group' || n, id FROM numbered WHERE n % 8 = 3;
             INSERT INTO projects (name, avatar) SELECT 'project' || n, id FROM numbered WHERE n % 8 = 4 AND n % 100 <> 0;
             INSERT INTO notes (note, attachments)
                 SELECT 'see the attached ' || n, ARRAY[id]::asset_id[] FROM numbered WHERE n % 8 = 5;
             INSERT INTO ci_metadata SELECT n, n % 12, jsonb_build_object('artifacts', jsonb_build_array(
                     jsonb_build_object('name', 'report', 'asset', id::text)))
                   FROM numbered WHERE n % 8 = 6;
             INSERT INTO abuse_reports (message, evidence)
                 SELECT 'spam ' || n, jsonb_build_object('screenshots', jsonb_build_array(id::text))
                   FROM numbered WHERE n % 8 = 7;
             CREATE INDEX ON uploads (asset_id); CREATE INDEX ON uploads_part (asset_id);
             CREATE INDEX ON users (avatar); CREATE INDEX ON namespaces (avatar); CREATE INDEX ON projects (avatar);
             CREATE INDEX ON notes USING gin (attachments);
             CREATE INDEX ON ci_metadata USING gin (config); CREATE INDEX ON abuse_reports USING gin (evidence);
             INSERT INTO asset_reference_sources (table_name, column_name, json_path)
                 VALUES ('ci_metadata', 'config', '$.artifacts[*].asset'), ('abuse_reports', 'evidence', '$.screenshots[*]');
             DROP TABLE numbered;"
        ),
    )
    .await;
    exec(pool, "VACUUM ANALYZE").await;
}

/// The schema's shape as the catalog counts it: (tables, partitioned, leaves, indexes, foreign keys, rows).
async fn shape(pool: &PgPool) -> (i64, i64, i64, i64, i64, i64) {
    sqlx::query_as(
        "SELECT count(*) FILTER (WHERE c.relkind = 'r' AND NOT c.relispartition),
                count(*) FILTER (WHERE c.relkind = 'p'),
                count(*) FILTER (WHERE c.relispartition AND c.relkind = 'r'),
                (SELECT count(*) FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid
                   JOIN pg_namespace tn ON tn.oid = t.relnamespace WHERE tn.nspname = 'public'),
                (SELECT count(*) FROM pg_constraint k JOIN pg_class t ON t.oid = k.conrelid
                   JOIN pg_namespace tn ON tn.oid = t.relnamespace WHERE k.contype = 'f' AND tn.nspname = 'public'),
                coalesce(sum(c.reltuples) FILTER (WHERE c.relkind = 'r' AND c.reltuples > 0), 0)::bigint
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')",
    )
    .fetch_one(pool)
    .await
    .expect("the catalog's counts")
}

#[tokio::main]
async fn main() {
    let tables = env_number("BENCH_TABLES", 800);
    let partitioned = env_number("BENCH_PARTITIONED", 90);
    let leaves = env_number("BENCH_LEAVES", 20);
    let rows = env_number("BENCH_ROWS", 1_000);
    let assets = env_number("BENCH_ASSETS", 100_000);
    let ctx = TestContext::new().await;
    let pool = ctx.pool().clone();

    let started = Instant::now();
    eprintln!("application: generating {tables} tables, {partitioned} partitioned of {leaves} leaves ...");
    application(&pool, tables, partitioned, leaves, rows).await;
    references(&pool, assets).await;
    let generated = started.elapsed();
    let (plain, parents, leaf_count, indexes, keys, row_count) = shape(&pool).await;
    println!(
        "application: {plain} tables, {parents} partitioned with {leaf_count} leaves, {indexes} indexes, {keys} \
         foreign keys, {row_count} rows, {assets} assets (generated in {:.0} s)",
        generated.as_secs_f64()
    );

    // As a team adopting the product runs it: guards on the sources, then `references`.
    let started = Instant::now();
    integration_tests::install_guards(&pool).await;
    let guards = started.elapsed();
    let mut conn = pool.acquire().await.expect("connection");
    let options = schema::CheckOptions {
        sample_rows: 100,
        unindexed: schema::UnindexedSources::Refuse,
        managed_prefixes: None,
        census_pace: None,
    };
    let started = Instant::now();
    let checked = schema::check(&mut conn, options.clone()).await;
    let check = started.elapsed();
    drop(conn);
    let sources = match &checked {
        Ok(map) => map.sources.len(),
        Err(e) => panic!("the schema check refused: {e}"),
    };
    println!(
        "application: guards install {:.1} s; schema check (references) {:.1} s, {sources} sources valid",
        guards.as_secs_f64(),
        check.as_secs_f64()
    );

    // Sweep passes as the schedule runs them (a 900 s Lambda less its 60 s reserve), until the census has read
    // every column once and discovery has walked every asset.
    // The brake would hold a workspace whose 1 % is due at once (what an adoption finds): it is not what this measures.
    let settings = ctx.settings(&[
        ("SWEEP_QUEUE_CEILING", "100000"),
        ("SWEEP_MAX_PER_PASS", "100000"),
        ("BRAKE_MAX_SHARE_PERCENT", "100"),
        // The product's rest between discovery's cycles, which the test harness turns off.
        ("DISCOVERY_CYCLE_INTERVAL", "1h"),
    ]);
    let sweeper = Sweeper::new(pool.clone(), ctx.sqs.clone(), settings.clone());
    let mut passes = 0;
    let (mut census_cycle, mut discovery_cycle) = (None, None);
    let cycles = Instant::now();
    let mut enqueued = 0;
    while (census_cycle.is_none() || discovery_cycle.is_none()) && passes < 20 {
        passes += 1;
        let pass_started = Instant::now();
        let report = sweeper.run_pass(Instant::now() + Duration::from_secs(840)).await.expect("sweep pass");
        let took = pass_started.elapsed();
        enqueued += report.enqueued;
        let census = report.census.as_ref();
        let discovery = report.discovery.as_ref();
        println!(
            "application: pass {passes}: {:.1} s, {}; census {} blocks in {} statements (longest {} ms), {:.0}% of \
             its cycle; discovery {} assets looked at, {} made due; {} enqueued",
            took.as_secs_f64(),
            report.outcome,
            census.map_or(0, |c| c.blocks),
            census.map_or(0, |c| c.batches),
            census.map_or(0, |c| c.longest_batch_ms),
            census.map_or(0.0, |c| c.percent_done),
            discovery.map_or(0, |d| d.scanned),
            discovery.map_or(0, |d| d.found),
            report.enqueued
        );
        if census.is_some_and(|c| c.stopped == schema::census::Stop::CycleComplete) && census_cycle.is_none() {
            census_cycle = Some(cycles.elapsed());
        }
        if discovery.is_some_and(|d| d.stopped == lifecycle::discovery::Stop::CycleComplete)
            && discovery_cycle.is_none()
        {
            discovery_cycle = Some(cycles.elapsed());
        }
    }
    let census_cycle = census_cycle.expect("the census completed a cycle within 20 passes");
    let discovery_cycle = discovery_cycle.expect("discovery completed a cycle within 20 passes");
    // The baseline: a pass with the reading done (the census resting, discovery's new cycle finding nothing new).
    let baseline_started = Instant::now();
    let baseline = sweeper.run_pass(Instant::now() + Duration::from_secs(840)).await.expect("sweep pass");
    let baseline_took = baseline_started.elapsed();
    enqueued += baseline.enqueued;
    println!(
        "application: census cycle {:.1} s, discovery cycle done {:.1} s into the passes; {passes} pass(es); a pass \
         with the reading done {:.1} s ({})",
        census_cycle.as_secs_f64(),
        discovery_cycle.as_secs_f64(),
        baseline_took.as_secs_f64(),
        baseline.outcome
    );
    // Where a steady pass's time goes: the schema check it opens with, and within it the sample of every candidate
    // column and the catalog's derivation, each timed alone on the same database. Then the baseline: the same sample
    // with every witness forgotten, so it reads every column of every table, as each pass did before.
    let mut conn = pool.acquire().await.expect("connection");
    let started = Instant::now();
    schema::check(&mut conn, options.clone()).await.expect("the schema check");
    let steady_check = started.elapsed();
    let started = Instant::now();
    let derived = schema::derive(&mut conn).await.expect("the derivation");
    let derive = started.elapsed();
    let started = Instant::now();
    schema::sample::sample(&mut conn, &derived.candidates, options.sample_rows).await.expect("the sample");
    let sample = started.elapsed();
    let witnesses: i64 =
        sqlx::query_scalar("SELECT count(*) FROM sample_witnesses").fetch_one(&pool).await.expect("witnesses");
    exec(&pool, "DELETE FROM sample_witnesses").await;
    let started = Instant::now();
    schema::sample::sample(&mut conn, &derived.candidates, options.sample_rows).await.expect("the sample");
    let unwitnessed = started.elapsed();
    drop(conn);
    println!(
        "application: in a steady pass, the schema check {:.1} s: the catalog's derivation {:.1} s, the sample of {} \
         candidate columns {:.2} s, the rest (census standing, guards, indexes) {:.1} s",
        steady_check.as_secs_f64(),
        derive.as_secs_f64(),
        derived.candidates.len(),
        sample.as_secs_f64(),
        (steady_check.saturating_sub(derive + sample)).as_secs_f64()
    );
    println!(
        "application: the sample with {witnesses} tables' witnesses {:.2} s; reading every column (no witness) {:.2} s: \
         {:.2}x",
        sample.as_secs_f64(),
        unwitnessed.as_secs_f64(),
        sample.as_secs_f64() / unwitnessed.as_secs_f64().max(f64::EPSILON)
    );

    // What an application's writes between two passes cost it: one row updated among the first rows of a tenth
    // of the plain tables, and a row added to another tenth; those are sampled again, the rest not.
    let written = tables / 10;
    for i in 0..written {
        exec(&pool, &format!("UPDATE app_t{i} SET title = title || ' (edited)' WHERE id = 3")).await;
        let j = tables - 1 - i;
        exec(&pool, &format!("INSERT INTO app_t{j} (title, created_at, updated_at) VALUES ('new', now(), now())"))
            .await;
    }
    let started = Instant::now();
    let after_writes = sweeper.run_pass(Instant::now() + Duration::from_secs(840)).await.expect("sweep pass");
    println!(
        "application: a pass after writes to {} of {tables} tables {:.1} s ({})",
        2 * written,
        started.elapsed().as_secs_f64(),
        after_writes.outcome
    );
    enqueued += after_writes.enqueued;

    // The settle: what discovery made due, through the real consumer, a batch of ten at a time.
    let consumer = Consumer::new(platform::db::pool(&settings.database), ctx.s3.clone(), settings.clone());
    let started = Instant::now();
    let mut settled = 0u64;
    let mut failed = 0usize;
    loop {
        let event = receive_event(&ctx.sqs, &ctx.queue.url).await;
        if event.records.is_empty() {
            break;
        }
        let response = consumer
            .handle(lambda_runtime::LambdaEvent::new(event.clone(), lambda_runtime::Context::default()))
            .await
            .expect("handler");
        failed += response.batch_item_failures.len();
        acknowledge(&ctx.sqs, &ctx.queue.url, &event, &response).await;
        settled += event.records.len() as u64;
    }
    let settle = started.elapsed();
    let retired: i64 = sqlx::query_scalar("SELECT count(*) FROM settlement_events WHERE action = 'retire'")
        .fetch_one(&pool)
        .await
        .expect("events");
    println!(
        "application: settle {settled} message(s) of {enqueued} enqueued in {:.1} s ({:.0} assets/s, {:.1} ms each), \
         {retired} retired, {failed} failed",
        settle.as_secs_f64(),
        settled as f64 / settle.as_secs_f64().max(f64::EPSILON),
        1000.0 * settle.as_secs_f64() / (settled.max(1) as f64)
    );
    assert_eq!(retired as usize, assets / 100, "exactly the assets whose rows are gone");
    if let Some(hold) = std::env::var("BENCH_HOLD").ok().and_then(|s| s.parse().ok()) {
        eprintln!("application: holding database {} for {hold} s", ctx.db.name);
        tokio::time::sleep(Duration::from_secs(hold)).await;
    }
}
