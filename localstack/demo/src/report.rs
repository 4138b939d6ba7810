//! The report a person reads after the run: what was kept and by which record, retired, deleted, purged,
//! deferred, failed to the dead-letter queue, bytes freed, queue depths and alarm states — and whether each
//! outcome is the one the catalog expected, checked against the rows and the bucket themselves.

use std::fmt::{self, Write as _};

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{Connection as _, PgPool};
use uuid::Uuid;

use crate::catalog::{Catalog, Expect, Seeded};
use platform::queues::{self, Depth};

use crate::drive;
use crate::{Clients, Stack};

/// What became of one seeded asset.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    #[serde(flatten)]
    pub asset: Seeded,
    /// The decision recorded since the seed (`keep`, `retire`, `delete`, `purge`, `defer`, `failed`).
    pub action: Option<String>,
    pub evidence: Option<Value>,
    pub bytes_freed: i64,
    /// The row's state now; `None` once the row is gone.
    pub state: Option<String>,
    pub last_error: Option<String>,
    pub purge_after: Option<DateTime<Utc>>,
    pub due_at: Option<DateTime<Utc>>,
    /// Whether the bucket still serves the asset's bytes.
    pub bytes_present: bool,
    /// When discovery made it due since the seed, if it did (its `discovered` event).
    pub discovered_at: Option<DateTime<Utc>>,
    /// The pass whose discovery made it due, and the records that pass's retention rules deleted.
    pub discovered_in: Option<Uuid>,
    pub records_deleted_by_that_pass: Option<i64>,
}

impl Outcome {
    /// How this outcome differs from what the catalog expected; empty when it does not.
    pub fn surprises(&self) -> Vec<String> {
        let a = &self.asset;
        let name = format!("{}/{} ({})", a.workspace, a.file, a.id);
        let mut found = Vec::new();
        if self.action.as_deref() != a.expect.action() {
            found.push(format!(
                "{name}: expected {}, recorded {}",
                a.expect,
                self.action.as_deref().unwrap_or("nothing")
            ));
        }
        if self.state.is_some() != a.expect.keeps_row() {
            let now = if self.state.is_some() { "still exists" } else { "is gone" };
            found.push(format!("{name}: its row {now}, expected {}", a.expect));
        }
        if self.bytes_present != a.expect.keeps_bytes() {
            let now = if self.bytes_present { "are still there" } else { "are gone" };
            found.push(format!("{name}: its bytes {now}, expected {}", a.expect));
        }
        let discovered = matches!(a.expect, Expect::DiscoverAndRetire | Expect::ExpireAndRetire);
        if discovered != self.discovered_at.is_some() {
            let now = if self.discovered_at.is_some() { "was" } else { "was not" };
            found.push(format!("{name}: it {now} discovered, expected {}", a.expect));
        }
        // Records first, then files: the pass that deleted its record is the one that found it unreferenced.
        if a.expect == Expect::ExpireAndRetire && self.records_deleted_by_that_pass.unwrap_or(0) == 0 {
            found.push(format!("{name}: the pass that discovered it deleted no record, expected {}", a.expect));
        }
        let state_wanted = match a.expect {
            Expect::Keep => Some("attached"),
            Expect::Retire | Expect::DiscoverAndRetire | Expect::ExpireAndRetire => Some("retired"),
            Expect::Fail => Some("failed"),
            _ => None,
        };
        if let Some(wanted) = state_wanted
            && self.state.as_deref() != Some(wanted)
        {
            found.push(format!("{name}: state {:?}, expected {wanted}", self.state));
        }
        found
    }
}

/// One sweep pass that ran since the seed.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct Pass {
    pub id: Uuid,
    pub outcome: String,
    pub claimed: i32,
    pub enqueued: i32,
    pub duration_ms: Option<i64>,
}

/// What a pass's records step did: the run record's `records`.
#[derive(Debug, Clone, Serialize)]
pub struct RecordsStep {
    pub run_id: Uuid,
    pub records: Value,
}

/// What the catalog's orders are now: expired closed ones must be gone, old open ones kept by the filter.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Orders {
    pub expired_closed_left: i64,
    pub old_open_kept: i64,
    pub recent_closed_kept: i64,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub stack: String,
    pub seeded_at: DateTime<Utc>,
    pub passes: Vec<Pass>,
    /// Each pass's retention rules, in order.
    pub records: Vec<RecordsStep>,
    pub orders: Orders,
    /// Each workspace's storage against its quota, after the run.
    pub usage: Vec<(String, records::quota::Usage)>,
    pub assets: Vec<Outcome>,
    pub bytes_freed: i64,
    pub queue: Depth,
    pub dead_letter_queue: Depth,
    /// Every alarm of the stack: its state, since when, and CloudWatch's reason.
    pub alarms: Vec<AlarmState>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AlarmState {
    pub name: String,
    pub state: String,
    pub since: Option<DateTime<Utc>>,
    pub reason: String,
}

impl Report {
    /// Gathers the report from the audit record, the rows, the bucket, the queues and CloudWatch.
    pub async fn gather(pool: &PgPool, clients: &Clients, stack: &Stack, catalog: &Catalog) -> anyhow::Result<Self> {
        let ids: Vec<Uuid> = catalog.assets.iter().map(|a| a.id).collect();
        type Row = (
            Uuid,
            Option<String>,
            Option<Value>,
            Option<i64>,
            Option<String>,
            Option<String>,
            Option<DateTime<Utc>>,
            Option<DateTime<Utc>>,
            Option<DateTime<Utc>>,
            Option<Uuid>,
            Option<i64>,
        );
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT s.id, e.action, e.evidence, e.bytes_freed, a.state, a.last_error, a.purge_after, a.due_at,
                    d.occurred_at, d.sweep_run_id,
                    (SELECT (r.records->>'deleted')::bigint FROM asset_sweeper_private.sweep_runs r WHERE r.id = d.sweep_run_id)
               FROM unnest($1::uuid[]) AS s(id)
               LEFT JOIN LATERAL (
                   SELECT occurred_at, sweep_run_id FROM asset_sweeper_private.settlement_events
                    WHERE asset_id = s.id AND action = 'discovered' AND occurred_at >= $2
                    ORDER BY id LIMIT 1) d ON true
               LEFT JOIN LATERAL (
                   SELECT action, evidence, bytes_freed FROM asset_sweeper_private.settlement_events
                    WHERE asset_id = s.id AND occurred_at >= $2
                      AND action IN ('keep', 'retire', 'delete', 'purge', 'defer', 'failed')
                    ORDER BY id DESC LIMIT 1) e ON true
               LEFT JOIN asset_sweeper.assets a ON a.id = s.id",
        )
        .bind(&ids)
        .bind(catalog.seeded_at)
        .fetch_all(pool)
        .await
        .context("reading the outcome of the seeded assets")?;
        let mut assets = Vec::with_capacity(rows.len());
        for asset in &catalog.assets {
            let Some(row) = rows.iter().find(|r| r.0 == asset.id) else { continue };
            let (_, action, evidence, bytes_freed, state, last_error, purge_after, due_at, discovered_at, run, deleted) =
                row.clone();
            let bytes_present = object_exists(&clients.s3, &stack.asset_bucket_name, &asset.storage_key).await?;
            assets.push(Outcome {
                asset: asset.clone(),
                action,
                evidence,
                bytes_freed: bytes_freed.unwrap_or(0),
                state,
                last_error,
                purge_after,
                due_at,
                bytes_present,
                discovered_at,
                discovered_in: run,
                records_deleted_by_that_pass: deleted,
            });
        }
        let records = sqlx::query_as::<_, (Uuid, Value)>(
            "SELECT id, records FROM asset_sweeper_private.sweep_runs
              WHERE started_at >= $1 AND records IS NOT NULL ORDER BY started_at",
        )
        .bind(catalog.seeded_at)
        .fetch_all(pool)
        .await
        .context("reading the records steps")?
        .into_iter()
        .map(|(run_id, records)| RecordsStep { run_id, records })
        .collect();
        let workspaces: Vec<Uuid> = catalog.workspaces().iter().map(|(_, id)| *id).collect();
        let (expired_closed_left, old_open_kept, recent_closed_kept): (i64, i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE status = 'closed' AND placed_at < now() - interval '2 years'),
                    count(*) FILTER (WHERE status = 'open' AND placed_at < now() - interval '2 years'),
                    count(*) FILTER (WHERE status = 'closed' AND placed_at >= now() - interval '2 years')
               FROM orders WHERE workspace_id = ANY ($1)",
        )
        .bind(&workspaces)
        .fetch_one(pool)
        .await
        .context("reading the catalog's orders")?;
        let mut usage = Vec::new();
        let mut conn = crate::sweeper_session(pool).await?;
        for (name, id) in catalog.workspaces() {
            usage.push((name.to_owned(), records::quota::usage(&mut conn, id).await?));
        }
        conn.close().await?;
        let passes = sqlx::query_as(
            "SELECT id, outcome, claimed, enqueued, duration_ms FROM asset_sweeper_private.sweep_runs
              WHERE started_at >= $1 ORDER BY started_at",
        )
        .bind(catalog.seeded_at)
        .fetch_all(pool)
        .await
        .context("reading the sweep's run records")?;
        let alarms = drive::alarm_states(&clients.cloudwatch, &stack.alarm_names())
            .await?
            .into_iter()
            .map(|a| AlarmState { name: a.name, state: a.state.as_str().to_owned(), since: a.since, reason: a.reason })
            .collect();
        Ok(Self {
            stack: stack.name.clone(),
            seeded_at: catalog.seeded_at,
            passes,
            records,
            orders: Orders { expired_closed_left, old_open_kept, recent_closed_kept },
            usage,
            bytes_freed: assets.iter().map(|o| o.bytes_freed).sum(),
            assets,
            queue: queues::describe(&clients.sqs, &stack.cleanup_queue_url).await?.depth,
            dead_letter_queue: queues::describe(&clients.sqs, &stack.dead_letter_queue_url).await?.depth,
            alarms,
        })
    }

    /// Every way the outcome differs from the catalog's expectations.
    pub fn surprises(&self) -> Vec<String> {
        let mut found: Vec<String> = self.assets.iter().flat_map(Outcome::surprises).collect();
        let o = self.orders;
        if o.expired_closed_left != 0 {
            found.push(format!("orders: {} closed order(s) past two years are left", o.expired_closed_left));
        }
        if o.old_open_kept == 0 || o.recent_closed_kept == 0 {
            found.push(format!("orders: the rule deleted what it had to keep ({o:?})"));
        }
        for (name, u) in &self.usage {
            if u.quota_bytes.is_none() || u.held_bytes > u.stored_bytes || u.schema_refused {
                found.push(format!("usage of {name}: {u:?}"));
            }
        }
        found
    }

    pub fn alarm_state(&self, name: &str) -> Option<&str> {
        self.alarms.iter().find(|a| a.name == name).map(|a| a.state.as_str())
    }
}

pub(crate) async fn object_exists(s3: &aws_sdk_s3::Client, bucket: &str, key: &str) -> anyhow::Result<bool> {
    match s3.head_object().bucket(bucket).key(key).send().await {
        Ok(_) => Ok(true),
        Err(e) if e.as_service_error().is_some_and(|e| e.is_not_found()) => Ok(false),
        Err(e) => Err(e).with_context(|| format!("HeadObject s3://{bucket}/{key}")),
    }
}

/// Bytes in decimal units, as S3's console shows them.
pub fn size(bytes: i64) -> String {
    let b = bytes as f64;
    if bytes < 1_000 {
        format!("{bytes} B")
    } else if bytes < 1_000_000 {
        format!("{:.0} KB", b / 1e3)
    } else if bytes < 1_000_000_000 {
        format!("{:.1} MB", b / 1e6)
    } else {
        format!("{:.1} GB", b / 1e9)
    }
}

fn minute(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// One line about an asset: where it is, how big, and what the decision rested on.
fn line(out: &mut String, o: &Outcome, detail: &str) -> fmt::Result {
    let a = &o.asset;
    writeln!(out, "  {:<15} {:<30} {:>8}  {detail}", a.workspace, a.file, size(a.bytes))
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        writeln!(out, "asset-sweeper demo: stack {}, catalog seeded {}", self.stack, minute(self.seeded_at))?;
        for p in &self.passes {
            let took = p.duration_ms.map_or(String::from("running"), |ms| format!("{ms} ms"));
            writeln!(
                out,
                "sweep pass {}: {}, claimed {}, enqueued {} ({took})",
                p.id, p.outcome, p.claimed, p.enqueued
            )?;
        }
        let group = |action: &'static str| self.assets.iter().filter(move |o| o.action.as_deref() == Some(action));
        let freed = |action: &'static str| group(action).map(|o| o.bytes_freed).sum::<i64>();
        let sections: [(&str, String); 6] = [
            ("keep", "KEPT: something still refers to it".into()),
            ("retire", "RETIRED: nothing refers to it; restorable until its purge time".into()),
            ("delete", format!("DELETED: abandoned uploads, {} freed", size(freed("delete")))),
            ("purge", format!("PURGED: retired past their purge time, {} freed", size(freed("purge")))),
            ("defer", "DEFERRED: written too recently to decide; looked at again later".into()),
            ("failed", "FAILED → dead-letter queue: every delivery failed; the asset waits for a person".into()),
        ];
        for (action, title) in sections {
            let members: Vec<&Outcome> = group(action).collect();
            if members.is_empty() {
                continue;
            }
            writeln!(out, "\n{title} ({})", members.len())?;
            for o in members {
                let evidence = o.evidence.as_ref().unwrap_or(&Value::Null);
                let detail = match action {
                    "keep" => {
                        format!("by {} row {}", evidence["referenced_by"].as_str().unwrap_or("?"), evidence["record"])
                    }
                    "retire" => match o.discovered_at {
                        Some(at) => format!(
                            "nobody released it: discovered {} with no reference (asset-sweeper explain {}) · \
                             restorable until {}",
                            minute(at),
                            o.asset.id,
                            o.purge_after.map_or("?".into(), minute)
                        ),
                        None => format!("restorable until {}", o.purge_after.map_or("?".into(), minute)),
                    },
                    "delete" | "purge" if o.bytes_freed == 0 => {
                        format!("row only: bytes shared with {} other asset(s), kept", evidence["sharers"])
                    }
                    "delete" | "purge" => format!("{} freed", size(o.bytes_freed)),
                    "defer" => format!(
                        "{}; due again {}",
                        evidence["deferred"]["why"].as_str().unwrap_or("?"),
                        o.due_at.map_or("?".into(), minute)
                    ),
                    _ => format!(
                        "{}; bytes {}",
                        o.last_error.as_deref().unwrap_or("?"),
                        if o.bytes_present { "intact" } else { "MISSING" }
                    ),
                };
                line(&mut out, o, &detail)?;
            }
        }
        writeln!(out, "\nRECORDS: the retention rules, first in each pass")?;
        for step in &self.records {
            let r = &step.records;
            writeln!(
                out,
                "  pass {}: day {} in {}, {} record(s) deleted",
                step.run_id,
                r["day"].as_str().unwrap_or("?"),
                r["time_zone"].as_str().unwrap_or("?"),
                r["deleted"]
            )?;
            for rule in r["rules"].as_array().into_iter().flatten() {
                writeln!(
                    out,
                    "    rule {} {}.{} older than {}{} (before {}): {} deleted, {}{}",
                    rule["rule_id"],
                    rule["table"].as_str().unwrap_or("?"),
                    rule["column"].as_str().unwrap_or("?"),
                    rule["keep"].as_str().unwrap_or("?"),
                    rule["filter"].as_str().map_or(String::new(), |f| format!(" where {f}")),
                    rule["cutoff"].as_str().unwrap_or("?"),
                    rule["deleted"],
                    rule["stopped"].as_str().unwrap_or("?"),
                    rule["error"].as_str().map_or(String::new(), |e| format!(": {e}")),
                )?;
            }
        }
        let o = self.orders;
        writeln!(
            out,
            "  this catalog's orders: {} closed past two years left, {} as old but open kept (the filter), {} recent kept",
            o.expired_closed_left, o.old_open_kept, o.recent_closed_kept
        )?;
        for expired in self.assets.iter().filter(|o| o.asset.expect == Expect::ExpireAndRetire) {
            writeln!(
                out,
                "  {} of {}: its order expired, and pass {} that deleted it discovered and {} it",
                expired.asset.file,
                expired.asset.workspace,
                expired.discovered_in.map_or("?".to_owned(), |id| id.to_string()),
                expired.action.as_deref().map_or("did not settle", |a| if a == "retire" { "retired" } else { a })
            )?;
        }
        writeln!(out, "\nUSAGE: storage against each workspace's quota (what the upload check counts)")?;
        for (name, u) in &self.usage {
            writeln!(
                out,
                "  {name:<15} quota {:>8} · held {:>8} · stored {:>8} · waiting for removal {:>8} · headroom {:>8}",
                u.quota_bytes.map_or("none".to_owned(), size),
                size(u.held_bytes),
                size(u.stored_bytes),
                size(u.waiting_bytes),
                u.headroom_bytes.map_or("unlimited".to_owned(), size),
            )?;
        }
        let not_looked_at: Vec<&Outcome> = self.assets.iter().filter(|o| o.action.is_none()).collect();
        if !not_looked_at.is_empty() {
            writeln!(out, "\nNOT DUE: not looked at ({})", not_looked_at.len())?;
            for o in not_looked_at {
                line(&mut out, o, o.asset.why)?;
            }
        }
        writeln!(out, "\nBytes freed: {}", size(self.bytes_freed))?;
        writeln!(
            out,
            "Cleanup queue: {} waiting, {} in flight · dead-letter queue: {} message(s) (earlier runs' included)",
            self.queue.waiting,
            self.queue.in_flight,
            self.dead_letter_queue.total()
        )?;
        writeln!(out, "Alarms (state, since, and CloudWatch's reason where it is not OK):")?;
        for a in &self.alarms {
            let since = a.since.map_or(String::new(), |t| t.format("%H:%M:%S").to_string());
            let reason = if a.state == "OK" { "" } else { &a.reason };
            writeln!(out, "  {:<18} {since:<9} {}  {reason}", a.state, a.name)?;
        }
        let surprises = self.surprises();
        if surprises.is_empty() {
            writeln!(
                out,
                "\nChecked against the rows and the bucket: all {} outcomes as expected. Every kept, retired, deferred \
                 and failed asset has its row and its bytes; every deleted and purged one has neither, except bytes \
                 another asset shares.",
                self.assets.len()
            )?;
        } else {
            writeln!(out, "\nUNEXPECTED ({}):", surprises.len())?;
            for s in surprises {
                writeln!(out, "  {s}")?;
            }
        }
        f.write_str(&out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(expect: Expect, action: Option<&str>, state: Option<&str>, bytes_present: bool) -> Outcome {
        Outcome {
            asset: Seeded {
                id: Uuid::nil(),
                workspace: "ws",
                workspace_id: Uuid::nil(),
                file: "f.png",
                storage_key: "ws/f.png".into(),
                bytes: 10,
                expect,
                why: "test",
            },
            action: action.map(str::to_owned),
            evidence: None,
            bytes_freed: 0,
            state: state.map(str::to_owned),
            last_error: None,
            purge_after: None,
            due_at: None,
            bytes_present,
            discovered_at: None,
            discovered_in: None,
            records_deleted_by_that_pass: None,
        }
    }

    #[test]
    fn expected_outcomes_raise_no_surprise() {
        assert!(outcome(Expect::Keep, Some("keep"), Some("attached"), true).surprises().is_empty());
        assert!(outcome(Expect::DeleteRowOnly, Some("delete"), None, true).surprises().is_empty());
        assert!(outcome(Expect::Purge, Some("purge"), None, false).surprises().is_empty());
        assert!(outcome(Expect::NotDue, None, Some("attached"), true).surprises().is_empty());
    }

    #[test]
    fn lost_bytes_a_surviving_row_or_a_wrong_decision_are_each_reported() {
        let lost = outcome(Expect::Keep, Some("keep"), Some("attached"), false).surprises();
        assert_eq!(lost, ["ws/f.png (00000000-0000-0000-0000-000000000000): its bytes are gone, expected keep"]);
        let row_left = outcome(Expect::Delete, Some("delete"), Some("pending"), false).surprises();
        assert_eq!(row_left.len(), 1, "{row_left:?}");
        let wrong = outcome(Expect::Fail, Some("retire"), Some("retired"), true).surprises();
        assert_eq!(wrong.len(), 2, "decision and state: {wrong:?}");
        let undiscovered = outcome(Expect::DiscoverAndRetire, Some("retire"), Some("retired"), true).surprises();
        assert_eq!(undiscovered.len(), 1, "retired without a discovered event: {undiscovered:?}");
        let mut discovered = outcome(Expect::DiscoverAndRetire, Some("retire"), Some("retired"), true);
        discovered.discovered_at = Some(Utc::now());
        assert!(discovered.surprises().is_empty());
    }

    #[test]
    fn sizes_read_as_the_s3_console_shows_them() {
        assert_eq!(
            [size(999), size(412_000), size(3_100_000), size(2_000_000_000)],
            ["999 B", "412 KB", "3.1 MB", "2.0 GB"]
        );
    }
}
