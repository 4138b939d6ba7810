//! `restore`: a retired asset back to `attached` before its purge time (invariant 8); with `--run`, every asset one
//! sweep pass retired, each through the same single-asset restore and its checks.

use anyhow::{Context, bail};
use lifecycle::AssetState;
use lifecycle::restore::{Request, RestoreError};
use platform::AssetId;
use platform::audit::AuditAction;
use serde_json::json;
use uuid::Uuid;

use super::undo;
use crate::{Output, connect};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// The asset's id.
    #[arg(required_unless_present = "run", conflicts_with = "run")]
    asset: Option<String>,
    /// Every asset this sweep pass retired, instead of one asset.
    #[arg(long)]
    run: Option<String>,
    /// Check each asset and say what would happen; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Who restores (recorded in the audit trail).
    #[arg(long)]
    by: String,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<Output> {
    let by = args.by.trim();
    if by.is_empty() {
        bail!("--by must say who restores");
    }
    let run = args.run.as_deref().map(undo::run_id).transpose()?;
    let one =
        args.asset.as_deref().map(|a| a.parse::<Uuid>().with_context(|| format!("{a:?} is not an asset id (a uuid)")));
    let one = one.transpose()?;
    let (settings, pool, sdk) = connect::everything().await?;
    let s3 = platform::aws::s3_client(&sdk, settings.s3_force_path_style);
    let restore = |asset: Uuid| {
        let request = Request { by, undoing_run: run, dry_run: args.dry_run };
        lifecycle::restore::restore_for(&pool, &s3, &settings.asset_bucket, AssetId(asset), request)
    };

    let Some(run) = run else {
        let id = one.context("an asset id or --run")?;
        let restored = restore(id).await?;
        let text = match (args.dry_run, &restored.bytes_from_version) {
            (false, None) => format!("asset {id} restored: attached again, its bytes in place"),
            (false, Some(v)) => format!("asset {id} restored: attached again, its bytes brought back from version {v}"),
            (true, None) => format!("asset {id} would be restored: attached again, its bytes are in place"),
            (true, Some(v)) => format!("asset {id} would be restored: its bytes would be copied back from version {v}"),
        };
        let state = if args.dry_run { "retired" } else { "attached" };
        return Ok(Output {
            text,
            json: json!({
                "asset_id": id, "state": state, "restored_by": by, "dry_run": args.dry_run,
                "bytes_restored_from_version": restored.bytes_from_version,
            }),
            attention: Vec::new(),
        });
    };

    let assets = undo::assets_of_run(&pool, run, &[AuditAction::Retire]).await?;
    let mut lines = Vec::with_capacity(assets.len());
    for asset in assets {
        let line = match restore(asset).await {
            Ok(restored) => undo::Line::done(asset, args.dry_run, restored.bytes_from_version),
            // Already back (restored by hand, or kept by a later settle): nothing to undo.
            Err(RestoreError::NotRetired { state: AssetState::Attached, .. }) => {
                undo::Line::skipped(asset, "attached already".to_owned())
            }
            Err(e) => undo::Line::refused(asset, e.to_string()),
        };
        lines.push(line);
    }
    Ok(undo::output("restore", run, args.dry_run, &lines))
}
