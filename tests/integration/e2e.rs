//! The whole system in LocalStack, through the demo's own path (README, first command): `localstack/deploy`
//! builds both functions and deploys the template with them, the demo catalog is seeded, the real sweep is
//! invoked, and LocalStack's own event source mapping feeds the real consumer until the queue is empty. Beside the
//! catalog, orphan bytes and a row whose bytes are gone: the deployed sweep reads an inventory report, adopts the
//! orphans on the prefix an operator approved, the consumer removes the one no record names, and the lost row is
//! reported.
//!
//! LocalStack polls a mapping with one thread, so two consumers never run at once here; their races are
//! tested at the database level (tests/integration/consumer.rs, soak.rs).

use chrono::Duration;
use demo::catalog::{self, Expect};
use demo::report::Report;
use demo::{Clients, bucket, deploy, drive};
use integration_tests::TestContext;
use integration_tests::fixtures::{object_exists, state};
use lifecycle::message::CleanupMessage;
use uuid::Uuid;

#[tokio::test]
async fn the_demo_catalog_settles_through_the_deployed_functions_and_its_poison_message_is_dead_lettered() {
    let ctx = TestContext::new().await;
    let root = std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let (url, name) = (ctx.db.url.clone(), format!("e2e-{}", integration_tests::short_id()));
    let logins = demo::logins::create(ctx.pool(), &url, &name).await.expect("the functions' logins");
    let stack = tokio::task::spawn_blocking(move || deploy::deploy(&root, &url, &logins, &name))
        .await
        .expect("deploy thread")
        .expect("localstack/deploy");
    catalog::install_owner_tables(ctx.pool()).await.expect("owner tables");
    let clients = Clients::from_env().await;
    let catalog = catalog::seed(ctx.pool(), &clients.s3, &stack.asset_bucket_name).await.expect("seed");
    let due = catalog.due().count() as u64;
    // The bucket's side: orphans and a lost row, an operator's first reconciliation and approval, a newer report.
    let bucket = stack.asset_bucket_name.clone();
    let planted = bucket::plant(ctx.pool(), &clients.s3, &bucket).await.expect("planted");
    let now = chrono::Utc::now();
    let first_report = bucket::write_report(&clients.s3, &bucket, &stack.name, &planted, now - Duration::minutes(2))
        .await
        .expect("a report");
    let first =
        bucket::reconcile_and_approve(ctx.pool(), &clients.s3, &bucket, &first_report).await.expect("reconciled");
    bucket::write_report(&clients.s3, &bucket, &stack.name, &planted, now - Duration::minutes(1))
        .await
        .expect("a newer report");

    let pass = drive::invoke_sweep(&clients, &stack).await.expect("the sweep answers");
    assert_eq!((pass["outcome"].as_str(), pass["enqueued"].as_u64()), (Some("ok"), Some(due)), "{pass}");
    assert_eq!(pass["reconcile"]["compared"]["adopted_keys"].as_i64(), Some(3), "{pass}");
    // The orphans wait for the key scan of the next pass's census, then go to the consumer.
    // A workspace's first adoption is braked whatever its size, until a person reads its plan and approves.
    let second = drive::invoke_sweep(&clients, &stack).await.expect("the sweep answers");
    assert_eq!((second["adopted_due"].as_u64(), second["enqueued"].as_u64()), (Some(3), Some(0)), "{second}");
    assert_eq!(
        (second["outcome"].as_str(), second["braked_workspaces"].as_u64()),
        (Some("braked"), Some(1)),
        "{second}"
    );
    crate::adoption::approve_brake(&ctx, planted.workspace).await;
    let third = drive::invoke_sweep(&clients, &stack).await.expect("the sweep answers");
    assert_eq!(third["enqueued"].as_u64(), Some(3), "{third}");

    let mut progress = |line: &str| eprintln!("e2e: {line}");
    drive::wait_for_outcome(ctx.pool(), &clients, &stack, &catalog, &mut progress)
        .await
        .expect("every due asset decided, the queue empty and the dead-letter alarm firing");
    bucket::wait_until_settled(ctx.pool(), &planted, std::time::Duration::from_secs(300), &mut progress)
        .await
        .expect("the adopted orphans settled");

    let report = Report::gather(ctx.pool(), &clients, &stack, &catalog).await.expect("report");
    assert_eq!(report.surprises(), Vec::<String>::new(), "\n{report}");
    let reconciled =
        bucket::Outcome::gather(ctx.pool(), &clients.s3, &bucket, &planted, first).await.expect("reconciliation");
    assert_eq!(reconciled.surprises(), Vec::<String>::new(), "\n{reconciled}");
    // Every orphan's bytes stay: a named one is kept, an unnamed one retired first (in place until its purge).
    for orphan in &reconciled.orphans {
        assert!(object_exists(&clients.s3, &bucket, &orphan.key).await, "{orphan:?}");
        let expected = if orphan.named { "defer" } else { "retire" };
        assert_eq!(orphan.action.as_deref(), Some(expected), "{orphan:?}");
    }

    // Records first: the rule deleted the expired order, and the same pass retired its receipt.
    let receipt = catalog.get("receipt-2023-0042.pdf").expect("seeded");
    let expired = report.assets.iter().find(|o| o.asset.id == receipt.id).expect("outcome");
    let first_pass = report.passes.first().map(|p| p.id);
    assert_eq!(expired.discovered_in, first_pass, "discovered by the first pass, the one whose rule deleted its order");
    assert!(expired.records_deleted_by_that_pass.unwrap_or(0) >= 1);
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders WHERE receipt = $1")
        .bind(receipt.id)
        .fetch_one(ctx.pool())
        .await
        .expect("orders");
    assert_eq!(orders, 0);
    // The usage figures: acme-shop holds its live images and the recent receipt; stored adds what was retired.
    let acme = catalog.get("trail-runner.jpg").expect("seeded").workspace_id;
    let usage = records::quota::usage(&mut ctx.pool().acquire().await.expect("connection"), acme).await.expect("usage");
    let (held, stored) = (412_000 + 405_000 + 92_000, 412_000 + 405_000 + 92_000 + 372_000 + 298_000 + 85_000);
    assert_eq!(
        (usage.quota_bytes, usage.held_bytes, usage.stored_bytes, usage.waiting_bytes, usage.headroom_bytes),
        (Some(1_000_000), held, stored, stored - held, Some(1_000_000 - held))
    );

    // The same facts, read from the rows and the bucket here rather than through the report.
    for asset in &catalog.assets {
        let state = state(&ctx, asset.id).await;
        let wanted = match asset.expect {
            Expect::NotDue | Expect::Keep => Some("attached"),
            Expect::Retire | Expect::DiscoverAndRetire | Expect::ExpireAndRetire => Some("retired"),
            Expect::Defer => Some("released"),
            Expect::Fail => Some("failed"),
            Expect::Delete | Expect::DeleteRowOnly | Expect::Purge => None,
        };
        assert_eq!(state.as_deref(), wanted, "{} ({})", asset.file, asset.expect);
        let present = object_exists(&clients.s3, &stack.asset_bucket_name, &asset.storage_key).await;
        assert_eq!(present, asset.expect.keeps_bytes(), "bytes of {} ({})", asset.file, asset.expect);
    }
    let removed_rows: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM stored_objects o WHERE o.storage_key = ANY ($1)
            AND NOT EXISTS (SELECT 1 FROM assets a WHERE a.storage_key = o.storage_key)",
    )
    .bind(catalog.assets.iter().map(|a| a.storage_key.clone()).collect::<Vec<_>>())
    .fetch_one(ctx.pool())
    .await
    .expect("orphaned objects");
    assert_eq!(removed_rows, 0, "no stored object outlives every asset row that used it");

    // Each keep names the record that holds the asset, by its primary key.
    let owners = [
        ("trail-runner-2026.jpg", "SELECT id FROM products WHERE hero_image = $1"),
        ("q3-board-pack.pdf", "SELECT id FROM documents WHERE attachments @> ARRAY[$1]::asset_id[]"),
        (
            "onboarding-diagram.png",
            "SELECT id FROM pages
              WHERE body @> jsonb_build_object('blocks', jsonb_build_array(jsonb_build_object('asset_id', $1::text)))",
        ),
    ];
    for (file, owner_sql) in owners {
        let asset = catalog.get(file).expect("seeded");
        let owner: i64 =
            sqlx::query_scalar(owner_sql).bind(asset.id).fetch_one(ctx.pool()).await.expect("owner record");
        let evidence = report.assets.iter().find(|o| o.asset.id == asset.id).and_then(|o| o.evidence.clone());
        assert_eq!(evidence.map(|e| e["record"]["id"].clone()), Some(owner.into()), "{file}");
    }

    // Bytes freed are exactly those of the deleted and purged assets that owned their bytes alone.
    let freed: i64 =
        catalog.assets.iter().filter(|a| matches!(a.expect, Expect::Delete | Expect::Purge)).map(|a| a.bytes).sum();
    assert_eq!(report.bytes_freed, freed);

    // The poison message sits in the dead-letter queue, naming the asset now marked failed with its error.
    let poison = catalog.get("legal-hold/contract-scan.pdf").expect("seeded");
    let received = clients
        .sqs
        .receive_message()
        .queue_url(&stack.dead_letter_queue_url)
        .max_number_of_messages(10)
        .visibility_timeout(0)
        .send()
        .await
        .expect("receive from the DLQ");
    let dead: Vec<Uuid> = received
        .messages()
        .iter()
        .filter_map(|m| CleanupMessage::parse(m.body().unwrap_or_default()).ok())
        .map(|m| m.asset_id.0)
        .collect();
    assert_eq!(dead, vec![poison.id]);
    let error: Option<String> = sqlx::query_scalar("SELECT last_error FROM assets WHERE id = $1")
        .bind(poison.id)
        .fetch_one(ctx.pool())
        .await
        .expect("last error");
    assert!(error.as_deref().is_some_and(|e| e.contains("legal hold")), "{error:?}");

    assert_eq!(report.alarm_state(&stack.dead_letter_alarm_name), Some("ALARM"), "{:?}", report.alarms);
}
