//! The cleanup queue and its dead-letter queue, found from the queue's own redrive policy (no extra setting).

use anyhow::{Context, bail};
use aws_sdk_sqs::types::QueueAttributeName;
use serde::Serialize;

/// Messages waiting and in flight.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Depth {
    pub waiting: u64,
    pub in_flight: u64,
}

/// A queue's URL, ARN and depth.
pub struct Queue {
    pub url: String,
    pub arn: String,
    pub depth: Depth,
    /// The dead-letter queue's ARN, from the redrive policy.
    pub dead_letter_arn: Option<String>,
}

pub async fn describe(sqs: &aws_sdk_sqs::Client, url: &str) -> anyhow::Result<Queue> {
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("{}", aws_sdk_sqs::error::DisplayErrorContext(&e)))
        .with_context(|| format!("cannot read queue {url}"))?;
    let get = |name: QueueAttributeName| attributes.attributes().and_then(|a| a.get(&name)).cloned();
    let count = |name| get(name).and_then(|v| v.parse().ok()).unwrap_or(0);
    let dead_letter_arn = get(QueueAttributeName::RedrivePolicy)
        .and_then(|policy| serde_json::from_str::<serde_json::Value>(&policy).ok())
        .and_then(|policy| policy["deadLetterTargetArn"].as_str().map(str::to_owned));
    Ok(Queue {
        url: url.to_owned(),
        arn: get(QueueAttributeName::QueueArn).with_context(|| format!("queue {url} has no ARN"))?,
        depth: Depth {
            waiting: count(QueueAttributeName::ApproximateNumberOfMessages),
            in_flight: count(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        },
        dead_letter_arn,
    })
}

/// The cleanup queue and its dead-letter queue.
pub async fn both(sqs: &aws_sdk_sqs::Client, url: &str) -> anyhow::Result<(Queue, Queue)> {
    let queue = describe(sqs, url).await?;
    let Some(arn) = queue.dead_letter_arn.clone() else {
        bail!("queue {url} has no redrive policy, so no dead-letter queue");
    };
    // arn:aws:sqs:region:account:name
    let mut parts = arn.split(':');
    let (name, account) = (parts.clone().nth(5), parts.nth(4));
    let name = name.with_context(|| format!("{arn} is not a queue ARN"))?;
    let dlq_url = sqs
        .get_queue_url()
        .queue_name(name)
        .set_queue_owner_aws_account_id(account.map(str::to_owned))
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("{}", aws_sdk_sqs::error::DisplayErrorContext(&e)))
        .with_context(|| format!("cannot find the dead-letter queue {arn}"))?
        .queue_url
        .with_context(|| format!("no URL for {arn}"))?;
    let dlq = describe(sqs, &dlq_url).await?;
    Ok((queue, dlq))
}
