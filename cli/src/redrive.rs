//! `redrive`: the dead-letter queue's messages back to the cleanup queue (`StartMessageMoveTask`), and the
//! `failed` assets they name made claimable again.
//!
//! A failed asset goes back to `retired` if it was retired, else to `released` — the state from which the most
//! a settle can do without a person is retire it, restorably (an abandoned upload redriven this way is retired
//! and purged later rather than deleted at once). It is due now with its lease cleared, so the next pass claims
//! it under a new message; the moved messages carry the old claim and settle nothing.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::{Context, bail};
use serde_json::json;
use shared::CleanupMessage;
use uuid::Uuid;

use crate::{Output, connect};

#[derive(clap::Args)]
pub struct Args {
    /// List what would be moved and reset; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Who redrives (recorded with each asset).
    #[arg(long, required_unless_present = "dry_run")]
    by: Option<String>,
}

/// One dead-lettered message, as read from the queue.
struct Dead {
    message_id: String,
    /// The asset it names, or why it names none.
    asset: Result<Uuid, String>,
}

/// Reads every message on the dead-letter queue without keeping it: each receive makes it visible again at
/// once, and reading stops when a receive brings nothing new.
async fn peek(sqs: &aws_sdk_sqs::Client, url: &str) -> anyhow::Result<Vec<Dead>> {
    let mut seen: BTreeMap<String, Dead> = BTreeMap::new();
    let mut quiet = 0;
    while quiet < 3 && seen.len() < 10_000 {
        let received = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(0)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("{}", aws_sdk_sqs::error::DisplayErrorContext(&e)))
            .context("cannot read the dead-letter queue")?;
        let before = seen.len();
        for m in received.messages() {
            let Some(id) = m.message_id() else { continue };
            let asset =
                CleanupMessage::parse(m.body().unwrap_or_default()).map(|c| c.asset_id.0).map_err(|e| e.to_string());
            seen.entry(id.to_owned()).or_insert(Dead { message_id: id.to_owned(), asset });
        }
        quiet = if seen.len() == before { quiet + 1 } else { 0 };
    }
    Ok(seen.into_values().collect())
}

pub async fn run(args: Args) -> anyhow::Result<Output> {
    let (settings, pool, sdk) = connect::everything().await?;
    let sqs = shared::aws::sqs_client(&sdk);
    let (queue, dlq) = shared::queues::with_dead_letter(&sqs, &settings.queue.url).await?;
    let dead = peek(&sqs, &dlq.url).await?;
    let named: Vec<Uuid> = dead.iter().filter_map(|d| d.asset.as_ref().ok().copied()).collect();
    let states: BTreeMap<Uuid, String> =
        sqlx::query_as::<_, (Uuid, String)>("SELECT id, state FROM assets WHERE id = ANY ($1)")
            .bind(&named)
            .fetch_all(&pool)
            .await?
            .into_iter()
            .collect();
    let failed: Vec<Uuid> = named.iter().copied().filter(|id| states.get(id).is_some_and(|s| s == "failed")).collect();

    let mut reset: Vec<Uuid> = Vec::new();
    let mut task = None;
    if !args.dry_run {
        let by = args.by.as_deref().map(str::trim).filter(|b| !b.is_empty()).context("--by must say who redrives")?;
        if dead.is_empty() {
            bail!("the dead-letter queue {} is empty: nothing to redrive", dlq.url);
        }
        let mut tx = pool.begin().await?;
        reset = sqlx::query_scalar(
            "WITH reset AS (
                 UPDATE assets
                    SET state = CASE WHEN retired_at IS NOT NULL THEN 'retired' ELSE 'released' END,
                        failed_at = NULL, attempts = 0, due_at = now(), lease_token = NULL, leased_until = NULL
                  WHERE id = ANY ($1) AND state = 'failed'
              RETURNING id, workspace_id, storage_key, state, to_jsonb(assets.*) AS row
             )
             INSERT INTO settlement_events (asset_id, workspace_id, storage_key, action, asset_row, evidence, code_version)
             SELECT id, workspace_id, storage_key, 'redrive', row, jsonb_build_object('by', $2::text, 'state', state), $3
               FROM reset
             RETURNING asset_id",
        )
        .bind(&failed)
        .bind(by)
        .bind(crate::CODE_VERSION)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        // After the rows: were the move to fail, the assets are claimable anyway and a second redrive moves
        // the messages.
        let started = sqs
            .start_message_move_task()
            .source_arn(&dlq.arn)
            .destination_arn(&queue.arn)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("{}", aws_sdk_sqs::error::DisplayErrorContext(&e)))
            .context("the assets are claimable again, but the message move did not start")?;
        task = started.task_handle;
    }

    let mut text = String::new();
    let verb = if args.dry_run { "would move" } else { "moving" };
    let _ = writeln!(text, "{verb} {} message(s) from {} to {}", dead.len(), dlq.url, queue.url);
    let mut listed = Vec::new();
    for d in &dead {
        let (asset, what) = match &d.asset {
            Err(e) => (None, format!("names no asset: {e}")),
            Ok(id) => {
                let what = match states.get(id).map(String::as_str) {
                    None => "asset unknown (gone): nothing to reset".to_owned(),
                    Some("failed") if args.dry_run => "failed: would be made claimable".to_owned(),
                    Some("failed") => "failed: made claimable".to_owned(),
                    Some(other) => format!("{other}: already settled, left alone"),
                };
                (Some(*id), what)
            }
        };
        let shown = asset.map_or("-".to_owned(), |a| a.to_string());
        let _ = writeln!(text, "  message {}  asset {shown}  {what}", d.message_id);
        listed.push(json!({ "message_id": d.message_id, "asset_id": asset, "outcome": what }));
    }
    Ok(Output {
        text: text.trim_end().to_owned(),
        json: json!({
            "dry_run": args.dry_run,
            "messages": listed,
            "assets_reset": if args.dry_run { failed.len() } else { reset.len() },
            "move_task": task,
        }),
        attention: Vec::new(),
    })
}
