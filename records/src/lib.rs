//! Record retention: the first step of a sweep pass deletes the application's records its retention rules say
//! have expired, so the assets those records were the last reference to are unreferenced when discovery asks in
//! the same pass.
//!
//! Rules are data (`retention_rules`: a table, a timestamp column, a period, an optional filter), validated when
//! written; the step puts each into the `DELETE` itself. Every rule runs in batches of at most
//! [`rule::BATCH_SIZE`] records, one transaction each, so the application's writer is free between batches. The
//! step keeps to its share of the pass's time and starts no batch it may not finish in it; what it did not reach
//! waits for the next pass. Every batch of a pass cuts off from the pass's own day in the application's time zone.
//! A batch the database refuses (a restricting foreign key, a trigger) stops that rule for the pass, with its
//! error; the other rules go on. A rule that would delete more than its share of its table is held until an
//! operator approves it: a mistyped period must not empty a table.

pub mod quota;
pub mod rule;

use std::time::{Duration, Instant};

use chrono::NaiveDate;
use platform::approval::{Outgrown, Tolerance, count};
use platform::step::{self, Paced, Share};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::{Connection, PgPool};
use uuid::Uuid;

pub use rule::{Rule, Weight, pass_day};

/// Why a rule stopped in a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleStop {
    /// No expired record is left (those another transaction held were skipped).
    Finished,
    /// The step's share of the pass ran out: the next pass goes on.
    TimeShare,
    /// The database refused a batch, or the rule no longer fits the schema: the error says which.
    Failed,
    /// The brake holds it until an operator approves it (again, when `outgrown` says what outgrew the approval).
    Held,
    /// New or changed: it deletes nothing until its delay ends (`waits_until`), what it would delete weighed.
    Waiting,
    /// The step's time ran out before its turn.
    NotReached,
    /// Its batches were under way when the run row was last written: a pass that says so at its end died there
    /// (a timeout or a crash), its count exact.
    Running,
}

/// One rule's part in a pass: the run record's `records.rules[]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RuleRun {
    /// `retention_rules.id`.
    pub rule_id: i64,
    /// The table.
    pub table: String,
    /// The timestamp column, the period and the filter, as declared.
    pub column: String,
    /// The period.
    pub keep: String,
    /// The filter, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    /// Records older than this (in the application's time zone) were expired.
    pub cutoff: String,
    /// Records deleted in this pass (whole batches, committed).
    pub deleted: u64,
    /// Batches committed.
    pub batches: u64,
    /// Whether no expired record was left.
    pub finished: bool,
    /// Why it stopped.
    pub stopped: RuleStop,
    /// The database's error, when it refused a batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the brake weighed, when the rule was weighed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<Weight>,
    /// Who released it from the brake, when the brake would have held it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
    /// Where what it would delete grew beyond what its approval was granted on: held again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outgrown: Option<Outgrown>,
    /// When a new or changed rule may first delete, while it waits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waits_until: Option<chrono::DateTime<chrono::Utc>>,
}

/// What the records step did in one pass: the run record's `records`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Progress {
    /// The pass's own day, in `time_zone`.
    pub day: NaiveDate,
    /// The application's time zone.
    pub time_zone: String,
    /// Records deleted by every rule.
    pub deleted: u64,
    /// Each rule, in id order.
    pub rules: Vec<RuleRun>,
}

impl Progress {
    /// Rules the database refused in this pass.
    pub fn failed(&self) -> u64 {
        self.rules.iter().filter(|r| r.stopped == RuleStop::Failed).count() as u64
    }

    /// Rules the brake held in this pass.
    pub fn held(&self) -> u64 {
        self.rules.iter().filter(|r| r.stopped == RuleStop::Held).count() as u64
    }
}

/// Why the step could not run at all (a rule failing is recorded in its [`RuleRun`] instead).
#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    /// Postgres does not know the configured time zone.
    #[error("RECORDS_TIME_ZONE {0:?} is not a time zone Postgres knows (an IANA name such as Europe/Paris)")]
    TimeZone(String),
    /// The rules or the run record could not be read or written.
    #[error("the records step could not read its rules: {0}")]
    Database(#[from] sqlx::Error),
}

/// Runs every rule of `run_id`'s pass within `pace`, recording each batch's count in the run row in the batch's
/// own transaction, so the record and the deletions never disagree.
pub(crate) async fn advance(
    pool: &PgPool,
    run_id: Uuid,
    pace: Paced<'_, Records<'_>>,
) -> Result<Progress, RecordsError> {
    fail::fail_point!("records::advance", |_| Err(RecordsError::Database(sqlx::Error::Protocol(
        "injected: the records step failed".into()
    ))));
    let mut conn = pool.acquire().await?;
    let day = match pass_day(&mut conn, pace.step.time_zone, Some(run_id)).await {
        Ok(day) => day,
        // invalid_parameter_value: Postgres's "time zone … not recognized".
        Err(e) if e.as_database_error().and_then(|d| d.code()).as_deref() == Some("22023") => {
            return Err(RecordsError::TimeZone(pace.step.time_zone.to_owned()));
        }
        Err(e) => return Err(e.into()),
    };
    let rules = Rule::all(&mut conn, day, pace.step.new_rule_delay).await?;
    let progress = Progress { day, time_zone: pace.step.time_zone.to_owned(), deleted: 0, rules: Vec::new() };
    let mut step = Step { run_id, pace, progress, longest: Duration::ZERO };
    let mut out_of_time = false;
    for rule in rules {
        let mut run = RuleRun {
            rule_id: rule.id,
            table: rule.table.clone(),
            column: rule.column.clone(),
            keep: rule.keep.clone(),
            filter: rule.filter.clone(),
            cutoff: rule.cutoff.to_string(),
            deleted: 0,
            batches: 0,
            finished: false,
            stopped: RuleStop::NotReached,
            error: None,
            weight: None,
            approved_by: None,
            outgrown: None,
            waits_until: rule.waits_until,
        };
        if !out_of_time && Instant::now() + step.longest >= pace.share.until {
            out_of_time = true;
        }
        if !out_of_time {
            sqlx::query!("UPDATE retention_rules SET last_turn_at = now() WHERE id = $1", rule.id)
                .execute(&mut *conn)
                .await?;
            run.stopped = step.run_rule(&mut conn, &rule, &mut run).await;
            run.finished = run.stopped == RuleStop::Finished;
            out_of_time = run.stopped == RuleStop::TimeShare;
        }
        step.progress.rules.push(run);
    }
    let mut progress = step.progress;
    progress.rules.sort_by_key(|r| r.rule_id);
    record(&mut conn, run_id, &progress).await?;
    Ok(progress)
}

/// The step under way: its pass, its pace, what it did so far, and its longest batch (what it keeps in reserve).
struct Step<'a> {
    run_id: Uuid,
    pace: Paced<'a, Records<'a>>,
    progress: Progress,
    longest: Duration,
}

impl Step<'_> {
    /// One rule's turn: weighed by the brake, then batch after batch until none is left, the time runs out or the
    /// database refuses one.
    async fn run_rule(&mut self, conn: &mut sqlx::PgConnection, rule: &Rule, run: &mut RuleRun) -> RuleStop {
        let pace = self.pace;
        if let Some(problem) = rule.unusable() {
            run.error = Some(problem.to_owned());
            return RuleStop::Failed;
        }
        match weigh(conn, rule, pace).await {
            // What it will delete when its delay ends, weighed as the brake would: `plan` and `status` show it.
            Ok(weight) if rule.waits_until.is_some() => {
                run.weight = Some(weight);
                return RuleStop::Waiting;
            }
            Ok(weight) => {
                run.weight = Some(weight);
                if weight.braked() {
                    match (&rule.approved_by, rule.approved_rows) {
                        (Some(by), Some(approved)) => {
                            run.outgrown =
                                pace.step.approval_tolerance.outgrown("records", count(approved), weight.expired);
                            if run.outgrown.is_some() {
                                return RuleStop::Held;
                            }
                            run.approved_by = Some(by.clone());
                        }
                        _ => return RuleStop::Held,
                    }
                }
                if weight.expired == 0 {
                    return RuleStop::Finished;
                }
            }
            Err(e) if cancelled(&e) => return RuleStop::TimeShare,
            Err(e) => {
                run.error = Some(message(&e));
                return RuleStop::Failed;
            }
        }
        run.stopped = RuleStop::Running;
        loop {
            let now = Instant::now();
            if now + self.longest >= pace.share.until {
                return RuleStop::TimeShare;
            }
            let started = now;
            match self.batch(conn, rule, run).await {
                Ok(deleted) => {
                    self.longest = self.longest.max(started.elapsed());
                    if deleted < rule::BATCH_SIZE as u64 {
                        return RuleStop::Finished;
                    }
                }
                // The batch ran into the end of the step's share and was rolled back whole.
                Err(e) if cancelled(&e) => return RuleStop::TimeShare,
                Err(e) => {
                    run.error = Some(message(&e));
                    return RuleStop::Failed;
                }
            }
        }
    }

    /// One batch in its own transaction, with the run row's counts, so a pass that dies still says exactly how many
    /// records went.
    async fn batch(
        &mut self,
        conn: &mut sqlx::PgConnection,
        rule: &Rule,
        run: &mut RuleRun,
    ) -> Result<u64, sqlx::Error> {
        let pace = self.pace;
        let mut tx = conn.begin().await?;
        // Never past the step's share: a batch that would run over is cancelled and rolled back whole.
        within_share(&mut tx, pace).await?;
        let deleted = rule.delete_batch(&mut tx, pace.step.time_zone).await?;
        fail::fail_point!("records::batch");
        let mut this = run.clone();
        this.deleted += deleted;
        this.batches += 1;
        let mut so_far = self.progress.clone();
        so_far.deleted += deleted;
        so_far.rules.push(this.clone());
        record(&mut tx, self.run_id, &so_far).await?;
        tx.commit().await?;
        *run = this;
        self.progress.deleted += deleted;
        Ok(deleted)
    }
}

/// query_canceled: a statement ran into the end of the step's share.
fn cancelled(e: &sqlx::Error) -> bool {
    e.as_database_error().and_then(|d| d.code()).as_deref() == Some("57014")
}

/// The database's own words, for the run record.
fn message(e: &sqlx::Error) -> String {
    e.as_database_error().map_or_else(|| e.to_string(), |db| db.message().to_owned())
}

/// Sets the transaction's statement timeout to what is left of the step's share, so no statement runs past it.
async fn within_share(tx: &mut sqlx::PgConnection, pace: Paced<'_, Records<'_>>) -> Result<(), sqlx::Error> {
    platform::db::statements_until(tx, pace.share.until, Duration::from_millis(100)).await
}

/// The brake's weighing, read only and within the step's share: its count may scan much of a large table.
async fn weigh(
    conn: &mut sqlx::PgConnection,
    rule: &Rule,
    pace: Paced<'_, Records<'_>>,
) -> Result<Weight, sqlx::Error> {
    let mut tx = conn.begin().await?;
    platform::db::read_only(&mut tx).await?;
    within_share(&mut tx, pace).await?;
    // Counted past what an approval covers, so a rule that outgrew its approval is seen to.
    let covered = rule.approved_rows.map_or(0, |n| pace.step.approval_tolerance.ceiling(count(n)));
    let weight = rule.weigh(&mut tx, pace.step.time_zone, pace.step.brake_share_percent, Some(covered)).await?;
    tx.commit().await?;
    Ok(weight)
}

async fn record(conn: &mut sqlx::PgConnection, run_id: Uuid, progress: &Progress) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE sweep_runs SET records = $2 WHERE id = $1",
        run_id,
        serde_json::to_value(progress).unwrap_or_else(|e| json!({ "error": e.to_string() })),
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The records step of one pass: [`advance`] within the step's share.
#[derive(Debug, Clone, Copy)]
pub struct Records<'a> {
    /// The pass.
    pub run_id: Uuid,
    /// The application's time zone (a Postgres time zone name): which day a pass belongs to.
    pub time_zone: &'a str,
    /// A rule that would delete more than this share of its table, in percent, waits for an approval.
    pub brake_share_percent: u32,
    /// A new or changed rule deletes nothing until this long after it was declared or changed.
    pub new_rule_delay: Duration,
    /// How far what a rule would delete may grow over what its approval was granted on.
    pub approval_tolerance: Tolerance,
}

/// Where the records step stands: the rules declared, and what the newest pass that applied them recorded.
#[derive(Debug, Clone, Serialize)]
pub struct Standing {
    /// Rules declared.
    pub rules: i64,
    /// The newest pass with a records step.
    pub last_pass: Option<LastPass>,
}

/// The newest pass's records step.
#[derive(Debug, Clone, Serialize)]
pub struct LastPass {
    /// The pass.
    pub id: Uuid,
    /// When it started, as the database prints it.
    pub started_at: Option<String>,
    /// Its `sweep_runs.records`: the step's progress, or its error.
    pub records: Option<serde_json::Value>,
}

/// A pass's `sweep_runs.records` read back as the sweep wrote it: the step's progress, or why it could not run.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Recorded {
    /// The step could not run.
    Failed {
        /// Why.
        error: String,
    },
    /// What it did.
    Ran(Progress),
}

impl LastPass {
    /// Its records step, read through [`Recorded`]; `None` when there is none, or this build cannot read it.
    pub fn recorded(&self) -> Option<Recorded> {
        Recorded::deserialize(self.records.as_ref()?).ok()
    }
}

/// Reads the records step's standing.
pub async fn standing(conn: &mut sqlx::PgConnection) -> Result<Standing, sqlx::Error> {
    let last = sqlx::query_as!(
        LastPass,
        "SELECT id, started_at::text AS started_at, records FROM sweep_runs
          WHERE records IS NOT NULL ORDER BY started_at DESC LIMIT 1"
    )
    .fetch_optional(&mut *conn)
    .await?;
    let rules = sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM retention_rules"#).fetch_one(&mut *conn).await?;
    Ok(Standing { rules, last_pass: last })
}

impl step::Step for Records<'_> {
    type Progress = Progress;
    type Standing = Standing;
    type Error = RecordsError;
    const NAME: &'static str = "records";
    const ON_FAILURE: &'static str = "the records step could not run: expired records wait for the next pass";

    async fn advance(&self, pool: &PgPool, share: Share) -> Result<Progress, RecordsError> {
        let pace = Paced { step: self, share };
        advance(pool, self.run_id, pace).await
    }

    async fn standing(conn: &mut sqlx::PgConnection) -> Result<Standing, sqlx::Error> {
        standing(conn).await
    }

    fn log(records: &Progress) {
        tracing::info!(
            deleted = records.deleted,
            rules = records.rules.len(),
            failed = records.failed(),
            held = records.held(),
            "retention rules applied"
        );
        for rule in records.rules.iter().filter(|r| r.error.is_some()) {
            tracing::warn!(rule = rule.rule_id, table = %rule.table, deleted = rule.deleted,
                           error = rule.error.as_deref().unwrap_or(""), "a retention rule stopped on an error");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_reads_back_the_records_step_the_pass_wrote_and_its_failure() {
        let rule = RuleRun {
            rule_id: 7,
            table: "public.sessions".to_owned(),
            column: "created_at".to_owned(),
            keep: "30 days".to_owned(),
            filter: None,
            cutoff: "2026-11-06 00:00:00".to_owned(),
            deleted: 40,
            batches: 2,
            finished: false,
            stopped: RuleStop::Held,
            error: None,
            weight: Some(Weight { expired: 51, table_rows: 100, threshold: 25 }),
            approved_by: None,
            outgrown: platform::approval::Tolerance(10).outgrown("records", 40, 51),
            waits_until: None,
        };
        let day = NaiveDate::from_ymd_opt(2026, 12, 6).expect("a day");
        let progress = Progress { day, time_zone: "UTC".to_owned(), deleted: 40, rules: vec![rule] };
        let last = |records| LastPass { id: Uuid::nil(), started_at: None, records: Some(records) };
        let Some(Recorded::Ran(read)) = last(serde_json::to_value(&progress).expect("json")).recorded() else {
            panic!("the progress a pass wrote does not read back");
        };
        let rule = &read.rules[0];
        assert_eq!((read.day, read.deleted, rule.rule_id, rule.stopped), (day, 40, 7, RuleStop::Held));
        assert_eq!(rule.outgrown.as_ref().map(|o| (o.what, o.approved, o.now)), Some(("records", 40, 51)));
        assert_eq!(rule.weight.map(|w| w.threshold), Some(25));
        let failed = last(json!({ "error": "no such time zone" })).recorded();
        assert!(matches!(failed, Some(Recorded::Failed { error }) if error == "no such time zone"));
    }
}
