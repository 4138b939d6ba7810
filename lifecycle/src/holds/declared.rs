//! What people declare to keep things as they are: a window in which nothing is deleted or purged (`hold`), and a
//! pin on an asset, a workspace or a key prefix for a reference the database cannot show. The one writer of
//! `destruction_holds` and `asset_pins` beside the functions the application calls (`lifecycle/sql/lifecycle.sql`):
//! the CLI presents what these answer.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

use super::{Pin, PinRow};

/// Why a window or a pin was not recorded, in words for the person who asked.
#[derive(Debug, thiserror::Error)]
pub enum DeclareError {
    /// The database's own check refused it (a window's reason, or its end).
    #[error("{0}")]
    Refused(String),
    /// A pin without a reason.
    #[error("a pin needs a reason: the reference the database cannot show")]
    NoReason,
    /// A prefix of no characters, which would pin every key.
    #[error("--prefix is empty: that would pin every key; pin a workspace or a longer prefix")]
    EmptyPrefix,
    /// A pin past a year.
    #[error("a pin ends within a year: pin again before it ends")]
    TooLong,
    /// The database could not be asked.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// A window declared and still open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Declared {
    /// Its row in `destruction_holds`.
    pub id: i64,
    /// Why: the migration, and who to ask about it.
    pub reason: String,
    /// The login that declared it.
    pub declared_by: String,
    /// When it was declared.
    pub declared_at: DateTime<Utc>,
    /// When it ends by itself.
    pub ends_at: DateTime<Utc>,
}

/// Declares a window of `lasting` from now: nothing is deleted or purged, in any workspace, until it ends or is
/// released. Through the function the application calls too, so its checks (a reason, at most a week) are one.
pub async fn declare(conn: &mut PgConnection, lasting: chrono::Duration, reason: &str) -> Result<i64, DeclareError> {
    sqlx::query_scalar!(r#"SELECT asset_sweeper_hold(now() + $1, $2) AS "id!""#, lasting as _, reason.trim())
        .fetch_one(conn)
        .await
        .map_err(refused)
}

/// The windows open now, the one ending last first.
pub async fn declared(conn: &mut PgConnection) -> Result<Vec<Declared>, sqlx::Error> {
    sqlx::query_as!(
        Declared,
        r#"SELECT id AS "id!", reason AS "reason!", declared_by AS "declared_by!", declared_at AS "declared_at!",
                  ends_at AS "ends_at!"
             FROM destruction_holds WHERE released_at IS NULL AND ends_at > now() ORDER BY ends_at DESC"#
    )
    .fetch_all(conn)
    .await
}

/// Ends the open window `id` now, whoever declared it (an operator's release; the application's roles release
/// only their own, through `asset_sweeper_release_hold`). False when it was not open.
pub async fn release(conn: &mut PgConnection, id: i64) -> Result<bool, sqlx::Error> {
    let released = sqlx::query_scalar!(
        r#"UPDATE destruction_holds SET released_by = session_user, released_at = now()
            WHERE id = $1 AND released_at IS NULL AND ends_at > now()
           RETURNING true AS "released!""#,
        id
    )
    .fetch_optional(conn)
    .await?;
    Ok(released.is_some())
}

/// What a pin keeps: one asset, every asset of a workspace (and its keys no row knows), or every key that begins
/// with a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pinned {
    /// One asset, by id.
    Asset(Uuid),
    /// Every asset of a workspace, and its keys no row knows.
    Workspace(Uuid),
    /// Every key that begins with this.
    Prefix(String),
}

/// Pins `pinned` for `lasting` from now (at most a year), for `reason`: the pin as it stands.
pub async fn add_pin(
    conn: &mut PgConnection,
    pinned: Pinned,
    lasting: chrono::Duration,
    reason: &str,
) -> Result<Pin, DeclareError> {
    let reason = reason.trim();
    if reason.is_empty() {
        return Err(DeclareError::NoReason);
    }
    if lasting > chrono::Duration::days(366) {
        return Err(DeclareError::TooLong);
    }
    let (asset, workspace, prefix) = match pinned {
        Pinned::Asset(asset) => (Some(asset), None, None),
        Pinned::Workspace(workspace) => (None, Some(workspace), None),
        Pinned::Prefix(prefix) if prefix.is_empty() => return Err(DeclareError::EmptyPrefix),
        Pinned::Prefix(prefix) => (None, None, Some(prefix)),
    };
    let row = sqlx::query_as!(
        PinRow,
        r#"INSERT INTO asset_pins (asset_id, workspace_id, key_prefix, reason, ends_at)
           VALUES ($1, $2, $3, $4, now() + $5)
           RETURNING id AS "id!", asset_id, workspace_id, key_prefix, reason AS "reason!", pinned_by AS "pinned_by!",
                     ends_at AS "ends_at!""#,
        asset,
        workspace,
        prefix,
        reason,
        lasting as _,
    )
    .fetch_one(conn)
    .await?;
    Ok(Pin::of(row))
}

/// The pins in force, ending soonest first.
pub async fn pins(conn: &mut PgConnection) -> Result<Vec<Pin>, sqlx::Error> {
    let rows = sqlx::query_as!(
        PinRow,
        r#"SELECT id AS "id!", asset_id, workspace_id, key_prefix, reason AS "reason!", pinned_by AS "pinned_by!",
                  ends_at AS "ends_at!"
             FROM asset_pins WHERE released_at IS NULL AND ends_at > now() ORDER BY ends_at, id"#
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(Pin::of).collect())
}

/// Ends the pin `id` now. False when it was not in force.
pub async fn unpin(conn: &mut PgConnection, id: i64) -> Result<bool, sqlx::Error> {
    let released = sqlx::query_scalar!(
        r#"UPDATE asset_pins SET released_by = session_user, released_at = now()
            WHERE id = $1 AND released_at IS NULL AND ends_at > now()
           RETURNING true AS "released!""#,
        id
    )
    .fetch_optional(conn)
    .await?;
    Ok(released.is_some())
}

/// The function's own refusal (a missing reason, a window past a week) as the line to print.
fn refused(e: sqlx::Error) -> DeclareError {
    match e.as_database_error() {
        Some(db) => DeclareError::Refused(db.message().trim_start_matches("asset-sweeper: ").to_owned()),
        None => DeclareError::Database(e),
    }
}
