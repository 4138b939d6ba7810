//! The storage quota, as `asset_sweeper_usage` counts it: the one count the application's upload check
//! (`asset_sweeper_check_upload`) and the operator's `usage` both read.

use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

/// One workspace's usage against its quota.
#[derive(Debug, Clone, Serialize)]
pub struct Usage {
    /// The workspace.
    pub workspace_id: Uuid,
    /// Its quota in bytes; `None` when it has none (uploads are not limited).
    pub quota_bytes: Option<i64>,
    /// Bytes its records still hold (every stored byte while the schema check refuses).
    pub held_bytes: i64,
    /// Every byte its asset rows point at, each stored object once.
    pub stored_bytes: i64,
    /// Stored bytes only replaced or cleared (`released`, `retired`) rows point at: waiting for removal.
    pub waiting_bytes: i64,
    /// The largest upload the check lets through now; `None` without a quota.
    pub headroom_bytes: Option<i64>,
    /// Whether the newest schema check refused (or none has run), so that every stored byte counts as held.
    pub schema_refused: bool,
}

/// `workspace`'s usage.
pub async fn usage(conn: &mut PgConnection, workspace: Uuid) -> Result<Usage, sqlx::Error> {
    let u = sqlx::query!(
        r#"SELECT quota_bytes, held_bytes AS "held_bytes!", stored_bytes AS "stored_bytes!",
                  waiting_bytes AS "waiting_bytes!", headroom_bytes, schema_refused AS "schema_refused!"
             FROM asset_sweeper_usage($1)"#,
        workspace,
    )
    .fetch_one(conn)
    .await?;
    Ok(Usage {
        workspace_id: workspace,
        quota_bytes: u.quota_bytes,
        held_bytes: u.held_bytes,
        stored_bytes: u.stored_bytes,
        waiting_bytes: u.waiting_bytes,
        headroom_bytes: u.headroom_bytes,
        schema_refused: u.schema_refused,
    })
}

/// The workspaces with a quota, in id order.
pub async fn workspaces_with_quota(conn: &mut PgConnection) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar!("SELECT workspace_id FROM workspace_quotas ORDER BY workspace_id").fetch_all(conn).await
}

/// Folds the usage changes every asset write appended into the workspaces' totals; returns how many it folded.
/// Each sweep pass calls it, so the upload check reads a few rows, not a day of writes.
///
/// After the upgrade that added the retired figures, the fold recounts every workspace from the rows, once: a
/// statement that outgrows the session's limit on a large `assets` table, so that one fold runs without it.
pub async fn fold(conn: &mut PgConnection) -> Result<i64, sqlx::Error> {
    let recount = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM workspace_usage WHERE retired_bytes IS NULL) AS "recount!""#
    )
    .fetch_one(&mut *conn)
    .await?;
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    if recount {
        sqlx::raw_sql("SET LOCAL statement_timeout = 0").execute(&mut *tx).await?;
    }
    let folded = sqlx::query_scalar!(r#"SELECT asset_sweeper_fold_usage() AS "folded!""#).fetch_one(&mut *tx).await?;
    tx.commit().await?;
    Ok(folded)
}
