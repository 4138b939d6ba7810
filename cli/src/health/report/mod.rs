//! `report`: what the sweeper did over a period, for a person who pays the bill: per workspace what was found,
//! freed, retired, restored and held (and why), with the money freed and still waiting; as text, or with `--html` as
//! one self-contained page with charts (`html`). Reads only.

mod html;

use std::fmt::Write as _;

use anyhow::Context;
use chrono::Utc;
use ledger::gb;
use ledger::report::Report;
use serde_json::Value;

use crate::{Output, connect};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// How far back: a duration such as 30d, 7d or 12h.
    #[arg(long, default_value = "30d")]
    since: String,
    /// Also write the report as one self-contained HTML page, with charts, to this file.
    #[arg(long)]
    html: Option<std::path::PathBuf>,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<Output> {
    let period = humantime::parse_duration(&args.since)
        .with_context(|| format!("--since {:?} is not a duration such as 30d, 7d or 12h", args.since))?;
    let prices = crate::money::prices()?;
    let pool = connect::database().await?;
    let mut conn = pool.acquire().await?;
    let until = Utc::now();
    let since = until - chrono::Duration::from_std(period).context("--since is too long")?;
    let report = ledger::report::gather(&mut conn, &prices, since, until).await?;
    let text = describe(&report);
    let mut json = serde_json::to_value(&report)?;
    if let Some(path) = &args.html {
        std::fs::write(path, html::render(&report))
            .with_context(|| format!("cannot write the HTML report to {}", path.display()))?;
        json["html"] = Value::String(path.display().to_string());
    }
    let written = args.html.as_ref().map(|p| format!("\nHTML report written to {}", p.display())).unwrap_or_default();
    Ok(Output { text: format!("{}{written}", text.trim_end()), json, attention: Vec::new() })
}

/// The report as text.
fn describe(r: &Report) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "asset-sweeper report, {} to {} (money a month at {}; versions kept {})",
        r.since.format("%Y-%m-%d %H:%M UTC"),
        r.until.format("%Y-%m-%d %H:%M UTC"),
        r.class,
        r.noncurrent_window.describe()
    );
    let _ = writeln!(
        text,
        "freed: {} ({}), billed no more once their versions expire; still waiting: {} ({})",
        r.freed.money,
        gb(r.freed.bytes),
        r.waiting.money,
        gb(r.waiting.bytes)
    );
    for (id, ws) in &r.workspaces {
        let _ = writeln!(text, "workspace {id}:");
        let _ = writeln!(
            text,
            "  found: {} asset(s) sent for settlement, {} key(s) no row knew adopted ({} B)",
            ws.claimed, ws.adopted.count, ws.adopted.bytes
        );
        let count = |action: &str| ws.settled.get(action).copied().unwrap_or_default();
        let (retired, restored, kept) = (count("retire"), count("restore"), count("keep"));
        let (deleted, purged) = (count("delete"), count("purge"));
        let _ = writeln!(
            text,
            "  freed: {} B ({} deleted, {} purged), {}",
            ws.freed.bytes, deleted.count, purged.count, ws.freed.money
        );
        let _ =
            writeln!(text, "  retired: {} asset(s), {} B, restorable until their purge", retired.count, retired.bytes);
        let _ = writeln!(
            text,
            "  restored: {} asset(s), {} B; kept: {} asset(s), {} of them retired files read since (access logs)",
            restored.count, restored.bytes, kept.count, ws.kept_because_read
        );
        let held: Vec<String> = ws.deferred.iter().map(|(why, n)| format!("{n} deferred ({why})")).collect();
        let braked =
            ws.braked_because.as_ref().map(|why| format!("braked in {} pass(es), newest: {why}", ws.braked_passes));
        let held: Vec<String> = held.into_iter().chain(braked).collect();
        let _ = writeln!(text, "  held: {}", if held.is_empty() { "nothing".to_owned() } else { held.join("; ") });
        let _ = writeln!(
            text,
            "  now: waiting {} B, {}; held (in use) {} B, {}",
            ws.waiting.bytes, ws.waiting.money, ws.held.bytes, ws.held.money
        );
    }
    let _ = writeln!(text, "settlements per day:");
    for d in &r.days {
        let parts: Vec<String> = d.actions.iter().map(|(a, n)| format!("{a} {n}")).collect();
        let _ = writeln!(text, "  {}: {}", d.day, parts.join(", "));
    }
    text
}
