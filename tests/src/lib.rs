//! The integration-test harness: every test gets its own migrated Postgres database and its own queue, DLQ
//! and bucket on LocalStack, all removed when the test ends, whether it passed or panicked.
//!
//! The harness fails loudly, never skips, when Postgres or LocalStack is missing: run the tests through
//! `scripts/test`, which starts what they need.

pub mod access_logs;
pub mod bucket;
pub mod engine;
pub mod fixtures;
pub mod reports;

use std::collections::HashMap;
use std::fmt::Display;

use aws_sdk_s3::types::{BucketVersioningStatus, VersioningConfiguration};
use aws_sdk_sqs::types::QueueAttributeName;
use platform::aws;
use settings::Settings;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection, PgConnection, PgPool};
use uuid::Uuid;

/// The redrive setting of every harness queue, matching the settings' default.
pub const MAX_RECEIVE_COUNT: u32 = 5;

/// Where the harness creates and drops its databases.
pub fn admin_database_url() -> String {
    std::env::var("TEST_DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// Panics with `what` and how to fix it: a harness that cannot reach a service must fail, not skip.
fn fail(what: impl Display) -> ! {
    panic!("test harness: {what} (run the tests with scripts/test, which starts Postgres and LocalStack)")
}

/// One test's resources. Dropping it removes them.
pub struct TestContext {
    pub db: TestDatabase,
    pub sqs: aws_sdk_sqs::Client,
    pub s3: aws_sdk_s3::Client,
    pub queue: TestQueue,
    pub bucket: String,
}

/// A uniquely named queue with its dead-letter queue.
#[derive(Debug, Clone)]
pub struct TestQueue {
    pub url: String,
    pub dlq_url: String,
    pub dlq_arn: String,
}

impl TestContext {
    /// A fresh migrated database, queue + DLQ (redrive after [`MAX_RECEIVE_COUNT`] receives) and versioned bucket.
    pub async fn new() -> Self {
        Self::on_server(admin_database_url()).await
    }

    /// [`TestContext::new`] with its database on the server `admin_url` names (its admin's URL).
    pub async fn on_server(admin_url: String) -> Self {
        if std::env::var_os("AWS_ENDPOINT_URL").is_none() {
            // Without it the SDK would talk to real AWS.
            fail("AWS_ENDPOINT_URL is not set");
        }
        let suffix = short_id();
        let config = aws::sdk_config().await;
        let sqs = aws::sqs_client(&config);
        let s3 = aws::s3_client(&config, true);
        let db = TestDatabase::migrated_on(admin_url).await;

        let queue = create_queue_pair(&sqs, &format!("sweeper-test-{suffix}")).await;
        let bucket = format!("sweeper-test-{suffix}");
        create_versioned_bucket(&s3, &bucket).await;

        TestContext { db, sqs, s3, queue, bucket }
    }

    /// The project's migrated pool for this test's database.
    pub fn pool(&self) -> &PgPool {
        &self.db.pool
    }

    /// Settings pointing at this test's database, queue and bucket, with `overrides` applied, read through
    /// the same parser as the functions' environment.
    pub fn settings(&self, overrides: &[(&str, &str)]) -> Settings {
        let max_receive_count = MAX_RECEIVE_COUNT.to_string();
        let mut vars: HashMap<&str, &str> = HashMap::from([
            ("DATABASE_URL", self.db.url.as_str()),
            ("CLEANUP_QUEUE_URL", self.queue.url.as_str()),
            ("ASSET_BUCKET", self.bucket.as_str()),
            ("S3_FORCE_PATH_STYLE", "true"),
            ("MAX_RECEIVE_COUNT", max_receive_count.as_str()),
            ("QUEUE_VISIBILITY_TIMEOUT", "30s"),
            // Every test's application creates its tables just before it runs: the quiet period after a schema
            // change is the holds tests' to turn on.
            ("SCHEMA_QUIET_PERIOD", "0s"),
            // Likewise its retention rules, declared just before the pass that applies them: the delay a new rule
            // waits is the records tests' to turn on.
            ("RECORDS_NEW_RULE_DELAY", "0s"),
            // And its records, deleted just before the pass that should find their assets unreferenced: the rest
            // between discovery's cycles is the discovery tests' to turn on.
            ("DISCOVERY_CYCLE_INTERVAL", "0s"),
        ]);
        vars.extend(overrides.iter().copied());
        Settings::from_lookup(|name| vars.get(name).map(|v| (*v).to_owned()))
            .unwrap_or_else(|e| fail(format!("test settings: {e}")))
    }

    /// Receives and deletes every message now on the cleanup queue.
    pub async fn drain_queue(&self) -> Vec<String> {
        drain(&self.sqs, &self.queue.url).await
    }

    /// How many messages the queue holds (visible and in flight).
    pub async fn queue_depth(&self) -> u64 {
        let attributes = self
            .sqs
            .get_queue_attributes()
            .queue_url(&self.queue.url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .unwrap_or_else(|e| fail(format!("GetQueueAttributes: {e:?}")));
        let count =
            |name| attributes.attributes().and_then(|a| a.get(&name)).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        count(QueueAttributeName::ApproximateNumberOfMessages)
            + count(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
    }
}

/// Process-wide failpoints: tests that configure one take turns.
pub static FAILPOINTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Receives up to ten messages as Lambda's SQS event source mapping would hand them to the consumer.
pub async fn receive_event(sqs: &aws_sdk_sqs::Client, queue_url: &str) -> aws_lambda_events::event::sqs::SqsEvent {
    let received = sqs
        .receive_message()
        .queue_url(queue_url)
        .max_number_of_messages(10)
        .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap_or_else(|e| fail(format!("ReceiveMessage: {e:?}")));
    let mut event = aws_lambda_events::event::sqs::SqsEvent::default();
    for message in received.messages() {
        let mut record = aws_lambda_events::event::sqs::SqsMessage::default();
        record.message_id = message.message_id().map(str::to_owned);
        record.receipt_handle = message.receipt_handle().map(str::to_owned);
        record.body = message.body().map(str::to_owned);
        record.md5_of_body = message.md5_of_body().map(str::to_owned);
        record.event_source = Some("aws:sqs".into());
        record.aws_region = Some("us-east-1".into());
        if let Some(attributes) = message.attributes() {
            for (name, value) in attributes {
                record.attributes.insert(name.as_str().to_owned(), value.clone());
            }
        }
        event.records.push(record);
    }
    event
}

/// What the event source mapping does with a handler's answer: deletes the messages that succeeded and makes
/// the failed ones visible again at once (standing in for the visibility timeout running out).
pub async fn acknowledge(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    event: &aws_lambda_events::event::sqs::SqsEvent,
    response: &aws_lambda_events::event::sqs::SqsBatchResponse,
) {
    let failed = |record: &aws_lambda_events::event::sqs::SqsMessage| {
        response.batch_item_failures.iter().any(|f| Some(&f.item_identifier) == record.message_id.as_ref())
    };
    let mut deletes = Vec::new();
    for (i, record) in event.records.iter().enumerate() {
        let Some(handle) = record.receipt_handle.as_deref() else { continue };
        if failed(record) {
            sqs.change_message_visibility()
                .queue_url(queue_url)
                .receipt_handle(handle)
                .visibility_timeout(0)
                .send()
                .await
                .unwrap_or_else(|e| fail(format!("ChangeMessageVisibility: {e:?}")));
        } else {
            let entry = aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .receipt_handle(handle)
                .build()
                .unwrap_or_else(|e| fail(format!("DeleteMessageBatch entry: {e}")));
            deletes.push(entry);
        }
    }
    if !deletes.is_empty() {
        let deleted = sqs
            .delete_message_batch()
            .queue_url(queue_url)
            .set_entries(Some(deletes))
            .send()
            .await
            .unwrap_or_else(|e| fail(format!("DeleteMessageBatch: {e:?}")));
        if !deleted.failed().is_empty() {
            fail(format!("DeleteMessageBatch rejected entries: {:?}", deleted.failed()));
        }
    }
}

/// Receives and deletes messages from `queue_url` until a receive comes back empty; returns their bodies.
pub async fn drain(sqs: &aws_sdk_sqs::Client, queue_url: &str) -> Vec<String> {
    let mut bodies = Vec::new();
    loop {
        let batch = sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(0)
            .send()
            .await
            .unwrap_or_else(|e| fail(format!("ReceiveMessage: {e:?}")));
        if batch.messages().is_empty() {
            return bodies;
        }
        for message in batch.messages() {
            bodies.push(message.body().unwrap_or_default().to_owned());
            if let Some(handle) = message.receipt_handle() {
                sqs.delete_message()
                    .queue_url(queue_url)
                    .receipt_handle(handle)
                    .send()
                    .await
                    .unwrap_or_else(|e| fail(format!("DeleteMessage: {e:?}")));
            }
        }
    }
}

impl Drop for TestContext {
    fn drop(&mut self) {
        let queues = [self.queue.url.clone(), self.queue.dlq_url.clone()];
        let bucket = self.bucket.clone();
        // Drop cannot await, and the test's runtime may be unwinding: clean up on a thread with its own runtime.
        run_detached(async move {
            let config = aws::sdk_config().await;
            let sqs = aws::sqs_client(&config);
            for url in queues {
                if let Err(e) = sqs.delete_queue().queue_url(&url).send().await {
                    eprintln!("test harness: could not delete queue {url}: {e}");
                }
            }
            let s3 = aws::s3_client(&config, true);
            if let Err(e) = empty_and_delete_bucket(&s3, &bucket).await {
                eprintln!("test harness: could not delete bucket {bucket}: {e}");
            }
        });
    }
}

/// A database created for one test, migrated, and dropped (`WITH (FORCE)`) when this value is dropped.
pub struct TestDatabase {
    pub name: String,
    pub pool: PgPool,
    pub url: String,
    /// The server's admin URL, which drops it.
    admin: String,
}

impl TestDatabase {
    /// Creates and migrates a new database.
    pub async fn new() -> Self {
        Self::migrated_on(admin_database_url()).await
    }

    /// Creates and migrates a new database on the server `admin_url` names (its admin's URL).
    pub async fn migrated_on(admin_url: String) -> Self {
        let db = Self::created_on(admin_url).await;
        if let Err(e) = migrator::migrate(&db.pool).await {
            fail(format!("migrating {}: {e}", db.name));
        }
        db
    }

    /// Creates a new, empty database (for migration tests).
    pub async fn unmigrated() -> Self {
        Self::created_on(admin_database_url()).await
    }

    async fn created_on(admin_url: String) -> Self {
        let name = format!("sweeper_test_{}", Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(&admin_url)
            .await
            .unwrap_or_else(|e| fail(format!("cannot reach Postgres at TEST_DATABASE_URL: {e}")));
        sqlx::query(AssertSqlSafe(format!(r#"CREATE DATABASE "{name}""#)))
            .execute(&mut admin)
            .await
            .unwrap_or_else(|e| fail(format!("cannot create database {name}: {e}")));
        let options: PgConnectOptions =
            admin_url.parse().unwrap_or_else(|e| fail(format!("TEST_DATABASE_URL is invalid: {e}")));
        // The tests play the application (and the operator at a psql prompt): their own tables go to `public`,
        // and they name the sweeper's by their plain names, as an application that put `asset_sweeper` on its
        // path would. The functions' sessions never use this path (platform::db::session_options).
        let options =
            options.database(&name).options([("search_path", "public, asset_sweeper_private, asset_sweeper")]);
        let pool = PgPoolOptions::new().max_connections(8).connect_lazy_with(options);
        // The same path for sessions a test opens from the URL; the functions' own session options come after it
        // and win (a later `-c` of the same setting overrides an earlier one).
        let url = with_option(
            &with_database(&admin_url, &name),
            "options=-c%20search_path%3Dpublic%2Casset_sweeper_private%2Casset_sweeper",
        );
        TestDatabase { name, pool, url, admin: admin_url }
    }

    /// This database's URL on another server of the same cluster (a standby), for its admin.
    pub fn on_server(&self, admin_url: &str) -> String {
        with_database(admin_url, &self.name)
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let (name, admin_url) = (self.name.clone(), self.admin.clone());
        run_detached(async move {
            let result = async {
                let mut admin = PgConnection::connect(&admin_url).await?;
                // FORCE ends the connections the test's pool still holds.
                sqlx::query(AssertSqlSafe(format!(r#"DROP DATABASE IF EXISTS "{name}" WITH (FORCE)"#)))
                    .execute(&mut admin)
                    .await
            }
            .await;
            if let Err(e) = result {
                eprintln!("test harness: could not drop database {name}: {e}");
            }
        });
    }
}

/// `url` with its database name replaced.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let base = base.rsplit_once('/').map_or(base, |(prefix, _)| prefix);
    match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    }
}

/// `url` with `param` added to its query string.
fn with_option(url: &str, param: &str) -> String {
    if url.contains('?') { format!("{url}&{param}") } else { format!("{url}?{param}") }
}

/// Runs `future` to completion on a fresh thread and runtime, blocking until it is done. Used from `Drop`.
fn run_detached(future: impl Future<Output = ()> + Send + 'static) {
    let joined = std::thread::spawn(move || match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime.block_on(future),
        Err(e) => eprintln!("test harness: no runtime for cleanup: {e}"),
    })
    .join();
    if joined.is_err() {
        eprintln!("test harness: cleanup panicked");
    }
}

/// A PostgreSQL cluster of its own with a physical standby streaming from it (`localstack/postgres up` and
/// `standby`, under the port key `<LOCALSTACK_PORT>-replica`): the admin URLs of both. Started once per test run,
/// by the first test that asks; `scripts/with-services` stops both when its command ends.
#[derive(Debug, Clone)]
pub struct Standby {
    pub primary: String,
    pub standby: String,
}

impl Standby {
    /// The pair, started (or found running) by the project's own script.
    pub async fn get() -> &'static Standby {
        static PAIR: tokio::sync::OnceCell<Standby> = tokio::sync::OnceCell::const_new();
        PAIR.get_or_init(|| async {
            tokio::task::spawn_blocking(|| Standby { primary: pair("up"), standby: pair("standby") })
                .await
                .unwrap_or_else(|e| fail(format!("starting the standby: {e}")))
        })
        .await
    }
}

/// `localstack/postgres <command>` for the replica's port key: the URL it prints.
fn pair(command: &str) -> String {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../localstack/postgres");
    let key = format!("{}-replica", std::env::var("LOCALSTACK_PORT").unwrap_or_else(|_| "4566".to_owned()));
    let out = std::process::Command::new(&script)
        .arg(command)
        .env("LOCALSTACK_PORT", key)
        .output()
        .unwrap_or_else(|e| fail(format!("running {}: {e}", script.display())));
    if !out.status.success() {
        fail(format!("localstack/postgres {command} failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// What an operator runs after the application's tables change: `asset-sweeper guards install`.
pub async fn install_guards(pool: &PgPool) {
    let mut conn = pool.acquire().await.unwrap_or_else(|e| fail(format!("install guards: {e}")));
    let (report, _) = schema::check::install_guards(&mut conn, schema::guards::Patience::default())
        .await
        .unwrap_or_else(|e| fail(format!("install guards: {e}")));
    if !report.blocked.is_empty() {
        fail(format!("install guards: {:?}", report.blocked));
    }
}

/// Runs the census until it has read every column once, as the sweep's passes would over time: for benchmarks
/// whose schema is too large for the census to finish within their first pass's share.
pub async fn prove_schema(pool: &PgPool) {
    use platform::step::{Share, Step};
    let census = schema::census::Census {
        max_batches: u32::MAX,
        batch_blocks: 1_024,
        batch_timeout: std::time::Duration::from_secs(30),
        cycle_interval: std::time::Duration::ZERO,
        readers: 2,
        layout: None,
        replica: None,
    };
    let share = Share::of(100, std::time::Instant::now() + std::time::Duration::from_secs(3600));
    let progress = census.advance(pool, share).await.unwrap_or_else(|e| fail(format!("census: {e}")));
    if progress.columns_unproven > 0 {
        fail(format!("the census left columns unproven: {progress:?}"));
    }
}

/// A login made for one test, holding exactly the grants it was made with: what a privilege test runs as (a
/// superuser would pass every check). Dropped, with what it owns in the test's database, when this value is.
pub struct TestLogin {
    pub name: String,
    /// Its URL for the test's database, for settings and the CLI.
    pub url: String,
    db_url: String,
}

impl TestLogin {
    /// A new login in `db`'s cluster given `grants`, run as the owner, where `{login}` stands for its name.
    pub async fn new(db: &TestDatabase, grants: &str) -> Self {
        let name = format!("sweeper_login_{}", short_id());
        let password = Uuid::new_v4().simple().to_string();
        let mut owner =
            PgConnection::connect(&db.url).await.unwrap_or_else(|e| fail(format!("connect to {}: {e}", db.name)));
        let sql = format!("CREATE ROLE {name} LOGIN PASSWORD '{password}'; {}", grants.replace("{login}", &name));
        sqlx::raw_sql(AssertSqlSafe(sql.clone()))
            .execute(&mut owner)
            .await
            .unwrap_or_else(|e| panic!("the login's grants ({sql}): {e}"));
        let options: PgConnectOptions =
            admin_database_url().parse().unwrap_or_else(|e| fail(format!("TEST_DATABASE_URL is invalid: {e}")));
        let url = format!("postgres://{name}:{password}@{}:{}/{}", options.get_host(), options.get_port(), db.name);
        TestLogin { name, url, db_url: db.url.clone() }
    }

    /// A connection as the login, on its own default search path.
    pub async fn connect(&self) -> PgConnection {
        PgConnection::connect(&self.url).await.unwrap_or_else(|e| panic!("connect as {}: {e}", self.name))
    }
}

impl Drop for TestLogin {
    fn drop(&mut self) {
        let (name, db_url) = (self.name.clone(), self.db_url.clone());
        run_detached(async move {
            // Roles are the cluster's: what it owns in the test's database goes first, then the role.
            if let Ok(mut conn) = PgConnection::connect(&db_url).await {
                let _ = sqlx::raw_sql(AssertSqlSafe(format!("DROP OWNED BY {name} CASCADE"))).execute(&mut conn).await;
                let _ = conn.close().await;
            }
            if let Ok(mut admin) = PgConnection::connect(&admin_database_url()).await {
                let _ = sqlx::raw_sql(AssertSqlSafe(format!("DROP ROLE IF EXISTS {name}"))).execute(&mut admin).await;
            }
        });
    }
}

pub fn short_id() -> String {
    Uuid::new_v4().simple().to_string()[..12].to_owned()
}

/// Creates `<name>-dlq` and `<name>` with a redrive policy to it after [`MAX_RECEIVE_COUNT`] receives.
pub async fn create_queue_pair(sqs: &aws_sdk_sqs::Client, name: &str) -> TestQueue {
    let dlq_url = sqs
        .create_queue()
        .queue_name(format!("{name}-dlq"))
        .send()
        .await
        .unwrap_or_else(|e| fail(format!("cannot create queue {name}-dlq on LocalStack: {e:?}")))
        .queue_url
        .unwrap_or_else(|| fail("CreateQueue returned no URL"));
    let dlq_arn = sqs
        .get_queue_attributes()
        .queue_url(&dlq_url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap_or_else(|e| fail(format!("cannot read the DLQ's ARN: {e:?}")))
        .attributes
        .and_then(|mut a| a.remove(&QueueAttributeName::QueueArn))
        .unwrap_or_else(|| fail("GetQueueAttributes returned no QueueArn"));
    let redrive =
        serde_json::json!({ "deadLetterTargetArn": dlq_arn, "maxReceiveCount": MAX_RECEIVE_COUNT.to_string() });
    let url = sqs
        .create_queue()
        .queue_name(name)
        .attributes(QueueAttributeName::RedrivePolicy, redrive.to_string())
        .attributes(QueueAttributeName::VisibilityTimeout, "30")
        .send()
        .await
        .unwrap_or_else(|e| fail(format!("cannot create queue {name} on LocalStack: {e:?}")))
        .queue_url
        .unwrap_or_else(|| fail("CreateQueue returned no URL"));
    TestQueue { url, dlq_url, dlq_arn }
}

/// Creates a bucket with versioning on, as the template's asset bucket has.
pub async fn create_versioned_bucket(s3: &aws_sdk_s3::Client, bucket: &str) {
    s3.create_bucket()
        .bucket(bucket)
        .send()
        .await
        .unwrap_or_else(|e| fail(format!("cannot create bucket {bucket} on LocalStack: {e:?}")));
    s3.put_bucket_versioning()
        .bucket(bucket)
        .versioning_configuration(VersioningConfiguration::builder().status(BucketVersioningStatus::Enabled).build())
        .send()
        .await
        .unwrap_or_else(|e| fail(format!("cannot enable versioning on {bucket}: {e:?}")));
}

/// Removes every version and delete marker, then the bucket.
async fn empty_and_delete_bucket(s3: &aws_sdk_s3::Client, bucket: &str) -> Result<(), String> {
    loop {
        let listing = s3.list_object_versions().bucket(bucket).send().await.map_err(|e| format!("{e:?}"))?;
        let versions = listing.versions().iter().map(|v| (v.key(), v.version_id()));
        let markers = listing.delete_markers().iter().map(|m| (m.key(), m.version_id()));
        let all: Vec<_> = versions.chain(markers).collect();
        if all.is_empty() {
            break;
        }
        for (key, version) in all {
            s3.delete_object()
                .bucket(bucket)
                .set_key(key.map(str::to_owned))
                .set_version_id(version.map(str::to_owned))
                .send()
                .await
                .map_err(|e| format!("{e:?}"))?;
        }
    }
    s3.delete_bucket().bucket(bucket).send().await.map_err(|e| format!("{e:?}"))?;
    Ok(())
}
