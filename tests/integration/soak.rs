//! The race soak: writers attach assets (through a foreign key and through a JSONB document) and re-upload
//! identical bytes as new assets while two consumers settle. Afterwards no referenced asset has lost its bytes
//! and no bytes in the bucket lack a row. `SOAK_ROUNDS` (default 10 rounds of 120 assets, about 50 s) raises the count.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use consumer_lambda::Consumer;
use integration_tests::fixtures::{object_exists, put_bytes, seed};
use integration_tests::{TestContext, acknowledge, receive_event};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use sweep_lambda::Sweeper;
use uuid::Uuid;

const OWNER_TABLES: &str = "
    CREATE TABLE products (id serial PRIMARY KEY, hero uuid REFERENCES assets (id));
    CREATE INDEX products_hero ON products (hero);
    CREATE TABLE pages (id serial PRIMARY KEY, body jsonb);
    CREATE INDEX pages_body ON pages USING gin (body);
    INSERT INTO asset_reference_sources (table_name, column_name, json_path) VALUES ('pages', 'body', '$.**');";

/// The application's attach: the owner record and the asset's state in one transaction. The UPDATE waits for
/// a settle holding the row and finds nothing if the settle removed it; then the attach is abandoned, as an
/// application would report a missing upload.
async fn attach(pool: &PgPool, asset: Uuid, through_json: bool) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let found: Option<Uuid> = sqlx::query_scalar(
        "UPDATE assets SET state = 'attached', due_at = NULL WHERE id = $1 AND state <> 'failed' RETURNING id",
    )
    .bind(asset)
    .fetch_optional(&mut *tx)
    .await?;
    if found.is_none() {
        return Ok(false);
    }
    if through_json {
        sqlx::query("INSERT INTO pages (body) VALUES (jsonb_build_object('blocks', jsonb_build_array(jsonb_build_object('image', $1::text))))")
            .bind(asset)
            .execute(&mut *tx)
            .await?;
    } else {
        sqlx::query("INSERT INTO products (hero) VALUES ($1)").bind(asset).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(true)
}

/// The application's upload of bytes that already exist: reuse the stored object if its row is there (the
/// foreign key holds it against a concurrent delete), else upload the bytes again and create it.
async fn reupload(ctx: &TestContext, pool: &PgPool, workspace: Uuid, key: &str) -> Result<bool, sqlx::Error> {
    let insert_asset = "INSERT INTO assets (workspace_id, storage_key, content_hash, byte_size)
                        VALUES ($1, $2, 'sha256:' || md5($2), 100)";
    let reused = sqlx::query(insert_asset).bind(workspace).bind(key).execute(pool).await;
    match reused {
        Ok(_) => Ok(false),
        Err(e) if e.as_database_error().and_then(|d| d.code()).as_deref() == Some("23503") => {
            // The bytes were deleted under us: upload them again, then both rows in one transaction.
            put_bytes(&ctx.s3, &ctx.bucket, key, format!("bytes of {key}").as_bytes()).await;
            let mut tx = pool.begin().await?;
            sqlx::query(
                "INSERT INTO stored_objects (storage_key, content_hash, byte_size) VALUES ($1, 'sha256:' || md5($1), 100)
                 ON CONFLICT (storage_key) DO NOTHING",
            )
            .bind(key)
            .execute(&mut *tx)
            .await?;
            sqlx::query(insert_asset).bind(workspace).bind(key).execute(&mut *tx).await?;
            tx.commit().await?;
            Ok(true)
        }
        Err(e) => Err(e),
    }
}

/// Deadlocks and serialization failures are an application's to retry.
fn retryable(e: &sqlx::Error) -> bool {
    matches!(e.as_database_error().and_then(|d| d.code()).as_deref(), Some("40001" | "40P01"))
}

/// A fixed permutation of `0..n` for round `round`, so writers meet settles before, during and after them.
fn shuffled(n: usize, round: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ round as u64;
    for i in (1..n).rev() {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        order.swap(i, (state >> 33) as usize % (i + 1));
    }
    order
}

#[derive(Default)]
struct Tally {
    writes: AtomicUsize,
    attaches_refused: AtomicUsize,
    uploads_redone: AtomicUsize,
    batches: AtomicUsize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writers_racing_two_consumers_never_cost_a_referenced_asset_its_bytes() {
    let rounds: usize = std::env::var("SOAK_ROUNDS").ok().and_then(|n| n.parse().ok()).unwrap_or(10);
    let per_round = 120;
    let started = Instant::now();
    let ctx = Arc::new(TestContext::new().await);
    sqlx::raw_sql(OWNER_TABLES).execute(ctx.pool()).await.expect("owner tables");
    integration_tests::install_guards(ctx.pool()).await;
    let settings = ctx.settings(&[("BRAKE_MAX_SHARE_PERCENT", "100")]);
    let sweeper = Sweeper::new(ctx.pool().clone(), ctx.sqs.clone(), settings.clone());
    let mut consumers = Vec::new();
    for _ in 0..2 {
        // Two functions, each with its own pool, sharing one database.
        let pool = PgPoolOptions::new().max_connections(4).connect(&ctx.db.url).await.expect("consumer pool");
        consumers.push(Consumer::new(pool, ctx.s3.clone(), settings.clone()));
    }
    let writer_pool = PgPoolOptions::new().max_connections(6).connect(&ctx.db.url).await.expect("writer pool");
    let tally = Tally::default();

    for round in 0..rounds {
        let ws = Uuid::new_v4();
        let mut seeded = Vec::new();
        for i in 0..per_round {
            let key = format!("{ws}/{i}.png");
            // A third each: released (retire), abandoned uploads (delete), retired past purge (purge).
            let (state, age) = [("released", "3 days"), ("pending", "8 days"), ("retired", "40 days")][i % 3];
            seeded.push((seed(&ctx, ws, state, age, &key).await, key));
        }
        let report = sweeper.run_pass(Instant::now() + Duration::from_secs(600)).await.expect("sweep");
        assert_eq!(report.enqueued as usize, per_round);

        let writers_done = AtomicBool::new(false);
        let consuming = consumers.iter().map(|consumer| {
            let (ctx, writers_done, tally) = (&ctx, &writers_done, &tally);
            async move {
                loop {
                    let event = receive_event(&ctx.sqs, &ctx.queue.url).await;
                    if event.records.is_empty() {
                        if writers_done.load(Ordering::SeqCst) && ctx.queue_depth().await == 0 {
                            return;
                        }
                        continue;
                    }
                    let response = consumer
                        .handle(lambda_runtime::LambdaEvent::new(event.clone(), lambda_runtime::Context::default()))
                        .await
                        .expect("handler");
                    acknowledge(&ctx.sqs, &ctx.queue.url, &event, &response).await;
                    tally.batches.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        let order = shuffled(per_round, round);
        let writing = (0..3usize).map(|writer| {
            let (ctx, seeded, order, pool, tally) = (&ctx, &seeded, &order, &writer_pool, &tally);
            async move {
                // Each writer takes every third asset of the shuffled order, half of them as they come.
                for &i in order.iter().skip(writer).step_by(3).filter(|&&i| (i / 3) % 2 == 0) {
                    let (asset, key) = &seeded[i];
                    loop {
                        let result = match i % 4 {
                            0 => attach(pool, *asset, false).await.map(|ok| (!ok, false)),
                            1 => attach(pool, *asset, true).await.map(|ok| (!ok, false)),
                            _ => reupload(ctx, pool, ws, key).await.map(|redone| (false, redone)),
                        };
                        match result {
                            Ok((refused, redone)) => {
                                tally.writes.fetch_add(1, Ordering::Relaxed);
                                tally.attaches_refused.fetch_add(usize::from(refused), Ordering::Relaxed);
                                tally.uploads_redone.fetch_add(usize::from(redone), Ordering::Relaxed);
                                break;
                            }
                            Err(e) if retryable(&e) => continue,
                            Err(e) => panic!("writer: {e}"),
                        }
                    }
                    tokio::task::yield_now().await;
                }
            }
        });
        let all_writes = async {
            futures::future::join_all(writing).await;
            writers_done.store(true, Ordering::SeqCst);
        };
        tokio::join!(all_writes, futures::future::join_all(consuming));
        check(&ctx).await;
    }

    let settled: Vec<(String, i64)> =
        sqlx::query_as("SELECT action, count(*) FROM settlement_events GROUP BY action ORDER BY action")
            .fetch_all(ctx.pool())
            .await
            .expect("settled");
    println!(
        "soak: {rounds} rounds x {per_round} assets, {} writes ({} attaches found the asset gone, {} uploads redone \
         after a delete), {} consumer batches, settled {settled:?}, {:.1}s",
        tally.writes.load(Ordering::Relaxed),
        tally.attaches_refused.load(Ordering::Relaxed),
        tally.uploads_redone.load(Ordering::Relaxed),
        tally.batches.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );
}

/// The invariants after a round: referenced assets have rows and bytes; rows have bytes; bytes have rows.
async fn check(ctx: &TestContext) {
    let referenced: Vec<(Uuid, Option<String>, Option<String>)> = sqlx::query_as(
        "SELECT r.id, a.state, a.storage_key FROM (
             SELECT hero AS id FROM products
             UNION SELECT (jsonb_path_query(body, 'strict $.blocks[*].image') #>> '{}')::uuid FROM pages
         ) r LEFT JOIN assets a ON a.id = r.id",
    )
    .fetch_all(ctx.pool())
    .await
    .expect("referenced assets");
    assert!(!referenced.is_empty(), "the writers attached something");
    for (id, state, key) in &referenced {
        assert_eq!(state.as_deref(), Some("attached"), "referenced asset {id} is {state:?}");
        let key = key.as_deref().expect("row");
        assert!(object_exists(&ctx.s3, &ctx.bucket, key).await, "referenced asset {id} lost its bytes ({key})");
    }
    // No crash was injected, so every remaining asset row has its bytes, and every object has its row.
    let keys: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT storage_key FROM assets").fetch_all(ctx.pool()).await.expect("keys");
    for key in &keys {
        assert!(object_exists(&ctx.s3, &ctx.bucket, key).await, "asset rows on {key} lost their bytes");
    }
    let rows: BTreeSet<String> = sqlx::query_scalar("SELECT storage_key FROM stored_objects")
        .fetch_all(ctx.pool())
        .await
        .expect("objects")
        .into_iter()
        .collect();
    let mut pages = ctx.s3.list_objects_v2().bucket(&ctx.bucket).into_paginator().send();
    while let Some(page) = pages.next().await {
        for object in page.expect("list").contents() {
            let key = object.key().unwrap_or_default();
            assert!(rows.contains(key), "bytes {key} are in the bucket with no row");
        }
    }
}
