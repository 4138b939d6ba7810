//! Observed use at a real site's size: a pass's share of a day of S3 server access logs for a site serving 100
//! million requests a day, read by the sweep's step as it runs (`reconcile::reads::ObservedUse`: listed, fetched from
//! S3, parsed, each file's newest read kept in the database), beside the baseline of fetching the same log objects
//! and reading their bytes, in one run.
//!
//! A day of 100 000 000 requests is 1 041 667 a pass (passes are 15 minutes apart), in `BENCH_OBJECTS` (100) log
//! objects, as S3 delivers a busy bucket's in many small files. The requests name `BENCH_FILES` (200 000) stored
//! objects (each request a pseudo-random one of them); one in ten is the product's own role's (ignored), one in
//! twenty a 404, the rest anonymous browsers' GETs with a referrer. Printed: the log's size, the baseline's time and
//! rate, the step's, the ratio, and the step's time against its share of a pass (`LOGS_TIME_SHARE_PERCENT`, 15 %,
//! of a 900 s pass less the 60 s reserve).
//!
//! Run with `scripts/bench-observed` (Postgres and LocalStack). `BENCH_LINES` (1041667), `BENCH_OBJECTS` (100) and
//! `BENCH_FILES` (200000) set the sizes.

// Counts in tests and benchmarks are small and known: their casts, assertions included, stay as written.
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]

use std::time::{Duration, Instant};

use integration_tests::TestDatabase;
use platform::location::{AccessLogLayout, LogLocation};
use platform::step::{Share, Step};
use reconcile::reads::{ObservedUse, Source};
use sqlx::{AssertSqlSafe, PgPool};

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|n| n.parse().ok()).unwrap_or(default)
}

const OWNER: &str = "79a59df900b949e55d96a1e698fbacedfd6e09d98eacf8f8d5218e7cd47ef2be";
const OWN_ROLE: &str = "arn:aws:sts::111122223333:assumed-role/asset-sweeper-consumer/1733380000";

async fn exec(pool: &PgPool, sql: &str) {
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned())).execute(pool).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// `files` stored objects, keyed `{workspace}/{n}.png`.
async fn stored_objects(pool: &PgPool, files: usize) -> Vec<String> {
    exec(
        pool,
        &format!(
            "INSERT INTO stored_objects (storage_key, content_hash, byte_size)
             SELECT '00000000-0000-4000-8000-0000000000' || lpad((n % 100)::text, 2, '0') || '/' || n || '.png',
                    'sha256:' || n, 1000
               FROM generate_series(1, {files}) n"
        ),
    )
    .await;
    exec(pool, "VACUUM ANALYZE stored_objects").await;
    sqlx::query_scalar("SELECT storage_key FROM stored_objects ORDER BY storage_key")
        .fetch_all(pool)
        .await
        .expect("keys")
}

/// One access log line as S3 writes it, for the `i`th request.
fn line(i: usize, key: &str, at: chrono::DateTime<chrono::Utc>) -> String {
    let (requester, status) = match i % 20 {
        0 | 10 => (OWN_ROLE, 200),
        5 => ("-", 404),
        _ => ("-", 200),
    };
    format!(
        "{OWNER} bench-assets [{}] 192.0.2.{} {requester} 3E57427F3EXAMPLE REST.GET.OBJECT {key} \
         \"GET /bench-assets/{key} HTTP/1.1\" {status} - 24536 24536 12 11 \"https://shop{}.example.com/p/{}\" \
         \"Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0\" - \
         s9lzHYrFp76ZVxRcpX9+5cjAnEH2ROuNkd2BHfIa6UkFVdtjf5mKR3/eTPFvsiP/XV/VLi31234= SigV4 \
         ECDHE-RSA-AES128-GCM-SHA256 AuthHeader bench-assets.s3.us-east-1.amazonaws.com TLSv1.2 - - us-east-1",
        at.format("%d/%b/%Y:%H:%M:%S +0000"),
        i % 250,
        i % 7,
        i % 1000
    )
}

/// Writes `lines` requests over `objects` log objects under `access/`; returns the bytes written.
async fn deliver(s3: &aws_sdk_s3::Client, bucket: &str, keys: &[String], lines: usize, objects: usize) -> usize {
    let per_object = lines.div_ceil(objects);
    let now = chrono::Utc::now();
    let mut written = 0;
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for object in 0..objects {
        let mut body = String::with_capacity(per_object * 420);
        for i in object * per_object..((object + 1) * per_object).min(lines) {
            // A pseudo-random file per request (xorshift): most objects name thousands of distinct files.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let key = &keys[(state % keys.len() as u64) as usize];
            body.push_str(&line(i, key, now - chrono::Duration::seconds(900 - (i % 900) as i64)));
            body.push('\n');
        }
        written += body.len();
        let name = format!("access/{}-{object:06}", now.format("%Y-%m-%d-%H-%M-%S"));
        s3.put_object().bucket(bucket).key(&name).body(body.into_bytes().into()).send().await.expect("a log object");
    }
    written
}

/// The baseline: every log object fetched and its bytes read, nothing parsed. Returns the bytes read.
async fn fetch_only(s3: &aws_sdk_s3::Client, bucket: &str) -> usize {
    let mut read = 0;
    let mut pages = s3.list_objects_v2().bucket(bucket).prefix("access/").into_paginator().send();
    while let Some(page) = pages.next().await {
        for object in page.expect("a listing").contents() {
            let out = s3.get_object().bucket(bucket).key(object.key().expect("a key")).send().await.expect("a log");
            read += out.body.collect().await.expect("its bytes").into_bytes().len();
        }
    }
    read
}

#[tokio::main]
async fn main() {
    let lines = env_number("BENCH_LINES", 1_041_667);
    let objects = env_number("BENCH_OBJECTS", 100);
    let files = env_number("BENCH_FILES", 200_000);
    let db = TestDatabase::new().await;
    let config = platform::aws::sdk_config().await;
    let s3 = platform::aws::s3_client(&config, true);
    let bucket = format!("bench-logs-{}", integration_tests::short_id());
    s3.create_bucket().bucket(&bucket).send().await.expect("the logs bucket");
    integration_tests::fixtures::protect_logs(&s3, &bucket, "access/").await;
    let keys = stored_objects(&db.pool, files).await;
    let started = Instant::now();
    let bytes = deliver(&s3, &bucket, &keys, lines, objects).await;
    println!(
        "a pass's logs of a site serving 100 000 000 requests a day: {lines} lines in {objects} objects, {:.0} MB \
         ({:.1} s to write into LocalStack), naming {files} stored objects",
        bytes as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );

    let location = LogLocation { bucket: bucket.clone(), prefix: "access/".to_owned() };
    let ignored = vec!["arn:aws:iam::111122223333:role/asset-sweeper-consumer".to_owned()];
    let mut best = (f64::MAX, f64::MAX);
    for round in 1..=2 {
        let t = Instant::now();
        let read = fetch_only(&s3, &bucket).await;
        assert_eq!(read, bytes, "the baseline read every byte");
        let baseline = t.elapsed().as_secs_f64();

        exec(&db.pool, "DELETE FROM log_sources; DELETE FROM observed_reads").await;
        let step = ObservedUse {
            s3: &s3,
            sources: vec![Source::Access {
                location: &location,
                layout: AccessLogLayout::Simple,
                bucket: "bench-assets",
            }],
            ignored: &ignored,
            lag: Duration::from_secs(3600),
            max_objects: u32::MAX,
        };
        let t = Instant::now();
        let progress =
            step.advance(&db.pool, Share::of(100, Instant::now() + Duration::from_secs(3600))).await.expect("the step");
        let took = t.elapsed().as_secs_f64();
        let source = &progress.sources[0];
        assert_eq!((source.objects_read, source.lines_read), (objects as u64, lines as u64), "{progress:?}");
        let kept: i64 =
            sqlx::query_scalar("SELECT count(*) FROM observed_reads").fetch_one(&db.pool).await.expect("reads");
        println!(
            "round {round}: fetch only {baseline:.2} s ({:.0} MB/s) · the step {took:.2} s ({:.0} lines/s, {:.0} MB/s; \
             {kept} files' newest reads kept, {} ignored) · {:.2}x the fetch's rate",
            bytes as f64 / 1e6 / baseline,
            lines as f64 / took,
            bytes as f64 / 1e6 / took,
            source.requests_ignored,
            baseline / took
        );
        best = (best.0.min(baseline), best.1.min(took));
    }
    let share = (900.0 - 60.0) * 0.15;
    println!(
        "best: the step {:.2} s against a share of {share:.0} s (15 % of a 900 s pass less its reserve): {:.1} % of \
         the share; {:.2}x the fetch's rate",
        best.1,
        best.1 / share * 100.0,
        best.0 / best.1
    );
}
