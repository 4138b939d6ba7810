//! `plan`: a dry run of the next pass. What the brake would hold back, what would be claimed, and for each asset
//! what settlement would decide now — keep (and by which record), defer, retire, delete, purge — with the bytes
//! that would be freed; and first, what each retention rule would delete. Reads in a read-only transaction that is rolled back: it changes nothing.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use lifecycle::judgement::{self, Judged, Judgement, Terms};
use lifecycle::{Decision, brake};
use platform::AssetId;
use platform::bucket::{self, Versioning};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{Output, connect};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// At most this many assets (default: the pass's own cap, SWEEP_MAX_PER_PASS).
    #[arg(long)]
    limit: Option<u32>,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<Output> {
    let (settings, pool, sdk) = connect::everything().await?;
    let limit = args.limit.unwrap_or(settings.sweep.max_per_pass);
    // The pass's first step, whatever the schema check then says.
    let (records_text, records) = crate::retention::preview(&pool, &settings).await?;
    // What the consumer reads before it settles: deletes and purges wait unless a removal can be undone.
    // Read before the transaction, which an S3 call should not hold open.
    let s3 = platform::aws::s3_client(&sdk, settings.s3_force_path_style);
    let versioning = bucket::versioning(&s3, &settings.asset_bucket).await;
    let undoable = versioning.as_ref().is_ok_and(Versioning::keeps_removed_bytes);
    let bucket_held = bucket::destruction_held(&settings.asset_bucket, &versioning);

    let (mut tx, map) = connect::checked_read_only(&pool, &settings).await?;
    let map = match map {
        Ok(map) => map,
        Err(refusal) => {
            return Ok(Output {
                text: format!("{records_text}the next pass would be refused and claim nothing: {refusal}"),
                json: json!({ "records": records, "refused": refusal.problems, "assets": [] }),
                attention: Vec::new(),
            });
        }
    };

    let weighed = brake::weigh(&pool, &settings.brake, settings.approval_tolerance).await?;
    // What is due now costs this a month until it is settled, per workspace.
    let due: Vec<(Uuid, i64, i64)> =
        weighed.iter().map(|w| (w.due.workspace_id.0, w.due.due_assets, w.due.due_bytes)).collect();
    let held: Vec<(Uuid, String)> =
        weighed.into_iter().filter_map(|w| Some((w.due.workspace_id.0, w.held_because()?))).collect();
    let held_ids: Vec<Uuid> = held.iter().map(|(id, _)| *id).collect();
    let candidates = lifecycle::standing::claimable(&mut tx, &held_ids, i64::from(limit)).await?;

    let mut assets = Vec::with_capacity(candidates.len());
    // By the action's name: the summary lists them alphabetically.
    let mut totals: BTreeMap<&str, (u64, i64)> = BTreeMap::new();
    let mut text = String::new();
    for (id, workspace) in candidates {
        let asset = AssetId(id);
        let terms = Terms {
            grace: settings.grace,
            abandon_after: settings.abandon_after,
            undoable,
            quiet: settings.schema_quiet_period,
        };
        let Judged::Judged(judgement) = judgement::judge(&mut tx, &map, asset, terms, None).await? else {
            continue;
        };
        let Judgement { facts, found, decision, sharers, .. } = *judgement;
        let action = decision.action();
        let (detail, freed) = match decision {
            Decision::Keep => {
                let k = found.keeping().map(|k| (k.source.clone(), k.record.clone().unwrap_or(Value::Null)));
                let (source, record) = k.unwrap_or_default();
                (format!("by {source} record {record}"), 0)
            }
            Decision::Defer(why) => (why.as_str().to_owned(), 0),
            Decision::Retire => ("restorable until its purge time".to_owned(), 0),
            Decision::Delete | Decision::Purge => match sharers.unwrap_or_default() {
                0 => (format!("{} bytes freed", facts.byte_size), facts.byte_size),
                sharers => (format!("row only: bytes shared with {sharers}"), 0),
            },
        };
        let total = totals.entry(action.as_str()).or_default();
        total.0 += 1;
        total.1 += freed;
        let _ = writeln!(
            text,
            "  {id}  {:<9} {:<7} {}  {detail}",
            facts.state.as_str(),
            action.as_str(),
            facts.storage_key
        );
        assets.push(json!({
            "asset_id": id, "workspace_id": workspace, "state": facts.state, "storage_key": facts.storage_key,
            "decision": action, "detail": detail, "bytes_freed": freed,
        }));
    }
    tx.rollback().await?;

    let bytes_freed: i64 = totals.values().map(|t| t.1).sum();
    let mut head = format!("the next pass would claim {} asset(s) and free {bytes_freed} bytes\n", assets.len());
    for (action, (n, _)) in &totals {
        let _ = writeln!(head, "  {action}: {n}");
    }
    for (ws, why) in &held {
        let _ = writeln!(head, "  held by the brake: workspace {ws}: {why} (asset-sweeper approve {ws} to release)");
    }
    if let Some(why) = &bucket_held {
        let _ = writeln!(head, "  deletes and purges would wait: {why}");
    }
    let prices = crate::money::prices()?;
    let mut most_due: Vec<&(Uuid, i64, i64)> = due.iter().collect();
    most_due.sort_by_key(|(ws, _, bytes)| (std::cmp::Reverse(*bytes), *ws));
    for (ws, assets, bytes) in most_due.into_iter().take(10) {
        let _ = writeln!(
            head,
            "  due in workspace {ws}: {assets} asset(s), {bytes} bytes, costing {} until settled",
            prices.monthly((*bytes).max(0).unsigned_abs())
        );
    }
    if due.len() > 10 {
        let _ = writeln!(head, "  … due in {} more workspace(s) (--json lists every one)", due.len() - 10);
    }
    let ledger = crate::money::ledger(&mut *pool.acquire().await?, None).await?;
    head.push_str(&crate::money::describe(&ledger, &prices));
    Ok(Output {
        text: format!("{records_text}{head}{text}").trim_end().to_owned(),
        json: json!({
            "records": records,
            "claimed": assets.len(),
            "bytes_freed": bytes_freed,
            "by_decision": totals.iter().map(|(a, (n, b))| (a.to_string(), json!({ "assets": n, "bytes_freed": b }))).collect::<serde_json::Map<_, _>>(),
            "held": held.iter().map(|(ws, why)| json!({ "workspace_id": ws, "why": why })).collect::<Vec<_>>(),
            "destruction_held": bucket_held,
            "due": due.iter().map(|(ws, assets, bytes)| json!({ "workspace_id": ws, "assets": assets, "bytes": bytes, "money": prices.monthly(bytes.max(&0).unsigned_abs()) })).collect::<Vec<_>>(),
            "money": ledger.priced(&prices),
            "assets": assets,
        }),
        attention: Vec::new(),
    })
}
