//! `reconcile`: the bucket against the rows, both ways. Reads the bucket (an S3 Inventory report with
//! `--inventory`, else `ListObjectsV2` over the managed prefixes) into Postgres in bulk and reports the bytes no
//! row knows, per prefix and workspace, the prefixes another writer shares, and the assets whose bytes are gone
//! (each confirmed with the bucket). `--dry-run` works in a transaction that is rolled back: it writes nothing.
//! Without it, the findings are recorded: the lost assets in `lost_assets`, each with its `lost` event, and the
//! keys no row knows under an approved prefix adopted (a dry run shows what would be).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use ::reconcile::Findings;
use ::reconcile::once::{Limits, Source, reconcile};
use anyhow::Context;
use ledger::prices::Prices;
use serde_json::json;
use uuid::Uuid;

use crate::{Output, connect};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Write nothing: print what a reconciliation finds.
    #[arg(long)]
    dry_run: bool,
    /// Read this S3 Inventory report: `s3://bucket/path/manifest.json`, or a local copy's manifest.json.
    #[arg(long, conflicts_with = "list")]
    inventory: Option<String>,
    /// List the managed prefixes with ListObjectsV2 (the default; a request per thousand keys).
    #[arg(long)]
    list: bool,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<Output> {
    let (settings, pool, sdk) = connect::everything().await?;
    let layout = settings.reconcile.layout.as_ref().context(
        "nothing to reconcile: set RECONCILE_PREFIXES and RECONCILE_KEY_PATTERN (docs/operating.md, \"Reconciliation\")",
    )?;
    let s3 = platform::aws::s3_client(&sdk, settings.s3_force_path_style);
    let bucket = settings.asset_bucket.as_str();
    let mut tx = pool.begin().await?;
    // The comparison reads the application's tables without locking rows and takes seconds at a million keys:
    // more than the 30 s every session gets may be needed for a large bucket; lock_timeout still stops it behind
    // an application's lock.
    platform::db::statements_for(&mut tx, std::time::Duration::from_secs(15 * 60)).await?;
    let source = match &args.inventory {
        Some(location) => Source::Inventory(location),
        None => Source::List,
    };
    let limits = Limits {
        grace: settings.grace,
        confirm: usize::try_from(settings.reconcile.confirm_lost).unwrap_or(usize::MAX),
        adopt_max: settings.reconcile.adopt_max,
        tolerance: settings.approval_tolerance,
    };
    // What the report would cost on Athena, said before anything runs: its data files, and the export as the
    // planner's statistics size it.
    let on_athena = match &args.inventory {
        Some(location) if location.starts_with("s3://") => {
            let report = ::reconcile::read::Report::open(&s3, location, bucket).await?;
            let known_bytes = ::reconcile::engine::cost::export_estimate(&mut tx).await?;
            report.columnar().then_some(::reconcile::engine::cost::Estimate {
                inventory_bytes: report.data_bytes(),
                known_bytes,
                known_estimated: true,
            })
        }
        _ => None,
    };
    // A dry run adopts too, in the transaction it rolls back: it shows what would be adopted.
    let (listing, read_from, findings) = reconcile(&mut tx, &s3, bucket, layout, source, limits).await?;
    let recorded = if args.dry_run {
        tx.rollback().await?;
        None
    } else {
        let newly = ::reconcile::record(&mut tx, listing, &findings).await?;
        tx.commit().await?;
        Some(newly)
    };

    let prices = crate::money::prices()?;
    let mut text = render(&findings, &read_from, layout, &prices);
    if let Some(at_most) = &on_athena {
        let _ = writeln!(
            text,
            "on Athena (RECONCILE_ENGINE): this report would scan at most {} (the report's data files and the export of \
             the known keys{})",
            at_most.athena(),
            if at_most.known_estimated { ", estimated from the table's statistics" } else { "" }
        );
    }
    match recorded {
        None => text.push_str("dry run: nothing was written"),
        Some(newly) => {
            let _ = write!(text, "recorded as listing {}: {newly} asset(s) newly found lost", listing.id);
        }
    }
    let mut attention = Vec::new();
    for shared in &findings.off_pattern {
        attention.push(format!("prefix {:?} is shared with another writer", shared.prefix));
    }
    if !findings.lost.is_empty() {
        attention.push(format!("{} asset(s) have lost their bytes", findings.lost.len()));
    }
    for prefix in &findings.awaiting_approval {
        if let Some(refusal) = findings.naming.as_ref().and_then(|n| n.refusal(prefix)) {
            attention.push(format!("an approval of {} would be refused: {refusal}", shown(prefix)));
            continue;
        }
        attention.push(format!(
            "{} holds bytes no row knows and adopts nothing until approved: read this report, then \
             `asset-sweeper approve --prefix {:?} --by … --reason …`",
            shown(prefix),
            if prefix.is_empty() { "*" } else { prefix.as_str() }
        ));
    }
    let (unknown_keys, unknown_bytes) = findings.unknown_totals();
    Ok(Output {
        text,
        json: json!({
            "dry_run": args.dry_run,
            "listing": listing.id,
            "read_from": read_from,
            "taken_at": listing.taken_at,
            "unknown_keys": unknown_keys,
            "unknown_bytes": unknown_bytes,
            "unknown_money": prices.monthly(unknown_bytes.max(0).unsigned_abs()),
            "unknown_money_per_workspace": findings.unknown.iter().fold(BTreeMap::<Uuid, i64>::new(), |mut m, u| {
                *m.entry(u.workspace_id).or_default() += u.bytes;
                m
            }).into_iter().map(|(ws, b)| (ws.to_string(), json!({ "bytes": b, "money": prices.monthly(b.max(0).unsigned_abs()) }))).collect::<serde_json::Map<_, _>>(),
            "findings": findings,
            "newly_lost": recorded,
            "on_athena": on_athena.map(|e| json!({ "at_most": e.athena(), "export_estimated": e.known_estimated })),
        }),
        attention,
    })
}

fn render(findings: &Findings, read_from: &str, layout: &platform::keys::KeyLayout, prices: &Prices) -> String {
    let cost = |bytes: i64| prices.monthly(bytes.max(0).unsigned_abs());
    let mut text = format!(
        "read {read_from}: {} key(s), {} bytes ({} at {}), of {layout}\n",
        findings.keys,
        findings.bytes,
        cost(findings.bytes),
        prices.class
    );
    let (keys, bytes) = findings.unknown_totals();
    let _ = writeln!(text, "bytes no row knows: {keys} key(s), {bytes} bytes, costing {}", cost(bytes));
    let mut per_workspace: BTreeMap<Uuid, i64> = BTreeMap::new();
    for u in &findings.unknown {
        *per_workspace.entry(u.workspace_id).or_default() += u.bytes;
    }
    let mut by_cost: Vec<(Uuid, i64)> = per_workspace.into_iter().collect();
    by_cost.sort_by_key(|(ws, bytes)| (std::cmp::Reverse(*bytes), *ws));
    for (ws, bytes) in by_cost {
        let _ = writeln!(text, "  workspace {ws}: {bytes} bytes no row knows, {}", cost(bytes));
    }
    for u in &findings.unknown {
        let _ = writeln!(
            text,
            "  {} workspace {}: {} key(s), {} bytes, {} ({} written within the grace period)",
            shown(&u.prefix),
            u.workspace_id,
            u.keys,
            u.bytes,
            cost(u.bytes),
            u.young
        );
        for key in &u.sample {
            let _ = writeln!(text, "    {key}");
        }
    }
    for o in &findings.off_pattern {
        let _ = writeln!(
            text,
            "REFUSED {}: {} key(s) break the key pattern ({} of them named by rows): another writer shares it, and \
             nothing in it is ours to remove",
            shown(&o.prefix),
            o.keys,
            o.known
        );
        for key in &o.sample {
            let _ = writeln!(text, "    {key}");
        }
    }
    if let Some(naming) = &findings.naming {
        for line in naming.lines() {
            let _ = writeln!(text, "{line}");
        }
    }
    let (adopted, adopted_bytes) = findings.adopted_totals();
    let _ = writeln!(text, "adopted (pending rows the pipeline settles): {adopted} key(s), {adopted_bytes} bytes");
    for a in &findings.adopted {
        let _ =
            writeln!(text, "  {} workspace {}: {} key(s), {} bytes", shown(&a.prefix), a.workspace_id, a.keys, a.bytes);
    }
    for prefix in &findings.awaiting_approval {
        let _ = writeln!(
            text,
            "AWAITING APPROVAL {}: nothing is adopted from it until an operator approves it",
            shown(prefix)
        );
    }
    let _ = writeln!(text, "rows whose bytes are gone: {} asset(s)", findings.lost.len());
    for lost in &findings.lost {
        let restorable = match &lost.restorable_version {
            Some(v) => format!("a kept version {v} can bring it back"),
            None => "no version kept".to_owned(),
        };
        let _ = writeln!(
            text,
            "  {}  {:<8} {}  ({restorable})",
            lost.asset.asset_id, lost.asset.state, lost.asset.storage_key
        );
    }
    if findings.present_after_all > 0 || findings.unconfirmed > 0 {
        let _ = writeln!(
            text,
            "  ({} missing from the listing are in the bucket now; {} not confirmed this run)",
            findings.present_after_all, findings.unconfirmed
        );
    }
    text
}

fn shown(prefix: &str) -> String {
    if prefix.is_empty() { "the bucket".to_owned() } else { format!("prefix {prefix:?}") }
}
