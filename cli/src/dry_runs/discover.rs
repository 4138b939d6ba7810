//! `discover --dry-run`: what the next discovery batches would find — the unscheduled assets no reference source
//! refers to, from discovery's cursor on — with the same batches and the same question a sweep pass asks. Reads
//! in a read-only transaction that is rolled back: it changes nothing. Making them due is the sweep's job.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::json;

use crate::{Output, connect};

/// Assets the text lists by id; `--json` lists them all.
const LISTED: usize = 50;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Required: only the sweep makes assets due; this shows what it would find.
    #[arg(long)]
    dry_run: bool,
    /// Look at up to this many assets (default: one pass's cap, DISCOVERY_MAX_PER_PASS).
    #[arg(long)]
    limit: Option<u32>,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<Output> {
    anyhow::ensure!(
        args.dry_run,
        "discover only previews from the command line: pass --dry-run (each sweep pass makes what it finds due)"
    );
    let (settings, pool, _) = connect::everything().await?;
    let limit = args.limit.unwrap_or(settings.discovery.max_per_pass);
    let (mut tx, map) = connect::checked_read_only(&pool, &settings).await?;
    let map = match map {
        Ok(map) => map,
        Err(refusal) => {
            return Ok(Output {
                text: format!("the schema check refuses, so discovery would find nothing: {refusal}"),
                json: json!({ "refused": refusal.problems, "scanned": 0, "found": [] }),
                attention: vec!["the schema check refuses".to_owned()],
            });
        }
    };
    let (found, scanned) =
        lifecycle::discovery::preview(&mut tx, &map, u64::from(limit), settings.discovery.batch_size, settings.grace)
            .await?;
    tx.rollback().await?;

    let mut per_workspace: BTreeMap<String, (u64, i64)> = BTreeMap::new();
    for f in &found {
        let entry = per_workspace.entry(f.workspace_id.to_string()).or_default();
        entry.0 += 1;
        entry.1 += f.byte_size;
    }
    let bytes: i64 = found.iter().map(|f| f.byte_size).sum();
    let mut text = format!(
        "discovery would make {} of {scanned} asset(s) looked at due ({bytes} bytes): nothing refers to them\n",
        found.len()
    );
    if !settings.discovery.enabled {
        text.push_str("  (discovery is off in the functions' settings: DISCOVERY_ENABLED=false)\n");
    }
    // What a pass would do now: wait, making nothing due, until the census has read these once.
    let waiting_for = lifecycle::discovery::unread_sources(&map);
    if !waiting_for.is_empty() {
        let _ = writeln!(
            text,
            "  (a pass makes nothing due until the census has read {} once: ids spelled in mixed case there are \
             references only once it has)",
            waiting_for.join(", ")
        );
    }
    for (ws, (n, b)) in &per_workspace {
        let _ = writeln!(text, "  workspace {ws}: {n} asset(s), {b} bytes");
    }
    for f in found.iter().take(LISTED) {
        let _ = writeln!(text, "  {}  {:<8} {}  {} bytes", f.asset_id, f.state, f.storage_key, f.byte_size);
    }
    if found.len() > LISTED {
        let _ = writeln!(text, "  … and {} more (--json lists them all)", found.len() - LISTED);
    }
    Ok(Output {
        text: text.trim_end().to_owned(),
        json: json!({
            "scanned": scanned,
            "bytes": bytes,
            "per_workspace": per_workspace.iter().map(|(ws, (n, b))| (ws.clone(), json!({ "assets": n, "bytes": b }))).collect::<serde_json::Map<_, _>>(),
            "found": found,
            "waiting_for": waiting_for,
        }),
        attention: Vec::new(),
    })
}
