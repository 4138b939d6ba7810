//! Freed against billed: the bytes S3 reports the bucket holds (its daily storage metrics) against the bytes the
//! sweeper's rows account for, recorded once per reported day, with the likely cause when they disagree.
//!
//! The believed side is read from totals the sweep already keeps, never by scanning the bucket's rows, so its cost
//! does not grow with the bucket: the folded per-workspace stored bytes (`workspace_usage`), the versions deletes and
//! purges left within the bucket's window (`settlement_events`, by its time index), and the keys no row knew at the
//! newest reconciliation.

use std::collections::BTreeMap;

use crate::figure::{Figure, figure};
use crate::prices::{self, Monthly, Prices};
use crate::window::Window;
use chrono::{Days, NaiveDate};
use serde::Serialize;
use sqlx::PgConnection;

/// The bucket as S3 reported it for one day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reported {
    /// The day the figures are for.
    pub metric_day: NaiveDate,
    /// Every storage type's bytes added up: current and noncurrent versions alike.
    pub bytes: u64,
    /// Objects (versions and delete markers included), when S3 reported them.
    pub objects: Option<u64>,
    /// Bytes per storage type (`StandardStorage`, …).
    pub by_type: BTreeMap<String, u64>,
}

impl Reported {
    /// What the reported bytes are billed a month, per storage type, at `prices` (a type this build cannot price is
    /// left out and named in `unpriced`).
    pub fn billed(&self, prices: &Prices) -> (Monthly, Vec<String>) {
        let mut total = Monthly::default();
        let mut unpriced = Vec::new();
        for (storage_type, bytes) in &self.by_type {
            match prices::class_of_storage_type(storage_type).and_then(|class| prices.monthly_in(class, *bytes)) {
                Some(cost) => total = total.saturating_add(cost),
                None => unpriced.push(storage_type.clone()),
            }
        }
        (total, unpriced)
    }
}

/// What the sweeper believes the bucket holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Believed {
    /// Current objects the rows know (each workspace's stored bytes, as of the last fold).
    pub current: Figure,
    /// Versions deletes and purges left, within the bucket's window.
    pub noncurrent: Figure,
    /// Keys no row knew at the newest reconciliation (less those it adopted).
    pub unknown: Figure,
}

impl Believed {
    /// All bytes the rows account for.
    pub fn bytes(&self) -> u64 {
        self.current.bytes.saturating_add(self.noncurrent.bytes).saturating_add(self.unknown.bytes)
    }

    /// All objects the rows account for.
    pub fn objects(&self) -> u64 {
        self.current.objects.saturating_add(self.noncurrent.objects).saturating_add(self.unknown.objects)
    }
}

/// What the rows account for on `day`, with the bucket's noncurrent-version `window`; and of it, the bytes freed
/// whose versions expired from two to thirty-two days before `day` (they should be gone from S3's figures by then).
/// Current objects and bytes no row knows are as of now (the newest fold, the newest reconciliation); versions are as
/// of `day`, those deleted since included (they were current then).
pub async fn believed(conn: &mut PgConnection, window: Window, day: NaiveDate) -> Result<(Believed, u64), sqlx::Error> {
    let current = sqlx::query!(
        r#"SELECT coalesce(sum(stored_bytes), 0)::bigint AS "bytes!",
                  greatest((SELECT reltuples FROM pg_catalog.pg_class WHERE oid = 'stored_objects'::regclass), 0)::bigint
                      AS "objects!"
             FROM workspace_usage"#
    )
    .fetch_one(&mut *conn)
    .await?;
    // A version stops being billed at S3's expiry (`asset_sweeper_version_expires`, ledger/sql/money.sql).
    let versions = sqlx::query!(
        r#"WITH freed AS (
               SELECT bytes_freed,
                      asset_sweeper_version_expires(occurred_at, $1::integer) AS expires
                 FROM settlement_events e
                WHERE asset_sweeper_left_a_version(e)
                  -- Older ones expired before the day less 32 (read by the settlements' time index).
                  AND ($1::integer IS NULL OR occurred_at >= ($2::date - ($1 + 34)) AT TIME ZONE 'UTC'))
           SELECT count(*) FILTER (WHERE expires IS NULL OR expires > $2::date) AS "objects!",
                  coalesce(sum(bytes_freed) FILTER (WHERE expires IS NULL OR expires > $2::date), 0)::bigint
                      AS "bytes!",
                  coalesce(sum(bytes_freed) FILTER (WHERE expires <= $2::date - 2 AND expires > $2::date - 32), 0)::bigint
                      AS "expired!"
             FROM freed"#,
        window.days(),
        day,
    )
    .fetch_one(&mut *conn)
    .await?;
    let unknown = crate::holdings::unknown(&mut *conn, None).await?.into_iter().map(|(_, f)| f).sum();
    let believed = Believed {
        current: figure(current.objects, current.bytes),
        noncurrent: figure(versions.objects, versions.bytes),
        unknown,
    };
    Ok((believed, versions.expired.max(0).unsigned_abs()))
}

/// One day's comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Drift {
    /// The bucket.
    pub bucket: String,
    /// What S3 reported.
    pub reported: Reported,
    /// What the rows account for.
    pub believed: Believed,
    /// Reported bytes less believed ones: positive when the bucket holds more than the rows account for.
    pub drift_bytes: i64,
    /// The difference, in percent of the larger side.
    pub drift_percent: f64,
    /// The share beyond which the alarm fires (`DRIFT_ALARM_PERCENT`).
    pub alarm_percent: u32,
    /// Freed bytes whose versions expired two days or more before the reported day, that the bucket still reports.
    pub freed_not_shown: u64,
    /// Which side is larger and the likely cause, when the difference is beyond the alarm's share or freed bytes
    /// did not show.
    pub cause: Option<String>,
}

impl Drift {
    /// Whether the drift alarm fires.
    pub fn drifted(&self) -> bool {
        self.drift_percent > f64::from(self.alarm_percent)
    }
}

/// Compares one day's report with the rows. `expired` is the freed bytes whose versions should have left S3's figures
/// by the reported day; `expiry_missing` whether the newest pass found no rule that expires noncurrent versions.
pub fn compare(
    bucket: &str,
    reported: Reported,
    believed: Believed,
    expired: u64,
    alarm_percent: u32,
    expiry_missing: bool,
) -> Drift {
    let (r, b) = (reported.bytes, believed.bytes());
    let drift_bytes = i64::try_from(i128::from(r) - i128::from(b)).unwrap_or(i64::MAX);
    #[allow(clippy::cast_precision_loss)] // a share of two byte counts, shown to a tenth of a percent
    let drift_percent = if r.max(b) == 0 { 0.0 } else { r.abs_diff(b) as f64 * 100.0 / r.max(b) as f64 };
    // Freed bytes "not shown" only when the excess holds at least half of what should have left: an excess made of
    // other things (the application's overwrites, parts of unfinished uploads) does not blame the expiry.
    let excess = r.saturating_sub(b);
    let freed_not_shown = if expired > 0 && excess >= expired.div_ceil(2) { expired.min(excess) } else { 0 };
    let mut drift = Drift {
        bucket: bucket.to_owned(),
        reported,
        believed,
        drift_bytes,
        drift_percent: (drift_percent * 10.0).round() / 10.0,
        alarm_percent,
        freed_not_shown,
        cause: None,
    };
    drift.cause = cause(&drift, expiry_missing);
    drift
}

fn cause(d: &Drift, expiry_missing: bool) -> Option<String> {
    let (r, b) = (d.reported.bytes, d.believed.bytes());
    if !d.drifted() && d.freed_not_shown == 0 {
        return None;
    }
    #[allow(clippy::cast_precision_loss)]
    let ratio = if b == 0 { f64::INFINITY } else { r as f64 / b as f64 };
    let sides = format!(
        "S3 reports {r} bytes in bucket {} for {}, the rows account for {b} ({:.1}×, {:.1}% apart)",
        d.bucket, d.reported.metric_day, ratio, d.drift_percent
    );
    let why = if r > b && expiry_missing {
        "the bucket is larger: no lifecycle rule expires noncurrent versions, so every version a delete, a purge or \
         the application's own overwrite left is kept and billed for ever. Add a NoncurrentVersionExpiration rule \
         (docs/deploying.md); `asset-sweeper status` shows the bucket check"
            .to_owned()
    } else if d.freed_not_shown > 0 {
        format!(
            "the bucket is larger: {} freed bytes whose versions expired two days or more ago are still reported. The \
             noncurrent-version expiry did not remove them: a rule disabled, or one that does not cover their prefix",
            d.freed_not_shown
        )
    } else if r > b {
        "the bucket is larger: it holds bytes no row accounts for. Likely versions the application's own overwrites \
         left (kept until the rule expires them), another writer, or keys outside RECONCILE_PREFIXES; `asset-sweeper \
         reconcile --dry-run` lists keys no row knows"
            .to_owned()
    } else {
        "the bucket is smaller: something else deletes (a lifecycle rule that expires current objects, another \
         writer), or rows point at bytes that are gone; `asset-sweeper reconcile --dry-run` reports lost assets"
            .to_owned()
    };
    Some(format!("{sides}: {why}"))
}

/// Records `drift` (once per bucket and reported day; a second comparison of the same day is dropped). Whether it
/// was written.
pub async fn record(conn: &mut PgConnection, drift: &Drift) -> Result<bool, sqlx::Error> {
    let to_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let written = sqlx::query!(
        "INSERT INTO bucket_measurements (bucket, metric_day, source, reported_bytes, reported_objects,
                                          reported_by_type, believed_bytes, believed_objects, believed,
                                          freed_not_shown, drift_percent, alarm_percent, cause)
         VALUES ($1, $2, 'cloudwatch', $3, $4, $5, $6, $7, $8, $9, $10::float8::numeric, $11, $12)
         ON CONFLICT (bucket, metric_day) DO NOTHING",
        drift.bucket,
        drift.reported.metric_day,
        to_i64(drift.reported.bytes),
        drift.reported.objects.map(to_i64),
        serde_json::to_value(&drift.reported.by_type).unwrap_or_default(),
        to_i64(drift.believed.bytes()),
        to_i64(drift.believed.objects()),
        serde_json::to_value(drift.believed).unwrap_or_default(),
        to_i64(drift.freed_not_shown),
        drift.drift_percent,
        i32::try_from(drift.alarm_percent).unwrap_or(i32::MAX),
        drift.cause,
    )
    .execute(&mut *conn)
    .await?;
    Ok(written.rows_affected() == 1)
}

/// The newest comparison recorded for `bucket`.
#[derive(Debug, Clone, Serialize)]
pub struct Measurement {
    /// When it was made.
    pub measured_at: String,
    /// The day S3's figures are for.
    pub metric_day: NaiveDate,
    /// S3's bytes.
    pub reported_bytes: i64,
    /// S3's objects, when reported.
    pub reported_objects: Option<i64>,
    /// S3's bytes per storage type.
    pub reported_by_type: serde_json::Value,
    /// The rows' bytes.
    pub believed_bytes: i64,
    /// The rows' parts.
    pub believed: serde_json::Value,
    /// Freed bytes still reported.
    pub freed_not_shown: i64,
    /// Percent apart.
    pub drift_percent: f64,
    /// The alarm's share when it was made.
    pub alarm_percent: i32,
    /// Which side is larger and why, when beyond the share.
    pub cause: Option<String>,
}

impl Measurement {
    /// Whether the drift alarm fired on it.
    pub fn drifted(&self) -> bool {
        self.drift_percent > f64::from(self.alarm_percent)
    }
}

/// The newest comparison for `bucket`, if any.
pub async fn newest(conn: &mut PgConnection, bucket: &str) -> Result<Option<Measurement>, sqlx::Error> {
    sqlx::query_as!(
        Measurement,
        r#"SELECT measured_at::text AS "measured_at!", metric_day, reported_bytes, reported_objects, reported_by_type,
                  believed_bytes, believed, freed_not_shown, drift_percent::float8 AS "drift_percent!",
                  alarm_percent, cause
             FROM bucket_measurements WHERE bucket = $1 ORDER BY metric_day DESC LIMIT 1"#,
        bucket,
    )
    .fetch_optional(conn)
    .await
}

/// Days after which the newest comparison is too old to stand for the bucket now: S3 publishes daily and a pass asks
/// until it has yesterday's, so an older one means the comparisons stopped.
pub const STALE_AFTER_DAYS: u64 = 4;

/// Whether a comparison of `metric_day`'s figures still stands for the bucket on `today`.
pub fn recent(metric_day: NaiveDate, today: NaiveDate) -> bool {
    today.checked_sub_days(Days::new(STALE_AFTER_DAYS)).is_none_or(|oldest| metric_day >= oldest)
}

/// Whether S3's figures for a day after `newest_day` may be out: S3 publishes a day's storage metrics within a day or
/// two, so a pass asks (two calls) until it has yesterday's, then not again until tomorrow.
pub fn worth_asking(newest_day: Option<NaiveDate>, today: NaiveDate) -> bool {
    newest_day.is_none_or(|day| day < today.checked_sub_days(Days::new(1)).unwrap_or(today))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reported(bytes: u64) -> Reported {
        Reported {
            metric_day: NaiveDate::from_ymd_opt(2026, 12, 2).expect("day"),
            bytes,
            objects: None,
            by_type: BTreeMap::from([("StandardStorage".to_owned(), bytes)]),
        }
    }

    fn believed(current: u64, noncurrent: u64) -> Believed {
        Believed {
            current: Figure { objects: 1, bytes: current },
            noncurrent: Figure { objects: 1, bytes: noncurrent },
            unknown: Figure::default(),
        }
    }

    #[test]
    fn equal_sides_have_no_cause_and_twenty_times_with_versions_that_never_expire_names_the_rule() {
        let same = compare("b", reported(1000), believed(900, 100), 0, 20, false);
        assert_eq!((same.drift_bytes, same.drift_percent, same.drifted(), same.cause), (0, 0.0, false, None));

        let huge = compare("b", reported(21_000), believed(1000, 0), 0, 20, true);
        assert!(huge.drifted());
        assert_eq!(huge.drift_percent, 95.2);
        let cause = huge.cause.expect("a cause");
        assert!(cause.contains("21.0×") && cause.contains("no lifecycle rule expires noncurrent versions"), "{cause}");

        let within = compare("b", reported(1100), believed(1000, 0), 0, 20, false);
        assert!(!within.drifted() && within.cause.is_none(), "{within:?}");
    }

    #[test]
    fn freed_bytes_still_reported_two_days_after_their_expiry_are_named_and_a_smaller_bucket_is_told_apart() {
        let kept = compare("b", reported(1_050), believed(1_000, 0), 80, 20, false);
        assert_eq!(kept.freed_not_shown, 50, "at most what the bucket holds beyond the rows");
        let other = compare("b", reported(1_050), believed(1_000, 0), 200, 20, false);
        assert_eq!(other.freed_not_shown, 0, "an excess of a quarter of what left is something else");
        assert!(!kept.drifted());
        assert!(kept.cause.expect("cause").contains("50 freed bytes whose versions expired"));

        let smaller = compare("b", reported(100), believed(1_000, 0), 0, 20, false);
        assert!(smaller.drift_bytes < 0 && smaller.drifted());
        assert!(smaller.cause.expect("cause").contains("the bucket is smaller"));
    }

    #[test]
    fn the_billed_side_is_priced_per_storage_type_and_an_unknown_type_is_named() {
        let mut r = reported(prices::GB * 100);
        r.by_type.insert("GlacierStorage".to_owned(), prices::GB * 1000);
        r.by_type.insert("FutureStorage".to_owned(), 5);
        let (billed, unpriced) = r.billed(&Prices::default());
        assert_eq!((billed.cents(), unpriced), (230 + 360, vec!["FutureStorage".to_owned()]));
    }

    #[test]
    fn a_pass_asks_s3_until_it_has_yesterdays_figures() {
        let today = NaiveDate::from_ymd_opt(2026, 12, 3).expect("day");
        assert!(worth_asking(None, today));
        assert!(worth_asking(NaiveDate::from_ymd_opt(2026, 12, 1), today));
        assert!(!worth_asking(NaiveDate::from_ymd_opt(2026, 12, 2), today));
    }
}
