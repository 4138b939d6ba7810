//! `status`: the health page. Exits 1 when something needs a person — the dead-letter queue holds messages, the
//! last pass was refused, braked or failed, no good pass ran within the expected interval, or the schema check
//! refuses now, a retention rule failed or is held by its brake, or reconciliation found assets whose bytes are gone or a prefix shared with another writer,
//! or the newest pass that read the bucket found its versioning not `Enabled` (or could not read it) — so it can
//! back a monitor.

use platform::step::Step;
use std::fmt::Write as _;

use lifecycle::runs::RunOutcome;
use schema::{self, SchemaCheckError};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{Output, connect};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// How many recent passes to list.
    #[arg(long, default_value_t = 10)]
    runs: i64,
    /// A good pass must have finished within this long (the schedule is every 15 minutes).
    #[arg(long, default_value = "1h")]
    expect_within: humantime::Duration,
    /// The stack's CloudWatch dashboard (its output `DashboardName`), printed for a look at the history.
    #[arg(long, env = "DASHBOARD_NAME")]
    dashboard: Option<String>,
}

/// How far back the settle rate is measured for the backlog's estimate.
const RATE_WINDOW_SECS: f64 = 900.0;

pub(crate) async fn run(args: Args) -> anyhow::Result<Output> {
    let (settings, pool, sdk) = connect::everything().await?;
    let mut conn = pool.acquire().await?;
    let runs = lifecycle::runs::standing::recent(&mut conn, args.runs).await?;
    let last_good = lifecycle::runs::standing::last_good(&mut conn).await?;
    let lifecycle::standing::Backlog { due, oldest_due_seconds: oldest_due, leased, largest: backlog } =
        lifecycle::standing::backlog(&mut conn).await?;
    // What the consumers settled lately, for how long the backlog will take.
    let settled_lately = lifecycle::standing::settled_within(&mut conn, RATE_WINDOW_SECS).await?;
    let (failed_count, failed) = lifecycle::standing::failed(&mut conn).await?;
    let approvals = lifecycle::brake::in_force(&mut conn).await?;
    let freed = ledger::freed::last_day(&mut conn).await?;
    drop(conn);
    let (schema, census_too_slow) = match crate::connect::check(&pool, (&settings).into()).await {
        Ok(map) => {
            let slow = map.unproven.iter().find_map(|u| u.strip_prefix(schema::census::TOO_SLOW)).map(str::to_owned);
            (Ok(map.sources.len()), slow)
        }
        Err(SchemaCheckError::Refused(refusal)) => (Err(refusal.to_string()), None),
        Err(SchemaCheckError::Database(e)) => (Err(format!("cannot read the catalog: {e}")), None),
    };
    // What the consumer would settle on now (as this CLI's role sees it): informative, since a verdict is renewed
    // by every pass and a change waits at most one.
    let settle_on = {
        let mut conn = pool.acquire().await?;
        match schema::verdict::current(&mut conn, settings.schema_verdict_max_age, None).await {
            Ok((current, map)) => Ok(format!(
                "verdict {} of pass {}, {} source(s), catalog unchanged (by {})",
                current.id,
                current.sweep_run_id.map_or("-".to_owned(), |id| id.to_string()),
                map.map_or(0, |m| m.sources.len()),
                current.matched
            )),
            Err(e) => Err(e.to_string()),
        }
    };
    // Each step of a pass, as it stands (reconciliation's includes adoption's).
    let (census, discovery, reconciliation, logs) = {
        let mut conn = pool.acquire().await?;
        (
            <schema::census::Census<'_> as Step>::standing(&mut conn).await?,
            <lifecycle::discovery::Discovery<'_> as Step>::standing(&mut conn).await?,
            <::reconcile::advance::Reconciliation<'_> as Step>::standing(&mut conn).await?,
            <::reconcile::reads::ObservedUse<'_> as Step>::standing(&mut conn).await?,
        )
    };
    // What records name of the keys no row knows: read with reconciliation's newest listing, not fetched again.
    let naming = &reconciliation.naming;
    let (records_text, records, records_attention) = crate::retention::last_pass(&pool).await?;
    let sqs = platform::aws::sqs_client(&sdk);
    // A queue it cannot read is one line of the page, not the end of it: the database's half still shows.
    let queues = platform::queues::with_dead_letter(&sqs, &settings.queue.url).await.map_err(|e| e.to_string());

    // What needs a person.
    let mut attention = Vec::new();
    let expected = args.expect_within.as_secs_f64();
    match &last_good {
        None => attention.push("no pass has ever finished well".to_owned()),
        Some(good) if good.age_seconds > expected => attention.push(format!(
            "no good pass for {} (expected within {})",
            humantime::format_duration(
                std::time::Duration::try_from_secs_f64(good.age_seconds.trunc()).unwrap_or_default()
            ),
            args.expect_within
        )),
        Some(_) => {}
    }
    // The newest pass that got to a verdict: a running or skipped one says nothing about health.
    let last_finished = runs.iter().find(|r| !matches!(r.outcome, RunOutcome::Running | RunOutcome::Skipped));
    if let Some(last) = last_finished
        && last.outcome.needs_attention()
    {
        // A stalled pass says what held it, step by step.
        let held: Vec<String> =
            last.reason().stalled.unwrap_or_default().iter().map(|h| format!("{}: {}", h.step, h.by)).collect();
        match held.is_empty() {
            true => attention.push(format!("the last pass was {} ({})", last.outcome, last.id)),
            false => attention.push(format!("the last pass was {} ({}): {}", last.outcome, last.id, held.join("; "))),
        }
    }
    match &queues {
        Ok((_, dlq)) if dlq.depth.waiting + dlq.depth.in_flight > 0 => attention
            .push(format!("the dead-letter queue holds {} message(s)", dlq.depth.waiting + dlq.depth.in_flight)),
        Ok(_) => {}
        Err(e) => attention.push(format!("the queues could not be read: {e}")),
    }
    if let Err(reason) = &schema {
        attention.push(format!("the schema check refuses now: {reason}"));
    }
    if let Some(why) = &census_too_slow {
        attention.push(format!(
            "deletes and purges wait in every workspace: the census's {why}; give it more of each pass \
             (CENSUS_TIME_SHARE_PERCENT, CENSUS_BATCH_BLOCKS) or a shorter rest (CENSUS_CYCLE_INTERVAL)"
        ));
    }
    if reconciliation.lost > 0 {
        attention.push(format!(
            "{} asset(s) have lost their bytes (found by reconciliation; asset-sweeper explain <asset>)",
            reconciliation.lost
        ));
    }
    for prefix in reconciliation.last.iter().flat_map(|l| &l.shared_prefixes) {
        attention.push(format!("prefix {prefix:?} is shared with another writer (the last reconciliation)"));
    }
    for w in reconciliation.withdrawn.iter().map(|r| &r.withdrawn) {
        let previous = w.previous_keys.map_or(String::new(), |n| format!(" and {n} in the report before"));
        attention.push(format!(
            "prefix {:?} had its approval withdrawn: a report found {} adoptable key(s) there against the {} approved \
             (by {}){previous}, beyond the {}% tolerance; nothing is adopted there until a person reads the report \
             (asset-sweeper reconcile --dry-run) and approves again (asset-sweeper approve --prefix)",
            w.prefix, w.keys, w.approved_keys, w.approved_by, w.tolerance_percent
        ));
    }
    for prefix in reconciliation.last.iter().flat_map(|l| &l.awaiting_approval) {
        if reconciliation.withdrawn.iter().any(|w| w.withdrawn.prefix == *prefix) {
            continue;
        }
        attention.push(format!(
            "prefix {prefix:?} holds bytes no row knows and adopts nothing until approved (asset-sweeper approve --prefix)"
        ));
    }
    // Held by a name relative to a root: a key source the application has not declared (integrating.md, "Key
    // sources"). Held by a key its text writes: kept while it does, nothing to do.
    if reconciliation.relative_only > 0 {
        let columns: std::collections::BTreeSet<&str> =
            reconciliation.relative_sample.iter().map(|(_, c)| c.as_str()).collect();
        attention.push(format!(
            "{} adopted object(s) are held only by a name relative to a root in {}: declare the key source \
             (asset-sweeper reconcile --dry-run prints the declaration), and they are kept with their rows",
            reconciliation.relative_only,
            columns.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    if reconciliation.removed_named > 0 {
        attention.push(format!(
            "{} adopted object(s) were retired or removed and a record names them now: restore (retired) or undelete \
             (removed) them: {}",
            reconciliation.removed_named,
            reconciliation
                .removed_sample
                .iter()
                .map(|(key, state, column)| format!("{key} ({state}, named by {column})"))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    attention.extend(records_attention);
    // The access logs: a source that cannot be read, or whose logs stopped arriving, holds every delete and purge.
    let now = chrono::Utc::now();
    attention.extend(logs.sources.iter().filter_map(|source| source.needs_person(now)));
    // The bucket as the newest pass that read it found it (`reason.bucket`): deletes and purges wait while its
    // versioning is not Enabled, and only a person can turn it back on.
    let bucket = runs.iter().find_map(|r| r.reason().bucket.map(|b| (r, b)));
    if let Some((run, checked)) = &bucket
        && let Some(why) = &checked.held_because
    {
        attention.push(format!("deletes and purges are held: {why} (pass {})", run.id));
    }
    let braked: Vec<(Uuid, String)> = last_finished
        .map(|r| r.workspaces().into_iter().filter_map(|(id, claims)| Some((id, claims.braked?))).collect())
        .unwrap_or_default();

    // What is wrong with how it runs, not with what it does: said, but nothing waits for a person because of it.
    let superuser = last_finished.and_then(|r| r.reason().superuser);
    let mut warnings: Vec<String> = superuser
        .iter()
        .map(|role| {
            format!(
                "the sweep connects as the superuser {role}: give each function a login of its own (docs/security.md)"
            )
        })
        .collect();
    // A window in which nothing is destroyed is meant to be (a migration's, or the quiet after one): said, as it
    // stands now, with how it ends.
    let window = lifecycle::holds::window(&mut *pool.acquire().await?, settings.schema_quiet_period).await?;
    if let Some(window) = &window {
        warnings.push(format!("deletes and purges wait, in every workspace: {}", window.describe()));
    }
    // A pin that ends soon: whoever relies on it may want it longer.
    let pins = lifecycle::holds::pins(&mut *pool.acquire().await?).await?;
    let soon = chrono::Utc::now() + chrono::Duration::days(7);
    for pin in pins.iter().filter(|p| p.ends_at <= soon) {
        warnings.push(format!("{} ends within a week (asset-sweeper pin list)", pin.describe()));
    }

    // What it costs and whether it worked: the money per workspace, S3's figures against the rows, and the effect.
    let prices = crate::money::prices()?;
    let mut conn = pool.acquire().await?;
    let ledger = crate::money::ledger(&mut conn, None).await?;
    let (effect_text, effect_json, effect_attention) =
        crate::money::effect(&mut conn, &settings.asset_bucket, &prices).await?;
    drop(conn);
    attention.extend(effect_attention);

    let mut text = String::new();
    let verdict = if attention.is_empty() { "OK" } else { "NEEDS A PERSON" };
    let _ = writeln!(text, "asset-sweeper: {verdict}");
    for reason in &attention {
        let _ = writeln!(text, "  ! {reason}");
    }
    for warning in &warnings {
        let _ = writeln!(text, "  ~ {warning}");
    }
    match &last_good {
        Some(good) => {
            let _ = writeln!(
                text,
                "last good pass: {} ({}), {:.0} min ago",
                good.finished_at,
                good.outcome,
                good.age_seconds / 60.0
            );
        }
        None => text.push_str("last good pass: never\n"),
    }
    let _ = writeln!(text, "recent passes:");
    for r in &runs {
        let took = r.duration_ms.map_or("-".to_owned(), |ms| format!("{ms} ms"));
        let detail = r.error.clone().or_else(|| r.reason.as_ref().map(Value::to_string)).unwrap_or_default();
        let _ = writeln!(
            text,
            "  {}  {:<8} claimed {:>5} enqueued {:>5} released {:>4} {:>9}  {detail}",
            r.started_at, r.outcome, r.claimed, r.enqueued, r.released, took
        );
    }
    let _ = writeln!(
        text,
        "backlog: {due} due now, oldest due {}; {leased} leased in flight",
        oldest_due.map_or("-".to_owned(), |s| format!("{:.0} min ago", s / 60.0))
    );
    let waiting = u64::try_from(due).unwrap_or(0) + queues.as_ref().map_or(0, |(queue, _)| queue.depth.total());
    let rate = settled_lately as f64 / RATE_WINDOW_SECS;
    let empty_in = (waiting > 0 && rate > 0.0)
        .then(|| std::time::Duration::try_from_secs_f64((waiting as f64 / rate).ceil()).unwrap_or_default());
    match empty_in {
        Some(eta) => {
            let _ = writeln!(
                text,
                "  draining: {settled_lately} settled in the last {} min; at that rate the {waiting} due or queued are done in about {}",
                RATE_WINDOW_SECS / 60.0,
                humantime::format_duration(std::time::Duration::from_secs(eta.as_secs().div_ceil(60) * 60))
            );
        }
        None if waiting > 0 => {
            let _ = writeln!(text, "  not draining: nothing settled in the last {} min", RATE_WINDOW_SECS / 60.0);
        }
        None => {}
    }
    for b in &backlog {
        let _ = writeln!(
            text,
            "  workspace {}: {} due, oldest {:.0} min",
            b.workspace_id,
            b.due,
            b.oldest_due_seconds / 60.0
        );
    }
    let _ = writeln!(text, "failed assets: {failed_count}");
    for f in &failed {
        let _ = writeln!(text, "  {} (workspace {}) {}", f.id, f.workspace_id, f.last_error.as_deref().unwrap_or("-"));
    }
    match &queues {
        Ok((queue, dlq)) => {
            let _ = writeln!(
                text,
                "queue: {} waiting, {} in flight · dead-letter queue: {} waiting, {} in flight",
                queue.depth.waiting, queue.depth.in_flight, dlq.depth.waiting, dlq.depth.in_flight
            );
        }
        Err(e) => {
            let _ = writeln!(text, "queue: unreadable: {e}");
        }
    }
    let _ = writeln!(
        text,
        "brake: {} workspace(s) held back by the last pass, {} approval(s) active",
        braked.len(),
        approvals.len()
    );
    for (ws, why) in &braked {
        let _ = writeln!(text, "  held: {ws}: {why}");
    }
    for a in &approvals {
        let _ = writeln!(
            text,
            "  approved: {} by {} until {}: {} (granted on {} asset(s), {} bytes due)",
            a.workspace_id, a.approved_by, a.expires_at, a.reason, a.due_assets, a.due_bytes
        );
    }
    match &bucket {
        Some((run, checked)) => {
            let expiry = match &checked.noncurrent_expiry {
                None => "no noncurrent-version expiry".to_owned(),
                Some(expiry) => {
                    let scope = match expiry.prefixes.is_empty() {
                        true => "the whole bucket".to_owned(),
                        false => expiry.prefixes.join(", "),
                    };
                    format!("noncurrent versions expire after {} day(s) ({scope})", expiry.days)
                }
            };
            let _ = writeln!(
                text,
                "bucket {}: versioning {}, {expiry}; deletes and purges {} (pass {} of {})",
                checked.bucket,
                checked.versioning.as_ref().map_or("not read", |v| v.as_str()),
                checked.destruction,
                run.id,
                run.started_at
            );
            if let Some(cost) = &checked.cost_warning {
                let _ = writeln!(text, "  cost: {cost}");
            }
        }
        None => {
            let _ = writeln!(text, "bucket: not read by the last {} pass(es)", runs.len());
        }
    }
    text.push_str(&records_text);
    match &schema {
        Ok(n) => {
            let _ = writeln!(text, "schema check: valid ({n} source(s))");
        }
        Err(reason) => {
            let _ = writeln!(text, "schema check: REFUSED: {reason}");
        }
    }
    // Nothing read is not everything read: "100% (0 of 0)" said both before the first pass and for a schema with
    // no column to read.
    if census.columns == 0 && runs.is_empty() {
        let _ = writeln!(text, "census: no pass has read the schema yet");
    } else if census.columns == 0 {
        let _ =
            writeln!(text, "census: no column outside the reference sources could hold an asset id: nothing to read");
    } else {
        let _ = writeln!(
            text,
            "census: cycle {} {}, {:.0}% read ({} of {} column(s) done); last full cycle {}",
            census.cycle,
            census.cycle_started_at.as_deref().map_or("not started".to_owned(), |at| format!("started {at}")),
            census.percent_done,
            census.columns_done,
            census.columns,
            census.last_cycle_seconds.map_or("never".to_owned(), |s| format!("took {s:.0} s")),
        );
    }
    if census.columns_unproven > 0 {
        let _ = writeln!(
            text,
            "  deletes and purges wait: {} column(s) not yet proven ({}{})",
            census.columns_unproven,
            census.unproven_sample.join(", "),
            if census.columns_unproven > census.unproven_sample.len() as i64 { ", …" } else { "" }
        );
    }
    for (column, asset) in &census.findings {
        let _ = writeln!(text, "  ! {column} holds asset {asset}");
    }
    if census.unread > 0 {
        let _ = writeln!(
            text,
            "  {} value(s) too large or slow to read whole within CENSUS_BATCH_TIMEOUT: what their first part names is held, the rest is not proven",
            census.unread
        );
        for u in census.unread_sample.iter().filter(|u| u.untried) {
            let _ = writeln!(
                text,
                "  ? {} row {}: not tried yet (a pass's share ran out inside its block); read before the column is proven ({})",
                u.column, u.record, u.recorded_at
            );
        }
        for u in census.unread_sample.iter().filter(|u| !u.untried) {
            let stored = u.stored_bytes.map_or("size unknown".to_owned(), |b| format!("{b} bytes stored"));
            let _ = writeln!(
                text,
                "  ? {} row {}: {stored}, first {} character(s) read ({})",
                u.column, u.record, u.read_chars, u.recorded_at
            );
        }
    }
    let _ = writeln!(
        text,
        "discovery: {}cycle {} {}, {:.0}% walked, {} found unreferenced this cycle; last full cycle {}",
        if settings.discovery.enabled { "" } else { "OFF (DISCOVERY_ENABLED=false), " },
        discovery.cycle,
        match (discovery.cycle_started_at.as_deref(), discovery.last_cycle_completed_at.as_deref()) {
            (Some(at), _) => format!("started {at}"),
            // A pass whose retention rules delete records walks at once all the same.
            (None, Some(ended)) if !settings.discovery.cycle_interval.is_zero() => format!(
                "not started: it begins {} after the last ended ({ended}; DISCOVERY_CYCLE_INTERVAL)",
                humantime::format_duration(settings.discovery.cycle_interval)
            ),
            (None, _) => "not started".to_owned(),
        },
        discovery.percent_done,
        discovery.found,
        match (discovery.last_cycle_seconds, discovery.last_cycle_found) {
            (Some(s), Some(n)) => format!("took {s:.0} s and found {n}"),
            _ => "never".to_owned(),
        },
    );
    match (&reconciliation.last, &settings.reconcile.layout) {
        (Some(last), _) => {
            let _ = writeln!(
                text,
                "reconciliation: last compared {} ({} of {}): {} key(s), {} bytes no row knows; {} asset(s) lost",
                last.compared_at,
                last.source,
                last.taken_at,
                last.unknown_keys,
                last.unknown_bytes,
                reconciliation.lost
            );
            if let Some((engine, scanned)) = &last.engine {
                let _ = writeln!(text, "  compared on {engine}: scanned {scanned}");
            }
            // What records name of those keys, per prefix: what an approval of their adoption is read on.
            for line in naming.iter().flat_map(schema::naming::Naming::lines) {
                let _ = writeln!(text, "  {line}");
            }
        }
        (None, Some(_)) => text.push_str("reconciliation: never run (asset-sweeper reconcile)\n"),
        (None, None) => text.push_str("reconciliation: off (RECONCILE_PREFIXES and RECONCILE_KEY_PATTERN not set)\n"),
    }
    if let Some(c) = &reconciliation.comparing {
        let step = match (&c.query, c.exported) {
            (Some((id, since)), _) => format!("query {id} running since {since}"),
            (None, true) => "export written, the query starts next pass".to_owned(),
            (None, false) => {
                format!("exporting the known keys: {} file(s), {} row(s) so far", c.export_files, c.export_rows)
            }
        };
        let _ = writeln!(
            text,
            "reconciliation: comparing {} on {} (listing {}): {step}; scans at most {}",
            c.location, c.engine, c.listing, c.at_most
        );
    }
    for (asset, key) in &reconciliation.lost_sample {
        let _ = writeln!(text, "  lost: {asset} {key}");
    }
    if reconciliation.adopted > 0 {
        let _ = writeln!(
            text,
            "adopted: {} object(s) no row knew wait for the pipeline; {} of them named by a record but without an asset row",
            reconciliation.adopted, reconciliation.named_without_row
        );
    }
    for (key, column) in &reconciliation.named_sample {
        let _ = writeln!(text, "  named by {column} but without an asset row: {key}");
    }
    for (key, state, column) in &reconciliation.removed_sample {
        let _ = writeln!(text, "  {state} though {column} names it: {key}");
    }
    if reconciliation.kept_by_person > 0 {
        let _ = writeln!(
            text,
            "kept by a person: {} asset(s) restored or undeleted, which discovery passes over until a reference to \
             them is found or the application releases them (asset-sweeper explain says who and when)",
            reconciliation.kept_by_person
        );
    }
    if logs.sources.is_empty() {
        text.push_str("access logs: none read (ACCESS_LOGS, CLOUDFRONT_LOGS): a read keeps nothing\n");
    }
    for source in &logs.sources {
        let reaches = match (source.counted_reach, source.newest_delivered_at, source.trusted_since) {
            (Some(at), _, _) => format!(
                "{} ({:.1} h ago)",
                at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                (now - at).num_seconds() as f64 / 3600.0
            ),
            (None, None, _) => "nothing yet".to_owned(),
            // Read, but delivered before the location was found to be AWS's alone: anybody may have written it.
            (None, Some(_), Some(since)) => format!(
                "nothing counted yet (not counted until a delivery since {})",
                since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
            (None, Some(_), None) => "nothing counted (not counted while the location is not trusted)".to_owned(),
        };
        let _ = writeln!(
            text,
            "access logs ({}): {} · delivered logs reach {reaches}, lag allowed {:.1} h · {} object(s), {} line(s) read, \
             {} read(s) of our files kept, {} by ignored requesters, {} line(s) skipped",
            source.source,
            source.location,
            source.delivery_lag_seconds / 3600.0,
            source.objects_read,
            source.lines_read,
            source.reads_recorded,
            source.requests_ignored,
            source.lines_skipped
        );
        if source.other_bucket_lines > 0 {
            let _ = writeln!(
                text,
                "  {} line(s) of other buckets' logs in the same location passed over",
                source.other_bucket_lines
            );
        }
        if let Some(last) = source.skipped.as_array().and_then(|s| s.last()) {
            let _ = writeln!(
                text,
                "  last skipped: {} line {}: {}",
                last["object"].as_str().unwrap_or("-"),
                last["line"],
                last["reason"].as_str().unwrap_or("-")
            );
        }
    }
    match &settle_on {
        Ok(what) => {
            let _ = writeln!(text, "consumer settles on: {what}");
        }
        Err(why) => {
            let _ = writeln!(text, "consumer settles nothing now: {why}");
        }
    }
    match &args.dashboard {
        Some(name) => {
            let _ = writeln!(text, "dashboard: {name} (CloudWatch)");
        }
        None => text.push_str("dashboard: not named (DASHBOARD_NAME, the stack's output DashboardName)\n"),
    }
    let _ = writeln!(text, "last 24 h:");
    for f in &freed {
        let _ = writeln!(text, "  {:<7} {:>6} asset(s) {:>14} bytes", f.action, f.assets, f.bytes);
    }
    text.push_str(&crate::money::describe(&ledger, &prices));
    text.push_str(&effect_text);

    let json = json!({
        "needs_attention": attention,
        "last_good_pass": last_good.as_ref().map(|g| json!({ "finished_at": g.finished_at, "outcome": g.outcome, "age_seconds": g.age_seconds })),
        "runs": runs,
        "backlog": {
            "due": due, "oldest_due_seconds": oldest_due, "top_workspaces": backlog,
            "settled_last_15_min": settled_lately, "empty_in_seconds": empty_in.map(|d| d.as_secs()),
        },
        "dashboard": args.dashboard,
        "leased": leased,
        "failed": { "count": failed_count, "latest": failed },
        "queue": queues.as_ref().ok().map(|(q, _)| q.depth),
        "dead_letter_queue": queues.as_ref().ok().map(|(_, d)| d.depth),
        "queue_error": queues.as_ref().err(),
        "brake": {
            "held": braked.iter().map(|(ws, why)| json!({ "workspace_id": ws, "why": why })).collect::<Vec<_>>(),
            "approvals": approvals.iter().map(|a| json!({ "workspace_id": a.workspace_id, "approved_by": a.approved_by, "reason": a.reason, "expires_at": a.expires_at, "due_assets": a.due_assets, "due_bytes": a.due_bytes })).collect::<Vec<_>>(),
        },
        "bucket": bucket.map(|(run, checked)| json!({ "sweep_run_id": run.id, "started_at": run.started_at, "found": checked })),
        "schema": match &schema { Ok(n) => json!({ "verdict": "valid", "sources": n }), Err(r) => json!({ "verdict": "refused", "reason": r }) },
        "records": records,
        "census": census,
        "discovery": json!({ "enabled": settings.discovery.enabled, "standing": discovery }),
        "reconciliation": json!({
            "configured": settings.reconcile.layout.is_some(), "standing": reconciliation, "naming": naming,
        }),
        "access_logs": logs,
        "consumer_verdict": match &settle_on { Ok(what) => json!({ "usable": true, "detail": what }), Err(why) => json!({ "usable": false, "reason": why }) },
        "last_day": freed,
        "warnings": warnings,
        "money": ledger.priced(&prices),
        "freed_against_billed": effect_json["drift"],
        "effect": effect_json["effect"],
    });
    Ok(Output { text: text.trim_end().to_owned(), json, attention })
}
