//! The bucket's promises, checked rather than assumed (invariant 18): with versioning suspended, or never enabled,
//! or unreadable, a real sweep pass and the real consumer delete and purge nothing — rows and bytes stay, the run
//! record and the audit trail say why — while retiring goes on; with versioning on and no rule expiring noncurrent
//! versions, destruction proceeds and the run records the cost.

use aws_sdk_s3::types::{
    BucketLifecycleConfiguration, BucketVersioningStatus, ExpirationStatus, LifecycleRule, LifecycleRuleFilter,
    NoncurrentVersionExpiration, VersioningConfiguration,
};
use integration_tests::fixtures::{object_exists, put_bytes, seed, state};
use integration_tests::{TestContext, short_id};
use serde_json::Value;
use sweep_lambda::record::{SweepReport, metrics_line};
use uuid::Uuid;

use crate::pipeline::{self, actions, key, last_event};

/// A pending upload past its abandon window, a retired asset past its purge time, and a released one, with their
/// bytes in `bucket` (and in the harness's own, where `seed` puts them).
struct Seeded {
    abandoned: (Uuid, String),
    purgeable: (Uuid, String),
    released: (Uuid, String),
}

async fn seed_all(ctx: &TestContext, bucket: &str) -> Seeded {
    let ws = Uuid::new_v4();
    Seeded {
        abandoned: seed_in(ctx, bucket, ws, "abandoned", "8 days").await,
        purgeable: seed_in(ctx, bucket, ws, "retired", "40 days").await,
        released: seed_in(ctx, bucket, ws, "released", "3 days").await,
    }
}

async fn seed_in(ctx: &TestContext, bucket: &str, ws: Uuid, state: &str, age: &str) -> (Uuid, String) {
    let key = key(ws);
    let id = seed(ctx, ws, state, age, &key).await;
    if bucket != ctx.bucket {
        put_bytes(&ctx.s3, bucket, &key, b"bytes").await;
    }
    (id, key)
}

async fn set_versioning(ctx: &TestContext, bucket: &str, status: BucketVersioningStatus) {
    ctx.s3
        .put_bucket_versioning()
        .bucket(bucket)
        .versioning_configuration(VersioningConfiguration::builder().status(status).build())
        .send()
        .await
        .expect("PutBucketVersioning");
}

/// The run row's `reason.bucket`.
async fn recorded(ctx: &TestContext, report: &SweepReport) -> Value {
    let reason: Value = sqlx::query_scalar("SELECT reason FROM sweep_runs WHERE id = $1")
        .bind(report.run_id)
        .fetch_one(ctx.pool())
        .await
        .expect("the pass's run row");
    reason["bucket"].clone()
}

/// The pass's metrics line, as CloudWatch would read it.
fn metrics(report: &SweepReport) -> Value {
    serde_json::from_str(&metrics_line(report)).expect("the metrics line is JSON")
}

/// One pass and the consumer fed until the queue is empty, both set to `bucket`, with the assets' bytes in
/// `bytes_in`; then: the abandoned upload and the purgeable asset keep their rows and their bytes, each deferred
/// with `versioning` (`Null` when unread) and the bucket named in its evidence; the released asset is retired.
/// Returns the pass's report.
async fn destruction_is_held(ctx: &TestContext, bucket: &str, bytes_in: &str, versioning: Value) -> SweepReport {
    let seeded = seed_all(ctx, bytes_in).await;
    let settings = [("ASSET_BUCKET", bucket)];
    let report = pipeline::pass(ctx, &settings).await;
    assert_eq!(report.enqueued, 3, "claiming goes on: {report:?}");
    let failed = pipeline::deliver_all_with(ctx, &settings).await;
    assert!(failed.is_empty(), "{failed:?}");

    for ((id, key), was) in [(&seeded.abandoned, "retired"), (&seeded.purgeable, "retired")] {
        assert_eq!(state(ctx, *id).await.as_deref(), Some(was), "{was}: the row stays");
        assert!(object_exists(&ctx.s3, bytes_in, key).await, "{was}: the bytes stay");
        let (action, evidence) = last_event(ctx, *id).await;
        assert_eq!(action, "defer", "{was}: {evidence}");
        let deferred = &evidence["deferred"];
        assert_eq!(
            (&deferred["why"], &deferred["bucket"], &deferred["versioning"]),
            (&Value::from("bucket"), &Value::from(bucket), &versioning),
            "{was}: {evidence}"
        );
        let because = deferred["because"].as_str().unwrap_or_default();
        assert!(because.contains(bucket), "{was}: the reason names the bucket: {evidence}");
    }
    let (retired, _) = &seeded.released;
    assert_eq!(state(ctx, *retired).await.as_deref(), Some("retired"), "retiring goes on");
    assert_eq!(actions(ctx, *retired).await, ["retire"]);

    let checked = recorded(ctx, &report).await;
    assert_eq!(
        (&checked["bucket"], &checked["destruction"]),
        (&Value::from(bucket), &Value::from("held")),
        "{checked}"
    );
    assert!(checked["held_because"].as_str().is_some_and(|w| w.contains(bucket)), "{checked}");
    assert_eq!(metrics(&report)["BucketUnprotected"], 1);
    report
}

#[tokio::test]
async fn with_versioning_suspended_nothing_is_deleted_or_purged_retiring_goes_on_and_status_asks_for_a_person() {
    let ctx = TestContext::new().await;
    set_versioning(&ctx, &ctx.bucket, BucketVersioningStatus::Suspended).await;
    let report = destruction_is_held(&ctx, &ctx.bucket, &ctx.bucket, Value::from("Suspended")).await;
    let checked = recorded(&ctx, &report).await;
    assert_eq!(checked["versioning"], "Suspended");
    assert!(checked["held_because"].as_str().is_some_and(|w| w.contains("is Suspended")), "{checked}");

    let output = crate::cli::run(&ctx.db.url, Some(&ctx), &["status", "--json"]);
    let page: Value = serde_json::from_slice(&output.stdout).expect("status --json");
    assert_eq!(output.status.code(), Some(1), "a person is needed: {page}");
    let held = format!("deletes and purges are held: versioning of bucket {} is Suspended", ctx.bucket);
    let attention = page["needs_attention"].as_array().expect("a list");
    assert!(attention.iter().any(|a| a.as_str().is_some_and(|a| a.starts_with(&held))), "{page}");
    assert_eq!(page["bucket"]["sweep_run_id"], report.run_id.to_string());
    assert_eq!(page["bucket"]["found"]["destruction"], "held");
    let text = String::from_utf8(crate::cli::run(&ctx.db.url, Some(&ctx), &["status"]).stdout).expect("utf-8");
    assert!(text.starts_with("asset-sweeper: NEEDS A PERSON\n"), "{text}");
    assert!(text.contains(&format!("bucket {}: versioning Suspended", ctx.bucket)), "{text}");
}

#[tokio::test]
async fn in_a_bucket_that_never_had_versioning_nothing_is_deleted_or_purged_and_retiring_goes_on() {
    let ctx = TestContext::new().await;
    let bucket = ScratchBucket::create(&ctx).await;
    let report = destruction_is_held(&ctx, &bucket.0, &bucket.0, Value::from("NeverEnabled")).await;
    assert_eq!(recorded(&ctx, &report).await["versioning"], "NeverEnabled");
}

#[tokio::test]
async fn a_bucket_whose_versioning_cannot_be_read_holds_destruction_as_surely() {
    let ctx = TestContext::new().await;
    // Settings naming a bucket that is not there: GetBucketVersioning fails, as it would without
    // s3:GetBucketVersioning. The bytes are in the harness's bucket, where a delete would find them.
    let missing = format!("sweeper-test-missing-{}", short_id());
    let report = destruction_is_held(&ctx, &missing, &ctx.bucket, Value::Null).await;
    let checked = recorded(&ctx, &report).await;
    assert_eq!(checked["versioning"], Value::Null);
    let why = checked["held_because"].as_str().unwrap_or_default();
    assert!(
        why.starts_with(&format!(
            "not proven that a delete keeps the bytes: cannot read the versioning of bucket {missing}"
        )),
        "{why}"
    );
}

#[tokio::test]
async fn with_versioning_on_destruction_proceeds_and_a_missing_noncurrent_expiry_is_recorded_as_a_cost() {
    let ctx = TestContext::new().await;
    let seeded = seed_all(&ctx, &ctx.bucket).await;
    let report = pipeline::pass(&ctx, &[]).await;
    pipeline::settle_queue(&ctx).await;
    for ((id, key), action) in [(&seeded.abandoned, "delete"), (&seeded.purgeable, "purge")] {
        assert_eq!(state(&ctx, *id).await, None, "{action}: the row is gone");
        assert!(!object_exists(&ctx.s3, &ctx.bucket, key).await, "{action}: the bytes are behind a delete marker");
        assert_eq!(last_event(&ctx, *id).await.0, action);
    }
    assert_eq!(state(&ctx, seeded.released.0).await.as_deref(), Some("retired"));

    let checked = recorded(&ctx, &report).await;
    assert_eq!(
        (&checked["versioning"], &checked["destruction"], &checked["noncurrent_expiry"]),
        (&Value::from("Enabled"), &Value::from("allowed"), &Value::Null),
        "{checked}"
    );
    assert!(checked.get("held_because").is_none(), "{checked}");
    let cost = checked["cost_warning"].as_str().unwrap_or_default();
    assert!(cost.contains(&ctx.bucket) && cost.contains("kept, and paid for, for ever"), "{checked}");
    let line = metrics(&report);
    assert_eq!((&line["BucketUnprotected"], &line["NoncurrentExpiryMissing"]), (&Value::from(0), &Value::from(1)));
    // A cost, not a danger: status shows it and asks for nobody.
    let output = crate::cli::run(&ctx.db.url, Some(&ctx), &["status"]);
    let text = String::from_utf8(output.stdout).expect("utf-8");
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(text.contains(&format!("  cost: no enabled lifecycle rule of bucket {}", ctx.bucket)), "{text}");

    // The rule the template gives the bucket: the next pass records it, and no cost.
    let rule = LifecycleRule::builder()
        .id("expire-deleted-bytes")
        .status(ExpirationStatus::Enabled)
        .filter(LifecycleRuleFilter::builder().prefix("").build())
        .noncurrent_version_expiration(NoncurrentVersionExpiration::builder().noncurrent_days(30).build())
        .build()
        .expect("a lifecycle rule");
    let lifecycle = BucketLifecycleConfiguration::builder().rules(rule).build().expect("a lifecycle configuration");
    ctx.s3
        .put_bucket_lifecycle_configuration()
        .bucket(&ctx.bucket)
        .lifecycle_configuration(lifecycle)
        .send()
        .await
        .expect("PutBucketLifecycleConfiguration");
    let report = pipeline::pass(&ctx, &[]).await;
    let checked = recorded(&ctx, &report).await;
    assert_eq!(checked["noncurrent_expiry"], serde_json::json!({ "days": 30, "prefixes": [] }), "{checked}");
    assert!(checked.get("cost_warning").is_none(), "{checked}");
    assert_eq!(metrics(&report)["NoncurrentExpiryMissing"], 0);
}

/// A bucket created without versioning, emptied and removed when the test ends (passed or not).
struct ScratchBucket(String);

impl ScratchBucket {
    async fn create(ctx: &TestContext) -> Self {
        let name = format!("sweeper-test-plain-{}", short_id());
        ctx.s3.create_bucket().bucket(&name).send().await.expect("CreateBucket");
        ScratchBucket(name)
    }
}

impl Drop for ScratchBucket {
    fn drop(&mut self) {
        let bucket = self.0.clone();
        // Drop cannot await, and the test's runtime may be unwinding: clean up on a thread with its own runtime.
        let cleaned = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
            runtime.block_on(async {
                let config = platform::aws::sdk_config().await;
                let s3 = platform::aws::s3_client(&config, true);
                if let Ok(listing) = s3.list_objects_v2().bucket(&bucket).send().await {
                    for object in listing.contents() {
                        let _ =
                            s3.delete_object().bucket(&bucket).set_key(object.key().map(str::to_owned)).send().await;
                    }
                }
                if let Err(e) = s3.delete_bucket().bucket(&bucket).send().await {
                    eprintln!("could not delete bucket {bucket}: {e}");
                }
            });
        })
        .join();
        if cleaned.is_err() {
            eprintln!("cleaning up a scratch bucket panicked");
        }
    }
}
