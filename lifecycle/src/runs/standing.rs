//! The passes as `status` shows them: the recent run rows, the newest good one, and what each recorded per
//! workspace ([`Claims`]), read back through the types the sweep writes them with.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

use super::{Reason, RunOutcome};

/// One pass's row, as `status` lists it. `reason` and `per_workspace` are kept as stored, for the page's JSON; what
/// anything decides on is read through [`Pass::reason`] and [`Pass::workspaces`].
#[derive(Debug, Clone, Serialize)]
pub struct Pass {
    /// The run.
    pub id: Uuid,
    /// When it started, as the database prints it.
    pub started_at: String,
    /// How it ended.
    pub outcome: RunOutcome,
    /// Assets it claimed.
    pub claimed: i32,
    /// Messages it sent.
    pub enqueued: i32,
    /// Claims it gave back.
    pub released: i32,
    /// How long it took.
    pub duration_ms: Option<i64>,
    /// The error that ended it.
    pub error: Option<String>,
    /// Its `reason`, as stored.
    pub reason: Option<Value>,
    /// Its `per_workspace`, as stored.
    pub per_workspace: Value,
}

/// One workspace's part in a pass, as the readers of `sweep_runs.per_workspace` use it (the sweep's own type holds
/// more, and its test holds these fields to it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Claims {
    /// Assets claimed for it.
    pub claimed: u64,
    /// Messages sent for it.
    pub enqueued: u64,
    /// Claims given back.
    pub released: u64,
    /// Why the brake held it back, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub braked: Option<String>,
}

impl Pass {
    /// Its reason, read as the sweep wrote it.
    pub fn reason(&self) -> Reason {
        Reason::of(self.reason.as_ref())
    }

    /// Each workspace's part ([`Claims::of`]).
    pub fn workspaces(&self) -> BTreeMap<Uuid, Claims> {
        Claims::of(&self.per_workspace)
    }
}

impl Claims {
    /// Each workspace's part of a pass, from its `per_workspace`; an entry this build cannot read is left out.
    pub fn of(per_workspace: &Value) -> BTreeMap<Uuid, Claims> {
        per_workspace
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(id, claims)| Some((id.parse().ok()?, Claims::deserialize(claims).ok()?)))
            .collect()
    }
}

/// The `n` newest passes, newest first.
pub async fn recent(conn: &mut PgConnection, n: i64) -> Result<Vec<Pass>, sqlx::Error> {
    sqlx::query_as!(
        Pass,
        r#"SELECT id, started_at::text AS "started_at!", outcome AS "outcome: RunOutcome", claimed, enqueued, released,
                  duration_ms, error, reason, per_workspace
             FROM sweep_runs ORDER BY started_at DESC LIMIT $1"#,
        n.max(1),
    )
    .fetch_all(conn)
    .await
}

/// The newest pass that finished well.
#[derive(Debug, Clone)]
pub struct LastGood {
    /// When it finished, as the database prints it.
    pub finished_at: String,
    /// How.
    pub outcome: RunOutcome,
    /// Seconds since.
    pub age_seconds: f64,
}

/// The newest pass that finished well ([`RunOutcome::GOOD`]), if one ever did.
pub async fn last_good(conn: &mut PgConnection) -> Result<Option<LastGood>, sqlx::Error> {
    sqlx::query_as!(
        LastGood,
        r#"SELECT finished_at::text AS "finished_at!", outcome AS "outcome: RunOutcome",
                  extract(epoch FROM now() - finished_at)::float8 AS "age_seconds!"
             FROM sweep_runs
            WHERE outcome = ANY ($1) AND finished_at IS NOT NULL ORDER BY finished_at DESC LIMIT 1"#,
        RunOutcome::GOOD as &[RunOutcome],
    )
    .fetch_optional(conn)
    .await
}

/// Whether the pass `run` is on record.
pub async fn exists(conn: &mut PgConnection, run: Uuid) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT EXISTS (SELECT 1 FROM sweep_runs WHERE id = $1) AS "known!""#, run)
        .fetch_one(conn)
        .await
}
