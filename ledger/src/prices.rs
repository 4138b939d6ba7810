//! What stored bytes cost: a price table per S3 storage class, and monthly costs kept in millionths of a dollar so
//! that a sum of many small figures rounds once, to the cent, at the end.
//!
//! S3 bills storage per GB-month, where a GB is 2^30 bytes, prorated by the hour. The defaults are S3's published
//! prices for US East (N. Virginia), first 50 TB a month (docs/operating.md gives the date they were recorded); a
//! deployment elsewhere sets `STORAGE_PRICES`.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Bytes in one billed GB.
pub const GB: u64 = 1 << 30;

/// The storage class the sweeper's own figures are priced at when nothing says otherwise.
pub const DEFAULT_CLASS: &str = "STANDARD";

/// S3's prices per GB-month in US East (N. Virginia), first 50 TB, in millionths of a dollar.
const US_EAST_1: &[(&str, u64)] = &[
    ("STANDARD", 23_000),
    ("INTELLIGENT_TIERING", 23_000),
    ("STANDARD_IA", 12_500),
    ("ONEZONE_IA", 10_000),
    ("GLACIER_IR", 4_000),
    ("GLACIER", 3_600),
    ("DEEP_ARCHIVE", 990),
    ("REDUCED_REDUNDANCY", 24_000),
    ("EXPRESS_ONEZONE", 110_000),
];

/// S3's storage types in its CloudWatch metrics (`BucketSizeBytes`), and the class each is billed as. Intelligent-
/// Tiering's tiers are billed at the class their tier matches.
const STORAGE_TYPES: &[(&str, &str)] = &[
    ("StandardStorage", "STANDARD"),
    ("IntelligentTieringFAStorage", "INTELLIGENT_TIERING"),
    ("IntelligentTieringIAStorage", "STANDARD_IA"),
    ("IntelligentTieringAIAStorage", "GLACIER_IR"),
    ("IntelligentTieringAAStorage", "GLACIER"),
    ("IntelligentTieringDAAStorage", "DEEP_ARCHIVE"),
    ("StandardIAStorage", "STANDARD_IA"),
    ("StandardIASizeOverhead", "STANDARD_IA"),
    ("OneZoneIAStorage", "ONEZONE_IA"),
    ("OneZoneIASizeOverhead", "ONEZONE_IA"),
    ("GlacierInstantRetrievalStorage", "GLACIER_IR"),
    ("GlacierIRSizeOverhead", "GLACIER_IR"),
    ("GlacierStorage", "GLACIER"),
    ("GlacierStagingStorage", "STANDARD"),
    ("GlacierObjectOverhead", "GLACIER"),
    ("GlacierS3ObjectOverhead", "STANDARD"),
    ("DeepArchiveStorage", "DEEP_ARCHIVE"),
    ("DeepArchiveObjectOverhead", "DEEP_ARCHIVE"),
    ("DeepArchiveS3ObjectOverhead", "STANDARD"),
    ("DeepArchiveStagingStorage", "STANDARD"),
    ("ReducedRedundancyStorage", "REDUCED_REDUNDANCY"),
    ("ExpressOneZone", "EXPRESS_ONEZONE"),
];

/// The storage class S3 bills a CloudWatch storage type (`StandardStorage`, …) as; `None` for a type this build does
/// not know.
pub fn class_of_storage_type(storage_type: &str) -> Option<&'static str> {
    STORAGE_TYPES.iter().find(|(t, _)| *t == storage_type).map(|(_, class)| *class)
}

/// A monthly cost, in millionths of a dollar. Shown, and compared in tests, in whole cents, rounded half up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Monthly(pub u64);

impl Monthly {
    /// The cost in whole cents, rounded half up.
    pub fn cents(self) -> u64 {
        self.0.saturating_add(5_000) / 10_000
    }

    /// The cost in dollars and cents: `$12.34`.
    pub fn dollars(self) -> String {
        let cents = self.cents();
        format!("${}.{:02}", group(cents / 100), cents % 100)
    }

    /// The two costs added up, at most `u64::MAX` millionths.
    pub fn saturating_add(self, other: Monthly) -> Monthly {
        Monthly(self.0.saturating_add(other.0))
    }
}

impl std::iter::Sum for Monthly {
    fn sum<I: Iterator<Item = Monthly>>(iter: I) -> Monthly {
        iter.fold(Monthly(0), Monthly::saturating_add)
    }
}

/// `$12.34/month`; a cost above nothing that rounds to no cent reads `under $0.01/month`, so a small bucket's waste is
/// not shown as free.
impl fmt::Display for Monthly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 > 0 && self.cents() == 0 {
            return f.write_str("under $0.01/month");
        }
        write!(f, "{}/month", self.dollars())
    }
}

/// In JSON: `{"usd_per_month": "12.34", "cents_per_month": 1234}`, so a reader needs no arithmetic and a script no
/// parsing.
impl Serialize for Monthly {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let cents = self.cents();
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("usd_per_month", &format!("{}.{:02}", cents / 100, cents % 100))?;
        map.serialize_entry("cents_per_month", &cents)?;
        map.end()
    }
}

/// Read back from what [`Serialize`] wrote (a run row's money): its whole cents, the precision the JSON keeps.
impl<'de> Deserialize<'de> for Monthly {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Written {
            cents_per_month: u64,
        }
        let written = Written::deserialize(deserializer)?;
        Ok(Monthly(written.cents_per_month.saturating_mul(10_000)))
    }
}

/// Bytes and what they cost a month.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Priced {
    /// Bytes.
    pub bytes: u64,
    /// Their cost a month, at the price table's class.
    pub money: Monthly,
}

impl Priced {
    /// `bytes` priced at `prices`' class.
    pub fn of(bytes: u64, prices: &Prices) -> Self {
        Priced { bytes, money: prices.monthly(bytes) }
    }
}

/// Thousands separated by commas: `1,234,567`.
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A price table: millionths of a dollar per GB-month, per storage class (S3's names: `STANDARD`, `STANDARD_IA`, …).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Prices {
    per_gb_month: BTreeMap<String, u64>,
    /// The class the sweeper's own figures (rows, versions, orphans) are priced at: the class the application
    /// uploads in.
    pub class: String,
}

impl Default for Prices {
    fn default() -> Self {
        Prices {
            per_gb_month: US_EAST_1.iter().map(|(c, p)| ((*c).to_owned(), *p)).collect(),
            class: DEFAULT_CLASS.to_owned(),
        }
    }
}

/// Why a price table or a class was refused: names the entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[allow(missing_docs)] // each variant's message says what it is
pub enum PriceError {
    #[error("{entry:?} is not CLASS=DOLLARS (for example STANDARD=0.023)")]
    Entry { entry: String },
    #[error("the price {price:?} of {class} is not a number of dollars per GB-month with at most six decimals")]
    Price { class: String, price: String },
    #[error("{class:?} is not a storage class of the price table ({known})")]
    UnknownClass { class: String, known: String },
}

impl Prices {
    /// The defaults with `overrides` laid over them: `STANDARD=0.0245,GLACIER_IR=0.005` (dollars per GB-month), and
    /// `class` as the class the sweeper's own figures are priced at.
    pub fn parse(overrides: &str, class: &str) -> Result<Prices, PriceError> {
        let mut prices = Prices::default();
        for entry in overrides.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (name, price) = entry.split_once('=').ok_or_else(|| PriceError::Entry { entry: entry.to_owned() })?;
            let name = name.trim().to_ascii_uppercase();
            if name.is_empty() {
                return Err(PriceError::Entry { entry: entry.to_owned() });
            }
            let micros = micros(price.trim())
                .ok_or_else(|| PriceError::Price { class: name.clone(), price: price.trim().to_owned() })?;
            prices.per_gb_month.insert(name, micros);
        }
        let class = class.trim().to_ascii_uppercase();
        if !prices.per_gb_month.contains_key(&class) {
            let known = prices.per_gb_month.keys().cloned().collect::<Vec<_>>().join(", ");
            return Err(PriceError::UnknownClass { class, known });
        }
        prices.class = class;
        Ok(prices)
    }

    /// The price of `class` per GB-month, in millionths of a dollar.
    pub fn per_gb_month(&self, class: &str) -> Option<u64> {
        self.per_gb_month.get(class).copied()
    }

    /// What `bytes` cost a month in `class`; `None` for a class the table has no price for.
    pub fn monthly_in(&self, class: &str, bytes: u64) -> Option<Monthly> {
        let price = self.per_gb_month(class)?;
        let micros = u128::from(bytes) * u128::from(price) / u128::from(GB);
        Some(Monthly(u64::try_from(micros).unwrap_or(u64::MAX)))
    }

    /// What `bytes` of the sweeper's own figures cost a month, at [`Prices::class`].
    pub fn monthly(&self, bytes: u64) -> Monthly {
        self.monthly_in(&self.class, bytes).unwrap_or_default()
    }

    /// What `bytes` cost a month, for a figure that may be negative (a drift), as a non-negative cost.
    pub fn monthly_signed(&self, bytes: i64) -> Monthly {
        self.monthly(bytes.unsigned_abs())
    }
}

/// `0.023` dollars as 23 000 millionths; refuses more than six decimals, a sign, and anything else.
fn micros(dollars: &str) -> Option<u64> {
    let (whole, fraction) = dollars.split_once('.').unwrap_or((dollars, ""));
    if (whole.is_empty() && fraction.is_empty())
        || fraction.len() > 6
        || !whole.bytes().chain(fraction.bytes()).all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let whole: u64 = if whole.is_empty() { 0 } else { whole.parse().ok()? };
    let fraction: u64 = if fraction.is_empty() { 0 } else { format!("{fraction:0<6}").parse().ok()? };
    whole.checked_mul(1_000_000)?.checked_add(fraction)
}

/// GB, to two decimals, for a person: `12.50 GB`.
pub fn gb(bytes: u64) -> String {
    let hundredths = u128::from(bytes) * 100 / u128::from(GB);
    format!("{}.{:02} GB", hundredths / 100, hundredths % 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cost_is_bytes_over_a_binary_gb_times_the_price_rounded_once_to_the_cent() {
        let prices = Prices::default();
        // 100 GB of STANDARD: $2.30.
        assert_eq!(prices.monthly(100 * GB).cents(), 230);
        assert_eq!(prices.monthly(100 * GB).dollars(), "$2.30");
        // Half a cent rounds up; just under does not.
        assert_eq!(Monthly(5_000).cents(), 1);
        assert_eq!(Monthly(4_999).cents(), 0);
        assert_eq!(Monthly(15_000).cents(), 2);
        // A thousand small objects summed before rounding, not rounded each to nothing.
        let small: Monthly = (0..1000).map(|_| prices.monthly(1 << 20)).sum();
        assert_eq!(small.cents(), 2, "1000 MiB of STANDARD is about $0.0225 a month: {small:?}");
        assert_eq!(prices.monthly_in("DEEP_ARCHIVE", 1000 * GB).map(Monthly::cents), Some(99));
        assert_eq!(prices.monthly_in("NO_SUCH_CLASS", GB), None);
        assert_eq!(Monthly(123_456_789_000).dollars(), "$123,456.79");
    }

    #[test]
    fn overrides_lay_over_the_defaults_and_a_bad_entry_is_refused_by_name() {
        let prices = Prices::parse(" standard=0.0245, GLACIER_IR=.005 ", "standard_ia").expect("parsed");
        assert_eq!(
            (prices.per_gb_month("STANDARD"), prices.per_gb_month("GLACIER_IR"), prices.per_gb_month("ONEZONE_IA")),
            (Some(24_500), Some(5_000), Some(10_000))
        );
        assert_eq!(prices.class, "STANDARD_IA");
        assert_eq!(prices.monthly(GB), Monthly(12_500));
        for (bad, says) in [
            ("STANDARD", "is not CLASS=DOLLARS"),
            ("STANDARD=-1", "the price \"-1\" of STANDARD"),
            ("STANDARD=0.0000001", "at most six decimals"),
            ("STANDARD=abc", "of STANDARD"),
            ("=0.1", "is not CLASS=DOLLARS"),
        ] {
            let e = Prices::parse(bad, "STANDARD").expect_err(bad).to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let e = Prices::parse("", "GOLD").expect_err("unknown class").to_string();
        assert!(e.contains("\"GOLD\" is not a storage class") && e.contains("STANDARD"), "{e}");
    }

    #[test]
    fn every_storage_type_s3_reports_is_billed_as_a_class_the_default_table_prices() {
        let prices = Prices::default();
        for (storage_type, class) in STORAGE_TYPES {
            assert!(prices.per_gb_month(class).is_some(), "{storage_type} → {class}");
        }
        assert_eq!(class_of_storage_type("StandardStorage"), Some("STANDARD"));
        assert_eq!(class_of_storage_type("AllStorageTypes"), None);
    }

    #[test]
    fn money_reads_as_dollars_and_cents_in_text_and_json() {
        let m = Prices::default().monthly(1000 * GB);
        assert_eq!(m.to_string(), "$23.00/month");
        assert_eq!(
            (Monthly(4_999).to_string(), Monthly(0).to_string()),
            ("under $0.01/month".to_owned(), "$0.00/month".to_owned())
        );
        assert_eq!(
            serde_json::to_value(m).expect("json"),
            serde_json::json!({"usd_per_month": "23.00", "cents_per_month": 2300})
        );
        assert_eq!(gb(3 * GB / 2), "1.50 GB");
        let read: Priced =
            serde_json::from_value(serde_json::to_value(Priced::of(1000 * GB, &Prices::default())).expect("json"))
                .expect("read back");
        assert_eq!((read.bytes, read.money.cents()), (1000 * GB, 2300), "a run row's money reads back to the cent");
    }
}
