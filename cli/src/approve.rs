//! `approve`: an operator's release of a braked workspace (invariant 11), recorded with who and why.

use anyhow::{Context, bail};
use serde_json::json;
use uuid::Uuid;

use crate::{Output, connect};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// The workspace's id.
    workspace: String,
    /// Who approves (recorded).
    #[arg(long)]
    by: String,
    /// Why (recorded).
    #[arg(long)]
    reason: String,
    /// How many hours the approval lasts.
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u32).range(1..=168))]
    hours: u32,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<Output> {
    let workspace: Uuid =
        args.workspace.parse().with_context(|| format!("{:?} is not a workspace id (a uuid)", args.workspace))?;
    if args.by.trim().is_empty() || args.reason.trim().is_empty() {
        bail!("--by and --reason must say who approves and why");
    }
    let pool = connect::database().await?;
    let known =
        sqlx::query_scalar!(r#"SELECT EXISTS (SELECT 1 FROM assets WHERE workspace_id = $1) AS "known!""#, workspace)
            .fetch_one(&pool)
            .await?;
    if !known {
        bail!("workspace {workspace} has no assets: nothing to approve");
    }
    let approval = sqlx::query!(
        r#"INSERT INTO brake_approvals (workspace_id, approved_by, reason, expires_at)
           VALUES ($1, $2, $3, now() + $4 * interval '1 hour')
           RETURNING id, to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS "expires_at!""#,
        workspace,
        args.by.trim(),
        args.reason.trim(),
        f64::from(args.hours),
    )
    .fetch_one(&pool)
    .await?;
    let (id, expires_at) = (approval.id, approval.expires_at);
    Ok(Output {
        text: format!(
            "approval {id}: workspace {workspace} is released from the brake until {expires_at} (by {}: {})",
            args.by.trim(),
            args.reason.trim()
        ),
        json: json!({
            "approval_id": id,
            "workspace_id": workspace,
            "approved_by": args.by.trim(),
            "reason": args.reason.trim(),
            "expires_at": expires_at,
        }),
        attention: Vec::new(),
    })
}
