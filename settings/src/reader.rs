//! Each variable read, validated and defaulted, its problem collected rather than returned: one group of settings
//! at a time, so that the whole environment's problems are reported together.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use platform::location::InventoryLocation;
use schema::UnindexedSources;

use crate::{LogSettings, Problem};

pub(crate) struct Reader<'a> {
    pub(crate) lookup: &'a dyn Fn(&str) -> Option<String>,
    pub(crate) problems: Vec<Problem>,
}

impl Reader<'_> {
    pub(crate) fn logs(&mut self) -> LogSettings {
        use platform::location::{AccessLogLayout, LogLocation};
        let location = |reader: &mut Self, name: &'static str| {
            reader.get(name).and_then(|text| match LogLocation::parse(&text) {
                Ok(location) => Some(location),
                Err(reason) => {
                    reader.invalid(name, reason);
                    None
                }
            })
        };
        let access = location(self, "ACCESS_LOGS");
        let cloudfront = location(self, "CLOUDFRONT_LOGS");
        let access_layout = match self.get("ACCESS_LOGS_LAYOUT").as_deref() {
            None | Some("simple") => AccessLogLayout::Simple,
            Some("partitioned") => AccessLogLayout::Partitioned,
            Some(other) => {
                self.invalid("ACCESS_LOGS_LAYOUT", format!("must be simple or partitioned, got {other:?}"));
                AccessLogLayout::Simple
            }
        };
        if access_layout == AccessLogLayout::Partitioned && access.as_ref().is_some_and(|l| !l.prefix.ends_with('/')) {
            self.invalid(
                "ACCESS_LOGS",
                "with ACCESS_LOGS_LAYOUT=partitioned, names the folder of the bucket's logs, ending in \
                 /ACCOUNT/REGION/BUCKET/",
            );
        }
        let origin_path = self.get("CLOUDFRONT_ORIGIN_PATH").unwrap_or_default();
        if !origin_path.is_empty() && cloudfront.is_none() {
            self.invalid("CLOUDFRONT_ORIGIN_PATH", "is set without CLOUDFRONT_LOGS");
        }
        let ignore_requesters = self
            .get("LOGS_IGNORE_REQUESTERS")
            .map(|list| list.split(',').map(str::trim).filter(|r| !r.is_empty()).map(str::to_owned).collect())
            .unwrap_or_default();
        LogSettings {
            access,
            access_layout,
            cloudfront,
            origin_path: origin_path.trim_matches('/').to_owned(),
            ignore_requesters,
            delivery_lag: self.duration_between("LOGS_DELIVERY_LAG", hours(24), secs(0)..=days(7)),
            time_share_percent: self.parsed("LOGS_TIME_SHARE_PERCENT", 15, 1..=90u32),
            max_objects: self.parsed("LOGS_MAX_OBJECTS_PER_PASS", 2_000, 1..=1_000_000u32),
        }
    }
}

impl Reader<'_> {
    /// A set, non-blank value; blank counts as unset (a template parameter left empty).
    pub(crate) fn get(&self, name: &str) -> Option<String> {
        (self.lookup)(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
    }

    pub(crate) fn invalid(&mut self, name: &'static str, reason: impl Into<String>) {
        self.problems.push(Problem::Invalid { name, reason: reason.into() });
    }

    pub(crate) fn required(&mut self, name: &'static str) -> Option<String> {
        let value = self.get(name);
        if value.is_none() {
            self.problems.push(Problem::Missing { name });
        }
        value
    }

    pub(crate) fn parsed<T>(&mut self, name: &'static str, default: T, range: std::ops::RangeInclusive<T>) -> T
    where
        T: FromStr + PartialOrd + fmt::Display + Copy,
    {
        let Some(raw) = self.get(name) else { return default };
        match raw.parse::<T>() {
            Ok(v) if range.contains(&v) => v,
            _ => {
                self.invalid(
                    name,
                    format!("must be a whole number from {} to {}, got {raw:?}", range.start(), range.end()),
                );
                default
            }
        }
    }

    /// What the schema check is configured with: the functions' and any command that checks the schema.
    pub(crate) fn schema_check(&mut self) -> schema::CheckOptions {
        let sample_rows = self.parsed("SCHEMA_SAMPLE_ROWS", 100, 1..=100_000u32);
        let unindexed = match self.get("UNINDEXED_SOURCES").map(|v| v.to_ascii_lowercase()).as_deref() {
            None | Some("refuse") => UnindexedSources::Refuse,
            Some("warn") => UnindexedSources::Warn,
            Some(other) => {
                self.invalid("UNINDEXED_SOURCES", format!("must be refuse or warn, got {other:?}"));
                UnindexedSources::Refuse
            }
        };
        schema::CheckOptions { sample_rows, unindexed, managed_prefixes: None, census_pace: None }
    }

    pub(crate) fn flag(&mut self, name: &'static str, default: bool) -> bool {
        let Some(raw) = self.get(name) else { return default };
        match raw.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" => true,
            "false" | "0" | "no" => false,
            _ => {
                self.invalid(name, format!("must be true or false, got {raw:?}"));
                default
            }
        }
    }

    pub(crate) fn approval_tolerance(&mut self) -> platform::approval::Tolerance {
        platform::approval::Tolerance(self.parsed("APPROVAL_TOLERANCE_PERCENT", 10, 0..=1_000u32))
    }

    /// `RECONCILE_ENGINE`: `database` (the default), `athena`, or `auto` (Athena above
    /// `RECONCILE_ATHENA_ABOVE_BYTES`, 4 GiB of report by default: about 100 000 000 keys in S3's Parquet); either of the last two needs Athena's settings.
    pub(crate) fn athena(&mut self) -> Option<crate::AthenaSettings> {
        let engine = self.get("RECONCILE_ENGINE").unwrap_or_else(|| "database".to_owned());
        let above_bytes = match engine.as_str() {
            "database" => return None,
            "athena" => None,
            "auto" => Some(self.parsed("RECONCILE_ATHENA_ABOVE_BYTES", 4u64 << 30, 0..=u64::MAX)),
            _ => {
                self.invalid("RECONCILE_ENGINE", format!("{engine:?} is not database, athena or auto"));
                return None;
            }
        };
        let workgroup = self.required("ATHENA_WORKGROUP");
        let database = self.required("ATHENA_DATABASE");
        let inventory_table = self.required("ATHENA_INVENTORY_TABLE");
        let known_table = self.required("ATHENA_KNOWN_TABLE");
        let export = self.required("RECONCILE_EXPORT").and_then(|text| match InventoryLocation::parse(&text) {
            Ok(location) => Some(location),
            Err(reason) => {
                self.invalid("RECONCILE_EXPORT", reason);
                None
            }
        });
        Some(crate::AthenaSettings {
            workgroup: workgroup?,
            output: self.get("ATHENA_OUTPUT"),
            database: database?,
            inventory_table: inventory_table?,
            known_table: known_table?,
            export: export?,
            above_bytes,
        })
    }

    pub(crate) fn prices(&mut self) -> ledger::prices::Prices {
        let class = self.get("STORAGE_CLASS").unwrap_or_else(|| ledger::prices::DEFAULT_CLASS.to_owned());
        match ledger::prices::Prices::parse(&self.get("STORAGE_PRICES").unwrap_or_default(), &class) {
            Ok(prices) => prices,
            Err(e @ ledger::prices::PriceError::UnknownClass { .. }) => {
                self.invalid("STORAGE_CLASS", e.to_string());
                ledger::prices::Prices::default()
            }
            Err(e) => {
                self.invalid("STORAGE_PRICES", e.to_string());
                ledger::prices::Prices::default()
            }
        }
    }

    pub(crate) fn schema_quiet_period(&mut self) -> Duration {
        self.duration_between("SCHEMA_QUIET_PERIOD", hours(6), secs(0)..=days(7))
    }

    /// A duration such as `30d`, `24h` or `90s`, no shorter than `min`.
    pub(crate) fn duration(&mut self, name: &'static str, default: Duration, min: Duration) -> Duration {
        self.duration_between(name, default, min..=Duration::MAX)
    }

    pub(crate) fn duration_between(
        &mut self,
        name: &'static str,
        default: Duration,
        range: std::ops::RangeInclusive<Duration>,
    ) -> Duration {
        let Some(raw) = self.get(name) else { return default };
        match humantime::parse_duration(&raw) {
            Ok(v) if range.contains(&v) => v,
            Ok(_) if *range.end() == Duration::MAX => {
                let min = humantime::format_duration(*range.start());
                self.invalid(name, format!("must be at least {min}, got {raw:?}"));
                default
            }
            Ok(_) => {
                let (min, max) = (humantime::format_duration(*range.start()), humantime::format_duration(*range.end()));
                self.invalid(name, format!("must be from {min} to {max}, got {raw:?}"));
                default
            }
            Err(_) => {
                self.invalid(name, format!("must be a duration such as 30d, 24h or 90s, got {raw:?}"));
                default
            }
        }
    }
}

pub(crate) const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

pub(crate) const fn hours(n: u64) -> Duration {
    Duration::from_secs(n * 3600)
}

pub(crate) const fn days(n: u64) -> Duration {
    hours(n * 24)
}
