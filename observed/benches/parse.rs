//! Log lines parsed per second against reading the same bytes: the goal is at least 0.3× the raw read, so reading a
//! day of logs is bound by fetching them, not by parsing. `scripts/bench-logs`; `BENCH_LINES` overrides the count.
//!
//! Each line is what a pass does with it: parse it, ask whether it is a read, and keep the newest read of its key as
//! logged, decoding a key into the storage keys it may name once, when first seen. The lines read 100 000 distinct
//! files (a busy site's reads come back to the same files: 2 000 000 lines are 20 reads a file).

use std::collections::HashMap;
use std::hint::black_box;
use std::io::{BufRead, BufReader, Write};
use std::time::Instant;

use chrono::{DateTime, Utc};

/// The distinct files the lines read.
const FILES: usize = 100_000;

fn main() {
    let lines: usize = std::env::var("BENCH_LINES").ok().and_then(|n| n.parse().ok()).unwrap_or(2_000_000);
    let dir = std::env::temp_dir().join(format!("observed-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let s3 = dir.join("s3.log");
    let cloudfront = dir.join("cloudfront.log");
    write(&s3, lines, |i| {
        format!(
            "79a59df900b949e55d96a1e698fbacedfd6e09d98eacf8f8d5218e7cd47ef2be assets-bucket \
             [04/Dec/2026:{:02}:{:02}:{:02} +0000] 192.0.2.{} - 3E57427F3EX{i:07} REST.GET.OBJECT \
             uploads/{:04}/{:08}%2520photo%2525.jpg \"GET /assets-bucket/uploads/{:04}/{:08}%20photo%25.jpg HTTP/1.1\" \
             200 - 48213 48213 21 19 \"https://shop.example.com/products/{i}\" \"Mozilla/5.0 (Windows NT 10.0; Win64; \
             x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36\" - \
             s9lzHYrFp76ZVxRcpX9+5cjAnEH2ROuNkd2BHfIa6UkFVdtjf5mKR3/eTPFvsiP/XV/VLi31234= SigV4 \
             ECDHE-RSA-AES128-GCM-SHA256 AuthHeader assets-bucket.s3.eu-west-1.amazonaws.com TLSv1.3 - - eu-west-1",
            i / 3600 % 24,
            i / 60 % 60,
            i % 60,
            i % 250,
            i % FILES % 9973,
            i % FILES,
            i % FILES % 9973,
            i % FILES
        )
    });
    write(&cloudfront, lines, |i| {
        format!(
            "2026-12-04\t{:02}:{:02}:{:02}\tLAX1\t48213\t192.0.2.{}\tGET\td111111abcdef8.cloudfront.net\t\
             /uploads/{:04}/{:08}%2520photo.jpg\t200\thttps://shop.example.com/products/{i}\tMozilla/5.0%20(Windows%20NT\
             %2010.0;%20Win64;%20x64)%20AppleWebKit/537.36\t-\t-\tHit\tSOX4xwn4XV6Q4rgb7XiVGOHms_{i:08}==\t\
             cdn.example.com\thttps\t23\t0.001\t-\tTLSv1.3\tTLS_AES_128_GCM_SHA256\tHit\tHTTP/2.0\t-\t-\t443\t0.001\tHit\t\
             image/jpeg\t48213\t-\t-",
            i / 3600 % 24,
            i / 60 % 60,
            i % 60,
            i % 250,
            i % FILES % 9973,
            i % FILES
        )
    });
    println!("log lines parsed against reading the same bytes ({lines} lines a format, best of 3 runs each)");
    println!(
        "{:<11} {:>6} {:>10} {:>13} {:>11} {:>7} {:>13} {:>11} {:>7}",
        "format", "MB", "read MB/s", "parse lines/s", "parse MB/s", "ratio", "keep lines/s", "keep MB/s", "ratio"
    );
    for (name, path) in [("s3", &s3), ("cloudfront", &cloudfront)] {
        let bytes = std::fs::metadata(path).expect("the file").len() as f64 / 1e6;
        let each_line = |visit: &mut dyn FnMut(&str)| {
            for line in BufReader::with_capacity(1 << 20, std::fs::File::open(path).expect("the file")).lines() {
                visit(&line.expect("a line"));
            }
        };
        let read = best(|| {
            let mut count = 0usize;
            each_line(&mut |line| count += black_box(line).len());
            count
        });
        // Parsing alone: each line's fields, and whether it is a read.
        let parse = best(|| {
            let mut reader = observed::cloudfront_log::Reader::new("/");
            let mut reads = 0usize;
            each_line(&mut |line| {
                let read = if name == "s3" {
                    observed::s3_log::parse(line).is_ok_and(|a| black_box(a).is_read())
                } else {
                    reader.parse(line).ok().flatten().is_some_and(|a| black_box(a).is_read())
                };
                reads += usize::from(read);
            });
            assert_eq!(reads, lines, "every line is a read");
            reads
        });
        // What a pass keeps: the newest read of each key as logged, decoded once, when first seen.
        let keep = best(|| {
            let mut reader = observed::cloudfront_log::Reader::new("/");
            let mut newest: HashMap<String, DateTime<Utc>> = HashMap::new();
            each_line(&mut |line| {
                let access =
                    if name == "s3" { observed::s3_log::parse(line).ok() } else { reader.parse(line).ok().flatten() };
                let Some(access) = access.filter(|a| a.is_read()) else { return };
                match newest.get_mut(access.logged_key()) {
                    Some(at) => *at = (*at).max(access.at),
                    None => {
                        black_box(access.keys());
                        newest.insert(access.logged_key().to_owned(), access.at);
                    }
                }
            });
            assert_eq!(newest.len(), FILES.min(lines), "one entry a file");
            newest.len()
        });
        println!(
            "{name:<11} {bytes:>6.0} {:>10.0} {:>13.0} {:>11.0} {:>6.2}x {:>13.0} {:>11.0} {:>6.2}x",
            bytes / read,
            lines as f64 / parse,
            bytes / parse,
            read / parse,
            lines as f64 / keep,
            bytes / keep,
            read / keep
        );
    }
    println!("goal: parsing at least 0.30x the raw read");
    std::fs::remove_dir_all(&dir).ok();
}

fn write(path: &std::path::Path, lines: usize, line: impl Fn(usize) -> String) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).expect("a scratch file"));
    for i in 0..lines {
        writeln!(out, "{}", line(i)).expect("written");
    }
    out.flush().expect("flushed");
}

/// The shortest of three runs, in seconds.
fn best(mut run: impl FnMut() -> usize) -> f64 {
    (0..3)
        .map(|_| {
            let started = Instant::now();
            black_box(run());
            started.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}
