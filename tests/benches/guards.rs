//! What a reference guard costs the application's writes, beside its baselines in the same run:
//!
//! - the same insert with no guard (what the write cost before `asset-sweeper guards install`);
//! - the same insert through a foreign key to `assets` (what a foreign key, the guard's model, costs).
//!
//! Each write is one statement in its own transaction, as an application's request would make it: a row naming one
//! asset (an `asset_id` column, a JSONB document) and a row naming ten (an `asset_id[]` column) inserted; the same
//! rows updated in a column that is not the reference (a title: the guard fires on every update, whatever it
//! names); and a row's reference changed to another asset. Printed: the median time per write and per referenced
//! id, and the ratio to the unguarded write. The goals: under 0.2 ms of added time per referenced id, and an update
//! that does not touch the reference within 1.1x of the unguarded one, on the project's 2-core machine.
//!
//! Run with `scripts/bench-guards` (only Postgres: no LocalStack). `BENCH_WRITES` (default 2000) per case.

// Counts in tests and benchmarks are small and known: their casts, assertions included, stay as written.
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]

use std::time::{Duration, Instant};

use integration_tests::TestDatabase;
use sqlx::{AssertSqlSafe, PgPool};
use uuid::Uuid;

const TABLES: &str = "
    CREATE TABLE plain_one (id bigserial PRIMARY KEY, image asset_id, title text);
    CREATE TABLE plain_doc (id bigserial PRIMARY KEY, body jsonb, title text);
    CREATE TABLE plain_ten (id bigserial PRIMARY KEY, images asset_id[], title text);
    CREATE TABLE fk_one (id bigserial PRIMARY KEY, image uuid REFERENCES assets (id), title text);
    CREATE TABLE guarded_one (id bigserial PRIMARY KEY, image asset_id, title text);
    CREATE TABLE guarded_doc (id bigserial PRIMARY KEY, body jsonb, title text);
    CREATE TABLE guarded_ten (id bigserial PRIMARY KEY, images asset_id[], title text);
    CREATE INDEX ON plain_one (image); CREATE INDEX ON guarded_one (image); CREATE INDEX ON fk_one (image);
    CREATE INDEX ON plain_doc USING gin (body); CREATE INDEX ON guarded_doc USING gin (body);
    CREATE INDEX ON plain_ten USING gin (images); CREATE INDEX ON guarded_ten USING gin (images);
    INSERT INTO asset_reference_sources (table_name, column_name, json_path) VALUES
        ('plain_doc', 'body', '$.blocks[*].asset_id'), ('guarded_doc', 'body', '$.blocks[*].asset_id');";

/// The median time of each of `sqls` over `writes` rounds, each round one single-statement write of every query in
/// turn (each binding the round's asset ids): interleaved, so a slow moment of the machine falls on all alike.
async fn median_writes(
    pool: &PgPool,
    sqls: &[&str],
    assets: &[Uuid],
    per_write: usize,
    writes: usize,
) -> Vec<Duration> {
    let mut times = vec![Vec::with_capacity(writes); sqls.len()];
    for w in 0..writes {
        let ids: Vec<Uuid> = (0..per_write).map(|i| assets[(w * per_write + i) % assets.len()]).collect();
        for (sql, times) in sqls.iter().zip(&mut times) {
            let started = Instant::now();
            let query = sqlx::query(AssertSqlSafe(*sql));
            let query = if per_write == 1 { query.bind(ids[0]) } else { query.bind(&ids) };
            query.execute(pool).await.expect("write");
            times.push(started.elapsed());
        }
    }
    times
        .into_iter()
        .map(|mut t| {
            t.sort();
            t[t.len() / 2]
        })
        .collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() {
    let writes: usize = std::env::var("BENCH_WRITES").ok().and_then(|n| n.parse().ok()).unwrap_or(2_000);
    let db = TestDatabase::new().await;
    let pool = &db.pool;
    sqlx::raw_sql(TABLES).execute(pool).await.expect("tables");
    let assets: Vec<Uuid> =
        integration_tests::fixtures::insert_released(pool, Uuid::new_v4(), 5_000, "1 day", 10).await;
    // Guards on the guarded_* tables only: the plain_* ones keep theirs off (installed, then dropped) as the baseline.
    integration_tests::install_guards(pool).await;
    sqlx::raw_sql(
        "DO $$ DECLARE t record; BEGIN
           FOR t IN SELECT tgname, tgrelid::regclass AS rel FROM pg_trigger
                     WHERE tgname LIKE 'asset_sweeper_guard_%' AND tgrelid::regclass::text LIKE 'plain_%' LOOP
             EXECUTE format('DROP TRIGGER %I ON %s', t.tgname, t.rel);
           END LOOP; END $$; ANALYZE;",
    )
    .execute(pool)
    .await
    .expect("baselines without guards");

    let doc = "INSERT INTO {} (body) VALUES (jsonb_build_object('title', 'a page', 'blocks',
               jsonb_build_array(jsonb_build_object('type', 'image', 'asset_id', $1::text))))";
    // An update names one of the first thousand rows, each written above, by the round's first id.
    let row = "WHERE id = 1 + (hashtext($1::text) & 1023)";
    let title = |table: &str, cast: &str| format!("UPDATE {table} SET title = $1{cast}::text {row}");
    let cases: [(&str, String, String, String, usize); 7] = [
        (
            "one id (asset_id)",
            "INSERT INTO plain_one (image) VALUES ($1)".into(),
            "INSERT INTO guarded_one (image) VALUES ($1)".into(),
            "INSERT INTO fk_one (image) VALUES ($1)".into(),
            1,
        ),
        ("one id (jsonb document)", doc.replace("{}", "plain_doc"), doc.replace("{}", "guarded_doc"), String::new(), 1),
        (
            "ten ids (asset_id[])",
            "INSERT INTO plain_ten (images) VALUES ($1::asset_id[])".into(),
            "INSERT INTO guarded_ten (images) VALUES ($1::asset_id[])".into(),
            String::new(),
            10,
        ),
        ("update, not the id", title("plain_one", ""), title("guarded_one", ""), title("fk_one", ""), 1),
        ("update, not the document", title("plain_doc", ""), title("guarded_doc", ""), String::new(), 1),
        ("update, not the ten ids", title("plain_ten", "[1]"), title("guarded_ten", "[1]"), String::new(), 10),
        (
            "update of the id",
            format!("UPDATE plain_one SET image = $1 {row}"),
            format!("UPDATE guarded_one SET image = $1 {row}"),
            format!("UPDATE fk_one SET image = $1 {row}"),
            1,
        ),
    ];
    println!("reference guards: median of {writes} single-statement writes per case, Postgres at TEST_DATABASE_URL");
    println!(
        "{:<26} {:>12} {:>12} {:>9} {:>16} {:>12}",
        "write", "unguarded ms", "guarded ms", "ratio", "added ms per id", "foreign key"
    );
    for (name, plain, guarded, foreign, per_write) in cases {
        let mut sqls = vec![plain.as_str(), guarded.as_str()];
        if !foreign.is_empty() {
            sqls.push(foreign.as_str());
        }
        // Warm every path once so no measured write pays a first plan or cache cost.
        median_writes(pool, &sqls, &assets, per_write, 50).await;
        let medians = median_writes(pool, &sqls, &assets, per_write, writes).await;
        let (base, with_guard) = (medians[0], medians[1]);
        let fk = medians.get(2).map_or("-".to_owned(), |d| format!("{:.3} ms", ms(*d)));
        let added = (ms(with_guard) - ms(base)) / per_write as f64;
        println!(
            "{name:<26} {:>12.3} {:>12.3} {:>8.2}x {:>16.3} {fk:>12}",
            ms(base),
            ms(with_guard),
            ms(with_guard) / ms(base),
            added
        );
    }
    println!("goals: under 0.200 ms added per referenced id; an update that does not touch the reference within 1.10x");
}
