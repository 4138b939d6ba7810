//! The scheduled half of the pair: one pass claims due assets fairly across workspaces, under a per-pass cap
//! and a time budget, and enqueues one cleanup message per asset.
//!
//! A pass, in order: record the run; take the sweep lock or record `skipped`; read what the asset bucket promises
//! (invariant 18: versioning and noncurrent-version expiry, recorded, never assumed); delete the records the
//! application's retention rules say have expired, within its share of the time; advance the census within its share
//! of the time (invariant 13); check the reference map and record the verdict the consumer settles on, or record
//! `refused` (invariant 4); discover, within its share of the time, the unscheduled assets no source refers to
//! and make them due (invariant 12); apply the blast-radius brake per
//! workspace (invariant 11); read the queue's depth and claim only what keeps it under its ceiling; then claim a
//! batch (one statement, committed), send it, release what did not send, and repeat. No transaction is open
//! while SQS is called.

pub mod athena;
pub mod enqueue;
pub mod lock;
pub mod record;
pub mod stall;
pub mod storage_metrics;

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::{Diagnostic, LambdaEvent};
use lifecycle::adopted::AdoptedDue;
use lifecycle::runs::RunOutcome;
use lifecycle::{assets, brake, discovery};
use platform::step::{Share, Step};
use reconcile::advance::Reconciliation;
use reconcile::advance::on_engine::Outside;
use schema::{census, verdict};
use serde_json::json;
use settings::Settings;
use sqlx::PgPool;
use tracing::{Instrument, error, info, warn};
use uuid::Uuid;

use crate::lock::SweepLock;
use crate::record::{Backlog, Stop, SweepReport, WorkspaceCounts};
use lifecycle::runs::BucketCheck;

/// A pass that could not be carried out (its run row says `failed` when the database allowed writing it).
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("sweep pass {run_id} failed: {source}")]
    Database {
        run_id: Uuid,
        #[source]
        source: sqlx::Error,
    },
}

impl From<SweepError> for Diagnostic {
    fn from(e: SweepError) -> Diagnostic {
        Diagnostic { error_type: "SweepError".into(), error_message: e.to_string() }
    }
}

/// The sweep with its clients, built once per cold start.
pub struct Sweeper {
    pool: PgPool,
    sqs: aws_sdk_sqs::Client,
    s3: Option<aws_sdk_s3::Client>,
    cloudwatch: Option<aws_sdk_cloudwatch::Client>,
    athena: Option<athena::Athena>,
    settings: Settings,
}

impl Sweeper {
    pub fn new(pool: PgPool, sqs: aws_sdk_sqs::Client, settings: Settings) -> Self {
        Sweeper { pool, sqs, s3: None, cloudwatch: None, athena: None, settings }
    }

    /// With S3: the asset bucket's versioning and lifecycle, read every pass (without, the pass records them as not
    /// proven), and for reconciliation (`RECONCILE_INVENTORY`) the inventory reports and the asset bucket's objects.
    #[must_use]
    pub fn with_storage(mut self, s3: aws_sdk_s3::Client) -> Self {
        self.s3 = Some(s3);
        self
    }

    /// With CloudWatch: S3's daily storage metrics of the asset bucket, compared once a day with what the rows
    /// account for (without, the comparison is not made and `status` says so).
    #[must_use]
    pub fn with_storage_metrics(mut self, cloudwatch: aws_sdk_cloudwatch::Client) -> Self {
        self.cloudwatch = Some(cloudwatch);
        self
    }

    /// With Athena, when `RECONCILE_ENGINE` asks for it: the bucket comparison of the reports it takes runs there.
    #[must_use]
    pub fn with_athena(mut self, client: aws_sdk_athena::Client) -> Self {
        self.athena = self.settings.reconcile.athena.as_ref().map(|settings| athena::Athena::new(client, settings));
        self
    }

    /// The Lambda handler. The EventBridge scheduled event only triggers the pass (a manual invoke sends one of
    /// the same shape: `detail-type`, `source` and `detail` are required); the time budget comes from the
    /// invocation's deadline.
    pub async fn handle(&self, event: LambdaEvent<EventBridgeEvent>) -> Result<SweepReport, SweepError> {
        let remaining = event.context.deadline().duration_since(SystemTime::now()).unwrap_or(Duration::ZERO);
        let budget_end = Instant::now() + remaining.saturating_sub(self.settings.sweep.time_reserve);
        let schedule = &event.payload;
        info!(
            request_id = %event.context.request_id,
            event_id = schedule.id.as_deref().unwrap_or("-"),
            event_time = ?schedule.time,
            detail_type = %schedule.detail_type,
            source = %schedule.source,
            remaining_ms = u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX),
            "sweep invoked"
        );
        self.run_pass(budget_end).await
    }

    /// One pass that starts no new batch after `budget_end`.
    pub async fn run_pass(&self, budget_end: Instant) -> Result<SweepReport, SweepError> {
        let started = Instant::now();
        let mut report = SweepReport::new(Uuid::new_v4());
        let run_id = report.run_id;
        let fail = |source| SweepError::Database { run_id, source };
        record::start(&self.pool, run_id).await.map_err(fail)?;

        let span = tracing::info_span!("sweep_pass", run_id = %run_id);
        let result = self.locked_pass(&mut report, budget_end).instrument(span).await;
        report.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        if let Err(e) = &result {
            report.outcome = RunOutcome::Failed;
            report.error = Some(e.to_string());
            error!(%run_id, error = %e, claimed = report.claimed, enqueued = report.enqueued, "sweep pass failed");
        }
        // The row is the record of the pass: a failure to complete it fails the invocation.
        let finished = record::finish(&self.pool, &report).await;
        println!("{}", record::metrics_line(&report));
        result.map_err(fail)?;
        finished.map_err(fail)?;
        info!(
            %run_id,
            outcome = %report.outcome,
            claimed = report.claimed,
            enqueued = report.enqueued,
            released = report.released,
            braked_workspaces = report.braked_workspaces,
            duration_ms = report.duration_ms,
            "sweep pass finished"
        );
        Ok(report)
    }

    async fn locked_pass(&self, report: &mut SweepReport, budget_end: Instant) -> Result<(), sqlx::Error> {
        let Some(mut lock) = SweepLock::try_acquire(&self.pool).await? else {
            info!("another sweep holds the lock; skipping this pass");
            report.outcome = RunOutcome::Skipped;
            return Ok(());
        };
        let result = async {
            let abandoned = record::fail_abandoned(&self.pool, report.run_id).await?;
            if abandoned > 0 {
                warn!(abandoned, "earlier passes died without finishing their run rows; marked failed");
            }
            report.superuser = platform::db::superuser(lock.conn()).await?;
            if let Some(role) = &report.superuser {
                warn!(%role, "the sweep connects as a superuser: give it a login of its own (docs/security.md)");
            }
            report.window = lifecycle::holds::window(lock.conn(), self.settings.schema_quiet_period).await?;
            if let Some(window) = &report.window {
                info!(because = %window.describe(), "deletes and purges wait for a window to end");
            }
            // Before this pass claims them again: claims an earlier pass made whose lease ran out unsettled.
            let lapsed = lifecycle::runs::effect::lapsed(lock.conn()).await;
            let checked = self.checked_pass(&mut lock, report, budget_end).await;
            // Also after a refusal: an overdue asset grows older while nothing is claimed.
            self.account(lock.conn(), report, lapsed).await;
            checked
        }
        .await;
        lock.release().await;
        result
    }

    /// The pass's effect and money, and once a day the bucket's size as S3 reports it against the rows. A failure
    /// is recorded in the run row and logged; it never fails the pass.
    async fn account(
        &self,
        conn: &mut sqlx::PgConnection,
        report: &mut SweepReport,
        lapsed: Result<lifecycle::runs::Lapsed, sqlx::Error>,
    ) {
        let window = match report.bucket.as_ref().and_then(ledger::Window::of) {
            Some(window) => Ok(window),
            None => ledger::window::window(&mut *conn).await,
        };
        let result = async {
            let window = window?;
            report.effect = Some(lifecycle::runs::effect::effect(&mut *conn, report.run_id, lapsed?).await?);
            report.money = Some(ledger::freed::money(&mut *conn, report.run_id, window, &self.settings.prices).await?);
            report.drift = Some(self.drift(&mut *conn, report, window).await?);
            Ok::<_, sqlx::Error>(())
        }
        .await;
        if let Err(e) = result {
            warn!(error = %e, "the pass's effect could not be read: its alarms see no figure this time");
            report.effect_error = Some(e.to_string());
        }
    }

    /// The newest comparison of the bucket's reported size with the rows, made first when S3 may have published a
    /// newer day.
    async fn drift(
        &self,
        conn: &mut sqlx::PgConnection,
        report: &SweepReport,
        window: ledger::Window,
    ) -> Result<record::DriftSeen, sqlx::Error> {
        use ledger::drift;
        let bucket = &self.settings.asset_bucket;
        let today = chrono::Utc::now().date_naive();
        let newest = drift::newest(&mut *conn, bucket).await?;
        let read = match &self.cloudwatch {
            None => "this sweep has no CloudWatch client: the bucket's size is not compared".to_owned(),
            Some(_) if !drift::worth_asking(newest.as_ref().map(|m| m.metric_day), today) => {
                "compared already for the newest day S3 publishes".to_owned()
            }
            Some(cloudwatch) => match storage_metrics::read(cloudwatch, bucket, today).await {
                Ok(None) => format!("S3 has published no storage metrics for bucket {bucket} in the last four days"),
                Ok(Some(reported)) if newest.as_ref().is_some_and(|m| m.metric_day >= reported.metric_day) => {
                    format!("S3's newest figures are for {}, compared already", reported.metric_day)
                }
                Ok(Some(reported)) => {
                    let day = reported.metric_day;
                    let (believed, expired) = drift::believed(&mut *conn, window, day).await?;
                    let expiry_missing = report.bucket.as_ref().is_some_and(BucketCheck::expiry_missing);
                    let alarm = self.settings.drift_alarm_percent;
                    let compared = drift::compare(bucket, reported, believed, expired, alarm, expiry_missing);
                    if let Some(cause) = &compared.cause {
                        warn!(%cause, drift_percent = compared.drift_percent, "the bucket's size drifted from the rows");
                    }
                    if drift::record(&mut *conn, &compared).await? {
                        format!("compared S3's figures for {day}")
                    } else {
                        format!("S3's figures for {day} were compared already")
                    }
                }
                Err(e) => format!("S3's storage metrics could not be read: {e}"),
            },
        };
        let newest = drift::newest(&mut *conn, bucket).await?;
        Ok(record::DriftSeen { read, newest })
    }

    async fn checked_pass(
        &self,
        lock: &mut SweepLock,
        report: &mut SweepReport,
        budget_end: Instant,
    ) -> Result<(), sqlx::Error> {
        // Whether a delete could be undone, read once a pass and recorded. The pass goes on either way: claiming and
        // retiring can be undone, and the consumer reads the versioning again before it destroys anything.
        let bucket = BucketCheck::read(self.s3.as_ref(), &self.settings.asset_bucket).await;
        if let Some(why) = &bucket.held_because {
            error!(bucket = %bucket.bucket, reason = %why, "bucket unprotected: deletes and purges are held");
        }
        if let Some(cost) = &bucket.cost_warning {
            warn!(bucket = %bucket.bucket, warning = %cost, "noncurrent versions are not known to expire");
        }
        report.bucket = Some(bucket);

        // Records first, then files: the assets the expired records were the last reference to are unreferenced
        // when discovery asks in this same pass. A failure stops this step only.
        let records = records::Records {
            run_id: report.run_id,
            time_zone: &self.settings.records.time_zone,
            brake_share_percent: self.settings.records.brake_share_percent,
            new_rule_delay: self.settings.records.new_rule_delay,
            approval_tolerance: self.settings.approval_tolerance,
        };
        // A declared window destroys nothing anywhere, the application's records included: the migration may be
        // moving them. The quiet period after a schema change holds only the assets' deletes and purges.
        match &report.window {
            Some(window @ lifecycle::holds::Window::Declared { .. }) => {
                info!(because = %window.describe(), "the retention rules wait for the window to end");
            }
            _ => {
                (report.records, report.records_error) =
                    self.step(&records, self.settings.records.time_share_percent, budget_end).await;
            }
        }

        // The quota's totals take in what the asset writes since the last pass changed; a failure leaves the
        // changes to be read one by one, and folded next pass.
        match records::quota::fold(lock.conn()).await {
            Ok(folded) => info!(folded, "usage changes folded into the workspaces' totals"),
            Err(e) => warn!(error = %e, "usage changes could not be folded: the next pass tries again"),
        }

        // The access logs delivered since the last pass: a read recorded before the consumer settles keeps its file.
        // A source that cannot be read is recorded as such, and deletes and purges wait for it; the pass goes on.
        if let Some(observed) = self.observed_use() {
            (report.observed, report.observed_error) =
                self.step(&observed, self.settings.logs.time_share_percent, budget_end).await;
        }

        // The census failing does not stop the pass: its columns stay unproven, so deletes and purges keep
        // waiting, while the check, the brake and the claim go on. Before the schema check, so the verdict the
        // consumer settles on says what the census has proven (invariant 13).
        let census = self.settings.census;
        let replica = self.settings.census_replica.as_ref().map(platform::db::DatabaseSettings::connect_options);
        let census = census::Census {
            max_batches: census.max_batches,
            batch_blocks: census.batch_blocks,
            batch_timeout: census.batch_timeout,
            cycle_interval: census.cycle_interval,
            readers: census.readers,
            layout: self.settings.reconcile.layout.as_ref(),
            replica: replica.as_ref(),
        };
        (report.census, report.census_error) =
            self.step(&census, self.settings.census.time_share_percent, budget_end).await;
        let checked = verdict::record(lock.conn(), (&self.settings).into(), Some(report.run_id)).await?;
        report.schema_verdict = Some(checked.id);
        let map = match checked.outcome {
            Ok(map) => {
                info!(
                    sources = map.sources.len(),
                    verdict = checked.id,
                    duration_ms = u64::try_from(checked.duration.as_millis()).unwrap_or(u64::MAX),
                    "reference map validated"
                );
                for warning in &map.warnings {
                    warn!(%warning, "schema check warning");
                }
                report.schema_warnings = map.warnings.clone();
                map
            }
            Err(refusal) => {
                // Discovery reads the same map: a refusal stops it too.
                error!(reason = %refusal, "schema check refused: discovering and enqueueing nothing");
                report.outcome = RunOutcome::Refused;
                report.reason = Some(json!({ "schema_check": refusal }));
                return Ok(());
            }
        };

        // Before the brake reads what is due, so what discovery makes due this pass counts in it (invariant 11). A
        // failure stops discovery only: what it did not schedule waits for the next pass.
        if self.settings.discovery.enabled {
            let settings = self.settings.discovery;
            let discovery = discovery::Discovery {
                map: &map,
                pass: discovery::Pass { run_id: report.run_id, verdict: checked.id },
                max_scanned: u64::from(settings.max_per_pass),
                batch_size: settings.batch_size,
                grace: self.settings.grace,
                // Records deleted this pass may have been an asset's last reference: it is found now, not after
                // the rest (docs/design.md, "Discovery").
                rest: if report.records.as_ref().is_some_and(|r| r.deleted > 0) {
                    Duration::ZERO
                } else {
                    settings.cycle_interval
                },
            };
            (report.discovery, report.discovery_error) =
                self.step(&discovery, settings.time_share_percent, budget_end).await;
        }

        // It makes nothing due (what it adopts waits for the key scan), so it may run after discovery; a failure
        // stops reconciliation only, and the next pass resumes from the last file read.
        if let Some(reconciliation) = self.reconciliation() {
            (report.reconcile, report.reconcile_error) =
                self.step(&reconciliation, self.settings.reconcile.time_share_percent, budget_end).await;
        }

        // Adopted bytes become due once the key scan has read every text and JSON column since their adoption:
        // before the brake, which counts them.
        if self.settings.reconcile.layout.is_some() {
            let (scheduled, error) = self.step(&AdoptedDue, 100, budget_end).await;
            report.adopted_due = scheduled.unwrap_or(0);
            if let Some(error) = error {
                report.reconcile_error.get_or_insert(error);
            }
        }

        let mut eligible = Vec::new();
        for weighed in brake::weigh(&self.pool, &self.settings.brake, self.settings.approval_tolerance).await? {
            let id = weighed.due.workspace_id;
            let mut counts = WorkspaceCounts::default();
            let held_because = weighed.held_because();
            counts.outgrown = weighed.outgrown;
            match (weighed.tripped, weighed.approval) {
                (Some(_), None) => {
                    let reason = held_because.unwrap_or_default();
                    warn!(workspace_id = %id, %reason, "blast-radius brake: enqueueing nothing for this workspace");
                    report.braked_workspaces += 1;
                    counts.braked = Some(reason);
                }
                (Some(reason), Some(approval)) => {
                    info!(workspace_id = %id, %reason, approval = approval.id, "brake tripped but approved");
                    counts.approval = Some(approval);
                    eligible.push(id.0);
                }
                (None, _) => eligible.push(id.0),
            }
            counts.due = Some(weighed.due);
            report.per_workspace.insert(id, counts);
        }

        report.stopped = Some(match self.room_in_queue(report).await {
            Some(room) => self.claim_and_send(eligible, report, budget_end, room).await?,
            None => Stop::QueueUnavailable,
        });
        report.stalled = stall::stalled(report);
        report.outcome = if report.braked_workspaces > 0 {
            RunOutcome::Braked
        } else if let Some(held) = &report.stalled {
            for held in held {
                error!(step = held.step, by = %held.by, "the pass stalled: it had work and advanced none of it");
            }
            RunOutcome::Stalled
        } else if report.released > 0 || report.stopped == Some(Stop::QueueUnavailable) {
            RunOutcome::Partial
        } else {
            RunOutcome::Ok
        };
        Ok(())
    }

    /// Runs one step of the pass within `percent` of what is left of it: its progress for the run record, or the
    /// error that stopped it (the pass goes on without it).
    async fn step<S: Step>(
        &self,
        step: &S,
        percent: u32,
        budget_end: Instant,
    ) -> (Option<S::Progress>, Option<String>) {
        match step.advance(&self.pool, Share::of(percent, budget_end)).await {
            Ok(progress) => {
                S::log(&progress);
                (Some(progress), None)
            }
            Err(e) => {
                warn!(step = S::NAME, error = %e, "{}", S::ON_FAILURE);
                (None, Some(e.to_string()))
            }
        }
    }

    /// Reading the access logs, when S3 is at hand: every configured source (none: the step forgets them all, so
    /// nothing waits for logs no longer read).
    fn observed_use(&self) -> Option<reconcile::reads::ObservedUse<'_>> {
        use reconcile::reads::{ObservedUse, Source};
        let logs = &self.settings.logs;
        let mut sources = Vec::new();
        if let Some(location) = &logs.access {
            sources.push(Source::Access { location, layout: logs.access_layout, bucket: &self.settings.asset_bucket });
        }
        if let Some(location) = &logs.cloudfront {
            sources.push(Source::CloudFront { location, origin_path: &logs.origin_path });
        }
        Some(ObservedUse {
            s3: self.s3.as_ref()?,
            sources,
            ignored: &logs.ignore_requesters,
            lag: logs.delivery_lag,
            max_objects: logs.max_objects,
        })
    }

    /// Reconciliation, when it is configured with an inventory location and S3 is at hand.
    fn reconciliation(&self) -> Option<Reconciliation<'_, athena::Athena>> {
        let settings = &self.settings.reconcile;
        let (Some(layout), Some(inventory), Some(s3)) = (&settings.layout, &settings.inventory, &self.s3) else {
            return None;
        };
        Some(Reconciliation {
            layout,
            inventory,
            bucket: &self.settings.asset_bucket,
            grace: self.settings.grace,
            confirm: usize::try_from(settings.confirm_lost).unwrap_or(usize::MAX),
            adopt_max: settings.adopt_max,
            tolerance: self.settings.approval_tolerance,
            s3,
            engine: self.athena.as_ref().zip(settings.athena.as_ref()).map(|(engine, athena)| Outside {
                engine,
                export: &athena.export,
                above_bytes: athena.above_bytes,
            }),
        })
    }

    /// How many messages this pass may add to the queue: its ceiling less what it holds now (waiting and in
    /// flight). Messages the consumers take meanwhile only leave more room, so reading once is enough. `None`
    /// when the queue cannot be read: it will not take messages either.
    async fn room_in_queue(&self, report: &mut SweepReport) -> Option<u64> {
        let ceiling = self.settings.sweep.queue_ceiling;
        match platform::queues::describe(&self.sqs, &self.settings.queue.url).await {
            Ok(queue) => {
                let depth = queue.depth.total();
                report.backlog = Some(Backlog { queue_depth: depth, ceiling, held_back: 0 });
                Some(ceiling.saturating_sub(depth))
            }
            Err(e) => {
                warn!(error = %e, "cannot read the queue's depth: claiming nothing");
                report.error.get_or_insert_with(|| e.to_string());
                None
            }
        }
    }

    /// Claims and sends batch after batch until a stop condition; returns which one.
    async fn claim_and_send(
        &self,
        mut workspaces: Vec<Uuid>,
        report: &mut SweepReport,
        budget_end: Instant,
        room: u64,
    ) -> Result<Stop, sqlx::Error> {
        let settings = &self.settings.sweep;
        let cap = u64::from(settings.max_per_pass);
        let mut released_this_pass: Vec<Uuid> = Vec::new();
        loop {
            if workspaces.is_empty() {
                return Ok(Stop::Drained);
            }
            if report.claimed >= cap {
                return Ok(Stop::Cap);
            }
            // Released claims were never sent: they take no room in the queue.
            let sent = report.claimed - report.released;
            if sent >= room {
                let held_back = assets::claimable(&self.pool, &workspaces, &released_this_pass).await?;
                if held_back == 0 {
                    return Ok(Stop::Drained);
                }
                if let Some(backlog) = report.backlog.as_mut() {
                    backlog.held_back = held_back;
                }
                warn!(held_back, room, "the queue is at its ceiling: the rest waits for a later pass");
                return Ok(Stop::Backlog);
            }
            if Instant::now() >= budget_end {
                return Ok(Stop::TimeBudget);
            }
            let limit = (cap - report.claimed).min(room - sent).min(u64::from(settings.batch_size)) as i64;
            // An even share of the batch for each workspace with due rows; at least one each.
            let per_workspace = (limit + workspaces.len() as i64 - 1) / workspaces.len() as i64;
            let lease = self.settings.queue.lease();
            let claims =
                assets::claim_batch(&self.pool, &workspaces, per_workspace, limit, lease, &released_this_pass).await?;
            if claims.is_empty() {
                return Ok(Stop::Drained);
            }
            let mut in_batch: HashMap<Uuid, i64> = HashMap::new();
            for c in &claims {
                report.per_workspace.entry(c.workspace_id).or_default().claimed += 1;
                *in_batch.entry(c.workspace_id.0).or_default() += 1;
            }
            report.claimed += claims.len() as u64;
            if (claims.len() as i64) < limit {
                // Not cut short by the batch limit, so a workspace that gave less than its share has nothing
                // claimable left; the others may have more.
                workspaces.retain(|w| in_batch.get(w).copied().unwrap_or(0) >= per_workspace);
            } else {
                // Cut short (more workspaces than the batch has room for): those not served go first next time.
                let (waiting, served): (Vec<Uuid>, Vec<Uuid>) =
                    workspaces.iter().partition(|w| !in_batch.contains_key(*w));
                workspaces = waiting.into_iter().chain(served).collect();
            }

            let sent = enqueue::send_all(
                &self.sqs,
                &self.settings.queue.url,
                report.run_id,
                claims,
                settings.send_concurrency as usize,
            )
            .await;
            report.sqs_calls += sent.calls;
            for c in &sent.delivered {
                report.per_workspace.entry(c.workspace_id).or_default().enqueued += 1;
            }
            report.enqueued += sent.delivered.len() as u64;
            if let Some((_, reason)) = sent.failed.first() {
                warn!(failed = sent.failed.len(), first_reason = %reason, "messages not sent; releasing their claims");
                report.error.get_or_insert_with(|| reason.clone());
            }
            let unsent: Vec<_> = sent.failed.into_iter().map(|(claim, _)| claim).collect();
            report.released += assets::release(&self.pool, &unsent).await?;
            for c in &unsent {
                report.per_workspace.entry(c.workspace_id).or_default().released += 1;
                // Retried by the next pass, not by the next batch of this one.
                released_this_pass.push(c.asset_id.0);
            }
            record::progress(&self.pool, report).await?;

            if sent.delivered.is_empty() && sent.failed_calls > 0 {
                return Ok(Stop::QueueUnavailable);
            }
        }
    }
}
