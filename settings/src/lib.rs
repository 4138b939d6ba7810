//! Typed settings, read from the environment once per cold start.
//!
//! Every missing or invalid variable is collected, so an operator fixes a deployment in one round instead of
//! one variable per failed cold start. Secret values never reach an error message or a log line.

use std::str::FromStr;
use std::time::Duration;

use lifecycle::brake::BrakeSettings;
use platform::db::DatabaseSettings;
use platform::location::InventoryLocation;
use schema::UnindexedSources;
use sqlx::postgres::PgConnectOptions;

mod problems;
mod reader;
mod standby;

pub use problems::{LoadError, Problem, SettingsError};
use reader::{Reader, days, hours, secs};
use standby::standby_options;

/// Everything the functions are configured with: docs/operating.md, "Configuration", lists every setting.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where the database is and how many connections to use.
    pub database: DatabaseSettings,
    /// The cleanup queue.
    pub queue: QueueSettings,
    /// The bucket that holds the assets' bytes.
    pub asset_bucket: String,
    /// Path-style S3 addressing, for S3-compatible endpoints without virtual-host DNS (LocalStack).
    pub s3_force_path_style: bool,
    /// How long a retired asset stays restorable before it is purged.
    pub retention: Duration,
    /// Nothing written more recently than this is retired or deleted (invariant 3).
    pub grace: Duration,
    /// An upload still `pending` this long after it was created is abandoned and may be deleted.
    pub abandon_after: Duration,
    /// The timeout of the one S3 call made while a settle transaction holds its row locks (invariant 5).
    pub s3_delete_timeout: Duration,
    /// How many values of each unexplained uuid, text or jsonb column the schema check samples (invariant 4).
    pub schema_sample_rows: u32,
    /// The consumer settles only on a schema verdict a sweep pass recorded at most this long ago (invariant 4).
    pub schema_verdict_max_age: Duration,
    /// Deletes and purges wait this long after the schema last changed: a migration half done may still fill a
    /// column the census has read empty. Zero turns the quiet period off.
    pub schema_quiet_period: Duration,
    /// What the schema check does with a reference source that no index serves.
    pub unindexed_sources: UnindexedSources,
    /// How far a plan may grow over the one an operator approved (a braked workspace's due assets and bytes, a
    /// rule's expired records, a prefix's unknown keys) before the approval stops covering it.
    pub approval_tolerance: platform::approval::Tolerance,
    /// What stored bytes cost (`STORAGE_PRICES` over S3's US East prices) and the class the sweeper's own figures
    /// are priced at (`STORAGE_CLASS`).
    pub prices: ledger::prices::Prices,
    /// How far, in percent of the larger side, the bytes the bucket reports may differ from what the sweeper
    /// believes it holds before the drift alarm fires (`DRIFT_ALARM_PERCENT`).
    pub drift_alarm_percent: u32,
    /// How a sweep pass claims and sends.
    pub sweep: SweepSettings,
    /// The blast-radius brake's limits (invariant 11).
    pub brake: BrakeSettings,
    /// How the census reads the columns that are not reference sources.
    pub census: CensusSettings,
    /// A physical standby of the database for the census to read (`CENSUS_DATABASE_URL`), at most
    /// `census.readers` connections; `None`: it reads the primary.
    pub census_replica: Option<DatabaseSettings>,
    /// How discovery walks the assets nobody scheduled.
    pub discovery: DiscoverySettings,
    /// Which keys of the bucket reconciliation compares with the rows.
    pub reconcile: ReconcileSettings,
    /// How the records step applies the application's retention rules.
    pub records: RecordsSettings,
    /// Where AWS delivers the bucket's access logs, and how the sweep reads them.
    pub logs: LogSettings,
}

/// Observed use: where the bucket's access logs are delivered, and how the sweep reads them (docs/operating.md,
/// "Observed use"). With neither location set, nothing is read and nothing waits for logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    /// The asset bucket's S3 server access logs (`ACCESS_LOGS`, `s3://bucket/prefix`).
    pub access: Option<platform::location::LogLocation>,
    /// How S3 names them (`ACCESS_LOGS_LAYOUT`: `simple`, the default, or `partitioned`).
    pub access_layout: platform::location::AccessLogLayout,
    /// A CloudFront distribution's standard logs (`CLOUDFRONT_LOGS`, `s3://bucket/prefix/DISTRIBUTIONID`).
    pub cloudfront: Option<platform::location::LogLocation>,
    /// The distribution's origin path (`CLOUDFRONT_ORIGIN_PATH`), which comes before a request's path in the key.
    pub origin_path: String,
    /// Requesters whose reads are not use (`LOGS_IGNORE_REQUESTERS`, comma-separated): the product's own roles, a
    /// backup or thumbnail job that reads everything. An IAM role's ARN also covers its assumed-role sessions.
    pub ignore_requesters: Vec<String>,
    /// How late AWS may deliver a log record (`LOGS_DELIVERY_LAG`, 24 hours): a removal waits until the delivered
    /// logs reach this far past its decision.
    pub delivery_lag: Duration,
    /// The share, in percent, of what is left of a pass's time budget reading logs may use.
    pub time_share_percent: u32,
    /// The most log objects one pass reads per source (`LOGS_MAX_OBJECTS_PER_PASS`).
    pub max_objects: u32,
}

/// How the schema check runs, as the functions and the CLI are configured.
impl From<&Settings> for schema::CheckOptions {
    fn from(settings: &Settings) -> Self {
        schema::CheckOptions {
            sample_rows: settings.schema_sample_rows,
            unindexed: settings.unindexed_sources,
            managed_prefixes: settings
                .reconcile
                .layout
                .as_ref()
                .map(|layout| layout.prefixes().into_iter().map(str::to_owned).collect()),
            census_pace: Some(schema::CensusPace {
                retention: settings.retention,
                rest: settings.census.cycle_interval,
            }),
        }
    }
}

/// The records step: the application's retention rules, applied first in every pass.
#[derive(Debug, Clone)]
pub struct RecordsSettings {
    /// The application's time zone (a Postgres time zone name): the day a pass belongs to, which every rule's
    /// cutoff counts back from.
    pub time_zone: String,
    /// The share, in percent, of a pass's time budget the step may use before the rest of the pass.
    pub time_share_percent: u32,
    /// A rule that would delete more than this share of its table, in percent, waits for an operator's approval.
    pub brake_share_percent: u32,
    /// A new or changed rule deletes nothing until this long after it was declared or changed.
    pub new_rule_delay: Duration,
}

/// Reconciliation: which keys of the bucket are this product's, compared with the rows both ways.
#[derive(Debug, Clone)]
pub struct ReconcileSettings {
    /// The managed prefixes and the key pattern; `None` (neither set) leaves the bucket unread.
    pub layout: Option<platform::keys::KeyLayout>,
    /// The most assets one reconciliation confirms gone with a request to the bucket each.
    pub confirm_lost: u32,
    /// The most keys one reconciliation adopts (the rest wait for the next report).
    pub adopt_max: u32,
    /// Where S3 Inventory writes the asset bucket's reports; `None`: the sweep does not reconcile.
    pub inventory: Option<InventoryLocation>,
    /// The share, in percent, of what is left of a pass's time budget (after discovery) reconciliation may use.
    pub time_share_percent: u32,
    /// Amazon Athena, when `RECONCILE_ENGINE` is `athena` or `auto`: where a report is compared instead of in the
    /// database.
    pub athena: Option<AthenaSettings>,
}

/// The bucket comparison on Amazon Athena (`RECONCILE_ENGINE`, docs/deploying.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AthenaSettings {
    /// The workgroup queries run in (`ATHENA_WORKGROUP`): its output location and limits apply.
    pub workgroup: String,
    /// Where query output goes (`ATHENA_OUTPUT`), when the workgroup does not say.
    pub output: Option<String>,
    /// The Glue database of both tables (`ATHENA_DATABASE`).
    pub database: String,
    /// The S3 Inventory report's table, as AWS documents it (`ATHENA_INVENTORY_TABLE`).
    pub inventory_table: String,
    /// The export's table, partitioned by listing (`ATHENA_KNOWN_TABLE`).
    pub known_table: String,
    /// Where the export of the known keys is written: the export table's location (`RECONCILE_EXPORT`).
    pub export: InventoryLocation,
    /// `auto`: only reports whose data files add up to more than this many bytes (`RECONCILE_ATHENA_ABOVE_BYTES`);
    /// `athena`: none, every Parquet or ORC report.
    pub above_bytes: Option<u64>,
}

/// Discovery's pace: it walks the assets nobody scheduled, a batch at a time, and makes due the ones no source
/// refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiscoverySettings {
    /// Whether the sweep pass discovers at all.
    pub enabled: bool,
    /// The share, in percent, of what is left of a pass's time budget (after the census and the schema check)
    /// discovery may use before the brake and the claim.
    pub time_share_percent: u32,
    /// Assets one discovery statement looks at.
    pub batch_size: u32,
    /// The most assets one pass looks at.
    pub max_per_pass: u32,
    /// How long after a cycle ends the next one begins.
    pub cycle_interval: Duration,
}

/// The census's pace: it reads every column that is not a reference source, a batch of table blocks at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CensusSettings {
    /// The share, in percent, of a pass's time budget the census may use before the claim.
    pub time_share_percent: u32,
    /// Table blocks (8 KiB each) one census statement reads.
    pub batch_blocks: u32,
    /// The most census statements one pass runs.
    pub max_batches: u32,
    /// How long one census statement may read: a batch that runs longer is cancelled and read again in smaller
    /// parts, down to one value at a time; a value that cannot be read whole within it is recorded as unread.
    pub batch_timeout: Duration,
    /// How long after a cycle ends the next one begins; columns not yet proven are read meanwhile all the same.
    pub cycle_interval: Duration,
    /// Connections reading one table's batches at once, the census's own included (as many as the pool lends).
    pub readers: u32,
}

/// The cleanup queue, as the sweep and the consumer must both see it.
#[derive(Debug, Clone)]
pub struct QueueSettings {
    /// Where the sweep sends one message per claimed asset.
    pub url: String,
    /// The queue's visibility timeout; with `max_receive_count` it sets how long a claim must live.
    pub visibility_timeout: Duration,
    /// Must equal the queue's redrive `maxReceiveCount`: the consumer records the failure on the last receive.
    pub max_receive_count: u32,
}

impl QueueSettings {
    /// How long a claim lives: longer than the queue takes to redeliver one message until it dead-letters
    /// (visibility timeout × maxReceiveCount), plus one more visibility period of margin. Time a message waits
    /// unreceived in a backlog is not covered: a claim can lapse with its message still queued, so a second
    /// message for the asset is possible and the consumer must treat a stale claim as a no-op (invariant 6).
    pub fn lease(&self) -> Duration {
        self.visibility_timeout * (self.max_receive_count + 1)
    }
}

/// Assets one consumer is assumed to settle per second when the queue's ceiling is not set: a tenth of what the
/// benchmark measures, so the default stays safe on a slow database.
pub const ASSUMED_SETTLES_PER_SECOND: u64 = 10;

/// How one sweep pass paces itself.
#[derive(Debug, Clone)]
pub struct SweepSettings {
    /// The most assets one pass claims.
    pub max_per_pass: u32,
    /// Rows claimed by one statement (one short transaction) before they are sent.
    pub batch_size: u32,
    /// `SendMessageBatch` calls in flight at once.
    pub send_concurrency: u32,
    /// The pass stops starting new batches when less than this remains before the Lambda deadline.
    pub time_reserve: Duration,
    /// The most messages the cleanup queue may hold (waiting and in flight) after a pass: a pass claims only
    /// what keeps it under this, so a slow consumer never lets leases lapse and the same assets go out again.
    pub queue_ceiling: u64,
}

impl Settings {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, SettingsError> {
        Self::from_lookup(process_env)
    }

    /// Reads settings through `lookup`, so tests need not touch the process environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        Self::read(&lookup, None)
    }

    /// Reads the environment as in AWS: when `DATABASE_SECRET_ARN` is set instead of `DATABASE_URL`, the
    /// connection comes from that Secrets Manager secret (fetched once, at cold start).
    pub async fn load(sdk: &aws_config::SdkConfig) -> Result<Self, LoadError> {
        Self::load_from(sdk, process_env).await
    }

    /// The database alone, for a command that needs nothing else (`asset-sweeper migrate`): `DATABASE_URL`, else the
    /// `DATABASE_SECRET_ARN` secret, as [`Settings::load`] reads them. The SDK is configured only for a secret.
    pub async fn database_from_env() -> Result<PgConnectOptions, LoadError> {
        let set = |name| process_env(name).filter(|v: &String| !v.trim().is_empty());
        let problem = |problem| LoadError::Settings(SettingsError { problems: vec![problem] });
        match (set("DATABASE_URL"), set("DATABASE_SECRET_ARN")) {
            (Some(url), _) => PgConnectOptions::from_str(&url).map_err(|_| {
                problem(Problem::Invalid {
                    name: "DATABASE_URL",
                    reason: "is not a valid postgres:// connection URL".into(),
                })
            }),
            (None, Some(arn)) => {
                Ok(platform::secrets::database_options(&platform::aws::sdk_config().await, arn.trim()).await?)
            }
            (None, None) => Err(problem(Problem::Missing { name: "DATABASE_URL" })),
        }
    }

    /// The schema check's own settings alone (`SCHEMA_SAMPLE_ROWS`, `UNINDEXED_SOURCES`, both optional), for a
    /// command that checks the schema and needs nothing else of the functions' (`asset-sweeper guards install`).
    pub fn schema_check_from_env() -> Result<schema::CheckOptions, SettingsError> {
        Self::schema_check_from_lookup(process_env)
    }

    /// [`Settings::schema_check_from_env`] through `lookup`.
    pub fn schema_check_from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<schema::CheckOptions, SettingsError> {
        Self::only(&lookup, |r| r.schema_check())
    }

    /// The quiet period after a schema change alone (`SCHEMA_QUIET_PERIOD`, optional), for a command that needs
    /// nothing else of the functions' (`asset-sweeper hold list`).
    pub fn schema_quiet_period_from_env() -> Result<Duration, SettingsError> {
        Self::only(&process_env, |r| r.schema_quiet_period())
    }

    /// The approval tolerance alone (`APPROVAL_TOLERANCE_PERCENT`, optional), for `asset-sweeper approve`, which
    /// says what a plan may grow to before the approval it records stops covering it.
    pub fn approval_tolerance_from_env() -> Result<platform::approval::Tolerance, SettingsError> {
        Self::only(&process_env, |r| r.approval_tolerance())
    }

    /// The price table alone (`STORAGE_PRICES`, `STORAGE_CLASS`, both optional), for the commands that show money.
    pub fn prices_from_env() -> Result<ledger::Prices, SettingsError> {
        Self::only(&process_env, |r| r.prices())
    }

    /// One group of settings alone, read by `read` through `lookup`, for a command that needs nothing else: every
    /// problem of that group reported together, as [`Settings::from_lookup`] reports all of them.
    fn only<T>(
        lookup: &dyn Fn(&str) -> Option<String>,
        read: impl FnOnce(&mut Reader<'_>) -> T,
    ) -> Result<T, SettingsError> {
        let mut reader = Reader { lookup, problems: Vec::new() };
        let value = read(&mut reader);
        if reader.problems.is_empty() { Ok(value) } else { Err(SettingsError { problems: reader.problems }) }
    }

    /// [`Settings::load`] through `lookup`.
    pub async fn load_from(
        sdk: &aws_config::SdkConfig,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, LoadError> {
        let set = |name| lookup(name).filter(|v| !v.trim().is_empty());
        let database = match (set("DATABASE_URL"), set("DATABASE_SECRET_ARN")) {
            (None, Some(arn)) => Some(platform::secrets::database_options(sdk, arn.trim()).await?),
            _ => None,
        };
        Ok(Self::read(&lookup, database)?)
    }

    fn read(
        lookup: &dyn Fn(&str) -> Option<String>,
        database: Option<PgConnectOptions>,
    ) -> Result<Self, SettingsError> {
        let mut reader = Reader { lookup, problems: Vec::new() };

        let database_url = if database.is_some() { None } else { reader.required("DATABASE_URL") };
        let database_options = database.or_else(|| {
            database_url.as_deref().and_then(|url| {
                // The parser's message can quote the URL, password included: name the variable only.
                match PgConnectOptions::from_str(url) {
                    Ok(options) => Some(options),
                    Err(_) => {
                        reader.invalid("DATABASE_URL", "is not a valid postgres:// connection URL");
                        None
                    }
                }
            })
        });
        let max_connections = reader.parsed("DATABASE_MAX_CONNECTIONS", 4, 1..=100u32);
        let cleanup_queue_url = reader.required("CLEANUP_QUEUE_URL").and_then(|url| {
            if url.starts_with("https://") || url.starts_with("http://") {
                Some(url)
            } else {
                reader.invalid("CLEANUP_QUEUE_URL", format!("must be an http(s) queue URL, got {url:?}"));
                None
            }
        });
        let asset_bucket =
            reader.required("ASSET_BUCKET").and_then(|bucket| match platform::location::bucket_name_problem(&bucket) {
                None => Some(bucket),
                Some(reason) => {
                    reader.invalid("ASSET_BUCKET", format!("{bucket:?} {reason}"));
                    None
                }
            });
        let s3_force_path_style = reader.flag("S3_FORCE_PATH_STYLE", false);
        // SQS allows 1..=1000; 1 would send a message to the DLQ on its first failure.
        let max_receive_count = reader.parsed("MAX_RECEIVE_COUNT", 5, 2..=1000u32);
        // SQS allows up to 12 hours.
        let visibility_timeout = reader.duration_between("QUEUE_VISIBILITY_TIMEOUT", secs(360), secs(1)..=hours(12));
        let retention = reader.duration("RETENTION", days(30), days(1));
        let grace = reader.duration("GRACE", hours(24), hours(1));
        let abandon_after = reader.duration("ABANDON_AFTER", days(7), hours(1));
        if abandon_after < grace {
            reader.invalid("ABANDON_AFTER", "must not be shorter than GRACE: an upload in flight is never abandoned");
        }
        let s3_delete_timeout = reader.duration_between("S3_DELETE_TIMEOUT", secs(5), secs(1)..=secs(60));
        let schema::CheckOptions { sample_rows: schema_sample_rows, unindexed: unindexed_sources, .. } =
            reader.schema_check();
        let schema_verdict_max_age = reader.duration_between("SCHEMA_VERDICT_MAX_AGE", hours(1), secs(60)..=hours(24));
        let schema_quiet_period = reader.schema_quiet_period();
        let approval_tolerance = reader.approval_tolerance();
        let prices = reader.prices();
        let drift_alarm_percent = reader.parsed("DRIFT_ALARM_PERCENT", 20, 1..=99u32);
        let census_replica = reader.get("CENSUS_DATABASE_URL").and_then(|url| {
            match (standby_options(&url), &database_options) {
                (Ok(standby), Some(primary)) => Some(standby.over(primary.clone())),
                (Ok(_), None) => None,
                // As for DATABASE_URL, the parser's message can quote the URL: name the variable only.
                (Err(reason), _) => {
                    reader.invalid("CENSUS_DATABASE_URL", reason);
                    None
                }
            }
        });
        let census = CensusSettings {
            time_share_percent: reader.parsed("CENSUS_TIME_SHARE_PERCENT", 25, 1..=90u32),
            batch_blocks: reader.parsed("CENSUS_BATCH_BLOCKS", 1_024, 1..=1_000_000u32),
            max_batches: reader.parsed("CENSUS_MAX_BATCHES", 10_000, 1..=10_000_000u32),
            // At most the session's own statement timeout, which every statement of the census also obeys.
            batch_timeout: reader.duration_between(
                "CENSUS_BATCH_TIMEOUT",
                secs(20),
                Duration::from_millis(10)..=secs(30),
            ),
            cycle_interval: reader.duration_between("CENSUS_CYCLE_INTERVAL", hours(24), secs(0)..=days(30)),
            readers: reader.parsed("CENSUS_READERS", 2, 1..=16u32),
        };
        // Two census cycles and the rest between them must fit in the time a retired asset waits for its purge;
        // with a rest as long as that, every cycle would be too slow and nothing would ever be deleted or purged.
        if census.cycle_interval >= retention {
            reader.invalid(
                "CENSUS_CYCLE_INTERVAL",
                format!(
                    "must be shorter than RETENTION ({}): two census cycles and the rest between them must fit in \
                     it, or deletes and purges wait for ever (got {})",
                    humantime::format_duration(retention),
                    humantime::format_duration(census.cycle_interval)
                ),
            );
        }
        let discovery = DiscoverySettings {
            enabled: reader.flag("DISCOVERY_ENABLED", true),
            time_share_percent: reader.parsed("DISCOVERY_TIME_SHARE_PERCENT", 25, 1..=90u32),
            batch_size: reader.parsed("DISCOVERY_BATCH_SIZE", 5_000, 1..=100_000u32),
            max_per_pass: reader.parsed("DISCOVERY_MAX_PER_PASS", 2_000_000, 1..=1_000_000_000u32),
            cycle_interval: reader.duration_between("DISCOVERY_CYCLE_INTERVAL", hours(1), secs(0)..=days(7)),
        };
        let reconcile = ReconcileSettings {
            layout: match (reader.get("RECONCILE_PREFIXES"), reader.get("RECONCILE_KEY_PATTERN")) {
                (None, None) => None,
                (Some(_), None) => {
                    reader.problems.push(Problem::Missing { name: "RECONCILE_KEY_PATTERN" });
                    None
                }
                (None, Some(_)) => {
                    reader.problems.push(Problem::Missing { name: "RECONCILE_PREFIXES" });
                    None
                }
                (Some(prefixes), Some(pattern)) => match platform::keys::KeyLayout::new(&prefixes, &pattern) {
                    Ok(layout) => Some(layout),
                    Err(e @ platform::keys::LayoutError::Prefixes(_)) => {
                        reader.invalid("RECONCILE_PREFIXES", e.to_string());
                        None
                    }
                    Err(e) => {
                        reader.invalid("RECONCILE_KEY_PATTERN", e.to_string());
                        None
                    }
                },
            },
            // Confirmed while the comparison's transaction waits: 10 000 lookups, 16 at once, stay well inside the
            // sessions' idle-in-transaction timeout.
            confirm_lost: reader.parsed("RECONCILE_CONFIRM_LOST", 1_000, 1..=10_000u32),
            // Each adopted key is an asset row, a stored object and an audit row written in the comparison's
            // transaction: 100 000 take seconds; a bucket of millions of orphans is adopted over a few reports.
            adopt_max: reader.parsed("RECONCILE_ADOPT_MAX", 100_000, 1..=1_000_000u32),
            inventory: reader.get("RECONCILE_INVENTORY").and_then(|text| match InventoryLocation::parse(&text) {
                Ok(location) => Some(location),
                Err(reason) => {
                    reader.invalid("RECONCILE_INVENTORY", reason);
                    None
                }
            }),
            time_share_percent: reader.parsed("RECONCILE_TIME_SHARE_PERCENT", 25, 1..=90u32),
            athena: reader.athena(),
        };
        if reconcile.inventory.is_some()
            && reconcile.layout.is_none()
            && !reader.problems.iter().any(|p| p.name().starts_with("RECONCILE_"))
        {
            reader.invalid(
                "RECONCILE_INVENTORY",
                "needs RECONCILE_PREFIXES and RECONCILE_KEY_PATTERN: which keys are ours",
            );
        }
        let records = RecordsSettings {
            time_zone: reader.get("RECORDS_TIME_ZONE").unwrap_or_else(|| "UTC".to_owned()),
            time_share_percent: reader.parsed("RECORDS_TIME_SHARE_PERCENT", 20, 1..=90u32),
            brake_share_percent: reader.parsed("RECORDS_BRAKE_SHARE_PERCENT", 50, 1..=100u32),
            new_rule_delay: reader.duration_between("RECORDS_NEW_RULE_DELAY", hours(24), secs(0)..=days(30)),
        };
        let logs = reader.logs();
        let queue = QueueSettings { url: String::new(), visibility_timeout, max_receive_count };
        // Two consumers at ASSUMED_SETTLES_PER_SECOND each empty a queue this deep in half a lease.
        let default_ceiling = queue.lease().as_secs() / 2 * 2 * ASSUMED_SETTLES_PER_SECOND;
        let sweep = SweepSettings {
            max_per_pass: reader.parsed("SWEEP_MAX_PER_PASS", 100_000, 1..=10_000_000u32),
            batch_size: reader.parsed("SWEEP_BATCH_SIZE", 1_000, 10..=50_000u32),
            send_concurrency: reader.parsed("SWEEP_SEND_CONCURRENCY", 8, 1..=64u32),
            time_reserve: reader.duration("SWEEP_TIME_RESERVE", secs(60), secs(5)),
            queue_ceiling: reader.parsed("SWEEP_QUEUE_CEILING", default_ceiling, 10..=100_000_000u64),
        };
        let brake = BrakeSettings {
            max_share_percent: reader.parsed("BRAKE_MAX_SHARE_PERCENT", 25, 1..=100u32),
            share_min_assets: reader.parsed("BRAKE_SHARE_MIN_ASSETS", 100, 1..=u64::MAX),
            max_assets: reader.parsed("BRAKE_MAX_ASSETS", 50_000, 1..=u64::MAX),
            max_bytes: reader.parsed("BRAKE_MAX_BYTES", 1 << 40, 1..=u64::MAX),
        };

        match (database_options, cleanup_queue_url, asset_bucket) {
            (Some(options), Some(url_of_queue), Some(asset_bucket)) if reader.problems.is_empty() => Ok(Settings {
                database: DatabaseSettings::new(options, max_connections),
                census_replica: census_replica.map(|options| DatabaseSettings::new(options, census.readers)),
                queue: QueueSettings { url: url_of_queue, ..queue },
                asset_bucket,
                s3_force_path_style,
                retention,
                grace,
                abandon_after,
                s3_delete_timeout,
                schema_sample_rows,
                schema_verdict_max_age,
                schema_quiet_period,
                unindexed_sources,
                approval_tolerance,
                prices,
                drift_alarm_percent,
                sweep,
                brake,
                census,
                discovery,
                reconcile,
                records,
                logs,
            }),
            _ => Err(SettingsError { problems: reader.problems }),
        }
    }
}

/// One variable of the process environment (non-UTF-8 bytes replaced, so validation can name them).
fn process_env(name: &str) -> Option<String> {
    std::env::var_os(name).map(|value| value.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn read(vars: &[(&str, &str)]) -> Result<Settings, SettingsError> {
        let vars: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Settings::from_lookup(|name| vars.get(name).cloned())
    }

    const COMPLETE: [(&str, &str); 3] = [
        ("DATABASE_URL", "postgres://sweeper:hunter2@db.internal:5432/app"),
        ("CLEANUP_QUEUE_URL", "https://sqs.eu-west-1.amazonaws.com/123456789012/cleanup"),
        ("ASSET_BUCKET", "acme-assets"),
    ];

    #[test]
    fn a_complete_environment_gets_the_documented_defaults() {
        let s = read(&COMPLETE).expect("complete environment");
        assert_eq!(s.queue.max_receive_count, 5);
        assert_eq!(s.queue.visibility_timeout, secs(360));
        assert_eq!(s.queue.lease(), secs(360 * 6), "a claim outlives every delivery of its message");
        assert_eq!(s.brake.max_bytes, 1 << 40);
        assert_eq!(s.retention, days(30));
        assert_eq!(s.grace, hours(24));
        assert_eq!(s.database.max_connections, 4);
        assert!(!s.s3_force_path_style);
        assert_eq!(s.asset_bucket, "acme-assets");
        assert_eq!(s.sweep.queue_ceiling, 21_600, "two consumers at 10/s clear it in half a lease");
        assert_eq!(s.schema_quiet_period, hours(6));
        assert_eq!(s.approval_tolerance, platform::approval::Tolerance(10));
        assert_eq!(s.schema_verdict_max_age, hours(1));
        assert_eq!(s.unindexed_sources, UnindexedSources::Refuse);
        assert_eq!(s.prices, ledger::prices::Prices::default());
        assert_eq!(s.drift_alarm_percent, 20);
    }

    #[test]
    fn prices_and_the_storage_class_are_read_and_a_bad_one_is_named() {
        let mut vars = COMPLETE.to_vec();
        vars.extend([
            ("STORAGE_PRICES", "STANDARD=0.025"),
            ("STORAGE_CLASS", "standard"),
            ("DRIFT_ALARM_PERCENT", "5"),
        ]);
        let s = read(&vars).expect("valid prices");
        assert_eq!((s.prices.per_gb_month("STANDARD"), s.drift_alarm_percent), (Some(25_000), 5));
        for (name, value, says) in [
            ("STORAGE_PRICES", "STANDARD=cheap", "STORAGE_PRICES"),
            ("STORAGE_CLASS", "GOLD", "STORAGE_CLASS"),
            ("DRIFT_ALARM_PERCENT", "0", "DRIFT_ALARM_PERCENT"),
        ] {
            let mut vars = COMPLETE.to_vec();
            vars.push((name, value));
            let e = read(&vars).expect_err(name).to_string();
            assert!(e.contains(says), "{name}={value}: {e}");
        }
    }

    #[test]
    fn overrides_are_parsed() {
        let mut vars = COMPLETE.to_vec();
        vars.extend([
            ("RETENTION", "45d"),
            ("GRACE", "36h"),
            ("MAX_RECEIVE_COUNT", "7"),
            ("S3_FORCE_PATH_STYLE", "true"),
            ("QUEUE_VISIBILITY_TIMEOUT", "2m"),
            ("BRAKE_MAX_BYTES", "5000000000000"),
        ]);
        let s = read(&vars).expect("valid overrides");
        assert_eq!(s.retention, days(45));
        assert_eq!(s.grace, hours(36));
        assert_eq!(s.queue.max_receive_count, 7);
        assert_eq!(s.queue.lease(), secs(120 * 8));
        assert_eq!(s.brake.max_bytes, 5_000_000_000_000);
        assert!(s.s3_force_path_style);
    }

    #[test]
    fn a_census_rest_as_long_as_retention_is_refused_naming_both() {
        let mut vars = COMPLETE.to_vec();
        vars.extend([("RETENTION", "1d"), ("CENSUS_CYCLE_INTERVAL", "1d")]);
        let text = read(&vars).expect_err("a rest of a whole RETENTION").to_string();
        assert!(text.contains("CENSUS_CYCLE_INTERVAL must be shorter than RETENTION (1day)"), "{text}");
        vars.push(("CENSUS_CYCLE_INTERVAL", "12h"));
        assert!(read(&vars).is_ok(), "the last value of a variable counts");
    }

    #[test]
    fn every_problem_is_reported_in_one_error() {
        let err = read(&[("DATABASE_URL", "postgres://localhost/app"), ("MAX_RECEIVE_COUNT", "1"), ("GRACE", "5m")])
            .expect_err("two variables are missing and two are invalid");
        let names: Vec<_> = err.problems.iter().map(Problem::name).collect();
        assert_eq!(names, ["CLEANUP_QUEUE_URL", "ASSET_BUCKET", "MAX_RECEIVE_COUNT", "GRACE"]);
        let text = err.to_string();
        assert!(text.starts_with("invalid configuration (4 problems): "), "{text}");
        assert!(text.contains("CLEANUP_QUEUE_URL is not set; ASSET_BUCKET is not set"), "{text}");
        assert!(text.contains("MAX_RECEIVE_COUNT must be a whole number from 2 to 1000, got \"1\""), "{text}");
    }

    #[test]
    fn reconciliation_takes_both_of_its_layout_settings_or_neither() {
        assert!(read(&COMPLETE).expect("complete").reconcile.layout.is_none(), "off unless configured");
        let mut vars = COMPLETE.to_vec();
        vars.extend([
            ("RECONCILE_PREFIXES", "uploads/"),
            ("RECONCILE_KEY_PATTERN", "uploads/(?P<workspace>[0-9a-f-]{36})/.+"),
            ("RECONCILE_INVENTORY", "s3://acme-inventory/reports/acme-assets/all"),
        ]);
        let s = read(&vars).expect("a complete reconciliation");
        assert!(s.reconcile.layout.is_some());
        let inventory = s.reconcile.inventory.expect("an inventory location");
        assert_eq!(inventory.to_string(), "s3://acme-inventory/reports/acme-assets/all/");
        let mut half = COMPLETE.to_vec();
        half.extend([("RECONCILE_PREFIXES", "uploads/"), ("RECONCILE_INVENTORY", "acme-inventory/reports")]);
        let err = read(&half).expect_err("a pattern is missing and the location is no address");
        let names: Vec<_> = err.problems.iter().map(Problem::name).collect();
        assert_eq!(names, ["RECONCILE_KEY_PATTERN", "RECONCILE_INVENTORY"], "{err}");
        let mut broken = COMPLETE.to_vec();
        broken.extend([("RECONCILE_PREFIXES", "uploads/"), ("RECONCILE_KEY_PATTERN", "uploads/(")]);
        let err = read(&broken).expect_err("not a regular expression").to_string();
        assert!(err.contains("RECONCILE_KEY_PATTERN is not a regular expression"), "{err}");
        let mut alone = COMPLETE.to_vec();
        alone.push(("RECONCILE_INVENTORY", "s3://acme-inventory/"));
        let err = read(&alone).expect_err("no layout").to_string();
        assert!(err.contains("RECONCILE_INVENTORY needs RECONCILE_PREFIXES and RECONCILE_KEY_PATTERN"), "{err}");
    }

    #[test]
    fn blank_values_count_as_missing() {
        let mut vars = COMPLETE.to_vec();
        vars[2] = ("ASSET_BUCKET", "  ");
        let err = read(&vars).expect_err("blank bucket");
        assert_eq!(err.problems, [Problem::Missing { name: "ASSET_BUCKET" }]);
    }

    #[test]
    fn secrets_never_appear_in_errors_or_debug_output() {
        let err = read(&[("DATABASE_URL", "mysql//sweeper:hunter2@db")]).expect_err("malformed url");
        assert!(!err.to_string().contains("hunter2"), "{err}");
        assert!(err.to_string().contains("DATABASE_URL is not a valid postgres:// connection URL"));

        let s = read(&COMPLETE).expect("complete environment");
        let debug = format!("{s:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("db.internal"), "{debug}");
    }

    #[test]
    fn the_census_replica_is_optional_and_a_malformed_one_is_named_without_its_password() {
        let s = read(&COMPLETE).expect("complete environment");
        assert!(s.census_replica.is_none(), "the census reads the primary unless told otherwise");

        let mut vars = COMPLETE.to_vec();
        // The standby alone: the login and the database are the sweep's own.
        vars.push(("CENSUS_DATABASE_URL", "postgres://standby.internal:6432"));
        vars.push(("CENSUS_READERS", "3"));
        let s = read(&vars).expect("a standby");
        let replica = s.census_replica.as_ref().expect("the census's standby").connect_options();
        let primary = s.database.connect_options();
        assert_eq!((replica.get_host(), replica.get_port()), ("standby.internal", 6432));
        assert_eq!((replica.get_username(), replica.get_database()), (primary.get_username(), primary.get_database()));
        assert_eq!(s.census_replica.as_ref().map(|r| r.max_connections), Some(3));

        // Whatever it names is its own.
        vars.push(("CENSUS_DATABASE_URL", "postgresql://census:hunter2@standby.internal/replica_db?sslmode=require"));
        let s = read(&vars).expect("a standby");
        let replica = s.census_replica.as_ref().expect("the census's standby").connect_options();
        assert_eq!((replica.get_username(), replica.get_database()), ("census", Some("replica_db")));
        assert!(matches!(replica.get_ssl_mode(), sqlx::postgres::PgSslMode::Require));
        assert!(!format!("{s:?}").contains("hunter2"));

        vars.push(("CENSUS_DATABASE_URL", "postgres://census:hunter2@standby.internal/app?options=-c%20x%3Dy"));
        let err = read(&vars).expect_err("a parameter of the primary's");
        assert!(err.to_string().contains("CENSUS_DATABASE_URL has the parameter \"options\""), "{err}");

        vars.push(("CENSUS_DATABASE_URL", "mysql//census:hunter2@standby"));
        let err = read(&vars).expect_err("malformed url");
        assert!(err.to_string().contains("CENSUS_DATABASE_URL is not a valid postgres:// connection URL"), "{err}");
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[test]
    fn the_schema_check_alone_needs_no_other_setting_and_still_refuses_a_bad_one() {
        let options = Settings::schema_check_from_lookup(|_| None).expect("nothing is required");
        assert_eq!((options.sample_rows, options.unindexed), (100, UnindexedSources::Refuse), "the defaults");
        let vars: HashMap<&str, &str> = HashMap::from([("UNINDEXED_SOURCES", "Warn"), ("SCHEMA_SAMPLE_ROWS", "0")]);
        let err = Settings::schema_check_from_lookup(|name| vars.get(name).map(|v| (*v).to_owned()))
            .expect_err("a sample of no rows");
        assert_eq!(err.problems.iter().map(Problem::name).collect::<Vec<_>>(), ["SCHEMA_SAMPLE_ROWS"], "{err}");
        let warn = Settings::schema_check_from_lookup(|name| (name == "UNINDEXED_SOURCES").then(|| "warn".to_owned()))
            .expect("warn");
        assert_eq!(warn.unindexed, UnindexedSources::Warn);
    }

    #[test]
    fn bucket_names_follow_s3_rules() {
        for bad in ["b", "Upper-Case", "-leading", "trailing-", "under_score"] {
            let mut vars = COMPLETE.to_vec();
            vars[2] = ("ASSET_BUCKET", bad);
            let err = read(&vars).expect_err(bad);
            assert_eq!(err.problems[0].name(), "ASSET_BUCKET", "{bad}");
        }
    }
}
