//! The sweep-run row (invariant 10) and the run's metrics line. The row is written when a pass starts and
//! updated after every batch, so a pass that dies still says how far it got.

use std::collections::BTreeMap;

use lifecycle::brake::{Approval, OutgrownApproval, WorkspaceDue};
use lifecycle::runs::RunOutcome;
use platform::WorkspaceId;
use serde::Serialize;
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

use lifecycle::runs::{BucketCheck, Reason};

/// One workspace's part in a pass.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WorkspaceCounts {
    #[serde(flatten)]
    pub due: Option<WorkspaceDue>,
    pub claimed: u64,
    pub enqueued: u64,
    pub released: u64,
    /// Why the brake held this workspace back, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub braked: Option<String>,
    /// The approval that let it through the brake, when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
    /// An approval what is due outgrew: both figures, and the approval asked for again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outgrown: Option<OutgrownApproval>,
}

/// Why a pass stopped claiming.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// No due, unleased rows were left in the workspaces it could work on.
    Drained,
    /// The per-pass cap was reached.
    Cap,
    /// Too little time was left before the Lambda deadline to start another batch.
    TimeBudget,
    /// Every send of a batch failed, or the queue's depth could not be read: the queue is unreachable, so the
    /// pass stopped claiming.
    QueueUnavailable,
    /// The queue holds as many messages as its ceiling allows: the rest waits for a later pass, so a slow
    /// consumer never makes leases lapse and the same assets go out again.
    Backlog,
}

/// The queue as the pass found it, and what its ceiling held back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Backlog {
    /// Messages waiting and in flight when the pass read the queue.
    pub queue_depth: u64,
    pub ceiling: u64,
    /// Due, claimable assets left unclaimed because the queue was full.
    pub held_back: u64,
}

/// What one pass did: the run row, the metrics line and the handler's response.
#[derive(Debug, Clone, Serialize)]
pub struct SweepReport {
    pub run_id: Uuid,
    pub outcome: RunOutcome,
    pub claimed: u64,
    pub enqueued: u64,
    pub released: u64,
    pub sqs_calls: u64,
    pub braked_workspaces: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<Stop>,
    pub per_workspace: BTreeMap<WorkspaceId, WorkspaceCounts>,
    /// Structured cause of a refusal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Value>,
    /// The schema verdict this pass recorded (the consumer settles on it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_verdict: Option<i64>,
    /// Problems a setting let through (an unindexed source under `UNINDEXED_SOURCES=warn`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub schema_warnings: Vec<schema::SchemaProblem>,
    /// What the records step did in this pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub records: Option<records::Progress>,
    /// Why the records step could not run in this pass, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub records_error: Option<String>,
    /// What the census did in this pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub census: Option<schema::census::Progress>,
    /// Why the census could not read in this pass, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub census_error: Option<String>,
    /// What discovery did in this pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discovery: Option<lifecycle::discovery::Progress>,
    /// Why discovery stopped early in this pass, when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discovery_error: Option<String>,
    /// What reconciliation did in this pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reconcile: Option<reconcile::advance::Progress>,
    /// Why reconciliation stopped in this pass, when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reconcile_error: Option<String>,
    /// What reading the access logs did in this pass (`reason.observed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed: Option<reconcile::reads::Progress>,
    /// Why reading the access logs stopped in this pass, when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_error: Option<String>,
    /// Adopted assets made due this pass (the key scan had covered the schema since their adoption).
    pub adopted_due: u64,
    /// The asset bucket's promises, once read (`reason.bucket`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bucket: Option<BucketCheck>,
    /// The queue's depth and ceiling, once read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backlog: Option<Backlog>,
    /// The role the pass connected as, when it is a superuser (`reason.superuser`): a function should have its own
    /// login (docs/security.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub superuser: Option<String>,
    /// A window in which nothing is destroyed, open when the pass began (`reason.window`): the consumer defers the
    /// deletes and purges it is sent until the window ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<lifecycle::holds::Window>,
    /// When the pass stalled (`reason.stalled`): each step that had work and did none, and what held it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stalled: Option<Vec<lifecycle::runs::Held>>,
    /// The money freed since the previous pass and still waiting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub money: Option<ledger::freed::Money>,
    /// What the effect alarms read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effect: Option<lifecycle::runs::Effect>,
    /// The bucket's size as S3 reports it against the rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift: Option<DriftSeen>,
    /// Why the effect or the money could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effect_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub duration_ms: u64,
}

/// The bucket's drift as a pass saw it: whether it read S3's figures, and the newest comparison.
#[derive(Debug, Clone, Serialize)]
pub struct DriftSeen {
    /// What the pass did about S3's figures, for a person.
    pub read: String,
    /// The newest comparison recorded.
    pub newest: Option<ledger::drift::Measurement>,
}

impl SweepReport {
    pub fn new(run_id: Uuid) -> Self {
        SweepReport {
            run_id,
            outcome: RunOutcome::Ok,
            claimed: 0,
            enqueued: 0,
            released: 0,
            sqs_calls: 0,
            braked_workspaces: 0,
            stopped: None,
            per_workspace: BTreeMap::new(),
            reason: None,
            schema_verdict: None,
            schema_warnings: Vec::new(),
            records: None,
            records_error: None,
            census: None,
            census_error: None,
            discovery: None,
            discovery_error: None,
            reconcile: None,
            superuser: None,
            window: None,
            stalled: None,
            reconcile_error: None,
            observed: None,
            observed_error: None,
            adopted_due: 0,
            money: None,
            effect: None,
            drift: None,
            effect_error: None,
            bucket: None,
            backlog: None,
            error: None,
            duration_ms: 0,
        }
    }

    fn per_workspace_json(&self) -> Value {
        serde_json::to_value(&self.per_workspace).unwrap_or_else(|_| json!({}))
    }
}

/// Writes the row of a pass that has just started.
pub async fn start(pool: &PgPool, run_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!("INSERT INTO sweep_runs (id, code_version) VALUES ($1, $2)", run_id, platform::version::CODE_VERSION)
        .execute(pool)
        .await?;
    Ok(())
}

/// Marks `failed` every run still `running` that is not `current`: called with the sweep lock held, so no
/// other pass can be live (the one-minute margin spares a skipped pass still writing its own row).
pub async fn fail_abandoned(pool: &PgPool, current: Uuid) -> Result<u64, sqlx::Error> {
    let done = sqlx::query!(
        "UPDATE sweep_runs SET outcome = 'failed', finished_at = now(),
                error = coalesce(error, 'the pass ended without finishing its record (timeout or crash)')
          WHERE outcome = 'running' AND id <> $1 AND started_at < now() - interval '1 minute'",
        current,
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// Records the counts so far (the outcome stays `running`).
pub async fn progress(pool: &PgPool, report: &SweepReport) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE sweep_runs SET claimed = $2, enqueued = $3, released = $4, per_workspace = $5 WHERE id = $1",
        report.run_id,
        report.claimed as i64,
        report.enqueued as i64,
        report.released as i64,
        report.per_workspace_json(),
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Completes the row with the outcome. A records step that failed after committing batches keeps the counts its
/// batches wrote, beside its error.
pub async fn finish(pool: &PgPool, report: &SweepReport) -> Result<(), sqlx::Error> {
    let mut reason = match (&report.reason, report.stopped) {
        (Some(reason), _) => reason.clone(),
        (None, Some(stop)) => json!({ "stopped": stop }),
        (None, None) => json!({}),
    };
    if let Some(backlog) = report.backlog {
        reason["backlog"] = json!(backlog);
    }
    if let Some(verdict) = report.schema_verdict {
        reason["schema_verdict"] = json!(verdict);
    }
    if !report.schema_warnings.is_empty() {
        reason["schema_warnings"] = json!(report.schema_warnings);
    }
    if report.adopted_due > 0 {
        reason["adopted_due"] = json!(report.adopted_due);
    }
    match (&report.observed, &report.observed_error) {
        (Some(observed), _) => reason["observed"] = json!(observed),
        (None, Some(error)) => reason["observed"] = json!({ "error": error }),
        (None, None) => {}
    }
    if let Some(window) = &report.window {
        reason["window"] = json!(window);
        reason["window"]["because"] = json!(window.describe());
    }
    // What the costs and `status` read back, written through the type they read it with.
    Reason { bucket: report.bucket.clone(), superuser: report.superuser.clone(), stalled: report.stalled.clone() }
        .write_into(&mut reason);
    let reason = reason.as_object().is_some_and(|o| !o.is_empty()).then_some(reason);
    sqlx::query!(
        "UPDATE sweep_runs
            SET finished_at = now(), outcome = $2, claimed = $3, enqueued = $4, released = $5, per_workspace = $6,
                duration_ms = $7, reason = $8, error = $9, census = $10, discovery = $11, reconcile = $12,
                records = coalesce(records || $13, $13, records), money = $14, effect = $15
          WHERE id = $1",
        report.run_id,
        report.outcome as RunOutcome,
        report.claimed as i64,
        report.enqueued as i64,
        report.released as i64,
        report.per_workspace_json(),
        report.duration_ms as i64,
        reason,
        report.error.as_deref(),
        match (&report.census, &report.census_error) {
            (Some(census), _) => serde_json::to_value(census).ok(),
            (None, Some(error)) => Some(json!({ "error": error })),
            (None, None) => None,
        },
        match (&report.discovery, &report.discovery_error) {
            (Some(discovery), _) => serde_json::to_value(discovery).ok(),
            (None, Some(error)) => Some(json!({ "error": error })),
            (None, None) => None,
        },
        match (&report.reconcile, &report.reconcile_error) {
            (Some(reconcile), _) => serde_json::to_value(reconcile).ok(),
            (None, Some(error)) => Some(json!({ "error": error })),
            (None, None) => None,
        },
        match (&report.records, &report.records_error) {
            (Some(records), _) => serde_json::to_value(records).ok(),
            (None, Some(error)) => Some(json!({ "error": error })),
            (None, None) => None,
        },
        report.money.as_ref().and_then(|m| serde_json::to_value(m).ok()),
        effect_json(report),
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// The effect the alarms read, with the drift and any failure to read them: `sweep_runs.effect`.
fn effect_json(report: &SweepReport) -> Option<Value> {
    let mut effect = match &report.effect {
        Some(effect) => serde_json::to_value(effect).ok()?,
        None if report.effect_error.is_some() || report.drift.is_some() => json!({}),
        None => return None,
    };
    if let Some(drift) = &report.drift {
        effect["drift"] = json!(drift);
    }
    if let Some(error) = &report.effect_error {
        effect["error"] = json!(error);
    }
    Some(effect)
}

fn compared(report: &SweepReport) -> Option<&reconcile::advance::Compared> {
    report.reconcile.as_ref().and_then(|r| r.compared.as_ref())
}

/// A percentage as the whole number a metric carries.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // clamped to 0..=100 before the cast
fn whole_percent(percent: f64) -> u64 {
    percent.clamp(0.0, 100.0).round() as u64
}

/// The run's Embedded Metric Format line: the alarms on refused and braked passes read these.
pub fn metrics_line(report: &SweepReport) -> String {
    let is = |o: RunOutcome| u64::from(report.outcome == o);
    let census = report.census.as_ref();
    let mut counts = vec![
        ("SweepRuns", 1),
        // The heartbeat alarm watches this: a pass that checked the schema and claimed. Skipped, refused
        // failed and stalled passes do not count, so a sweep stuck in any of them pages someone.
        ("SweepCompleted", u64::from(report.outcome.completed())),
        ("HeldBack", report.backlog.map_or(0, |b| b.held_back)),
        ("Claimed", report.claimed),
        ("Enqueued", report.enqueued),
        ("Released", report.released),
        ("SqsCalls", report.sqs_calls),
        ("BrakedWorkspaces", report.braked_workspaces),
        ("SweepRefused", is(RunOutcome::Refused)),
        ("SweepBraked", is(RunOutcome::Braked)),
        ("SweepSkipped", is(RunOutcome::Skipped)),
        ("SweepFailed", is(RunOutcome::Failed)),
        ("SweepStalled", is(RunOutcome::Stalled)),
        // Also when the brake's outcome outranks it.
        ("SweepPartial", u64::from(report.released > 0)),
        // Deletes and purges wait while any column is unproven; a finding refuses the pass.
        ("CensusPercentDone", census.map_or(0, |c| whole_percent(c.percent_done))),
        ("CensusColumnsUnproven", census.map_or(0, |c| u64::try_from(c.columns_unproven).unwrap_or(0))),
        ("CensusFindings", census.map_or(0, |c| c.columns_found)),
        // Assets nobody released that nothing refers to, made due this pass; and how many were looked at.
        ("DiscoveryScanned", report.discovery.as_ref().map_or(0, |d| d.scanned)),
        ("DiscoveryFound", report.discovery.as_ref().map_or(0, |d| d.found)),
        // Keys of an inventory report read this pass; assets a comparison found without their bytes for the
        // first time (an alarm watches it), and keys no row knows, when a report was compared.
        ("ReconcileKeysRead", report.reconcile.as_ref().map_or(0, |r| r.keys_read)),
        ("AssetsLost", compared(report).map_or(0, |c| c.newly_lost)),
        ("UnknownKeys", compared(report).map_or(0, |c| u64::try_from(c.unknown_keys).unwrap_or(0))),
        // Keys no row knew given a row this pass, and adopted assets made due once the key scan covered them.
        ("AssetsAdopted", compared(report).map_or(0, |c| u64::try_from(c.adopted_keys).unwrap_or(0))),
        ("AdoptedDue", report.adopted_due),
        // Records the retention rules deleted; rules the database refused or the brake held (alarms watch both).
        ("RecordsDeleted", report.records.as_ref().map_or(0, |r| r.deleted)),
        (
            "RetentionRulesFailed",
            report.records.as_ref().map_or(u64::from(report.records_error.is_some()), |r| r.failed()),
        ),
        ("RetentionRulesHeld", report.records.as_ref().map_or(0, |r| r.held())),
        // How long deletes and purges have been held without a break (0 when they are not): an application that
        // re-declares its window for ever stops every delete in silence, and an alarm should say so.
        ("DeletesHeldSeconds", report.window.as_ref().map_or(0, |w| w.held_seconds(chrono::Utc::now()))),
    ];
    // Only from a pass that read the logs: a source that cannot be read, or whose logs stopped arriving, holds every
    // delete and purge, and an alarm should say so.
    if report.observed.is_some() || report.observed_error.is_some() {
        let stopped = report.observed.as_ref().is_none_or(|o| o.sources.iter().any(|s| s.stopped));
        counts.push(("LogsStopped", u64::from(stopped)));
    }
    // Only from a pass that read the bucket: a skipped pass says nothing about it, rather than "fine".
    if let Some(bucket) = &report.bucket {
        // Deletes and purges held: versioning not Enabled, or not proven. An alarm should page on it.
        counts.push(("BucketUnprotected", u64::from(bucket.unprotected())));
        // What deletes leave behind is kept, and paid for, for ever.
        counts.push(("NoncurrentExpiryMissing", u64::from(bucket.expiry_missing())));
    }
    // What the sweeper achieved, not whether it ran: money, and the effect alarms' figures. Only from a pass that
    // read them, so a skipped pass does not report an empty backlog.
    if let Some(money) = &report.money {
        counts.push(("FreedBytes", money.freed.total.bytes));
        counts.push(("FreedCentsPerMonth", money.freed.total.money.cents()));
        counts.push(("WaitingBytes", money.waiting.bytes));
        counts.push(("WaitingCentsPerMonth", money.waiting.money.cents()));
    }
    if let Some(effect) = &report.effect {
        counts.push(("OldestOverdueSeconds", effect.oldest_overdue.as_ref().map_or(0, |o| o.seconds)));
        counts.push(("DueBytes", effect.due_bytes));
        counts.push(("GrowingUnsettledPasses", u64::from(effect.growing_unsettled_passes)));
        counts.push(("UnsettledClaims", effect.lapsed.assets));
    }
    // From a comparison of the last few days only: S3 publishes daily, and an old verdict must not page, nor clear,
    // for ever when the comparisons stopped (status says how old the newest is).
    let recent = |m: &&ledger::drift::Measurement| ledger::drift::recent(m.metric_day, chrono::Utc::now().date_naive());
    if let Some(newest) = report.drift.as_ref().and_then(|d| d.newest.as_ref()).filter(recent) {
        counts.push(("BucketDriftPercent", whole_percent(newest.drift_percent)));
        counts.push(("BucketDrifted", u64::from(newest.drifted())));
        counts.push(("FreedNotShownBytes", newest.freed_not_shown.max(0).unsigned_abs()));
    }
    platform::metrics::emf_line(
        &[("Function", "sweep")],
        &counts,
        &[
            ("RunId", json!(report.run_id)),
            ("Outcome", json!(report.outcome)),
            ("DurationMs", json!(report.duration_ms)),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_pass_publishes_a_refusal_count_the_alarm_can_watch() {
        let mut report = SweepReport::new(Uuid::nil());
        report.outcome = RunOutcome::Refused;
        let line: Value = serde_json::from_str(&metrics_line(&report)).expect("json");
        assert_eq!((line["SweepRefused"].clone(), line["SweepBraked"].clone()), (json!(1), json!(0)));
        assert_eq!(line["Outcome"], "refused");
        let declared: Vec<&str> = line["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .expect("metrics")
            .iter()
            .filter_map(|m| m["Name"].as_str())
            .collect();
        for name in ["SweepRuns", "Claimed", "Enqueued", "Released", "SweepRefused", "SweepBraked", "BrakedWorkspaces"]
        {
            assert!(declared.contains(&name), "{name} missing from {declared:?}");
        }
    }

    #[test]
    fn a_pass_that_read_the_bucket_publishes_whether_it_is_unprotected_and_one_that_did_not_publishes_neither() {
        use platform::bucket::{BucketSafety, Versioning};
        let declared = |line: &Value| -> Vec<String> {
            line["_aws"]["CloudWatchMetrics"][0]["Metrics"]
                .as_array()
                .expect("metrics")
                .iter()
                .filter_map(|m| m["Name"].as_str().map(str::to_owned))
                .collect()
        };
        let mut report = SweepReport::new(Uuid::nil());
        report.outcome = RunOutcome::Skipped;
        let skipped: Value = serde_json::from_str(&metrics_line(&report)).expect("json");
        assert!(!declared(&skipped).iter().any(|m| m == "BucketUnprotected" || m == "NoncurrentExpiryMissing"));

        let suspended = BucketSafety { versioning: Versioning::Suspended, noncurrent_expiry: None };
        report.bucket = Some(BucketCheck::of("assets", Ok(suspended)));
        let line: Value = serde_json::from_str(&metrics_line(&report)).expect("json");
        assert!(declared(&line).iter().any(|m| m == "BucketUnprotected"), "{line}");
        assert_eq!((line["BucketUnprotected"].clone(), line["NoncurrentExpiryMissing"].clone()), (json!(1), json!(1)));
        let enabled = BucketSafety { versioning: Versioning::Enabled, noncurrent_expiry: None };
        report.bucket = Some(BucketCheck::of("assets", Ok(enabled)));
        let line: Value = serde_json::from_str(&metrics_line(&report)).expect("json");
        assert_eq!((line["BucketUnprotected"].clone(), line["NoncurrentExpiryMissing"].clone()), (json!(0), json!(1)));
    }

    #[test]
    fn what_the_readers_read_back_of_a_run_row_is_what_the_pass_wrote() {
        use ledger::freed::Money;
        use lifecycle::runs::{Claims, Effect, Lapsed};
        use serde::Deserialize;
        let workspace = Uuid::from_u128(7);
        let mut report = SweepReport::new(Uuid::nil());
        let counts = WorkspaceCounts {
            claimed: 3,
            enqueued: 2,
            released: 1,
            braked: Some("120 of 120 assets due".to_owned()),
            ..WorkspaceCounts::default()
        };
        report.per_workspace.insert(WorkspaceId(workspace), counts);
        let claims = Claims::of(&report.per_workspace_json());
        assert_eq!(
            claims.get(&workspace),
            Some(&Claims { claimed: 3, enqueued: 2, released: 1, braked: Some("120 of 120 assets due".to_owned()) }),
            "status and report read per_workspace through Claims"
        );

        let prices = ledger::Prices::default();
        let mut money = Money { class: prices.class.clone(), ..Money::default() };
        money.waiting = ledger::Priced::of(1000 * ledger::GB, &prices);
        money.waiting_per_workspace.insert(workspace, money.waiting);
        money.freed.total = ledger::Priced::of(100 * ledger::GB, &prices);
        let read = Money::deserialize(serde_json::to_value(&money).expect("json")).expect("money reads back");
        assert_eq!(
            (
                read.waiting.bytes,
                read.waiting.money.cents(),
                read.waiting_per_workspace.get(&workspace).map(|p| p.bytes)
            ),
            (1000 * ledger::GB, 2300, Some(1000 * ledger::GB))
        );
        assert_eq!((read.freed.total.bytes, read.freed.total.money.cents()), (100 * ledger::GB, 230));

        report.effect = Some(Effect {
            due_assets: 4,
            due_bytes: 40,
            lapsed: Lapsed { assets: 1, ..Lapsed::default() },
            ..Effect::default()
        });
        report.effect_error = Some("the money could not be read".to_owned());
        let stored = effect_json(&report).expect("an effect");
        // The keys `ledger::freed::newest` filters the rows on.
        assert!(stored.get("due_bytes").is_some() && stored["error"] == "the money could not be read", "{stored}");
        assert_eq!(Effect::deserialize(&stored).ok(), report.effect, "status reads the effect through Effect");
    }
}
