//! The audit trail (invariant 10): every decision about an asset, by a function or an operator, is one row of
//! `settlement_events`, written here and nowhere else, with the code version of the build that made it.

use serde_json::Value;
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::text_enum;
use crate::version::CODE_VERSION;
use crate::{AssetId, WorkspaceId};

text_enum! {
    /// What happened to an asset: the column `settlement_events.action`.
    pub enum AuditAction {
        /// A source still refers to it: back to `attached`.
        Keep = "keep",
        /// Released and unreferenced: hidden, bytes kept, restorable until its purge time.
        Retire = "retire",
        /// An abandoned upload: bytes (unless shared) and row removed.
        Delete = "delete",
        /// Retired past its purge time: bytes (unless shared) and row removed.
        Purge = "purge",
        /// Inside its grace period, abandon window or retention: looked at again later.
        Defer = "defer",
        /// Nothing to do: the row is gone, already settled, not due, failed, or the claim is stale.
        Noop = "noop",
        /// A message naming the wrong workspace, refused without touching the asset.
        Reject = "reject",
        /// Marked `failed` on the final permitted receive of its message.
        Failed = "failed",
        /// An operator brought a retired asset back.
        Restore = "restore",
        /// A kept asset's bytes were missing and were brought back from a kept version.
        Integrity = "integrity",
        /// A kept asset's bytes were missing and no version was kept.
        Lost = "lost",
        /// An operator reset a failed asset so it settles again.
        Redrive = "redrive",
        /// An operator brought a deleted or purged asset back.
        Undelete = "undelete",
        /// Nothing referred to it, though nobody had released it: discovery made it due.
        Discovered = "discovered",
        /// Bytes no row knew, older than the grace period, under an approved prefix: given a `pending` row.
        Adopted = "adopted",
    }
}

// The database's CHECK constraint on `settlement_events.action` is generated from `migrator::AUDIT_ACTIONS`: this
// fails the build when the two lists differ.
const _: () = {
    let (ours, theirs) = (AuditAction::ALL, migrator::AUDIT_ACTIONS);
    assert!(ours.len() == theirs.len(), "AuditAction and migrator::AUDIT_ACTIONS differ in length");
    let mut i = 0;
    while i < ours.len() {
        assert!(text_enum::same_text(ours[i].as_str(), theirs[i]), "AuditAction and migrator::AUDIT_ACTIONS differ");
        i += 1;
    }
};

/// One audit row. Build it with [`Event::new`] and the setters for what the action has.
#[derive(Debug, Clone)]
pub struct Event<'a> {
    asset_id: AssetId,
    workspace_id: WorkspaceId,
    action: AuditAction,
    evidence: Value,
    storage_key: Option<&'a str>,
    sweep_run_id: Option<Uuid>,
    message_id: Option<&'a str>,
    asset_row: Option<&'a Value>,
    bytes_freed: u64,
}

impl<'a> Event<'a> {
    /// `action` on `asset` of `workspace`, with the evidence it rested on.
    pub fn new(asset_id: AssetId, workspace_id: WorkspaceId, action: AuditAction, evidence: Value) -> Self {
        Event {
            asset_id,
            workspace_id,
            action,
            evidence,
            storage_key: None,
            sweep_run_id: None,
            message_id: None,
            asset_row: None,
            bytes_freed: 0,
        }
    }

    /// The object the asset's bytes are (or were) stored as.
    pub fn storage_key(mut self, key: &'a str) -> Self {
        self.storage_key = Some(key);
        self
    }

    /// The sweep pass whose message led to it.
    pub fn sweep_run(mut self, run: Uuid) -> Self {
        self.sweep_run_id = Some(run);
        self
    }

    /// The SQS message that led to it.
    pub fn message(mut self, message_id: Option<&'a str>) -> Self {
        self.message_id = message_id;
        self
    }

    /// The asset row as it was when the decision was made (what `undelete` rebuilds a row from).
    pub fn asset_row(mut self, row: Option<&'a Value>) -> Self {
        self.asset_row = row;
        self
    }

    /// Bytes the action freed in the bucket.
    pub fn bytes_freed(mut self, bytes: u64) -> Self {
        self.bytes_freed = bytes;
        self
    }

    /// Writes the row, in the caller's transaction when it passes one.
    pub async fn write(&self, executor: impl PgExecutor<'_>) -> Result<(), sqlx::Error> {
        write_all(executor, std::slice::from_ref(self)).await
    }
}

/// Writes `events` in one statement, in the caller's transaction: decisions made about many assets at once (what
/// discovery schedules in one batch) are recorded as one insert, not one round trip each.
pub async fn write_all(executor: impl PgExecutor<'_>, events: &[Event<'_>]) -> Result<(), sqlx::Error> {
    if events.is_empty() {
        return Ok(());
    }
    let column = |f: fn(&Event<'_>) -> Uuid| events.iter().map(f).collect::<Vec<_>>();
    let (asset_ids, workspace_ids) = (column(|e| e.asset_id.0), column(|e| e.workspace_id.0));
    let storage_keys: Vec<Option<&str>> = events.iter().map(|e| e.storage_key).collect();
    let actions: Vec<&str> = events.iter().map(|e| e.action.as_str()).collect();
    let runs: Vec<Option<Uuid>> = events.iter().map(|e| e.sweep_run_id).collect();
    let messages: Vec<Option<&str>> = events.iter().map(|e| e.message_id).collect();
    let rows: Vec<Option<Value>> = events.iter().map(|e| e.asset_row.cloned()).collect();
    let evidence: Vec<Value> = events.iter().map(|e| e.evidence.clone()).collect();
    let bytes: Vec<i64> = events.iter().map(|e| i64::try_from(e.bytes_freed).unwrap_or(i64::MAX)).collect();
    sqlx::query!(
        "INSERT INTO settlement_events
             (asset_id, workspace_id, storage_key, action, sweep_run_id, message_id, asset_row, evidence,
              bytes_freed, code_version)
         SELECT e.*, $10 FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::uuid[], $6::text[],
                                     $7::jsonb[], $8::jsonb[], $9::bigint[]) AS e",
        &asset_ids,
        &workspace_ids,
        &storage_keys as &[Option<&str>],
        &actions as &[&str],
        &runs as &[Option<Uuid>],
        &messages as &[Option<&str>],
        &rows as &[Option<Value>],
        &evidence,
        &bytes,
        CODE_VERSION,
    )
    .execute(executor)
    .await?;
    Ok(())
}

/// One recorded decision about an asset, as `explain` shows its history.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// When, as the database prints it.
    pub occurred_at: String,
    /// When.
    pub at: chrono::DateTime<chrono::Utc>,
    /// What was done.
    pub action: AuditAction,
    /// The pass that sent it, if one did.
    pub sweep_run_id: Option<Uuid>,
    /// The message it came in, if it did.
    pub message_id: Option<String>,
    /// Why, as the decision recorded it.
    pub evidence: Value,
    /// Bytes a delete or purge freed.
    pub bytes_freed: i64,
    /// The build that decided.
    pub code_version: String,
}

/// Every decision recorded about `asset`, oldest first.
pub async fn history(executor: impl PgExecutor<'_>, asset: Uuid) -> Result<Vec<Recorded>, sqlx::Error> {
    sqlx::query_as!(
        Recorded,
        r#"SELECT occurred_at::text AS "occurred_at!", occurred_at AS at, action AS "action: AuditAction", sweep_run_id, message_id,
                  evidence, bytes_freed, code_version
             FROM settlement_events WHERE asset_id = $1 ORDER BY occurred_at, id"#,
        asset,
    )
    .fetch_all(executor)
    .await
}

/// The newest delete or purge on record: what `undelete` brings back.
#[derive(Debug, Clone)]
pub struct Removal {
    /// Its audit row.
    pub event_id: i64,
    /// The asset.
    pub asset_id: Uuid,
    /// Delete or purge.
    pub action: AuditAction,
    /// When, as the database prints it.
    pub occurred_at: String,
    /// The asset's row as it was removed.
    pub asset_row: Option<Value>,
}

/// The newest delete or purge of the asset `id`, or else (no id given) of the asset stored at `key`.
pub async fn last_removal(
    executor: impl PgExecutor<'_>,
    id: Option<Uuid>,
    key: &str,
) -> Result<Option<Removal>, sqlx::Error> {
    sqlx::query_as!(
        Removal,
        r#"SELECT id AS event_id, asset_id, action AS "action: AuditAction", occurred_at::text AS "occurred_at!",
                  asset_row
             FROM settlement_events
            WHERE action = ANY ($3) AND (asset_id = $1 OR ($1 IS NULL AND storage_key = $2))
            ORDER BY id DESC LIMIT 1"#,
        id,
        key,
        &[AuditAction::Delete, AuditAction::Purge] as &[AuditAction],
    )
    .fetch_optional(executor)
    .await
}

/// Each asset the pass `run` recorded one of `actions` for, once, in the order the pass acted.
pub async fn assets_of_run(
    executor: impl PgExecutor<'_>,
    run: Uuid,
    actions: &[AuditAction],
) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT asset_id AS "asset_id!" FROM (
               SELECT asset_id, min(id) AS first FROM settlement_events
                WHERE sweep_run_id = $1 AND action = ANY ($2)
                GROUP BY asset_id
           ) acted
           ORDER BY first"#,
        run,
        actions as &[AuditAction],
    )
    .fetch_all(executor)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_reads_back_as_itself() {
        for action in AuditAction::ALL {
            assert_eq!(action.as_str().parse::<AuditAction>(), Ok(*action));
        }
        let unknown = "obliterate".parse::<AuditAction>().expect_err("not an action");
        assert_eq!(unknown.to_string(), "\"obliterate\" is not a known AuditAction");
    }
}
