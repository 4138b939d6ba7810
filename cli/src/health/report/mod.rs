//! `report`: what the sweeper did over a period, for a person who pays the bill: per workspace what was found,
//! freed, retired, restored and held (and why), with the money freed and still waiting; as text, or with `--html` as
//! one self-contained page with charts (`html`). Reads only.

mod html;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::Context;
use chrono::{DateTime, NaiveDate, Utc};
use lifecycle::costs::Window;
use platform::money::{Monthly, Prices, gb};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

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

/// Objects (or assets) and their bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Figure {
    pub(crate) count: u64,
    pub(crate) bytes: u64,
}

impl Figure {
    fn add(&mut self, count: i64, bytes: i64) {
        self.count += count.max(0).unsigned_abs();
        self.bytes += bytes.max(0).unsigned_abs();
    }
}

/// Bytes and what they cost a month.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Priced {
    pub(crate) bytes: u64,
    pub(crate) money: Monthly,
}

/// One workspace over the period.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Workspace {
    /// Assets the sweep sent for settlement.
    pub(crate) claimed: u64,
    /// Keys no row knew, adopted by reconciliation.
    pub(crate) adopted: Figure,
    /// Settlements by action (keep, retire, delete, purge, restore, defer, …).
    pub(crate) settled: BTreeMap<String, Figure>,
    /// Bytes deletes and purges freed: billed no more once their versions expire.
    pub(crate) freed: Priced,
    /// Deferrals by why (grace, census, window, pinned, bucket …).
    pub(crate) deferred: BTreeMap<String, u64>,
    /// Retired files kept because the access logs saw them read since their retirement.
    pub(crate) kept_because_read: u64,
    /// Passes the brake held it in, and the newest reason.
    pub(crate) braked_passes: u64,
    pub(crate) braked_because: Option<String>,
    /// Its waste now: released, retired, versions kept, bytes no row knows.
    pub(crate) waiting: Priced,
    /// Its held bytes now (in use).
    pub(crate) held: Priced,
}

/// Settlements of one day, by action.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Day {
    pub(crate) day: NaiveDate,
    pub(crate) actions: BTreeMap<String, u64>,
}

/// One pass's waiting money per workspace: the charts' points.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Point {
    pub(crate) at: DateTime<Utc>,
    pub(crate) waiting: BTreeMap<Uuid, Priced>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    pub(crate) since: DateTime<Utc>,
    pub(crate) until: DateTime<Utc>,
    pub(crate) class: String,
    pub(crate) noncurrent_window: Window,
    pub(crate) workspaces: BTreeMap<Uuid, Workspace>,
    pub(crate) freed: Priced,
    pub(crate) waiting: Priced,
    pub(crate) days: Vec<Day>,
    pub(crate) points: Vec<Point>,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<Output> {
    let period = humantime::parse_duration(&args.since)
        .with_context(|| format!("--since {:?} is not a duration such as 30d, 7d or 12h", args.since))?;
    let prices = crate::money::prices()?;
    let pool = connect::database().await?;
    let mut conn = pool.acquire().await?;
    let until = Utc::now();
    let since = until - chrono::Duration::from_std(period).context("--since is too long")?;
    let report = gather(&mut conn, &prices, since, until).await?;
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

async fn gather(
    conn: &mut sqlx::PgConnection,
    prices: &Prices,
    since: DateTime<Utc>,
    until: DateTime<Utc>,
) -> anyhow::Result<Report> {
    let priced = |bytes: u64| Priced { bytes, money: prices.monthly(bytes) };
    let mut workspaces: BTreeMap<Uuid, Workspace> = BTreeMap::new();
    // A settlement's bytes: what a delete or purge freed, else the asset's size as it was decided on.
    let settled = sqlx::query!(
        r#"SELECT workspace_id AS "workspace_id!", action AS "action!", count(*) AS "count!",
                  coalesce(sum(CASE WHEN action IN ('delete', 'purge') THEN bytes_freed
                                    ELSE coalesce((asset_row->>'byte_size')::bigint, 0) END), 0)::bigint AS "bytes!",
                  coalesce(sum(bytes_freed), 0)::bigint AS "freed!"
             FROM settlement_events
            WHERE occurred_at >= $1 AND workspace_id IS NOT NULL
            GROUP BY 1, 2"#,
        since,
    )
    .fetch_all(&mut *conn)
    .await?;
    for row in settled {
        let ws = workspaces.entry(row.workspace_id).or_default();
        ws.settled.entry(row.action.clone()).or_default().add(row.count, row.bytes);
        if row.action == "delete" || row.action == "purge" {
            ws.freed.bytes += row.freed.max(0).unsigned_abs();
        }
    }
    let deferred = sqlx::query!(
        r#"SELECT workspace_id AS "workspace_id!", coalesce(evidence->'deferred'->>'why', 'unknown') AS "why!",
                  count(*) AS "count!"
             FROM settlement_events
            WHERE occurred_at >= $1 AND action = 'defer' AND workspace_id IS NOT NULL
            GROUP BY 1, 2"#,
        since,
    )
    .fetch_all(&mut *conn)
    .await?;
    for row in deferred {
        *workspaces.entry(row.workspace_id).or_default().deferred.entry(row.why).or_default() +=
            row.count.max(0).unsigned_abs();
    }
    let read = sqlx::query!(
        r#"SELECT workspace_id AS "workspace_id!", count(*) AS "count!"
             FROM settlement_events
            WHERE occurred_at >= $1 AND action = 'keep' AND evidence ? 'read' AND workspace_id IS NOT NULL
            GROUP BY 1"#,
        since,
    )
    .fetch_all(&mut *conn)
    .await?;
    for row in read {
        workspaces.entry(row.workspace_id).or_default().kept_because_read += row.count.max(0).unsigned_abs();
    }
    let days = sqlx::query!(
        r#"SELECT (occurred_at AT TIME ZONE 'UTC')::date AS "day!", action AS "action!", count(*) AS "count!"
             FROM settlement_events
            WHERE occurred_at >= $1 AND action IN ('keep', 'retire', 'delete', 'purge', 'restore', 'defer')
            GROUP BY 1, 2 ORDER BY 1, 2"#,
        since,
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut by_day: BTreeMap<NaiveDate, BTreeMap<String, u64>> = BTreeMap::new();
    for row in days {
        by_day.entry(row.day).or_default().insert(row.action, row.count.max(0).unsigned_abs());
    }
    let runs = sqlx::query!(
        r#"SELECT started_at, per_workspace, money FROM sweep_runs
            WHERE started_at >= $1 AND finished_at IS NOT NULL ORDER BY started_at"#,
        since,
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut points = Vec::new();
    for run in runs {
        for (id, counts) in run.per_workspace.as_object().into_iter().flatten() {
            let Ok(id) = id.parse::<Uuid>() else { continue };
            let ws = workspaces.entry(id).or_default();
            ws.claimed += counts["claimed"].as_u64().unwrap_or(0);
            if let Some(why) = counts["braked"].as_str() {
                ws.braked_passes += 1;
                ws.braked_because = Some(why.to_owned());
            }
        }
        if let Some(waiting) = run.money.as_ref().and_then(|m| m["waiting_per_workspace"].as_object()) {
            let waiting =
                waiting.iter().filter_map(|(id, p)| Some((id.parse().ok()?, priced(p["bytes"].as_u64()?)))).collect();
            points.push(Point { at: run.started_at, waiting });
        }
    }
    let adopted = sqlx::query_scalar!(
        r#"SELECT findings->'adopted' AS "adopted!" FROM reconcile_listings
            WHERE compared_at >= $1 AND findings->'adopted' IS NOT NULL"#,
        since,
    )
    .fetch_all(&mut *conn)
    .await?;
    for a in adopted.iter().filter_map(Value::as_array).flatten() {
        let Some(id) = a["workspace_id"].as_str().and_then(|w| w.parse().ok()) else { continue };
        workspaces
            .entry(id)
            .or_default()
            .adopted
            .add(a["keys"].as_i64().unwrap_or(0), a["bytes"].as_i64().unwrap_or(0));
    }
    let ledger = crate::money::ledger(&mut *conn, None).await?;
    for (id, holdings) in &ledger.workspaces {
        let ws = workspaces.entry(*id).or_default();
        ws.waiting = priced(holdings.waste_bytes());
        ws.held = priced(holdings.held.bytes);
    }
    for ws in workspaces.values_mut() {
        ws.freed = priced(ws.freed.bytes);
    }
    let freed = priced(workspaces.values().map(|w| w.freed.bytes).sum());
    let waiting = priced(workspaces.values().map(|w| w.waiting.bytes).sum());
    Ok(Report {
        since,
        until,
        class: prices.class.clone(),
        noncurrent_window: ledger.window,
        workspaces,
        freed,
        waiting,
        days: by_day.into_iter().map(|(day, actions)| Day { day, actions }).collect(),
        points,
    })
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
