//! `redrive`: the dead-lettered messages of `failed` assets back to the cleanup queue, and those assets made
//! claimable again. Every other message stays on the dead-letter queue, each with the reason.
//!
//! A failed asset goes back to `retired` if it was retired, else to `released` — the state from which the most
//! a settle can do without a person is retire it, restorably (an abandoned upload redriven this way is retired
//! and purged later rather than deleted at once). It is due now with its lease cleared, so the next pass claims
//! it under a new message; the moved messages carry the old claim and settle nothing. The reset is the
//! sweeper's own write (`begin_as_sweeper`): were it to move the grace floor, the next pass would defer the asset
//! for a whole grace period instead of settling it.
//!
//! Only the messages of assets this run reset are moved. A message of an asset that is not failed (settled
//! since, or reset by hand), of an unknown asset, of another workspace, or one that names no asset is for a
//! person to look at, and moving it would hide it; `StartMessageMoveTask` moves everything, so the move is done
//! here. Each receive hides its messages for [`HOLD_SECS`], so the next receive brings only new ones; a message of
//! a reset asset is copied to the queue and then deleted from the DLQ with the receipt handle of the receive that
//! brought it (SQS deletes only with the latest one); the others are made visible again once reading is over.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use anyhow::{Context, bail};
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::{
    BatchResultErrorEntry, ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry, Message,
    SendMessageBatchRequestEntry,
};
use lifecycle::AssetState;
use lifecycle::{CleanupMessage, assets};
use platform::audit::{AuditAction, Event};
use serde_json::json;

use sqlx::PgPool;
use uuid::Uuid;

use crate::{Output, connect};

/// How long a receive hides its messages: long enough to decide on a batch and move it, short enough that a
/// redrive that dies leaves the rest visible again within a minute.
const HOLD_SECS: i32 = 60;

/// The most messages one run reads; it says so when there may be more, for another run. The messages it leaves
/// stay hidden until it ends, and SQS caps a standard queue's hidden messages at 120 000.
const MOST: usize = 10_000;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Say what would be moved, reset and left; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Who redrives (recorded with each asset).
    #[arg(long, required_unless_present = "dry_run")]
    by: Option<String>,
}

/// One dead-lettered message, as this run received it.
struct Dead {
    message_id: String,
    /// Of this run's receive: the one SQS deletes and changes the visibility with.
    receipt: String,
    message: Message,
    /// The asset and workspace it names, or why it names none.
    named: Result<(Uuid, Uuid), String>,
}

impl Dead {
    fn asset(&self) -> Option<Uuid> {
        self.named.as_ref().ok().map(|(asset, _)| *asset)
    }
}

/// A message to move back: its asset is reset, by this run.
struct Moving {
    dead: Dead,
    reset_to: AssetState,
    /// Whether the asset was reset for this message's receive, rather than for an earlier message of it.
    reset_in_this_batch: bool,
}

impl Moving {
    /// What was (or, in a dry run, would be) done to its asset.
    fn reset(&self, dry_run: bool) -> String {
        match (dry_run, self.reset_in_this_batch) {
            (true, _) => format!("failed: would be reset to {}", self.reset_to),
            (false, true) => format!("failed: reset to {}", self.reset_to),
            (false, false) => format!("reset to {} by this redrive", self.reset_to),
        }
    }
}

/// What became of one message.
struct Line {
    message_id: String,
    asset: Option<Uuid>,
    moved: bool,
    outcome: String,
}

/// What the run has done so far.
#[derive(Default)]
struct Run {
    lines: Vec<Line>,
    /// Assets reset by this run (or, in a dry run, that would be): another message of one is moved too.
    reset: BTreeMap<Uuid, AssetState>,
    /// Every message received so far, by id.
    seen: BTreeSet<String>,
    /// Messages received and not deleted, by id, with the newest receipt handle: made visible again at the end.
    held: BTreeMap<String, String>,
    /// Whether anything was written or sent yet: until then a failure changes nothing and is a plain refusal.
    changed: bool,
    attention: Vec<String>,
}

const STAYS: &str = "stays on the dead-letter queue";

pub(crate) async fn run(args: Args) -> anyhow::Result<Output> {
    let by = match (args.dry_run, args.by.as_deref().map(str::trim)) {
        (true, _) => None,
        (false, Some(by)) if !by.is_empty() => Some(by.to_owned()),
        (false, _) => bail!("--by must say who redrives"),
    };
    let (settings, pool, sdk) = connect::everything().await?;
    let sqs = platform::aws::sqs_client(&sdk);
    let (queue, dlq) = platform::queues::with_dead_letter(&sqs, &settings.queue.url).await?;

    let mut run = Run::default();
    let mut read = 0;
    let stopped = loop {
        if read >= MOST {
            run.attention.push(format!("read {MOST} messages, the most one run reads: run redrive again for the rest"));
            break None;
        }
        let received = match receive(&sqs, &dlq.url).await {
            Ok(received) => received,
            Err(e) => break Some(format!("{e:#}")),
        };
        let mut fresh = Vec::new();
        for message in received {
            let (Some(id), Some(receipt)) = (message.message_id(), message.receipt_handle()) else { continue };
            if let Some(newest) = run.held.get_mut(id) {
                // Hidden longer than HOLD_SECS and received again: only this receipt handle works now.
                *newest = receipt.to_owned();
                continue;
            }
            if !run.seen.insert(id.to_owned()) {
                continue;
            }
            let named = CleanupMessage::parse(message.body().unwrap_or_default())
                .map(|m| (m.asset_id.0, m.workspace_id.0))
                .map_err(|e| e.to_string());
            fresh.push(Dead { message_id: id.to_owned(), receipt: receipt.to_owned(), message, named });
        }
        if fresh.is_empty() {
            break None;
        }
        read += fresh.len();
        if let Err(e) = batch(&sqs, &pool, &queue.url, &dlq.url, by.as_deref(), fresh, &mut run).await {
            break Some(format!("{e:#}"));
        }
    };
    release(&sqs, &dlq.url, &mut run).await;
    if let Some(why) = stopped {
        if !run.changed {
            bail!("{why}");
        }
        run.attention.push(format!("the redrive stopped early: {why}"));
    }
    if by.is_some() && run.lines.is_empty() {
        bail!("the dead-letter queue {} is empty: nothing to redrive", dlq.url);
    }
    Ok(render(&run, args.dry_run, &dlq.url, &queue.url))
}

/// One receive from the dead-letter queue, its messages hidden for [`HOLD_SECS`].
async fn receive(sqs: &aws_sdk_sqs::Client, dlq_url: &str) -> anyhow::Result<Vec<Message>> {
    let received = sqs
        .receive_message()
        .queue_url(dlq_url)
        .max_number_of_messages(10)
        .visibility_timeout(HOLD_SECS)
        // A long poll asks every SQS server, so an empty answer means an empty queue, not an unlucky sample.
        .wait_time_seconds(1)
        .message_attribute_names("All")
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("{}", DisplayErrorContext(&e)))
        .with_context(|| format!("cannot read the dead-letter queue {dlq_url}"))?;
    Ok(received.messages.unwrap_or_default())
}

/// Decides on one receive's messages: resets the failed assets they name, moves those messages, and holds the
/// others until the end. An error means nothing of this batch was decided; its messages are held.
async fn batch(
    sqs: &aws_sdk_sqs::Client,
    pool: &PgPool,
    queue_url: &str,
    dlq_url: &str,
    by: Option<&str>,
    fresh: Vec<Dead>,
    run: &mut Run,
) -> anyhow::Result<()> {
    for dead in &fresh {
        run.held.insert(dead.message_id.clone(), dead.receipt.clone());
    }
    let named: Vec<Uuid> = fresh.iter().filter_map(Dead::asset).collect();
    // The state each asset would be reset to is worked out here too, so a dry run can say it.
    let rows: BTreeMap<Uuid, (Uuid, AssetState, AssetState)> = lifecycle::assets::redrive_preview(pool, &named)
        .await
        .context("cannot read the assets the dead-letter queue names")?
        .into_iter()
        .map(|(id, workspace, state, reset_to)| (id, (workspace, state, reset_to)))
        .collect();

    let mut failed = BTreeSet::new();
    let mut verdicts: Vec<Result<Uuid, String>> = Vec::new();
    for dead in &fresh {
        let verdict = match &dead.named {
            Err(e) => Err(format!("names no asset ({e}): {STAYS}")),
            Ok((asset, workspace)) => match rows.get(asset) {
                None => Err(format!("asset unknown (its row is gone): {STAYS}")),
                Some((row_workspace, _, _)) if row_workspace != workspace => {
                    Err(format!("names workspace {workspace}, but the asset is in {row_workspace}: {STAYS}"))
                }
                Some(_) if run.reset.contains_key(asset) => Ok(*asset),
                Some((_, AssetState::Failed, _)) => {
                    failed.insert(*asset);
                    Ok(*asset)
                }
                Some((_, state, _)) => Err(format!("{state}, not failed: {STAYS}")),
            },
        };
        verdicts.push(verdict);
    }

    let newly: BTreeMap<Uuid, AssetState> = match by {
        None => failed.iter().filter_map(|id| rows.get(id).map(|(_, _, to)| (*id, *to))).collect(),
        Some(by) => reset(pool, &failed, by).await?,
    };
    if !newly.is_empty() && by.is_some() {
        run.changed = true;
    }
    let fresh_reset: BTreeSet<Uuid> = newly.keys().copied().collect();
    run.reset.extend(newly);

    let mut moving = Vec::new();
    for (dead, verdict) in fresh.into_iter().zip(verdicts) {
        let outcome = match verdict {
            Ok(id) => match run.reset.get(&id) {
                Some(to) => {
                    moving.push(Moving { reset_to: *to, reset_in_this_batch: fresh_reset.contains(&id), dead });
                    continue;
                }
                // Failed when read, but another writer changed it before the reset.
                None => format!("no longer failed when reset: {STAYS}"),
            },
            Err(why) => why,
        };
        run.lines.push(Line { asset: dead.asset(), message_id: dead.message_id, moved: false, outcome });
    }
    if by.is_none() {
        for m in moving {
            let outcome = format!("{}, message would be moved back", m.reset(true));
            run.lines.push(Line { asset: m.dead.asset(), message_id: m.dead.message_id, moved: true, outcome });
        }
        return Ok(());
    }
    move_back(sqs, queue_url, dlq_url, moving, run).await;
    Ok(())
}

/// Resets the `failed` assets among `ids` as the sweeper (the grace floor stays), with a `redrive` event each;
/// returns each reset asset and its new state.
async fn reset(pool: &PgPool, ids: &BTreeSet<Uuid>, by: &str) -> anyhow::Result<BTreeMap<Uuid, AssetState>> {
    if ids.is_empty() {
        return Ok(BTreeMap::new());
    }
    let ids: Vec<Uuid> = ids.iter().copied().collect();
    let mut tx = platform::db::begin_as_sweeper(pool).await.context("cannot reset the failed assets")?;
    let reset = assets::redrive(&mut tx, &ids).await.context("cannot reset the failed assets")?;
    for asset in &reset {
        Event::new(asset.id, asset.workspace_id, AuditAction::Redrive, json!({ "by": by, "state": asset.state }))
            .storage_key(&asset.storage_key)
            .asset_row(Some(&asset.row))
            .write(&mut *tx)
            .await
            .context("cannot record the reset of the failed assets")?;
    }
    tx.commit().await.context("cannot reset the failed assets")?;
    Ok(reset.into_iter().map(|asset| (asset.id.0, asset.state)).collect())
}

/// Copies each message to the queue, then deletes from the DLQ those whose copy SQS accepted. A message whose
/// copy failed stays on the DLQ: its asset is claimable anyway, so it is only noise for a person to delete.
async fn move_back(sqs: &aws_sdk_sqs::Client, queue_url: &str, dlq_url: &str, moving: Vec<Moving>, run: &mut Run) {
    let mut copied = Vec::new();
    for chunk in chunks(moving) {
        let entries = chunk.iter().enumerate().map(|(i, m)| {
            SendMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .message_body(m.dead.message.body().unwrap_or_default())
                .set_message_attributes(m.dead.message.message_attributes().filter(|a| !a.is_empty()).cloned())
                .build()
        });
        let sent = match entries.collect::<Result<Vec<_>, _>>() {
            Ok(entries) => sqs
                .send_message_batch()
                .queue_url(queue_url)
                .set_entries(Some(entries))
                .send()
                .await
                .map(|out| (out.successful().iter().map(|s| s.id().to_owned()).collect(), out.failed().to_vec()))
                .map_err(|e| DisplayErrorContext(&e).to_string()),
            Err(e) => Err(e.to_string()),
        };
        // Even a call that failed as a whole may have delivered some copies.
        run.changed = true;
        for (m, failure) in entry_failures(chunk, sent) {
            match failure {
                None => copied.push(m),
                Some(why) => {
                    run.attention.push(format!(
                        "message {}: its asset was reset, but the copy to the queue failed ({why}); it stays on the \
                         dead-letter queue and is no longer needed (the next pass claims the asset under a new one)",
                        m.dead.message_id
                    ));
                    let outcome = format!("{}, but the copy to the queue failed ({why}): {STAYS}", m.reset(false));
                    run.lines.push(Line {
                        asset: m.dead.asset(),
                        message_id: m.dead.message_id,
                        moved: false,
                        outcome,
                    });
                }
            }
        }
    }

    for chunk in chunks(copied) {
        let entries = chunk.iter().enumerate().map(|(i, m)| {
            DeleteMessageBatchRequestEntry::builder().id(i.to_string()).receipt_handle(&m.dead.receipt).build()
        });
        let deleted = match entries.collect::<Result<Vec<_>, _>>() {
            Ok(entries) => sqs
                .delete_message_batch()
                .queue_url(dlq_url)
                .set_entries(Some(entries))
                .send()
                .await
                .map(|out| (out.successful().iter().map(|s| s.id().to_owned()).collect(), out.failed().to_vec()))
                .map_err(|e| DisplayErrorContext(&e).to_string()),
            Err(e) => Err(e.to_string()),
        };
        for (m, failure) in entry_failures(chunk, deleted) {
            let outcome = match failure {
                None => {
                    run.held.remove(&m.dead.message_id);
                    format!("{}, message moved back", m.reset(false))
                }
                Some(why) => {
                    run.attention.push(format!(
                        "message {}: copied to the queue but not deleted from the dead-letter queue ({why}); the \
                         copy settles nothing, and this one is no longer needed",
                        m.dead.message_id
                    ));
                    format!("{}, message copied back but still on the dead-letter queue ({why})", m.reset(false))
                }
            };
            run.lines.push(Line { asset: m.dead.asset(), message_id: m.dead.message_id, moved: true, outcome });
        }
    }
}

/// Makes every held message visible again, so it waits on the DLQ for a person rather than for [`HOLD_SECS`].
async fn release(sqs: &aws_sdk_sqs::Client, dlq_url: &str, run: &mut Run) {
    let held: Vec<(String, String)> = std::mem::take(&mut run.held).into_iter().collect();
    for chunk in chunks(held) {
        let entries = chunk.iter().enumerate().map(|(i, (_, receipt))| {
            ChangeMessageVisibilityBatchRequestEntry::builder()
                .id(i.to_string())
                .receipt_handle(receipt)
                .visibility_timeout(0)
                .build()
        });
        let changed = match entries.collect::<Result<Vec<_>, _>>() {
            Ok(entries) => sqs
                .change_message_visibility_batch()
                .queue_url(dlq_url)
                .set_entries(Some(entries))
                .send()
                .await
                .map(|out| (out.successful().iter().map(|s| s.id().to_owned()).collect(), out.failed().to_vec()))
                .map_err(|e| DisplayErrorContext(&e).to_string()),
            Err(e) => Err(e.to_string()),
        };
        for ((message_id, _), failure) in entry_failures(chunk, changed) {
            // Not in flight: its hold ran out first, so it is visible already.
            if let Some(why) = failure.filter(|why| !why.contains("MessageNotInflight")) {
                run.attention.push(format!(
                    "message {message_id}: could not be made visible again ({why}); it is hidden for up to \
                     {HOLD_SECS} s more"
                ));
            }
        }
    }
}

/// Groups of ten, the most one batch call takes.
fn chunks<T>(items: Vec<T>) -> Vec<Vec<T>> {
    let mut chunks = Vec::new();
    let mut items = items.into_iter().peekable();
    while items.peek().is_some() {
        chunks.push(items.by_ref().take(10).collect());
    }
    chunks
}

/// Each entry of a batch call (ids are positions in `chunk`) with why it failed, if it did: the call's own error,
/// or its entry in `Failed`, or no answer for it at all — a call that succeeds can still reject entries.
fn entry_failures<T>(
    chunk: Vec<T>,
    answer: Result<(Vec<String>, Vec<BatchResultErrorEntry>), String>,
) -> Vec<(T, Option<String>)> {
    chunk
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let id = i.to_string();
            let failure = match &answer {
                Err(call) => Some(call.clone()),
                Ok((successful, failed)) => match failed.iter().find(|f| f.id() == id) {
                    Some(f) => Some(format!("{}: {}", f.code(), f.message().unwrap_or("rejected"))),
                    None if successful.contains(&id) => None,
                    None => Some("SQS did not answer for this entry".to_owned()),
                },
            };
            (item, failure)
        })
        .collect()
}

fn render(run: &Run, dry_run: bool, dlq_url: &str, queue_url: &str) -> Output {
    let moved = run.lines.iter().filter(|l| l.moved).count();
    let left = run.lines.len() - moved;
    let mut text = String::new();
    let _ = if dry_run {
        writeln!(
            text,
            "would move {moved} message(s) from {dlq_url} to {queue_url} and reset {} asset(s); {left} message(s) \
             would stay on the dead-letter queue",
            run.reset.len()
        )
    } else {
        writeln!(
            text,
            "moved {moved} message(s) from {dlq_url} to {queue_url} and reset {} asset(s); {left} message(s) stay \
             on the dead-letter queue",
            run.reset.len()
        )
    };
    let mut listed = Vec::new();
    for line in &run.lines {
        let shown = line.asset.map_or("-".to_owned(), |a| a.to_string());
        let _ = writeln!(text, "  message {}  asset {shown}  {}", line.message_id, line.outcome);
        listed.push(json!({
            "message_id": line.message_id,
            "asset_id": line.asset,
            "moved": line.moved,
            "outcome": line.outcome,
        }));
    }
    for reason in &run.attention {
        let _ = writeln!(text, "! {reason}");
    }
    Output {
        text: text.trim_end().to_owned(),
        json: json!({
            "dry_run": dry_run,
            "messages": listed,
            "assets_reset": run.reset.len(),
            "moved": moved,
            "left": left,
            "needs_attention": run.attention,
        }),
        attention: run.attention.clone(),
    }
}
