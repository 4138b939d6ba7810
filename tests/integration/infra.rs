//! `infra/template.yaml` deployed into LocalStack through CloudFormation, and checked against the code.
//!
//! LocalStack cannot run Lambda functions on a machine without a Docker engine, so the stack is deployed with
//! `DeployFunctions=false`: every resource but the functions and what hangs off them is created and inspected
//! as created; the functions, their event source mapping, schedule and roles are inspected in the template as
//! CloudFormation processed it (the SAM transform expanded), which is what AWS would create from. LocalStack
//! evaluates neither the template's rules nor its parameters' patterns, and creates no IAM role here: those are
//! checked on the processed template resolved for given parameters as CloudFormation would resolve it
//! ([`Resolver`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_cloudformation::client::Waiters;
use aws_sdk_cloudformation::types::{Capability, Parameter, StackStatus, TemplateStage};
use aws_sdk_cloudwatch::types::{ComparisonOperator, Statistic};
use aws_sdk_s3::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_s3::error::BoxError;
use aws_sdk_s3::types::BucketVersioningStatus;
use aws_sdk_sqs::types::QueueAttributeName;
use integration_tests::short_id;
use serde_json::{Value, json};

/// A deployed stack: its outputs and its processed template. It stays for the rest of the run (LocalStack's
/// state ends with it).
pub(crate) struct Deployed {
    name: String,
    pub(crate) outputs: std::collections::HashMap<String, String>,
    processed: Value,
}

/// The two database secrets the stacks are deployed with: one per function.
const SWEEP_SECRET: &str = "arn:aws:secretsmanager:us-east-1:000000000000:secret:asset-sweeper/sweep-AbCdEf";
const CONSUMER_SECRET: &str = "arn:aws:secretsmanager:us-east-1:000000000000:secret:asset-sweeper/consumer-GhIjKl";

/// What `sam package` does to the template before CloudFormation sees it: the local code path becomes an S3
/// location (never fetched here: the functions are not created).
fn packaged_template() -> String {
    let template = include_str!("../../infra/template.yaml");
    assert_eq!(template.matches("CodeUri: ../").count(), 2, "both functions build from the workspace root");
    template.replace("CodeUri: ../", "CodeUri: s3://asset-sweeper-code/functions.zip")
}

/// The stack both tests read, deployed once per test run.
static STACK: tokio::sync::OnceCell<Deployed> = tokio::sync::OnceCell::const_new();

pub(crate) async fn deployed() -> &'static Deployed {
    STACK.get_or_init(deploy).await
}

async fn deploy() -> Deployed {
    deploy_with(&[]).await
}

/// A stack without the functions, with `parameters` besides the secrets.
async fn deploy_with(parameters: &[(&str, &str)]) -> Deployed {
    let config = platform::aws::sdk_config().await;
    let cfn = aws_sdk_cloudformation::Client::new(&config);
    let name = format!("asset-sweeper-{}", short_id());
    let parameter = |k: &str, v: &str| Parameter::builder().parameter_key(k).parameter_value(v).build();
    let given = [
        ("DeployFunctions", "false"),
        ("SweepDatabaseSecretArn", SWEEP_SECRET),
        ("ConsumerDatabaseSecretArn", CONSUMER_SECRET),
    ];
    // From S3, as `sam deploy` sends a template past CloudFormation's 51 200 bytes inline.
    let s3 = platform::aws::s3_client(&config, true);
    let bucket = format!("{name}-template");
    s3.create_bucket().bucket(&bucket).send().await.expect("the template's bucket");
    s3.put_object()
        .bucket(&bucket)
        .key("template.yaml")
        .body(packaged_template().into_bytes().into())
        .send()
        .await
        .expect("the template uploaded");
    cfn.create_stack()
        .stack_name(&name)
        .template_url(format!("https://{bucket}.s3.amazonaws.com/template.yaml"))
        .capabilities(Capability::CapabilityIam)
        .capabilities(Capability::CapabilityAutoExpand)
        .set_parameters(Some(given.iter().chain(parameters).map(|(k, v)| parameter(k, v)).collect()))
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
    Deployed { name, outputs, processed }
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
    expect("AssetSweeper", "DeletesHeldSeconds", 259_200.0, ComparisonOperator::GreaterThanThreshold);
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
    // Least privilege: the sweep sends; it reads the bucket's versioning and lifecycle, it reads objects only when
    // reconciling from an inventory or reading access logs (and the logs' bucket policy), and it never writes.
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
        let (statement, allowed): (&Value, &[&str]) = match statement.get("Fn::If") {
            // The comparison on Athena writes its export and Athena's output to its own work bucket (the Athena test).
            Some(conditional) if conditional[0] == "WithAthena" => (
                &conditional[1],
                &[
                    "s3:GetObject",
                    "s3:PutObject",
                    "s3:AbortMultipartUpload",
                    "s3:ListMultipartUploadParts",
                    "s3:ListBucket",
                    "s3:GetBucketLocation",
                ],
            ),
            Some(conditional) => {
                let reading = ["WithInventory", "WithAccessLogs", "WithCloudFrontLogs"];
                assert!(
                    reading.iter().any(|c| conditional[0] == *c),
                    "an S3 statement under another condition: {text}"
                );
                (&conditional[1], &["s3:GetObject", "s3:ListBucket", "s3:ListBucketVersions", "s3:GetBucketPolicy"])
            }
            None => (statement, &["s3:GetBucketVersioning", "s3:GetLifecycleConfiguration"]),
        };
        for action in strings(&statement["Action"]) {
            assert!(allowed.contains(&action.as_str()), "{action} in {text}");
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
        for power in [
            "s3:DeleteObjectVersion",
            "s3:*",
            "\"Action\":\"*\"",
            "s3:PutLifecycleConfiguration",
            "s3:PutBucketVersioning",
        ] {
            assert!(!policies.contains(power), "{name} holds {power}: {policies}");
        }
    }
    // A statement on every resource only for actions that take none, and read: S3's storage metrics.
    for (role, _) in &roles {
        let statements = resources[role.as_str()]["Properties"]["Policies"]
            .as_array()
            .expect("policies")
            .iter()
            .flat_map(|p| p["PolicyDocument"]["Statement"].as_array().cloned().unwrap_or_default())
            .flat_map(|s| match s.get("Fn::If") {
                Some(branches) => vec![branches[1].clone(), branches[2].clone()],
                None => vec![s],
            });
        for statement in statements.filter(|s| s["Resource"] == "*") {
            let actions = strings(&statement["Action"]);
            assert!(
                actions.iter().all(|a| ["cloudwatch:ListMetrics", "cloudwatch:GetMetricData"].contains(&a.as_str())),
                "{role} may {actions:?} on every resource"
            );
        }
    }
    // The sweep writes nothing to any bucket: it reads inventory reports and confirms lost bytes. Only with the
    // comparison on Athena does it write, and there only to its own work bucket (the Athena test below).
    let sweep = json!(Resolver::new(&stack.processed, &[]).statements("SweepRole")).to_string();
    for power in ["s3:PutObject", "s3:DeleteObject", "athena:", "glue:"] {
        assert!(!sweep.contains(power), "SweepRole holds {power}: {sweep}");
    }
    let consumer = &roles.iter().find(|(name, _)| *name == "ConsumerRole").expect("consumer role").1;
    // Hidden bytes come back by copying their kept version.
    assert!(consumer.contains("s3:GetObjectVersion") && consumer.contains("s3:PutObject"), "{consumer}");
}

/// The comparison on Athena: off by default; asked for, the template creates the work bucket, the workgroup and both
/// tables, hands the sweep their names, and lets it query in its workgroup alone and write only its work folders.
#[tokio::test]
async fn athena_is_off_unless_asked_for_and_then_the_sweep_may_query_its_workgroup_and_write_its_work_bucket_only() {
    let stack = deployed().await;
    let t = &stack.processed;
    let off = Resolver::new(t, &[]);
    assert_eq!(off.environment("SweepFunction")["RECONCILE_ENGINE"], json!("database"));
    for resource in ["ReconcileWorkBucket", "ReconcileWorkGroup", "ReconcileDatabase", "ReconcileKnownTable"] {
        assert!(!off.exists(resource), "{resource} exists by default");
    }
    let without_inventory = Resolver::new(t, &[("ReconcileEngine", "athena")]).refusals();
    assert!(without_inventory.iter().any(|r| r.starts_with("AthenaReadsTheInventory")), "{without_inventory:?}");

    let given = [
        ("ReconcileEngine", "auto"),
        ("ReconcileInventoryBucket", "acme-inventory"),
        ("ReconcileInventoryPrefix", "reports/acme-assets/daily/"),
        ("ReconcilePrefixes", "uploads/"),
        ("ReconcileKeyPattern", "uploads/(?P<workspace>[0-9a-f-]{36})/.+"),
    ];
    let on = Resolver::new(t, &given);
    assert_eq!(on.refusals(), Vec::<String>::new());
    let env = on.environment("SweepFunction");
    assert_eq!(env["RECONCILE_ENGINE"], json!("auto"));
    assert_eq!(env["ATHENA_WORKGROUP"], json!("<ReconcileWorkGroup>"));
    assert_eq!(env["RECONCILE_EXPORT"], json!("s3://<ReconcileWorkBucket>/known/"));
    // The environment the template gives is one the settings take, with the code's threshold as its default.
    let settings = settings::Settings::from_lookup(|name| match name {
        "DATABASE_URL" => Some("postgres://localhost/x".to_owned()),
        "CLEANUP_QUEUE_URL" => Some("http://localhost/q".to_owned()),
        "ASSET_BUCKET" => Some("bucket".to_owned()),
        _ => env[name]
            .as_str()
            .filter(|v| !v.is_empty())
            .map(|v| v.replace("<ReconcileWorkBucket>", "work-bucket").replace("<ReconcileWorkGroup>", "work-group")),
    })
    .expect("the template's settings");
    let athena = settings.reconcile.athena.expect("Athena");
    assert_eq!(athena.above_bytes, Some(default(t, "ReconcileAthenaAboveBytes")));
    assert_eq!((athena.inventory_table.as_str(), athena.known_table.as_str()), ("inventory", "known"));
    // The known table reads each listing's folder, where the export writes it.
    let known = &t["Resources"]["ReconcileKnownTable"]["Properties"]["TableInput"];
    let template = on.resolve(&known["Parameters"]["storage.location.template"]).expect("a location");
    assert_eq!(template, json!("s3://<ReconcileWorkBucket>/known/listing=${listing}/"));
    let columns: Vec<String> =
        known["StorageDescriptor"]["Columns"].as_array().expect("columns").iter().map(|c| scalar(&c["Name"])).collect();
    let exported: Vec<String> = reconcile::engine::export::schema().fields().iter().map(|f| f.name().clone()).collect();
    assert_eq!(columns, exported, "the table's columns are the export's");

    let statements = on.statements("SweepRole");
    for statement in &statements {
        let actions = strings(&statement["Action"]);
        let resources = strings(&statement["Resource"]);
        if actions.iter().any(|a| a.starts_with("athena:")) {
            assert_eq!(
                resources,
                ["arn:aws:athena:us-east-1:000000000000:workgroup/<ReconcileWorkGroup>"],
                "{statement}"
            );
        }
        if actions.iter().any(|a| a == "s3:PutObject") {
            assert_eq!(
                resources,
                ["arn:aws:s3:::<ReconcileWorkBucket>/known/*", "arn:aws:s3:::<ReconcileWorkBucket>/athena/*"],
                "{statement}"
            );
        }
    }
    assert!(statements.iter().any(|s| grants(s, "athena:StartQueryExecution")));
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
    let passes = [
        "SweepCompleted",
        "SweepPartial",
        "SweepBraked",
        "SweepRefused",
        "SweepSkipped",
        "SweepFailed",
        "SweepStalled",
    ];
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
    let money = ["FreedCentsPerMonth", "WaitingCentsPerMonth"];
    assert_eq!(
        metrics("Money: freed (stops being billed once versions expire) and still waiting, cents per month"),
        ours("sweep", &money)
    );
    let effect = ["OldestOverdueSeconds", "GrowingUnsettledPasses", "UnsettledClaims"];
    assert_eq!(
        metrics("Effect: oldest overdue asset (s), passes growing with nothing settled, unsettled claims"),
        ours("sweep", &effect)
    );
    let drift = ["BucketDriftPercent", "FreedNotShownBytes"];
    assert_eq!(
        metrics("Freed against billed: drift (% of the larger side), freed bytes S3 still reports"),
        ours("sweep", &drift)
    );
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
    // The census searches every value it reads in the sweep: the sweep gets at least one vCPU (Lambda's CPU grows
    // with memory, one vCPU at 1 769 MB), not the consumer's 256 MB share of one.
    let sweep = &t["Resources"]["SweepFunction"]["Properties"];
    assert_eq!(sweep["MemorySize"], json!({"Ref": "SweepMemorySize"}));
    assert!(default(t, "SweepMemorySize") >= 1769, "the sweep's memory buys its CPU");

    // The census's parameters reach the sweep, with the code's defaults.
    assert_eq!(default(t, "CensusTimeSharePercent"), u64::from(settings.census.time_share_percent));
    assert_eq!(default(t, "CensusBatchBlocks"), u64::from(settings.census.batch_blocks));
    assert_eq!(default(t, "CensusReaders"), u64::from(settings.census.readers));
    let sweep_env = &t["Resources"]["SweepFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(sweep_env["CENSUS_TIME_SHARE_PERCENT"], json!({"Ref": "CensusTimeSharePercent"}));
    assert_eq!(sweep_env["CENSUS_BATCH_BLOCKS"], json!({"Ref": "CensusBatchBlocks"}));
    assert_eq!(sweep_env["CENSUS_READERS"], json!({"Ref": "CensusReaders"}));
    // Its standby: none by default; a host and port, never a login or a password in a parameter.
    assert_eq!(sweep_env["CENSUS_DATABASE_URL"], json!({"Ref": "CensusStandby"}));
    assert_eq!(t["Parameters"]["CensusStandby"]["Default"], json!(""));
    assert!(settings.census_replica.is_none());
    for standby in ["", "postgres://replica.internal:5432", "postgresql://replica.internal/app?sslmode=verify-full"] {
        let refused = Resolver::new(t, &[("CensusStandby", standby)]).refusals();
        assert_eq!(refused, Vec::<String>::new(), "{standby}");
    }
    for standby in ["postgres://sweeper:hunter2@replica.internal:5432", "replica.internal", "mysql://replica"] {
        let refused = Resolver::new(t, &[("CensusStandby", standby)]).refusals();
        assert!(!refused.is_empty(), "{standby} is accepted");
    }
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

/// The processed template as CloudFormation resolves it for one set of parameters (the others at their
/// defaults): its rules and parameter patterns, conditions, `Ref`, `Fn::If`, `Fn::Sub`, `Fn::Join` and
/// `Fn::GetAtt`. What exists only once deployed — a created resource's name or attribute — stands as `<Logical>`
/// or `<Logical.Attribute>`; a reference to a resource its condition leaves out fails the test, as it fails a
/// deploy.
struct Resolver<'t> {
    template: &'t Value,
    parameters: BTreeMap<String, String>,
    given: Vec<String>,
}

impl<'t> Resolver<'t> {
    /// `given` besides the secrets the test stacks are deployed with (which it may override).
    fn new(template: &'t Value, given: &[(&str, &str)]) -> Self {
        let declared = template["Parameters"].as_object().expect("parameters");
        let mut parameters: BTreeMap<String, String> =
            declared.iter().filter_map(|(name, p)| Some((name.clone(), p.get("Default").map(scalar)?))).collect();
        let secrets = [("SweepDatabaseSecretArn", SWEEP_SECRET), ("ConsumerDatabaseSecretArn", CONSUMER_SECRET)];
        let mut names = Vec::new();
        for (name, value) in secrets.iter().chain(given) {
            assert!(declared.contains_key(*name), "the template has no parameter {name}");
            parameters.insert((*name).to_owned(), (*value).to_owned());
            if !names.iter().any(|n| n == name) {
                names.push((*name).to_owned());
            }
        }
        Resolver { template, parameters, given: names }
    }

    /// Why CloudFormation refuses these parameters before creating anything: each given value its parameter's
    /// `AllowedPattern` refuses, and each failed assertion of a rule that applies (with its description).
    fn refusals(&self) -> Vec<String> {
        let mut refused = Vec::new();
        for name in &self.given {
            let pattern = &self.template["Parameters"][name]["AllowedPattern"];
            if let Some(pattern) = pattern.as_str()
                && !allowed(pattern, &self.parameters[name])
            {
                refused.push(format!("{name} does not match {pattern}"));
            }
        }
        for (name, rule) in self.template["Rules"].as_object().into_iter().flatten() {
            if rule.get("RuleCondition").is_some_and(|c| !self.truth(c)) {
                continue;
            }
            for assertion in rule["Assertions"].as_array().expect("a rule's assertions") {
                if !self.truth(&assertion["Assert"]) {
                    refused.push(format!("{name}: {}", assertion["AssertDescription"].as_str().unwrap_or_default()));
                }
            }
        }
        refused
    }

    fn condition(&self, name: &str) -> bool {
        let condition = &self.template["Conditions"][name];
        assert!(!condition.is_null(), "no condition {name}");
        self.truth(condition)
    }

    /// A condition function, or a rule's.
    fn truth(&self, function: &Value) -> bool {
        if let Some(name) = function.get("Condition").and_then(Value::as_str) {
            return self.condition(name);
        }
        let (name, args) = intrinsic(function).unwrap_or_else(|| panic!("not a condition: {function}"));
        let all = || args.as_array().expect("a list of conditions").iter().map(|c| self.truth(c)).collect::<Vec<_>>();
        match name {
            "Fn::Equals" => self.resolve(&args[0]) == self.resolve(&args[1]),
            "Fn::Not" => !self.truth(&args[0]),
            "Fn::And" => all().into_iter().all(|t| t),
            "Fn::Or" => all().into_iter().any(|t| t),
            other => panic!("{other} in a condition"),
        }
    }

    /// Whether the stack creates `logical`.
    fn exists(&self, logical: &str) -> bool {
        let resource = &self.template["Resources"][logical];
        assert!(resource.is_object(), "no resource {logical}");
        resource["Condition"].as_str().is_none_or(|c| self.condition(c))
    }

    /// A created resource's `Ref` or attribute, as a placeholder.
    fn created(&self, logical: &str, attribute: Option<&str>) -> String {
        assert!(self.exists(logical), "{logical} is referred to but not created with {:?}", self.parameters);
        match attribute {
            Some(attribute) => format!("<{logical}.{attribute}>"),
            None => format!("<{logical}>"),
        }
    }

    /// A pseudo parameter's or a parameter's value, as `Ref` gives it; `None` for anything else.
    fn named(&self, name: &str) -> Option<Value> {
        let pseudo = match name {
            "AWS::Partition" => "aws",
            "AWS::Region" => "us-east-1",
            "AWS::AccountId" => "000000000000",
            "AWS::StackName" => "stack",
            _ => {
                let declared = self.template["Parameters"].get(name)?;
                let value = self.parameters.get(name).unwrap_or_else(|| panic!("{name} has no value"));
                return Some(if declared["Type"] == "CommaDelimitedList" {
                    json!(value.split(',').collect::<Vec<_>>())
                } else {
                    json!(value)
                });
            }
        };
        Some(json!(pseudo))
    }

    /// `value` resolved; `None` is `AWS::NoValue`, left out of the list or map holding it.
    fn resolve(&self, value: &Value) -> Option<Value> {
        if let Some((name, args)) = intrinsic(value) {
            return match name {
                "Ref" => match args.as_str().expect("Ref names something") {
                    "AWS::NoValue" => None,
                    name => Some(self.named(name).unwrap_or_else(|| json!(self.created(name, None)))),
                },
                "Fn::If" => {
                    let condition = args[0].as_str().expect("Fn::If names a condition");
                    self.resolve(&args[if self.condition(condition) { 1 } else { 2 }])
                }
                "Fn::GetAtt" => {
                    let (logical, attribute) = match args {
                        Value::String(dotted) => dotted.split_once('.').expect("Logical.Attribute"),
                        list => (list[0].as_str().expect("a resource"), list[1].as_str().expect("an attribute")),
                    };
                    Some(json!(self.created(logical, Some(attribute))))
                }
                "Fn::Sub" => Some(json!(self.substitute(args))),
                "Fn::Join" => {
                    let separator = args[0].as_str().expect("Fn::Join's separator");
                    let parts = self.resolve(&args[1]).expect("Fn::Join's list");
                    Some(json!(strings(&parts).join(separator)))
                }
                other => panic!("{other} is not resolved by this test: {value}"),
            };
        }
        match value {
            Value::Array(items) => Some(Value::Array(items.iter().filter_map(|v| self.resolve(v)).collect())),
            Value::Object(map) => {
                Some(Value::Object(map.iter().filter_map(|(k, v)| Some((k.clone(), self.resolve(v)?))).collect()))
            }
            other => Some(other.clone()),
        }
    }

    fn substitute(&self, args: &Value) -> String {
        let (text, variables) = match args {
            Value::String(text) => (text.as_str(), None),
            list => (list[0].as_str().expect("Fn::Sub's text"), Some(&list[1])),
        };
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let end = rest[start..].find('}').expect("a closed ${…}") + start;
            let name = &rest[start + 2..end];
            let value = if let Some(literal) = name.strip_prefix('!') {
                format!("${{{literal}}}")
            } else if let Some(variable) = variables.and_then(|v| v.get(name)) {
                scalar(&self.resolve(variable).expect("a value for a variable"))
            } else if let Some(value) = self.named(name) {
                scalar(&value)
            } else {
                match name.split_once('.') {
                    Some((logical, attribute)) => self.created(logical, Some(attribute)),
                    None => self.created(name, None),
                }
            };
            out.push_str(&value);
            rest = &rest[end + 1..];
        }
        out.push_str(rest);
        out
    }

    /// Every statement of `role`'s inline policies, resolved.
    fn statements(&self, role: &str) -> Vec<Value> {
        assert!(self.exists(role), "{role} is not created");
        let policies = self.resolve(&self.template["Resources"][role]["Properties"]["Policies"]).expect("policies");
        policies
            .as_array()
            .expect("a list of policies")
            .iter()
            .flat_map(|p| p["PolicyDocument"]["Statement"].as_array().cloned().expect("statements"))
            .collect()
    }

    /// `function`'s environment, resolved (the SAM transform merged the globals into it).
    fn environment(&self, function: &str) -> Value {
        self.resolve(&self.template["Resources"][function]["Properties"]["Environment"]["Variables"])
            .expect("an environment")
    }
}

/// `{"Ref": …}` or `{"Fn::…": …}`: its name and argument.
fn intrinsic(value: &Value) -> Option<(&str, &Value)> {
    let map = value.as_object().filter(|m| m.len() == 1)?;
    let (name, args) = map.iter().next()?;
    (name == "Ref" || name.starts_with("Fn::")).then_some((name.as_str(), args))
}

/// A parameter's or a resolved value's text.
fn scalar(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// A policy field that is one string or a list of them.
fn strings(value: &Value) -> Vec<String> {
    match value {
        Value::Array(items) => items.iter().map(scalar).collect(),
        Value::Null => Vec::new(),
        one => vec![scalar(one)],
    }
}

/// Whether a CloudFormation `AllowedPattern` (matched against the whole value) lets `value` through. The test has no
/// regular expressions of its own: the key layout's, which match whole keys, do the matching.
fn allowed(pattern: &str, value: &str) -> bool {
    let layout = platform::keys::KeyLayout::new("*", pattern).expect("the pattern is a regular expression");
    matches!(layout.classify(value), platform::keys::KeyClass::Ours { .. })
}

/// IAM's `StringLike` matching: `*` is any run of characters, `?` one.
fn like(pattern: &str, value: &str) -> bool {
    let (pattern, value): (Vec<char>, Vec<char>) = (pattern.chars().collect(), value.chars().collect());
    // matched[j]: whether the pattern so far matches the first j characters of the value.
    let mut matched = vec![false; value.len() + 1];
    matched[0] = true;
    for p in &pattern {
        let mut next = vec![false; value.len() + 1];
        for j in 0..=value.len() {
            next[j] = match p {
                '*' => matched[j] || (j > 0 && next[j - 1]),
                '?' => j > 0 && matched[j - 1],
                c => j > 0 && matched[j - 1] && value[j - 1] == *c,
            };
        }
        matched = next;
    }
    matched[value.len()]
}

/// Whether `statement` allows `action` (IAM's wildcards; actions are case-insensitive). A `NotAction` or
/// `NotResource` would grant what it does not name: none is allowed.
fn grants(statement: &Value, action: &str) -> bool {
    for inverse in ["NotAction", "NotResource", "NotPrincipal"] {
        assert!(statement.get(inverse).is_none(), "{inverse} grants what it does not name: {statement}");
    }
    statement["Effect"] == "Allow"
        && strings(&statement["Action"]).iter().any(|a| like(&a.to_lowercase(), &action.to_lowercase()))
}

/// Every role's resolved statements, by role.
fn roles<'r>(resolver: &'r Resolver<'_>) -> Vec<(&'r str, Vec<Value>)> {
    let resources = resolver.template["Resources"].as_object().expect("resources");
    let roles: Vec<_> = resources
        .iter()
        .filter(|(name, r)| r["Type"] == "AWS::IAM::Role" && resolver.exists(name))
        .map(|(name, _)| (name.as_str(), resolver.statements(name)))
        .collect();
    let names: Vec<&str> = roles.iter().map(|(name, _)| *name).collect();
    assert!(names.contains(&"SweepRole") && names.contains(&"ConsumerRole"), "{names:?}");
    roles
}

/// Records the `x-amz-copy-source` header of each request a client sends: what S3, and IAM, see.
#[derive(Debug, Clone, Default)]
struct CopySources(Arc<Mutex<Vec<String>>>);

impl Intercept for CopySources {
    fn name(&self) -> &'static str {
        "CopySources"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(source) = context.request().headers().get("x-amz-copy-source") {
            self.0.lock().expect("copy sources").push(source.to_owned());
        }
        Ok(())
    }
}

/// The consumer writes an object only as a copy of a version in its own bucket: the one `s3:PutObject` any function
/// holds requires a copy source there, and the copy the code makes to bring hidden bytes back satisfies it.
#[tokio::test]
async fn the_consumer_writes_an_object_only_as_a_copy_from_its_own_bucket() {
    let stack = deployed().await;
    let resolver = Resolver::new(&stack.processed, &[]);
    let mut writes = Vec::new();
    for (role, statements) in roles(&resolver) {
        for statement in statements.iter().filter(|s| grants(s, "s3:PutObject")) {
            writes.push((role, statement.clone()));
        }
    }
    assert_eq!(writes.len(), 1, "one statement grants s3:PutObject: {writes:?}");
    let (role, write) = &writes[0];
    assert_eq!(*role, "ConsumerRole", "{write}");
    // Alone: the condition says nothing of another action.
    assert_eq!(strings(&write["Action"]), ["s3:PutObject"], "{write}");
    assert_eq!(strings(&write["Resource"]), ["arn:aws:s3:::<AssetBucket>/*"], "{write}");
    let condition = write["Condition"].as_object().expect("a condition");
    assert_eq!(condition.len(), 2, "{write}");
    assert_eq!(condition["Null"], json!({"s3:x-amz-copy-source": "false"}), "the request carries a copy source");
    let patterns = strings(&condition["StringLike"]["s3:x-amz-copy-source"]);
    assert_eq!(condition["StringLike"].as_object().map(|m| m.len()), Some(1), "{write}");
    assert!(!patterns.is_empty(), "{write}");
    for pattern in &patterns {
        assert!(["<AssetBucket>/*", "/<AssetBucket>/*"].contains(&pattern.as_str()), "{pattern}: not this bucket");
    }

    // The copy the consumer (and `restore`, `undelete`) makes, as sent: it must pass the condition, with the
    // bucket's real name, and a copy from anywhere else must not.
    let config = platform::aws::sdk_config().await;
    let s3 = platform::aws::s3_client(&config, true);
    let bucket = &stack.outputs["AssetBucketName"];
    let key = format!("restore/{}/a b+ü.png", short_id());
    s3.put_object().bucket(bucket).key(&key).body(b"bytes".to_vec().into()).send().await.expect("put");
    s3.delete_object().bucket(bucket).key(&key).send().await.expect("a delete marker");
    let sources = CopySources::default();
    let s3_config = aws_sdk_s3::config::Builder::from(&config).force_path_style(true).interceptor(sources.clone());
    let recorded = aws_sdk_s3::Client::from_conf(s3_config.build());
    let presence = platform::objects::ensure_present(&recorded, bucket, &key).await.expect("brought back");
    assert!(matches!(presence, platform::objects::Presence::Restored { .. }), "{presence:?}");
    let sent = sources.0.lock().expect("copy sources").clone();
    assert_eq!(sent.len(), 1, "one copy: {sent:?}");
    let passes = |source: &str| patterns.iter().any(|p| like(&p.replace("<AssetBucket>", bucket), source));
    assert!(passes(&sent[0]), "the consumer's copy source {} fails the condition {patterns:?}", sent[0]);
    assert!(sent[0].contains("?versionId="), "a kept version is copied: {}", sent[0]);
    for elsewhere in [format!("{bucket}-other/{key}"), format!("other/{bucket}/{key}"), format!("x{bucket}/{key}")] {
        assert!(!passes(&elsewhere), "a copy from {elsewhere} passes {patterns:?}");
    }
}

/// An inventory location names a folder and only it is readable: a bucket without a prefix is refused before
/// anything is created (and grants nothing where rules are not evaluated), and the grants are exactly the prefix.
#[tokio::test]
async fn an_inventory_location_must_name_a_folder_and_only_it_is_readable() {
    let stack = deployed().await;
    let t = &stack.processed;
    let inventory = |bucket: &'static str, prefix: &'static str| {
        Resolver::new(t, &[("ReconcileInventoryBucket", bucket), ("ReconcileInventoryPrefix", prefix)])
    };
    let whole_bucket = inventory("acme-inventory", "");
    let refused = whole_bucket.refusals();
    assert!(refused.iter().any(|r| r.contains("ReconcileInventoryPrefix")), "{refused:?}");
    // LocalStack does not evaluate rules: even deployed there, an empty prefix grants nothing of the bucket.
    let named = |statements: &[Value], bucket: &str| -> Vec<Value> {
        let arn = format!("arn:aws:s3:::{bucket}");
        statements
            .iter()
            .filter(|s| strings(&s["Resource"]).iter().any(|r| *r == arn || r.starts_with(&format!("{arn}/"))))
            .cloned()
            .collect()
    };
    assert_eq!(named(&whole_bucket.statements("SweepRole"), "acme-inventory"), Vec::<Value>::new());
    assert_eq!(whole_bucket.environment("SweepFunction")["RECONCILE_INVENTORY"], "");

    // A folder: readable below it, listable only there, and nothing else of that bucket.
    let folder = inventory("acme-inventory", "reports/acme-assets/all/");
    assert_eq!(folder.refusals(), Vec::<String>::new());
    let mut grants_there = named(&folder.statements("SweepRole"), "acme-inventory");
    grants_there.sort_by_key(Value::to_string);
    assert_eq!(
        grants_there,
        [
            json!({"Effect": "Allow", "Action": "s3:GetObject",
                   "Resource": "arn:aws:s3:::acme-inventory/reports/acme-assets/all/*"}),
            json!({"Effect": "Allow", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::acme-inventory",
                   "Condition": {"StringLike": {"s3:prefix": "reports/acme-assets/all/*"}}}),
        ]
    );
    assert_eq!(
        folder.environment("SweepFunction")["RECONCILE_INVENTORY"],
        "s3://acme-inventory/reports/acme-assets/all/"
    );
    assert_eq!(named(&folder.statements("ConsumerRole"), "acme-inventory"), Vec::<Value>::new());
    assert_eq!(inventory("", "").refusals(), Vec::<String>::new(), "no inventory is the default");

    // What would widen the grant is refused: a prefix that is no folder (`reports` grants `reports-old/` too), a
    // wildcard, a policy variable, a bucket name with a wildcard.
    for (bucket, prefix) in [
        ("acme-inventory", "reports"),
        ("acme-inventory", "*/"),
        ("acme-inventory", "reports/*/"),
        ("acme-inventory", "/"),
        ("acme-inventory", "${aws:username}/"),
        ("acme-*", "reports/"),
        ("*", "reports/"),
    ] {
        assert!(!inventory(bucket, prefix).refusals().is_empty(), "s3://{bucket}/{prefix} is accepted");
    }
}

/// The access logs' locations, like the inventory's: the sweep's role may list and read below the prefix given and
/// nothing else of the bucket, a bucket without a prefix is refused, and the consumer's role reads none of it.
#[tokio::test]
async fn a_log_location_is_readable_below_its_prefix_alone() {
    let stack = deployed().await;
    let t = &stack.processed;
    let logs = Resolver::new(
        t,
        &[
            ("AccessLogsBucket", "acme-logs"),
            ("AccessLogsPrefix", "assets/"),
            ("CloudFrontLogsBucket", "acme-cdn-logs"),
            ("CloudFrontLogsPrefix", "cf/E2EXAMPLE"),
            ("CloudFrontOriginPath", "/production"),
        ],
    );
    assert_eq!(logs.refusals(), Vec::<String>::new());
    let named = |statements: &[Value], bucket: &str| -> Vec<Value> {
        let arn = format!("arn:aws:s3:::{bucket}");
        let mut named: Vec<Value> = statements
            .iter()
            .filter(|s| strings(&s["Resource"]).iter().any(|r| *r == arn || r.starts_with(&format!("{arn}/"))))
            .cloned()
            .collect();
        named.sort_by_key(Value::to_string);
        named
    };
    for (bucket, prefix) in [("acme-logs", "assets/"), ("acme-cdn-logs", "cf/E2EXAMPLE")] {
        assert_eq!(
            named(&logs.statements("SweepRole"), bucket),
            [
                // Its policy, to know that nobody but AWS's log delivery writes there.
                json!({"Effect": "Allow", "Action": "s3:GetBucketPolicy", "Resource": format!("arn:aws:s3:::{bucket}")}),
                json!({"Effect": "Allow", "Action": "s3:GetObject", "Resource": format!("arn:aws:s3:::{bucket}/{prefix}*")}),
                json!({"Effect": "Allow", "Action": "s3:ListBucket", "Resource": format!("arn:aws:s3:::{bucket}"),
                       "Condition": {"StringLike": {"s3:prefix": format!("{prefix}*")}}}),
            ]
        );
        assert_eq!(named(&logs.statements("ConsumerRole"), bucket), Vec::<Value>::new());
    }
    let environment = logs.environment("SweepFunction");
    assert_eq!(environment["ACCESS_LOGS"], "s3://acme-logs/assets/");
    assert_eq!(environment["CLOUDFRONT_LOGS"], "s3://acme-cdn-logs/cf/E2EXAMPLE");
    assert_eq!(environment["CLOUDFRONT_ORIGIN_PATH"], "/production");
    for (bucket, prefix) in [("AccessLogsBucket", "AccessLogsPrefix"), ("CloudFrontLogsBucket", "CloudFrontLogsPrefix")]
    {
        let whole = Resolver::new(t, &[(bucket, "acme-logs"), (prefix, "")]);
        assert!(whole.refusals().iter().any(|r| r.contains(prefix)), "{bucket} without {prefix} is accepted");
        assert_eq!(named(&whole.statements("SweepRole"), "acme-logs"), Vec::<Value>::new());
        for wide in ["*", "logs/*", "${aws:username}/"] {
            assert!(!Resolver::new(t, &[(bucket, "acme-logs"), (prefix, wide)]).refusals().is_empty(), "{wide:?}");
        }
    }
    assert_eq!(Resolver::new(t, &[]).environment("SweepFunction")["ACCESS_LOGS"], "", "no logs are the default");
}

/// Each function's role reads exactly its own database secret, and its environment names only that one.
#[tokio::test]
async fn each_function_reads_only_its_own_database_secret() {
    let stack = deployed().await;
    let t = &stack.processed;
    let mut secrets: Vec<&String> =
        t["Parameters"].as_object().expect("parameters").keys().filter(|k| k.contains("Secret")).collect();
    secrets.sort();
    assert_eq!(secrets, ["ConsumerDatabaseSecretArn", "SweepDatabaseSecretArn"], "no secret shared by both");
    let resolver =
        Resolver::new(t, &[("SweepDatabaseSecretArn", SWEEP_SECRET), ("ConsumerDatabaseSecretArn", CONSUMER_SECRET)]);
    assert_eq!(resolver.refusals(), Vec::<String>::new());
    for (role, function, own, other) in [
        ("SweepRole", "SweepFunction", SWEEP_SECRET, CONSUMER_SECRET),
        ("ConsumerRole", "ConsumerFunction", CONSUMER_SECRET, SWEEP_SECRET),
    ] {
        let readable: Vec<String> = resolver
            .statements(role)
            .iter()
            .filter(|s| grants(s, "secretsmanager:GetSecretValue"))
            .flat_map(|s| strings(&s["Resource"]))
            .collect();
        assert_eq!(readable, [own], "{role} reads exactly its own secret");
        let everything = resolver.statements(role).iter().map(Value::to_string).collect::<String>();
        assert!(!everything.contains(other) && !everything.contains("secretsmanager:*"), "{role}: {everything}");
        let environment = resolver.environment(function);
        assert_eq!(environment["DATABASE_SECRET_ARN"], own, "{function}");
        assert!(!environment.to_string().contains(other), "{function} names the other secret: {environment}");
    }
    // One secret for both is refused, and so is an ARN that would grant more than one secret.
    let shared =
        Resolver::new(t, &[("SweepDatabaseSecretArn", SWEEP_SECRET), ("ConsumerDatabaseSecretArn", SWEEP_SECRET)]);
    assert!(shared.refusals().iter().any(|r| r.starts_with("SeparateDatabaseSecrets")), "{:?}", shared.refusals());
    for wide in ["*", "arn:aws:secretsmanager:us-east-1:000000000000:secret:*", "asset-sweeper/sweep"] {
        let resolver =
            Resolver::new(t, &[("SweepDatabaseSecretArn", wide), ("ConsumerDatabaseSecretArn", CONSUMER_SECRET)]);
        assert!(!resolver.refusals().is_empty(), "{wide} is accepted as the sweep's secret");
    }
}

/// With `ExistingAssetBucket` the stack creates no bucket and every reference names the given one.
#[tokio::test]
async fn an_existing_bucket_is_adopted_and_named_everywhere() {
    let config = platform::aws::sdk_config().await;
    let s3 = platform::aws::s3_client(&config, true);
    let existing = format!("adopted-{}", short_id());
    s3.create_bucket().bucket(&existing).send().await.expect("the bucket to adopt");
    let stack = deploy_with(&[("ExistingAssetBucket", existing.as_str())]).await;
    assert_eq!(stack.outputs["AssetBucketName"], existing);
    let cfn = aws_sdk_cloudformation::Client::new(&config);
    let resources = cfn.describe_stack_resources().stack_name(&stack.name).send().await.expect("resources");
    let types: Vec<&str> = resources.stack_resources().iter().filter_map(|r| r.resource_type()).collect();
    assert!(!types.contains(&"AWS::S3::Bucket"), "{types:?}");
    assert!(types.contains(&"AWS::SQS::Queue"), "the rest of the stack is there: {types:?}");

    // As AWS would create it, with the functions and reconciliation on (so every statement is there).
    let resolver = Resolver::new(
        &stack.processed,
        &[
            ("ExistingAssetBucket", existing.as_str()),
            ("ReconcileInventoryBucket", "acme-inventory"),
            ("ReconcileInventoryPrefix", "reports/"),
        ],
    );
    assert_eq!(resolver.refusals(), Vec::<String>::new());
    assert!(!resolver.exists("AssetBucket"));
    let everything: Vec<(String, Value)> = stack.processed["Resources"]
        .as_object()
        .expect("resources")
        .iter()
        .filter(|(name, _)| resolver.exists(name))
        .map(|(name, r)| (name.clone(), resolver.resolve(r).expect("a resource")))
        .chain(std::iter::once(("Outputs".to_owned(), resolver.resolve(&stack.processed["Outputs"]).expect("outputs"))))
        .collect();
    for (name, resolved) in &everything {
        assert!(!resolved.to_string().contains("<AssetBucket"), "{name} names a created bucket: {resolved}");
    }
    let bucket_arn = format!("arn:aws:s3:::{existing}");
    let mut named = 0;
    for (role, statements) in roles(&resolver) {
        for statement in statements.iter().filter(|s| s.to_string().contains("\"s3:")) {
            for resource in strings(&statement["Resource"]) {
                let inventory = resource.starts_with("arn:aws:s3:::acme-inventory");
                assert!(
                    inventory || resource == bucket_arn || resource == format!("{bucket_arn}/*"),
                    "{role}: {resource}"
                );
                named += usize::from(!inventory);
            }
        }
    }
    assert!(named >= 6, "the object, copy, listing and bucket-check statements name {existing}: {named}");
    for function in ["SweepFunction", "ConsumerFunction"] {
        assert_eq!(resolver.environment(function)["ASSET_BUCKET"], existing.as_str(), "{function}");
    }
    let resources = stack.processed["Resources"].as_object().expect("resources");
    let buckets: Vec<(&str, &Value)> = resources
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::S3::Bucket")
        .map(|(n, r)| (n.as_str(), &r["Condition"]))
        .collect();
    assert_eq!(
        buckets,
        [("AssetBucket", &json!("CreateAssetBucket")), ("ReconcileWorkBucket", &json!("WithAthena"))],
        "only the asset bucket and Athena's work bucket, each conditional"
    );
}

/// The bucket check: the sweep may read the bucket's versioning and lifecycle, the consumer its versioning, on the
/// bucket itself; a bucket that is not protected pages the alarm topic like the sweep's other alarms.
#[tokio::test]
async fn the_bucket_check_is_granted_and_an_unprotected_bucket_pages_someone() {
    let stack = deployed().await;
    for existing in ["", "adopted-assets"] {
        let resolver = Resolver::new(&stack.processed, &[("ExistingAssetBucket", existing)]);
        let bucket = if existing.is_empty() { "<AssetBucket>" } else { existing };
        let statements = |role: &str| resolver.statements(role);
        for (role, actions) in [
            ("SweepRole", &["s3:GetBucketVersioning", "s3:GetLifecycleConfiguration"][..]),
            ("ConsumerRole", &["s3:GetBucketVersioning"][..]),
        ] {
            for action in actions {
                let granting: Vec<Value> = statements(role).into_iter().filter(|s| grants(s, action)).collect();
                assert_eq!(granting.len(), 1, "{role} {action}: {granting:?}");
                assert_eq!(strings(&granting[0]["Resource"]), [format!("arn:aws:s3:::{bucket}")], "{role} {action}");
                assert!(granting[0].get("Condition").is_none(), "{role} {action} on every pass: {granting:?}");
            }
        }
    }

    // The alarms: like the schema check's, on the sweep's metrics, to the same topic.
    let resources = &stack.processed["Resources"];
    let without = |alarm: &str| {
        let mut properties = resources[alarm]["Properties"].clone();
        let map = properties.as_object_mut().expect("properties");
        assert_eq!(resources[alarm]["Type"], "AWS::CloudWatch::Alarm", "{alarm}");
        assert!(resources[alarm].get("Condition").is_none(), "{alarm} exists with or without the functions");
        for varying in ["AlarmDescription", "MetricName", "Statistic"] {
            map.remove(varying);
        }
        properties
    };
    for (alarm, metric) in
        [("BucketUnprotectedAlarm", "BucketUnprotected"), ("NoncurrentExpiryMissingAlarm", "NoncurrentExpiryMissing")]
    {
        assert_eq!(
            without(alarm),
            without("SweepRefusedAlarm"),
            "{alarm} is the schema check's alarm but for its metric"
        );
        assert_eq!(resources[alarm]["Properties"]["MetricName"], metric);
    }
    // Created, and listed in `AlarmNames` (which the test reads them through).
    let config = platform::aws::sdk_config().await;
    let cloudwatch = aws_sdk_cloudwatch::Client::new(&config);
    let names: Vec<String> = stack.outputs["AlarmNames"].split(',').map(str::to_owned).collect();
    let alarms = cloudwatch.describe_alarms().set_alarm_names(Some(names)).send().await.expect("alarms");
    for metric in ["BucketUnprotected", "NoncurrentExpiryMissing"] {
        let alarm = alarms
            .metric_alarms()
            .iter()
            .find(|a| a.metric_name() == Some(metric))
            .unwrap_or_else(|| panic!("no alarm on {metric}"));
        assert_eq!(alarm.namespace(), Some("AssetSweeper"));
        let dimensions: Vec<_> = alarm.dimensions().iter().map(|d| (d.name(), d.value())).collect();
        assert_eq!(dimensions, [(Some("Function"), Some("sweep"))]);
        assert_eq!(
            (alarm.threshold(), alarm.comparison_operator()),
            (Some(0.0), Some(&ComparisonOperator::GreaterThanThreshold))
        );
        assert_eq!(alarm.alarm_actions(), [stack.outputs["AlarmTopicArn"].clone()]);
    }
}
