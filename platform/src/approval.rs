//! An approval bound to what a person read: every approval (of a braked workspace, a retention rule, a managed
//! prefix) records the plan it was granted on, and covers a later plan only while that has not grown beyond a
//! tolerance over it. A plan that shrank is covered: less goes than the person agreed to.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

/// How far, in percent, a plan may grow over the approved one and still be covered (`APPROVAL_TOLERANCE_PERCENT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Tolerance(pub u32);

impl Tolerance {
    /// The most an approval of `approved` covers: that, and the tolerance's share of it more (rounded down).
    pub fn ceiling(self, approved: u64) -> u64 {
        let more = u128::from(approved) * u128::from(self.0) / 100;
        approved.saturating_add(u64::try_from(more).unwrap_or(u64::MAX))
    }

    /// Where `now` of `what` outgrew the `approved` figure, if it did.
    pub fn outgrown(self, what: &'static str, approved: u64, now: u64) -> Option<Outgrown> {
        (now > self.ceiling(approved)).then_some(Outgrown { what, approved, now, tolerance_percent: self.0 })
    }
}

/// A figure of a plan that grew beyond what its approval covers: both figures, for the run record and `status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outgrown {
    /// What was counted: assets, bytes, records or keys.
    pub what: &'static str,
    /// The figure the person read when approving.
    pub approved: u64,
    /// The figure now.
    pub now: u64,
    /// The tolerance it is beyond, in percent.
    pub tolerance_percent: u32,
}

/// Who grants an approval, why, and for how long: what every approval (of a workspace, a prefix, a rule) records
/// beside the figures it was granted on.
#[derive(Debug, Clone, Copy)]
pub struct Signed<'a> {
    /// Who approves.
    pub by: &'a str,
    /// Why, as they wrote it.
    pub reason: &'a str,
    /// How long it lasts, from the database's now.
    pub hours: u32,
}

impl Signed<'_> {
    /// The hours as the statements that record an approval take them (`now() + $n * interval '1 hour'`).
    pub fn hours(&self) -> f64 {
        f64::from(self.hours)
    }
}

/// When an approval ends, as every command and run record says it: RFC 3339 in UTC, to the second.
pub fn stamp(at: chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The figures an approval is granted on: what [`Outgrown::what`] can name.
pub const FIGURES: [&str; 4] = ["assets", "bytes", "records", "keys"];

/// Read back from a run record: `what` must be one of [`FIGURES`].
impl<'de> Deserialize<'de> for Outgrown {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Written {
            what: String,
            approved: u64,
            now: u64,
            tolerance_percent: u32,
        }
        let w = Written::deserialize(deserializer)?;
        let what = FIGURES.into_iter().find(|f| *f == w.what).ok_or_else(|| {
            serde::de::Error::custom(format!("{:?} is not a figure an approval is granted on ({FIGURES:?})", w.what))
        })?;
        Ok(Outgrown { what, approved: w.approved, now: w.now, tolerance_percent: w.tolerance_percent })
    }
}

impl fmt::Display for Outgrown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} now against {} approved, beyond the {}% tolerance",
            self.now, self.what, self.approved, self.tolerance_percent
        )
    }
}

/// The first of `figures` (what, approved, now) that outgrew its approval, if any.
pub fn first_outgrown(tolerance: Tolerance, figures: &[(&'static str, u64, u64)]) -> Option<Outgrown> {
    figures.iter().find_map(|&(what, approved, now)| tolerance.outgrown(what, approved, now))
}

/// A count or a sum from the database as the approval compares it: never negative, and a negative one counts as
/// nothing.
pub fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_within_the_tolerance_is_covered_and_one_beyond_it_is_not() {
        let ten = Tolerance(10);
        assert_eq!(ten.outgrown("assets", 100, 110), None);
        assert_eq!(ten.outgrown("assets", 100, 50), None, "a plan that shrank is covered");
        let grown = ten.outgrown("assets", 100, 1_000).expect("tenfold");
        assert_eq!((grown.approved, grown.now), (100, 1_000));
        assert_eq!(grown.to_string(), "1000 assets now against 100 approved, beyond the 10% tolerance");
        assert!(ten.outgrown("assets", 100, 111).is_some());
    }

    #[test]
    fn an_approval_of_nothing_covers_nothing_and_no_tolerance_covers_exactly_what_was_read() {
        assert!(Tolerance(10).outgrown("keys", 0, 1).is_some());
        assert_eq!(Tolerance(0).outgrown("keys", 7, 7), None);
        assert!(Tolerance(0).outgrown("keys", 7, 8).is_some());
        assert_eq!(Tolerance(1_000).ceiling(u64::MAX), u64::MAX, "no overflow");
    }

    #[test]
    fn the_first_figure_beyond_its_approval_is_the_one_named() {
        let grown = first_outgrown(Tolerance(10), &[("assets", 100, 105), ("bytes", 1_000, 5_000)]);
        assert_eq!(grown.clone().map(|g| g.what), Some("bytes"));
        let read: Outgrown = serde_json::from_value(serde_json::to_value(&grown).expect("json")).expect("read back");
        assert_eq!(Some(read), grown);
        assert!(
            serde_json::from_value::<Outgrown>(serde_json::json!({"what": "cats", "approved": 1, "now": 2,
            "tolerance_percent": 5}))
            .is_err()
        );
        assert_eq!(first_outgrown(Tolerance(10), &[("assets", 100, 105)]), None);
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-06T13:05:09.999999+00:00").expect("a time");
        assert_eq!(stamp(at.to_utc()), "2026-12-06T13:05:09Z", "to the second, as to_char wrote it");
    }
}
