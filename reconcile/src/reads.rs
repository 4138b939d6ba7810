//! Observed use, read: a sweep pass's share of the log objects AWS delivered since the last, read in delivery order
//! and resumed across passes, each stored object's newest read kept (`observed_reads`), and where each source
//! stands (`log_sources`): how far its delivered logs reach, what was skipped, and why it could not be read. What a
//! read decides is the lifecycle's (`lifecycle::reads`); how a line is read is `observed`'s.
//!
//! Nothing here destroys anything: a read only keeps. A source that cannot be read is recorded as such, and the
//! consumer then removes nothing (it cannot know what the logs it did not read would have shown); retiring goes on.

use std::collections::{HashMap, HashSet};
use std::io::Read as _;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use sqlx::{PgConnection, PgPool};

use observed::{cloudfront_log, trust};
use platform::aws::AwsFailure;
use platform::location::{AccessLogLayout, LogLocation};
use platform::step::{Share, Step};

/// How many skipped lines a source keeps to show (`status`, `explain`): the newest.
const SKIPPED_KEPT: i64 = 20;

/// How far back of what a source's delivered logs reach a pass lists again: a log object whose upload began before
/// one already read may be listed only after it (S3 stamps an object with its upload's start).
const RELIST: Duration = Duration::from_secs(3600);

/// The most keys one pass lists per source before it reads: past it, the rest wait for the next pass.
const LIST_MAX: usize = 100_000;

/// A configured log source.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// The asset bucket's (`bucket`) S3 server access logs: a line of another bucket's, in a location several
    /// buckets log to, is passed over.
    Access { location: &'a LogLocation, layout: AccessLogLayout, bucket: &'a str },
    /// A CloudFront distribution's standard logs: `location` ends in the distribution's id, and a request's path is
    /// a key after `origin_path`.
    CloudFront { location: &'a LogLocation, origin_path: &'a str },
}

impl Source<'_> {
    /// Its name in `log_sources`.
    pub fn name(&self) -> &'static str {
        match self {
            Source::Access { .. } => "s3",
            Source::CloudFront { .. } => "cloudfront",
        }
    }

    /// Whether `key` is named as this source's log objects are: a CloudFront file is `<prefix>.YYYY-MM-DD-HH.<id>.gz`
    /// (another distribution's id, or another service's object, may begin with the same characters).
    fn names_a_log(&self, key: &str) -> bool {
        match self {
            Source::Access { .. } => !key.ends_with('/'),
            Source::CloudFront { location, .. } => {
                let Some(rest) = key.strip_prefix(location.prefix.as_str()).and_then(|r| r.strip_prefix('.')) else {
                    return false;
                };
                let hour = rest.get(..13).unwrap_or("");
                chrono::NaiveDateTime::parse_from_str(&format!("{hour}:00"), "%Y-%m-%d-%H:%M").is_ok()
                    && rest[13..].starts_with('.')
                    && rest.ends_with(".gz")
                    && !rest.contains('/')
            }
        }
    }

    fn location(&self) -> &LogLocation {
        match self {
            Source::Access { location, .. } | Source::CloudFront { location, .. } => location,
        }
    }

    /// The listings that hold every object it delivered after `since` (all of them without), each a prefix and the
    /// key to start after: the names sort in delivery order within each.
    fn listings(&self, since: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Vec<(String, Option<String>)> {
        let prefix = &self.location().prefix;
        match (self, since) {
            (_, None) => vec![(prefix.clone(), None)],
            (Source::Access { layout: AccessLogLayout::Simple, .. }, Some(since)) => {
                vec![(prefix.clone(), Some(format!("{prefix}{}", since.format("%Y-%m-%d-%H-%M-%S"))))]
            }
            // A folder a day, by the day of the event (the default) or of the delivery: a late record of an older
            // day lands in that day's folder, so every day a record delivered since may belong to is listed.
            (Source::Access { layout: AccessLogLayout::Partitioned, .. }, Some(since)) => {
                let mut day = since.date_naive();
                let mut folders = Vec::new();
                while day <= now.date_naive() {
                    folders.push((format!("{prefix}{}/", day.format("%Y/%m/%d")), None));
                    day = day.succ_opt().unwrap_or(day);
                    if folders.len() > 400 {
                        break;
                    }
                }
                folders
            }
            // Named for the hour of the requests it holds, and delivered up to a day after that hour.
            (Source::CloudFront { .. }, Some(since)) => {
                let hour = since - chrono::Duration::hours(24);
                vec![(prefix.clone(), Some(format!("{prefix}.{}", hour.format("%Y-%m-%d-%H"))))]
            }
        }
    }
}

/// The sweep pass's step: every configured source, within its share.
pub struct ObservedUse<'a> {
    /// The client of the log buckets.
    pub s3: &'a aws_sdk_s3::Client,
    /// The configured sources (none: the step forgets every source, and nothing waits for logs).
    pub sources: Vec<Source<'a>>,
    /// Requesters whose reads are not use (`observed::requester`).
    pub ignored: &'a [String],
    /// How late AWS may deliver a record: kept with each source for the consumer.
    pub lag: Duration,
    /// The most log objects one pass reads per source.
    pub max_objects: u32,
}

/// What one pass read, per source.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Progress {
    /// Per source, in order.
    pub sources: Vec<SourceProgress>,
}

/// What one pass read of one source.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SourceProgress {
    pub source: &'static str,
    pub objects_read: u64,
    pub lines_read: u64,
    /// Reads of stored objects of ours, kept (a file read many times counts once per log object).
    pub reads_recorded: u64,
    /// Reads by an ignored requester.
    pub requests_ignored: u64,
    pub lines_skipped: u64,
    /// Lines of another bucket's log.
    pub other_bucket_lines: u64,
    /// Objects delivered and not yet read when the share or the per-pass limit ran out.
    pub left: u64,
    /// How far its delivered logs reach now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reaches: Option<DateTime<Utc>>,
    /// It could not be read, or its logs stopped arriving ([`stopped`]): deletes and purges wait, and an alarm
    /// watches it.
    pub stopped: bool,
    /// Why it could not be read this pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Where a source stands, as `log_sources` says.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct SourceStanding {
    pub source: String,
    pub location: String,
    /// How late AWS may deliver a record, in seconds.
    pub delivery_lag_seconds: f64,
    /// The newest log object read, believed or not.
    pub newest_delivered_at: Option<DateTime<Utc>>,
    /// The newest delivery read since the location was last found to be AWS's alone: the logs are complete up to
    /// this, less the lag. Only this moves a delete or a purge.
    pub counted_reach: Option<DateTime<Utc>>,
    /// Since when the location has been found to be AWS's alone, without a break.
    pub trusted_since: Option<DateTime<Utc>>,
    pub newest_request_at: Option<DateTime<Utc>>,
    pub objects_read: i64,
    pub lines_read: i64,
    pub reads_recorded: i64,
    pub requests_ignored: i64,
    pub lines_skipped: i64,
    pub other_bucket_lines: i64,
    /// The newest skipped lines: object, line number, reason.
    pub skipped: serde_json::Value,
    pub listed_at: Option<DateTime<Utc>>,
    pub error: Option<String>,
    pub error_at: Option<DateTime<Utc>>,
}

/// Whether logs that reach `reaches` have stopped arriving by `now`: nothing delivered for twice the lag, and a day
/// at least (a quiet bucket still has the sweep's own reads of its configuration logged every pass).
pub fn stopped(reaches: Option<DateTime<Utc>>, lag: Duration, now: DateTime<Utc>) -> bool {
    let quiet = chrono::Duration::from_std((lag * 2).max(Duration::from_secs(86_400))).unwrap_or(chrono::Duration::MAX);
    reaches.is_none_or(|reaches| now - reaches > quiet)
}

/// Since when a source's logs have been quiet, for [`stopped`]: the newest delivery counted, or, where only
/// deliveries from before the location was found sound were read, the newest of those (earlier than that finding,
/// so logs that had stopped before a break in the trust are still stopped once it is mended); `None` when nothing
/// was ever delivered.
pub fn quiet_since(
    counted_reach: Option<DateTime<Utc>>,
    newest_delivered_at: Option<DateTime<Utc>>,
) -> Option<DateTime<Utc>> {
    counted_reach.or(newest_delivered_at)
}

impl SourceStanding {
    /// Why a person should look, if one should: the source cannot be read, or its logs stopped arriving
    /// ([`stopped`]).
    pub fn needs_person(&self, now: DateTime<Utc>) -> Option<String> {
        if let Some(error) = &self.error {
            return Some(format!("the {} logs cannot be read: {error}", self.source));
        }
        let lag = Duration::try_from_secs_f64(self.delivery_lag_seconds).unwrap_or_default();
        let quiet_since = quiet_since(self.counted_reach, self.newest_delivered_at);
        match self.counted_reach {
            _ if !stopped(quiet_since, lag, now) => None,
            None if self.newest_delivered_at.is_some() => Some(format!(
                "no {} log delivered since its location was found sound ({}) has been read: deletes and purges wait \
                 for one",
                self.source,
                self.trusted_since
                    .map_or("not yet".to_owned(), |at| at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            )),
            None => Some(format!("no {} log has been read yet from {}", self.source, self.location)),
            Some(newest) => Some(format!(
                "no {} log delivered since {}: deletes and purges wait for logs",
                self.source,
                newest.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            )),
        }
    }
}

/// Where every source stands.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Standing {
    pub sources: Vec<SourceStanding>,
}

impl Step for ObservedUse<'_> {
    type Progress = Progress;
    type Standing = Standing;
    type Error = sqlx::Error;
    const NAME: &'static str = "observed use";
    const ON_FAILURE: &'static str = "reading the access logs failed: deletes and purges wait for them";

    async fn advance(&self, pool: &PgPool, share: Share) -> Result<Progress, sqlx::Error> {
        let mut conn = pool.acquire().await?;
        let names: Vec<&str> = self.sources.iter().map(Source::name).collect();
        sqlx::query!("DELETE FROM log_sources WHERE source <> ALL ($1::text[])", &names as &[&str])
            .execute(&mut *conn)
            .await?;
        let mut progress = Progress::default();
        for source in &self.sources {
            progress.sources.push(self.read_source(&mut conn, source, share.until).await?);
        }
        // Reads of files no longer stored, once a pass whatever the sources.
        sqlx::query!(
            "DELETE FROM observed_reads r
              WHERE r.storage_key IN (SELECT x.storage_key FROM observed_reads x
                                       WHERE NOT EXISTS (SELECT 1 FROM stored_objects o WHERE o.storage_key = x.storage_key)
                                       LIMIT 10000)"
        )
        .execute(&mut *conn)
        .await?;
        Ok(progress)
    }

    async fn standing(conn: &mut PgConnection) -> Result<Standing, sqlx::Error> {
        let sources = sqlx::query_as!(
            SourceStanding,
            r#"SELECT source, location, extract(epoch FROM delivery_lag)::float8 AS "delivery_lag_seconds!",
                      newest_delivered_at, counted_reach, trusted_since, newest_request_at, objects_read, lines_read, reads_recorded,
                      requests_ignored, lines_skipped, other_bucket_lines, skipped, listed_at, error, error_at
                 FROM log_sources ORDER BY source"#
        )
        .fetch_all(conn)
        .await?;
        Ok(Standing { sources })
    }

    fn log(progress: &Progress) {
        for source in &progress.sources {
            tracing::info!(
                source = source.source,
                objects_read = source.objects_read,
                lines_read = source.lines_read,
                reads_recorded = source.reads_recorded,
                lines_skipped = source.lines_skipped,
                left = source.left,
                error = source.error.as_deref().unwrap_or(""),
                "access logs read"
            );
        }
    }
}

/// One log object listed.
#[derive(Debug, Clone)]
struct Listed {
    key: String,
    delivered_at: DateTime<Utc>,
}

/// The newest read of one logged key within a log object.
#[derive(Debug, Clone)]
struct Newest {
    keys: Vec<String>,
    at: DateTime<Utc>,
    requester: Option<String>,
    referrer_host: Option<String>,
    client: &'static str,
}

/// What one log object held.
#[derive(Debug, Default)]
struct Object {
    lines: u64,
    ignored: u64,
    /// Lines of another bucket's log passed over, and whether any line was of ours: only an object that holds one
    /// is a delivery of our logs, and moves how far they reach.
    other_bucket: u64,
    ours: bool,
    skipped: Vec<(u64, String)>,
    newest_request: Option<DateTime<Utc>>,
    reads: HashMap<String, Newest>,
}

impl ObservedUse<'_> {
    async fn read_source(
        &self,
        conn: &mut PgConnection,
        source: &Source<'_>,
        until: Instant,
    ) -> Result<SourceProgress, sqlx::Error> {
        let name = source.name();
        let location = source.location().to_string();
        let lag_secs = self.lag.as_secs_f64();
        // A location that changed starts its source afresh: what the old one delivered says nothing of the new.
        let standing = sqlx::query!(
            r#"INSERT INTO log_sources (source, location, delivery_lag) VALUES ($1, $2, $3 * interval '1 second')
               ON CONFLICT (source) DO UPDATE
                  SET delivery_lag = EXCLUDED.delivery_lag,
                      newest_delivered_at = CASE WHEN log_sources.location = EXCLUDED.location
                                                 THEN log_sources.newest_delivered_at END,
                      configured_at = CASE WHEN log_sources.location = EXCLUDED.location
                                           THEN log_sources.configured_at ELSE now() END,
                      trusted_since = CASE WHEN log_sources.location = EXCLUDED.location
                                           THEN log_sources.trusted_since END,
                      location = EXCLUDED.location
               RETURNING newest_delivered_at, counted_reach"#,
            name,
            location,
            lag_secs
        )
        .fetch_one(&mut *conn)
        .await?;
        let mut progress =
            SourceProgress { source: name, reaches: standing.counted_reach, ..SourceProgress::default() };
        // Listed from the newest object read, counted or not: it only moves on a whole listing read oldest first, and
        // a source whose reach does not count yet must still get past what it has read (over LIST_MAX objects, a
        // listing from the start would never reach the deliveries that count).
        let since = standing.newest_delivered_at;
        // What was delivered since the reach (less RELIST); and where names that can hold it begin: a name is the
        // delivery's time in the simple layout, the event's day or the requests' hour in the others, up to the lag
        // before it.
        let from = since.map(|s| s - chrono::Duration::from_std(RELIST).unwrap_or_default());
        let names_from = match source {
            Source::Access { layout: AccessLogLayout::Simple, .. } => from,
            _ => from.map(|s| s - chrono::Duration::from_std(self.lag).unwrap_or_default()),
        };
        let (listed, truncated) = match self.list(source, from, names_from).await {
            Ok(listed) => listed,
            Err(e) => {
                progress.error = Some(e.to_string());
                progress.stopped = true;
                record_error(conn, name, &e.to_string()).await?;
                return Ok(progress);
            }
        };
        // Lines anybody else could have written are not read at all: neither their reads nor their delivery
        // times (which would tell the consumer the logs cover a purge) are believed. Checked after the listing, so
        // no object listed was written after the policy was seen.
        match self.trusted(conn, source).await? {
            Ok(()) => {}
            Err(e) => {
                progress.error = Some(e.clone());
                progress.stopped = true;
                record_error(conn, name, &e).await?;
                return Ok(progress);
            }
        }
        let listed = unread(conn, name, listed).await?;
        let mut left = listed.len() as u64;
        for object in listed.iter().take(self.max_objects as usize) {
            if Instant::now() >= until {
                break;
            }
            let read = match self.read_object(source, &object.key).await {
                Ok(read) => read,
                Err(e) => {
                    progress.error = Some(e.clone());
                    record_error(conn, name, &e).await?;
                    break;
                }
            };
            // A listing cut short may have left out an object delivered before one read: the reach stays put, and
            // deletes and purges wait, until a listing holds everything since it. (Whether a delivery counts at all
            // is log_sources.counted_reach's to say.)
            let reach = !truncated && read.ours;
            let recorded = record(conn, name, object, &read, reach).await?;
            left -= 1;
            progress.objects_read += 1;
            progress.lines_read += read.lines;
            progress.reads_recorded += recorded;
            progress.requests_ignored += read.ignored;
            progress.lines_skipped += read.skipped.len() as u64;
            progress.other_bucket_lines += read.other_bucket;
        }
        progress.left = left;
        let reach = sqlx::query!("SELECT counted_reach, newest_delivered_at FROM log_sources WHERE source = $1", name)
            .fetch_one(&mut *conn)
            .await?;
        progress.reaches = reach.counted_reach;
        let quiet_since = quiet_since(reach.counted_reach, reach.newest_delivered_at);
        progress.stopped = progress.error.is_some() || stopped(quiet_since, self.lag, Utc::now());
        // Readable again only once something was read, or nothing is left: a pass whose share ran out first says
        // nothing of the object that failed.
        if progress.error.is_none() && (progress.objects_read > 0 || left == 0) {
            sqlx::query!(
                "UPDATE log_sources SET listed_at = now(), error = NULL, error_at = NULL WHERE source = $1",
                name
            )
            .execute(&mut *conn)
            .await?;
        }
        if let Some(from) = from {
            // What can no longer be listed again (older than any listing starts) need not be remembered.
            sqlx::query!(
                "DELETE FROM log_objects WHERE source = $1 AND delivered_at < $2::timestamptz - interval '2 days'",
                name,
                from
            )
            .execute(&mut *conn)
            .await?;
        }
        Ok(progress)
    }

    /// Whether only AWS's log delivery can write the source's location, by its bucket's policy (read each pass: a
    /// policy changed since the last is seen before the next object is read), recording since when without a break;
    /// or why it is not read. A policy that falls short forgets that time; a call that fails says nothing of it.
    async fn trusted(&self, conn: &mut PgConnection, source: &Source<'_>) -> Result<Result<(), String>, sqlx::Error> {
        let LogLocation { bucket, prefix } = source.location();
        let policy = match self.s3.get_bucket_policy().bucket(bucket).send().await {
            Ok(out) => out.policy,
            Err(e) if e.as_service_error().and_then(|e| e.meta().code()) == Some("NoSuchBucketPolicy") => None,
            Err(e) => return Ok(Err(AwsFailure::from_sdk(format!("GetBucketPolicy s3://{bucket}"), &e).to_string())),
        };
        let region = self.s3.config().region().map_or("", |r| r.as_ref());
        let verdict = trust::check(policy.as_deref(), trust::partition(region), bucket, prefix);
        sqlx::query!(
            "UPDATE log_sources SET trusted_since = CASE WHEN $2 THEN coalesce(trusted_since, now()) END WHERE source = $1",
            source.name(),
            verdict.is_ok()
        )
        .execute(&mut *conn)
        .await?;
        Ok(verdict
            .map_err(|e| format!("s3://{bucket}/{prefix} is not trusted: {e} (docs/operating.md, \"Observed use\")")))
    }

    /// The source's log objects delivered since `from` (every one without), oldest delivery first, listed where
    /// names from `names_from` on are; and whether the listing was cut short at [`LIST_MAX`].
    async fn list(
        &self,
        source: &Source<'_>,
        from: Option<DateTime<Utc>>,
        names_from: Option<DateTime<Utc>>,
    ) -> Result<(Vec<Listed>, bool), AwsFailure> {
        let bucket = &source.location().bucket;
        let mut listed = Vec::new();
        let mut truncated = false;
        'listings: for (prefix, start_after) in source.listings(names_from, Utc::now()) {
            let mut pages = self
                .s3
                .list_objects_v2()
                .bucket(bucket)
                .prefix(&prefix)
                .set_start_after(start_after)
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                let page =
                    page.map_err(|e| AwsFailure::from_sdk(format!("ListObjectsV2 s3://{bucket}/{prefix}"), &e))?;
                for object in page.contents() {
                    let (Some(key), Some(modified)) = (object.key(), object.last_modified()) else { continue };
                    let delivered_at =
                        DateTime::from_timestamp(modified.secs(), modified.subsec_nanos()).unwrap_or_default();
                    if from.is_none_or(|from| delivered_at >= from) && source.names_a_log(key) {
                        listed.push(Listed { key: key.to_owned(), delivered_at });
                    }
                }
                if listed.len() >= LIST_MAX {
                    truncated = true;
                    break 'listings;
                }
            }
        }
        listed.sort_by(|a, b| (a.delivered_at, &a.key).cmp(&(b.delivered_at, &b.key)));
        Ok((listed, truncated))
    }

    /// One log object, its lines read.
    async fn read_object(&self, source: &Source<'_>, key: &str) -> Result<Object, String> {
        let bucket = &source.location().bucket;
        let out = self
            .s3
            .get_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| AwsFailure::from_sdk(format!("GetObject s3://{bucket}/{key}"), &e).to_string())?;
        let body = out.body.collect().await.map_err(|e| format!("GetObject s3://{bucket}/{key}: {e}"))?.into_bytes();
        // CloudFront gzips its files; S3's are plain text.
        let text = if body.starts_with(&[0x1f, 0x8b]) {
            let mut text = String::new();
            flate2::read::MultiGzDecoder::new(&body[..])
                .read_to_string(&mut text)
                .map_err(|e| format!("s3://{bucket}/{key} is not readable gzip text: {e}"))?;
            text
        } else {
            String::from_utf8_lossy(&body).into_owned()
        };
        let mut object = Object::default();
        let mut cloudfront = match source {
            Source::CloudFront { origin_path, .. } => Some(cloudfront_log::Reader::new(origin_path)),
            Source::Access { .. } => None,
        };
        for (at, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            object.lines += 1;
            let parsed = match &mut cloudfront {
                Some(reader) => reader.parse(line),
                None => observed::s3_log::parse(line).map(Some),
            };
            let access = match parsed {
                Ok(Some(access)) => access,
                Ok(None) => continue,
                Err(e) => {
                    object.skipped.push((at as u64 + 1, e.to_string()));
                    continue;
                }
            };
            if let Source::Access { bucket, .. } = source
                && access.bucket != Some(*bucket)
            {
                object.other_bucket += 1;
                continue;
            }
            object.ours = true;
            if !access.is_read() {
                continue;
            }
            if access.requester.is_some_and(|r| observed::requester::is_ignored(r, self.ignored)) {
                object.ignored += 1;
                continue;
            }
            object.newest_request = object.newest_request.max(Some(access.at));
            match object.reads.get_mut(access.logged_key()) {
                Some(newest) if newest.at >= access.at => {}
                Some(newest) => {
                    newest.at = access.at;
                    newest.requester = access.requester.map(str::to_owned);
                    newest.referrer_host = access.referrer_host();
                    newest.client = access.client().as_str();
                }
                None => {
                    let keys = access.keys();
                    if !keys.is_empty() {
                        object.reads.insert(
                            access.logged_key().to_owned(),
                            Newest {
                                keys,
                                at: access.at,
                                requester: access.requester.map(str::to_owned),
                                referrer_host: access.referrer_host(),
                                client: access.client().as_str(),
                            },
                        );
                    }
                }
            }
        }
        Ok(object)
    }
}

/// `listed` less what was read already.
async fn unread(conn: &mut PgConnection, source: &str, listed: Vec<Listed>) -> Result<Vec<Listed>, sqlx::Error> {
    let keys: Vec<String> = listed.iter().map(|l| l.key.clone()).collect();
    let read: HashSet<String> = sqlx::query_scalar!(
        "SELECT object_key FROM log_objects WHERE source = $1 AND object_key = ANY ($2)",
        source,
        &keys
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .collect();
    Ok(listed.into_iter().filter(|l| !read.contains(&l.key)).collect())
}

/// Records what `object` held, in one transaction: the newest read of each stored object it names (of every key a
/// logged key may have meant, those that are ours), the object as read, and, with `reach`, the source's reach.
/// Returns the reads kept.
async fn record(
    conn: &mut PgConnection,
    source: &str,
    listed: &Listed,
    object: &Object,
    reach: bool,
) -> Result<u64, sqlx::Error> {
    let mut keys = Vec::new();
    let mut at = Vec::new();
    let mut requester = Vec::new();
    let mut referrer_host = Vec::new();
    let mut client = Vec::new();
    for newest in object.reads.values() {
        for key in &newest.keys {
            keys.push(key.clone());
            at.push(newest.at);
            requester.push(newest.requester.clone());
            referrer_host.push(newest.referrer_host.clone());
            client.push(newest.client.to_owned());
        }
    }
    let skipped: Vec<serde_json::Value> = object
        .skipped
        .iter()
        .map(|(line, reason)| json!({ "object": listed.key, "line": line, "reason": reason }))
        .collect();
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    let recorded = sqlx::query!(
        "INSERT INTO observed_reads AS r (storage_key, read_at, source, requester, referrer_host, client)
         SELECT DISTINCT ON (o.storage_key) o.storage_key, n.at, $6, n.requester, n.referrer_host, n.client
           FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::text[])
                AS n(key, at, requester, referrer_host, client)
           JOIN stored_objects o ON o.storage_key = n.key
          ORDER BY o.storage_key, n.at DESC
         ON CONFLICT (storage_key) DO UPDATE
            SET read_at = EXCLUDED.read_at, source = EXCLUDED.source, requester = EXCLUDED.requester,
                referrer_host = EXCLUDED.referrer_host, client = EXCLUDED.client, recorded_at = now()
          WHERE r.read_at < EXCLUDED.read_at",
        &keys,
        &at,
        &requester as &[Option<String>],
        &referrer_host as &[Option<String>],
        &client,
        source
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    sqlx::query!(
        "INSERT INTO log_objects (source, object_key, delivered_at, lines) VALUES ($1, $2, $3, $4)
         ON CONFLICT DO NOTHING",
        source,
        listed.key,
        listed.delivered_at,
        i64::try_from(object.lines).unwrap_or(i64::MAX)
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        r#"UPDATE log_sources
              SET newest_delivered_at = CASE WHEN $10 THEN greatest(newest_delivered_at, $2) ELSE newest_delivered_at END,
                  newest_request_at = greatest(newest_request_at, $3),
                  objects_read = objects_read + 1, lines_read = lines_read + $4,
                  reads_recorded = reads_recorded + $5, requests_ignored = requests_ignored + $6,
                  lines_skipped = lines_skipped + $7, other_bucket_lines = other_bucket_lines + $11,
                  skipped = (SELECT coalesce(jsonb_agg(e ORDER BY n), '[]')
                               FROM (SELECT e, n FROM jsonb_array_elements(skipped || $8::jsonb) WITH ORDINALITY AS s(e, n)
                                      ORDER BY n DESC LIMIT $9) newest)
            WHERE source = $1"#,
        source,
        listed.delivered_at,
        object.newest_request,
        i64::try_from(object.lines).unwrap_or(i64::MAX),
        i64::try_from(recorded).unwrap_or(i64::MAX),
        i64::try_from(object.ignored).unwrap_or(i64::MAX),
        i64::try_from(object.skipped.len()).unwrap_or(i64::MAX),
        serde_json::Value::Array(skipped),
        SKIPPED_KEPT,
        reach,
        i64::try_from(object.other_bucket).unwrap_or(i64::MAX)
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(recorded)
}

/// Records why `source` could not be read: the consumer then removes nothing.
async fn record_error(conn: &mut PgConnection, source: &str, error: &str) -> Result<(), sqlx::Error> {
    tracing::error!(source, error, "an access log source cannot be read: deletes and purges wait");
    sqlx::query!(
        "UPDATE log_sources SET error = $2, error_at = now(), listed_at = now() WHERE source = $1",
        source,
        error
    )
    .execute(conn)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn location(prefix: &str) -> LogLocation {
        LogLocation { bucket: "logs".to_owned(), prefix: prefix.to_owned() }
    }

    #[test]
    fn a_cloudfront_source_reads_only_its_distributions_files() {
        let location = location("cf/E2EXAMPLE");
        let source = Source::CloudFront { location: &location, origin_path: "" };
        assert!(source.names_a_log("cf/E2EXAMPLE.2026-12-05-10.a1b2c3d4.gz"));
        for other in [
            "cf/E2EXAMPLE2.2026-12-05-10.a1b2c3d4.gz",
            "cf/E2EXAMPLE.2026-12-05.a1b2c3d4.gz",
            "cf/E2EXAMPLE.2026-12-05-10.a1b2c3d4.json",
            "cf/E2EXAMPLE.2026-12-05-10.a/b.gz",
            "cf/E2EXAMPLE/AWSLogs/123456789012/CloudTrail/x.json.gz",
        ] {
            assert!(!source.names_a_log(other), "{other}");
        }
    }

    #[test]
    fn each_layout_is_listed_from_where_a_delivery_since_can_be() {
        let since = "2026-12-04T10:20:30Z".parse::<DateTime<Utc>>().expect("a time");
        let now = "2026-12-05T01:00:00Z".parse::<DateTime<Utc>>().expect("a time");
        let simple = location("assets/");
        let access = Source::Access { location: &simple, layout: AccessLogLayout::Simple, bucket: "assets" };
        assert_eq!(
            access.listings(Some(since), now),
            [("assets/".to_owned(), Some("assets/2026-12-04-10-20-30".to_owned()))]
        );
        assert_eq!(access.listings(None, now), [("assets/".to_owned(), None)]);
        let folder = location("assets/111122223333/us-east-1/acme/");
        let partitioned = Source::Access { location: &folder, layout: AccessLogLayout::Partitioned, bucket: "assets" };
        assert_eq!(
            partitioned.listings(Some(since), now),
            [
                ("assets/111122223333/us-east-1/acme/2026/12/04/".to_owned(), None),
                ("assets/111122223333/us-east-1/acme/2026/12/05/".to_owned(), None)
            ]
        );
        let distribution = location("cf/E2EXAMPLE");
        let cloudfront = Source::CloudFront { location: &distribution, origin_path: "" };
        assert_eq!(
            cloudfront.listings(Some(since), now),
            [("cf/E2EXAMPLE".to_owned(), Some("cf/E2EXAMPLE.2026-12-03-10".to_owned()))]
        );
    }

    #[test]
    fn a_person_is_asked_for_when_a_source_fails_or_its_logs_stop() {
        let now = Utc::now();
        let mut standing = SourceStanding {
            source: "s3".to_owned(),
            location: "s3://logs/assets/".to_owned(),
            delivery_lag_seconds: 3600.0,
            newest_delivered_at: Some(now - chrono::Duration::hours(2)),
            counted_reach: Some(now - chrono::Duration::hours(2)),
            trusted_since: Some(now - chrono::Duration::hours(30)),
            newest_request_at: None,
            objects_read: 1,
            lines_read: 1,
            reads_recorded: 0,
            requests_ignored: 0,
            other_bucket_lines: 0,
            lines_skipped: 0,
            skipped: json!([]),
            listed_at: None,
            error: None,
            error_at: None,
        };
        assert_eq!(standing.needs_person(now), None);
        standing.counted_reach = Some(now - chrono::Duration::hours(25));
        assert!(standing.needs_person(now).is_some_and(|why| why.contains("no s3 log delivered since")));
        // Read, but nothing delivered since the location was found sound (an hour ago): quiet from the newest
        // delivery read, so logs that stopped before a break in the trust are still stopped once it is mended.
        standing.counted_reach = None;
        standing.trusted_since = Some(now - chrono::Duration::hours(1));
        standing.newest_delivered_at = Some(now - chrono::Duration::hours(2));
        assert_eq!(standing.needs_person(now), None);
        standing.newest_delivered_at = Some(now - chrono::Duration::hours(25));
        assert!(standing.needs_person(now).is_some_and(|why| why.contains("since its location was found sound")));
        standing.error = Some("AccessDenied".to_owned());
        assert!(standing.needs_person(now).is_some_and(|why| why.contains("cannot be read: AccessDenied")));
    }
}
