//! The deploy step: `localstack/deploy` (the same command a person runs) with the demo's parameters.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, bail};
use serde::Deserialize;

/// Template parameters for the demo stack. A poison message must fail every delivery before SQS moves it to the
/// dead-letter queue; with the production values (5 deliveries, 360 s visibility) that takes half an hour, with
/// these two minutes. The ratio the template asks for (visibility ≥ 6 × consumer timeout) still holds.
/// The quiet period after a schema change and a new retention rule's delay are off: the demo's application creates
/// its tables and declares its rule just before the first pass, and would otherwise wait hours for its first delete.
/// So is discovery's rest between cycles: a run again within the hour reuses the last run's database, whose last
/// cycle would otherwise keep the new run's first passes from looking.
pub const DEMO_PARAMETERS: &[(&str, &str)] = &[
    ("MaxReceiveCount", "2"),
    ("QueueVisibilityTimeout", "60"),
    ("ConsumerTimeout", "10"),
    ("SchemaQuietPeriod", "0s"),
    ("RecordsNewRuleDelay", "0s"),
    ("DiscoveryCycleInterval", "0s"),
];

/// The stack's outputs the demo needs.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Stack {
    #[serde(skip)]
    pub name: String,
    pub cleanup_queue_url: String,
    pub dead_letter_queue_url: String,
    pub asset_bucket_name: String,
    pub sweep_function_name: String,
    pub consumer_function_name: String,
    pub dead_letter_alarm_name: String,
    /// Comma-separated, as the template joins them.
    pub alarm_names: String,
}

impl Stack {
    pub fn alarm_names(&self) -> Vec<String> {
        self.alarm_names.split(',').filter(|n| !n.is_empty()).map(str::to_owned).collect()
    }
}

#[derive(Deserialize)]
struct Deployed {
    status: String,
    outputs: serde_json::Value,
}

/// Runs `localstack/deploy` from the repository at `root` for the demo: its parameters, with reconciliation of the
/// whole asset bucket turned on ([`crate::bucket::parameters`]).
pub fn deploy(
    root: &Path,
    database_url: &str,
    logins: &crate::logins::FunctionLogins,
    stack: &str,
) -> anyhow::Result<Stack> {
    deploy_with(root, database_url, logins, stack, &crate::bucket::parameters(stack))
}

/// Runs `localstack/deploy` from the repository at `root` with [`DEMO_PARAMETERS`] and `extra` (an `extra` parameter
/// of the same name replaces the demo's); its progress goes to this process's stderr.
/// Each function connects as its own login (`logins`): the script puts each URL in that function's secret.
pub fn deploy_with(
    root: &Path,
    database_url: &str,
    logins: &crate::logins::FunctionLogins,
    stack: &str,
    extra: &[(String, String)],
) -> anyhow::Result<Stack> {
    // CloudFormation refuses a parameter given twice.
    let demo =
        DEMO_PARAMETERS.iter().filter(|(k, _)| !extra.iter().any(|(e, _)| e == k)).map(|(k, v)| format!("{k}={v}"));
    let script = root.join("localstack/deploy");
    let output = Command::new(&script)
        .env("SWEEP_DATABASE_URL", &logins.sweep_url)
        .env("CONSUMER_DATABASE_URL", &logins.consumer_url)
        .arg(database_url)
        .arg(stack)
        .args(demo)
        .args(extra.iter().map(|(k, v)| format!("{k}={v}")))
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !output.status.success() {
        bail!("{} failed ({}); its output is above", script.display(), output.status);
    }
    let deployed: Deployed =
        serde_json::from_slice(&output.stdout).context("localstack/deploy did not print the stack as JSON")?;
    if !deployed.status.ends_with("_COMPLETE") || deployed.status.contains("ROLLBACK") {
        bail!("stack {stack} is {} after the deploy", deployed.status);
    }
    let mut outputs: Stack = serde_json::from_value(deployed.outputs).with_context(|| {
        format!("stack {stack} lacks an output the demo needs (deployed with DeployFunctions=true?)")
    })?;
    outputs.name = stack.to_owned();
    Ok(outputs)
}
