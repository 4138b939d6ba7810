//! What several tests drive the same way: the owner tables of the four source kinds, a pass of the real sweep,
//! the real consumer emptying the queue, and the audit trail read back.

use std::time::{Duration, Instant};

use consumer_lambda::Consumer;
use integration_tests::{TestContext, acknowledge, receive_event};
use sweep_lambda::Sweeper;
use sweep_lambda::record::SweepReport;
use uuid::Uuid;

/// One source of each kind; `galleries` has no primary key, so the evidence names its rows by `ctid`.
pub(crate) const OWNER_TABLES: &str = "
    CREATE TABLE products (id serial PRIMARY KEY, hero uuid REFERENCES assets (id));
    CREATE INDEX products_hero ON products (hero);
    CREATE TABLE banners (id serial PRIMARY KEY, image asset_id);
    CREATE INDEX banners_image ON banners (image);
    CREATE TABLE galleries (title text, images asset_id[]);
    CREATE INDEX galleries_images ON galleries USING gin (images);
    CREATE TABLE pages (id serial PRIMARY KEY, body jsonb);
    CREATE INDEX pages_body ON pages USING gin (body);
    INSERT INTO asset_reference_sources (table_name, column_name, json_path) VALUES ('pages', 'body', '$.**');";

/// [`OWNER_TABLES`] with the reference guards installed, as an integrated application has them.
pub(crate) async fn owner_tables(ctx: &TestContext) {
    sqlx::raw_sql(OWNER_TABLES).execute(ctx.pool()).await.expect("owner tables");
    integration_tests::install_guards(ctx.pool()).await;
}

/// One pass of the real sweep with `overrides` on the test's settings, with S3 as the deployed sweep has it (it
/// reads the bucket's versioning and lifecycle).
pub(crate) async fn pass(ctx: &TestContext, overrides: &[(&str, &str)]) -> SweepReport {
    let sweeper =
        Sweeper::new(ctx.pool().clone(), ctx.sqs.clone(), ctx.settings(overrides)).with_storage(ctx.s3.clone());
    sweeper.run_pass(Instant::now() + Duration::from_secs(600)).await.expect("sweep pass")
}

/// Delivers every message on the queue to the real consumer; panics if one fails.
pub(crate) async fn settle_queue(ctx: &TestContext) {
    let failed = deliver_all(ctx).await;
    assert!(failed.is_empty(), "{failed:?}");
}

/// Delivers every message on the queue to the real consumer, as the event source mapping would, until the queue is
/// empty (a message that fails every delivery ends in the dead-letter queue); returns the ids of failed items.
pub(crate) async fn deliver_all(ctx: &TestContext) -> Vec<String> {
    deliver_all_with(ctx, &[]).await
}

/// [`deliver_all`] with `overrides` on the consumer's settings.
pub(crate) async fn deliver_all_with(ctx: &TestContext, overrides: &[(&str, &str)]) -> Vec<String> {
    let consumer = Consumer::new(ctx.pool().clone(), ctx.s3.clone(), ctx.settings(overrides));
    let mut failed = Vec::new();
    while ctx.queue_depth().await > 0 {
        let event = receive_event(&ctx.sqs, &ctx.queue.url).await;
        let response = consumer
            .handle(lambda_runtime::LambdaEvent::new(event.clone(), lambda_runtime::Context::default()))
            .await
            .expect("the handler answers");
        acknowledge(&ctx.sqs, &ctx.queue.url, &event, &response).await;
        failed.extend(response.batch_item_failures.into_iter().map(|f| f.item_identifier));
    }
    failed
}

/// The actions recorded about `id`, oldest first.
pub(crate) async fn actions(ctx: &TestContext, id: Uuid) -> Vec<String> {
    sqlx::query_scalar("SELECT action FROM settlement_events WHERE asset_id = $1 ORDER BY id")
        .bind(id)
        .fetch_all(ctx.pool())
        .await
        .expect("events")
}

/// The newest audit event about `id`: (action, evidence).
pub(crate) async fn last_event(ctx: &TestContext, id: Uuid) -> (String, serde_json::Value) {
    sqlx::query_as("SELECT action, evidence FROM settlement_events WHERE asset_id = $1 ORDER BY id DESC LIMIT 1")
        .bind(id)
        .fetch_one(ctx.pool())
        .await
        .expect("an event")
}

/// A fresh storage key in `ws`'s folder.
pub(crate) fn key(ws: Uuid) -> String {
    format!("{ws}/{}.png", Uuid::new_v4())
}

/// Waits until a session of the test's database waits for a lock, running a statement that starts with `running`
/// (any statement with `""`): how a race test knows the other side reached the lock it holds. Panics, naming
/// `what`, after a minute.
pub(crate) async fn until_a_lock_wait(pool: &sqlx::PgPool, running: &str, what: &str) {
    let escaped = running.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_");
    until_a_session_waits(pool, "Lock", &format!("{escaped}%"), what).await;
}

/// Waits until a session of the test's database waits on `wait` (a `wait_event_type` such as `Lock`, or a
/// `wait_event` such as `PgSleep`) running a statement `LIKE` `running`. Asked every 10 ms, so a wait of a few tens
/// of milliseconds is seen; panics, naming `what`, after a minute.
pub(crate) async fn until_a_session_waits(pool: &sqlx::PgPool, wait: &str, running: &str, what: &str) {
    let waited = Instant::now();
    loop {
        let waiting: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity
                             WHERE datname = current_database() AND $1 IN (wait_event_type, wait_event)
                               AND query LIKE $2)",
        )
        .bind(wait)
        .bind(running)
        .fetch_one(pool)
        .await
        .expect("pg_stat_activity");
        if waiting {
            return;
        }
        assert!(waited.elapsed() < Duration::from_secs(60), "{what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
