//! The real `asset-sweeper` binary against a real Postgres database and LocalStack S3, asserting on what it
//! prints (text and `--json`), its exit code and what it changed.

use std::process::Output;

use integration_tests::fixtures::{object_exists, seed};
use integration_tests::{TestContext, TestDatabase};
use serde_json::Value;
use uuid::Uuid;

/// Runs the binary with the functions' settings for `ctx` (AWS endpoint and credentials inherited).
fn run(db_url: &str, ctx: Option<&TestContext>, args: &[&str]) -> Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_asset-sweeper"));
    command.args(args).env("DATABASE_URL", db_url).env_remove("DATABASE_SECRET_ARN");
    if let Some(ctx) = ctx {
        command
            .env("CLEANUP_QUEUE_URL", &ctx.queue.url)
            .env("ASSET_BUCKET", &ctx.bucket)
            .env("S3_FORCE_PATH_STYLE", "true");
    }
    command.output().expect("the binary runs")
}

fn stdout(output: &Output) -> String {
    assert!(output.status.success(), "failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout.clone()).expect("utf-8")
}

fn json(output: &Output) -> Value {
    serde_json::from_str(&stdout(output)).expect("JSON on stdout")
}

/// A refusal: exit code 2, nothing on stdout, one line on stderr.
fn refusal(output: &Output) -> String {
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
    let count = shared::db::migrator().iter().count() as u64;
    assert_eq!(first["applied"].as_u64(), Some(count));
    assert!(first["version"].as_i64().is_some_and(|v| v > 0));
    let again = stdout(&run(&db.url, None, &["migrate"]));
    assert!(again.starts_with("applied 0 migration(s); the schema is at version "), "{again}");

    let unreachable = refusal(&run("postgres://postgres@127.0.0.1:1/none", None, &["migrate"]));
    assert!(unreachable.contains("cannot reach the database at 127.0.0.1"), "{unreachable}");
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
