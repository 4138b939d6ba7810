//! The records step as the operator sees it: what each retention rule did in the last pass (`status`), what it
//! would delete next pass (`plan`), and its release from the rule brake (`approve --rule`).

use std::fmt::Write as _;

use anyhow::{Context, bail};
use platform::step::Step;
use records::rule::Weight;
use records::{Recorded, Rule, RuleStop, pass_day};
use serde_json::{Value, json};
use settings::Settings;
use sqlx::PgPool;

use crate::Output;

/// The newest pass's records step: a line per rule, the JSON, and what needs a person (a rule the database refused
/// or the brake held).
pub(crate) async fn last_pass(pool: &PgPool) -> anyhow::Result<(String, Value, Vec<String>)> {
    let mut conn = pool.acquire().await?;
    let records::Standing { rules, last_pass: last } = <records::Records<'_> as Step>::standing(&mut conn).await?;
    let mut text = String::new();
    let mut attention = Vec::new();
    let Some(last) = last else {
        let _ = writeln!(text, "retention rules: {rules} declared; no pass has applied them yet");
        return Ok((text, json!({ "rules": rules, "last_pass": null }), attention));
    };
    let recorded = last.recorded();
    let records = last.records.clone().unwrap_or(Value::Null);
    let progress = match recorded {
        Some(Recorded::Failed { error }) => {
            attention.push(format!("the records step could not run in the last pass: {error}"));
            let _ = writeln!(text, "retention rules: {rules} declared; the last pass could not apply them: {error}");
            return Ok((text, json!({ "rules": rules, "last_pass": records }), attention));
        }
        Some(Recorded::Ran(progress)) => Some(progress),
        None => {
            // Written otherwise (another version): said, so a rule that failed or is held is not passed over.
            attention.push(format!(
                "the records step the last pass ({}) recorded cannot be read by this build: read it with \
                 `status --json` (last_pass)",
                last.id
            ));
            None
        }
    };
    let _ = writeln!(
        text,
        "retention rules: {rules} declared; the pass of {} (day {} in {}) deleted {} record(s)",
        last.started_at.clone().unwrap_or_default(),
        progress.as_ref().map_or("-".to_owned(), |p| p.day.to_string()),
        progress.as_ref().map_or("-", |p| p.time_zone.as_str()),
        progress.as_ref().map_or("null".to_owned(), |p| p.deleted.to_string()),
    );
    for rule in progress.iter().flat_map(|p| &p.rules) {
        let (id, table) = (rule.rule_id, rule.table.as_str());
        let expired = |w: Option<Weight>| {
            w.map_or(("null".to_owned(), "null".to_owned()), |w| (w.expired.to_string(), w.table_rows.to_string()))
        };
        let detail = match (rule.stopped, &rule.outgrown) {
            (RuleStop::Failed, _) => {
                let error = rule.error.as_deref().unwrap_or("-");
                attention.push(format!(
                    "retention rule {id} on {table} failed after deleting {} record(s): {error}",
                    rule.deleted
                ));
                format!("FAILED: {error}")
            }
            (RuleStop::Held, Some(outgrown)) => {
                // Counted only past what the approval covers: "at least".
                let (approved, now) = (outgrown.approved, outgrown.now);
                attention.push(format!(
                    "retention rule {id} on {table} is held by the brake again: its approval was granted on {approved} \
                     record(s) and it would now delete at least {now}, beyond the {}% tolerance (read `asset-sweeper \
                     plan`, then asset-sweeper approve --rule {id})",
                    outgrown.tolerance_percent
                ));
                format!("HELD by the brake again: at least {now} record(s) against the {approved} approved")
            }
            (RuleStop::Held, None) => {
                let (expired, table_rows) = expired(rule.weight);
                attention.push(format!(
                    "retention rule {id} on {table} is held by the brake: it would delete {expired} of {table_rows} \
                     record(s) (asset-sweeper approve --rule {id})"
                ));
                let threshold = rule.weight.map_or("null".to_owned(), |w| w.threshold.to_string());
                format!("HELD by the brake: more than {threshold} of {table_rows} record(s)")
            }
            (RuleStop::Waiting, _) => {
                let (expired, table_rows) = expired(rule.weight);
                format!(
                    "WAITING, new or changed, until {}: it will then delete {expired} of {table_rows} record(s)",
                    rule.waits_until.map_or("-".to_owned(), |t| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
                )
            }
            (RuleStop::Finished, _) => "finished".to_owned(),
            (RuleStop::TimeShare, _) => "not finished: the step's time ran out (continues next pass)".to_owned(),
            (RuleStop::NotReached | RuleStop::Running, _) => "not reached: the step's time ran out first".to_owned(),
        };
        let _ = writeln!(
            text,
            "  rule {id} {table}.{} older than {} (before {}): {} deleted, {detail}",
            rule.column, rule.keep, rule.cutoff, rule.deleted,
        );
    }
    Ok((text, json!({ "rules": rules, "last_pass": records, "run_id": last.id }), attention))
}

/// What each rule would delete if a pass started now: every expired record counted, and whether the brake would
/// hold it. In a read-only transaction, rolled back.
pub(crate) async fn preview(pool: &PgPool, settings: &Settings) -> anyhow::Result<(String, Value)> {
    let tolerance = settings.approval_tolerance;
    let records = &settings.records;
    let mut conn = pool.begin().await?;
    platform::db::read_only(&mut conn).await?;
    let day = pass_day(&mut conn, &records.time_zone, None)
        .await
        .with_context(|| format!("RECORDS_TIME_ZONE {:?} is not a time zone Postgres knows", records.time_zone))?;
    let mut text = String::new();
    let mut rules = Vec::new();
    let mut all = Rule::all(&mut conn, day, records.new_rule_delay).await?;
    all.sort_by_key(|r| r.id);
    for rule in all {
        let filter = rule.filter.as_deref().map_or(String::new(), |f| format!(" where {f}"));
        let line = format!("rule {} {}.{} older than {}{filter}", rule.id, rule.table, rule.column, rule.keep);
        if let Some(problem) = rule.unusable() {
            let _ = writeln!(text, "  {line}: would fail: {problem}");
            rules.push(json!({ "rule_id": rule.id, "table": rule.table, "error": problem }));
            continue;
        }
        let weight = rule.weigh(&mut conn, &records.time_zone, records.brake_share_percent, None).await?;
        let outgrown = rule
            .approved_rows
            .and_then(|approved| tolerance.outgrown("records", platform::approval::count(approved), weight.expired))
            .filter(|_| weight.braked());
        let approved_by = rule.approved_by.as_ref().filter(|_| outgrown.is_none());
        let brake = match (weight.braked(), approved_by, &outgrown) {
            (false, ..) => String::new(),
            (true, Some(by), _) => format!(" (over the brake's {}%, approved by {by})", records.brake_share_percent),
            (true, None, Some(outgrown)) => format!(
                " — HELD by the brake again: its approval was granted on fewer, {outgrown} (asset-sweeper approve --rule {})",
                rule.id
            ),
            (true, None, None) => format!(
                " — HELD by the brake: over {}% of its {} record(s) (asset-sweeper approve --rule {})",
                records.brake_share_percent, weight.table_rows, rule.id
            ),
        };
        match rule.waits_until {
            Some(until) => {
                let _ = writeln!(
                    text,
                    "  {line} (before {}): new or changed, deletes nothing until {until}; would then delete {}{brake}",
                    rule.cutoff, weight.expired
                );
            }
            None => {
                let _ = writeln!(text, "  {line} (before {}): would delete {}{brake}", rule.cutoff, weight.expired);
            }
        }
        rules.push(json!({
            "rule_id": rule.id, "table": rule.table, "column": rule.column, "keep": rule.keep, "filter": rule.filter,
            "cutoff": rule.cutoff.to_string(), "would_delete": weight.expired, "table_rows": weight.table_rows,
            "held": weight.braked() && approved_by.is_none(), "approved_by": approved_by, "outgrown": outgrown,
            "waits_until": rule.waits_until,
        }));
    }
    conn.rollback().await?;
    let head = format!("records: day {day} in {}, {} rule(s)\n", records.time_zone, rules.len());
    Ok((format!("{head}{text}"), json!({ "day": day, "time_zone": records.time_zone, "rules": rules })))
}

/// What `approve --rule` grants: rule `id` released from the brake for `hours`, recorded with who and why and with
/// what the rule would delete now, counted in the same transaction that records it (a change to the rule drops it;
/// a pass that finds it would delete more than that, beyond the approval tolerance, holds it again).
pub(crate) struct RuleApproval<'a> {
    pub(crate) id: i64,
    pub(crate) by: &'a str,
    pub(crate) reason: &'a str,
    pub(crate) hours: u32,
    /// Shows what would be approved and records nothing.
    pub(crate) dry_run: bool,
}

/// Records (or with `dry_run` only shows) `approval`, after counting what the rule would delete now.
pub(crate) async fn approve(pool: &PgPool, settings: &Settings, approval: RuleApproval<'_>) -> anyhow::Result<Output> {
    let RuleApproval { id, by, reason, hours, dry_run } = approval;
    let records = &settings.records;
    let mut tx = pool.begin().await?;
    let day = pass_day(&mut tx, &records.time_zone, None)
        .await
        .with_context(|| format!("RECORDS_TIME_ZONE {:?} is not a time zone Postgres knows", records.time_zone))?;
    let rule = Rule::all(&mut tx, day, records.new_rule_delay).await?.into_iter().find(|r| r.id == id);
    let Some(rule) = rule else { bail!("no retention rule {id} (asset-sweeper plan lists them)") };
    if let Some(problem) = rule.unusable() {
        bail!("retention rule {id} cannot run as declared, so there is nothing to approve: {problem}");
    }
    let weight = rule.weigh(&mut tx, &records.time_zone, records.brake_share_percent, None).await?;
    let filter = rule.filter.as_deref().map_or(String::new(), |f| format!(" where {f}"));
    let plan = format!(
        "retention rule {id} on {}.{} older than {}{filter} (before {}): it would delete {} of {} record(s) now",
        rule.table, rule.column, rule.keep, rule.cutoff, weight.expired, weight.table_rows
    );
    let covers = settings.approval_tolerance.ceiling(weight.expired);
    let mut json = json!({
        "rule_id": id, "table": rule.table, "approved_by": by, "reason": reason, "would_delete": weight.expired,
        "table_rows": weight.table_rows, "covers_up_to": covers, "dry_run": dry_run,
    });
    if dry_run {
        tx.rollback().await?;
        return Ok(Output {
            text: format!(
                "{plan}\nnothing recorded (--dry-run): approving would release it for {hours} h while it \
                           would delete at most {covers} record(s)"
            ),
            json,
            attention: Vec::new(),
        });
    }
    let (rows, table_rows) = (i64::try_from(weight.expired)?, i64::try_from(weight.table_rows)?);
    let signed = platform::approval::Signed { by, reason, hours };
    let grant = records::rule::RuleGrant { id, signed, rows, table_rows };
    let until = records::rule::approve(&mut tx, grant).await?;
    tx.commit().await?;
    json["expires_at"] = json!(until);
    Ok(Output {
        text: format!(
            "{plan}\nreleased from the brake until {until} (by {by}: {reason}) while it would delete at most {covers} \
             record(s); a pass that finds more holds it again"
        ),
        json,
        attention: Vec::new(),
    })
}
