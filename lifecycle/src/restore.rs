//! Restoring a retired asset (invariant 8): back to `attached` with its bytes intact, until its purge time.
//! The operator CLI calls this.

use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::assets;
use crate::rules::AssetState;
use platform::audit::{AuditAction, Event};
use platform::objects::{self, Found, Presence, StorageError};
use platform::{AssetId, WorkspaceId};

/// Why an asset could not be restored. Nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// No such asset row.
    #[error("asset {0} does not exist (purged or never created)")]
    NotFound(AssetId),
    /// Not retired.
    #[error("asset {asset} is {state}, not retired: only a retired asset can be restored")]
    NotRetired {
        /// The asset.
        asset: AssetId,
        /// Its state.
        state: AssetState,
    },
    /// Its purge time has passed.
    #[error("asset {asset} was due to be purged at {purge_after}: too late to restore")]
    PurgeTimePassed {
        /// The asset.
        asset: AssetId,
        /// Its purge time.
        purge_after: String,
    },
    /// No version of its bytes is kept.
    #[error("asset {asset}'s bytes ({key}) are missing and the bucket keeps no earlier version")]
    BytesMissing {
        /// The asset.
        asset: AssetId,
        /// Its object's key.
        key: String,
    },
    /// The bucket could not be read or written.
    #[error("bucket: {0}")]
    Storage(#[from] StorageError),
    /// The database failed.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
}

struct Retired {
    workspace_id: WorkspaceId,
    storage_key: String,
    state: AssetState,
    purge_after: Option<String>,
    restorable: bool,
}

/// Who asks for a restore, and what for: recorded in the audit row.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// Who asked.
    pub by: &'a str,
    /// The sweep pass being undone, when this restore is one asset of `restore --run`.
    pub undoing_run: Option<Uuid>,
    /// Check everything and change nothing: the bytes are looked at, not brought back.
    pub dry_run: bool,
}

/// What a restore did, or in a dry run would do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// The asset's object.
    pub storage_key: String,
    /// When the bytes were hidden: the kept version copied back (or, in a dry run, that would be).
    pub bytes_from_version: Option<String>,
}

/// Returns retired `asset` to `attached`, checking (and if need be restoring from a kept version) its bytes
/// first. `by` names who asked, for the audit record.
pub async fn restore(
    pool: &PgPool,
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    asset: AssetId,
    by: &str,
) -> Result<(), RestoreError> {
    let request = Request { by, undoing_run: None, dry_run: false };
    restore_for(pool, s3, bucket, asset, request).await.map(|_| ())
}

/// [`restore`], as `request` says: on behalf of an undo of a whole pass, or as a dry run.
pub async fn restore_for(
    pool: &PgPool,
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    asset: AssetId,
    request: Request<'_>,
) -> Result<Restored, RestoreError> {
    let mut tx = platform::db::begin_as_sweeper(pool).await?;
    // Locked for the whole restore, so a purge of the same asset waits and then finds it attached.
    let row = sqlx::query_as!(
        Retired,
        r#"SELECT workspace_id AS "workspace_id: WorkspaceId", storage_key, state AS "state: AssetState",
                  purge_after::text AS purge_after, purge_after IS NOT NULL AND purge_after > now() AS "restorable!"
             FROM assets WHERE id = $1 FOR UPDATE"#,
        asset.0,
    )
    .fetch_optional(&mut *tx)
    .await?;
    let row = row.ok_or(RestoreError::NotFound(asset))?;
    if row.state != AssetState::Retired {
        return Err(RestoreError::NotRetired { asset, state: row.state });
    }
    if !row.restorable {
        return Err(RestoreError::PurgeTimePassed { asset, purge_after: row.purge_after.unwrap_or_default() });
    }
    if request.dry_run {
        // Nothing is written: the row lock ends here, before the bucket is asked, so no settle waits on a look.
        tx.rollback().await?;
        let bytes_from_version = match objects::inspect(s3, bucket, &row.storage_key).await? {
            Found::Present => None,
            Found::Hidden { version_id } => Some(version_id),
            Found::Lost => return Err(RestoreError::BytesMissing { asset, key: row.storage_key }),
        };
        return Ok(Restored { storage_key: row.storage_key, bytes_from_version });
    }
    let presence = objects::ensure_present(s3, bucket, &row.storage_key).await?;
    if presence == Presence::Lost {
        return Err(RestoreError::BytesMissing { asset, key: row.storage_key });
    }
    assets::restore(&mut tx, asset, request.by).await?;
    let restored_version = match presence {
        Presence::Restored { version_id } => Some(version_id),
        _ => None,
    };
    let mut evidence = json!({
        "by": request.by, "purge_after": row.purge_after, "bytes_restored_from_version": restored_version,
    });
    if let Some(run) = request.undoing_run {
        evidence["undoing_run"] = json!(run);
    }
    Event::new(asset, row.workspace_id, AuditAction::Restore, evidence)
        .storage_key(&row.storage_key)
        .write(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Restored { storage_key: row.storage_key, bytes_from_version: restored_version })
}
