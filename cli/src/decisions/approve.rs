//! `approve`: an operator's release of a braked workspace (invariant 11) or retention rule, or of a managed prefix
//! for adoption (invariant 14), recorded with who and why, an expiry, and the plan it was granted on (invariant 24):
//! the figures it prints are the ones it records, read in the transaction that records them, and a plan that later
//! outgrows them is held again. `--dry-run` prints the same and records nothing.

use std::fmt::Write as _;

use anyhow::{Context, bail};
use lifecycle::brake;
use platform::approval::Signed;
use serde_json::json;
use uuid::Uuid;

use crate::retention::RuleApproval;
use crate::{Output, connect};

/// Due assets an approval prints and records by name.
const SAMPLE: i64 = 10;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// The workspace's id.
    #[arg(required_unless_present_any = ["prefix", "rule"], conflicts_with_all = ["prefix", "rule"])]
    workspace: Option<String>,
    /// A retention rule (its id, as `plan` lists it) the rule brake holds: it may delete more than its share of
    /// its table in the passes of the next hours, up to what it would delete now. Changing the rule drops the
    /// approval.
    #[arg(long, conflicts_with = "prefix")]
    rule: Option<i64>,
    /// A managed prefix (`*` for the whole bucket) whose bytes no row knows may be adopted, as many as the newest
    /// recorded reconciliation found there (read it with `status` or `reconcile --dry-run` first). A report whose
    /// count jumps beyond that and the previous report's withdraws it; so does another layout.
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
    /// Print what would be approved, and record nothing.
    #[arg(long)]
    dry_run: bool,
    /// Approve a prefix whose unknown keys are mostly named by no key source and no key while a column names them
    /// relative to a root — which `approve --prefix` otherwise refuses, naming the key source to declare. Recorded
    /// with the approval: for a person who read that and decided the column names something else.
    #[arg(long, requires = "prefix")]
    despite_unnamed: bool,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<Output> {
    let (by, reason) = (args.by.trim(), args.reason.trim());
    if by.is_empty() || reason.is_empty() {
        bail!("--by and --reason must say who approves and why");
    }
    if let Some(id) = args.rule {
        let (settings, pool, _) = connect::everything().await?;
        let approval = RuleApproval { id, by, reason, hours: args.hours, dry_run: args.dry_run };
        return crate::retention::approve(&pool, &settings, approval).await;
    }
    if let Some(prefix) = &args.prefix {
        let approval =
            PrefixApproval { by, reason, hours: args.hours, dry_run: args.dry_run, despite: args.despite_unnamed };
        return prefix_approval(prefix, approval).await;
    }
    let workspace = args.workspace.unwrap_or_default();
    let workspace: Uuid = workspace.parse().with_context(|| format!("{workspace:?} is not a workspace id (a uuid)"))?;
    let tolerance = settings::Settings::approval_tolerance_from_env()?;
    let pool = connect::database().await?;
    let mut tx = pool.begin().await?;
    let due = brake::due_of(&mut tx, workspace).await?;
    if due.live_assets == 0 {
        bail!("workspace {workspace} has no assets: nothing to approve");
    }
    let candidates = brake::candidates(&mut tx, workspace, SAMPLE).await?;
    let (assets, bytes) = (platform::approval::count(due.due_assets), platform::approval::count(due.due_bytes));
    let mut plan = format!(
        "workspace {workspace}: {assets} asset(s), {bytes} bytes due, of {} asset(s), {} bytes it holds",
        due.live_assets, due.live_bytes
    );
    for c in &candidates {
        let _ = write!(plan, "\n  {} {} ({} bytes)", c.asset_id, c.storage_key, c.byte_size);
    }
    if due.due_assets > SAMPLE {
        let _ = write!(plan, "\n  … and {} more", due.due_assets - SAMPLE);
    }
    let adopted = brake::adopted_naming(&mut tx, workspace).await?;
    if adopted.due > 0 {
        let _ = write!(
            plan,
            "\n  of them adopted (bytes no row knew): {}: {} named by a record by key and {} only relative to a root \
             (both held, not retired), {} by nothing the census read (retired, bytes in place, then purged after \
             RETENTION)",
            adopted.due, adopted.by_key, adopted.relative, adopted.unnamed
        );
        for (how, key, column) in &adopted.examples {
            let _ = write!(
                plan,
                "\n    {how:<8} {key}{}",
                column.as_deref().map(|c| format!("  <- {c}")).unwrap_or_default()
            );
        }
    }
    let covers = format!(
        "while at most {} asset(s) and {} bytes are due (APPROVAL_TOLERANCE_PERCENT {})",
        tolerance.ceiling(assets),
        tolerance.ceiling(bytes),
        tolerance.0
    );
    let mut json = json!({
        "workspace_id": workspace,
        "approved_by": by,
        "reason": reason,
        "due_assets": due.due_assets,
        "due_bytes": due.due_bytes,
        "sample": candidates,
        "adopted": adopted,
        "dry_run": args.dry_run,
    });
    if args.dry_run {
        tx.rollback().await?;
        return Ok(Output {
            text: format!(
                "{plan}\nnothing recorded (--dry-run): approving would release it from the brake for {} h {covers}",
                args.hours
            ),
            json,
            attention: Vec::new(),
        });
    }
    let grant = brake::Grant {
        workspace,
        signed: Signed { by, reason, hours: args.hours },
        due_assets: due.due_assets,
        due_bytes: due.due_bytes,
        sample: json["sample"].clone(),
    };
    let (id, expires_at) = brake::approve(&mut tx, grant).await?;
    tx.commit().await?;
    json["approval_id"] = json!(id);
    json["expires_at"] = json!(expires_at);
    Ok(Output {
        text: format!(
            "{plan}\napproval {id}: workspace {workspace} is released from the brake until {expires_at} (by {by}: \
             {reason}) {covers}; a pass that finds more due holds it again"
        ),
        json,
        attention: Vec::new(),
    })
}

/// Approves adoption under `prefix`, a managed prefix of the layout configured now (the layout the operator's dry
/// run read with; a reconciliation with another layout meets the prefix anew), for as many adoptable keys as the
/// newest recorded reconciliation found there: the figure it prints and records.
struct PrefixApproval<'a> {
    by: &'a str,
    reason: &'a str,
    hours: u32,
    dry_run: bool,
    /// `--despite-unnamed`.
    despite: bool,
}

async fn prefix_approval(prefix: &str, approval: PrefixApproval<'_>) -> anyhow::Result<Output> {
    let PrefixApproval { by, reason, hours, dry_run, despite } = approval;
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
    let mut tx = pool.begin().await?;
    // What the newest recorded reconciliation found there: what the approval lets be adopted, and what a later
    // report is measured against.
    let Some(recorded) = reconcile::newest_recorded(&mut tx).await? else {
        bail!(
            "no recorded reconciliation has reported on {prefix:?}, so there is nothing an approval could be bound \
             to: run `asset-sweeper reconcile` (it adopts nothing under a prefix nobody approved), read what it \
             found, then approve"
        );
    };
    let found = recorded.findings.under(stored);
    let tolerance = settings.approval_tolerance;
    let mut plan = format!(
        "prefix {prefix:?}: the reconciliation recorded {} found {} key(s) no row knows written before the grace \
         period, {} bytes with {} younger key(s)",
        recorded.compared_at, found.adoptable, found.bytes, found.young
    );
    for key in &found.sample {
        let _ = write!(plan, "\n  {key}");
    }
    // What records name of them: the approval is read, and refused, on these figures (no approval is blind).
    let naming = recorded.findings.naming.as_ref();
    let figures = naming.and_then(|n| n.prefix(stored)).cloned();
    if let Some(naming) = naming {
        let this = schema::naming::Naming {
            prefixes: figures.iter().cloned().collect(),
            suggestions: naming.suggestions.iter().filter(|s| s.prefix == stored).cloned().collect(),
            ..(*naming).clone()
        };
        for line in this.lines() {
            let _ = write!(plan, "\n{line}");
        }
    }
    let refusal = naming.and_then(|n| n.refusal(stored));
    let covers = format!(
        "as long as no report finds more than {} such key(s) there, or more than that over the report before it \
         (APPROVAL_TOLERANCE_PERCENT {})",
        tolerance.ceiling(platform::approval::count(found.adoptable)),
        tolerance.0
    );
    let mut json = json!({
        "prefix": stored,
        "approved_by": by,
        "reason": reason,
        "listing_id": recorded.id,
        "unknown_keys": found.adoptable,
        "young_keys": found.young,
        "unknown_bytes": found.bytes,
        "sample": found.sample,
        "naming": figures,
        "refused": refusal,
        "despite_unnamed": despite,
        "dry_run": dry_run,
    });
    if let Some(refusal) = refusal.as_ref().filter(|_| !despite) {
        tx.rollback().await?;
        let override_it = "having read the figures (`approve --prefix … --dry-run`) and decided that column names \
                           something else, approve with --despite-unnamed: the override is recorded";
        if dry_run {
            return Ok(Output {
                text: format!("{plan}\nREFUSED: {refusal}\n({override_it})"),
                json,
                attention: vec![format!("an approval of {prefix:?} would be refused")],
            });
        }
        bail!("approval refused: {refusal} ({override_it})");
    }
    if dry_run {
        tx.rollback().await?;
        return Ok(Output {
            text: format!(
                "{plan}\nnothing recorded (--dry-run): approving would let reconciliation adopt them for {hours} h \
                 {covers}"
            ),
            json,
            attention: Vec::new(),
        });
    }
    let grant = reconcile::adopt::PrefixGrant {
        prefix: stored,
        layout: layout.signature(),
        signed: Signed { by, reason, hours },
        keys: found.adoptable,
        bytes: found.bytes,
        naming: json["naming"].clone(),
        despite_unnamed: despite && refusal.is_some(),
    };
    let until = reconcile::adopt::approve_prefix(&mut tx, grant).await?;
    tx.commit().await?;
    json["expires_at"] = json!(until);
    Ok(Output {
        text: format!(
            "{plan}\nprefix {prefix:?} is approved for adoption until {} (by {by}: {reason}) {covers}; the next \
             reconciliation adopts those written before the grace period",
            until
        ),
        json,
        attention: Vec::new(),
    })
}
