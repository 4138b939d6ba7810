//! `approve`: an operator's release of a braked workspace (invariant 11) or retention rule, or of a managed prefix
//! for adoption (invariant 14), recorded with who and why.

use anyhow::{Context, bail};
use serde_json::json;
use uuid::Uuid;

use crate::{Output, connect};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// The workspace's id.
    #[arg(required_unless_present_any = ["prefix", "rule"], conflicts_with_all = ["prefix", "rule"])]
    workspace: Option<String>,
    /// A retention rule (its id, as `plan` lists it) the rule brake holds: it may delete more than its share of
    /// its table in the passes of the next hours. Changing the rule drops the approval.
    #[arg(long, conflicts_with = "prefix")]
    rule: Option<i64>,
    /// A managed prefix (`*` for the whole bucket) whose bytes no row knows may be adopted from now on, read with
    /// `reconcile --dry-run` first. Lasts until a reconciliation meets the prefix with another layout.
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
    if let Some(rule) = args.rule {
        let pool = connect::database().await?;
        return crate::retention::approve(&pool, rule, args.by.trim(), args.reason.trim(), args.hours).await;
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

/// Approves adoption under `prefix`, a managed prefix of the layout configured now: the layout the operator's
/// dry run read with. A reconciliation with another layout later meets the prefix anew and needs a new approval.
async fn prefix_approval(prefix: &str, by: &str, reason: &str) -> anyhow::Result<Output> {
    let (settings, pool, _) = connect::everything().await?;
    let layout = settings.reconcile.layout.as_ref().context(
        "nothing to approve: set RECONCILE_PREFIXES and RECONCILE_KEY_PATTERN as the sweep has them (docs/operating.md)",
    )?;
    let stored = if prefix.trim() == "*" { "" } else { prefix };
    if !layout.prefixes().contains(&stored) {
        bail!("{prefix:?} is not a managed prefix: RECONCILE_PREFIXES names {:?} (`*` is the whole bucket)", {
            let names: Vec<&str> = layout.prefixes().into_iter().map(|p| if p.is_empty() { "*" } else { p }).collect();
            names
        });
    }
    let approved = sqlx::query!(
        r#"INSERT INTO reconcile_prefixes AS r (prefix, layout, approved_at, approved_by, reason)
           VALUES ($1, $2, now(), $3, $4)
           ON CONFLICT (prefix) DO UPDATE
              SET layout = EXCLUDED.layout, approved_at = now(), approved_by = EXCLUDED.approved_by,
                  reason = EXCLUDED.reason,
                  first_seen_at = CASE WHEN r.layout = EXCLUDED.layout THEN r.first_seen_at ELSE now() END
           RETURNING to_char(approved_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS "approved_at!""#,
        stored,
        layout.signature(),
        by,
        reason,
    )
    .fetch_one(&pool)
    .await?;
    // What the newest recorded reconciliation found there, if one has: what the approval lets be adopted.
    let found = sqlx::query!(
        r#"SELECT coalesce(sum((u->>'keys')::bigint), 0)::bigint AS "keys!",
                  coalesce(sum((u->>'bytes')::bigint), 0)::bigint AS "bytes!",
                  (SELECT max(compared_at) FROM reconcile_listings)::text AS compared_at
             FROM reconcile_listings l, jsonb_array_elements(l.findings->'unknown') u
            WHERE l.id = (SELECT max(id) FROM reconcile_listings WHERE compared_at IS NOT NULL)
              AND u->>'prefix' = $1"#,
        stored,
    )
    .fetch_one(&pool)
    .await?;
    let last = match &found.compared_at {
        Some(at) => format!(
            "the reconciliation recorded {at} found {} key(s), {} bytes no row knows there",
            found.keys, found.bytes
        ),
        None => "no recorded reconciliation has reported on it yet: what your dry run showed".to_owned(),
    };
    Ok(Output {
        text: format!(
            "prefix {prefix:?} is approved for adoption (by {by}: {reason}); {last}; the next reconciliation adopts \
             those written before the grace period"
        ),
        json: json!({
            "prefix": stored,
            "approved_by": by,
            "reason": reason,
            "approved_at": approved.approved_at,
            "unknown_keys": found.keys,
            "unknown_bytes": found.bytes,
        }),
        attention: Vec::new(),
    })
}
