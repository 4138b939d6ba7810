//! Settling one asset: one transaction, in the order docs/design.md ("One asset's transaction") sets out. The
//! message only names the asset; everything decided comes from the locked rows and the recheck.

use std::sync::Arc;
use std::time::Duration;

use platform::audit::{AuditAction, Event};
use platform::bucket::{self, BucketError, Versioning};
use platform::objects::{self, StorageError};
use platform::{AssetId, WorkspaceId};
use schema::ReferenceMap;
use schema::verdict::VerdictError;
use serde_json::{Value, json};
use sqlx::{PgConnection, PgPool};
use tracing::{error, info, warn};

use crate::assets::{self, Until};
use crate::holds::Hold;
use crate::judgement::{self, Claimed, Judged, Judgement, Terms};
use crate::message::CleanupMessage;
use crate::reads::Seen;
use crate::rules::{self, AssetState, Decision, Deferral, Facts};

/// The result of one settle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// What was done, as the audit row records it: keep, retire, delete, purge, defer or noop.
    pub action: AuditAction,
    /// The bytes a delete or purge removed from the bucket.
    pub bytes_freed: u64,
    /// For a keep: the storage key whose bytes must be checked after commit.
    pub verify_bytes: Option<String>,
    /// For a removal in a versioned bucket: the delete marker, to take back if the transaction fails.
    pub marker: Option<String>,
}

impl Settled {
    fn plain(action: AuditAction) -> Self {
        Settled { action, bytes_freed: 0, verify_bytes: None, marker: None }
    }
}

/// Why a settle failed. Nothing was changed: the transaction rolled back.
#[derive(Debug, thiserror::Error)]
pub enum SettleError {
    /// The message is not one this version reads.
    #[error("message {message_id}: {source}")]
    Malformed {
        /// The SQS message.
        message_id: String,
        /// What is wrong with it.
        #[source]
        source: crate::message::MessageError,
    },
    #[error(
        "message {message_id} names workspace {claimed} for asset {asset_id}, which belongs to workspace {actual}: rejected, nothing touched"
    )]
    /// The message names another workspace than the asset's (invariant 7).
    WrongWorkspace {
        /// The SQS message.
        message_id: String,
        /// The asset it names.
        asset_id: AssetId,
        /// The workspace it names.
        claimed: WorkspaceId,
        /// The asset's own.
        actual: WorkspaceId,
    },
    /// The schema verdict does not allow settling now.
    #[error(transparent)]
    Schema(#[from] VerdictError),
    /// The schema verdict could not be read.
    #[error("the schema verdict could not be read: {0}")]
    SchemaUnreadable(#[source] Arc<sqlx::Error>),
    /// The database failed.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// The bucket failed.
    #[error("bucket: {0}")]
    Storage(#[from] StorageError),
    /// The settle panicked (caught by the consumer).
    #[error("the settle panicked: {0}")]
    Panicked(String),
    /// A fault a test injected.
    #[error("injected fault: {0}")]
    Injected(String),
}

impl SettleError {
    /// Whether a later delivery may succeed without a person: transient database and bucket failures, and a
    /// schema verdict that the next pass renews. The final receive records which it was.
    pub fn retryable(&self) -> bool {
        match self {
            SettleError::Database(e) => platform::db::is_transient(e),
            SettleError::SchemaUnreadable(e) => platform::db::is_transient(e),
            SettleError::Storage(e) => e.retryable(),
            SettleError::Schema(e) => e.retryable(),
            SettleError::Malformed { .. }
            | SettleError::WrongWorkspace { .. }
            | SettleError::Panicked(_)
            | SettleError::Injected(_) => false,
        }
    }

    /// The sentence kept in `last_error` and the `failed` event: what failed and whether it may pass. The
    /// detail behind it (an SDK's error chain) is in the log line of the failure.
    pub fn sentence(&self) -> String {
        let kind = if self.retryable() { "retryable" } else { "needs a person" };
        format!("{self} [{kind}]")
    }
}

/// What the settle is told besides the message.
pub struct Context<'a> {
    /// The database.
    pub pool: &'a PgPool,
    /// The bucket's client.
    pub s3: &'a aws_sdk_s3::Client,
    /// The asset bucket.
    pub bucket: &'a str,
    /// The asset bucket's versioning, read once for the batch: deletes and purges wait unless it is `Enabled`.
    pub versioning: &'a Result<Versioning, BucketError>,
    /// The reference map the verdict validated.
    pub map: &'a ReferenceMap,
    /// That verdict's row: what each settle confirms the catalog against before it destroys (invariant 20).
    pub verdict: i64,
    /// The grace period (invariant 3).
    pub grace: Duration,
    /// How long a retired asset stays restorable.
    pub retention: Duration,
    /// Deletes and purges wait this long after the schema last changed.
    pub quiet: Duration,
    /// When an unattached upload is abandoned.
    pub abandon_after: Duration,
    /// The timeout of the one S3 call made under the row locks.
    pub s3_timeout: Duration,
    /// The SQS message being settled.
    pub message_id: &'a str,
}

/// Settles the asset `message` names, in one transaction.
pub async fn settle(cx: &Context<'_>, message: &CleanupMessage) -> Result<Settled, SettleError> {
    // The sweeper's own write: it does not move the grace floor.
    let mut tx = platform::db::begin_as_sweeper(cx.pool).await?;
    let asset = message.asset_id;
    injected_panic(asset);

    let claim = Claimed { workspace_id: message.workspace_id, token: message.claim_token };
    let undoable = cx.versioning.as_ref().is_ok_and(Versioning::keeps_removed_bytes);
    let terms = Terms { grace: cx.grace, abandon_after: cx.abandon_after, undoable, quiet: cx.quiet };
    let judgement = match judgement::judge(&mut tx, cx.map, asset, terms, Some(claim)).await? {
        Judged::Judged(judgement) => *judgement,
        // Removed by an earlier settle of the same asset (a duplicate or redelivered message): done.
        Judged::Gone => return Ok(Settled::plain(AuditAction::Noop)),
        Judged::WrongWorkspace(actual) => {
            return Err(SettleError::WrongWorkspace {
                message_id: cx.message_id.to_owned(),
                asset_id: asset,
                claimed: message.workspace_id,
                actual,
            });
        }
        Judged::NotClaimed(row) => {
            // Already settled (the settle cleared the lease), re-claimed under a newer message, no longer due, or
            // waiting for an operator: this message changes nothing.
            info!(state = %row.state, due = row.due, "nothing to settle");
            return Ok(Settled::plain(AuditAction::Noop));
        }
    };
    let Judgement { facts: row, found, decision, hold, sharers, seen } = judgement;
    // The recheck read the sources under this map; a change of the catalog since the verdict (committed while this
    // settle waited for the asset's row, say) could have moved a reference where the map does not look.
    let decision = match decision {
        Decision::Retire | Decision::Delete | Decision::Purge if !schema_confirmed(&mut tx, cx.verdict).await? => {
            warn!(verdict = cx.verdict, "the schema changed during the settle: holding the asset");
            Decision::Defer(Deferral::SchemaChanged)
        }
        decision => decision,
    };
    let mut evidence = json!({
        "sources_checked": found.answers,
        "state": row.state,
        "message_id": cx.message_id,
    });
    if let Some(keeping) = found.keeping() {
        evidence["referenced_by"] = json!(keeping.source);
        evidence["record"] = json!(keeping.record);
    }
    match &seen {
        Some(Seen::Read(read)) => {
            evidence["read"] = json!(read);
            evidence["because"] = json!(read.describe());
        }
        Some(Seen::Uncovered(uncovered)) => {
            evidence["logs"] = json!(uncovered);
            evidence["because"] = json!(uncovered.describe());
        }
        None => {}
    }
    let decided = match decision {
        Decision::Keep => {
            assets::keep(&mut tx, asset).await?;
            Settled { verify_bytes: Some(row.storage_key.clone()), ..Settled::plain(decision.action()) }
        }
        Decision::Defer(why) => {
            evidence["deferred"] = match why {
                Deferral::Grace => json!({ "why": why.as_str(), "until": row.grace_ends }),
                _ => json!({ "why": why.as_str() }),
            };
            match (why, &hold) {
                (Deferral::Census, _) => evidence["deferred"]["unproven"] = json!(cx.map.unproven),
                (Deferral::Named, Some(Hold::Named(column))) => evidence["deferred"]["named_by"] = json!(column),
                (Deferral::KeyScan, Some(Hold::Unscanned(columns))) => {
                    evidence["deferred"]["unscanned"] = json!(columns);
                }
                (Deferral::Found, Some(Hold::Found { column, record })) => {
                    evidence["deferred"]["found_in"] = json!(column);
                    evidence["deferred"]["record"] = json!({ "ctid": record });
                }
                (Deferral::Window, Some(Hold::Window(window))) => {
                    evidence["deferred"]["window"] = json!(window);
                    evidence["deferred"]["because"] = json!(window.describe());
                }
                (Deferral::Pinned, Some(Hold::Pinned(pin))) => {
                    evidence["deferred"]["pin"] = json!(pin);
                    evidence["deferred"]["because"] = json!(pin.describe());
                }
                (Deferral::Bucket, _) => {
                    evidence["deferred"]["bucket"] = json!(cx.bucket);
                    evidence["deferred"]["versioning"] = json!(cx.versioning.as_ref().ok());
                    evidence["deferred"]["because"] = json!(bucket::destruction_held(cx.bucket, cx.versioning));
                }
                _ => {}
            }
            let until = match why {
                Deferral::Grace => Until::GraceEnd(cx.grace),
                Deferral::AbandonWindow => Until::AfterCreation(cx.abandon_after),
                Deferral::Retention => Until::PurgeTime,
                Deferral::Census | Deferral::KeyScan | Deferral::Trial => Until::Later(rules::CENSUS_HOLD),
                Deferral::Named | Deferral::Found => Until::Later(rules::NAMED_HOLD),
                Deferral::Bucket => Until::Later(rules::BUCKET_HOLD),
                Deferral::SchemaChanged => Until::Later(rules::SCHEMA_HOLD),
                Deferral::Logs => Until::Later(rules::LOGS_HOLD),
                // Looked at again once the grace after the read ends (a newer read defers it again).
                // Looked at again when the window, the pin or the grace after the read ends (a minute at least: a
                // released window is seen sooner by none, and the sweep's next pass claims it then).
                Deferral::Window | Deferral::Pinned | Deferral::Read => {
                    let ends = match (why, &hold, &seen) {
                        (Deferral::Read, _, Some(Seen::Read(read))) => {
                            Some(read.at + chrono::Duration::from_std(cx.grace).unwrap_or_default())
                        }
                        (_, Some(Hold::Window(window)), _) => Some(window.ends_at()),
                        (_, Some(Hold::Pinned(pin)), _) => Some(pin.ends_at),
                        _ => None,
                    };
                    let left = ends.and_then(|ends| (ends - chrono::Utc::now()).to_std().ok());
                    Until::Later(left.unwrap_or_default().max(rules::WINDOW_RECHECK))
                }
            };
            assets::defer(&mut tx, asset, until).await?;
            Settled::plain(decision.action())
        }
        Decision::Delete | Decision::Purge => {
            let sharers = sharers.unwrap_or_default();
            remove(cx, &mut tx, asset, &row, decision, sharers, &mut evidence).await?
        }
        Decision::Retire => {
            // An abandoned upload is retired for its trial alone: nobody attached it, so nobody restores it.
            let abandoned = row.state == AssetState::Pending && !row.adopted;
            let retention = if abandoned { Duration::ZERO } else { cx.retention };
            assets::retire(&mut tx, asset, retention).await?;
            Settled::plain(decision.action())
        }
    };

    if let Err(e) = record(&mut tx, message, &row, decided.action, decided.bytes_freed, evidence).await {
        // Nothing committed: the transaction is rolled back when dropped, so the rows are certainly still there.
        drop(tx);
        if let Some(marker) = &decided.marker {
            undo_removal(cx, &row.storage_key, marker).await;
        }
        return Err(e.into());
    }
    // The transaction's id, for telling afterwards whether a COMMIT that answered with an error did commit.
    let xid: Option<String> = match &decided.marker {
        Some(_) => sqlx::query_scalar!(r#"SELECT pg_current_xact_id()::text AS "xid!""#).fetch_one(&mut *tx).await.ok(),
        None => None,
    };
    let committed = tx.commit().await;
    let committed = if committed.is_ok() && commit_answer_lost(asset) {
        Err(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "injected: the commit's answer was lost",
        )))
    } else {
        committed
    };
    if let Err(e) = committed {
        if let Some(marker) = &decided.marker {
            if matches!(e, sqlx::Error::Database(_)) {
                // The server answered the COMMIT with an error: it rolled back.
                undo_removal(cx, &row.storage_key, marker).await;
            } else {
                undo_if_uncommitted(cx, xid.as_deref(), &row.storage_key, marker).await;
            }
        }
        return Err(e.into());
    }
    info!(action = %decided.action, bytes_freed = decided.bytes_freed, "settled");
    Ok(decided)
}

/// Whether the catalog this settle commits under is the one verdict `verdict` was made on (invariant 20), as the
/// invocation's own verification asks it: with the change detector, its generation read under a lock every DDL
/// command must wait for until this transaction ends (`asset_sweeper_hold_schema`, which holds the asset rather
/// than wait when a command is in flight); where the generation moved (DDL that cannot matter, a view say) or
/// there is no detector, the whole catalog fingerprint, read in a statement of its own after the lock (so it sees
/// every change committed before it, and none can commit after). The detector's own state and the verdict role's
/// rights are verified once per invocation (changing either needs a superuser or a role's admin, and no DDL).
async fn schema_confirmed(conn: &mut PgConnection, verdict: i64) -> Result<bool, sqlx::Error> {
    let held = sqlx::query!(
        r#"SELECT v.generation, v.detector IS NOT NULL AS "detector!",
                  CASE WHEN v.detector IS NOT NULL THEN asset_sweeper_hold_schema() END AS now
             FROM schema_verdicts v WHERE v.id = $1"#,
        verdict,
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(held) = held else { return Ok(false) };
    if held.detector {
        match held.now {
            // A DDL command in flight: hold the asset rather than wait beside it.
            None => return Ok(false),
            Some(now) if now == held.generation => return Ok(true),
            Some(_) => {}
        }
    }
    let unchanged = sqlx::query_scalar!(
        r#"SELECT v.fingerprint = asset_sweeper_catalog_fingerprint() AS "unchanged!"
             FROM schema_verdicts v WHERE v.id = $1"#,
        verdict,
    )
    .fetch_one(conn)
    .await?;
    Ok(unchanged)
}

/// A `COMMIT` whose answer was lost is ambiguous: the server may have committed. Undoing a removal that did
/// commit would leave bytes no row knows, so the transaction's fate is asked on a fresh connection
/// (`pg_xact_status`, waiting while it is still in progress), and the removal is taken back only if it aborted.
/// When that cannot be told, the removal stands: a row whose bytes are gone is what a crash leaves too, and the
/// next settle finishes it (invariant 5).
async fn undo_if_uncommitted(cx: &Context<'_>, xid: Option<&str>, key: &str, marker: &str) {
    let Some(xid) = xid else {
        error!(key, "cannot tell whether the commit happened (no transaction id): the removal stands");
        return;
    };
    for _ in 0..50 {
        let status = sqlx::query_scalar!("SELECT pg_xact_status($1::xid8)", xid as &str).fetch_one(cx.pool).await;
        match status.as_ref().map(Option::as_deref) {
            Ok(Some("aborted")) => return undo_removal(cx, key, marker).await,
            Ok(Some("committed")) => {
                warn!(key, "the commit reported an error but did commit: the removal stands");
                return;
            }
            Ok(Some("in progress")) => tokio::time::sleep(Duration::from_millis(100)).await,
            _ => break,
        }
    }
    error!(
        key,
        "cannot tell whether the commit happened: the removal stands (the next settle finishes a row left behind)"
    );
}

/// Failpoint `consumer::commit_answer_lost`: the commit of a settle of an asset named in the failpoint's argument
/// happens, and its answer never arrives. Scoped to those assets, so tests beside it are untouched.
#[cfg_attr(not(feature = "failpoints"), allow(unused_variables))]
fn commit_answer_lost(asset: AssetId) -> bool {
    fail::fail_point!("consumer::commit_answer_lost", |ids: Option<String>| ids
        .is_some_and(|ids| ids.contains(&asset.to_string())));
    false
}

/// Failpoint `consumer::panic`: a panic while settling any asset whose id is in the failpoint's argument.
#[cfg_attr(not(feature = "failpoints"), allow(unused_variables))]
fn injected_panic(asset: AssetId) {
    fail::fail_point!("consumer::panic", |ids: Option<String>| {
        if ids.is_some_and(|ids| ids.contains(&asset.to_string())) {
            panic!("injected panic while settling {asset}");
        }
    });
}

/// Delete or purge: the bytes go first, inside the transaction, while both rows are locked (invariant 5), and
/// only when no other asset row shares them (invariant 2); then the rows.
async fn remove(
    cx: &Context<'_>,
    conn: &mut PgConnection,
    asset: AssetId,
    row: &Facts,
    decision: Decision,
    sharers: i64,
    evidence: &mut Value,
) -> Result<Settled, SettleError> {
    let action = decision.action();
    evidence["sharers"] = json!(sharers);
    if sharers > 0 {
        warn!(sharers, "bytes shared with other assets: removing the row only");
        assets::remove(&mut *conn, asset).await?;
        return Ok(Settled::plain(action));
    }
    if objects::injected("consumer::before_bytes_removed", &row.storage_key) {
        return Err(SettleError::Injected("crash before the bytes were removed".into()));
    }
    let marker = objects::remove(cx.s3, cx.bucket, &row.storage_key, cx.s3_timeout).await?;
    // A crash here (the process gone) leaves the rows, whose bytes are gone: the next delivery finishes. (A test's
    // `sleep` here pauses every settle of the process that removes bytes; a `return` fails the keys it names.)
    if objects::injected("consumer::after_bytes_removed", &row.storage_key) {
        return Err(SettleError::Injected("crash after the bytes were removed, before commit".into()));
    }
    let rows = assets::remove_with_object(&mut *conn, asset, &row.storage_key).await;
    if let Err(e) = rows {
        // Not a crash: this process can still take the removal back.
        if let Some(marker) = &marker {
            undo_removal(cx, &row.storage_key, marker).await;
        }
        return Err(e.into());
    }
    Ok(Settled { bytes_freed: u64::try_from(row.byte_size).unwrap_or(0), marker, ..Settled::plain(action) })
}

/// `marker` is the delete marker the removal left: the bytes under it are copied back.
async fn undo_removal(cx: &Context<'_>, key: &str, marker: &str) {
    match objects::undo_remove(cx.s3, cx.bucket, key).await {
        Ok(()) => warn!(key, marker, "settle failed after removing the bytes: removal taken back"),
        Err(e) => error!(key, error = %e, "settle failed after removing the bytes and could not take it back"),
    }
}

/// The audit row of a decision, with the asset row as it was decided on.
async fn record(
    conn: &mut PgConnection,
    message: &CleanupMessage,
    row: &Facts,
    action: AuditAction,
    bytes_freed: u64,
    evidence: Value,
) -> Result<(), sqlx::Error> {
    let message_id = evidence.get("message_id").and_then(Value::as_str).map(str::to_owned);
    Event::new(message.asset_id, WorkspaceId(row.workspace_id), action, evidence)
        .storage_key(&row.storage_key)
        .sweep_run(message.sweep_run_id)
        .message(message_id.as_deref())
        .asset_row(Some(&row.row_json))
        .bytes_freed(bytes_freed)
        .write(conn)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use platform::aws::AwsFailure;

    #[test]
    fn the_recorded_sentence_says_what_failed_and_whether_it_passes() {
        let timeout = SettleError::Storage(StorageError::Call(AwsFailure::timed_out("DeleteObject ws/1.png")));
        assert_eq!(
            timeout.sentence(),
            "bucket: DeleteObject ws/1.png failed: no answer in time (retryable) [retryable]"
        );
        let changed = SettleError::Schema(VerdictError::Changed { checked_at: "2026-12-01 10:00".into() });
        assert!(changed.sentence().ends_with("[retryable]"));
        let panicked = SettleError::Panicked("index out of bounds".into());
        assert_eq!(panicked.sentence(), "the settle panicked: index out of bounds [needs a person]");
    }
}
