//! `undelete`: a deleted or purged asset back, its bytes from the bucket's kept versions (while the bucket still
//! keeps them) and its row from the audit record. It comes back `attached`: an operator brings it back because
//! something needs it. With `--run`, every asset one sweep pass deleted or purged, each through the same path.

use anyhow::{Context, bail};
use lifecycle::AssetState;
use lifecycle::assets::{self, Unremoved};
use platform::audit::{AuditAction, Event};
use platform::objects::{self, Found, Presence};
use platform::{AssetId, WorkspaceId};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use super::undo;
use crate::{Output, connect};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// The asset's id, or its storage key (the newest deleted or purged asset with that key).
    #[arg(required_unless_present = "run", conflicts_with = "run")]
    target: Option<String>,
    /// Every asset this sweep pass deleted or purged, instead of one asset.
    #[arg(long)]
    run: Option<String>,
    /// Check each asset and say what would happen; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Who undeletes (recorded).
    #[arg(long)]
    by: String,
}

/// How one undelete is asked for.
struct Ask<'a> {
    by: &'a str,
    undoing_run: Option<Uuid>,
    dry_run: bool,
}

/// What one undelete found.
enum Answer {
    Undeleted(Undeleted),
    /// The asset's row exists (undeleted already, or never removed since): nothing to undelete.
    Exists {
        id: Uuid,
        state: AssetState,
    },
}

/// What one undelete did, or would do.
struct Undeleted {
    id: Uuid,
    key: String,
    removal: platform::audit::Removal,
    /// The kept version the bytes came (or would come) back from, when they were hidden.
    version: Option<String>,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<Output> {
    let by = args.by.trim();
    if by.is_empty() {
        bail!("--by must say who undeletes");
    }
    let run = args.run.as_deref().map(undo::run_id).transpose()?;
    let (settings, pool, sdk) = connect::everything().await?;
    let s3 = platform::aws::s3_client(&sdk, settings.s3_force_path_style);
    let ask = Ask { by, undoing_run: run, dry_run: args.dry_run };

    let Some(run) = run else {
        let target = args.target.as_deref().context("an asset id, a storage key or --run")?;
        let answer = undelete(&pool, &s3, &settings.asset_bucket, target, &ask).await?;
        let Undeleted { id, key, removal, version } = match answer {
            Answer::Undeleted(done) => done,
            Answer::Exists { id, state } => bail!(
                "asset {id} exists ({state}): nothing to undelete{}",
                if state == AssetState::Retired { "; use restore" } else { "" }
            ),
        };
        let text = match (args.dry_run, &version) {
            (false, Some(v)) => format!("bytes brought back from version {v}"),
            (false, None) => "bytes were still there (shared)".to_owned(),
            (true, Some(v)) => format!("bytes would be copied back from version {v}"),
            (true, None) => "bytes are still there (shared)".to_owned(),
        };
        let (verb, state) =
            if args.dry_run { ("would be undeleted", None) } else { ("undeleted", Some(AssetState::Attached)) };
        return Ok(Output {
            text: format!("asset {id} {verb} ({} at {}): attached again, {text}", removal.action, removal.occurred_at),
            json: json!({ "asset_id": id, "state": state, "storage_key": key, "removed": removal.action, "bytes_restored_from_version": version, "dry_run": args.dry_run }),
            attention: Vec::new(),
        });
    };

    let assets = undo::assets_of_run(&pool, run, &[AuditAction::Delete, AuditAction::Purge]).await?;
    let mut lines = Vec::with_capacity(assets.len());
    for asset in assets {
        let line = match undelete(&pool, &s3, &settings.asset_bucket, &asset.to_string(), &ask).await {
            Ok(Answer::Undeleted(done)) => undo::Line::done(asset, args.dry_run, done.version),
            // Undeleted already (by hand, or an earlier run of this undo).
            Ok(Answer::Exists { state, .. }) => undo::Line::skipped(asset, format!("exists ({state})")),
            Err(e) => undo::Line::refused(asset, format!("{e:#}")),
        };
        lines.push(line);
    }
    Ok(undo::output("undelete", run, args.dry_run, &lines))
}

/// Undeletes the newest deleted or purged asset `target` names (its id, or its storage key).
async fn undelete(
    pool: &PgPool,
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    target: &str,
    ask: &Ask<'_>,
) -> anyhow::Result<Answer> {
    let by_id = target.parse::<Uuid>().ok();
    let removal = platform::audit::last_removal(pool, by_id, target).await?;
    let Some(removal) = removal else {
        bail!("no deleted or purged asset {target} is on record");
    };
    let id = removal.asset_id;
    if let Some(state) = lifecycle::assets::state_of(pool, id).await? {
        return Ok(Answer::Exists { id, state });
    }
    let row =
        removal.asset_row.as_ref().with_context(|| format!("the {} of asset {id} recorded no row", removal.action))?;
    let field = |name: &str| {
        row[name].as_str().map(str::to_owned).with_context(|| format!("the recorded row of {id} has no {name}"))
    };
    let (workspace, key, hash) = (field("workspace_id")?, field("storage_key")?, field("content_hash")?);
    let workspace: Uuid =
        workspace.parse().with_context(|| format!("the recorded row of {id} has workspace_id {workspace:?}"))?;
    let size = row["byte_size"].as_i64().with_context(|| format!("the recorded row of {id} has no byte_size"))?;
    let lost = || {
        anyhow::anyhow!(
            "asset {id} cannot be undeleted: the bucket no longer keeps any version of {key} (deleted bytes expire \
             after the bucket's noncurrent-version expiry)"
        )
    };

    if ask.dry_run {
        let version = match objects::inspect(s3, bucket, &key).await.map_err(anyhow::Error::msg)? {
            Found::Present => None,
            Found::Hidden { version_id } => Some(version_id),
            Found::Lost => return Err(lost()),
        };
        return Ok(Answer::Undeleted(Undeleted { id, key, removal, version }));
    }
    let presence = objects::ensure_present(s3, bucket, &key).await.map_err(anyhow::Error::msg)?;
    let version = match presence {
        Presence::Present => None,
        Presence::Restored { version_id } => Some(version_id),
        Presence::Lost => return Err(lost()),
    };
    let mut tx = pool.begin().await?;
    let restored = Unremoved { id, workspace, key: &key, hash: &hash, size, row, by: ask.by };
    assets::undelete(&mut tx, &restored).await?;
    let mut evidence = json!({ "by": ask.by, "from_event": removal.event_id, "removed": removal.action, "bytes_restored_from_version": version });
    if let Some(run) = ask.undoing_run {
        evidence["undoing_run"] = json!(run);
    }
    Event::new(AssetId(id), WorkspaceId(workspace), AuditAction::Undelete, evidence)
        .storage_key(&key)
        .asset_row(Some(row))
        .write(&mut *tx)
        .await?;
    tx.commit()
        .await
        .with_context(|| format!("the bytes of {key} are back, but the row of {id} was not written; run again"))?;
    Ok(Answer::Undeleted(Undeleted { id, key, removal, version }))
}
