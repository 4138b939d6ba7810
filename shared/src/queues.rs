//! The cleanup queue as an operator sees it: its depth, and its dead-letter queue, found from the queue's own
//! redrive policy (so no setting names it twice).

use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::QueueAttributeName;
use serde::Serialize;

/// Messages waiting to be received, and received but not yet deleted (SQS's approximate counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Depth {
    pub waiting: u64,
    pub in_flight: u64,
}

impl Depth {
    pub fn total(self) -> u64 {
        self.waiting + self.in_flight
    }
}

/// A queue's URL, ARN and depth.
#[derive(Debug, Clone)]
pub struct Queue {
    pub url: String,
    pub arn: String,
    pub depth: Depth,
    /// The dead-letter queue's ARN, from the redrive policy.
    pub dead_letter_arn: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("cannot read queue {url}: {reason}")]
    Unreadable { url: String, reason: String },
    #[error("queue {0} has no redrive policy, so no dead-letter queue")]
    NoDeadLetterQueue(String),
    #[error("cannot find the dead-letter queue {arn}: {reason}")]
    DeadLetterNotFound { arn: String, reason: String },
}

/// Reads the queue at `url`.
pub async fn describe(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<Queue, QueueError> {
    let unreadable = |reason: String| QueueError::Unreadable { url: url.to_owned(), reason };
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .map_err(|e| unreadable(DisplayErrorContext(&e).to_string()))?;
    let get = |name: QueueAttributeName| attributes.attributes().and_then(|a| a.get(&name)).cloned();
    let count = |name| get(name).and_then(|v| v.parse().ok()).unwrap_or(0);
    let dead_letter_arn = get(QueueAttributeName::RedrivePolicy)
        .and_then(|policy| serde_json::from_str::<serde_json::Value>(&policy).ok())
        .and_then(|policy| policy["deadLetterTargetArn"].as_str().map(str::to_owned));
    Ok(Queue {
        url: url.to_owned(),
        arn: get(QueueAttributeName::QueueArn).ok_or_else(|| unreadable("no QueueArn attribute".into()))?,
        depth: Depth {
            waiting: count(QueueAttributeName::ApproximateNumberOfMessages),
            in_flight: count(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        },
        dead_letter_arn,
    })
}

/// The queue at `url` and its dead-letter queue.
pub async fn with_dead_letter(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<(Queue, Queue), QueueError> {
    let queue = describe(sqs, url).await?;
    let arn = queue.dead_letter_arn.clone().ok_or_else(|| QueueError::NoDeadLetterQueue(url.to_owned()))?;
    let not_found = |reason: String| QueueError::DeadLetterNotFound { arn: arn.clone(), reason };
    // arn:aws:sqs:region:account:name
    let parts: Vec<&str> = arn.split(':').collect();
    let (Some(account), Some(name)) = (parts.get(4), parts.get(5)) else {
        return Err(not_found("not a queue ARN".into()));
    };
    let dlq_url = sqs
        .get_queue_url()
        .queue_name(*name)
        .queue_owner_aws_account_id(*account)
        .send()
        .await
        .map_err(|e| not_found(DisplayErrorContext(&e).to_string()))?
        .queue_url
        .ok_or_else(|| not_found("GetQueueUrl answered without a URL".into()))?;
    let dlq = describe(sqs, &dlq_url).await?;
    Ok((queue, dlq))
}
