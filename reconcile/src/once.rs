//! One whole reconciliation in the caller's transaction, as an operator runs it: read the bucket (an inventory
//! report's every file, or a listing of the managed prefixes), compare, and adopt. The caller records the findings
//! (`record`) and commits, or rolls back for a dry run. The sweep instead spreads a report over passes
//! ([`super::advance`]).

use std::time::Duration;

use chrono::Utc;
use sqlx::PgConnection;

use super::read::{self, Report};
use super::{Findings, Listing, ListingSource, ReconcileError};
use platform::keys::KeyLayout;

/// Where the keys come from.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// An S3 Inventory report: `s3://bucket/path/manifest.json`, or a local copy's manifest.
    Inventory(&'a str),
    /// `ListObjectsV2` over the managed prefixes.
    List,
}

/// How far one reconciliation goes.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Keys written within this are neither adopted nor counted as adoptable.
    pub grace: Duration,
    /// The most missing assets confirmed with the bucket.
    pub confirm: usize,
    /// The most keys adopted.
    pub adopt_max: u32,
    /// How far a prefix's adoptable keys may grow over its approval and the previous report.
    pub tolerance: platform::approval::Tolerance,
}

/// Reads `source` into a new listing, compares it with the rows, and adopts what an approved prefix holds; answers
/// the listing, what was read (for a person), and the findings.
pub async fn reconcile(
    conn: &mut PgConnection,
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    layout: &KeyLayout,
    source: Source<'_>,
    limits: Limits,
) -> Result<(Listing, String, Findings), ReconcileError> {
    let (listing, read_from) = match source {
        Source::Inventory(location) => {
            let report = Report::open(s3, location, bucket).await?;
            let files = report.manifest.files.len();
            let listing = super::open(conn, ListingSource::Inventory, location, report.taken_at(), files).await?;
            for file in 0..files {
                report.ingest_file(conn, listing.id, layout, file).await?;
            }
            (listing, format!("inventory {location} ({files} file(s))"))
        }
        Source::List => {
            let listing = super::open(conn, ListingSource::List, &format!("s3://{bucket}"), Utc::now(), 0).await?;
            read::ingest_listing(s3, bucket, conn, listing.id, layout).await?;
            (listing, format!("a listing of s3://{bucket}"))
        }
    };
    let mut findings = super::compare(conn, s3, bucket, layout, listing, limits.grace, limits.confirm).await?;
    let terms = super::adopt::Terms { grace: limits.grace, max: limits.adopt_max, tolerance: limits.tolerance };
    super::adopt::adopt(conn, listing, layout, &mut findings, terms).await?;
    Ok((listing, read_from, findings))
}
