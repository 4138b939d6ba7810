//! `explain <asset>`: which records keep it now, when it becomes due and why, and every decision recorded about
//! it with its evidence. Reads only.

use anyhow::{Context, bail};
use lifecycle::AssetState;
use lifecycle::judgement::{self, Judged, Terms};
use lifecycle::reads::Seen;
use platform::AssetId;
use platform::audit::AuditAction;
use platform::bucket::{self, Versioning};
use schema::{self, SchemaCheckError};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{Output, connect};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// The asset's id.
    asset: String,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<Output> {
    let id: Uuid = args.asset.parse().with_context(|| format!("{:?} is not an asset id (a uuid)", args.asset))?;
    let (settings, pool, sdk) = connect::everything().await?;
    let row = lifecycle::standing::asset(&mut *pool.acquire().await?, id, settings.grace).await?;
    let decisions = platform::audit::history(&pool, id).await?;
    if row.is_none() && decisions.is_empty() {
        bail!("asset {id} is unknown: no row and no recorded decision");
    }

    let prices = crate::money::prices()?;
    let window = ledger::window::window(&mut *pool.acquire().await?).await?;
    let mut money_json = json!({ "class": prices.class, "noncurrent_window": window });
    let mut text = String::new();
    let mut kept_by = Vec::new();
    let mut would_json = Value::Null;
    let mut schema = json!("valid");
    let mut row_json = Value::Null;
    let mut due_json = Value::Null;
    let mut read_json = Value::Null;
    match &row {
        None => text.push_str(&format!("asset {id}: no row any more (see its decisions below)\n")),
        Some(r) => {
            text.push_str(&format!(
                "asset {id} (workspace {})\n  {} · {} · {} bytes · {} attempt(s)\n",
                r.workspace_id, r.state, r.storage_key, r.byte_size, r.attempts
            ));
            let cost = prices.monthly(r.byte_size.max(0).unsigned_abs());
            let kind = match r.state {
                AssetState::Released => "released and waiting",
                AssetState::Retired => "retired, restorable",
                _ => "held",
            };
            text.push_str(&format!("  costs {cost} at {} while its bytes are stored ({kind})\n", prices.class));
            money_json["stored"] = json!({ "kind": kind, "money": cost });
            let why = due_reason(r.state, settings.abandon_after);
            let when = match (&r.due_at, r.due_now) {
                (None, _) => "not due".to_owned(),
                (Some(at), true) => format!("due since {at}"),
                (Some(at), false) => format!("due at {at}"),
            };
            text.push_str(&format!("  {when}: {why}\n  nothing retired or deleted before {} (grace)\n", r.grace_ends));
            if let Some(until) = &r.leased_until {
                text.push_str(&format!("  claimed by a pass, lease until {until}\n"));
            }
            if let Some(purge) = &r.purge_after {
                text.push_str(&format!("  restorable until {purge}\n"));
            }
            if let (Some(by), Some(since), AssetState::Attached) = (&r.kept_by, &r.kept_since, r.state) {
                text.push_str(&format!(
                    "  kept by a person: {by} at {since}; discovery passes over it until a settle finds a reference \
                     to it or the application releases it\n"
                ));
            }
            if let Some(error) = &r.last_error {
                text.push_str(&format!("  last error: {error}\n"));
            }
            // What the access logs saw of its file: a read is use the database cannot show.
            let read = lifecycle::reads::last_read(&mut *pool.acquire().await?, &r.storage_key).await?;
            match &read {
                Some(read) => text.push_str(&format!("  last {}\n", read.describe())),
                None => text.push_str("  no read of its file seen in the access logs\n"),
            }
            read_json = json!(read);
            match connect::check(&pool, (&settings).into()).await {
                Ok(map) => {
                    // What the consumer reads before it settles: deletes and purges wait unless a removal can be
                    // undone. Before the transaction, which an S3 call should not hold open.
                    let s3 = platform::aws::s3_client(&sdk, settings.s3_force_path_style);
                    let versioning = bucket::versioning(&s3, &settings.asset_bucket).await;
                    let undoable = versioning.as_ref().is_ok_and(Versioning::keeps_removed_bytes);
                    if let Some(why) = bucket::destruction_held(&settings.asset_bucket, &versioning) {
                        text.push_str(&format!("  deletes and purges wait: {why}\n"));
                    }
                    // What a settle would decide now, from the judgement the settle itself acts on, read only.
                    let mut read = pool.begin().await?;
                    platform::db::read_only(&mut read).await?;
                    let terms = Terms {
                        grace: settings.grace,
                        abandon_after: settings.abandon_after,
                        undoable,
                        quiet: settings.schema_quiet_period,
                    };
                    let Judged::Judged(judgement) = judgement::judge(&mut read, &map, AssetId(id), terms, None).await?
                    else {
                        bail!("asset {id} was removed while it was being explained");
                    };
                    read.rollback().await?;
                    let would = match (r.state, r.due_now, judgement.decision) {
                        (AssetState::Failed, _, _) => "nothing: failed, it waits for an operator (redrive)".to_owned(),
                        (_, false, _) => "nothing: not due".to_owned(),
                        (_, true, lifecycle::Decision::Defer(why)) => match (&judgement.hold, &judgement.seen) {
                            (_, Some(Seen::Read(read))) => format!("defer ({}: {})", why.as_str(), read.describe()),
                            (_, Some(Seen::Uncovered(logs))) => {
                                format!("defer ({}: {})", why.as_str(), logs.describe())
                            }
                            (Some(lifecycle::holds::Hold::Window(window)), None) => {
                                format!("defer ({}: {})", why.as_str(), window.describe())
                            }
                            _ => format!("defer ({})", why.as_str()),
                        },
                        (_, true, lifecycle::Decision::Keep) if matches!(judgement.seen, Some(Seen::Read(_))) => {
                            "keep (its file was read since it was retired)".to_owned()
                        }
                        (_, true, decision) => decision.action().to_string(),
                    };
                    text.push_str(&format!("  a settle now would: {would}\n"));
                    would_json = json!(would);
                    for answer in judgement.found.answers.into_iter().filter(|a| a.referenced) {
                        text.push_str(&format!(
                            "  kept by {} record {}\n",
                            answer.source,
                            answer.record.clone().unwrap_or(Value::Null)
                        ));
                        kept_by.push(json!({ "source": answer.source, "record": answer.record }));
                    }
                    if kept_by.is_empty() {
                        text.push_str(&format!("  nothing refers to it now ({} source(s) asked)\n", map.sources.len()));
                    }
                }
                Err(SchemaCheckError::Refused(refusal)) => {
                    text.push_str(&format!("  references not asked: {refusal}\n"));
                    schema = json!({ "refused": refusal.problems });
                }
                Err(SchemaCheckError::Database(e)) => {
                    return Err(e).context("the schema check could not read the catalog");
                }
            }
            row_json = json!({
                "workspace_id": r.workspace_id, "storage_key": r.storage_key, "byte_size": r.byte_size,
                "state": r.state, "attempts": r.attempts, "last_error": r.last_error,
                "leased_until": r.leased_until, "purge_after": r.purge_after, "grace_ends": r.grace_ends,
                "kept_by_person": r.kept_by.as_ref().map(|by| json!({ "by": by, "since": r.kept_since })),
            });
            due_json = json!({ "at": r.due_at, "now": r.due_now, "why": why });
        }
    }
    let mut versions = Vec::new();
    for d in decisions.iter().filter(|d| d.bytes_freed > 0) {
        let cost = prices.monthly(d.bytes_freed.unsigned_abs());
        let until = match window.stops_billing(d.at) {
            Some(day) => format!("until {day}, when the bucket's rule expires the version"),
            None => format!("for as long as the version is kept: {}", window.describe()),
        };
        text.push_str(&format!(
            "  its {} freed bytes ({}) stay as a noncurrent version, for undelete: {cost}, {until}\n",
            d.bytes_freed, d.occurred_at
        ));
        versions.push(json!({ "freed_at": d.occurred_at, "bytes": d.bytes_freed, "money": cost, "billed": until }));
    }
    money_json["noncurrent_versions"] = json!(versions);
    text.push_str(&format!("decisions ({}):\n", decisions.len()));
    for d in &decisions {
        text.push_str(&format!("  {}  {:<9} {}\n", d.occurred_at, d.action, summary(d)));
    }
    let decisions_json: Vec<Value> = decisions
        .iter()
        .map(|d| {
            json!({
                "at": d.occurred_at, "action": d.action, "sweep_run_id": d.sweep_run_id, "message_id": d.message_id,
                "bytes_freed": d.bytes_freed, "code_version": d.code_version, "evidence": d.evidence,
            })
        })
        .collect();
    Ok(Output {
        text: text.trim_end().to_owned(),
        json: json!({
            "asset_id": id, "row": row_json, "due": due_json, "kept_by": kept_by, "would": would_json, "schema": schema,
            "decisions": decisions_json, "money": money_json, "last_read": read_json,
        }),
        attention: Vec::new(),
    })
}

/// Why an asset in `state` is (or is not) due, in the lifecycle's words.
fn due_reason(state: AssetState, abandon_after: std::time::Duration) -> String {
    match state {
        AssetState::Pending => format!(
            "an upload is looked at a day after it was made; deleted if still unattached {} after upload",
            humantime::format_duration(abandon_after)
        ),
        AssetState::Released => {
            "released (by the application, or by discovery): retired if nothing refers to it".to_owned()
        }
        AssetState::Retired => "its purge time: purged then if nothing refers to it again".to_owned(),
        AssetState::Attached => {
            "in use: discovery makes it due when no source refers to it, released or not".to_owned()
        }
        AssetState::Failed => "failed every delivery: waits for an operator (redrive)".to_owned(),
    }
}

/// One line of what a decision rested on.
fn summary(d: &platform::audit::Recorded) -> String {
    let e = &d.evidence;
    let mut parts = Vec::new();
    if let Some(source) = e["referenced_by"].as_str() {
        parts.push(format!("by {source} record {}", e["record"]));
    }
    if let Some(why) = e["deferred"]["why"].as_str() {
        parts.push(format!("deferred: {why}"));
    }
    if let Some(because) = e["deferred"]["because"].as_str() {
        parts.push(because.to_owned());
    }
    if d.action == AuditAction::Discovered {
        parts.push(format!(
            "nobody released it and no source referred to it ({} source(s) asked, verdict {}); due at {}",
            e["sources_checked"], e["schema_verdict"], e["due_at"]
        ));
    }
    if let Some(sharers) = e["sharers"].as_i64().filter(|n| *n > 0) {
        parts.push(format!("row only, bytes shared with {sharers}"));
    }
    if d.bytes_freed > 0 {
        parts.push(format!("{} bytes freed", d.bytes_freed));
    }
    if let Some(error) = e["error"].as_str() {
        parts.push(error.to_owned());
    }
    if let Some(by) = e["by"].as_str() {
        parts.push(format!("by {by}"));
    }
    if let Some(run) = d.sweep_run_id {
        parts.push(format!("pass {run}"));
    }
    parts.push(format!("code {}", d.code_version));
    parts.join(" · ")
}
