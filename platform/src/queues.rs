//! The cleanup queue as an operator sees it: its depth, and its dead-letter queue, found from the queue's own
//! redrive policy (so no setting names it twice).

use aws_sdk_sqs::types::QueueAttributeName;
use serde::Serialize;

use crate::aws::AwsFailure;

/// Messages waiting to be received, and received but not yet deleted (SQS's approximate counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Depth {
    /// Visible messages (`ApproximateNumberOfMessages`).
    pub waiting: u64,
    /// Received and not yet deleted (`ApproximateNumberOfMessagesNotVisible`).
    pub in_flight: u64,
}

impl Depth {
    /// Everything the queue holds.
    pub fn total(self) -> u64 {
        self.waiting + self.in_flight
    }
}

/// A queue's URL, ARN and depth.
#[derive(Debug, Clone)]
pub struct Queue {
    /// Its URL.
    pub url: String,
    /// Its ARN.
    pub arn: String,
    /// What it holds.
    pub depth: Depth,
    /// The dead-letter queue's ARN, from the redrive policy.
    pub dead_letter_arn: Option<String>,
}

/// Why a queue could not be described. Names the queue.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// `GetQueueAttributes` failed.
    #[error("cannot read queue {url}: {cause}")]
    Unreadable {
        /// The queue.
        url: String,
        /// The failed call.
        #[source]
        cause: AwsFailure,
    },
    /// SQS answered without an attribute it always sends.
    #[error("queue {url} answered without its {attribute} attribute")]
    Incomplete {
        /// The queue.
        url: String,
        /// The attribute missing.
        attribute: &'static str,
    },
    /// The queue (by URL) has no dead-letter queue configured.
    #[error("queue {0} has no redrive policy, so no dead-letter queue")]
    NoDeadLetterQueue(String),
    /// The redrive policy names a dead-letter queue that cannot be found.
    #[error("cannot find the dead-letter queue {arn}: {cause}")]
    DeadLetterNotFound {
        /// The ARN in the redrive policy.
        arn: String,
        /// The failed lookup.
        #[source]
        cause: AwsFailure,
    },
    /// The redrive policy's target (given) is not a queue ARN.
    #[error("the dead-letter queue {0} in the redrive policy is not a queue ARN")]
    NotAQueueArn(String),
}

impl QueueError {
    /// Whether trying again may help (a timeout or throttling, not a missing queue or a refusal).
    pub fn retryable(&self) -> bool {
        match self {
            QueueError::Unreadable { cause, .. } | QueueError::DeadLetterNotFound { cause, .. } => cause.retryable(),
            _ => false,
        }
    }
}

/// Reads the queue at `url`.
pub async fn describe(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<Queue, QueueError> {
    let attributes =
        sqs.get_queue_attributes().queue_url(url).attribute_names(QueueAttributeName::All).send().await.map_err(
            |e| QueueError::Unreadable {
                url: url.to_owned(),
                cause: AwsFailure::from_sdk(format!("GetQueueAttributes {url}"), &e),
            },
        )?;
    let get = |name: QueueAttributeName| attributes.attributes().and_then(|a| a.get(&name)).cloned();
    let count = |name| get(name).and_then(|v| v.parse().ok()).unwrap_or(0);
    let dead_letter_arn = get(QueueAttributeName::RedrivePolicy)
        .and_then(|policy| serde_json::from_str::<serde_json::Value>(&policy).ok())
        .and_then(|policy| policy["deadLetterTargetArn"].as_str().map(str::to_owned));
    Ok(Queue {
        url: url.to_owned(),
        arn: get(QueueAttributeName::QueueArn)
            .ok_or_else(|| QueueError::Incomplete { url: url.to_owned(), attribute: "QueueArn" })?,
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
    // arn:aws:sqs:region:account:name
    let parts: Vec<&str> = arn.split(':').collect();
    let (Some(account), Some(name)) = (parts.get(4), parts.get(5)) else {
        return Err(QueueError::NotAQueueArn(arn));
    };
    let dlq_url = sqs
        .get_queue_url()
        .queue_name(*name)
        .queue_owner_aws_account_id(*account)
        .send()
        .await
        .map_err(|e| QueueError::DeadLetterNotFound {
            arn: arn.clone(),
            cause: AwsFailure::from_sdk(format!("GetQueueUrl {name}"), &e),
        })?
        .queue_url
        .ok_or_else(|| QueueError::Incomplete { url: arn.clone(), attribute: "QueueUrl" })?;
    let dlq = describe(sqs, &dlq_url).await?;
    Ok((queue, dlq))
}
