//! Sending one message per claim: `SendMessageBatch` with ten entries per call, a bounded number of calls in
//! flight. A 200 response can still reject single entries, so every entry's fate is read back.

use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use futures::StreamExt;
use lifecycle::CleanupMessage;
use uuid::Uuid;

use lifecycle::assets::Claim;

/// SQS's limit on entries per batch call.
pub const ENTRIES_PER_CALL: usize = 10;

/// What happened to a set of claims.
#[derive(Debug, Default)]
pub struct Sent {
    pub delivered: Vec<Claim>,
    /// Claims whose message did not go, with the reason.
    pub failed: Vec<(Claim, String)>,
    pub calls: u64,
    /// Calls that failed as a whole (the queue unreachable, throttled, ...), as opposed to single entries.
    pub failed_calls: u64,
}

/// Sends one message per claim.
pub async fn send_all(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    sweep_run_id: Uuid,
    claims: Vec<Claim>,
    concurrency: usize,
) -> Sent {
    let chunks: Vec<Vec<Claim>> = claims.chunks(ENTRIES_PER_CALL).map(<[Claim]>::to_vec).collect();
    let mut calls = futures::stream::iter(chunks)
        .map(|chunk| send_chunk(sqs, queue_url, sweep_run_id, chunk))
        .buffer_unordered(concurrency.max(1));
    let mut sent = Sent::default();
    while let Some(chunk) = calls.next().await {
        sent.calls += 1;
        sent.failed_calls += u64::from(chunk.call_failed);
        sent.delivered.extend(chunk.delivered);
        sent.failed.extend(chunk.failed);
    }
    sent
}

struct ChunkResult {
    delivered: Vec<Claim>,
    failed: Vec<(Claim, String)>,
    call_failed: bool,
}

async fn send_chunk(sqs: &aws_sdk_sqs::Client, queue_url: &str, sweep_run_id: Uuid, chunk: Vec<Claim>) -> ChunkResult {
    let entries: Result<Vec<_>, _> = chunk
        .iter()
        .enumerate()
        .map(|(i, claim)| {
            SendMessageBatchRequestEntry::builder().id(i.to_string()).message_body(body(claim, sweep_run_id)).build()
        })
        .collect();
    if call_refused(queue_url) {
        let reason = "SendMessageBatch failed: injected failure of the whole call".to_owned();
        return ChunkResult {
            failed: chunk.into_iter().map(|c| (c, reason.clone())).collect(),
            delivered: vec![],
            call_failed: true,
        };
    }
    let response = match entries {
        Ok(entries) => sqs.send_message_batch().queue_url(queue_url).set_entries(Some(entries)).send().await,
        Err(e) => {
            let reason = format!("cannot build SendMessageBatch entries: {e}");
            return ChunkResult {
                failed: chunk.into_iter().map(|c| (c, reason.clone())).collect(),
                delivered: vec![],
                call_failed: true,
            };
        }
    };
    match response {
        Ok(output) => {
            let mut rejected: Vec<Option<String>> = vec![None; chunk.len()];
            for failure in output.failed() {
                if let Some(slot) = failure.id().parse::<usize>().ok().and_then(|i| rejected.get_mut(i)) {
                    *slot = Some(format!("{}: {}", failure.code(), failure.message().unwrap_or("rejected")));
                }
            }
            let mut result = ChunkResult { delivered: vec![], failed: vec![], call_failed: false };
            for (claim, reason) in chunk.into_iter().zip(rejected) {
                match reason {
                    None => result.delivered.push(claim),
                    Some(reason) => result.failed.push((claim, reason)),
                }
            }
            result
        }
        Err(e) => {
            let reason = format!("SendMessageBatch failed: {}", aws_sdk_sqs::error::DisplayErrorContext(&e));
            ChunkResult {
                failed: chunk.into_iter().map(|c| (c, reason.clone())).collect(),
                delivered: vec![],
                call_failed: true,
            }
        }
    }
}

/// Failpoint `sweep::send_call`: every `SendMessageBatch` call to a queue whose URL is the failpoint's argument
/// fails as a whole (the queue went away mid-pass). Scoped to one queue, so tests beside it are untouched.
#[cfg_attr(not(feature = "failpoints"), allow(unused_variables))]
fn call_refused(queue_url: &str) -> bool {
    fail::fail_point!("sweep::send_call", |url: Option<String>| url.as_deref() == Some(queue_url));
    false
}

fn body(claim: &Claim, sweep_run_id: Uuid) -> String {
    let body = CleanupMessage::new(claim.asset_id, claim.workspace_id, claim.token, sweep_run_id).to_body();
    // Tests make SQS itself reject chosen entries: a character SQS does not accept corrupts the body of each
    // asset named in the failpoint's argument.
    fail::fail_point!("sweep::reject_entry", |ids: Option<String>| {
        if ids.is_some_and(|ids| ids.contains(&claim.asset_id.to_string())) {
            format!("{body}\u{1}")
        } else {
            body.clone()
        }
    });
    body
}
