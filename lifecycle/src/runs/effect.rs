//! Whether the sweeper is working, judged by its effect rather than by its passes running: the oldest overdue asset,
//! due bytes growing while nothing settles, and passes whose claims lapsed without a settlement (the money freed and
//! waiting is the ledger's). Read at the end of every pass that held the lock, refused ones included (an overdue asset
//! grows older while the schema check refuses), into the run row (`sweep_runs.effect`) and the metrics line; `status`
//! reads it back through [`Effect`].

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use uuid::Uuid;

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
