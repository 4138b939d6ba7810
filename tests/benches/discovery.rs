//! Discovery's throughput over a real catalogue, beside the discovery one would write first, in one run:
//!
//! - discovery as the sweep runs it: the unscheduled assets walked in id order, a batch (`DISCOVERY_BATCH_SIZE`,
//!   5 000 by default) at a time, every source asked about the whole batch in one statement, what nothing refers
//!   to made due with its audit event;
//! - the baseline: the recheck, one statement per asset asking every source (what the consumer runs under lock),
//!   over a sample of the same assets.
//!
//! The catalogue: 1 000 000 attached, unscheduled assets and ten reference sources — six foreign-key columns, two
//! `asset_id` columns, an `asset_id[]` column and a declared JSONB document — in ten owner tables of 100 000 rows
//! or more, each indexed as the schema check requires. Every asset is referred to once, except 1 % whose owner rows
//! were deleted without a release. Printed: assets scanned per second over a full cycle (twice: before and after
//! the baseline, so a slow moment of the machine falls on both), statements and the longest, found, the baseline's
//! rate, the ratio, and how long a cycle of 10 000 000 assets would take against one pass's default share.
//!
//! Run with `scripts/bench-discovery` (only Postgres). `BENCH_ASSETS` (1000000) and `BENCH_SAMPLE` (20000, the
//! baseline's assets) set the sizes.

// Counts in tests and benchmarks are small and known: their casts, assertions included, stay as written.
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]

use std::time::{Duration, Instant};

use integration_tests::TestDatabase;
use integration_tests::fixtures::attached_catalogue;
use lifecycle::discovery::{self, Budget, Pass, Stop};
use platform::AssetId;
use schema::{self, ReferenceMap};
use sqlx::{AssertSqlSafe, PgPool};
use uuid::Uuid;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|n| n.parse().ok()).unwrap_or(default)
}

/// The default share of a pass discovery may use: 25 % of a 900 s sweep less its 60 s reserve (what the census
/// leaves is more; this is the floor).
const SHARE_PER_PASS: Duration = Duration::from_secs(210);

/// Ten owner tables, one per source: (table, column definition, how a row refers to asset `a.id`).
const SOURCES: [(&str, &str, &str); 10] = [
    ("products", "uuid REFERENCES assets (id)", "a.id"),
    ("variants", "uuid REFERENCES assets (id)", "a.id"),
    ("banners", "uuid REFERENCES assets (id)", "a.id"),
    ("authors", "uuid REFERENCES assets (id)", "a.id"),
    ("brands", "uuid REFERENCES assets (id)", "a.id"),
    ("stores", "uuid REFERENCES assets (id)", "a.id"),
    ("avatars", "asset_id", "a.id"),
    ("thumbnails", "asset_id", "a.id"),
    ("galleries", "asset_id[]", "ARRAY[gen_random_uuid(), a.id]::asset_id[]"),
    ("pages", "jsonb", "jsonb_build_object('title', 'page ' || a.n, 'image', a.id::text)"),
];

async fn exec(pool: &PgPool, sql: &str) {
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned())).execute(pool).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The catalogue: `assets` attached assets, each referred to by one row of the source `n % 10` names, and 1 % of
/// them (n % 1000 < 10) with that row deleted. The owner tables get as many rows again that refer to nothing.
async fn catalogue(pool: &PgPool, assets: usize) {
    attached_catalogue(pool, assets).await;
    for (i, (table, column, refers)) in SOURCES.iter().enumerate() {
        let padding = if *column == "jsonb" {
            "jsonb_build_object('title', 'draft ' || g)".to_owned()
        } else if column.ends_with("[]") {
            "ARRAY[gen_random_uuid()]::asset_id[]".to_owned()
        } else {
            "NULL".to_owned()
        };
        exec(
            pool,
            &format!(
                "CREATE TABLE {table} (id bigserial PRIMARY KEY, name text, ref {column});
                 INSERT INTO {table} (name, ref) SELECT 'row ' || a.n, {refers} FROM numbered a WHERE a.n % 10 = {i};
                 INSERT INTO {table} (name, ref) SELECT 'unrelated ' || g, {padding}
                   FROM generate_series(1, {rows}) g;
                 DELETE FROM {table} t USING numbered a WHERE a.n % 1000 = {i}
                    AND t.name = 'row ' || a.n;
                 CREATE INDEX ON {table} USING {method} (ref);",
                rows = assets / 10,
                method = if *column == "jsonb" || column.ends_with("[]") { "gin" } else { "btree" },
            ),
        )
        .await;
    }
    exec(
        pool,
        "INSERT INTO asset_reference_sources (table_name, column_name, json_path) VALUES ('pages', 'ref', '$.image')",
    )
    .await;
    exec(pool, "DROP TABLE numbered").await;
    exec(pool, "VACUUM ANALYZE").await;
}

/// One full cycle from the first asset, as passes run it without limits; the found assets are put back afterwards
/// so the next cycle has the same work.
async fn cycle(pool: &PgPool, map: &ReferenceMap) -> (Duration, discovery::Progress) {
    let budget = Budget {
        until: Instant::now() + Duration::from_secs(3600),
        max_scanned: u64::MAX,
        batch_size: 5_000,
        grace: Duration::from_secs(86_400),
        rest: Duration::ZERO,
    };
    let started = Instant::now();
    let progress =
        discovery::advance(pool, map, budget, Pass { run_id: Uuid::new_v4(), verdict: 0 }).await.expect("discovery");
    let took = started.elapsed();
    assert_eq!(progress.stopped, Stop::CycleComplete, "{progress:?}");
    exec(
        pool,
        // As the sweeper's own write, so the grace floor stays where it was and the next cycle has the same work.
        "BEGIN;
         SELECT set_config('asset_sweeper.actor', 'sweeper', true);
         UPDATE assets SET state = 'attached', due_at = NULL WHERE state = 'released';
         DELETE FROM settlement_events;
         COMMIT;",
    )
    .await;
    exec(pool, "VACUUM ANALYZE assets").await;
    (took, progress)
}

#[tokio::main]
async fn main() {
    let assets = env_number("BENCH_ASSETS", 1_000_000);
    let sample = env_number("BENCH_SAMPLE", 20_000);
    let db = TestDatabase::new().await;
    eprintln!("discovery: loading {assets} assets and ten owner tables ...");
    let loading = Instant::now();
    catalogue(&db.pool, assets).await;
    eprintln!("discovery: loaded in {:.0} s", loading.elapsed().as_secs_f64());
    let mut conn = db.pool.acquire().await.expect("connection");
    let derived = schema::derive(&mut conn).await.expect("derive");
    let map = ReferenceMap { sources: derived.sources, warnings: Vec::new(), unproven: Vec::new() };
    assert_eq!(map.sources.len(), 10, "{:?}", map.sources);
    let owner_rows: i64 = sqlx::query_scalar(
        "SELECT sum(c.reltuples)::bigint FROM pg_class c WHERE c.relkind = 'r' AND c.relname = ANY ($1)",
    )
    .bind(SOURCES.iter().map(|s| s.0).collect::<Vec<_>>())
    .fetch_one(&mut *conn)
    .await
    .expect("owner rows");

    let (first, progress) = cycle(&db.pool, &map).await;

    // The baseline: the recheck per asset, over the first `sample` assets in id order.
    let ids: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM assets ORDER BY id LIMIT $1")
        .bind(sample as i64)
        .fetch_all(&mut *conn)
        .await
        .expect("sample");
    // Without JIT, as discovery runs, so the two differ only in how they ask.
    sqlx::query("SET jit = off").execute(&mut *conn).await.expect("jit off");
    let started = Instant::now();
    let mut unreferenced = 0usize;
    for id in &ids {
        let found = schema::recheck::recheck(&mut conn, &map, AssetId(*id)).await.expect("recheck");
        unreferenced += usize::from(found.referenced_by().is_none());
    }
    let naive = started.elapsed();
    drop(conn);

    let (second, again) = cycle(&db.pool, &map).await;
    assert_eq!((again.scanned, again.found), (progress.scanned, progress.found), "the same work twice");

    let scanned = progress.scanned as f64;
    let rate = |took: Duration| scanned / took.as_secs_f64();
    let best = first.min(second);
    let naive_rate = ids.len() as f64 / naive.as_secs_f64();
    println!(
        "discovery: {} assets, {} sources, {owner_rows} owner rows; {} unreferenced found",
        progress.scanned,
        map.sources.len(),
        progress.found
    );
    println!(
        "discovery:  full cycle {:.2} s and {:.2} s: {:.0} and {:.0} assets/s scanned; {} statements of 5 000, \
         the longest {} ms",
        first.as_secs_f64(),
        second.as_secs_f64(),
        rate(first),
        rate(second),
        progress.batches,
        progress.longest_batch_ms.max(again.longest_batch_ms)
    );
    println!(
        "baseline:   recheck per asset over {} assets: {:.2} s, {naive_rate:.0} assets/s ({unreferenced} unreferenced)",
        ids.len(),
        naive.as_secs_f64()
    );
    println!("ratio:      discovery is {:.1}x the per-asset recheck (best cycle)", rate(best) / naive_rate);
    let ten_million = 10_000_000.0 / rate(best);
    println!(
        "pace:       a cycle of 10 000 000 assets takes {ten_million:.0} s: {:.2} of one pass's default share ({} s)",
        ten_million / SHARE_PER_PASS.as_secs_f64(),
        SHARE_PER_PASS.as_secs()
    );
}
