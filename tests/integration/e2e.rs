//! The whole system in LocalStack: `localstack/deploy` builds both functions, deploys the same template with
//! them, and LocalStack's own event source mapping feeds the real consumer after the real sweep is invoked.

use std::time::Duration;

use aws_sdk_lambda::primitives::Blob;
use integration_tests::TestContext;
use integration_tests::fixtures::{object_exists, seed};
use serde_json::Value;
use sqlx::postgres::PgListener;
use uuid::Uuid;

/// Runs `localstack/deploy` for this test's database; returns the stack's outputs.
async fn deploy(ctx: &TestContext) -> Value {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let stack = format!("e2e-{}", integration_tests::short_id());
    let url = ctx.db.url.clone();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(format!("{root}/localstack/deploy")).arg(&url).arg(&stack).output()
    })
    .await
    .expect("deploy thread")
    .expect("localstack/deploy runs");
    assert!(output.status.success(), "deploy failed: {}", String::from_utf8_lossy(&output.stderr));
    let deployed: Value = serde_json::from_slice(&output.stdout).expect("deploy prints JSON");
    assert_eq!(deployed["status"], "CREATE_COMPLETE");
    deployed["outputs"].clone()
}

#[tokio::test]
async fn the_deployed_functions_sweep_and_settle_through_localstacks_event_source_mapping() {
    let mut ctx = TestContext::new().await;
    let outputs = deploy(&ctx).await;
    // Seed into the stack's own bucket, which the deployed consumer is configured with.
    ctx.bucket = outputs["AssetBucketName"].as_str().expect("bucket").to_owned();
    sqlx::raw_sql("CREATE TABLE products (id serial PRIMARY KEY, hero uuid REFERENCES assets (id))")
        .execute(ctx.pool())
        .await
        .expect("owner table");
    let ws = Uuid::new_v4();
    let (abandoned_key, kept_key, released_key) = (format!("{ws}/a.png"), format!("{ws}/k.png"), format!("{ws}/r.png"));
    let abandoned = seed(&ctx, ws, "pending", "8 days", &abandoned_key).await;
    let kept = seed(&ctx, ws, "released", "3 days", &kept_key).await;
    let released = seed(&ctx, ws, "released", "3 days", &released_key).await;
    sqlx::query("INSERT INTO products (hero) VALUES ($1)").bind(kept).execute(ctx.pool()).await.expect("reference");
    // Every decision the consumer records is announced, so the test waits on events, not on time.
    sqlx::raw_sql(
        "CREATE FUNCTION announce() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_notify('settled', NEW.asset_id::text); RETURN NEW; END $$;
         CREATE TRIGGER announce AFTER INSERT ON settlement_events FOR EACH ROW EXECUTE FUNCTION announce();",
    )
    .execute(ctx.pool())
    .await
    .expect("announce trigger");
    let mut listener = PgListener::connect(&ctx.db.url).await.expect("listener");
    listener.listen("settled").await.expect("listen");

    let config = shared::aws::sdk_config().await;
    let lambda = aws_sdk_lambda::Client::new(&config);
    let sweep = lambda
        .invoke()
        .function_name(outputs["SweepFunctionName"].as_str().expect("sweep function"))
        .payload(Blob::new(include_str!("../fixtures/eventbridge-scheduled-event.json")))
        .send()
        .await
        .expect("invoke the sweep");
    assert_eq!(sweep.function_error(), None);
    let report: Value = serde_json::from_slice(sweep.payload().map(Blob::as_ref).unwrap_or_default()).expect("report");
    assert_eq!((report["outcome"].as_str(), report["enqueued"].as_u64()), (Some("ok"), Some(3)));

    let mut settled = std::collections::BTreeSet::new();
    while settled.len() < 3 {
        let note = tokio::time::timeout(Duration::from_secs(120), listener.recv())
            .await
            .expect("the event source mapping delivered within two minutes")
            .expect("notification");
        settled.insert(note.payload().parse::<Uuid>().expect("asset id"));
    }
    assert_eq!(settled, [abandoned, kept, released].into_iter().collect());

    let state = |id: Uuid| {
        let pool = ctx.pool().clone();
        async move {
            sqlx::query_scalar::<_, String>("SELECT state FROM assets WHERE id = $1")
                .bind(id)
                .fetch_optional(&pool)
                .await
                .expect("state")
        }
    };
    assert_eq!(state(abandoned).await, None, "the abandoned upload was deleted");
    assert!(!object_exists(&ctx.s3, &ctx.bucket, &abandoned_key).await);
    assert_eq!(state(kept).await.as_deref(), Some("attached"), "the referenced asset was kept");
    assert!(object_exists(&ctx.s3, &ctx.bucket, &kept_key).await);
    assert_eq!(state(released).await.as_deref(), Some("retired"));
    assert!(object_exists(&ctx.s3, &ctx.bucket, &released_key).await);
}
