//! `infra/template.yaml` deployed into LocalStack through CloudFormation, and checked against the code.
//!
//! LocalStack cannot run Lambda functions on a machine without a Docker engine, so the stack is deployed with
//! `DeployFunctions=false`: every resource but the functions and what hangs off them is created and inspected
//! as created; the functions, their event source mapping, schedule and roles are inspected in the template as
//! CloudFormation processed it (the SAM transform expanded), which is what AWS would create from.

use std::time::Duration;

use aws_sdk_cloudformation::client::Waiters;
use aws_sdk_cloudformation::types::{Capability, Parameter, StackStatus, TemplateStage};
use aws_sdk_cloudwatch::types::{ComparisonOperator, Statistic};
use aws_sdk_s3::types::BucketVersioningStatus;
use aws_sdk_sqs::types::QueueAttributeName;
use integration_tests::short_id;
use serde_json::{Value, json};

/// A deployed stack: its outputs and its processed template. It stays for the rest of the run (LocalStack's
/// state ends with it).
struct Deployed {
    outputs: std::collections::HashMap<String, String>,
    processed: Value,
}

/// What `sam package` does to the template before CloudFormation sees it: the local code path becomes an S3
/// location (never fetched here: the functions are not created).
fn packaged_template() -> String {
    let template = include_str!("../../infra/template.yaml");
    assert_eq!(template.matches("CodeUri: ../").count(), 2, "both functions build from the workspace root");
    template.replace("CodeUri: ../", "CodeUri: s3://asset-sweeper-code/functions.zip")
}

/// The stack both tests read, deployed once per test run.
static STACK: tokio::sync::OnceCell<Deployed> = tokio::sync::OnceCell::const_new();

async fn deployed() -> &'static Deployed {
    STACK.get_or_init(deploy).await
}

async fn deploy() -> Deployed {
    let config = platform::aws::sdk_config().await;
    let cfn = aws_sdk_cloudformation::Client::new(&config);
    let name = format!("asset-sweeper-{}", short_id());
    let parameter = |k: &str, v: &str| Parameter::builder().parameter_key(k).parameter_value(v).build();
    cfn.create_stack()
        .stack_name(&name)
        .template_body(packaged_template())
        .capabilities(Capability::CapabilityIam)
        .capabilities(Capability::CapabilityAutoExpand)
        .parameters(parameter("DeployFunctions", "false"))
        .parameters(parameter("DatabaseSecretArn", "arn:aws:secretsmanager:us-east-1:000000000000:secret:db-AbCdEf"))
        .send()
        .await
        .expect("create stack");
    let waited = cfn.wait_until_stack_create_complete().stack_name(&name).wait(Duration::from_secs(180)).await;
    let stack = cfn.describe_stacks().stack_name(&name).send().await.expect("describe stack");
    let stack = &stack.stacks()[0];
    assert!(
        waited.is_ok() && stack.stack_status() == Some(&StackStatus::CreateComplete),
        "stack {name} is {:?}: {:?}",
        stack.stack_status(),
        stack.stack_status_reason()
    );
    let outputs = stack
        .outputs()
        .iter()
        .filter_map(|o| Some((o.output_key()?.to_owned(), o.output_value()?.to_owned())))
        .collect();
    let body = cfn
        .get_template()
        .stack_name(&name)
        .template_stage(TemplateStage::Processed)
        .send()
        .await
        .expect("processed template")
        .template_body
        .expect("template body");
    let processed = serde_json::from_str(&body).expect("the processed template is JSON");
    Deployed { outputs, processed }
}

#[tokio::test]
async fn the_template_deploys_into_localstack_with_the_settings_it_promises() {
    let stack = deployed().await;
    let config = platform::aws::sdk_config().await;

    // Queues: redrive after 5 receives to a DLQ that keeps messages 14 days; visibility 6 × the consumer's 60 s.
    let sqs = platform::aws::sqs_client(&config);
    let attributes = |url: String| {
        let sqs = sqs.clone();
        async move {
            sqs.get_queue_attributes()
                .queue_url(url)
                .attribute_names(QueueAttributeName::All)
                .send()
                .await
                .expect("queue attributes")
                .attributes
                .unwrap_or_default()
        }
    };
    let queue = attributes(stack.outputs["CleanupQueueUrl"].clone()).await;
    let dlq = attributes(stack.outputs["DeadLetterQueueUrl"].clone()).await;
    let redrive: Value = serde_json::from_str(&queue[&QueueAttributeName::RedrivePolicy]).expect("redrive policy");
    assert_eq!(redrive["deadLetterTargetArn"], dlq[&QueueAttributeName::QueueArn].as_str());
    assert_eq!(redrive["maxReceiveCount"].to_string().trim_matches('"'), "5");
    assert_eq!(queue[&QueueAttributeName::VisibilityTimeout], "360");
    assert_eq!(dlq[&QueueAttributeName::MessageRetentionPeriod], "1209600");
    assert_eq!(queue[&QueueAttributeName::SqsManagedSseEnabled], "true");

    // Bucket: versioned, deleted bytes kept 7 days, nothing current expired, private, encrypted.
    let s3 = platform::aws::s3_client(&config, true);
    let bucket = &stack.outputs["AssetBucketName"];
    let versioning = s3.get_bucket_versioning().bucket(bucket).send().await.expect("versioning");
    assert_eq!(versioning.status(), Some(&BucketVersioningStatus::Enabled));
    // LocalStack's CloudFormation applies versioning but not lifecycle rules, encryption or the public access
    // block: those are checked as CloudFormation would hand them to S3.
    let bucket_properties = &stack.processed["Resources"]["AssetBucket"]["Properties"];
    let rules = bucket_properties["LifecycleConfiguration"]["Rules"].as_array().expect("lifecycle rules");
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0]["NoncurrentVersionExpiration"]["NoncurrentDays"],
        json!({"Ref": "NoncurrentVersionExpirationDays"})
    );
    assert_eq!(
        stack.processed["Parameters"]["NoncurrentVersionExpirationDays"]["Default"].to_string().trim_matches('"'),
        "7"
    );
    assert!(
        rules[0].get("ExpirationInDays").is_none() && rules[0].get("ExpirationDate").is_none(),
        "no rule expires current objects"
    );
    let block = &bucket_properties["PublicAccessBlockConfiguration"];
    for flag in ["BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets"] {
        assert_eq!(block[flag], true, "{flag}");
    }
    assert!(bucket_properties["BucketEncryption"]["ServerSideEncryptionConfiguration"].is_array());

    // Alarms: what each watches and when it fires.
    let cloudwatch = aws_sdk_cloudwatch::Client::new(&config);
    let names: Vec<String> = stack.outputs["AlarmNames"].split(',').map(str::to_owned).collect();
    let alarms = cloudwatch.describe_alarms().set_alarm_names(Some(names.clone())).send().await.expect("alarms");
    let found: Vec<_> = alarms
        .metric_alarms()
        .iter()
        .map(|a| {
            (
                a.namespace().unwrap_or_default().to_owned(),
                a.metric_name().unwrap_or_default().to_owned(),
                a.threshold().unwrap_or(-1.0),
                a.comparison_operator().cloned(),
                a.treat_missing_data().unwrap_or_default().to_owned(),
                a.statistic().cloned(),
            )
        })
        .collect();
    let expect = |namespace: &str, metric: &str, threshold: f64, op: ComparisonOperator| {
        assert!(
            found.iter().any(|(n, m, t, o, missing, s)| n == namespace
                && m == metric
                && *t == threshold
                && o.as_ref() == Some(&op)
                && missing == "notBreaching"
                && s.is_some()),
            "no alarm on {namespace}/{metric} {op:?} {threshold}: {found:?}"
        );
    };
    expect("AWS/SQS", "ApproximateNumberOfMessagesVisible", 0.0, ComparisonOperator::GreaterThanThreshold);
    expect("AWS/SQS", "ApproximateAgeOfOldestMessage", 3600.0, ComparisonOperator::GreaterThanThreshold);
    expect("AssetSweeper", "SweepRefused", 0.0, ComparisonOperator::GreaterThanThreshold);
    expect("AssetSweeper", "SweepBraked", 0.0, ComparisonOperator::GreaterThanThreshold);
    expect("AssetSweeper", "AssetsLost", 0.0, ComparisonOperator::GreaterThanThreshold);
    expect("AssetSweeper", "RetentionRulesFailed", 0.0, ComparisonOperator::GreaterThanThreshold);
    expect("AssetSweeper", "RetentionRulesHeld", 0.0, ComparisonOperator::GreaterThanThreshold);
    assert_eq!(found.len(), names.len());
    assert!(
        alarms
            .metric_alarms()
            .iter()
            .all(|a| a.statistic() == Some(&Statistic::Maximum) || a.statistic() == Some(&Statistic::Sum))
    );

    // The function side, as CloudFormation expanded it.
    let resources = &stack.processed["Resources"];
    let mapping = &resources["ConsumerFunctionCleanupMessages"];
    assert_eq!(mapping["Type"], "AWS::Lambda::EventSourceMapping");
    assert_eq!(mapping["Properties"]["BatchSize"], 10);
    assert_eq!(mapping["Properties"]["FunctionResponseTypes"], json!(["ReportBatchItemFailures"]));
    assert_eq!(mapping["Properties"]["ScalingConfig"]["MaximumConcurrency"], 2);
    let sweep = &resources["SweepFunction"]["Properties"];
    assert_eq!(sweep["ReservedConcurrentExecutions"], 1);
    assert_eq!(sweep["Runtime"], "provided.al2023");
    assert_eq!(sweep["LoggingConfig"]["LogFormat"], "JSON");
    assert_eq!(resources["SweepFunctionEvery15Minutes"]["Type"], "AWS::Events::Rule");
    assert_eq!(resources["SweepFunctionEvery15Minutes"]["Properties"]["ScheduleExpression"], "rate(15 minutes)");
    // Least privilege: the sweep sends; it reads S3 only when reconciling from an inventory, and never writes.
    let sweep_policy = resources["SweepRole"]["Properties"]["Policies"].to_string();
    assert!(sweep_policy.contains("sqs:SendMessage"), "{sweep_policy}");
    for statement in resources["SweepRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
        .as_array()
        .expect("statements")
    {
        let text = statement.to_string();
        if !text.contains("s3:") {
            continue;
        }
        let conditional = &statement["Fn::If"];
        assert_eq!(conditional[0], "WithInventory", "an S3 statement outside the inventory's condition: {text}");
        let actions = match &conditional[1]["Action"] {
            Value::Array(list) => list.iter().filter_map(Value::as_str).collect(),
            one => vec![one.as_str().unwrap_or_default()],
        };
        for action in actions {
            assert!(["s3:GetObject", "s3:ListBucket", "s3:ListBucketVersions"].contains(&action), "{text}");
        }
    }
    assert!(sweep_policy.contains("sqs:GetQueueAttributes"), "the sweep reads the queue's depth: {sweep_policy}");
    // The heartbeat watches completed passes, not invocations: a sweep skipped or refused forever pages someone.
    let heartbeat = &resources["SweepHeartbeatAlarm"]["Properties"];
    assert_eq!((&heartbeat["Namespace"], &heartbeat["MetricName"]), (&json!("AssetSweeper"), &json!("SweepCompleted")));
    assert_eq!(heartbeat["Dimensions"], json!([{"Name": "Function", "Value": "sweep"}]));
    assert_eq!(
        (&heartbeat["TreatMissingData"], &heartbeat["ComparisonOperator"]),
        (&json!("breaching"), &json!("LessThanThreshold"))
    );
    let consumer_policy = resources["ConsumerRole"]["Properties"]["Policies"].to_string();
    assert!(!consumer_policy.contains("sqs:SendMessage") && !consumer_policy.contains("\"*\""), "{consumer_policy}");
}

/// No function can destroy a version: only the bucket's noncurrent-version expiry removes bytes for good.
#[tokio::test]
async fn no_function_role_may_destroy_an_object_version() {
    let stack = deployed().await;
    let resources = stack.processed["Resources"].as_object().expect("resources");
    let roles: Vec<(&String, String)> = resources
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::IAM::Role")
        .map(|(name, r)| (name, r["Properties"]["Policies"].to_string()))
        .collect();
    let names: Vec<&str> = roles.iter().map(|(name, _)| name.as_str()).collect();
    assert!(names.contains(&"SweepRole") && names.contains(&"ConsumerRole"), "{names:?}");
    for (name, policies) in &roles {
        for power in
            ["s3:DeleteObjectVersion", "s3:*", "\"*\"", "s3:PutLifecycleConfiguration", "s3:PutBucketVersioning"]
        {
            assert!(!policies.contains(power), "{name} holds {power}: {policies}");
        }
    }
    // The sweep writes nothing to any bucket: it reads inventory reports and confirms lost bytes.
    let sweep = &roles.iter().find(|(name, _)| *name == "SweepRole").expect("sweep role").1;
    for power in ["s3:PutObject", "s3:DeleteObject"] {
        assert!(!sweep.contains(power), "SweepRole holds {power}: {sweep}");
    }
    let consumer = &roles.iter().find(|(name, _)| *name == "ConsumerRole").expect("consumer role").1;
    // Hidden bytes come back by copying their kept version.
    assert!(consumer.contains("s3:GetObjectVersion") && consumer.contains("s3:PutObject"), "{consumer}");
}

/// The dashboard: LocalStack's CloudFormation has no provider for `AWS::CloudWatch::Dashboard` (it accepts the
/// resource and creates nothing), so its widgets are read from the template as CloudFormation processed it, with
/// the stack's own values substituted, as AWS would.
#[tokio::test]
async fn the_dashboard_shows_passes_claims_queues_settlements_and_bytes() {
    let stack = deployed().await;
    let dashboard = &stack.processed["Resources"]["Dashboard"];
    assert_eq!(dashboard["Type"], "AWS::CloudWatch::Dashboard");
    let name = stack.outputs.get("DashboardName").expect("the dashboard's name is an output");
    assert!(name.ends_with("-asset-sweeper"), "{name}");
    let body = dashboard["Properties"]["DashboardBody"]["Fn::Sub"].as_str().expect("a substituted body");
    let body = body
        .replace("${AWS::Region}", "us-east-1")
        .replace("${CleanupQueue.QueueName}", "the-cleanup-queue")
        .replace("${DeadLetterQueue.QueueName}", "the-dead-letter-queue");
    assert!(!body.contains("${"), "every placeholder is one the test knows: {body}");
    let body: Value = serde_json::from_str(&body).expect("the dashboard body is JSON");
    let widgets = body["widgets"].as_array().expect("widgets");
    let metrics = |title: &str| -> Vec<(String, String, String)> {
        let widget = widgets.iter().find(|w| w["properties"]["title"] == title).unwrap_or_else(|| panic!("{title}"));
        let list = widget["properties"]["metrics"].as_array().expect("metrics");
        list.iter()
            .map(|m| {
                let text = |i: usize| m[i].as_str().expect("a metric's namespace, name and dimension").to_owned();
                (text(0), text(1), text(3))
            })
            .collect()
    };
    let ours = |function: &str, names: &[&str]| -> Vec<(String, String, String)> {
        names.iter().map(|n| ("AssetSweeper".to_owned(), (*n).to_owned(), function.to_owned())).collect()
    };
    let passes = ["SweepCompleted", "SweepPartial", "SweepBraked", "SweepRefused", "SweepSkipped", "SweepFailed"];
    assert_eq!(metrics("Sweep passes by outcome"), ours("sweep", &passes));
    assert_eq!(metrics("Claimed and enqueued"), ours("sweep", &["Claimed", "Enqueued", "Released", "HeldBack"]));
    let settled = ["Kept", "Retired", "Deleted", "Purged", "Deferred", "Unchanged", "Postponed", "FailedItems"];
    assert_eq!(metrics("Settlements by action"), ours("consumer", &settled));
    assert_eq!(metrics("Bytes freed"), ours("consumer", &["BytesFreed"]));
    let lost = ["AssetsLost", "BytesRestored", "AssetsMarkedFailed"];
    assert_eq!(metrics("Lost and restored bytes"), ours("consumer", &lost));
    let census = ["CensusPercentDone", "CensusColumnsUnproven", "CensusFindings"];
    assert_eq!(metrics("Census: read, unproven columns (deletes wait), findings"), ours("sweep", &census));
    let discovery = ["DiscoveryScanned", "DiscoveryFound"];
    assert_eq!(metrics("Discovery: assets looked at, found unreferenced"), ours("sweep", &discovery));
    let reconciliation = ["ReconcileKeysRead", "UnknownKeys", "AssetsLost"];
    assert_eq!(metrics("Reconciliation: keys read, keys no row knows, assets lost"), ours("sweep", &reconciliation));
    let queue = |name: &str, queue: &str| ("AWS/SQS".to_owned(), name.to_owned(), queue.to_owned());
    assert_eq!(
        metrics("Cleanup queue: depth and oldest message"),
        [
            queue("ApproximateNumberOfMessagesVisible", "the-cleanup-queue"),
            queue("ApproximateNumberOfMessagesNotVisible", "the-cleanup-queue"),
            queue("ApproximateAgeOfOldestMessage", "the-cleanup-queue"),
        ]
    );
    assert_eq!(metrics("Dead-letter queue"), [queue("ApproximateNumberOfMessagesVisible", "the-dead-letter-queue")]);
    // Every sweep metric on it is one the sweep publishes.
    let line = sweep_lambda::record::metrics_line(&sweep_lambda::record::SweepReport::new(uuid::Uuid::nil()));
    let line: Value = serde_json::from_str(&line).expect("the sweep's metrics line");
    let published: Vec<&str> = line["_aws"]["CloudWatchMetrics"][0]["Metrics"]
        .as_array()
        .expect("declared metrics")
        .iter()
        .filter_map(|m| m["Name"].as_str())
        .collect();
    for name in passes.iter().chain(&["Claimed", "Enqueued", "Released", "HeldBack"]) {
        assert!(published.contains(name), "{name} is not published by the sweep: {published:?}");
    }
}

/// The template's number for `parameter`, as its default.
fn default(template: &Value, parameter: &str) -> u64 {
    let value = &template["Parameters"][parameter]["Default"];
    value
        .as_u64()
        .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("{parameter}: {value}"))
}

#[tokio::test]
async fn the_template_and_the_code_agree_on_counts_and_timeouts() {
    let stack = deployed().await;
    let t = &stack.processed;
    let settings = settings::Settings::from_lookup(|name| {
        match name {
            "DATABASE_URL" => Some("postgres://localhost/x"),
            "CLEANUP_QUEUE_URL" => Some("http://localhost/q"),
            "ASSET_BUCKET" => Some("bucket"),
            _ => None,
        }
        .map(str::to_owned)
    })
    .expect("default settings");

    // maxReceiveCount: one parameter feeds both the redrive policy and the functions' MAX_RECEIVE_COUNT, and its
    // default is the code's.
    assert_eq!(default(t, "MaxReceiveCount"), u64::from(settings.queue.max_receive_count));
    assert_eq!(
        t["Resources"]["CleanupQueue"]["Properties"]["RedrivePolicy"]["maxReceiveCount"],
        json!({"Ref": "MaxReceiveCount"})
    );
    let env = &t["Globals"]["Function"]["Environment"]["Variables"];
    let env =
        if env.is_null() { &t["Resources"]["ConsumerFunction"]["Properties"]["Environment"]["Variables"] } else { env };
    assert_eq!(env["MAX_RECEIVE_COUNT"], json!({"Ref": "MaxReceiveCount"}));

    // Visibility timeout: the queue's is the settings' default, and at least six times the consumer's timeout.
    assert_eq!(default(t, "QueueVisibilityTimeout"), settings.queue.visibility_timeout.as_secs());
    assert_eq!(
        t["Resources"]["CleanupQueue"]["Properties"]["VisibilityTimeout"],
        json!({"Ref": "QueueVisibilityTimeout"})
    );
    let consumer_timeout = default(t, "ConsumerTimeout");
    assert!(default(t, "QueueVisibilityTimeout") >= 6 * consumer_timeout);

    // The consumer's timeout covers its slowest settle: a statement limit plus the S3 call.
    let slowest = platform::db::STATEMENT_TIMEOUT + settings.s3_delete_timeout;
    assert!(consumer_timeout >= slowest.as_secs(), "ConsumerTimeout {consumer_timeout}s < {slowest:?}");
    // The sweep stops starting batches well before its deadline.
    assert!(default(t, "SweepTimeout") > 2 * settings.sweep.time_reserve.as_secs());

    // The census's parameters reach the sweep, with the code's defaults.
    assert_eq!(default(t, "CensusTimeSharePercent"), u64::from(settings.census.time_share_percent));
    assert_eq!(default(t, "CensusBatchBlocks"), u64::from(settings.census.batch_blocks));
    let sweep_env = &t["Resources"]["SweepFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(sweep_env["CENSUS_TIME_SHARE_PERCENT"], json!({"Ref": "CensusTimeSharePercent"}));
    assert_eq!(sweep_env["CENSUS_BATCH_BLOCKS"], json!({"Ref": "CensusBatchBlocks"}));
    // The records step's.
    assert_eq!(t["Parameters"]["RecordsTimeZone"]["Default"], json!(settings.records.time_zone));
    assert_eq!(default(t, "RecordsTimeSharePercent"), u64::from(settings.records.time_share_percent));
    assert_eq!(default(t, "RecordsBrakeSharePercent"), u64::from(settings.records.brake_share_percent));
    for (variable, parameter) in [
        ("RECORDS_TIME_ZONE", "RecordsTimeZone"),
        ("RECORDS_TIME_SHARE_PERCENT", "RecordsTimeSharePercent"),
        ("RECORDS_BRAKE_SHARE_PERCENT", "RecordsBrakeSharePercent"),
    ] {
        assert_eq!(sweep_env[variable], json!({"Ref": parameter}), "{variable}");
    }
    // And discovery's.
    assert_eq!(t["Parameters"]["DiscoveryEnabled"]["Default"], json!(settings.discovery.enabled.to_string()));
    assert_eq!(default(t, "DiscoveryTimeSharePercent"), u64::from(settings.discovery.time_share_percent));
    assert_eq!(default(t, "DiscoveryBatchSize"), u64::from(settings.discovery.batch_size));
    assert_eq!(default(t, "DiscoveryMaxPerPass"), u64::from(settings.discovery.max_per_pass));
    for (variable, parameter) in [
        ("DISCOVERY_ENABLED", "DiscoveryEnabled"),
        ("DISCOVERY_TIME_SHARE_PERCENT", "DiscoveryTimeSharePercent"),
        ("DISCOVERY_BATCH_SIZE", "DiscoveryBatchSize"),
        ("DISCOVERY_MAX_PER_PASS", "DiscoveryMaxPerPass"),
    ] {
        assert_eq!(sweep_env[variable], json!({"Ref": parameter}), "{variable}");
    }
    // And reconciliation's: off unless both layout settings are given, and reading only the inventory location.
    assert_eq!(default(t, "ReconcileTimeSharePercent"), u64::from(settings.reconcile.time_share_percent));
    assert!(settings.reconcile.layout.is_none() && settings.reconcile.inventory.is_none());
    for parameter in
        ["ReconcilePrefixes", "ReconcileKeyPattern", "ReconcileInventoryBucket", "ReconcileInventoryPrefix"]
    {
        assert_eq!(t["Parameters"][parameter]["Default"], json!(""), "{parameter}");
    }
    for (variable, parameter) in [
        ("RECONCILE_PREFIXES", "ReconcilePrefixes"),
        ("RECONCILE_KEY_PATTERN", "ReconcileKeyPattern"),
        ("RECONCILE_TIME_SHARE_PERCENT", "ReconcileTimeSharePercent"),
    ] {
        assert_eq!(sweep_env[variable], json!({"Ref": parameter}), "{variable}");
    }
    let inventory = sweep_env["RECONCILE_INVENTORY"].to_string();
    assert!(inventory.contains("s3://${ReconcileInventoryBucket}/${ReconcileInventoryPrefix}"), "{inventory}");

    // Batch size and concurrency: the mapping's are the consumer's.
    let mapping = &t["Resources"]["ConsumerFunctionCleanupMessages"]["Properties"];
    assert_eq!(mapping["BatchSize"], consumer_lambda::BATCH_SIZE);
    assert_eq!(mapping["ScalingConfig"]["MaximumConcurrency"], consumer_lambda::MAX_CONCURRENT_INVOCATIONS);
}
