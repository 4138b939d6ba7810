//! What a reference guard costs the application's writes, beside its baselines in the same run:
//!
//! - the same insert with no guard (what the write cost before `asset-sweeper guards install`);
//! - the same insert through a foreign key to `assets` (what a foreign key, the guard's model, costs).
//!
//! Each write is one statement in its own transaction, as an application's request would make it: a row naming one
//! asset (an `asset_id` column, a JSONB document) and a row naming ten (an `asset_id[]` column) inserted; the same
//! rows updated in a column that is not the reference (a title: the guard fires on every update, whatever it
//! names); and a row's reference changed to another asset. Printed: the median time per write and per referenced
//! id, and the ratio to the unguarded write. Then bulk updates, 10 000 rows in one statement, of a column that is
//! not the reference and of the reference itself. The goals: under 0.2 ms of added time per referenced id, an update
//! that does not touch the reference within 1.1x of the unguarded one, and a bulk update within 1.5x, on the
//! project's 2-core machine.
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
    times.into_iter().map(median).collect()
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
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
    bulk(pool, &assets).await;
}

/// Rows each bulk update writes in its one statement.
const BULK_ROWS: i64 = 10_000;

/// Bulk updates, each one statement over [`BULK_ROWS`] rows of its own (ids above a million), as a migration or a
/// backfill makes them: a column that is not the reference, then every row's reference changed to another asset.
/// The median of five rounds, interleaved as above.
async fn bulk(pool: &PgPool, assets: &[Uuid]) {
    sqlx::query(
        "CREATE TABLE bulk_ids AS SELECT n, ($1::uuid[])[1 + n % cardinality($1::uuid[])] AS asset
           FROM generate_series(0, $2 - 1) AS n",
    )
    .bind(assets)
    .bind(BULK_ROWS)
    .execute(pool)
    .await
    .expect("the bulk ids");
    for table in ["plain_one", "guarded_one", "fk_one"] {
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {table} (id, image, title) SELECT 1000000 + n, asset, 'a title' FROM bulk_ids"
        )))
        .execute(pool)
        .await
        .expect("the bulk rows");
    }
    sqlx::raw_sql("ANALYZE").execute(pool).await.expect("analyze");
    let title = |t: &str| format!("UPDATE {t} SET title = 'title ' || $1::text WHERE id > 1000000");
    // Round r moves every row to the asset one further along: each row's value changes every round.
    let image = |t: &str| {
        format!(
            "UPDATE {t} SET image = b.asset FROM bulk_ids b
              WHERE {t}.id > 1000000 AND b.n = ({t}.id - 1000000 + $1::int) % {BULK_ROWS}"
        )
    };
    let cases = [
        ("bulk update, not the id", [title("plain_one"), title("guarded_one"), title("fk_one")]),
        ("bulk update of the ids", [image("plain_one"), image("guarded_one"), image("fk_one")]),
    ];
    println!("bulk updates: median of 5 statements of {BULK_ROWS} rows each");
    println!(
        "{:<26} {:>12} {:>12} {:>9} {:>16} {:>12}",
        "write", "unguarded ms", "guarded ms", "ratio", "added ms per row", "foreign key"
    );
    let mut round = 0;
    for (name, sqls) in cases {
        let mut times = vec![Vec::new(); sqls.len()];
        for _ in 0..6 {
            round += 1;
            for (sql, times) in sqls.iter().zip(&mut times) {
                let started = Instant::now();
                sqlx::query(AssertSqlSafe(sql.as_str())).bind(round).execute(pool).await.expect("bulk write");
                times.push(started.elapsed());
            }
        }
        // The first round warms the paths; the median of the other five.
        let medians: Vec<Duration> = times
            .into_iter()
            .map(|mut t| {
                t.remove(0);
                median(t)
            })
            .collect();
        println!(
            "{name:<26} {:>12.1} {:>12.1} {:>8.2}x {:>16.4} {:>9.1} ms",
            ms(medians[0]),
            ms(medians[1]),
            ms(medians[1]) / ms(medians[0]),
            (ms(medians[1]) - ms(medians[0])) / BULK_ROWS as f64,
            ms(medians[2])
        );
    }
    println!("goal: a bulk update within 1.50x of the unguarded one");
}
