//! The consuming half of the pair: settles each claimed asset inside one transaction and reports only the
//! failed messages (`ReportBatchItemFailures`).
//!
//! Per invocation the newest schema verdict is verified once (invariant 4: recorded by a recent sweep pass, on
//! the catalog as it still is; one cheap statement, whatever the schema's size), and the asset bucket's versioning
//! is read once (invariant 18: no delete or purge unless a removal can be undone); per record, isolated from the
//! others even if it panics: parse the message, settle it (`settle`), and on failure count the attempt on the
//! asset — on the final permitted receive, mark the asset `failed` first, so the row and the dead-letter message
//! agree (invariant 10).

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use futures::{FutureExt, StreamExt};
use lambda_runtime::{Diagnostic, LambdaEvent};
use lifecycle::settle::{self, SettleError, Settled};
use lifecycle::{CleanupMessage, assets};
use platform::audit::{AuditAction, Event};
use platform::bucket::{self, BucketError, Versioning};
use platform::objects::{self, Presence};
use schema::ReferenceMap;
use schema::verdict::{self, CurrentError, Matched, VerdictError};
use serde_json::json;
use settings::Settings;
use sqlx::PgPool;
use tracing::{Instrument, error, info, warn};

/// The event source mapping's `BatchSize`: records settle concurrently up to this (and the pool's size).
pub const BATCH_SIZE: usize = 10;

/// The event source mapping's `ScalingConfig.MaximumConcurrency`: the database connection budget assumes at
/// most this many consumers, each with `DATABASE_MAX_CONNECTIONS`, plus one sweep.
pub const MAX_CONCURRENT_INVOCATIONS: u32 = 2;

/// How long a warm function trusts a read of the bucket's versioning that found it `Enabled`. Only that answer is
/// kept: a bucket found unprotected, or unreadable, is read again by the next batch, and one whose versioning is
/// suspended meanwhile is seen within this long.
pub const VERSIONING_TRUSTED_FOR: Duration = Duration::from_secs(60);

/// Errors that fail the whole invocation (every message in the batch is retried).
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    /// A record without a message id cannot be reported on its own; an empty id would make Lambda fail the
    /// batch anyway, so say so explicitly.
    #[error("record {position} of the batch has no message id")]
    MissingMessageId { position: usize },
}

impl From<ConsumerError> for Diagnostic {
    fn from(e: ConsumerError) -> Diagnostic {
        Diagnostic { error_type: "ConsumerError".into(), error_message: e.to_string() }
    }
}

/// The reference map as this invocation found it.
enum Schema {
    /// The map, how the catalog was found unchanged, and the verdict's row.
    Valid(Arc<ReferenceMap>, Matched, i64),
    Refused(VerdictError),
    Unreadable(Arc<sqlx::Error>),
}

/// How one record ended, for the response and the metrics line.
enum Item {
    Settled(Settled, Option<Presence>),
    /// The schema verdict was missing, stale or overtaken by a change: the claim is given back for the next
    /// pass, and the message is done (it does not spend a receive towards the dead-letter queue).
    Postponed,
    Failed {
        marked_failed: bool,
    },
}

/// The consumer with its clients, built once per cold start.
pub struct Consumer {
    pool: PgPool,
    s3: aws_sdk_s3::Client,
    settings: Settings,
    /// The map of the verdict last verified, by its id: a warm function reuses it while the verdict stands.
    verified: Mutex<Option<(i64, Arc<ReferenceMap>)>>,
    /// When the bucket's versioning was last read `Enabled`: trusted for [`VERSIONING_TRUSTED_FOR`].
    versioned_at: Mutex<Option<Instant>>,
}

impl Consumer {
    pub fn new(pool: PgPool, s3: aws_sdk_s3::Client, settings: Settings) -> Self {
        Consumer { pool, s3, settings, verified: Mutex::new(None), versioned_at: Mutex::new(None) }
    }

    /// The Lambda handler: settles every record and lists only the failed ones. Returning failures is a
    /// successful invocation; only a record without an id fails the invocation.
    pub async fn handle(&self, event: LambdaEvent<SqsEvent>) -> Result<SqsBatchResponse, ConsumerError> {
        let records = event.payload.records;
        for (position, record) in records.iter().enumerate() {
            if record.message_id.as_deref().is_none_or(str::is_empty) {
                return Err(ConsumerError::MissingMessageId { position });
            }
        }
        let schema = self.schema().await;
        let versioning = self.versioning().await;
        // Bounded by the pool: two consumers share one database, and each settle holds one connection.
        if records.len() > BATCH_SIZE {
            warn!(records = records.len(), expected = BATCH_SIZE, "batch larger than the event source mapping's");
        }
        let concurrency =
            (self.settings.database.max_connections as usize).min(BATCH_SIZE).clamp(1, records.len().max(1));
        let outcomes: Vec<(String, Item)> = futures::stream::iter(records.iter())
            .map(|record| self.process(record, &schema, &versioning))
            .buffer_unordered(concurrency)
            .collect()
            .await;

        let mut response = SqsBatchResponse::default();
        for (message_id, item) in &outcomes {
            if matches!(item, Item::Failed { .. }) {
                let mut failure = BatchItemFailure::default();
                failure.item_identifier = message_id.clone();
                response.batch_item_failures.push(failure);
            }
        }
        println!("{}", metrics_line(&outcomes, &schema, &versioning));
        Ok(response)
    }

    /// The asset bucket's versioning for this batch: one `GetBucketVersioning` call, before anything settles,
    /// unless a read within [`VERSIONING_TRUSTED_FOR`] found it `Enabled`.
    async fn versioning(&self) -> Result<Versioning, BucketError> {
        let trusted =
            self.versioned_at.lock().ok().and_then(|at| *at).is_some_and(|at| at.elapsed() < VERSIONING_TRUSTED_FOR);
        if trusted {
            return Ok(Versioning::Enabled);
        }
        let name = &self.settings.asset_bucket;
        let read = bucket::versioning(&self.s3, name).await;
        if let Ok(mut at) = self.versioned_at.lock() {
            *at = matches!(read, Ok(Versioning::Enabled)).then(Instant::now);
        }
        if let Some(why) = bucket::destruction_held(name, &read) {
            error!(bucket = %name, reason = %why, "bucket unprotected: deletes and purges in this batch are deferred");
        }
        read
    }

    /// The newest schema verdict, verified against the catalog as it is now; its map is parsed once per verdict.
    async fn schema(&self) -> Schema {
        let known = self.verified.lock().ok().and_then(|cached| cached.clone());
        let verified = match self.pool.acquire().await {
            Ok(mut conn) => {
                // Once a cold start (nothing is cached yet): the role should be the consumer's own login.
                if known.is_none()
                    && let Ok(Some(role)) = platform::db::superuser(&mut conn).await
                {
                    warn!(%role, "the consumer connects as a superuser: give it a login of its own (docs/security.md)");
                }
                let known_id = known.as_ref().map(|(id, _)| *id);
                verdict::current(&mut conn, self.settings.schema_verdict_max_age, known_id).await
            }
            Err(e) => Err(CurrentError::Database(e)),
        };
        match verified {
            Ok((current, fresh_map)) => {
                let map = match (fresh_map, known) {
                    (Some(map), _) => {
                        let map = Arc::new(map);
                        if let Ok(mut cached) = self.verified.lock() {
                            *cached = Some((current.id, map.clone()));
                        }
                        map
                    }
                    // The verdict this function already holds: its map was not read again.
                    (None, Some((_, map))) => map,
                    (None, None) => {
                        return Schema::Refused(VerdictError::Unreadable("the verdict came without its map".into()));
                    }
                };
                info!(verdict = current.id, matched = %current.matched, sources = map.sources.len(), "schema verdict verified");
                Schema::Valid(map, current.matched, current.id)
            }
            Err(CurrentError::Verdict(refusal)) => {
                error!(reason = %refusal, "schema verdict not usable: settling nothing in this batch");
                Schema::Refused(refusal)
            }
            Err(CurrentError::Database(e)) => Schema::Unreadable(Arc::new(e)),
        }
    }

    async fn process(
        &self,
        record: &SqsMessage,
        schema: &Schema,
        versioning: &Result<Versioning, BucketError>,
    ) -> (String, Item) {
        let message_id = record.message_id.clone().unwrap_or_default();
        let span = tracing::info_span!(
            "settle",
            message_id = %message_id,
            asset_id = tracing::field::Empty,
            workspace_id = tracing::field::Empty
        );
        // One record's panic fails its own message, not the batch: the others settle and are reported apart.
        let settled = AssertUnwindSafe(self.process_in_span(record, &message_id, schema, versioning, &span))
            .catch_unwind()
            .instrument(span.clone())
            .await;
        let item = match settled {
            Ok(item) => item,
            Err(panic) => {
                let what = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("a panic without a message")
                    .to_owned();
                let e = SettleError::Panicked(what);
                let _entered = span.enter();
                error!(error = %e, "settle panicked: this message alone fails");
                drop(_entered);
                let marked_failed = match CleanupMessage::parse(record.body.as_deref().unwrap_or_default()) {
                    Ok(message) => self.record_failure(record, &message, &e).instrument(span.clone()).await,
                    Err(_) => false,
                };
                Item::Failed { marked_failed }
            }
        };
        (message_id, item)
    }

    async fn process_in_span(
        &self,
        record: &SqsMessage,
        message_id: &str,
        schema: &Schema,
        versioning: &Result<Versioning, BucketError>,
        span: &tracing::Span,
    ) -> Item {
        let message = match CleanupMessage::parse(record.body.as_deref().unwrap_or_default()) {
            Ok(message) => message,
            Err(source) => {
                let e = SettleError::Malformed { message_id: message_id.to_owned(), source };
                error!(error = %e, "malformed message");
                return Item::Failed { marked_failed: false };
            }
        };
        span.record("asset_id", tracing::field::display(message.asset_id));
        span.record("workspace_id", tracing::field::display(message.workspace_id));

        let result = match schema {
            Schema::Valid(map, _, verdict) => {
                let cx = settle::Context {
                    pool: &self.pool,
                    s3: &self.s3,
                    bucket: &self.settings.asset_bucket,
                    versioning,
                    map,
                    verdict: *verdict,
                    grace: self.settings.grace,
                    retention: self.settings.retention,
                    quiet: self.settings.schema_quiet_period,
                    abandon_after: self.settings.abandon_after,
                    s3_timeout: self.settings.s3_delete_timeout,
                    message_id,
                };
                settle::settle(&cx, &message).await
            }
            Schema::Refused(refusal) => Err(SettleError::Schema(refusal.clone())),
            Schema::Unreadable(e) => Err(SettleError::SchemaUnreadable(e.clone())),
        };
        match result {
            Ok(settled) => {
                let presence = match &settled.verify_bytes {
                    Some(key) => self.verify_kept_bytes(&message, key).await,
                    None => None,
                };
                Item::Settled(settled, presence)
            }
            Err(SettleError::Schema(verdict)) if verdict.retryable() => {
                let e = SettleError::Schema(verdict);
                match postpone(&self.pool, &message, &e).await {
                    Ok(()) => {
                        warn!(error = %e, "settle postponed: the claim goes back to the next pass");
                        Item::Postponed
                    }
                    Err(write_error) => {
                        error!(error = %write_error, "could not give the claim back; the message is retried");
                        Item::Failed { marked_failed: self.record_failure(record, &message, &e).await }
                    }
                }
            }
            Err(e) => {
                let marked_failed = self.record_failure(record, &message, &e).await;
                Item::Failed { marked_failed }
            }
        }
    }

    /// After a keep commits: the bytes must be there; bring back the newest kept version if they are not.
    async fn verify_kept_bytes(&self, message: &CleanupMessage, key: &str) -> Option<Presence> {
        let presence = match objects::ensure_present(&self.s3, &self.settings.asset_bucket, key).await {
            Ok(presence) => presence,
            Err(e) => {
                warn!(error = %e, "could not verify a kept asset's bytes");
                return None;
            }
        };
        let (action, evidence) = match &presence {
            Presence::Present => return Some(presence),
            Presence::Restored { version_id } => {
                warn!(version_id, "kept asset's bytes were missing: restored the newest kept version");
                (AuditAction::Integrity, json!({ "bytes": "restored", "version_id": version_id }))
            }
            Presence::Lost => {
                error!("kept asset's bytes are missing and no version is kept: asset lost");
                (AuditAction::Lost, json!({ "bytes": "missing", "versions": 0 }))
            }
        };
        let written = Event::new(message.asset_id, message.workspace_id, action, evidence)
            .storage_key(key)
            .sweep_run(message.sweep_run_id)
            .write(&self.pool)
            .await;
        if let Err(e) = written {
            error!(error = %e, %action, "could not record the integrity event");
        }
        Some(presence)
    }

    /// Counts the failed attempt on the asset; on the final permitted receive, marks it `failed` with the error
    /// (its own transaction, before the failure is reported and SQS dead-letters the message). Returns whether
    /// the asset was marked.
    async fn record_failure(&self, record: &SqsMessage, message: &CleanupMessage, e: &SettleError) -> bool {
        let receives: u32 = record.attributes.get("ApproximateReceiveCount").and_then(|n| n.parse().ok()).unwrap_or(1);
        let last = receives >= self.settings.queue.max_receive_count;
        error!(error = %e, retryable = e.retryable(), receives, final_receive = last, "settle failed");
        if let SettleError::WrongWorkspace { actual, .. } = e {
            // The message is not trusted: it may not change a row of another workspace. Its rejection is
            // still on record, under the workspace the row really belongs to.
            let evidence = json!({ "error": e.to_string(), "message_workspace": message.workspace_id });
            let rejected = Event::new(message.asset_id, *actual, AuditAction::Reject, evidence)
                .sweep_run(message.sweep_run_id)
                .message(record.message_id.as_deref())
                .write(&self.pool)
                .await;
            if let Err(write_error) = rejected {
                error!(error = %write_error, "could not record the rejection");
            }
            return false;
        }
        let written = mark(&self.pool, message, e, last).await;
        match written {
            Ok(marked) => marked,
            Err(write_error) => {
                error!(error = %write_error, final_receive = last, "could not record the failure on the asset");
                false
            }
        }
    }
}

/// Gives a claim back without counting an attempt: the asset stays due, and the next pass claims it under a
/// renewed schema verdict. Only while the message's claim is the row's. Any harmless DDL makes every settle
/// wait for the next pass; spending the message's receives on that would dead-letter healthy assets.
async fn postpone(pool: &PgPool, message: &CleanupMessage, e: &SettleError) -> Result<(), sqlx::Error> {
    assets::postpone(pool, message, &e.sentence()).await
}

/// The failure write: always the attempt and the error; on the last receive also state `failed` and an audit
/// row. Only for the row of the workspace the message names, and only while the message's claim is the row's:
/// a stale or duplicate message may not mark an asset a newer claim has settled.
async fn mark(pool: &PgPool, message: &CleanupMessage, e: &SettleError, last: bool) -> Result<bool, sqlx::Error> {
    fail::fail_point!("consumer::final_receive_write", last, |_| Err(sqlx::Error::Protocol(
        "injected failure of the final-receive write".into()
    )));
    let error = e.sentence();
    // The sweeper's own write: it does not move the grace floor, so a redriven asset is due at once.
    let mut tx = platform::db::begin_as_sweeper(pool).await?;
    let updated = assets::mark_failed(&mut tx, message, &error, last).await?;
    let marked = last && updated.is_some();
    if marked {
        let evidence = json!({ "error": error, "retryable": e.retryable(), "final_receive": true });
        Event::new(message.asset_id, message.workspace_id, AuditAction::Failed, evidence)
            .sweep_run(message.sweep_run_id)
            .asset_row(updated.as_ref())
            .write(&mut *tx)
            .await?;
        info!("final receive: asset marked failed before the message goes to the dead-letter queue");
    }
    tx.commit().await?;
    Ok(marked)
}

fn metrics_line(outcomes: &[(String, Item)], schema: &Schema, versioning: &Result<Versioning, BucketError>) -> String {
    let refused = matches!(schema, Schema::Refused(_) | Schema::Unreadable(_));
    let unprotected = !versioning.as_ref().is_ok_and(Versioning::keeps_removed_bytes);
    let by_fingerprint = matches!(schema, Schema::Valid(_, Matched::Fingerprint, _));
    let count = |f: &dyn Fn(&Item) -> bool| outcomes.iter().filter(|(_, item)| f(item)).count() as u64;
    let action = |a: AuditAction| move |item: &Item| matches!(item, Item::Settled(s, _) if s.action == a);
    let bytes_freed: u64 = outcomes
        .iter()
        .map(|(_, item)| match item {
            Item::Settled(s, _) => s.bytes_freed,
            Item::Postponed | Item::Failed { .. } => 0,
        })
        .sum();
    platform::metrics::emf_line(
        &[("Function", "consumer")],
        &[
            ("Kept", count(&action(AuditAction::Keep))),
            ("Retired", count(&action(AuditAction::Retire))),
            ("Deleted", count(&action(AuditAction::Delete))),
            ("Purged", count(&action(AuditAction::Purge))),
            ("Deferred", count(&action(AuditAction::Defer))),
            ("Unchanged", count(&action(AuditAction::Noop))),
            ("Postponed", count(&|i| matches!(i, Item::Postponed))),
            ("FailedItems", count(&|i| matches!(i, Item::Failed { .. }))),
            ("AssetsMarkedFailed", count(&|i| matches!(i, Item::Failed { marked_failed: true }))),
            ("BytesRestored", count(&|i| matches!(i, Item::Settled(_, Some(Presence::Restored { .. }))))),
            ("AssetsLost", count(&|i| matches!(i, Item::Settled(_, Some(Presence::Lost))))),
            ("ConsumerRefused", u64::from(refused)),
            // Deletes and purges of this batch wait: the bucket's versioning is not Enabled, or could not be read.
            ("BucketUnprotected", u64::from(unprotected)),
            ("SchemaFingerprintChecks", u64::from(by_fingerprint)),
            ("BytesFreed", bytes_freed),
        ],
        &[],
    )
}
