//! What a query on Amazon Athena costs: it bills the bytes a query scans, $5 per TB (10^12 bytes), each query's
//! bytes rounded up to a whole MB (10^6 bytes) with at least 10 MB billed (docs/deploying.md gives where and when the
//! price was read). A comparison's cost is said before it runs, from the most it can scan.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Athena's price per TB scanned, in millionths of a dollar (US East, and most Regions).
pub const ATHENA_PER_TB: u64 = 5_000_000;
/// Bytes Athena bills a query at least.
pub const ATHENA_MIN_BYTES: u64 = 10_000_000;
/// Athena rounds the bytes of a query up to a multiple of this.
pub const ATHENA_ROUNDED_TO: u64 = 1_000_000;

/// The bytes one query scans, and what Athena bills for them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scan {
    /// Bytes scanned.
    pub bytes: u64,
    /// What Athena bills, in whole cents (rounded up: a figure said before a query runs is not an underestimate).
    pub cents: u64,
}

impl Scan {
    /// `bytes` scanned by one Athena query.
    pub fn athena(bytes: u64) -> Scan {
        let billed = bytes.div_ceil(ATHENA_ROUNDED_TO).saturating_mul(ATHENA_ROUNDED_TO).max(ATHENA_MIN_BYTES);
        // millionths of a dollar = billed × price / 10^12; cents = that / 10^4, rounded up.
        let millionths = u128::from(billed) * u128::from(ATHENA_PER_TB);
        let cents = millionths.div_ceil(1_000_000_000_000 * 10_000);
        Scan { bytes, cents: u64::try_from(cents).unwrap_or(u64::MAX) }
    }
}

/// `12.3 GB, $0.07`.
impl fmt::Display for Scan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, ${}.{:02}", crate::prices::gb(self.bytes), self.cents / 100, self.cents % 100)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn athena_bills_whole_megabytes_at_least_ten_and_five_dollars_a_terabyte() {
        // 10 MB at $5/TB is $0.00005: billed, it rounds up to a cent.
        assert_eq!(Scan::athena(0).cents, 1);
        assert_eq!(Scan::athena(1).cents, 1);
        assert_eq!(Scan::athena(1_000_000_000_000).cents, 500, "a TB is $5");
        assert_eq!(Scan::athena(2_500_000_000_000).cents, 1_250);
        // 1 TB and a byte is billed as 1 TB and a MB: $5.000005, rounded up to $5.01.
        assert_eq!(Scan::athena(1_000_000_000_001).cents, 501);
        assert_eq!(Scan::athena(u64::MAX).bytes, u64::MAX, "no overflow");
    }
}
