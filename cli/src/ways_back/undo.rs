//! Undoing a whole sweep pass (`restore --run`, `undelete --run`): which assets the pass retired, deleted or
//! purged, and one report line per asset brought back, skipped or refused. Each asset goes through the same
//! single-asset path, with its checks, as when an operator names it.

use std::fmt::Write as _;

use anyhow::{Context, bail};
use platform::audit::AuditAction;
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::Output;

/// The pass named on the command line.
pub(crate) fn run_id(text: &str) -> anyhow::Result<Uuid> {
    text.parse().with_context(|| format!("--run {text:?} is not a sweep pass id (a uuid)"))
}

/// Each asset the pass recorded one of `actions` for, once, in the order the pass acted.
pub(crate) async fn assets_of_run(pool: &PgPool, run: Uuid, actions: &[AuditAction]) -> anyhow::Result<Vec<Uuid>> {
    if !lifecycle::runs::standing::exists(&mut *pool.acquire().await?, run).await? {
        bail!("no sweep pass {run} is on record");
    }
    let assets = platform::audit::assets_of_run(pool, run, actions).await?;
    Ok(assets)
}

/// What became of one asset.
pub(crate) struct Line {
    asset: Uuid,
    outcome: &'static str,
    detail: String,
}

impl Line {
    /// Brought back (or, in a dry run, would be), its bytes from `version` when they were hidden.
    pub(crate) fn done(asset: Uuid, dry_run: bool, version: Option<String>) -> Self {
        let detail = match (dry_run, version) {
            (false, Some(v)) => format!("bytes copied back from version {v}"),
            (true, Some(v)) => format!("bytes would be copied back from version {v}"),
            (_, None) => "bytes in place".to_owned(),
        };
        Line { asset, outcome: if dry_run { "would" } else { "done" }, detail }
    }

    /// Nothing to undo: already back.
    pub(crate) fn skipped(asset: Uuid, why: String) -> Self {
        Line { asset, outcome: "skipped", detail: why }
    }

    /// Cannot be brought back; the reason is the single-asset path's.
    pub(crate) fn refused(asset: Uuid, why: String) -> Self {
        Line { asset, outcome: "refused", detail: why }
    }
}

/// The report of an undo: one line per asset; every refusal needs a person (exit 1).
pub(crate) fn output(verb: &str, run: Uuid, dry_run: bool, lines: &[Line]) -> Output {
    let count = |outcome: &str| lines.iter().filter(|l| l.outcome == outcome).count();
    let (done, skipped, refused) = (count(if dry_run { "would" } else { "done" }), count("skipped"), count("refused"));
    let mut text = if dry_run {
        format!(
            "{verb} --run {run} (dry run): {done} would be brought back, {skipped} already back, {refused} refused\n"
        )
    } else {
        format!("{verb} --run {run}: {done} brought back, {skipped} already back, {refused} refused\n")
    };
    for line in lines {
        let _ = writeln!(text, "  {}  {:<8} {}", line.asset, line.outcome, line.detail);
    }
    let attention = lines
        .iter()
        .filter(|l| l.outcome == "refused")
        .map(|l| format!("asset {} cannot be brought back: {}", l.asset, l.detail))
        .collect();
    Output {
        text: text.trim_end().to_owned(),
        json: json!({
            "run": run, "dry_run": dry_run, "brought_back": done, "skipped": skipped, "refused": refused,
            "assets": lines.iter().map(|l| json!({ "asset_id": l.asset, "outcome": l.outcome, "detail": l.detail })).collect::<Vec<_>>(),
        }),
        attention,
    }
}
