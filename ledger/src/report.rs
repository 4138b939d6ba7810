//! What the sweeper did over a period, for a person who pays the bill (`asset-sweeper report`): per workspace what was
//! found, freed, retired, restored and held (and why), with the money freed and still waiting, and each pass's
//! waiting money for the charts. Read from the audit trail, the run rows (through [`Claims`] and [`Money`]) and
//! reconciliation's findings (through [`Found`]); the CLI renders it as text or as a page. Reads only.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDate, Utc};
use lifecycle::runs::Claims;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::found::Found;
use crate::freed::Money;
use crate::prices::{Priced, Prices};
use crate::window::Window;

/// Settlements (or keys) and their bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    /// How many.
    pub count: u64,
    /// Their bytes.
    pub bytes: u64,
}

impl Tally {
    fn add(&mut self, count: i64, bytes: i64) {
        self.count += count.max(0).unsigned_abs();
        self.bytes += bytes.max(0).unsigned_abs();
    }
}

/// One workspace over the period.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Workspace {
    /// Assets the sweep sent for settlement.
    pub claimed: u64,
    /// Keys no row knew, adopted by reconciliation.
    pub adopted: Tally,
    /// Settlements by action (keep, retire, delete, purge, restore, defer, …).
    pub settled: BTreeMap<String, Tally>,
    /// Bytes deletes and purges freed: billed no more once their versions expire.
    pub freed: Priced,
    /// Deferrals by why (grace, census, window, pinned, bucket …).
    pub deferred: BTreeMap<String, u64>,
    /// Retired files kept because the access logs saw them read since their retirement.
    pub kept_because_read: u64,
    /// Passes the brake held it in, and the newest reason.
    pub braked_passes: u64,
    /// The newest reason it was braked for.
    pub braked_because: Option<String>,
    /// Its waste now: released, retired, versions kept, bytes no row knows.
    pub waiting: Priced,
    /// Its held bytes now (in use).
    pub held: Priced,
}

/// Settlements of one day, by action.
#[derive(Debug, Clone, Serialize)]
pub struct Day {
    /// The day (UTC).
    pub day: NaiveDate,
    /// Settlements by action.
    pub actions: BTreeMap<String, u64>,
}

/// One pass's waiting money per workspace: the charts' points.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// When the pass started.
    pub at: DateTime<Utc>,
    /// Each workspace's waiting bytes then, priced now.
    pub waiting: BTreeMap<Uuid, Priced>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The period's start.
    pub since: DateTime<Utc>,
    /// Its end.
    pub until: DateTime<Utc>,
    /// The storage class the money is priced at.
    pub class: String,
    /// How long the bucket keeps noncurrent versions.
    pub noncurrent_window: Window,
    /// Per workspace.
    pub workspaces: BTreeMap<Uuid, Workspace>,
    /// Freed over the period, every workspace.
    pub freed: Priced,
    /// Waiting now, every workspace.
    pub waiting: Priced,
    /// Settlements per day.
    pub days: Vec<Day>,
    /// Each pass's waiting money: the charts' points.
    pub points: Vec<Point>,
}

/// The report of `since` to `until`, priced at `prices`.
pub async fn gather(
    conn: &mut sqlx::PgConnection,
    prices: &Prices,
    since: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Result<Report, sqlx::Error> {
    let priced = |bytes: u64| Priced::of(bytes, prices);
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
        for (id, claims) in Claims::of(&run.per_workspace) {
            let ws = workspaces.entry(id).or_default();
            ws.claimed += claims.claimed;
            if let Some(why) = claims.braked {
                ws.braked_passes += 1;
                ws.braked_because = Some(why);
            }
        }
        if let Some(money) = run.money.as_ref().and_then(|m| Money::deserialize(m).ok()) {
            let waiting = money.waiting_per_workspace.into_iter().map(|(id, p)| (id, priced(p.bytes))).collect();
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
    // Read as reconciliation wrote them; an entry this build cannot read is passed over.
    for a in adopted.iter().filter_map(Value::as_array).flatten().filter_map(|a| Found::deserialize(a).ok()) {
        workspaces.entry(a.workspace_id).or_default().adopted.add(a.keys, a.bytes);
    }
    let window = crate::window::window(&mut *conn).await?;
    let ledger = crate::holdings::ledger(&mut *conn, None, window).await?;
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
