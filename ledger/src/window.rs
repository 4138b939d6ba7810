//! How long the bucket keeps, and bills, the version a delete leaves behind, and S3's rule for the day it stops:
//! written once here in Rust ([`expiry_day`]) and once in SQL (`asset_sweeper_version_expires`, ledger/sql/money.sql)
//! for the statements that count versions by it; `money::the_version_expiry_rule_is_the_same_in_sql_and_in_rust`
//! holds the two equal.

use chrono::{DateTime, Days, NaiveDate, Utc};
use lifecycle::runs::{BucketCheck, Reason};
use serde::Serialize;
use sqlx::PgConnection;

/// How long the bucket keeps what a delete leaves behind, as the newest pass that read the bucket found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kept", content = "days")]
pub enum Window {
    /// A lifecycle rule expires noncurrent versions this many days after they became noncurrent.
    Days(i32),
    /// No rule expires them: they are kept, and paid for, for ever.
    Forever,
    /// No pass has read the bucket yet: every version a delete left is counted, as if kept for ever.
    Unknown,
}

/// S3's rule for a noncurrent version (`NoncurrentDays`): it expires at the first midnight UTC after `days` days
/// since it became noncurrent at `at` (the days added, then rounded up to the next midnight; a time already at
/// midnight goes to the next one). The day returned is the first S3 no longer bills; `None` past the calendar's end.
pub fn expiry_day(days: u32, at: DateTime<Utc>) -> Option<NaiveDate> {
    at.date_naive().checked_add_days(Days::new(u64::from(days) + 1))
}

impl Window {
    /// How long noncurrent versions are kept, as a pass read the bucket; `None` when it could not read it.
    pub fn of(bucket: &BucketCheck) -> Option<Window> {
        bucket.versioning.as_ref()?;
        Some(match &bucket.noncurrent_expiry {
            Some(expiry) => Window::Days(expiry.days),
            None => Window::Forever,
        })
    }

    /// The rule's days, for a statement that applies it (`None`: kept for ever, or not known).
    pub fn days(self) -> Option<i32> {
        match self {
            Window::Days(days) => Some(days),
            Window::Forever | Window::Unknown => None,
        }
    }

    /// When the version a delete made noncurrent at `at` is expired for good ([`expiry_day`]'s midnight). `None`
    /// when it never is.
    pub fn expires(self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.stops_billing(at).map(|day| day.and_time(chrono::NaiveTime::MIN).and_utc())
    }

    /// The day a version made noncurrent at `at` stops being billed, for a person and for grouping.
    pub fn stops_billing(self, at: DateTime<Utc>) -> Option<NaiveDate> {
        expiry_day(u32::try_from(self.days()?).unwrap_or(0), at)
    }

    /// For a person: "30 days", "for ever (no lifecycle rule expires them)".
    pub fn describe(self) -> String {
        match self {
            Window::Days(days) => format!("{days} days"),
            Window::Forever => "for ever (no lifecycle rule expires noncurrent versions)".to_owned(),
            Window::Unknown => "for ever, as far as is known (no pass has read the bucket's lifecycle yet)".to_owned(),
        }
    }
}

/// The window the newest pass that read the bucket recorded (`reason.bucket` of its run).
pub async fn window(conn: &mut PgConnection) -> Result<Window, sqlx::Error> {
    // The names in the filter are `Reason`'s and `BucketCheck`'s, which their test holds to what rows store.
    let reason = sqlx::query_scalar!(
        r#"SELECT reason AS "reason!" FROM sweep_runs
            WHERE reason->'bucket'->'versioning' IS NOT NULL AND reason->'bucket'->>'versioning' IS NOT NULL
            ORDER BY started_at DESC LIMIT 1"#
    )
    .fetch_optional(&mut *conn)
    .await?;
    // Read as the sweep wrote it: a bucket the newest such row recorded otherwise says no more than no pass at all.
    let bucket = Reason::of(reason.as_ref()).bucket;
    Ok(bucket.as_ref().and_then(Window::of).unwrap_or(Window::Unknown))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn a_noncurrent_version_expires_its_days_after_and_at_the_next_midnight_utc() {
        let at = Utc.with_ymd_and_hms(2026, 12, 3, 18, 30, 0).single().expect("time");
        assert_eq!(
            Window::Days(30).expires(at),
            Utc.with_ymd_and_hms(2027, 1, 3, 0, 0, 0).single(),
            "Dec 3 18:30 + 30 days = Jan 2 18:30, rounded up to Jan 3 00:00"
        );
        assert_eq!(Window::Forever.expires(at), None);
        assert_eq!(Window::Days(1).stops_billing(at), NaiveDate::from_ymd_opt(2026, 12, 5));
        // A time at midnight exactly goes to the next midnight, as S3's rounding up of the whole day does.
        let midnight = Utc.with_ymd_and_hms(2026, 12, 3, 0, 0, 0).single().expect("time");
        assert_eq!(expiry_day(0, midnight), NaiveDate::from_ymd_opt(2026, 12, 4));
    }
}
