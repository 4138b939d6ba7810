//! `restore`: a retired asset back to `attached` before its purge time (invariant 8).

use anyhow::Context;
use serde_json::json;
use shared::AssetId;
use uuid::Uuid;

use crate::{Output, connect};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// The asset's id.
    asset: String,
    /// Who restores (recorded in the audit trail).
    #[arg(long)]
    by: String,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<Output> {
    let id: Uuid = args.asset.parse().with_context(|| format!("{:?} is not an asset id (a uuid)", args.asset))?;
    if args.by.trim().is_empty() {
        anyhow::bail!("--by must say who restores");
    }
    let (settings, pool, sdk) = connect::everything().await?;
    let s3 = shared::aws::s3_client(&sdk, settings.s3_force_path_style);
    shared::restore::restore(&pool, &s3, &settings.asset_bucket, AssetId(id), args.by.trim()).await?;
    Ok(Output {
        text: format!("asset {id} restored: attached again, its bytes in place"),
        json: json!({ "asset_id": id, "state": "attached", "restored_by": args.by.trim() }),
        attention: Vec::new(),
    })
}
