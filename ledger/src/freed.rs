//! The money of one pass, for its run row (`sweep_runs.money`), the metrics line, `status` and `report`: what deletes
//! and purges freed since the previous pass, by the day S3 stops billing their versions, and what still waits. The
//! sweep writes it through [`Money`] and the readers read it back through the same type.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDate, Utc};
use lifecycle::runs::Effect;
use platform::audit::AuditAction;
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::prices::{GB, Priced, Prices};
use crate::window::Window;

/// The bytes deletes and purges freed since the previous pass, and when each day's stop being billed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
             FROM settlement_events e
            WHERE asset_sweeper_left_a_version(e) AND workspace_id IS NOT NULL
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
    let gb_months = freed.total.bytes as f64 / GB as f64;
    freed.gb_months = (gb_months * 100.0).round() / 100.0;
    freed.by_day = by_day.into_iter().map(|(day, bytes)| (day, Priced::of(bytes, prices))).collect();
    freed.per_workspace = per_workspace.into_iter().map(|(ws, bytes)| (ws, Priced::of(bytes, prices))).collect();
    let waste = crate::holdings::waste(conn, window).await?;
    let waiting = Priced::of(waste.values().sum(), prices);
    let waiting_per_workspace = waste.into_iter().map(|(ws, bytes)| (ws, Priced::of(bytes, prices))).collect();
    Ok(Money { class: prices.class.clone(), freed, waiting, waiting_per_workspace })
}

/// Retirements, deletes and purges of the last day, by action: what `status` says was freed lately.
#[derive(Debug, Clone, Serialize)]
pub struct Settled {
    /// Retire, delete or purge.
    pub action: AuditAction,
    /// How many assets.
    pub assets: i64,
    /// The bytes deletes and purges freed; for retirements, the retired assets' size.
    pub bytes: i64,
}

/// The last day's retirements, deletes and purges.
pub async fn last_day(conn: &mut PgConnection) -> Result<Vec<Settled>, sqlx::Error> {
    sqlx::query_as!(
        Settled,
        r#"SELECT action AS "action: AuditAction", count(*) AS "assets!",
                  coalesce(sum(CASE WHEN action = $1 THEN coalesce((asset_row->>'byte_size')::bigint, 0)
                                    ELSE bytes_freed END), 0)::bigint AS "bytes!"
             FROM settlement_events
            WHERE occurred_at > now() - interval '1 day' AND action = ANY ($2)
            GROUP BY action ORDER BY action"#,
        AuditAction::Retire as AuditAction,
        &[AuditAction::Retire, AuditAction::Delete, AuditAction::Purge] as &[AuditAction],
    )
    .fetch_all(conn)
    .await
}

/// The newest pass that read its effect, with its money.
#[derive(Debug, Clone)]
pub struct Newest {
    /// The pass.
    pub id: Uuid,
    /// Its `effect` as stored (the figures, the drift it saw): the page's JSON.
    pub stored: serde_json::Value,
    /// Its effect, read as the sweep wrote it.
    pub effect: Option<Effect>,
    /// Its money, read as the sweep wrote it.
    pub money: Option<Money>,
}

/// The newest pass that read its effect, and the newest pass that tried and could not (its id and the error), if
/// that one is the newest to have tried at all.
pub async fn newest(conn: &mut PgConnection) -> Result<(Option<Newest>, Option<(Uuid, String)>), sqlx::Error> {
    // `due_bytes` is `Effect`'s, `error` the run record's (their test holds both to what the sweep writes).
    let last = sqlx::query!(
        r#"SELECT id, money, effect AS "effect!" FROM sweep_runs WHERE effect ? 'due_bytes'
            ORDER BY started_at DESC LIMIT 1"#
    )
    .fetch_optional(&mut *conn)
    .await?;
    let failed = sqlx::query!(
        r#"SELECT id, coalesce(effect->>'error', '') AS "error!" FROM sweep_runs WHERE effect IS NOT NULL
            ORDER BY started_at DESC LIMIT 1"#
    )
    .fetch_optional(&mut *conn)
    .await?
    .filter(|f| !f.error.is_empty())
    .map(|f| (f.id, f.error));
    let newest = last.map(|l| Newest {
        id: l.id,
        effect: Effect::deserialize(&l.effect).ok(),
        money: l.money.as_ref().and_then(|m| Money::deserialize(m).ok()),
        stored: l.effect,
    });
    Ok((newest, failed))
}

/// The day S3 stops billing a version a delete made noncurrent on `day`, for grouping; "never" without a rule that
/// expires it.
fn stops_billing(window: Window, day: NaiveDate) -> String {
    window
        .stops_billing(day.and_time(chrono::NaiveTime::MIN).and_utc())
        .map_or_else(|| "never".to_owned(), |d| d.to_string())
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
