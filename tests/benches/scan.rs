//! The census's key scan on values full of keys, at three sizes, to show its cost grows with the text and no faster:
//!
//! - `KeyLayout::spans_in` (what the census keeps) alone, on one value of 1 KB, 100 KB and 1 MB whose every line names a key of ours three
//!   ways (an `<img>` in HTML with `&amp;` in its query, a JSON document with `\/`, a percent-encoded query
//!   string): megabytes per second and keys found, for each size;
//! - one census cycle as a pass runs it (`schema::census::Census` through `Step::advance`) over a table holding
//!   that one value, without and with the key layout (`RECONCILE_PREFIXES=uploads/`): megabytes per second and the
//!   ratio, for each size.
//!
//! Adopted files: one key in ten the value names, and none or 100 000 it does not (only a span naming an adopted key
//! is kept, so what the census writes grows with the adopted files a text names, not with every key it names; the
//! adopted keys are read once a pass, at its first span).
//!
//! Goals: `spans_in`'s rate flat across the sizes (at most 1.5x between the fastest and the slowest), and the census
//! with the key scan within 2x of the census without it. Figures only: nothing here asserts a time.
//!
//! Run with `scripts/bench-scan` (only Postgres). `BENCH_ROUNDS` (5) sets how many census cycles are timed per case
//! (the median is printed).

// Counts in tests and benchmarks are small and known: their casts, assertions included, stay as written.
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]

use std::time::{Duration, Instant};

use integration_tests::TestDatabase;
use platform::keys::KeyLayout;
use platform::step::{Share, Step};
use schema::census::{Census, Stop};
use uuid::Uuid;

/// Adopted files the values do not name, besides one in ten of the keys they do: what the key scan reads once a
/// pass, holds in memory and looks each span up in. None, then a legacy bucket's hundred thousand.
const ADOPTED_OTHERS: [usize; 2] = [0, 100_000];

const SIZES: [(usize, &str); 3] = [(1 << 10, "1 KB"), (100 << 10, "100 KB"), (1 << 20, "1 MB")];

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|n| n.parse().ok()).unwrap_or(default)
}

/// A value of about `size` bytes, every line of which names a key of ours three ways; and the keys it names.
fn value(size: usize) -> (String, Vec<String>) {
    let workspace = Uuid::new_v4();
    let mut text = String::with_capacity(size + 512);
    let mut keys = Vec::new();
    while text.len() < size {
        let id = Uuid::new_v4();
        text.push_str(&format!(
            "<p><img src=\"https://cdn.example.com/uploads/{workspace}/{id}.jpg?w=640&amp;h=480\" alt=\"photo\"></p>\n\
             {{\"hero\": {{\"src\": \"uploads\\/{workspace}\\/{id}-hero.png\"}}}}\n\
             /_next/image?url=%2Fuploads%2F{workspace}%2F{id}-thumb.png&w=320\n"
        ));
        for suffix in [".jpg", "-hero.png", "-thumb.png"] {
            keys.push(format!("uploads/{workspace}/{id}{suffix}"));
        }
    }
    (text, keys)
}

/// Files adopted from a legacy bucket: one key in ten the value names, and `others` it does not.
async fn adopt(pool: &sqlx::PgPool, named: &[String], others: usize) -> usize {
    let mut keys: Vec<String> = named.iter().step_by(10).cloned().collect();
    let adopted_named = keys.len();
    keys.extend((0..others).map(|_| format!("uploads/{}/{}.jpg", Uuid::new_v4(), Uuid::new_v4())));
    sqlx::raw_sql("TRUNCATE adopted_assets").execute(pool).await.expect("truncate");
    sqlx::query(
        "INSERT INTO adopted_assets (asset_id, storage_key, workspace_id, listing_id, last_modified, layout)
         SELECT gen_random_uuid(), k, gen_random_uuid(), 1, now(), $2 FROM unnest($1::text[]) k",
    )
    .bind(&keys)
    .bind(layout().signature())
    .execute(pool)
    .await
    .expect("adopted files");
    adopted_named
}

fn layout() -> KeyLayout {
    KeyLayout::new("uploads/", r"uploads/(?P<workspace>[0-9a-f-]{36})/[^/]+").expect("a layout")
}

fn megabytes_per_second(bytes: usize, took: Duration) -> f64 {
    bytes as f64 / (1024.0 * 1024.0) / took.as_secs_f64()
}

/// `spans_in` over `text` again and again for at least half a second: the time of one call, and what it found.
fn time_spans_in(layout: &KeyLayout, text: &str) -> (Duration, usize) {
    let started = Instant::now();
    let mut calls = 0u32;
    let mut named = 0;
    while calls < 3 || started.elapsed() < Duration::from_millis(500) {
        named = layout.spans_in(std::hint::black_box(text)).len();
        calls += 1;
    }
    (started.elapsed() / calls, named)
}

/// One census cycle as a pass runs it, with no limit of time or batches.
async fn cycle(pool: &sqlx::PgPool, layout: Option<&KeyLayout>) -> Duration {
    let census = Census {
        max_batches: u32::MAX,
        batch_blocks: 1_024,
        batch_timeout: Duration::from_secs(30),
        cycle_interval: Duration::ZERO,
        readers: 2,
        layout,
        replica: None,
    };
    let share = Share::of(100, Instant::now() + Duration::from_secs(3600));
    let started = Instant::now();
    let progress = census.advance(pool, share).await.expect("census");
    let took = started.elapsed();
    assert_eq!((progress.stopped, progress.columns_unproven), (Stop::CycleComplete, 0), "{progress:?}");
    took
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort_unstable();
    times[times.len() / 2]
}

#[tokio::main]
async fn main() {
    let rounds = env_number("BENCH_ROUNDS", 5).max(1);
    let layout = layout();
    let values: Vec<(&str, String, Vec<String>)> = SIZES
        .iter()
        .map(|(size, name)| {
            let (text, keys) = value(*size);
            (*name, text, keys)
        })
        .collect();

    let mut rates = Vec::new();
    for (name, text, keys) in &values {
        let keys = keys.len();
        let (took, named) = time_spans_in(&layout, text);
        assert!(named >= keys, "every key is found: {named} of {keys}");
        let rate = megabytes_per_second(text.len(), took);
        rates.push(rate);
        println!(
            "spans_in: {name:>6} value ({} bytes, {keys} keys written): {:9.3} ms, {rate:6.1} MB/s, {named} spans kept",
            text.len(),
            took.as_secs_f64() * 1000.0
        );
    }
    let (slowest, fastest) = rates.iter().fold((f64::MAX, 0f64), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
    println!("spans_in: spread between sizes {:.2}x (goal: at most 1.5x)", fastest / slowest);

    let db = TestDatabase::new().await;
    sqlx::raw_sql("CREATE TABLE notes (id int PRIMARY KEY, body text NOT NULL)")
        .execute(&db.pool)
        .await
        .expect("the table");
    for others in ADOPTED_OTHERS {
        for (name, text, keys) in &values {
            sqlx::raw_sql("TRUNCATE notes, named_keys").execute(&db.pool).await.expect("truncate");
            let adopted_named = adopt(&db.pool, keys, others).await;
            sqlx::query("INSERT INTO notes VALUES (1, $1)").bind(text).execute(&db.pool).await.expect("the value");
            // Once each first: the census's rows for the table, and the layout's first scan, are not what is timed.
            cycle(&db.pool, None).await;
            cycle(&db.pool, Some(&layout)).await;
            let (mut plain, mut keyed) = (Vec::new(), Vec::new());
            // Interleaved, so a slow moment of the machine falls on both.
            for _ in 0..rounds {
                plain.push(cycle(&db.pool, None).await);
                keyed.push(cycle(&db.pool, Some(&layout)).await);
            }
            let (plain, keyed) = (median(plain), median(keyed));
            let named: i64 =
                sqlx::query_scalar("SELECT count(*) FROM named_keys").fetch_one(&db.pool).await.expect("named");
            println!(
                "census, {others:>6} other adopted files: {name:>6} value: without the key scan {:7.1} ms ({:6.2} MB/s), \
                 with it {:7.1} ms ({:6.2} MB/s): {:.2}x; {named} spans kept for the {adopted_named} adopted keys it names",
                plain.as_secs_f64() * 1000.0,
                megabytes_per_second(text.len(), plain),
                keyed.as_secs_f64() * 1000.0,
                megabytes_per_second(text.len(), keyed),
                keyed.as_secs_f64() / plain.as_secs_f64()
            );
        }
    }
}
