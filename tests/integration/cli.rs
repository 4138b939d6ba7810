//! The real `asset-sweeper` binary against a real Postgres database and LocalStack S3, with states made by the
//! real sweep and consumer, asserting on what it prints (text and `--json`), its exit code and what it changed.
//! It lives here, beside the functions, so the CLI's own package depends on neither function crate.

use std::process::Output;
use std::time::{Duration, Instant};

use crate::pipeline::actions;
use integration_tests::fixtures::{object_exists, seed, state};
use integration_tests::{TestContext, TestDatabase, drain};
use lifecycle::CleanupMessage;
use platform::{AssetId, WorkspaceId};
use serde_json::{Value, json};
use uuid::Uuid;

/// The CLI binary of this build: beside this test binary's directory, where `cargo test --workspace` puts it
/// (the CLI package's own test makes cargo build it).
fn binary() -> std::path::PathBuf {
    let test = std::env::current_exe().expect("the test binary's path");
    let dir = test.parent().and_then(std::path::Path::parent).expect("the target directory");
    let binary = dir.join(format!("asset-sweeper{}", std::env::consts::EXE_SUFFIX));
    // The end-to-end tests' deploy (`cargo build --workspace --bins`) may link it again meanwhile, and cargo removes
    // the old file before it puts the new one in its place: missing for that moment, not for good.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !binary.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        binary.exists(),
        "{} is not built: run the tests with scripts/test (cargo test --workspace)",
        binary.display()
    );
    binary
}

/// Runs the binary with the functions' settings for `ctx` (AWS endpoint and credentials inherited).
pub(crate) fn run(db_url: &str, ctx: Option<&TestContext>, args: &[&str]) -> Output {
    run_with(db_url, ctx, &[], args)
}

/// [`run`] with some settings overridden.
pub(crate) fn run_with(db_url: &str, ctx: Option<&TestContext>, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut command = std::process::Command::new(binary());
    command.args(args).env("DATABASE_URL", db_url).env_remove("DATABASE_SECRET_ARN");
    if let Some(ctx) = ctx {
        command
            .env("CLEANUP_QUEUE_URL", &ctx.queue.url)
            .env("ASSET_BUCKET", &ctx.bucket)
            .env("S3_FORCE_PATH_STYLE", "true")
            .env("SCHEMA_QUIET_PERIOD", "0s")
            .env("RECORDS_NEW_RULE_DELAY", "0s");
    }
    command.envs(env.iter().copied());
    command.output().expect("the binary runs")
}

/// One pass of the real sweep, then the real consumer fed until the queue is empty; a message that fails every
/// delivery ends in the dead-letter queue.
async fn sweep_and_settle(ctx: &TestContext) {
    crate::pipeline::pass(ctx, &[]).await;
    crate::pipeline::deliver_all(ctx).await;
}

/// The dead-letter queue's messages: (visible, hidden).
async fn dlq_depth(ctx: &TestContext) -> (u64, u64) {
    let dlq = platform::queues::describe(&ctx.sqs, &ctx.queue.dlq_url).await.expect("the dead-letter queue");
    (dlq.depth.waiting, dlq.depth.in_flight)
}

/// Puts `body` straight on the dead-letter queue, as if SQS had moved it there.
async fn dead_letter(ctx: &TestContext, body: &str) {
    ctx.sqs.send_message().queue_url(&ctx.queue.dlq_url).message_body(body).send().await.expect("send to the DLQ");
}

/// Exit code and parsed JSON of a command that may report that a person is needed.
pub(crate) fn json_with_code(output: &Output) -> (Option<i32>, Value) {
    let parsed = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("JSON on stdout ({e}): {}", String::from_utf8_lossy(&output.stderr)));
    (output.status.code(), parsed)
}

const PRODUCTS: &str = "CREATE TABLE products (id serial PRIMARY KEY, hero uuid REFERENCES assets (id));
                        CREATE INDEX products_hero ON products (hero)";

/// The application's own guard, which makes every delete of a matching row fail: a poison message.
const LEGAL_HOLD: &str = "
    CREATE FUNCTION legal_hold() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION 'asset % is under legal hold', OLD.id; END $$;
    CREATE TRIGGER legal_hold BEFORE DELETE ON assets FOR EACH ROW
        WHEN (OLD.storage_key LIKE '%/held/%') EXECUTE FUNCTION legal_hold();";

pub(crate) fn stdout(output: &Output) -> String {
    assert!(output.status.success(), "failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout.clone()).expect("utf-8")
}

pub(crate) fn json(output: &Output) -> Value {
    serde_json::from_str(&stdout(output)).expect("JSON on stdout")
}

/// A refusal: exit code 2, nothing on stdout, one line on stderr.
pub(crate) fn refusal(output: &Output) -> String {
    assert_eq!(output.status.code(), Some(2), "stdout: {}", String::from_utf8_lossy(&output.stdout));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8(output.stderr.clone()).expect("utf-8");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    stderr
}

#[tokio::test]
async fn migrate_applies_every_migration_once_and_says_so() {
    let db = TestDatabase::unmigrated().await;
    let first = json(&run(&db.url, None, &["migrate", "--json"]));
    let count = migrator::migrator().iter().count() as u64;
    assert_eq!(first["applied"].as_u64(), Some(count));
    assert!(first["version"].as_i64().is_some_and(|v| v > 0));
    let again = stdout(&run(&db.url, None, &["migrate"]));
    assert!(again.starts_with("applied 0 migration(s); the schema is at version "), "{again}");

    let unreachable = refusal(&run("postgres://postgres@127.0.0.1:1/none", None, &["migrate"]));
    assert!(unreachable.contains("cannot reach the database at 127.0.0.1"), "{unreachable}");
}

/// `migrate` run by an owner that is not a superuser installs everything but the schema change detector (event
/// triggers need a superuser) and says so, in text and JSON; it used to say nothing. Once the owner may (on RDS,
/// `rds_superuser` granted), the next migrate installs the detector though no definition changed.
#[tokio::test]
async fn migrate_by_an_owner_that_is_not_a_superuser_says_it_installed_no_change_detector() {
    let db = TestDatabase::unmigrated().await;
    let owner =
        integration_tests::TestLogin::new(&db, &format!("GRANT CREATE ON DATABASE \"{}\" TO {{login}}", db.name)).await;
    let first = json(&run(&owner.url, None, &["migrate", "--json"]));
    assert_eq!(first["detector"], false, "{first}");
    let warning = first["warnings"][0].as_str().unwrap_or_default();
    assert!(warning.contains("no schema change detector") && warning.contains(&owner.name), "{first}");
    let text = stdout(&run(&owner.url, None, &["migrate"]));
    assert!(text.contains("\n  ~ no schema change detector"), "{text}");

    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("ALTER ROLE {} SUPERUSER", owner.name)))
        .execute(&db.pool)
        .await
        .expect("the owner may now");
    let again = json(&run(&owner.url, None, &["migrate", "--json"]));
    assert_eq!(
        (&again["applied"], &again["detector"], &again["warnings"]),
        (&json!(0), &json!(true), &json!([])),
        "{again}"
    );
    assert_eq!(again["definitions"], json!(["schema/sql/detector.sql"]), "installed though its text is unchanged");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("ALTER ROLE {} NOSUPERUSER", owner.name)))
        .execute(&db.pool)
        .await
        .expect("as it was");
}

#[tokio::test]
async fn approve_records_who_and_why_and_refuses_an_unknown_workspace() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    seed(&ctx, ws, "released", "3 days", &format!("{ws}/a.png")).await;
    let ws_arg = ws.to_string();
    let approved = json(&run(
        &ctx.db.url,
        None,
        &["approve", &ws_arg, "--by", "ana", "--reason", "catalog import rollback", "--hours", "2", "--json"],
    ));
    assert_eq!(approved["workspace_id"], ws_arg);
    assert_eq!(
        (approved["approved_by"].as_str(), approved["reason"].as_str()),
        (Some("ana"), Some("catalog import rollback"))
    );
    let (by, reason, hours): (String, String, f64) = sqlx::query_as(
        "SELECT approved_by, reason, extract(epoch FROM expires_at - approved_at)::float8 / 3600
           FROM brake_approvals WHERE id = $1",
    )
    .bind(approved["approval_id"].as_i64().expect("id"))
    .fetch_one(ctx.pool())
    .await
    .expect("the approval row");
    assert_eq!((by.as_str(), reason.as_str(), hours.round()), ("ana", "catalog import rollback", 2.0));

    let unknown = Uuid::new_v4().to_string();
    let refused = refusal(&run(&ctx.db.url, None, &["approve", &unknown, "--by", "ana", "--reason", "x"]));
    assert!(refused.contains("has no assets"), "{refused}");
    let malformed = refusal(&run(&ctx.db.url, None, &["approve", "acme", "--by", "ana", "--reason", "x"]));
    assert!(malformed.contains("\"acme\" is not a workspace id"), "{malformed}");
    let approvals: i64 =
        sqlx::query_scalar("SELECT count(*) FROM brake_approvals").fetch_one(ctx.pool()).await.expect("count");
    assert_eq!(approvals, 1, "a refusal records nothing");
}

#[tokio::test]
async fn restore_brings_a_retired_asset_back_and_refuses_after_its_purge_time() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let key = format!("{ws}/retired.png");
    // Seeded retired assets are past their purge time; this one is given ten more days.
    let restorable = seed(&ctx, ws, "retired", "20 days", &key).await;
    sqlx::query("UPDATE assets SET purge_after = now() + interval '10 days' WHERE id = $1")
        .bind(restorable)
        .execute(ctx.pool())
        .await
        .expect("purge time");
    let id = restorable.to_string();
    let restored = json(&run(&ctx.db.url, Some(&ctx), &["restore", &id, "--by", "ana", "--json"]));
    assert_eq!((restored["asset_id"].as_str(), restored["state"].as_str()), (Some(id.as_str()), Some("attached")));
    let state: String = sqlx::query_scalar("SELECT state FROM assets WHERE id = $1")
        .bind(restorable)
        .fetch_one(ctx.pool())
        .await
        .expect("state");
    assert_eq!(state, "attached");
    assert!(object_exists(&ctx.s3, &ctx.bucket, &key).await);

    let again = refusal(&run(&ctx.db.url, Some(&ctx), &["restore", &id, "--by", "ana"]));
    assert!(again.contains("is attached, not retired"), "{again}");
    let expired = seed(&ctx, ws, "retired", "40 days", &format!("{ws}/expired.png")).await.to_string();
    let late = refusal(&run(&ctx.db.url, Some(&ctx), &["restore", &expired, "--by", "ana"]));
    assert!(late.contains("too late to restore"), "{late}");
    let unknown = refusal(&run(&ctx.db.url, Some(&ctx), &["restore", &Uuid::new_v4().to_string(), "--by", "ana"]));
    assert!(unknown.contains("does not exist"), "{unknown}");
    let missing_settings = refusal(&run(&ctx.db.url, None, &["restore", &id, "--by", "ana"]));
    assert!(missing_settings.contains("CLEANUP_QUEUE_URL"), "{missing_settings}");
}

#[tokio::test]
async fn status_needs_a_person_until_a_good_pass_and_again_when_the_dlq_fills_and_redrive_empties_it() {
    // Its poison message must fail by the application's legal hold alone: a crash failpoint another test set on the
    // consumer's delete path (process-wide) once failed it first, with the wrong error.
    let _failpoints = integration_tests::FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    let url = ctx.db.url.clone();
    let (code, page) = json_with_code(&run(&url, Some(&ctx), &["status", "--json"]));
    assert_eq!(code, Some(1), "{page}");
    assert_eq!(page["needs_attention"], json!(["no pass has ever finished well"]));
    // Before any pass the census has read nothing, which is not everything.
    let text = String::from_utf8(run(&url, Some(&ctx), &["status"]).stdout).expect("utf-8");
    assert!(text.contains("census: no pass has read the schema yet\n"), "{text}");
    assert!(!text.contains("100% read"), "{text}");

    let ws = Uuid::new_v4();
    seed(&ctx, ws, "released", "3 days", &format!("{ws}/old.png")).await;
    sweep_and_settle(&ctx).await;
    let (code, page) = json_with_code(&run(&url, Some(&ctx), &["status", "--json"]));
    assert_eq!(code, Some(0), "{page}");
    assert_eq!(page["needs_attention"], json!([]));
    assert_eq!(page["runs"][0]["outcome"], "ok");
    assert_eq!(page["runs"][0]["enqueued"], 1);
    assert_eq!(page["last_day"], json!([{ "action": "retire", "assets": 1, "bytes": 100 }]));
    assert_eq!((page["backlog"]["due"].as_i64(), page["leased"].as_i64()), (Some(0), Some(0)));
    assert_eq!(page["schema"]["verdict"], "valid");
    assert_eq!(page["consumer_verdict"]["usable"], true, "{page}");
    assert_eq!(page["dead_letter_queue"], json!({ "waiting": 0, "in_flight": 0 }));
    let text = stdout(&run(&url, Some(&ctx), &["status"]));
    assert!(text.starts_with("asset-sweeper: OK\n"), "{text}");
    // These tests' functions connect as the superuser that migrated: said, though it waits for no one.
    let superuser: String = sqlx::query_scalar("SELECT current_user::text").fetch_one(ctx.pool()).await.expect("me");
    let warning = format!("~ the sweep connects as the superuser {superuser}: give each function a login of its own");
    assert!(text.contains(&warning), "{text}");
    assert_eq!(page["warnings"].as_array().map(Vec::len), Some(1), "{page}");
    // This application has no column the census reads: said as such, not as "100% (0 of 0)".
    assert!(text.contains("census: no column outside the reference sources could hold an asset id"), "{text}");

    // A poison message: every delivery fails, the last marks the asset failed, SQS dead-letters the message.
    sqlx::raw_sql(LEGAL_HOLD).execute(ctx.pool()).await.expect("legal hold");
    let held = seed(&ctx, ws, "abandoned", "8 days", &format!("{ws}/held/contract.pdf")).await;
    sweep_and_settle(&ctx).await;
    assert_eq!(state(&ctx, held).await.as_deref(), Some("failed"));
    let (code, page) = json_with_code(&run(&url, Some(&ctx), &["status", "--json"]));
    assert_eq!(code, Some(1), "{page}");
    assert_eq!(page["needs_attention"], json!(["the dead-letter queue holds 1 message(s)"]));
    assert_eq!(page["failed"]["count"], 1);
    assert!(page["failed"]["latest"][0]["last_error"].as_str().is_some_and(|e| e.contains("legal hold")), "{page}");
    let text = String::from_utf8(run(&url, Some(&ctx), &["status"]).stdout).expect("utf-8");
    assert!(text.contains("! the dead-letter queue holds 1 message(s)"), "{text}");

    let held_id = held.to_string();
    let (code, plan) = json_with_code(&run(&url, Some(&ctx), &["redrive", "--dry-run", "--json"]));
    assert_eq!(code, Some(0));
    assert_eq!(plan["messages"][0]["asset_id"], held_id.as_str());
    assert_eq!(plan["messages"][0]["outcome"], "failed: would be reset to retired, message would be moved back");
    assert_eq!(
        (plan["assets_reset"].as_u64(), plan["moved"].as_u64(), plan["left"].as_u64()),
        (Some(1), Some(1), Some(0))
    );
    assert_eq!(state(&ctx, held).await.as_deref(), Some("failed"), "a dry run changes nothing");

    let refused = refusal(&run(&url, Some(&ctx), &["redrive"]));
    assert!(refused.contains("--by"), "{refused}");
    let (code, done) = json_with_code(&run(&url, Some(&ctx), &["redrive", "--by", "ana", "--json"]));
    assert_eq!((code, done["assets_reset"].as_u64()), (Some(0), Some(1)), "{done}");
    assert_eq!((done["moved"].as_u64(), done["left"].as_u64()), (Some(1), Some(0)), "{done}");
    let (state_now, due_now, leased): (String, bool, bool) =
        sqlx::query_as("SELECT state, due_at <= now(), lease_token IS NOT NULL FROM assets WHERE id = $1")
            .bind(held)
            .fetch_one(ctx.pool())
            .await
            .expect("row");
    assert_eq!((state_now.as_str(), due_now, leased), ("retired", true, false), "claimable by the next pass");
    let recorded: Value =
        sqlx::query_scalar("SELECT evidence FROM settlement_events WHERE asset_id = $1 AND action = 'redrive'")
            .bind(held)
            .fetch_one(ctx.pool())
            .await
            .expect("the redrive is on record");
    assert_eq!(recorded["by"], "ana");
    assert_eq!(dlq_depth(&ctx).await, (0, 0), "the message left the dead-letter queue");
    assert_eq!(ctx.queue_depth().await, 1, "and is back on the cleanup queue");
}

#[tokio::test]
async fn plan_and_explain_judge_an_adopted_upload_read_only_and_say_what_a_settle_would_do() {
    let ctx = TestContext::new().await;
    let url = ctx.db.url.clone();
    let ws = Uuid::new_v4();
    let adopted = seed(&ctx, ws, "pending", "8 days", &format!("{ws}/adopted.png")).await;
    // Adopted bytes: the settle locks their sharers before destroying them; plan and explain read in a read-only
    // transaction, where a lock is an error.
    sqlx::query(
        "INSERT INTO adopted_assets (asset_id, storage_key, workspace_id, listing_id, last_modified, layout)
         SELECT id, storage_key, workspace_id, 1, created_at, 'layout' FROM assets WHERE id = $1",
    )
    .bind(adopted)
    .execute(ctx.pool())
    .await
    .expect("adopted");
    let later = seed(&ctx, ws, "released", "3 days", &format!("{ws}/later.png")).await;
    sqlx::query("UPDATE assets SET due_at = now() + interval '1 day' WHERE id = $1")
        .bind(later)
        .execute(ctx.pool())
        .await
        .expect("not due yet");

    // A first adoption is held by the brake until a person reads its plan; approved, the plan judges it.
    let (code, plan) = json_with_code(&run(&url, Some(&ctx), &["plan", "--json"]));
    assert_eq!(code, Some(0), "{plan}");
    assert!(plan["held"][0]["why"].as_str().is_some_and(|w| w.starts_with("first adoption")), "{plan}");
    let approved = run(&url, Some(&ctx), &["approve", &ws.to_string(), "--by", "ana", "--reason", "read the plan"]);
    let said = stdout(&approved);
    assert!(said.contains("of them adopted (bytes no row knew): 1: 0 named by a record by key"), "{said}");
    let (code, plan) = json_with_code(&run(&url, Some(&ctx), &["plan", "--json"]));
    assert_eq!(code, Some(0), "{plan}");
    let assets = plan["assets"].as_array().expect("assets");
    assert_eq!(assets.len(), 1, "only the due asset: {plan}");
    assert_eq!((&assets[0]["asset_id"], &assets[0]["decision"]), (&json!(adopted.to_string()), &json!("retire")));

    let (code, explained) = json_with_code(&run(&url, Some(&ctx), &["explain", &adopted.to_string(), "--json"]));
    assert_eq!((code, &explained["would"]), (Some(0), &json!("retire")), "{explained}");
    let (code, explained) = json_with_code(&run(&url, Some(&ctx), &["explain", &later.to_string(), "--json"]));
    assert_eq!((code, &explained["would"]), (Some(0), &json!("nothing: not due")), "{explained}");
    let text = stdout(&run(&url, Some(&ctx), &["explain", &later.to_string()]));
    assert!(text.contains("  a settle now would: nothing: not due\n"), "{text}");
    let events: i64 =
        sqlx::query_scalar("SELECT count(*) FROM settlement_events").fetch_one(ctx.pool()).await.expect("events");
    assert_eq!(events, 0, "plan and explain changed nothing");
}

#[tokio::test]
async fn plan_changes_nothing_explain_names_the_keeping_record_and_undelete_brings_a_deleted_asset_back() {
    let ctx = TestContext::new().await;
    let url = ctx.db.url.clone();
    sqlx::raw_sql(PRODUCTS).execute(ctx.pool()).await.expect("owner table");
    let ws = Uuid::new_v4();
    let kept = seed(&ctx, ws, "released", "3 days", &format!("{ws}/kept.png")).await;
    let retired = seed(&ctx, ws, "released", "3 days", &format!("{ws}/retired.png")).await;
    let deleted_key = format!("{ws}/abandoned.png");
    let deleted = seed(&ctx, ws, "abandoned", "8 days", &deleted_key).await;
    let expired_key = format!("{ws}/expired.png");
    let expired = seed(&ctx, ws, "abandoned", "8 days", &expired_key).await;
    sqlx::query("INSERT INTO products (hero) VALUES ($1)").bind(kept).execute(ctx.pool()).await.expect("reference");

    let (code, plan) = json_with_code(&run(&url, Some(&ctx), &["plan", "--json"]));
    assert_eq!(code, Some(0));
    assert_eq!((plan["claimed"].as_u64(), plan["bytes_freed"].as_i64()), (Some(4), Some(200)), "{plan}");
    let decision = |id: Uuid| {
        plan["assets"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["asset_id"] == id.to_string().as_str()))
            .map(|x| x["decision"].clone())
    };
    assert_eq!(
        [decision(kept), decision(retired), decision(deleted)],
        [Some(json!("keep")), Some(json!("retire")), Some(json!("delete"))]
    );
    let text = stdout(&run(&url, Some(&ctx), &["plan"]));
    assert!(text.contains(r#"by public.products.hero (foreign key) record {"id":1}"#), "{text}");
    let (events, leased): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM settlement_events), (SELECT count(*) FROM assets WHERE lease_token IS NOT NULL)",
    )
    .fetch_one(ctx.pool())
    .await
    .expect("counts");
    assert_eq!((events, leased), (0, 0), "plan changed nothing");

    sweep_and_settle(&ctx).await;
    let kept_id = kept.to_string();
    let (code, explained) = json_with_code(&run(&url, Some(&ctx), &["explain", &kept_id, "--json"]));
    assert_eq!(code, Some(0));
    assert_eq!(
        explained["kept_by"],
        json!([{ "source": "public.products.hero (foreign key)", "record": { "id": 1 } }])
    );
    assert_eq!(explained["row"]["state"], "attached");
    assert_eq!(explained["decisions"][0]["action"], "keep");
    assert_eq!(explained["decisions"][0]["evidence"]["record"], json!({ "id": 1 }));
    let text = stdout(&run(&url, Some(&ctx), &["explain", &kept_id]));
    assert!(text.contains(r#"kept by public.products.hero (foreign key) record {"id":1}"#), "{text}");
    let deleted_id = deleted.to_string();
    let text = stdout(&run(&url, Some(&ctx), &["explain", &deleted_id]));
    assert!(text.contains("no row any more") && text.contains(" delete "), "{text}");
    let unknown = refusal(&run(&url, Some(&ctx), &["explain", &Uuid::new_v4().to_string()]));
    assert!(unknown.contains("is unknown"), "{unknown}");

    // Undelete by storage key: bytes from the kept version, row from the audit record.
    assert!(!object_exists(&ctx.s3, &ctx.bucket, &deleted_key).await);
    let (code, undeleted) =
        json_with_code(&run(&url, Some(&ctx), &["undelete", &deleted_key, "--by", "ana", "--json"]));
    assert_eq!((code, undeleted["asset_id"].as_str()), (Some(0), Some(deleted_id.as_str())), "{undeleted}");
    assert!(undeleted["bytes_restored_from_version"].is_string());
    assert_eq!(state(&ctx, deleted).await.as_deref(), Some("attached"));
    assert!(object_exists(&ctx.s3, &ctx.bucket, &deleted_key).await);
    let again = refusal(&run(&url, Some(&ctx), &["undelete", &deleted_id, "--by", "ana"]));
    assert!(again.contains("exists (attached)"), "{again}");
    let retired_id = retired.to_string();
    let not_deleted = refusal(&run(&url, Some(&ctx), &["undelete", &retired_id, "--by", "ana"]));
    assert!(not_deleted.contains("no deleted or purged asset"), "{not_deleted}");

    // Once the bucket has let every version go, the bytes cannot come back, and nothing is written.
    let versions =
        ctx.s3.list_object_versions().bucket(&ctx.bucket).prefix(&expired_key).send().await.expect("versions");
    let ids = versions
        .versions()
        .iter()
        .map(|v| v.version_id())
        .chain(versions.delete_markers().iter().map(|m| m.version_id()));
    for id in ids.collect::<Vec<_>>() {
        ctx.s3
            .delete_object()
            .bucket(&ctx.bucket)
            .key(&expired_key)
            .set_version_id(id.map(str::to_owned))
            .send()
            .await
            .expect("expire");
    }
    let gone = refusal(&run(&url, Some(&ctx), &["undelete", &expired.to_string(), "--by", "ana"]));
    assert!(gone.contains("no longer keeps any version"), "{gone}");
    assert_eq!(state(&ctx, expired).await, None);
}

#[tokio::test]
async fn references_lists_every_source_with_its_verdict() {
    let ctx = TestContext::new().await;
    let url = ctx.db.url.clone();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "{PRODUCTS};
         CREATE TABLE pages (id serial PRIMARY KEY, body jsonb);
         CREATE INDEX pages_body ON pages USING gin (body);
         INSERT INTO asset_reference_sources (table_name, column_name, json_path) VALUES ('pages', 'body', '$.**');"
    )))
    .execute(ctx.pool())
    .await
    .expect("owner tables");
    // The JSON source has no guard yet: refused, with the command that installs it.
    let (code, map) = json_with_code(&run(&url, Some(&ctx), &["references", "--json"]));
    assert_eq!((code, map["verdict"].as_str()), (Some(1), Some("refused")), "{map}");
    assert_eq!(map["sources"][1]["guard"], "missing", "{map}");
    assert_eq!(map["sources"][1]["problems"][0]["install"], "asset-sweeper guards install", "{map}");
    let installed = json(&run(&url, Some(&ctx), &["guards", "install", "--json"]));
    assert_eq!(installed["installed"][0]["source"], "public.pages.body (jsonb $.**)", "{installed}");
    assert_eq!(installed["unguarded"], json!([]));
    let again = json(&run(&url, Some(&ctx), &["guards", "install", "--json"]));
    assert_eq!((&again["in_place"], &again["installed"]), (&installed["installed"], &json!([])), "idempotent");
    assert_eq!(again["removed"], json!([]));
    let (code, map) = json_with_code(&run(&url, Some(&ctx), &["references", "--json"]));
    assert_eq!((code, map["verdict"].as_str()), (Some(0), Some("valid")), "{map}");
    assert_eq!(map["sources"][0]["guard"], "foreign key");
    assert!(map["sources"][1]["guard"].as_str().is_some_and(|g| g.starts_with("asset_sweeper_guard_")), "{map}");
    assert_eq!(map["sources"][0]["table"], "products");
    assert_eq!(map["sources"][0]["kind"], "foreign_key");
    assert_eq!(map["sources"][0]["key_columns"], json!(["id"]));
    assert_eq!(map["sources"][1]["kind"], "json");
    assert!(map["sources"].as_array().is_some_and(|s| s.iter().all(|s| s["verdict"] == "ok")));

    sqlx::raw_sql("CREATE TABLE banners (id serial PRIMARY KEY, image uuid REFERENCES assets (id) ON DELETE CASCADE)")
        .execute(ctx.pool())
        .await
        .expect("a destructive key");
    // Refused needs a person: exit 1, so a script can gate on it, with the report printed all the same.
    let (code, map) = json_with_code(&run(&url, Some(&ctx), &["references", "--json"]));
    assert_eq!((code, map["verdict"].as_str()), (Some(1), Some("refused")), "{map}");
    let banners = map["sources"].as_array().and_then(|s| s.iter().find(|s| s["table"] == "banners")).expect("listed");
    assert_eq!(banners["verdict"], "refused");
    assert_eq!(banners["problems"][0]["problem"], "destructive_foreign_key");
    let output = run(&url, Some(&ctx), &["references"]);
    assert_eq!(output.status.code(), Some(1), "{}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8(output.stdout).expect("utf-8");
    assert!(text.starts_with("schema check: REFUSED"), "{text}");
    assert!(text.contains("foreign key public.banners.image -> assets is ON DELETE CASCADE"), "{text}");

    // ON DELETE SET NULL, as a large application's migrations often write it: the refusal names the statements that
    // fix it, and running them as written leaves the schema valid.
    sqlx::raw_sql(
        "CREATE INDEX ON banners (image);
         CREATE TABLE covers (id serial PRIMARY KEY, image uuid REFERENCES assets (id) ON DELETE SET NULL);
         CREATE INDEX ON covers (image);",
    )
    .execute(ctx.pool())
    .await
    .expect("a key that sets null");
    let (_, map) = json_with_code(&run(&url, Some(&ctx), &["references", "--json"]));
    let fixes: Vec<String> = map["sources"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["problems"].as_array().cloned().unwrap_or_default())
        .filter(|p| p["problem"] == "destructive_foreign_key")
        .filter_map(|p| p["fix"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(fixes.len(), 2, "{map}");
    let text = stdout_of(&run(&url, Some(&ctx), &["references"]));
    assert!(
        text.contains("public.covers.image -> assets is ON DELETE SET NULL: removing an asset row would change")
            && text.contains(r#"ALTER TABLE "public"."covers" DROP CONSTRAINT "covers_image_fkey""#),
        "{text}"
    );
    for fix in fixes {
        sqlx::raw_sql(sqlx::AssertSqlSafe(fix)).execute(ctx.pool()).await.expect("the fix as the refusal wrote it");
    }
    let (code, map) = json_with_code(&run(&url, Some(&ctx), &["references", "--json"]));
    assert_eq!((code, map["verdict"].as_str()), (Some(0), Some("valid")), "{map}");
}

/// What a command printed, whatever its exit code.
fn stdout_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A schema the census has not read yet: `references` names the first twenty unproven columns a line each, and how
/// many more; `--json` lists every one. Before, a large schema's columns came on one line of tens of kilobytes.
#[tokio::test]
async fn references_lists_the_first_unproven_columns_a_line_each() {
    let ctx = TestContext::new().await;
    let tables: String = (0..30)
        .map(|i| format!("CREATE TABLE notes_{i:02} (id int, body text); INSERT INTO notes_{i:02} VALUES (1, 'x');"))
        .collect();
    sqlx::raw_sql(sqlx::AssertSqlSafe(tables)).execute(ctx.pool()).await.expect("tables");
    let text = String::from_utf8(run(&ctx.db.url, Some(&ctx), &["references"]).stdout).expect("utf-8");
    assert!(text.contains("deletes and purges wait for the census to read 30 column(s) completely:\n"), "{text}");
    let listed: Vec<&str> = text.lines().filter(|l| l.starts_with("  - public.notes_")).collect();
    assert_eq!(listed.len(), 20, "{text}");
    assert!(text.contains("  … and 10 more (`asset-sweeper references --json` lists every one)"), "{text}");
    assert!(text.lines().all(|l| l.len() < 200), "{text}");
    let map = json_with_code(&run(&ctx.db.url, Some(&ctx), &["references", "--json"])).1;
    assert_eq!(map["unproven"].as_array().map(Vec::len), Some(30), "{map}");
}

/// A reader that stops early (`status | head -1`): the command exits as it would have, with no panic, where
/// `println!` panicked on the closed pipe.
#[tokio::test]
async fn status_into_a_pipe_its_reader_closed_exits_as_usual() {
    let ctx = TestContext::new().await;
    let expected = run(&ctx.db.url, Some(&ctx), &["status"]).status.code();
    let mut command = std::process::Command::new(binary());
    command
        .arg("status")
        .env("DATABASE_URL", &ctx.db.url)
        .env_remove("DATABASE_SECRET_ARN")
        .env("CLEANUP_QUEUE_URL", &ctx.queue.url)
        .env("ASSET_BUCKET", &ctx.bucket)
        .env("S3_FORCE_PATH_STYLE", "true")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = command.spawn().expect("the binary runs");
    // The reader goes away before the command has read the database, let alone written a line.
    drop(child.stdout.take());
    let output = child.wait_with_output().expect("it ends");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(output.status.code(), expected, "{stderr}");
}

/// An unreachable database is one line and exit 2: nothing can be shown. An unreadable queue is not: `status` shows
/// what the database says, names the queue's error, and exits 1 (it used to exit 2 with the queue's error alone).
#[tokio::test]
async fn an_unreachable_database_is_one_line_and_exit_2_and_an_unreadable_queue_leaves_the_rest_of_status() {
    let ctx = TestContext::new().await;
    let no_db = refusal(&run("postgres://postgres@127.0.0.1:1/none", Some(&ctx), &["status"]));
    assert!(no_db.contains("cannot reach the database at 127.0.0.1"), "{no_db}");
    let ws = Uuid::new_v4();
    seed(&ctx, ws, "released", "3 days", &format!("{ws}/due.png")).await;
    let missing = format!("{}-missing", ctx.queue.url);
    let no_queue = run_with(&ctx.db.url, Some(&ctx), &[("CLEANUP_QUEUE_URL", &missing)], &["status"]);
    let text = String::from_utf8_lossy(&no_queue.stdout);
    assert_eq!(no_queue.status.code(), Some(1), "{text}");
    assert!(text.contains("queue: unreadable: cannot read queue") && text.contains("-missing"), "{text}");
    assert!(text.contains("backlog: 1 due now"), "the database's half is shown: {text}");
    let (code, page) =
        json_with_code(&run_with(&ctx.db.url, Some(&ctx), &[("CLEANUP_QUEUE_URL", &missing)], &["status", "--json"]));
    assert_eq!((code, &page["queue"]), (Some(1), &Value::Null), "{page}");
    assert!(page["queue_error"].as_str().is_some_and(|e| e.contains("-missing")), "{page}");
    assert!(
        page["needs_attention"].as_array().is_some_and(|a| a
            .iter()
            .any(|n| n.as_str().is_some_and(|n| n.starts_with("the queues could not be read")))),
        "{page}"
    );
    let usage = refusal(&run(&ctx.db.url, Some(&ctx), &["explain"]));
    assert!(usage.contains("required arguments were not provided"), "{usage}");
}

#[tokio::test]
async fn redrive_leaves_messages_of_assets_it_did_not_reset() {
    let ctx = TestContext::new().await;
    let url = ctx.db.url.clone();
    let ws = Uuid::new_v4();
    let failed = seed(&ctx, ws, "released", "3 days", &format!("{ws}/failed.png")).await;
    sqlx::query("UPDATE assets SET state = 'failed', failed_at = now(), attempts = 5, last_error = 'x' WHERE id = $1")
        .bind(failed)
        .execute(ctx.pool())
        .await
        .expect("failed");
    let settled = seed(&ctx, ws, "released", "3 days", &format!("{ws}/settled.png")).await;
    let message = |asset: Uuid, workspace: Uuid| {
        CleanupMessage::new(AssetId(asset), WorkspaceId(workspace), Uuid::new_v4(), Uuid::new_v4()).to_body()
    };
    let of_failed = message(failed, ws);
    let of_settled = message(settled, ws);
    let of_unknown = message(Uuid::new_v4(), ws);
    // Names the failed asset, but not its workspace: the message is not trusted (invariant 7).
    let of_elsewhere = message(failed, Uuid::new_v4());
    let malformed = "{\"asset\": \"not a cleanup message\"}".to_owned();
    let left = [&of_settled, &of_unknown, &of_elsewhere, &malformed];
    for body in left.iter().copied().chain([&of_failed]) {
        dead_letter(&ctx, body).await;
    }
    let outcome = |report: &Value, asset: Option<Uuid>, body_of: &str| -> (bool, String) {
        let messages = report["messages"].as_array().expect("messages");
        let asset = asset.map_or(Value::Null, |a| json!(a.to_string()));
        let found: Vec<&Value> = messages.iter().filter(|m| m["asset_id"] == asset).collect();
        let m = found
            .iter()
            .find(|m| m["outcome"].as_str().is_some_and(|o| o.contains(body_of)))
            .unwrap_or_else(|| panic!("a message of {asset} saying {body_of:?}: {report}"));
        (m["moved"] == true, m["outcome"].as_str().unwrap_or_default().to_owned())
    };

    let check = |report: &Value, dry_run: bool| {
        assert_eq!(
            (report["assets_reset"].as_u64(), report["moved"].as_u64(), report["left"].as_u64()),
            (Some(1), Some(1), Some(4)),
            "{report}"
        );
        let reset = if dry_run { "would be reset to released" } else { "reset to released" };
        assert!(outcome(report, Some(failed), reset).0, "{report}");
        for (asset, why) in [
            (Some(settled), "released, not failed: stays on the dead-letter queue"),
            (None, "names no asset"),
            (Some(failed), "names workspace"),
        ] {
            assert!(!outcome(report, asset, why).0, "{report}");
        }
        let unknown = report["messages"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["outcome"].as_str().is_some_and(|o| o.starts_with("asset unknown"))))
            .expect("the unknown asset's message");
        assert_eq!(unknown["moved"], false, "{report}");
    };

    let (code, plan) = json_with_code(&run(&url, Some(&ctx), &["redrive", "--dry-run", "--json"]));
    assert_eq!(code, Some(0), "{plan}");
    check(&plan, true);
    let text = stdout(&run(&url, Some(&ctx), &["redrive", "--dry-run"]));
    assert!(text.starts_with("would move 1 message(s) from "), "{text}");
    assert!(text.contains("released, not failed: stays on the dead-letter queue"), "{text}");
    assert_eq!(state(&ctx, failed).await.as_deref(), Some("failed"), "a dry run changes nothing");
    assert_eq!(ctx.queue_depth().await, 0, "a dry run moves nothing");
    assert_eq!(dlq_depth(&ctx).await, (5, 0), "and leaves every message visible");

    let (code, done) = json_with_code(&run(&url, Some(&ctx), &["redrive", "--by", "ana", "--json"]));
    assert_eq!(code, Some(0), "{done}");
    check(&done, false);
    assert_eq!(state(&ctx, failed).await.as_deref(), Some("released"));
    assert_eq!(actions(&ctx, settled).await, Vec::<String>::new(), "an asset that is not failed is not touched");
    assert_eq!(ctx.drain_queue().await, vec![of_failed], "only the reset asset's message is moved back");
    assert_eq!(dlq_depth(&ctx).await, (4, 0), "the others stay, visible at once rather than after the hold");

    // Nothing left is failed: a second redrive moves nothing and still says why for each.
    let (code, again) = json_with_code(&run(&url, Some(&ctx), &["redrive", "--by", "ana", "--json"]));
    assert_eq!((code, again["moved"].as_u64(), again["left"].as_u64()), (Some(0), Some(0), Some(4)), "{again}");
    assert_eq!(ctx.queue_depth().await, 0);
    let mut still: Vec<String> = drain(&ctx.sqs, &ctx.queue.dlq_url).await;
    still.sort();
    let mut expected: Vec<String> = left.iter().map(|b| (*b).clone()).collect();
    expected.sort();
    assert_eq!(still, expected);
}

#[tokio::test]
async fn a_redriven_asset_settles_on_the_next_pass() {
    let ctx = TestContext::new().await;
    let url = ctx.db.url.clone();
    sqlx::raw_sql(LEGAL_HOLD).execute(ctx.pool()).await.expect("legal hold");
    let ws = Uuid::new_v4();
    let key = format!("{ws}/held/contract.pdf");
    let held = seed(&ctx, ws, "abandoned", "8 days", &key).await;
    sweep_and_settle(&ctx).await;
    assert_eq!(state(&ctx, held).await.as_deref(), Some("failed"));
    assert_eq!(dlq_depth(&ctx).await, (1, 0));

    // The person lifts the hold, then redrives: the asset goes back to `retired` (an abandoned upload is retired for
    // its trial before it is deleted), and neither the failed mark nor the reset restarted its grace period (both
    // are the sweeper's own writes).
    sqlx::raw_sql("DROP TRIGGER legal_hold ON assets; DROP FUNCTION legal_hold();")
        .execute(ctx.pool())
        .await
        .expect("hold lifted");
    let (code, done) = json_with_code(&run(&url, Some(&ctx), &["redrive", "--by", "ana", "--json"]));
    assert_eq!((code, done["moved"].as_u64(), done["assets_reset"].as_u64()), (Some(0), Some(1), Some(1)), "{done}");
    assert_eq!(state(&ctx, held).await.as_deref(), Some("retired"));

    // One pass: the moved message carries the old claim and settles nothing; the pass's new one deletes the
    // asset (its trial was over when it failed), rather than deferring it for a whole grace period.
    sweep_and_settle(&ctx).await;
    let trail = actions(&ctx, held).await;
    assert!(!trail.iter().any(|a| a == "defer"), "deferred: the grace floor moved: {trail:?}");
    assert_eq!(trail.last().map(String::as_str), Some("delete"), "{trail:?}");
    assert_eq!(state(&ctx, held).await, None);
    assert!(!object_exists(&ctx.s3, &ctx.bucket, &key).await, "deleted: the bytes are behind a delete marker");
    assert_eq!((ctx.queue_depth().await, dlq_depth(&ctx).await), (0, (0, 0)));
}

#[tokio::test]
async fn a_command_stuck_behind_an_application_lock_gives_up_after_the_lock_timeout() {
    let db = TestDatabase::new().await;
    // An application migration holding the assets table.
    let mut migration = db.pool.begin().await.expect("begin");
    sqlx::query("LOCK TABLE assets IN ACCESS EXCLUSIVE MODE").execute(&mut *migration).await.expect("lock");
    let ws = Uuid::new_v4().to_string();
    let started = Instant::now();
    let mut child = std::process::Command::new(binary())
        .args(["approve", &ws, "--by", "ana", "--reason", "x"])
        .env("DATABASE_URL", &db.url)
        .env_remove("DATABASE_SECRET_ARN")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary runs");
    // Without a lock timeout it would wait for as long as the lock is held: give up well past the CLI's own.
    let deadline = started + platform::db::LOCK_TIMEOUT * 4;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still waiting for the lock after {:?}", started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let waited = started.elapsed();
    let output = child.wait_with_output().expect("output");
    migration.rollback().await.expect("rollback");
    let stderr = refusal(&output);
    assert!(stderr.contains("lock timeout"), "{stderr}");
    assert!(waited >= platform::db::LOCK_TIMEOUT - Duration::from_secs(1), "gave up after {waited:?}");
}

/// Removes every version of `key` and every delete marker: bytes gone past any undo.
async fn destroy_every_version(ctx: &TestContext, key: &str) {
    let listed = ctx.s3.list_object_versions().bucket(&ctx.bucket).prefix(key).send().await.expect("versions");
    let ids =
        listed.versions().iter().map(|v| v.version_id()).chain(listed.delete_markers().iter().map(|m| m.version_id()));
    for id in ids.collect::<Vec<_>>() {
        let id = id.map(str::to_owned);
        ctx.s3.delete_object().bucket(&ctx.bucket).key(key).set_version_id(id).send().await.expect("destroy");
    }
}

/// The evidence of the newest `action` event of an asset.
async fn evidence(ctx: &TestContext, id: Uuid, action: &str) -> Value {
    sqlx::query_scalar(
        "SELECT evidence FROM settlement_events WHERE asset_id = $1 AND action = $2 ORDER BY id DESC LIMIT 1",
    )
    .bind(id)
    .bind(action)
    .fetch_one(ctx.pool())
    .await
    .expect("evidence")
}

#[tokio::test]
async fn undoing_a_run_brings_back_what_it_retired_deleted_and_purged_asset_by_asset() {
    let ctx = TestContext::new().await;
    let url = ctx.db.url.clone();
    let ws = Uuid::new_v4();
    let key = |name: &str| format!("{ws}/{name}.png");
    let retired = [
        seed(&ctx, ws, "released", "3 days", &key("r1")).await,
        seed(&ctx, ws, "released", "3 days", &key("r2")).await,
    ];
    let deleted = seed(&ctx, ws, "abandoned", "8 days", &key("abandoned")).await;
    let purged = seed(&ctx, ws, "retired", "40 days", &key("expired")).await;
    let lost = seed(&ctx, ws, "abandoned", "8 days", &key("lost")).await;
    sweep_and_settle(&ctx).await;
    let runs: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM sweep_runs").fetch_all(ctx.pool()).await.expect("runs");
    let [run] = runs.as_slice() else { panic!("one pass: {runs:?}") };
    let run = run.to_string();
    destroy_every_version(&ctx, &key("lost")).await;

    // A dry run says what would come back and changes nothing.
    let (code, dry) =
        json_with_code(&run_cmd(&url, &ctx, &["restore", "--run", &run, "--by", "ana", "--dry-run", "--json"]));
    assert_eq!((code, dry["brought_back"].as_u64(), dry["refused"].as_u64()), (Some(0), Some(2), Some(0)), "{dry}");
    assert_eq!(state(&ctx, retired[0]).await.as_deref(), Some("retired"));

    let restored = json(&run_cmd(&url, &ctx, &["restore", "--run", &run, "--by", "ana", "--json"]));
    assert_eq!(restored["brought_back"].as_u64(), Some(2), "{restored}");
    for id in retired {
        assert_eq!(state(&ctx, id).await.as_deref(), Some("attached"));
        assert_eq!(evidence(&ctx, id, "restore").await["undoing_run"].as_str(), Some(run.as_str()));
    }
    let again = json(&run_cmd(&url, &ctx, &["restore", "--run", &run, "--by", "ana", "--json"]));
    assert_eq!((again["brought_back"].as_u64(), again["skipped"].as_u64()), (Some(0), Some(2)), "{again}");

    // The lost asset cannot come back: it is refused on its own, and the run needs a person (exit 1).
    let (code, dry) =
        json_with_code(&run_cmd(&url, &ctx, &["undelete", "--run", &run, "--by", "ana", "--dry-run", "--json"]));
    assert_eq!((code, dry["brought_back"].as_u64(), dry["refused"].as_u64()), (Some(1), Some(2), Some(1)), "{dry}");
    assert_eq!(state(&ctx, deleted).await, None, "a dry run writes nothing");
    let (code, undone) = json_with_code(&run_cmd(&url, &ctx, &["undelete", "--run", &run, "--by", "ana", "--json"]));
    assert_eq!(
        (code, undone["brought_back"].as_u64(), undone["refused"].as_u64()),
        (Some(1), Some(2), Some(1)),
        "{undone}"
    );
    let refused: Vec<&Value> =
        undone["assets"].as_array().expect("assets").iter().filter(|a| a["outcome"] == "refused").collect();
    assert_eq!(refused[0]["asset_id"].as_str(), Some(lost.to_string().as_str()));
    assert!(refused[0]["detail"].as_str().is_some_and(|d| d.contains("no longer keeps any version")), "{undone}");
    for (id, name) in [(deleted, "abandoned"), (purged, "expired")] {
        assert_eq!(state(&ctx, id).await.as_deref(), Some("attached"));
        assert!(object_exists(&ctx.s3, &ctx.bucket, &key(name)).await, "{name}'s bytes are back");
        assert_eq!(evidence(&ctx, id, "undelete").await["undoing_run"].as_str(), Some(run.as_str()));
    }
    assert_eq!(state(&ctx, lost).await, None);

    let unknown = refusal(&run_cmd(&url, &ctx, &["undelete", "--run", &Uuid::new_v4().to_string(), "--by", "ana"]));
    assert!(unknown.contains("no sweep pass"), "{unknown}");
    let both = refusal(&run_cmd(&url, &ctx, &["restore", &retired[0].to_string(), "--run", &run, "--by", "ana"]));
    assert!(both.contains("cannot be used with"), "{both}");
}

fn run_cmd(db_url: &str, ctx: &TestContext, args: &[&str]) -> Output {
    run(db_url, Some(ctx), args)
}

#[tokio::test]
async fn status_estimates_when_the_backlog_is_done_and_names_the_dashboard() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    for n in 0..3 {
        seed(&ctx, ws, "released", "3 days", &format!("{ws}/settled-{n}.png")).await;
    }
    sweep_and_settle(&ctx).await;
    let args = ["status", "--dashboard", "prod-asset-sweeper", "--json"];
    let (_, page) = json_with_code(&run(&ctx.db.url, Some(&ctx), &args));
    assert_eq!(page["backlog"]["empty_in_seconds"], Value::Null, "nothing waits: {page}");
    assert_eq!(page["dashboard"], "prod-asset-sweeper");

    for n in 0..4 {
        seed(&ctx, ws, "released", "3 days", &format!("{ws}/waiting-{n}.png")).await;
    }
    let (_, page) = json_with_code(&run(&ctx.db.url, Some(&ctx), &args));
    // Three settled in the last 15 minutes: four more take 4 / (3 / 900 s) = 1200 s.
    assert_eq!(page["backlog"]["settled_last_15_min"], 3, "{page}");
    assert_eq!(page["backlog"]["empty_in_seconds"], 1200, "{page}");
    let text = stdout(&run(&ctx.db.url, Some(&ctx), &["status", "--dashboard", "prod-asset-sweeper"]));
    assert!(text.contains("the 4 due or queued are done in about 20m"), "{text}");
    assert!(text.contains("dashboard: prod-asset-sweeper"), "{text}");
}

#[tokio::test]
async fn discover_dry_run_shows_what_discovery_would_find_and_explain_shows_the_discovered_event() {
    let ctx = TestContext::new().await;
    let url = ctx.db.url.clone();
    sqlx::raw_sql(PRODUCTS).execute(ctx.pool()).await.expect("products");
    let ws = Uuid::new_v4();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let id = seed(&ctx, ws, "attached", "3 days", &format!("{ws}/{}.png", Uuid::new_v4())).await;
        sqlx::query("UPDATE assets SET due_at = NULL WHERE id = $1")
            .bind(id)
            .execute(ctx.pool())
            .await
            .expect("unscheduled");
        sqlx::query("INSERT INTO products (hero) VALUES ($1)").bind(id).execute(ctx.pool()).await.expect("owner");
        ids.push(id);
    }
    // The application deletes one product with plain SQL and releases nothing.
    sqlx::query("DELETE FROM products WHERE hero = $1").bind(ids[1]).execute(ctx.pool()).await.expect("delete");

    let refused = run(&url, Some(&ctx), &["discover"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(refusal(&refused).contains("--dry-run"), "{}", refusal(&refused));
    let preview = json(&run(&url, Some(&ctx), &["--json", "discover", "--dry-run"]));
    assert_eq!(preview["scanned"], 3);
    let found: Vec<&str> =
        preview["found"].as_array().expect("found").iter().filter_map(|f| f["asset_id"].as_str()).collect();
    assert_eq!(found, [ids[1].to_string()]);
    assert_eq!(preview["per_workspace"][ws.to_string()]["assets"], 1);
    let text = stdout(&run(&url, Some(&ctx), &["discover", "--dry-run"]));
    assert!(text.contains("discovery would make 1 of 3 asset(s) looked at due"), "{text}");
    assert_eq!(state(&ctx, ids[1]).await.as_deref(), Some("attached"), "a dry run changes nothing");
    assert!(actions(&ctx, ids[1]).await.is_empty());

    sweep_and_settle(&ctx).await;
    assert_eq!(actions(&ctx, ids[1]).await, ["discovered", "retire"]);
    let explained = stdout(&run(&url, Some(&ctx), &["explain", &ids[1].to_string()]));
    assert!(explained.contains("discovered"), "{explained}");
    assert!(explained.contains("nobody released it and no source referred to it (1 source(s) asked"), "{explained}");
    let status = json_with_code(&run(&url, Some(&ctx), &["--json", "status"])).1;
    let discovery = &status["discovery"];
    assert_eq!((&discovery["enabled"], &discovery["standing"]["cycle"]), (&json!(true), &json!(2)));
    assert_eq!(discovery["standing"]["last_cycle_found"], 1);
    let status_text = String::from_utf8(run(&url, Some(&ctx), &["status"]).stdout).expect("utf-8");
    assert!(status_text.contains("discovery: cycle 2 not started: it begins 1h after the last ended"), "{status_text}");
    assert!(status_text.contains("found 1"), "{status_text}");
}

#[tokio::test]
async fn reconcile_dry_run_writes_nothing_then_a_recorded_lost_asset_makes_status_ask_for_a_person() {
    let ctx = TestContext::new().await;
    let url = ctx.db.url.clone();
    let ws = Uuid::new_v4();
    seed(&ctx, ws, "attached", "3 days", &format!("{ws}/kept.png")).await;
    let orphan = format!("{ws}/nobody-knows.png");
    integration_tests::fixtures::put_bytes(&ctx.s3, &ctx.bucket, &orphan, b"twelve bytes").await;
    let (lost, lost_key) = crate::reconcile::row_without_bytes(&ctx, ws, "attached").await;
    let prefixes = format!("{ws}/");
    let layout = [("RECONCILE_PREFIXES", prefixes.as_str()), ("RECONCILE_KEY_PATTERN", crate::reconcile::PATTERN)];

    let unset = refusal(&run(&url, Some(&ctx), &["reconcile", "--dry-run"]));
    assert!(unset.contains("set RECONCILE_PREFIXES and RECONCILE_KEY_PATTERN"), "{unset}");

    let dry = run_with(&url, Some(&ctx), &layout, &["reconcile", "--dry-run"]);
    assert_eq!(dry.status.code(), Some(1), "a lost asset needs a person");
    let text = String::from_utf8_lossy(&dry.stdout);
    assert!(text.contains("bytes no row knows: 1 key(s), 12 bytes"), "{text}");
    assert!(text.contains(&orphan) && text.contains(&lost_key), "{text}");
    assert!(text.contains("rows whose bytes are gone: 1 asset(s)"), "{text}");
    assert!(text.trim_end().ends_with("dry run: nothing was written"), "{text}");
    let written: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM reconcile_listings) + (SELECT count(*) FROM lost_assets)
              + (SELECT count(*) FROM settlement_events)",
    )
    .fetch_one(ctx.pool())
    .await
    .expect("counts");
    assert_eq!(written, 0, "a dry run writes nothing");

    let (code, recorded) = json_with_code(&run_with(&url, Some(&ctx), &layout, &["--json", "reconcile"]));
    assert_eq!(code, Some(1));
    assert_eq!(recorded["newly_lost"], 1, "{recorded}");
    assert_eq!(recorded["unknown_keys"], 1, "{recorded}");
    assert_eq!(recorded["findings"]["lost"][0]["asset_id"], lost.to_string(), "{recorded}");

    let (code, page) = json_with_code(&run_with(&url, Some(&ctx), &layout, &["status", "--json"]));
    assert_eq!(code, Some(1), "{page}");
    let attention = page["needs_attention"].to_string();
    assert!(attention.contains("1 asset(s) have lost their bytes"), "{attention}");
    assert_eq!(page["reconciliation"]["standing"]["lost"], 1, "{page}");
    assert_eq!(page["reconciliation"]["standing"]["last"]["unknown_keys"], 1, "{page}");
    let text = String::from_utf8_lossy(&run_with(&url, Some(&ctx), &layout, &["status"]).stdout).into_owned();
    assert!(text.contains("1 key(s), 12 bytes no row knows; 1 asset(s) lost"), "{text}");
    assert!(text.contains(&format!("lost: {lost} {lost_key}")), "{text}");
    let explained = stdout(&run(&url, Some(&ctx), &["explain", &lost.to_string()]));
    assert!(explained.contains("lost"), "{explained}");
}

#[tokio::test]
async fn a_prefix_is_approved_only_if_managed_and_nothing_is_adopted_before_then_the_next_reconciliation_adopts() {
    let ctx = TestContext::new().await;
    let url = ctx.db.url.clone();
    let ws = Uuid::new_v4();
    let orphan = format!("{ws}/written-in-2025.png");
    integration_tests::fixtures::put_bytes(&ctx.s3, &ctx.bucket, &orphan, b"twelve bytes").await;
    let rows = vec![crate::reconcile::row(&ctx.bucket, &orphan, true, false, 12, "2025-01-01T00:00:00.000Z")];
    let folder = format!("inventory/{}/daily/", ctx.bucket);
    let manifest = crate::reconcile::put_report(&ctx, &folder, "2026-11-30T00-00Z", &rows, None).await;
    let location = format!("s3://{}/{manifest}", ctx.bucket);
    let prefix = format!("{ws}/");
    let layout = [("RECONCILE_PREFIXES", prefix.as_str()), ("RECONCILE_KEY_PATTERN", crate::reconcile::PATTERN)];
    let reconcile = |dry: bool| {
        let mut args = vec!["--json", "reconcile", "--inventory", location.as_str()];
        if dry {
            args.push("--dry-run");
        }
        json_with_code(&run_with(&url, Some(&ctx), &layout, &args))
    };
    let approve = ["approve", "--prefix", prefix.as_str(), "--by", "ops@example.com", "--reason", "read the report"];
    let adopted = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM adopted_assets").fetch_one(ctx.pool()).await.expect("count")
    };

    let unset = refusal(&run(&url, Some(&ctx), &approve));
    assert!(unset.contains("nothing to approve: set RECONCILE_PREFIXES"), "{unset}");
    let elsewhere = ["approve", "--prefix", "exports/", "--by", "ops@example.com", "--reason", "read the report"];
    let unmanaged = refusal(&run_with(&url, Some(&ctx), &layout, &elsewhere));
    assert!(unmanaged.contains("\"exports/\" is not a managed prefix"), "{unmanaged}");
    let text = String::from_utf8_lossy(
        &run_with(&url, Some(&ctx), &layout, &["reconcile", "--inventory", &location, "--dry-run"]).stdout,
    )
    .into_owned();
    assert!(text.contains(&format!("AWAITING APPROVAL prefix {prefix:?}")), "{text}");
    let unread = refusal(&run_with(&url, Some(&ctx), &layout, &approve));
    assert!(
        unread.contains("no recorded reconciliation has reported"),
        "a dry run records nothing to bind to: {unread}"
    );

    let (code, recorded) = reconcile(false);
    assert_eq!(code, Some(1), "a prefix awaiting approval needs a person: {recorded}");
    assert_eq!(recorded["findings"]["awaiting_approval"], serde_json::json!([prefix]), "{recorded}");
    assert_eq!(adopted().await, 0, "nothing is adopted on a prefix before its approval");

    let approved = stdout(&run_with(&url, Some(&ctx), &layout, &approve));
    assert!(approved.contains("approved for adoption") && approved.contains("found 1 key(s)"), "{approved}");
    assert!(approved.contains("12 bytes") && approved.contains(&orphan), "the keys it approves: {approved}");
    let (_, dry) = reconcile(true);
    assert_eq!(dry["findings"]["adopted"][0]["keys"], 1, "{dry}");
    assert_eq!(adopted().await, 0, "a dry run shows what it would adopt and writes nothing");
    let (_, recorded) = reconcile(false);
    assert_eq!(recorded["findings"]["adopted"][0]["keys"], 1, "{recorded}");
    assert_eq!(recorded["findings"]["awaiting_approval"], serde_json::json!([]), "{recorded}");
    assert_eq!(adopted().await, 1);
    let page = String::from_utf8_lossy(&run_with(&url, Some(&ctx), &layout, &["status"]).stdout).into_owned();
    assert!(page.contains("adopted: 1 object(s) no row knew wait for the pipeline"), "{page}");
}

#[tokio::test]
async fn guards_install_and_references_need_only_the_database_and_name_a_bad_setting_of_their_own() {
    let db = TestDatabase::new().await;
    sqlx::raw_sql("CREATE TABLE banners (id serial PRIMARY KEY, image asset_id); CREATE INDEX ON banners (image)")
        .execute(&db.pool)
        .await
        .expect("an asset_id source");
    // No queue, no bucket: blank counts as unset, whatever the environment the tests run in holds.
    let without = [("CLEANUP_QUEUE_URL", ""), ("ASSET_BUCKET", "")];
    let installed = json(&run_with(&db.url, None, &without, &["guards", "install", "--json"]));
    assert_eq!(installed["installed"][0]["source"], "public.banners.image (asset_id)", "{installed}");
    assert_eq!(installed["unguarded"], json!([]));
    // No schema check runs before it (the guards need only the catalog), so none of its settings is read.
    let bad = [("CLEANUP_QUEUE_URL", ""), ("ASSET_BUCKET", ""), ("UNINDEXED_SOURCES", "maybe")];
    let again = json(&run_with(&db.url, None, &bad, &["guards", "install", "--json"]));
    assert_eq!(again["in_place"], installed["installed"], "{again}");
    // `references` is a check of the schema, and needs no more.
    let (code, map) = json_with_code(&run_with(&db.url, None, &without, &["references", "--json"]));
    assert_eq!((code, map["verdict"].as_str()), (Some(0), Some("valid")), "{map}");
    let stderr = refusal(&run_with(&db.url, None, &bad, &["references"]));
    assert!(
        stderr.contains("UNINDEXED_SOURCES must be refuse or warn") && !stderr.contains("ASSET_BUCKET"),
        "{stderr}"
    );
}

/// `guards install` as a deploy script runs it beside a busy application: a table whose lock an open transaction
/// holds is tried a few times briefly and then named, the other tables get their guards, and the application's
/// writes to them never wait behind the busy one (one transaction for every table made them wait, then failed
/// without naming it). A run that changes nothing changes no schema: the change detector's generation stays.
#[tokio::test]
async fn guards_install_takes_a_table_at_a_time_names_the_one_it_could_not_lock_and_holds_no_other() {
    let db = TestDatabase::new().await;
    sqlx::raw_sql(
        "CREATE TABLE a_banners (id serial PRIMARY KEY, image asset_id); CREATE INDEX ON a_banners (image);
         CREATE TABLE z_busy (id serial PRIMARY KEY, image asset_id); CREATE INDEX ON z_busy (image);",
    )
    .execute(&db.pool)
    .await
    .expect("two asset_id sources");
    // The application's transaction that wrote to z_busy and has not committed.
    let mut busy = db.pool.begin().await.expect("a transaction");
    sqlx::query("INSERT INTO z_busy (image) VALUES (NULL)").execute(&mut *busy).await.expect("a write");
    let url = db.url.clone();
    let install = tokio::task::spawn_blocking(move || {
        let args = ["guards", "install", "--json", "--lock-timeout", "700ms", "--attempts", "3"];
        run_with(&url, None, &[("CLEANUP_QUEUE_URL", ""), ("ASSET_BUCKET", "")], &args)
    });
    // Once the install waits for z_busy, the application writes to a_banners with no patience at all.
    let waiting = Instant::now();
    loop {
        let queued: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE relation = 'z_busy'::regclass AND NOT granted)",
        )
        .fetch_one(&db.pool)
        .await
        .expect("locks");
        if queued {
            break;
        }
        assert!(waiting.elapsed() < Duration::from_secs(30), "the install never asked for z_busy's lock");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut app = db.pool.begin().await.expect("a transaction");
    sqlx::raw_sql("SET LOCAL lock_timeout = '100ms'; INSERT INTO a_banners (image) VALUES (NULL)")
        .execute(&mut *app)
        .await
        .expect("a write to another table does not wait for the busy one");
    app.commit().await.expect("commit");
    let output = install.await.expect("the install ran");
    let (code, report) = json_with_code(&output);
    assert_eq!(code, Some(1), "a table left unguarded needs a person: {report}");
    assert_eq!(report["installed"][0]["source"], "public.a_banners.image (asset_id)", "{report}");
    assert_eq!(report["blocked"][0]["table"], "public.z_busy", "{report}");
    let reason = report["blocked"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("3 tries of 700ms") && reason.contains("guards install"), "{reason}");
    assert_eq!(report["unguarded"][0]["table"], "z_busy", "{report}");
    let once = run_with(&db.url, None, &[], &["guards", "install", "--lock-timeout", "1ms", "--attempts", "1"]);
    let text = String::from_utf8_lossy(&once.stdout);
    assert_eq!(once.status.code(), Some(1), "{text}");
    assert!(text.contains("! public.z_busy: not changed"), "named in the text too: {text}");
    busy.rollback().await.expect("the application's transaction ends");

    let done = json(&run_with(&db.url, None, &[], &["guards", "install", "--json"]));
    assert_eq!(done["installed"][0]["source"], "public.z_busy.image (asset_id)", "{done}");
    assert_eq!(done["in_place"][0]["source"], "public.a_banners.image (asset_id)", "{done}");
    let generation = || async {
        let g: i64 = sqlx::query_scalar("SELECT asset_sweeper.asset_sweeper_schema_generation()")
            .fetch_one(&db.pool)
            .await
            .expect("the generation");
        g
    };
    let before = generation().await;
    let idle = json(&run_with(&db.url, None, &[], &["guards", "install", "--json"]));
    assert_eq!((idle["installed"].clone(), idle["in_place"].as_array().map(Vec::len)), (json!([]), Some(2)), "{idle}");
    assert_eq!(generation().await, before, "a run that changes nothing is no schema change");
}

/// Wagtail's image table, as its migrations create it: the file column holds a name relative to the storage root.
const WAGTAIL_IMAGES: &str = "CREATE TABLE wagtailimages_image (
    id serial PRIMARY KEY, title varchar(255) NOT NULL, file varchar(100) NOT NULL, width integer NOT NULL,
    height integer NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), file_size integer, file_hash varchar(40))";

/// The CMS site of the issue, as a new team adopts it: its rows name files relative to `media/`, so nothing names
/// them by key. The approval is refused, naming the column and the key source that fixes it; an override is
/// recorded; once the key source is declared, the figures say so and the approval needs no override.
#[tokio::test]
async fn an_adoption_named_only_relative_to_a_root_is_refused_with_the_key_source_that_fixes_it() {
    let ctx = TestContext::new().await;
    let url = ctx.db.url.clone();
    sqlx::raw_sql(WAGTAIL_IMAGES).execute(ctx.pool()).await.expect("wagtail's table");
    let live: Vec<String> = (0..4).map(|i| format!("original_images/photo-{i}.png")).collect();
    for name in &live {
        sqlx::query("INSERT INTO wagtailimages_image (title, file, width, height) VALUES ('a photo', $1, 800, 600)")
            .bind(name)
            .execute(ctx.pool())
            .await
            .expect("an image");
    }
    let keys: Vec<String> =
        live.iter().map(|n| format!("media/{n}")).chain(["media/original_images/orphan.png".to_owned()]).collect();
    let rows: Vec<String> = keys
        .iter()
        .map(|k| crate::reconcile::row(&ctx.bucket, k, true, false, 12, "2025-01-01T00:00:00.000Z"))
        .collect();
    let folder = format!("inventory/{}/daily/", ctx.bucket);
    let manifest = crate::reconcile::put_report(&ctx, &folder, "2026-11-30T00-00Z", &[rows.concat()], None).await;
    let location = format!("s3://{}/{manifest}", ctx.bucket);
    let layout = [("RECONCILE_PREFIXES", "media/"), ("RECONCILE_KEY_PATTERN", "media/.+")];
    let reconcile =
        || json_with_code(&run_with(&url, Some(&ctx), &layout, &["--json", "reconcile", "--inventory", &location]));
    let approve = |extra: &[&str]| {
        let mut args = vec!["approve", "--prefix", "media/", "--by", "ops@example.com", "--reason", "read the report"];
        args.extend_from_slice(extra);
        run_with(&url, Some(&ctx), &layout, &args)
    };
    let declaration = "INSERT INTO asset_sweeper.asset_key_sources (table_schema, table_name, template) VALUES \
                       ('public', 'wagtailimages_image', 'media/{file}');";

    let (code, recorded) = reconcile();
    assert_eq!(code, Some(1), "{recorded}");
    let naming = &recorded["findings"]["naming"];
    assert_eq!(naming["prefixes"][0]["unknown"], 5, "{naming}");
    assert_eq!(
        (&naming["prefixes"][0]["relative"], &naming["prefixes"][0]["unnamed"]),
        (&json!(4), &json!(1)),
        "{naming}"
    );
    assert_eq!(naming["suggestions"][0]["declaration"], declaration, "{naming}");
    let text = String::from_utf8_lossy(
        &run_with(&url, Some(&ctx), &layout, &["reconcile", "--inventory", &location, "--dry-run"]).stdout,
    )
    .into_owned();
    assert!(
        text.contains("prefix \"media/\": 5 key(s): 0 named by a key source, 0 by key, 4 only relative to a root, 1 by nothing read"),
        "{text}"
    );
    assert!(text.contains("UNDECLARED KEY SOURCE public.wagtailimages_image.file names 4 key(s)"), "{text}");

    // Refused, by name, with the declaration that fixes it; a dry run says the same and records nothing.
    let refused = refusal(&approve(&[]));
    assert!(refused.contains("5 of the 5 keys no row knows under \"media/\" are named by no key source"), "{refused}");
    assert!(refused.contains("public.wagtailimages_image.file holds values that end like 4 of them"), "{refused}");
    assert!(refused.contains(declaration) && refused.contains("--despite-unnamed"), "{refused}");
    let dry = approve(&["--dry-run"]);
    assert_eq!(dry.status.code(), Some(1));
    let dry = String::from_utf8_lossy(&dry.stdout).into_owned();
    assert!(dry.contains("REFUSED: ") && dry.contains("4 only relative to a root"), "{dry}");
    let approved: Option<bool> =
        sqlx::query_scalar("SELECT approved_at IS NOT NULL FROM reconcile_prefixes WHERE prefix = 'media/'")
            .fetch_optional(ctx.pool())
            .await
            .expect("prefix");
    assert_ne!(approved, Some(true), "nothing approved");

    // A person who read it may override, and the record says so, with the figures read.
    let overridden = approve(&["--despite-unnamed"]);
    assert_eq!(overridden.status.code(), Some(0), "{}", String::from_utf8_lossy(&overridden.stderr));
    let (despite, naming): (bool, Value) = sqlx::query_as(
        "SELECT approved_despite_unnamed, approved_naming FROM reconcile_prefixes WHERE prefix = 'media/'",
    )
    .fetch_one(ctx.pool())
    .await
    .expect("the approval");
    assert!(despite);
    assert_eq!((&naming["relative"], &naming["unnamed"]), (&json!(4), &json!(1)), "{naming}");

    // Declared (with the index the check asks for), the key source names the four, and nothing is refused.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("{declaration} CREATE INDEX ON wagtailimages_image (file);")))
        .execute(ctx.pool())
        .await
        .expect("declared");
    let (_, recorded) = reconcile();
    let figures = &recorded["findings"]["naming"]["prefixes"][0];
    assert_eq!((&figures["by_key_source"], &figures["unnamed"]), (&json!(4), &json!(1)), "{figures}");
    assert_eq!(recorded["findings"]["naming"]["suggestions"], json!([]), "{recorded}");
    assert_eq!(
        recorded["findings"]["naming"]["key_sources"][0],
        json!({"source": "public.wagtailimages_image media/{file}", "keys": 4}),
        "{recorded}"
    );
    // `references` lists the key source with what it names; `status` the newest figures.
    let listed = String::from_utf8_lossy(&run_with(&url, Some(&ctx), &layout, &["references"]).stdout).into_owned();
    assert!(
        listed.contains(
            "key source public.wagtailimages_image media/{file}: names 4 stored object(s) and 4 key(s) no row knew in \
             the newest reconciliation"
        ),
        "{listed}"
    );
    let page = String::from_utf8_lossy(&run_with(&url, Some(&ctx), &layout, &["status"]).stdout).into_owned();
    assert!(page.contains("prefix \"media/\": 5 key(s): 4 named by a key source, 0 by key"), "{page}");
    // A declaration that names nothing is said to.
    sqlx::raw_sql(
        "INSERT INTO asset_key_sources (table_name, template) VALUES ('wagtailimages_image', 'media/thumbs/{file}')",
    )
    .execute(ctx.pool())
    .await
    .expect("a second declaration");
    let listed = String::from_utf8_lossy(&run_with(&url, Some(&ctx), &layout, &["references"]).stdout).into_owned();
    assert!(
        listed.contains(
            "key source public.wagtailimages_image media/thumbs/{file}: names 0 stored object(s) — MATCHES NONE"
        ),
        "{listed}"
    );
}
