//! The alarms on the effect, driven to ALARM in LocalStack by the situations they name, and back to OK once those
//! are gone: an overdue asset, due bytes growing while nothing settles, claims that lapse unsettled (a consumer that
//! settles nothing), freed bytes S3 still reports, and a bucket S3 bills far beyond what the rows account for.
//!
//! Each alarm is the one the template creates (read back from the deployed stack), copied with a 10 s period:
//! LocalStack evaluates an alarm once per period, and the template's is 15 minutes (a 60 s copy made this test the
//! longest of the suite, five minutes of waiting). The copy watches a namespace of
//! this test's own, so no other test's pass feeds it. The metrics are the real sweep's metrics line, put into
//! CloudWatch as CloudWatch Logs turns an Embedded Metric Format line into metrics (LocalStack does not).

use std::time::{Duration, Instant};

use aws_sdk_cloudwatch::types::{Dimension, MetricAlarm, MetricDatum, StateValue};
use aws_sdk_s3::types::{
    BucketLifecycleConfiguration, ExpirationStatus, LifecycleRule, LifecycleRuleFilter, NoncurrentVersionExpiration,
};
use integration_tests::fixtures::insert_asset;
use integration_tests::{TestContext, short_id};
use serde_json::Value;
use sweep_lambda::record::{SweepReport, metrics_line};
use uuid::Uuid;

use crate::money::{believed, pass, publish_storage_metrics};

/// The alarms on the effect, by the metric each watches.
const EFFECT_ALARMS: &[(&str, &str)] = &[
    ("OverdueAssetAlarm", "OldestOverdueSeconds"),
    ("SettlingStalledAlarm", "GrowingUnsettledPasses"),
    ("UnsettledClaimsAlarm", "UnsettledClaims"),
    ("FreedNotShownAlarm", "FreedNotShownBytes"),
    ("BucketDriftAlarm", "BucketDrifted"),
];

/// Puts an EMF line's metrics into `namespace`, as CloudWatch Logs does with the line's own namespace.
async fn publish_emf(cloudwatch: &aws_sdk_cloudwatch::Client, namespace: &str, line: &str) {
    let line: Value = serde_json::from_str(line).expect("an EMF line");
    let directive = &line["_aws"]["CloudWatchMetrics"][0];
    let dimensions: Vec<Dimension> = directive["Dimensions"][0]
        .as_array()
        .expect("dimensions")
        .iter()
        .filter_map(Value::as_str)
        .map(|name| Dimension::builder().name(name).value(line[name].as_str().expect("a dimension's value")).build())
        .collect();
    let data: Vec<MetricDatum> = directive["Metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .filter_map(|m| m["Name"].as_str())
        .map(|name| {
            MetricDatum::builder()
                .metric_name(name)
                .set_dimensions(Some(dimensions.clone()))
                .value(line[name].as_f64().expect("a metric's value"))
                .build()
        })
        .collect();
    for chunk in data.chunks(20) {
        cloudwatch
            .put_metric_data()
            .namespace(namespace)
            .set_metric_data(Some(chunk.to_vec()))
            .send()
            .await
            .expect("put metric data");
    }
}

/// Publishes `report`'s metrics line every two seconds (a pass's datapoint stands for its whole period; several fall
/// in each of the copy's 10 s periods) until every alarm of `names` is in `state`; panics after four minutes with
/// the states seen.
async fn until_all(
    cloudwatch: &aws_sdk_cloudwatch::Client,
    namespace: &str,
    report: &SweepReport,
    names: &[String],
    state: StateValue,
) {
    let line = metrics_line(report);
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        publish_emf(cloudwatch, namespace, &line).await;
        let alarms = cloudwatch.describe_alarms().set_alarm_names(Some(names.to_vec())).send().await.expect("alarms");
        let seen: Vec<(String, Option<StateValue>, Option<String>)> = alarms
            .metric_alarms()
            .iter()
            .map(|a| {
                (
                    a.metric_name().unwrap_or("-").to_owned(),
                    a.state_value().cloned(),
                    a.state_reason().map(str::to_owned),
                )
            })
            .collect();
        if seen.len() == names.len() && seen.iter().all(|(_, s, _)| s.as_ref() == Some(&state)) {
            return;
        }
        assert!(Instant::now() < deadline, "not all {state:?} after four minutes: {seen:#?}\n{line}");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The template's alarm on `metric`, as the stack created it, copied with a 10 s period onto `namespace`.
async fn copy_of(cloudwatch: &aws_sdk_cloudwatch::Client, deployed: &MetricAlarm, namespace: &str) -> String {
    let name = format!("{}-effect-test-{}", deployed.alarm_name().expect("a name"), short_id());
    cloudwatch
        .put_metric_alarm()
        .alarm_name(&name)
        .namespace(namespace)
        .metric_name(deployed.metric_name().expect("a metric"))
        .set_dimensions(Some(deployed.dimensions().to_vec()))
        .set_statistic(deployed.statistic().cloned())
        .period(10)
        .evaluation_periods(deployed.evaluation_periods().expect("evaluation periods"))
        .threshold(deployed.threshold().expect("a threshold"))
        .set_comparison_operator(deployed.comparison_operator().cloned())
        .set_treat_missing_data(deployed.treat_missing_data().map(str::to_owned))
        .send()
        .await
        .expect("put metric alarm");
    name
}

#[tokio::test]
async fn each_effect_alarm_fires_on_the_situation_it_names_and_clears_once_it_is_gone() {
    let stack = crate::infra::deployed().await;
    let config = platform::aws::sdk_config().await;
    let cloudwatch = aws_sdk_cloudwatch::Client::new(&config);
    let names: Vec<String> = stack.outputs["AlarmNames"].split(',').map(str::to_owned).collect();
    let created = cloudwatch.describe_alarms().set_alarm_names(Some(names)).send().await.expect("the stack's alarms");
    let namespace = format!("AssetSweeperEffectTest{}", short_id());
    let mut copies = Vec::new();
    for (alarm, metric) in EFFECT_ALARMS {
        let deployed = created
            .metric_alarms()
            .iter()
            .find(|a| a.metric_name() == Some(metric))
            .unwrap_or_else(|| panic!("the stack has no alarm on {metric} ({alarm})"));
        assert_eq!(deployed.namespace(), Some("AssetSweeper"), "{alarm}");
        copies.push(copy_of(&cloudwatch, deployed, &namespace).await);
    }

    let ctx = TestContext::new().await;
    let rule = LifecycleRule::builder()
        .id("expire-deleted-bytes")
        .status(ExpirationStatus::Enabled)
        .filter(LifecycleRuleFilter::builder().prefix("").build())
        .noncurrent_version_expiration(NoncurrentVersionExpiration::builder().noncurrent_days(30).build())
        .build()
        .expect("a lifecycle rule");
    ctx.s3
        .put_bucket_lifecycle_configuration()
        .bucket(&ctx.bucket)
        .lifecycle_configuration(BucketLifecycleConfiguration::builder().rules(rule).build().expect("lifecycle"))
        .send()
        .await
        .expect("the lifecycle rule");
    // A lease of six seconds (a second's visibility, five deliveries), so a claim lapses between two passes.
    let settings = [("QUEUE_VISIBILITY_TIMEOUT", "1s")];
    let lease = Duration::from_secs(7);
    // 50 GiB a purge freed forty days ago: its versions expired nine days ago, and S3 should no longer count them.
    sqlx::query(
        "INSERT INTO settlement_events (occurred_at, asset_id, workspace_id, storage_key, action, evidence, bytes_freed,
                                        code_version)
         VALUES (now() - interval '40 days', gen_random_uuid(), gen_random_uuid(), 'gone', 'purge', '{}', $1, 'test')",
    )
    .bind(50_i64 << 30)
    .execute(ctx.pool())
    .await
    .expect("a purge forty days ago");
    pass(&ctx, &settings).await;
    // S3's figures for the day before yesterday: the rows' bytes and those 50 GiB, still there.
    let day = chrono::Utc::now().date_naive() - chrono::Days::new(2);
    let known = i64::try_from(believed(&ctx, day).await).expect("bytes");
    publish_storage_metrics(&ctx.bucket, day, &[("StandardStorage", known + (50 << 30))], 10).await;

    // Nothing settles: every pass makes one more asset overdue (due two days ago) and claims it; no consumer runs.
    let workspace = Uuid::new_v4();
    for _ in 0..4 {
        insert_asset(ctx.pool(), workspace, "released", Some("2 days")).await;
        pass(&ctx, &settings).await;
    }
    // The fifth finds the claims of the first four lapsed.
    tokio::time::sleep(lease).await;
    insert_asset(ctx.pool(), workspace, "released", Some("2 days")).await;
    let stuck = pass(&ctx, &settings).await;
    let effect = stuck.effect.clone().expect("the effect");
    assert!(effect.oldest_overdue.as_ref().is_some_and(|o| o.seconds > 86_400), "{effect:?}");
    assert_eq!(effect.growing_unsettled_passes, 5, "{effect:?}");
    assert_eq!(effect.lapsed.assets, 4, "{effect:?}");
    let drift = stuck.drift.as_ref().and_then(|d| d.newest.clone()).expect("a comparison");
    // All of the 50 GiB but the few bytes of the new assets, which the rows now account for.
    assert!(drift.metric_day == day && drift.freed_not_shown > 49 << 30 && drift.drifted(), "{drift:?}");
    until_all(&cloudwatch, &namespace, &stuck, &copies, StateValue::Alarm).await;

    // The consumer runs: every claim gets its settlement (here a deferral: the assets are new). S3's next day shows
    // the bucket as the rows account for it.
    crate::pipeline::deliver_all_with(&ctx, &settings).await;
    let yesterday = day + chrono::Days::new(1);
    let known = i64::try_from(believed(&ctx, yesterday).await).expect("bytes");
    publish_storage_metrics(&ctx.bucket, yesterday, &[("StandardStorage", known)], 10).await;
    let cleared = pass(&ctx, &settings).await;
    let effect = cleared.effect.clone().expect("the effect");
    assert_eq!((effect.oldest_overdue.clone(), effect.growing_unsettled_passes, effect.lapsed.assets), (None, 0, 0));
    let drift = cleared.drift.as_ref().and_then(|d| d.newest.clone()).expect("a comparison");
    assert_eq!((drift.metric_day, drift.freed_not_shown, drift.drifted()), (yesterday, 0, false), "{drift:?}");
    until_all(&cloudwatch, &namespace, &cleared, &copies, StateValue::Ok).await;
}
