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
    let mut text = String::new();
    if usages.is_empty() {
        text.push_str("no workspace has a quota (rows of workspace_quotas; docs/integrating.md)");
    }
    let mut attention = Vec::new();
    for u in &usages {
        let _ = writeln!(text, "{}", describe(u));
        if u.headroom_bytes == Some(0) {
            attention.push(format!("workspace {} refuses every upload now", u.workspace_id));
        }
    }
    if usages.iter().any(|u| u.schema_refused) {
        text.push_str(
            "the newest schema check refused (or none has run): every stored byte counts as held until one passes\n",
        );
    }
    Ok(Output { text: text.trim_end().to_owned(), json: json!({ "workspaces": usages }), attention })
}

fn describe(u: &Usage) -> String {
    let quota = u.quota_bytes.map_or("none".to_owned(), |q| format!("{q} B"));
    let headroom = u.headroom_bytes.map_or("unlimited".to_owned(), |h| format!("{h} B"));
    format!(
        "workspace {}: quota {quota}; held {} B; stored {} B ({} B waiting for removal); headroom {headroom}",
        u.workspace_id, u.held_bytes, u.stored_bytes, u.waiting_bytes
    )
}
