//! Whether the sweeper is working, judged by its effect rather than by its passes running: the money freed since the
//! previous pass and still waiting, the oldest overdue asset, due bytes growing while nothing settles, and passes
//! whose claims lapsed without a settlement. Read at the end of every pass that held the lock, refused ones included (an
//! overdue asset grows older while the schema check refuses), into the run row and the metrics line.

use chrono::{DateTime, Days, NaiveDate, Utc};
use lifecycle::costs::Window;
use platform::money::{Monthly, Prices};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use std::collections::BTreeMap;
use uuid::Uuid;

/// Bytes and what they cost a month.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Priced {
    /// Bytes.
    pub bytes: u64,
    /// Their cost a month, at the price table's class.
    pub money: Monthly,
}

impl Priced {
    fn of(bytes: u64, prices: &Prices) -> Self {
        Priced { bytes, money: prices.monthly(bytes) }
    }
}

/// The bytes deletes and purges freed since the previous pass, and when each day's stop being billed.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Freed {
    /// Settlements from this time on are counted (the previous pass's start).
    pub since: Option<DateTime<Utc>>,
    /// All of them: what the bucket stops billing a month once their versions expire.
    #[serde(flatten)]
    pub total: Priced,
    /// GB-months a month no longer paid for, once the versions are gone.
    pub gb_months: f64,
    /// Per day the versions expire (S3 stops billing them): `None` is never, with no rule that expires them.
    pub by_day: BTreeMap<String, Priced>,
    /// Per workspace.
    pub per_workspace: BTreeMap<Uuid, Priced>,
}

/// The money of one pass: freed since the previous one, and still waiting.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Money {
    /// The storage class the figures are priced at, and its price per GB-month in millionths of a dollar.
    pub class: String,
    /// Freed since the previous pass.
    pub freed: Freed,
    /// Everything but held bytes, now: released, retired, versions kept, bytes no row knows.
    pub waiting: Priced,
    /// Per workspace.
    pub waiting_per_workspace: BTreeMap<Uuid, Priced>,
}

/// The oldest asset that is due and not settled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overdue {
    /// The asset.
    pub asset_id: Uuid,
    /// When it became due.
    pub due_at: DateTime<Utc>,
    /// How long ago, in seconds.
    pub seconds: u64,
}

/// Claims whose lease ran out with no settlement: their messages were sent, and in the whole lease (every delivery
/// the queue allows one message, and more) the consumer recorded nothing (a settle ends the lease, a deferral too).
/// Read when a pass begins, before it claims such assets again.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lapsed {
    /// How many.
    pub assets: u64,
    /// The oldest lapsed lease's end.
    pub oldest_lease_end: Option<DateTime<Utc>>,
    /// One of them, to `explain`.
    pub example: Option<Uuid>,
}

/// Reads the claims whose lease lapsed unsettled.
pub async fn lapsed(conn: &mut PgConnection) -> Result<Lapsed, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT count(*) AS "assets!", min(leased_until) AS oldest,
                  (SELECT id FROM assets WHERE lease_token IS NOT NULL AND leased_until <= now()
                    ORDER BY leased_until, id LIMIT 1) AS example
             FROM assets
            -- A lease is only ever on a due row that has not failed: the claim's index finds them.
            WHERE due_at IS NOT NULL AND state <> 'failed' AND lease_token IS NOT NULL AND leased_until <= now()"#
    )
    .fetch_one(conn)
    .await?;
    Ok(Lapsed { assets: row.assets.max(0).unsigned_abs(), oldest_lease_end: row.oldest, example: row.example })
}

/// What the effect alarms read, kept in the run row so the next pass can tell growth from a level.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Effect {
    /// Assets due now (not failed), claimed or not.
    pub due_assets: u64,
    /// Their bytes.
    pub due_bytes: u64,
    /// The oldest of them.
    pub oldest_overdue: Option<Overdue>,
    /// Settlements the consumer recorded since the previous pass began.
    pub settled_since_previous: u64,
    /// Passes, this one included, in which due bytes grew since the last settlement recorded (a pass with no growth
    /// adds none, and any settlement starts the count again).
    pub growing_unsettled_passes: u32,
    /// Claims whose lease ran out with no settlement, as the pass found them before it claimed.
    pub lapsed: Lapsed,
}

/// The previous pass's effect and start, if one recorded them.
async fn previous(conn: &mut PgConnection, run_id: Uuid) -> Result<Option<(DateTime<Utc>, Effect)>, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT started_at, effect AS "effect!" FROM sweep_runs
            WHERE id <> $1 AND effect ? 'due_bytes' ORDER BY started_at DESC LIMIT 1"#,
        run_id,
    )
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.and_then(|r| Some((r.started_at, serde_json::from_value(r.effect).ok()?))))
}

/// Reads the pass's effect, with the lapsed claims it found when it began.
pub async fn effect(conn: &mut PgConnection, run_id: Uuid, lapsed: Lapsed) -> Result<Effect, sqlx::Error> {
    let previous = previous(conn, run_id).await?;
    let due = sqlx::query!(
        r#"SELECT count(*) AS "assets!", coalesce(sum(byte_size), 0)::bigint AS "bytes!",
                  (SELECT id FROM assets WHERE due_at <= now() AND state <> 'failed' ORDER BY due_at, id LIMIT 1)
                      AS oldest,
                  min(due_at) AS oldest_due_at, now() AS "now!"
             FROM assets WHERE due_at <= now() AND state <> 'failed'"#
    )
    .fetch_one(&mut *conn)
    .await?;
    let oldest_overdue = match (due.oldest, due.oldest_due_at) {
        (Some(asset_id), Some(due_at)) => {
            Some(Overdue { asset_id, due_at, seconds: (due.now - due_at).num_seconds().max(0).unsigned_abs() })
        }
        _ => None,
    };
    let due_bytes = due.bytes.max(0).unsigned_abs();
    let since = previous.as_ref().map(|(started, _)| *started);
    let settled = sqlx::query_scalar!(
        r#"SELECT count(*) AS "settled!" FROM settlement_events
            WHERE ($1::timestamptz IS NULL OR occurred_at >= $1)
              AND action IN ('keep', 'retire', 'delete', 'purge', 'defer')"#,
        since,
    )
    .fetch_one(&mut *conn)
    .await?
    .unsigned_abs();
    let growing_unsettled_passes = match &previous {
        None => 0,
        Some(_) if settled > 0 => 0,
        Some((_, before)) if due_bytes > before.due_bytes => before.growing_unsettled_passes.saturating_add(1),
        Some((_, before)) => before.growing_unsettled_passes,
    };
    Ok(Effect {
        due_assets: due.assets.max(0).unsigned_abs(),
        due_bytes,
        oldest_overdue,
        settled_since_previous: settled,
        growing_unsettled_passes,
        lapsed,
    })
}

/// The pass's money: what deletes and purges freed since the previous pass (by the day their versions expire, with
/// `window`) and what waits.
pub async fn money(
    conn: &mut PgConnection,
    run_id: Uuid,
    window: Window,
    prices: &Prices,
) -> Result<Money, sqlx::Error> {
    let since = sqlx::query_scalar!(
        "SELECT started_at FROM sweep_runs WHERE id <> $1 AND money IS NOT NULL ORDER BY started_at DESC LIMIT 1",
        run_id,
    )
    .fetch_optional(&mut *conn)
    .await?;
    let rows = sqlx::query!(
        r#"SELECT workspace_id AS "workspace_id!", (occurred_at AT TIME ZONE 'UTC')::date AS "day!",
                  sum(bytes_freed)::bigint AS "bytes!"
             FROM settlement_events
            WHERE action IN ('delete', 'purge') AND bytes_freed > 0 AND workspace_id IS NOT NULL
              AND ($1::timestamptz IS NULL OR occurred_at >= $1)
              AND occurred_at < (SELECT started_at FROM sweep_runs WHERE id = $2)
            GROUP BY 1, 2"#,
        since,
        run_id,
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut freed = Freed { since, ..Freed::default() };
    let mut by_day: BTreeMap<String, u64> = BTreeMap::new();
    let mut per_workspace: BTreeMap<Uuid, u64> = BTreeMap::new();
    for row in rows {
        let bytes = row.bytes.max(0).unsigned_abs();
        *by_day.entry(stops_billing(window, row.day)).or_default() += bytes;
        *per_workspace.entry(row.workspace_id).or_default() += bytes;
    }
    freed.total = Priced::of(by_day.values().sum(), prices);
    #[allow(clippy::cast_precision_loss)] // GB to two decimals, for a person and a chart
    let gb_months = freed.total.bytes as f64 / platform::money::GB as f64;
    freed.gb_months = (gb_months * 100.0).round() / 100.0;
    freed.by_day = by_day.into_iter().map(|(day, bytes)| (day, Priced::of(bytes, prices))).collect();
    freed.per_workspace = per_workspace.into_iter().map(|(ws, bytes)| (ws, Priced::of(bytes, prices))).collect();
    let waste = lifecycle::costs::waste(conn, window).await?;
    let waiting = Priced::of(waste.values().sum(), prices);
    let waiting_per_workspace = waste.into_iter().map(|(ws, bytes)| (ws, Priced::of(bytes, prices))).collect();
    Ok(Money { class: prices.class.clone(), freed, waiting, waiting_per_workspace })
}

/// The day S3 stops billing a version a delete made noncurrent on `day`: the window's days later, at the next
/// midnight UTC (`Window::expires`); "never" without a rule that expires it.
fn stops_billing(window: Window, day: NaiveDate) -> String {
    match window {
        Window::Days(days) => day
            .checked_add_days(Days::new(u64::try_from(days).unwrap_or(0).saturating_add(1)))
            .map_or_else(|| "never".to_owned(), |d| d.to_string()),
        Window::Forever | Window::Unknown => "never".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_freed_on_a_day_stops_being_billed_its_window_and_a_day_later() {
        let day = NaiveDate::from_ymd_opt(2026, 12, 3).expect("day");
        assert_eq!(stops_billing(Window::Days(30), day), "2027-01-03");
        assert_eq!(stops_billing(Window::Forever, day), "never");
        // The same as the expiry of any time of that day.
        let at = day.and_hms_opt(23, 59, 59).expect("time").and_utc();
        assert_eq!(Window::Days(30).expires(at).map(|t| t.date_naive().to_string()), Some("2027-01-03".to_owned()));
    }
}
