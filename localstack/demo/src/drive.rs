//! Running the system: one sweep invoked as its schedule would, then waiting — on the database's record and the
//! queues, not on guesses — while LocalStack's event source mapping feeds the consumer.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use aws_sdk_cloudwatch::types::StateValue;
use aws_sdk_lambda::primitives::Blob;
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

use crate::catalog::Catalog;
use crate::{Clients, Stack};

/// Invokes the sweep with a scheduled event, as its EventBridge rule does; returns the pass's report. The rule
/// itself may be running a pass (the function allows one at a time): then this waits and tries again.
pub async fn invoke_sweep(clients: &Clients, stack: &Stack) -> anyhow::Result<Value> {
    let event = json!({
        "version": "0",
        "id": Uuid::new_v4(),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "time": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "resources": [],
        "detail": {}
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let invoked = clients
            .lambda
            .invoke()
            .function_name(&stack.sweep_function_name)
            .payload(Blob::new(event.to_string()))
            .send()
            .await;
        let response = match invoked {
            Ok(response) => response,
            Err(e)
                if Instant::now() < deadline
                    && e.as_service_error().is_some_and(|e| e.is_too_many_requests_exception()) =>
            {
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
            Err(e) => return Err(e).with_context(|| format!("invoking {}", stack.sweep_function_name)),
        };
        let payload = response.payload().map(Blob::as_ref).unwrap_or_default();
        if let Some(error) = response.function_error() {
            bail!("the sweep failed ({error}): {}", String::from_utf8_lossy(payload));
        }
        return serde_json::from_slice(payload).context("the sweep answered with something other than its report");
    }
}

/// The final decision about each of `assets` recorded since `since` (failures included), by asset: its action and
/// the evidence recorded with it.
pub async fn decisions(
    pool: &PgPool,
    assets: &[Uuid],
    since: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<HashMap<Uuid, (String, Value)>> {
    let rows: Vec<(Uuid, String, Value)> = sqlx::query_as(
        "SELECT DISTINCT ON (asset_id) asset_id, action, evidence FROM asset_sweeper_private.settlement_events
          WHERE asset_id = ANY ($1) AND occurred_at >= $2
            AND action IN ('keep', 'retire', 'delete', 'purge', 'defer', 'failed')
          ORDER BY asset_id, id DESC",
    )
    .bind(assets)
    .bind(since)
    .fetch_all(pool)
    .await
    .context("reading the settlement record")?;
    Ok(rows.into_iter().map(|(id, action, evidence)| (id, (action, evidence))).collect())
}

/// Waits for the whole outcome of the pass over `catalog`: every due asset decided, the cleanup queue empty, and
/// the dead-letter alarm firing for the poison message.
pub async fn wait_for_outcome(
    pool: &PgPool,
    clients: &Clients,
    stack: &Stack,
    catalog: &Catalog,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<()> {
    wait_until_settled(pool, clients, stack, catalog, Duration::from_secs(600), progress).await?;
    progress("the dead-letter queue is not empty, so its alarm must fire");
    wait_for_alarm(
        &clients.cloudwatch,
        &stack.dead_letter_alarm_name,
        StateValue::Alarm,
        Duration::from_secs(300),
        progress,
    )
    .await
}

/// Waits until every due asset of `catalog` has a decision and the cleanup queue is empty — a message that
/// failed its last delivery leaves it only when SQS moves it to the dead-letter queue. Reports progress every
/// few seconds through `progress`.
async fn wait_until_settled(
    pool: &PgPool,
    clients: &Clients,
    stack: &Stack,
    catalog: &Catalog,
    timeout: Duration,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<()> {
    let due: Vec<Uuid> = catalog.due().map(|a| a.id).collect();
    let started = Instant::now();
    let mut last_line = String::new();
    let mut last_print = Instant::now();
    loop {
        let decided = decisions(pool, &due, catalog.seeded_at).await?;
        let queue = platform::queues::describe(&clients.sqs, &stack.cleanup_queue_url).await?.depth;
        let dlq = platform::queues::describe(&clients.sqs, &stack.dead_letter_queue_url).await?.depth;
        let failed = decided.values().filter(|(action, _)| action == "failed").count();
        let mut line = format!(
            "settled {}/{} · queue {} waiting, {} in flight · dead-letter queue {}",
            decided.len(),
            due.len(),
            queue.waiting,
            queue.in_flight,
            dlq.total()
        );
        if failed > 0 && queue.total() > 0 {
            line.push_str(" · a message that failed every delivery moves to the DLQ when its visibility timeout ends");
        }
        if decided.len() == due.len() && queue.total() == 0 {
            progress(&line);
            return Ok(());
        }
        if line != last_line || last_print.elapsed() >= Duration::from_secs(15) {
            progress(&line);
            last_line = line;
            last_print = Instant::now();
        }
        if started.elapsed() > timeout {
            let missing: Vec<String> = catalog
                .due()
                .filter(|a| !decided.contains_key(&a.id))
                .map(|a| format!("{}/{} ({})", a.workspace, a.file, a.id))
                .collect();
            bail!(
                "not settled after {}s: {} undecided [{}], queue {:?}; the consumer's logs are in CloudWatch Logs \
                 under /aws/lambda/{}",
                timeout.as_secs(),
                missing.len(),
                missing.join(", "),
                queue,
                stack.consumer_function_name
            );
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Waits until the alarm `name` is in `state` (CloudWatch evaluates it once a minute).
async fn wait_for_alarm(
    cloudwatch: &aws_sdk_cloudwatch::Client,
    name: &str,
    state: StateValue,
    timeout: Duration,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut last = None;
    loop {
        let current = alarm_states(cloudwatch, &[name.to_owned()]).await?.into_iter().next().map(|a| a.state);
        if current.as_ref() == Some(&state) {
            progress(&format!("alarm {name}: {}", state.as_str()));
            return Ok(());
        }
        if current != last {
            let shown = current.as_ref().map_or("missing", StateValue::as_str);
            progress(&format!("alarm {name}: {shown}, waiting for {} (evaluated each minute)", state.as_str()));
            last = current;
        }
        if started.elapsed() > timeout {
            bail!("alarm {name} did not reach {} within {}s", state.as_str(), timeout.as_secs());
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
}

/// An alarm's state and why CloudWatch put it there.
#[derive(Debug, Clone, PartialEq)]
pub struct Alarm {
    pub name: String,
    pub state: StateValue,
    pub reason: String,
    /// When the state last changed.
    pub since: Option<chrono::DateTime<chrono::Utc>>,
}

/// The state of each named alarm that exists, in the order given.
pub async fn alarm_states(cloudwatch: &aws_sdk_cloudwatch::Client, names: &[String]) -> anyhow::Result<Vec<Alarm>> {
    let mut states = Vec::with_capacity(names.len());
    // DescribeAlarms takes at most 100 names per call.
    for chunk in names.chunks(100) {
        let described = cloudwatch
            .describe_alarms()
            .set_alarm_names(Some(chunk.to_vec()))
            .send()
            .await
            .context("describing the stack's alarms")?;
        for alarm in described.metric_alarms() {
            if let (Some(name), Some(state)) = (alarm.alarm_name(), alarm.state_value()) {
                states.push(Alarm {
                    name: name.to_owned(),
                    state: state.clone(),
                    reason: alarm.state_reason().unwrap_or_default().to_owned(),
                    since: alarm.state_updated_timestamp().and_then(|t| chrono::DateTime::from_timestamp(t.secs(), 0)),
                });
            }
        }
    }
    states.sort_by_key(|a| names.iter().position(|n| *n == a.name));
    Ok(states)
}
