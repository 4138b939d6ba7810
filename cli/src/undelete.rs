//! `undelete`: a deleted or purged asset back, its bytes from the bucket's kept versions (while the bucket still
//! keeps them) and its row from the audit record. It comes back `attached`: an operator brings it back because
//! something needs it.

use anyhow::{Context, bail};
use serde_json::{Value, json};
use shared::audit::{AuditAction, Event};
use shared::lifecycle::AssetState;
use shared::objects::{self, Presence};
use shared::{AssetId, WorkspaceId};
use uuid::Uuid;

use crate::{Output, connect};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// The asset's id, or its storage key (the newest deleted or purged asset with that key).
    target: String,
    /// Who undeletes (recorded).
    #[arg(long)]
    by: String,
}

struct Removal {
    event_id: i64,
    asset_id: Uuid,
    action: AuditAction,
    occurred_at: String,
    asset_row: Option<Value>,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<Output> {
    let by = args.by.trim();
    if by.is_empty() {
        bail!("--by must say who undeletes");
    }
    let (settings, pool, sdk) = connect::everything().await?;
    let by_id = args.target.parse::<Uuid>().ok();
    let removal = sqlx::query_as!(
        Removal,
        r#"SELECT id AS event_id, asset_id, action AS "action: AuditAction", occurred_at::text AS "occurred_at!",
                  asset_row
             FROM settlement_events
            WHERE action = ANY ($3) AND (asset_id = $1 OR ($1 IS NULL AND storage_key = $2))
            ORDER BY id DESC LIMIT 1"#,
        by_id,
        &args.target,
        &[AuditAction::Delete, AuditAction::Purge] as &[AuditAction],
    )
    .fetch_optional(&pool)
    .await?;
    let Some(removal) = removal else {
        bail!("no deleted or purged asset {} is on record", args.target);
    };
    let id = removal.asset_id;
    if let Some(state) = sqlx::query_scalar!(r#"SELECT state AS "state: AssetState" FROM assets WHERE id = $1"#, id)
        .fetch_optional(&pool)
        .await?
    {
        bail!(
            "asset {id} exists ({state}): nothing to undelete{}",
            if state == AssetState::Retired { "; use restore" } else { "" }
        );
    }
    let row = removal.asset_row.with_context(|| format!("the {} of asset {id} recorded no row", removal.action))?;
    let field = |name: &str| {
        row[name].as_str().map(str::to_owned).with_context(|| format!("the recorded row of {id} has no {name}"))
    };
    let (workspace, key, hash) = (field("workspace_id")?, field("storage_key")?, field("content_hash")?);
    let workspace: Uuid =
        workspace.parse().with_context(|| format!("the recorded row of {id} has workspace_id {workspace:?}"))?;
    let size = row["byte_size"].as_i64().with_context(|| format!("the recorded row of {id} has no byte_size"))?;

    let s3 = shared::aws::s3_client(&sdk, settings.s3_force_path_style);
    let presence = objects::ensure_present(&s3, &settings.asset_bucket, &key).await.map_err(anyhow::Error::msg)?;
    let version = match presence {
        Presence::Present => None,
        Presence::Restored { version_id } => Some(version_id),
        Presence::Lost => bail!(
            "asset {id} cannot be undeleted: the bucket no longer keeps any version of {key} (deleted bytes expire \
             after the bucket's noncurrent-version expiry)"
        ),
    };
    let mut tx = pool.begin().await?;
    sqlx::query!(
        "INSERT INTO stored_objects (storage_key, content_hash, byte_size) VALUES ($1, $2, $3)
         ON CONFLICT (storage_key) DO NOTHING",
        &key,
        &hash,
        size,
    )
    .execute(&mut *tx)
    .await?;
    // `$7::jsonb`: with `->>` alone the parameter's type is ambiguous when the query is checked.
    sqlx::query!(
        "INSERT INTO assets (id, workspace_id, storage_key, content_hash, byte_size, state, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, coalesce(($7::jsonb->>'created_at')::timestamptz, now()))",
        id,
        workspace,
        &key,
        &hash,
        size,
        AssetState::Attached as AssetState,
        &row,
    )
    .execute(&mut *tx)
    .await?;
    let evidence = json!({ "by": by, "from_event": removal.event_id, "removed": removal.action, "bytes_restored_from_version": version });
    Event::new(AssetId(id), WorkspaceId(workspace), AuditAction::Undelete, evidence)
        .storage_key(&key)
        .asset_row(Some(&row))
        .write(&mut *tx)
        .await?;
    tx.commit()
        .await
        .with_context(|| format!("the bytes of {key} are back, but the row of {id} was not written; run again"))?;
    let bytes = match &version {
        Some(v) => format!("bytes brought back from version {v}"),
        None => "bytes were still there (shared)".to_owned(),
    };
    Ok(Output {
        text: format!("asset {id} undeleted ({} at {}): attached again, {bytes}", removal.action, removal.occurred_at),
        json: json!({ "asset_id": id, "state": AssetState::Attached, "storage_key": key, "removed": removal.action, "bytes_restored_from_version": version }),
        attention: Vec::new(),
    })
}
