//! `usage`: a workspace's storage against its quota, as the application's upload check counts it.

use std::fmt::Write as _;

use anyhow::Context;
use records::quota::{self, Usage};
use serde_json::json;
use uuid::Uuid;

use crate::{Output, connect};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// The workspace's id (default: every workspace with a quota).
    workspace: Option<String>,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<Output> {
    let pool = connect::database().await?;
    let mut conn = pool.acquire().await?;
    let workspaces = match &args.workspace {
        Some(text) => {
            vec![text.parse::<Uuid>().with_context(|| format!("{text:?} is not a workspace id (a uuid)"))?]
        }
        None => quota::workspaces_with_quota(&mut conn).await?,
    };
    let mut usages = Vec::with_capacity(workspaces.len());
    for workspace in workspaces {
        usages.push(quota::usage(&mut conn, workspace).await?);
    }
    let prices = crate::money::prices()?;
    let ledger = match &args.workspace {
        Some(_) => crate::money::ledger(&mut conn, workspaces_shown(&usages)).await?,
        None => crate::money::ledger(&mut conn, None).await?,
    };
    let mut text = String::new();
    if usages.is_empty() {
        text.push_str("no workspace has a quota (rows of workspace_quotas; docs/integrating.md)");
    }
    let mut attention = Vec::new();
    for u in &usages {
        let _ = writeln!(text, "{}", describe(u));
        if let Some(holdings) = ledger.workspaces.get(&u.workspace_id) {
            let _ = writeln!(text, "  {}", holdings.describe(&prices));
        }
        if u.headroom_bytes == Some(0) {
            attention.push(format!("workspace {} refuses every upload now", u.workspace_id));
        }
    }
    if usages.iter().any(|u| u.schema_refused) {
        text.push_str(
            "the newest schema check refused (or none has run): every stored byte counts as held until one passes\n",
        );
    }
    text.push_str(&crate::money::describe(&ledger, &prices));
    Ok(Output {
        text: text.trim_end().to_owned(),
        json: json!({ "workspaces": usages, "money": ledger.priced(&prices) }),
        attention,
    })
}

/// The one workspace asked about.
fn workspaces_shown(usages: &[Usage]) -> Option<Uuid> {
    usages.first().map(|u| u.workspace_id)
}

fn describe(u: &Usage) -> String {
    let quota = u.quota_bytes.map_or("none".to_owned(), |q| format!("{q} B"));
    let headroom = u.headroom_bytes.map_or("unlimited".to_owned(), |h| format!("{h} B"));
    format!(
        "workspace {}: quota {quota}; held {} B; stored {} B ({} B waiting for removal); headroom {headroom}",
        u.workspace_id, u.held_bytes, u.stored_bytes, u.waiting_bytes
    )
}
