//! What the bucket's bytes cost, per workspace, by what the sweeper knows of them: held (in use), released and
//! waiting, retired (restorable), noncurrent versions that deletes and purges left for undelete, and bytes no row
//! knows. The figures are the rows' own; `drift` compares their sum with what the bucket reports.

use std::collections::BTreeMap;

use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::figure::{Figure, figure};
use crate::prices::{Monthly, Prices};
use crate::window::Window;

/// One workspace's bytes by what the sweeper knows of them. An object two of its rows share counts once, in the
/// first of held, waiting, retired its rows are in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Holdings {
    /// Objects a `pending`, `attached` or `failed` row points at: in use, or not yet decided.
    pub held: Figure,
    /// Objects only `released` rows point at: waiting for their settle.
    pub waiting: Figure,
    /// Objects only `retired` rows point at: kept, restorable, until their purge.
    pub retired: Figure,
    /// Versions a delete or purge left behind, within the bucket's window: kept for undelete, and billed.
    pub noncurrent: Figure,
    /// Keys no row knew at the newest reconciliation (less those it adopted).
    pub unknown: Figure,
}

/// Every workspace's holdings, and the window they were counted with.
#[derive(Debug, Clone, Serialize)]
pub struct Ledger {
    /// How long noncurrent versions are kept.
    pub window: Window,
    /// Per workspace.
    pub workspaces: BTreeMap<Uuid, Holdings>,
}

/// Counts the holdings of `workspace`, or of every workspace, with `window`.
///
/// One workspace is counted exactly from its rows (its index). Every workspace at once is counted from what the
/// passes keep, so `status` and `plan` grow with the workspaces rather than with the rows: held, stored and retired
/// bytes as of the newest pass's fold (each object once), and released and waiting what is left of stored.
pub async fn ledger(conn: &mut PgConnection, workspace: Option<Uuid>, window: Window) -> Result<Ledger, sqlx::Error> {
    let mut workspaces: BTreeMap<Uuid, Holdings> = match workspace {
        Some(workspace) => exact(conn, workspace).await?,
        None => from_totals(conn).await?,
    };
    for (workspace_id, figure) in noncurrent(conn, workspace, window).await? {
        workspaces.entry(workspace_id).or_default().noncurrent = figure;
    }
    for (workspace_id, figure) in unknown(conn, workspace).await? {
        workspaces.entry(workspace_id).or_default().unknown = figure;
    }
    if let Some(workspace) = workspace {
        workspaces.entry(workspace).or_default();
    }
    Ok(Ledger { window, workspaces })
}

/// One workspace's held, waiting and retired objects, from its rows.
async fn exact(conn: &mut PgConnection, workspace: Uuid) -> Result<BTreeMap<Uuid, Holdings>, sqlx::Error> {
    let mut workspaces: BTreeMap<Uuid, Holdings> = BTreeMap::new();
    let rows = sqlx::query!(
        r#"WITH per_object AS (
               SELECT a.storage_key,
                      min(CASE a.state WHEN 'released' THEN 1 WHEN 'retired' THEN 2 ELSE 0 END) AS rank
                 FROM assets a
                WHERE a.workspace_id = $1
                GROUP BY 1)
           SELECT p.rank AS "rank!", count(*) AS "objects!", coalesce(sum(o.byte_size), 0)::bigint AS "bytes!"
             FROM per_object p JOIN stored_objects o ON o.storage_key = p.storage_key
            GROUP BY 1"#,
        workspace,
    )
    .fetch_all(&mut *conn)
    .await?;
    let holdings = workspaces.entry(workspace).or_default();
    for row in rows {
        let figure = match row.rank {
            1 => &mut holdings.waiting,
            2 => &mut holdings.retired,
            _ => &mut holdings.held,
        };
        figure.add(row.objects, row.bytes);
    }
    Ok(workspaces)
}

/// Every workspace's held, waiting and retired bytes, and its retired objects, from the totals each pass folds
/// (`workspace_usage`): what they cost to read grows with the workspaces, not with the assets. An object is retired
/// for a workspace when every row of the workspace pointing at it is retired, as [`exact`] counts it.
async fn from_totals(conn: &mut PgConnection) -> Result<BTreeMap<Uuid, Holdings>, sqlx::Error> {
    let mut workspaces: BTreeMap<Uuid, Holdings> = BTreeMap::new();
    let usage = sqlx::query!(
        r#"SELECT workspace_id, held_bytes, stored_bytes, coalesce(retired_objects, 0) AS "retired_objects!",
                  coalesce(retired_bytes, 0) AS "retired_bytes!"
             FROM workspace_usage"#
    )
    .fetch_all(&mut *conn)
    .await?;
    for row in usage {
        let holdings = workspaces.entry(row.workspace_id).or_default();
        holdings.held.add(0, row.held_bytes);
        holdings.retired.add(row.retired_objects, row.retired_bytes);
        holdings.waiting.add(0, row.stored_bytes - row.held_bytes - row.retired_bytes);
    }
    Ok(workspaces)
}

/// The versions deletes and purges left that the bucket still keeps, per workspace (of `workspace` alone, when given).
pub async fn noncurrent(
    conn: &mut PgConnection,
    workspace: Option<Uuid>,
    window: Window,
) -> Result<Vec<(Uuid, Figure)>, sqlx::Error> {
    // Only those a day or two either side of the window need the rule; the time index finds them.
    let rows = sqlx::query!(
        r#"SELECT workspace_id AS "workspace_id!", count(*) AS "objects!",
                  coalesce(sum(bytes_freed), 0)::bigint AS "bytes!"
             FROM settlement_events e
            WHERE asset_sweeper_left_a_version(e) AND workspace_id IS NOT NULL
              AND ($1::uuid IS NULL OR workspace_id = $1)
              AND ($2::integer IS NULL
                   OR (occurred_at > now() - make_interval(days => $2 + 2)
                       AND asset_sweeper_version_expires(occurred_at, $2) > (now() AT TIME ZONE 'UTC')))
            GROUP BY 1"#,
        workspace,
        window.days(),
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.workspace_id, figure(r.objects, r.bytes))).collect())
}

/// The keys no row knew at the newest reconciliation, less those it adopted, per workspace (of `workspace` alone,
/// when given).
pub async fn unknown(conn: &mut PgConnection, workspace: Option<Uuid>) -> Result<Vec<(Uuid, Figure)>, sqlx::Error> {
    let left = crate::found::newest(conn).await?.left_unknown();
    Ok(left.into_iter().filter(|(ws, _)| workspace.is_none_or(|w| w == *ws)).collect())
}

/// Every workspace's waste in bytes, from the totals the sweep keeps rather than the asset rows, so a pass can
/// afford it whatever the application's size: stored less held (as of the last fold), versions kept, keys no row
/// knows.
pub async fn waste(conn: &mut PgConnection, window: Window) -> Result<BTreeMap<Uuid, u64>, sqlx::Error> {
    let mut waste: BTreeMap<Uuid, u64> = BTreeMap::new();
    let usage =
        sqlx::query!(r#"SELECT workspace_id, greatest(stored_bytes - held_bytes, 0) AS "bytes!" FROM workspace_usage"#)
            .fetch_all(&mut *conn)
            .await?;
    for row in usage {
        *waste.entry(row.workspace_id).or_default() += row.bytes.unsigned_abs();
    }
    for (workspace_id, f) in noncurrent(conn, None, window).await?.into_iter().chain(unknown(conn, None).await?) {
        let bytes = waste.entry(workspace_id).or_default();
        *bytes = bytes.saturating_add(f.bytes);
    }
    waste.retain(|_, bytes| *bytes > 0);
    Ok(waste)
}

/// What one workspace's holdings cost a month.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Costs {
    /// Held bytes: in use.
    pub held: Monthly,
    /// Released bytes waiting for their settle.
    pub waiting: Monthly,
    /// Retired bytes, restorable.
    pub retired: Monthly,
    /// Versions kept for undelete.
    pub noncurrent: Monthly,
    /// Bytes no row knows.
    pub unknown: Monthly,
    /// Everything but what is held: what the sweeper exists to stop paying for.
    pub waste: Monthly,
}

impl Holdings {
    /// Prices these holdings at `prices`' class. Each figure is rounded once, at the cent, when shown.
    pub fn costs(&self, prices: &Prices) -> Costs {
        let held = prices.monthly(self.held.bytes);
        let waiting = prices.monthly(self.waiting.bytes);
        let retired = prices.monthly(self.retired.bytes);
        let noncurrent = prices.monthly(self.noncurrent.bytes);
        let unknown = prices.monthly(self.unknown.bytes);
        let waste = prices.monthly(self.waste_bytes());
        Costs { held, waiting, retired, noncurrent, unknown, waste }
    }

    /// Bytes of every kind but held.
    pub fn waste_bytes(&self) -> u64 {
        [self.waiting, self.retired, self.noncurrent, self.unknown].iter().map(|f| f.bytes).sum()
    }

    fn plus(&self, other: &Holdings) -> Holdings {
        let add = Figure::plus;
        Holdings {
            held: add(self.held, other.held),
            waiting: add(self.waiting, other.waiting),
            retired: add(self.retired, other.retired),
            noncurrent: add(self.noncurrent, other.noncurrent),
            unknown: add(self.unknown, other.unknown),
        }
    }

    /// One line for a person: each kind's bytes and money.
    pub fn describe(&self, prices: &Prices) -> String {
        let c = self.costs(prices);
        let part = |name: &str, f: Figure, m: Monthly| format!("{name} {} B {}", f.bytes, m);
        format!(
            "waste {} ({}); {}; {}; {}; {}; {}",
            c.waste,
            crate::prices::gb(self.waste_bytes()),
            part("held", self.held, c.held),
            part("released and waiting", self.waiting, c.waiting),
            part("retired (restorable)", self.retired, c.retired),
            part("versions kept for undelete", self.noncurrent, c.noncurrent),
            part("bytes no row knows", self.unknown, c.unknown),
        )
    }
}

impl Ledger {
    /// Every workspace's holdings added up.
    pub fn total(&self) -> Holdings {
        self.workspaces.values().fold(Holdings::default(), |sum, h| sum.plus(h))
    }

    /// The ledger as JSON: per workspace its figures and their money, with the price's class and the window.
    pub fn priced(&self, prices: &Prices) -> serde_json::Value {
        let entry = |h: &Holdings| serde_json::json!({ "bytes": h, "money": h.costs(prices) });
        serde_json::json!({
            "class": prices.class,
            "price_per_gb_month_micros": prices.per_gb_month(&prices.class),
            "noncurrent_window": self.window,
            "workspaces": self.workspaces.iter().map(|(ws, h)| (ws.to_string(), entry(h))).collect::<serde_json::Map<_, _>>(),
            "total": entry(&self.total()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prices::GB;

    #[test]
    fn waste_is_everything_but_what_is_held_priced_at_the_class() {
        let figure = |bytes| Figure { objects: 1, bytes };
        let h = Holdings {
            held: figure(100 * GB),
            waiting: figure(10 * GB),
            retired: figure(20 * GB),
            noncurrent: figure(30 * GB),
            unknown: figure(40 * GB),
        };
        let costs = h.costs(&Prices::default());
        assert_eq!(
            [costs.held, costs.waiting, costs.retired, costs.noncurrent, costs.unknown, costs.waste]
                .map(Monthly::cents),
            [230, 23, 46, 69, 92, 230]
        );
        let line = h.describe(&Prices::default());
        assert!(line.starts_with("waste $2.30/month (100.00 GB); held 107374182400 B $2.30/month"), "{line}");
    }
}
