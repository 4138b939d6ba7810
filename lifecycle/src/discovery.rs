//! Discovery (invariant 12): an asset nothing refers to is found even when the application never released it.
//!
//! Each sweep pass, after the schema check has validated the reference map and before the brake and the claim,
//! walks the unscheduled assets (`attached`, or `released` without a due time) in id order from a persisted
//! cursor, a batch at a time, and asks every reference source at once which of the batch's assets it refers to.
//! Those none refers to, and whose grace floor has ended, are made due: `released`, due when their grace floor
//! ended, with a `discovered` audit event. Discovery only schedules: the consumer's recheck under lock still
//! decides, so an asset referred to again meanwhile is kept. What it makes due counts in the brake like anything
//! else due, so a broken source that makes a workspace look unreferenced trips the brake before anything retires.

use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;
use sqlx::{Connection, PgConnection, PgPool};
use uuid::Uuid;

use platform::audit::{self, AuditAction, Event};
use platform::step::{Share, Step};
use platform::{AssetId, WorkspaceId};
use schema::batch;
use schema::{ReferenceMap, SourceKind};

use crate::assets;

/// How far a pass may go.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// No batch starts after this.
    pub until: Instant,
    /// The most assets this pass looks at.
    pub max_scanned: u64,
    /// Assets one batch looks at.
    pub batch_size: u32,
    /// The grace period: an asset written more recently is not looked at (invariant 3).
    pub grace: Duration,
    /// How long after a cycle ends the next one begins: no rest when this is zero (a pass that deleted records walks,
    /// so what they were the last reference to is found in the same pass).
    pub rest: Duration,
}

/// Which pass discovers, and on which verdict: what each `discovered` event names.
#[derive(Debug, Clone, Copy)]
pub struct Pass {
    /// The sweep run.
    pub run_id: Uuid,
    /// The schema verdict whose reference map the batches asked.
    pub verdict: i64,
}

/// Why discovery stopped in a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// The walk reached the last asset: the next cycle starts from the first once its rest is over.
    CycleComplete,
    /// Its share of the pass's time ran out.
    TimeShare,
    /// It looked at its most assets for one pass.
    Cap,
    /// A declared JSON source the census has not read once since it was declared or changed: it made nothing due
    /// (`waiting_for` names the sources).
    CensusUnread,
    /// The last cycle ended less than `DISCOVERY_CYCLE_INTERVAL` ago: the next one begins after that.
    Resting,
}

/// What discovery did in one pass, and where its cycle stands: the run record's `discovery`.
#[derive(Debug, Clone, Serialize)]
pub struct Progress {
    /// The cycle it worked on.
    pub cycle: i64,
    /// When that cycle's first batch ran.
    pub cycle_started_at: Option<String>,
    /// Statements that asked the sources, in this pass.
    pub batches: u64,
    /// Assets looked at in this pass.
    pub scanned: u64,
    /// Of those, made due because nothing referred to them.
    pub found: u64,
    /// Where the next batch starts: the first asset id not yet looked at in the cycle.
    pub cursor: Uuid,
    /// Assets looked at so far in the cycle.
    pub cycle_scanned: i64,
    /// Assets made due so far in the cycle.
    pub cycle_found: i64,
    /// The longest batch of this pass (reading and asking), in milliseconds.
    pub longest_batch_ms: u64,
    /// How long the last complete cycle took, in seconds.
    pub last_cycle_seconds: Option<f64>,
    /// Why it stopped.
    pub stopped: Stop,
    /// The declared JSON sources it waited for ([`Stop::CensusUnread`]), `schema.table.column`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waiting_for: Vec<String>,
}

/// One asset no source refers to.
#[derive(Debug, Clone, Serialize)]
pub struct Found {
    /// The asset.
    pub asset_id: AssetId,
    /// Its workspace.
    pub workspace_id: WorkspaceId,
    /// Its stored object.
    pub storage_key: String,
    /// Its size in bytes.
    pub byte_size: i64,
    /// Its state when it was found (`attached` or `released`).
    pub state: String,
}

/// Walks batch after batch from the cursor until the cycle ends, the time share is spent or the per-pass cap is
/// reached, making due what no source of `map` refers to. Each batch is one read-only statement asking the
/// sources, then one short transaction that schedules what it found and moves the cursor; nothing is held
/// between batches.
pub async fn advance(pool: &PgPool, map: &ReferenceMap, budget: Budget, pass: Pass) -> Result<Progress, sqlx::Error> {
    fail::fail_point!("discovery::advance", |_| Err(sqlx::Error::Protocol("injected: discovery failed".into())));
    let mut conn = pool.acquire().await?;
    // Between cycles, the rest: a walk of every asset every pass finds an unreferenced one up to the rest sooner, at
    // the cost of a statement a few thousand assets of the application's database every fifteen minutes. A cycle
    // that looked at no asset (a new install's first pass) costs nothing to walk again: the first assets are found
    // at once.
    let start = sqlx::query!(
        r#"SELECT cycle, next_id,
                  coalesce(cycle_started_at IS NULL AND last_cycle_scanned > 0
                           AND last_cycle_completed_at > now() - make_interval(secs => $1), false) AS "resting!"
             FROM discovery_state"#,
        budget.rest.as_secs_f64()
    )
    .fetch_one(&mut *conn)
    .await?;
    let (cycle, mut cursor, resting) = (start.cycle, start.next_id, start.resting);
    let (mut batches, mut scanned, mut found) = (0u64, 0u64, 0u64);
    let mut longest = Duration::ZERO;
    let waiting_for = unread_sources(map);
    let stopped = loop {
        if resting {
            break Stop::Resting;
        }
        if !waiting_for.is_empty() {
            break Stop::CensusUnread;
        }
        if scanned >= budget.max_scanned {
            break Stop::Cap;
        }
        if Instant::now() >= budget.until {
            break Stop::TimeShare;
        }
        let limit = budget.max_scanned.saturating_sub(scanned).min(u64::from(budget.batch_size.max(1)));
        let started = Instant::now();
        // One read-only transaction: the batch and the question about it see the same snapshot.
        let mut read = conn.begin().await?;
        platform::db::read_only(&mut read).await?;
        batch::without_jit(&mut read).await?;
        let ids = batch(&mut read, cursor, limit, budget.grace).await?;
        let unreferenced = batch::unreferenced(&mut read, map, &ids).await?;
        read.commit().await?;
        // The walk ends when a batch comes back short, or at the very last id there can be.
        let next = if (ids.len() as u64) < limit { None } else { ids.last().and_then(|l| successor(*l)) };
        injected_pause(&ids);
        let mut tx = platform::db::begin_as_sweeper(pool).await?;
        let scheduled = schedule(&mut tx, &unreferenced, budget.grace, cycle, map, pass).await?;
        move_cursor(&mut tx, cycle, next, ids.len(), scheduled).await?;
        tx.commit().await?;
        longest = longest.max(started.elapsed());
        batches += 1;
        scanned += ids.len() as u64;
        found += scheduled;
        match next {
            Some(next) => cursor = next,
            None => break Stop::CycleComplete,
        }
    };
    let state = sqlx::query!(
        "SELECT cycle, cycle_started_at::text AS started, next_id, scanned, found, last_cycle_seconds
           FROM discovery_state"
    )
    .fetch_one(&mut *conn)
    .await?;
    // A completed cycle has moved on: report the one this pass worked on, and where the next one starts.
    let (cycle_scanned, cycle_found, started) = if matches!(stopped, Stop::CycleComplete | Stop::Resting) {
        let last = sqlx::query!(
            "SELECT last_cycle_started_at::text AS started, last_cycle_scanned, last_cycle_found FROM discovery_state"
        )
        .fetch_one(&mut *conn)
        .await?;
        (last.last_cycle_scanned.unwrap_or(0), last.last_cycle_found.unwrap_or(0), last.started)
    } else {
        (state.scanned, state.found, state.started)
    };
    Ok(Progress {
        cycle,
        cycle_started_at: started,
        batches,
        scanned,
        found,
        cursor: state.next_id,
        cycle_scanned,
        cycle_found,
        longest_batch_ms: u64::try_from(longest.as_millis()).unwrap_or(u64::MAX),
        last_cycle_seconds: state.last_cycle_seconds,
        stopped,
        waiting_for,
    })
}

/// The declared JSON sources the census has not read whole since they were declared or changed. An id written at
/// a declared path in mixed case before the reference guard existed is a reference the recheck matches only once
/// its spelling is noted, by the census or the guard; until the census has read the source once, discovery would
/// take such an asset for unreferenced. So it makes nothing due while any is unread (docs/design.md, "Discovery").
pub fn unread_sources(map: &ReferenceMap) -> Vec<String> {
    // A verdict recorded before the census existed proves no column.
    // (A census too slow for RETENTION proves no column for deleting, but it did read each source once.)
    let none_proven =
        map.unproven.iter().any(|u| u.starts_with("every column") && !u.starts_with(schema::census::TOO_SLOW));
    map.sources
        .iter()
        .filter(|s| matches!(s.kind, SourceKind::Json { .. }))
        .map(|s| format!("{}.{}.{}", s.schema, s.table, s.column))
        .filter(|name| none_proven || map.unproven.contains(name))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// What the next discovery batches would find, from the cursor, looking at up to `limit` assets: the same batches
/// and the same question as a pass, writing nothing. The second value is how many assets were looked at.
pub async fn preview(
    conn: &mut PgConnection,
    map: &ReferenceMap,
    limit: u64,
    batch_size: u32,
    grace: Duration,
) -> Result<(Vec<Found>, u64), sqlx::Error> {
    let mut cursor = sqlx::query_scalar!("SELECT next_id FROM discovery_state").fetch_one(&mut *conn).await?;
    batch::without_jit(conn).await?;
    let (mut scanned, mut unreferenced) = (0u64, Vec::new());
    while scanned < limit {
        let want = (limit - scanned).min(u64::from(batch_size.max(1)));
        let ids = batch(conn, cursor, want, grace).await?;
        scanned += ids.len() as u64;
        unreferenced.extend(batch::unreferenced(conn, map, &ids).await?);
        match ids.last().and_then(|l| successor(*l)) {
            Some(next) if ids.len() as u64 == want => cursor = next,
            _ => break,
        }
    }
    let found = sqlx::query_as!(
        Found,
        r#"SELECT a.id AS "asset_id: AssetId", a.workspace_id AS "workspace_id: WorkspaceId", a.storage_key,
                  a.byte_size, a.state
             FROM assets a WHERE a.id = ANY ($1) ORDER BY a.workspace_id, a.id"#,
        &unreferenced,
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok((found, scanned))
}

/// Where discovery stands, for the operator's status page.
#[derive(Debug, Clone, Serialize)]
pub struct Standing {
    /// The cycle under way (or about to start).
    pub cycle: i64,
    /// When its first batch ran; `None` until it has.
    pub cycle_started_at: Option<String>,
    /// Assets looked at so far in this cycle.
    pub scanned: i64,
    /// Assets made due so far in this cycle.
    pub found: i64,
    /// How much of this cycle's walk is done: what it has looked at against that and what is left past the
    /// cursor, in percent.
    pub percent_done: f64,
    /// When the last complete cycle ended.
    pub last_cycle_completed_at: Option<String>,
    /// How long it took, in seconds.
    pub last_cycle_seconds: Option<f64>,
    /// How many assets it made due.
    pub last_cycle_found: Option<i64>,
}

/// Reads where discovery stands. Counts the unscheduled assets past the cursor: one read of the assets' index.
pub async fn standing(conn: &mut PgConnection) -> Result<Standing, sqlx::Error> {
    sqlx::query_as!(
        Standing,
        r#"SELECT s.cycle, s.cycle_started_at::text AS cycle_started_at, s.scanned, s.found,
                  coalesce(100.0 * s.scanned / nullif(s.scanned + left_over.n, 0), 100)::float8 AS "percent_done!",
                  s.last_cycle_completed_at::text AS last_cycle_completed_at, s.last_cycle_seconds,
                  s.last_cycle_found
             FROM discovery_state s
            CROSS JOIN LATERAL (SELECT count(*) AS n FROM assets a
                                 WHERE a.id >= s.next_id AND asset_sweeper_unscheduled(a)) left_over"#
    )
    .fetch_one(conn)
    .await
}

/// The next `limit` unscheduled assets from `from` on, in id order, not written within the grace period (such an
/// asset is never made due, so it is not looked at: the next cycle will). Only the asset row's own writes are read
/// here; its stored object's (an upload reusing the bytes) are checked when scheduling, by the whole grace formula:
/// reading each asset's object here cost 54 µs an asset at 1 000 000, twice the rest of the batch.
async fn batch(conn: &mut PgConnection, from: Uuid, limit: u64, grace: Duration) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar!(
        "SELECT a.id FROM assets a
          WHERE a.id >= $1 AND asset_sweeper_unscheduled(a)
            AND asset_sweeper_row_grace_ends(a, $3 * interval '1 second') <= now()
          ORDER BY a.id
          LIMIT $2",
        from,
        i64::try_from(limit).unwrap_or(i64::MAX),
        grace.as_secs_f64(),
    )
    .fetch_all(conn)
    .await
}

/// Makes `ids` due, those still unscheduled and past their grace floor (the application may have written since
/// they were asked about), each with its `discovered` event; returns how many. Written as the sweeper's own
/// change, so the grace floor stays where the application's last write put it, and due when it ended.
async fn schedule(
    tx: &mut PgConnection,
    ids: &[Uuid],
    grace: Duration,
    cycle: i64,
    map: &ReferenceMap,
    pass: Pass,
) -> Result<u64, sqlx::Error> {
    if ids.is_empty() {
        return Ok(0);
    }
    let made_due = assets::discover(&mut *tx, ids, grace).await?;
    let events: Vec<Event<'_>> = made_due
        .iter()
        .map(|m| {
            let evidence = json!({
                "referenced": false,
                "sources_checked": map.sources.len(),
                "schema_verdict": pass.verdict,
                "was": m.was,
                "due_at": m.due_at,
                "cycle": cycle,
            });
            Event::new(m.asset_id, m.workspace_id, AuditAction::Discovered, evidence)
                .storage_key(&m.storage_key)
                .sweep_run(pass.run_id)
        })
        .collect();
    audit::write_all(&mut *tx, &events).await?;
    Ok(made_due.len() as u64)
}

/// Records a batch's counts and moves the cursor to `next`; with `None`, the walk is complete: the cycle is closed
/// and the next starts from the first id.
async fn move_cursor(
    tx: &mut PgConnection,
    cycle: i64,
    next: Option<Uuid>,
    scanned: usize,
    found: u64,
) -> Result<(), sqlx::Error> {
    let (scanned, found) = (scanned as i64, i64::try_from(found).unwrap_or(i64::MAX));
    sqlx::query!(
        "UPDATE discovery_state
            SET next_id = $2, scanned = scanned + $3, found = found + $4,
                cycle_started_at = coalesce(cycle_started_at, now())
          WHERE cycle = $1",
        cycle,
        next.unwrap_or(Uuid::nil()),
        scanned,
        found,
    )
    .execute(&mut *tx)
    .await?;
    if next.is_none() {
        sqlx::query!(
            "UPDATE discovery_state
                SET last_cycle_started_at = cycle_started_at, last_cycle_completed_at = now(),
                    last_cycle_seconds = extract(epoch FROM now() - cycle_started_at)::float8,
                    last_cycle_scanned = scanned, last_cycle_found = found,
                    cycle = cycle + 1, cycle_started_at = NULL, scanned = 0, found = 0
              WHERE cycle = $1",
            cycle,
        )
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

/// Failpoint `discovery::schedule`, with `return(MS ID ID …)`: a batch that looked at any of the ids waits MS
/// milliseconds between asking the sources and scheduling what they did not name (a slow database, or a window for
/// the application to win a race in), and says so in [`PAUSED`] as the wait begins, so a test acts inside the
/// window however busy the machine is. Other batches, other tests' among them, are not slowed.
#[cfg_attr(not(feature = "failpoints"), allow(unused_variables))]
fn injected_pause(batch: &[Uuid]) {
    fail::fail_point!("discovery::schedule", |arg: Option<String>| {
        let arg = arg.unwrap_or_default();
        let mut words = arg.split_whitespace();
        let ms = words.next().and_then(|w| w.parse::<u64>().ok()).unwrap_or(0);
        if words.any(|w| Uuid::parse_str(w).is_ok_and(|id| batch.contains(&id))) {
            PAUSED.store(true, std::sync::atomic::Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(ms));
        }
    });
}

/// Set when a batch begins the wait of the failpoint `discovery::schedule`; never set without failpoints (a build
/// with the `fail` crate's failpoints on compiles the failpoint's body, whichever crate turned them on).
pub static PAUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The id right after `id` in Postgres's order (bytewise, as `u128`), or `None` after the last there is.
fn successor(id: Uuid) -> Option<Uuid> {
    id.as_u128().checked_add(1).map(Uuid::from_u128)
}

/// Discovery's share of a pass: makes due the unscheduled assets no source of `map` refers to (invariant 12).
#[derive(Debug, Clone, Copy)]
pub struct Discovery<'a> {
    /// The map the pass's verdict validated.
    pub map: &'a ReferenceMap,
    /// The pass and its verdict.
    pub pass: Pass,
    /// The most assets a pass looks at.
    pub max_scanned: u64,
    /// Assets one batch looks at.
    pub batch_size: u32,
    /// The grace period (invariant 3).
    pub grace: Duration,
    /// How long after a cycle ends the next one begins (`DISCOVERY_CYCLE_INTERVAL`); zero for a pass whose
    /// records step deleted records, which walks at once.
    pub rest: Duration,
}

impl Step for Discovery<'_> {
    type Progress = Progress;
    type Standing = Standing;
    type Error = sqlx::Error;
    const NAME: &'static str = "discovery";
    const ON_FAILURE: &'static str = "discovery failed: the rest waits for the next pass";

    async fn advance(&self, pool: &PgPool, share: Share) -> Result<Progress, sqlx::Error> {
        let budget = Budget {
            until: share.until,
            max_scanned: self.max_scanned,
            batch_size: self.batch_size,
            grace: self.grace,
            rest: self.rest,
        };
        advance(pool, self.map, budget, self.pass).await
    }

    async fn standing(conn: &mut PgConnection) -> Result<Standing, sqlx::Error> {
        standing(conn).await
    }

    fn log(progress: &Progress) {
        tracing::info!(
            cycle = progress.cycle,
            batches = progress.batches,
            scanned = progress.scanned,
            found = progress.found,
            cursor = %progress.cursor,
            stopped = ?progress.stopped,
            "discovery advanced"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_successor_follows_postgres_order_and_ends_at_the_last_id() {
        let id = Uuid::parse_str("0000ffff-ffff-ffff-ffff-ffffffffffff").expect("uuid");
        let next = successor(id).expect("a successor");
        assert_eq!(next.to_string(), "00010000-0000-0000-0000-000000000000");
        assert!(next > id, "bytewise order, as Postgres compares uuids");
        assert_eq!(successor(Uuid::max()), None);
    }
}
