//! `approve`: an operator's release of a braked workspace (invariant 11), or of a managed prefix for adoption
//! (invariant 14), recorded with who and why.

use anyhow::{Context, bail};
use serde_json::json;
use uuid::Uuid;

use crate::{Output, connect};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// The workspace's id.
    #[arg(required_unless_present = "prefix", conflicts_with = "prefix")]
    workspace: Option<String>,
    /// A managed prefix (`*` for the whole bucket) whose bytes no row knows may be adopted from now on, after a
    /// recorded reconciliation reported them. Lasts until the prefix's row is removed.
    #[arg(long)]
    prefix: Option<String>,
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
    if args.by.trim().is_empty() || args.reason.trim().is_empty() {
        bail!("--by and --reason must say who approves and why");
    }
    if let Some(prefix) = &args.prefix {
        return prefix_approval(prefix, args.by.trim(), args.reason.trim()).await;
    }
    let workspace = args.workspace.unwrap_or_default();
    let workspace: Uuid = workspace.parse().with_context(|| format!("{workspace:?} is not a workspace id (a uuid)"))?;
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

/// Approves adoption under `prefix`: only one a recorded reconciliation has met (its report is what the operator
/// read), and the approval says what that report found there.
async fn prefix_approval(prefix: &str, by: &str, reason: &str) -> anyhow::Result<Output> {
    let stored = if prefix.trim() == "*" { "" } else { prefix };
    let pool = connect::database().await?;
    let approved = sqlx::query!(
        r#"UPDATE reconcile_prefixes SET approved_at = now(), approved_by = $2, reason = $3 WHERE prefix = $1
           RETURNING to_char(approved_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS "approved_at!",
                     (SELECT coalesce(sum((u->>'keys')::bigint), 0) FROM reconcile_listings l,
                             jsonb_array_elements(l.findings->'unknown') u
                       WHERE l.id = (SELECT max(id) FROM reconcile_listings WHERE compared_at IS NOT NULL)
                         AND u->>'prefix' = $1)::bigint AS "keys!",
                     (SELECT coalesce(sum((u->>'bytes')::bigint), 0) FROM reconcile_listings l,
                             jsonb_array_elements(l.findings->'unknown') u
                       WHERE l.id = (SELECT max(id) FROM reconcile_listings WHERE compared_at IS NOT NULL)
                         AND u->>'prefix' = $1)::bigint AS "bytes!""#,
        stored,
        by,
        reason,
    )
    .fetch_optional(&pool)
    .await?;
    let Some(approved) = approved else {
        bail!(
            "no recorded reconciliation has met prefix {prefix:?}: run `asset-sweeper reconcile` (it records what \
             it found) and read its report first"
        );
    };
    Ok(Output {
        text: format!(
            "prefix {prefix:?} is approved for adoption (by {by}: {reason}); the last reconciliation found {} \
             key(s), {} bytes no row knows there: the next one adopts those older than the grace period",
            approved.keys, approved.bytes
        ),
        json: json!({
            "prefix": stored,
            "approved_by": by,
            "reason": reason,
            "approved_at": approved.approved_at,
            "unknown_keys": approved.keys,
            "unknown_bytes": approved.bytes,
        }),
        attention: Vec::new(),
    })
}
