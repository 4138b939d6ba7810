//! The assets as the operator's commands show them: what is due and how fast it drains, what failed (`status`), one
//! asset's row (`explain`), the next claimable ones (`plan`). Reads only.

use platform::audit::AuditAction;

use crate::AssetState;
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

/// The due assets now.
#[derive(Debug, Clone)]
pub struct Backlog {
    /// Claimable now.
    pub due: i64,
    /// Seconds since the oldest of them became due.
    pub oldest_due_seconds: Option<f64>,
    /// Claimed, their lease running: in flight.
    pub leased: i64,
    /// The five workspaces with the most of them.
    pub largest: Vec<WorkspaceBacklog>,
}

/// One workspace's due assets.
#[derive(Debug, Clone, Serialize)]
pub struct WorkspaceBacklog {
    /// The workspace.
    pub workspace_id: Uuid,
    /// Claimable now.
    pub due: i64,
    /// Seconds since the oldest became due.
    pub oldest_due_seconds: f64,
}

/// What is due now, and what is in flight.
pub async fn backlog(conn: &mut PgConnection) -> Result<Backlog, sqlx::Error> {
    let now = sqlx::query!(
        r#"SELECT count(*) AS "due!", extract(epoch FROM now() - min(a.due_at))::float8 AS oldest_due FROM assets a
            WHERE asset_sweeper_claimable(a)"#
    )
    .fetch_one(&mut *conn)
    .await?;
    let largest = sqlx::query_as!(
        WorkspaceBacklog,
        r#"SELECT a.workspace_id, count(*) AS "due!",
                  extract(epoch FROM now() - min(a.due_at))::float8 AS "oldest_due_seconds!"
             FROM assets a WHERE asset_sweeper_claimable(a)
            GROUP BY a.workspace_id ORDER BY count(*) DESC, min(a.due_at) LIMIT 5"#
    )
    .fetch_all(&mut *conn)
    .await?;
    // A lease is taken on a due row and ended by whatever moves it on, so the leased rows are among the due ones:
    // read from their index, not by a scan of every asset.
    let leased = sqlx::query_scalar!(
        r#"SELECT count(*) AS "leased!" FROM assets a WHERE asset_sweeper_due(a) AND a.leased_until > now()"#
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(Backlog { due: now.due, oldest_due_seconds: now.oldest_due, leased, largest })
}

/// Settlements the consumers recorded in the last `seconds`: how fast the backlog drains.
pub async fn settled_within(conn: &mut PgConnection, seconds: f64) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "settled!" FROM settlement_events
            WHERE occurred_at > now() - make_interval(secs => $1) AND action = ANY ($2)"#,
        seconds,
        &[
            AuditAction::Keep,
            AuditAction::Retire,
            AuditAction::Delete,
            AuditAction::Purge,
            AuditAction::Defer,
            AuditAction::Noop
        ] as &[AuditAction],
    )
    .fetch_one(conn)
    .await
}

/// An asset whose settlement failed for good.
#[derive(Debug, Clone, Serialize)]
pub struct Failed {
    /// The asset.
    pub id: Uuid,
    /// Its workspace.
    pub workspace_id: Uuid,
    /// When, as the database prints it.
    pub failed_at: Option<String>,
    /// The last error.
    pub last_error: Option<String>,
}

/// How many assets failed, and the ten newest of them.
pub async fn failed(conn: &mut PgConnection) -> Result<(i64, Vec<Failed>), sqlx::Error> {
    let count = sqlx::query_scalar!(r#"SELECT count(*) AS "failed!" FROM assets WHERE state = 'failed'"#)
        .fetch_one(&mut *conn)
        .await?;
    let newest = sqlx::query_as!(
        Failed,
        "SELECT id, workspace_id, failed_at::text AS failed_at, last_error FROM assets WHERE state = 'failed'
          ORDER BY failed_at DESC NULLS LAST LIMIT 10"
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok((count, newest))
}

/// One asset's row as `explain` shows it, with the times the database computes.
#[derive(Debug, Clone)]
pub struct AssetRow {
    /// Its workspace.
    pub workspace_id: Uuid,
    /// Its stored object.
    pub storage_key: String,
    /// Its size.
    pub byte_size: i64,
    /// Its state.
    pub state: AssetState,
    /// When it is due, as the database prints it.
    pub due_at: Option<String>,
    /// Whether it is due now.
    pub due_now: bool,
    /// When its grace period ends, as the database prints it.
    pub grace_ends: String,
    /// Until when a claim holds it.
    pub leased_until: Option<String>,
    /// Deliveries its message failed.
    pub attempts: i32,
    /// The last error.
    pub last_error: Option<String>,
    /// When its purge is due.
    pub purge_after: Option<String>,
    /// Who keeps it by their word (a restore or undelete).
    pub kept_by: Option<String>,
    /// Since when.
    pub kept_since: Option<String>,
}

/// The row of `asset`, with its grace period's end at `grace`.
pub async fn asset(
    conn: &mut PgConnection,
    asset: Uuid,
    grace: std::time::Duration,
) -> Result<Option<AssetRow>, sqlx::Error> {
    sqlx::query_as!(
        AssetRow,
        r#"SELECT a.workspace_id, a.storage_key, a.byte_size, a.state AS "state: AssetState", a.due_at::text AS due_at,
                  asset_sweeper_due(a) AS "due_now!",
                  asset_sweeper_grace_ends(a, o, $2 * interval '1 second')::text AS "grace_ends!",
                  a.leased_until::text AS leased_until, a.attempts, a.last_error, a.purge_after::text AS purge_after,
                  a.kept_by, a.kept_since::text AS kept_since
             FROM assets a JOIN stored_objects o ON o.storage_key = a.storage_key WHERE a.id = $1"#,
        asset,
        grace.as_secs_f64(),
    )
    .fetch_optional(conn)
    .await
}

/// The next `limit` claimable assets, oldest due first, outside the workspaces `held`: what `plan` judges.
pub async fn claimable(conn: &mut PgConnection, held: &[Uuid], limit: i64) -> Result<Vec<(Uuid, Uuid)>, sqlx::Error> {
    let rows = sqlx::query!(
        "SELECT a.id, a.workspace_id FROM assets a
          WHERE asset_sweeper_claimable(a) AND a.workspace_id <> ALL ($1)
          ORDER BY a.due_at, a.id LIMIT $2",
        held,
        limit,
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.id, r.workspace_id)).collect())
}
