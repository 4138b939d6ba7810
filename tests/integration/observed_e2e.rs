//! Observed use through the deployed functions: a stack whose template is given the asset bucket's access logs, an
//! image its page keeps fetching, and LocalStack's own event source mapping feeding the real consumer. The database
//! names the image nowhere (the page's template embeds it by URL), so nothing but the logs can say it is used: the
//! sweeper retires it, and each time its purge comes the page's reads since, delivered as S3 delivers its logs and
//! read by the real sweep, keep it. Another retired image, read only by the product's own role and before its
//! retirement, is purged in the same pass: reads are weighed, not merely present, and the logs were read far enough
//! for a purge to go.
//!
//! The database-level tests of the same rules are tests/integration/observed.rs; this one proves the template wires
//! them (the logs' location, the functions' roles ignored, the delivery lag) into the functions as deployed.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use demo::{Clients, Stack, catalog, deploy, drive};
use integration_tests::TestContext;
use integration_tests::access_logs::{deliver_s3_log, logged, s3_line};
use integration_tests::fixtures::{object_exists, protect_logs, seed_in, state};
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

/// Where the page that embeds the image lives: the referrer of every browser's fetch of it.
const PAGE: &str = "https://shop.example.com/about";

/// Where S3 delivers the asset bucket's logs in the logs bucket (the logging configuration's TargetPrefix).
const PREFIX: &str = "access/";

/// One trial of the image, in days before the test: when the sweeper retired it, when its purge came due, and when the
/// page's visitors fetched it (twice, three hours apart). Each retirement comes after the reads before it: a read
/// before a retirement says nothing of use since. The history is compressed (a retirement's 30 days to be restored
/// become days), as only the order of these times and their distance from the logs' delivery matter.
struct Trial {
    retired: i32,
    purge: i32,
    read: i32,
}

const TRIALS: [Trial; 3] = [
    Trial { retired: 40, purge: 10, read: 12 },
    Trial { retired: 9, purge: 6, read: 7 },
    Trial { retired: 5, purge: 2, read: 3 },
];

#[tokio::test]
async fn an_image_a_page_keeps_fetching_is_kept_at_every_purge_through_the_deployed_functions() {
    let ctx = TestContext::new().await;
    let clients = Clients::from_env().await;
    // The logs' bucket, as an operator sets it up before turning observed use on: only S3's log delivery writes it.
    let logs = format!("{}-logs", ctx.bucket);
    clients.s3.create_bucket().bucket(&logs).send().await.expect("the logs bucket");
    protect_logs(&clients.s3, &logs, PREFIX).await;

    let root = std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let (url, name) = (ctx.db.url.clone(), format!("observed-e2e-{}", integration_tests::short_id()));
    let logins = demo::logins::create(ctx.pool(), &url, &name).await.expect("the functions' logins");
    // The logs and nothing else beyond the demo's parameters: no reconciliation (no inventory to read). The delivery
    // lag stays at its default, a day, as deployed: every purge time below is more than a day before the logs the
    // test delivers, so each purge is covered by them, and waits only for what they say.
    let parameters =
        [("AccessLogsBucket".to_owned(), logs.clone()), ("AccessLogsPrefix".to_owned(), PREFIX.to_owned())];
    let stack = tokio::task::spawn_blocking(move || deploy::deploy_with(&root, &url, &logins, &name, &parameters))
        .await
        .expect("deploy thread")
        .expect("localstack/deploy");

    // The shop: the demo application's tables, its reference sources among them, and an about page whose blocks
    // name no asset. Its template shows the team photo by URL, which no row holds.
    catalog::install_owner_tables(ctx.pool()).await.expect("owner tables");
    let shop = Uuid::new_v4();
    sqlx::query("INSERT INTO pages (workspace_id, slug, body) VALUES ($1, 'about', $2)")
        .bind(shop)
        .bind(serde_json::json!({"template": "about.html", "blocks": [{"type": "text", "text": "Since 2009."}]}))
        .execute(ctx.pool())
        .await
        .expect("the about page");
    // Logging turned on: a first pass sees the logs' policy sound and reads nothing yet. Only an object delivered
    // after that tells how far the logs reach (S3 stamps a delivery to the second: the first is a second on).
    let turned_on = drive::invoke_sweep(&clients, &stack).await.expect("the sweep answers");
    let (outcome, enqueued) = (turned_on["outcome"].as_str(), turned_on["enqueued"].as_u64());
    assert_eq!((outcome, enqueued), (Some("ok"), Some(0)), "{turned_on}");
    assert_eq!(turned_on["observed"]["sources"][0]["error"], Value::Null, "{turned_on}");
    tokio::time::sleep(Duration::from_millis(1_100)).await;

    let bucket = stack.asset_bucket_name.clone();
    let (photo_key, old_key) = (format!("{shop}/about/team photo.jpg"), format!("{shop}/about/team-2019.jpg"));
    let photo = seed_in(ctx.pool(), &clients.s3, &bucket, shop, "retired", "40 days", &photo_key).await;
    let old = seed_in(ctx.pool(), &clients.s3, &bucket, shop, "retired", "40 days", &old_key).await;
    let now = Utc::now();
    let ago = |days: i32| now - chrono::Duration::days(days.into());
    retire(ctx.pool(), old, TRIALS[0].retired, TRIALS[0].purge).await;
    // The consumer's own reads, as S3 logs a session of its role: never use.
    let consumer_session = role_session(&clients, &stack).await;

    for (n, trial) in TRIALS.iter().enumerate() {
        retire(ctx.pool(), photo, trial.retired, trial.purge).await;
        let (first, second) = (ago(trial.read), ago(trial.read) + chrono::Duration::hours(3));
        let mut lines = vec![
            s3_line(&bucket, &logged(&photo_key), first, "-", "REST.GET.OBJECT", 200, PAGE),
            s3_line(&bucket, &logged(&photo_key), second, "-", "REST.GET.OBJECT", 200, PAGE),
        ];
        if n == 0 {
            lines.extend([
                s3_line(&bucket, &logged(&old_key), ago(12), &consumer_session, "REST.GET.OBJECT", 200, "-"),
                // Before its retirement: no evidence of use since.
                s3_line(&bucket, &logged(&old_key), ago(41), "-", "REST.GET.OBJECT", 200, PAGE),
            ]);
        }
        deliver_s3_log(&clients.s3, &logs, PREFIX, &lines).await;

        let since = Utc::now();
        let pass = drive::invoke_sweep(&clients, &stack).await.expect("the sweep answers");
        let claimed = if n == 0 { vec![photo, old] } else { vec![photo] };
        assert_eq!(
            (pass["outcome"].as_str(), pass["enqueued"].as_u64()),
            (Some("ok"), Some(claimed.len() as u64)),
            "{pass}"
        );
        assert_eq!(pass["observed"]["sources"][0]["objects_read"], 1, "trial {n}: {pass}");
        let decided = settled(ctx.pool(), &clients, &stack, &claimed, since).await;

        let (action, evidence) = decided.get(&photo).cloned().expect("decided");
        assert_eq!(action, "keep", "trial {n}: fetched since its retirement: {evidence}");
        assert_eq!(evidence["read"]["referrer_host"], "shop.example.com", "trial {n}: {evidence}");
        assert_eq!(evidence["read"]["client"], "browser", "trial {n}: {evidence}");
        assert_eq!(evidence["read"]["source"], "s3", "trial {n}: {evidence}");
        // This trial's newest fetch: the one before its retirement keeps it no longer.
        let read_at = evidence["read"]["at"].as_str().and_then(|at| at.parse::<DateTime<Utc>>().ok());
        assert_eq!(read_at.map(|at| at.timestamp()), Some(second.timestamp()), "trial {n}: {evidence}");
        assert!(evidence.get("referenced_by").is_none(), "no row names it: {evidence}");
        assert_eq!(state(&ctx, photo).await.as_deref(), Some("attached"), "trial {n}");
        assert!(object_exists(&clients.s3, &bucket, &photo_key).await, "trial {n}");
        if n == 0 {
            let (action, evidence) = decided.get(&old).cloned().expect("decided");
            assert_eq!(action, "purge", "read only by the product's role and before its retirement: {evidence}");
            assert_eq!(state(&ctx, old).await, None);
            assert!(!object_exists(&clients.s3, &bucket, &old_key).await);
        }
    }

    // Never purged: kept at each trial, and no removal ever recorded.
    let actions: Vec<String> = sqlx::query_scalar(
        "SELECT action FROM asset_sweeper_private.settlement_events WHERE asset_id = $1 ORDER BY id",
    )
    .bind(photo)
    .fetch_all(ctx.pool())
    .await
    .expect("the photo's record");
    assert!(!actions.iter().any(|a| a == "purge" || a == "delete"), "{actions:?}");
    assert_eq!(actions.iter().filter(|a| *a == "keep").count(), TRIALS.len(), "{actions:?}");
    assert!(object_exists(&clients.s3, &bucket, &photo_key).await);
}

/// Retires `asset` as the sweeper would have `retired` days ago, its purge time `purge` days ago and due now: the
/// sweeper's own write (the grace floor stays where the application's writes left it), to the table itself.
async fn retire(pool: &PgPool, asset: Uuid, retired: i32, purge: i32) {
    let mut tx = pool.begin().await.expect("begin");
    sqlx::query("SELECT set_config('asset_sweeper.actor', 'sweeper', true)").execute(&mut *tx).await.expect("actor");
    let retired = sqlx::query(
        "UPDATE asset_sweeper_private.assets
            SET state = 'retired', retired_at = now() - make_interval(days => $2),
                purge_after = now() - make_interval(days => $3), due_at = now() - interval '1 second'
          WHERE id = $1 AND state IN ('attached', 'retired')",
    )
    .bind(asset)
    .bind(retired)
    .bind(purge)
    .execute(&mut *tx)
    .await
    .expect("retired");
    assert_eq!(retired.rows_affected(), 1, "{asset} is attached or retired");
    tx.commit().await.expect("commit");
}

/// A session of the deployed consumer's role, as S3 names its requests: `assumed-role/<role name>/<session>`.
async fn role_session(clients: &Clients, stack: &Stack) -> String {
    let configuration = clients
        .lambda
        .get_function_configuration()
        .function_name(&stack.consumer_function_name)
        .send()
        .await
        .expect("the consumer's configuration");
    let role = configuration.role().expect("the consumer's role");
    let (account, path) = role.strip_prefix("arn:aws:iam::").and_then(|r| r.split_once(":role/")).expect("a role ARN");
    let name = path.rsplit('/').next().unwrap_or(path);
    format!("arn:aws:sts::{account}:assumed-role/{name}/{}", stack.consumer_function_name)
}

/// Waits until each of `assets` has a decision recorded since `since` and the cleanup queue is empty (the consumer
/// has returned), as LocalStack's mapping feeds the consumer; returns each one's latest decision and its evidence.
async fn settled(
    pool: &PgPool,
    clients: &Clients,
    stack: &Stack,
    assets: &[Uuid],
    since: DateTime<Utc>,
) -> HashMap<Uuid, (String, Value)> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let decided = drive::decisions(pool, assets, since).await.expect("the settlement record");
        let queue = platform::queues::describe(&clients.sqs, &stack.cleanup_queue_url).await.expect("the queue");
        if decided.len() == assets.len() && queue.depth.total() == 0 {
            return decided;
        }
        assert!(
            Instant::now() < deadline,
            "not settled in 300 s: {decided:?}, queue {queue:?}; the consumer's logs are under /aws/lambda/{}",
            stack.consumer_function_name
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}
