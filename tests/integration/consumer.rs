//! consumer-lambda against real Postgres and LocalStack S3/SQS: messages claimed by the real sweep, delivered
//! as the event source mapping would, settled, and acknowledged.

use std::time::{Duration, Instant};

use crate::pipeline::{key, owner_tables};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use consumer_lambda::Consumer;
use integration_tests::fixtures::{object_exists, put_bytes, seed, state};
use integration_tests::{FAILPOINTS, TestContext, TestLogin, acknowledge, receive_event};
use platform::AssetId;
use serde_json::Value;
use sweep_lambda::Sweeper;
use uuid::Uuid;

fn consumer(ctx: &TestContext) -> Consumer {
    Consumer::new(ctx.pool().clone(), ctx.s3.clone(), ctx.settings(&[]))
}

/// Claims every due asset with the real sweep and enqueues its message.
async fn sweep(ctx: &TestContext) -> u64 {
    let sweeper = Sweeper::new(ctx.pool().clone(), ctx.sqs.clone(), ctx.settings(&[]));
    sweeper.run_pass(Instant::now() + Duration::from_secs(600)).await.expect("sweep").enqueued
}

async fn handle(consumer: &Consumer, event: SqsEvent) -> SqsBatchResponse {
    consumer
        .handle(lambda_runtime::LambdaEvent::new(event, lambda_runtime::Context::default()))
        .await
        .expect("the handler answers with per-item failures")
}

/// One delivery of up to ten messages from the queue, acknowledged; returns the ids that failed.
async fn deliver(ctx: &TestContext, consumer: &Consumer) -> Vec<String> {
    let event = receive_event(&ctx.sqs, &ctx.queue.url).await;
    let response = handle(consumer, event.clone()).await;
    acknowledge(&ctx.sqs, &ctx.queue.url, &event, &response).await;
    response.batch_item_failures.iter().map(|f| f.item_identifier.clone()).collect()
}

/// Sweeps, then delivers until the queue is empty; panics if anything failed.
async fn settle_everything(ctx: &TestContext) {
    sweep(ctx).await;
    let consumer = consumer(ctx);
    while ctx.queue_depth().await > 0 {
        let failed = deliver(ctx, &consumer).await;
        assert!(failed.is_empty(), "failed items: {failed:?}");
    }
}

async fn stored_object_exists(ctx: &TestContext, key: &str) -> bool {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM stored_objects WHERE storage_key = $1)")
        .bind(key)
        .fetch_one(ctx.pool())
        .await
        .expect("stored object")
}

/// (action, evidence) of every audit event about `id`, oldest first.
async fn events(ctx: &TestContext, id: Uuid) -> Vec<(String, Value)> {
    sqlx::query_as("SELECT action, evidence FROM settlement_events WHERE asset_id = $1 ORDER BY id")
        .bind(id)
        .fetch_all(ctx.pool())
        .await
        .expect("events")
}

#[tokio::test]
async fn a_reference_through_each_kind_of_source_keeps_the_asset() {
    let ctx = TestContext::new().await;
    owner_tables(&ctx).await;
    let ws = Uuid::new_v4();
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(seed(&ctx, ws, "released", "3 days", &key(ws)).await);
    }
    let [by_fk, by_domain, by_array, by_json, unreferenced] = ids[..] else { unreachable!() };
    sqlx::query("INSERT INTO products (hero) VALUES ($1)").bind(by_fk).execute(ctx.pool()).await.expect("fk");
    sqlx::query("INSERT INTO banners (image) VALUES ($1)").bind(by_domain).execute(ctx.pool()).await.expect("domain");
    sqlx::query("INSERT INTO galleries (images) VALUES (ARRAY[gen_random_uuid(), $1]::asset_id[])")
        .bind(by_array)
        .execute(ctx.pool())
        .await
        .expect("array");
    // Deep inside the document, where only an any-depth path finds it.
    sqlx::query(r#"INSERT INTO pages (body) VALUES (jsonb_build_object('blocks', jsonb_build_array(jsonb_build_object('type', 'image', 'figure', jsonb_build_object('asset', $1::text)))))"#)
        .bind(by_json)
        .execute(ctx.pool())
        .await
        .expect("json");

    settle_everything(&ctx).await;

    // Each table's first row keeps its asset; the evidence names it by primary key, or by ctid without one.
    for (id, source, record) in [
        (by_fk, "public.products.hero (foreign key)", serde_json::json!({ "id": 1 })),
        (by_domain, "public.banners.image (asset_id)", serde_json::json!({ "id": 1 })),
        (by_array, "public.galleries.images (asset_id[])", serde_json::json!({ "ctid": "(0,1)" })),
        (by_json, "public.pages.body (jsonb $.**)", serde_json::json!({ "id": 1 })),
    ] {
        assert_eq!(state(&ctx, id).await.as_deref(), Some("attached"), "{source}");
        let events = events(&ctx, id).await;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].0, "keep");
        assert_eq!(events[0].1["referenced_by"], source);
        assert_eq!(events[0].1["record"], record, "{source}");
    }
    assert_eq!(state(&ctx, unreferenced).await.as_deref(), Some("retired"));
    let retire = &events(&ctx, unreferenced).await[0];
    assert_eq!(retire.0, "retire");
    assert_eq!(retire.1["sources_checked"].as_array().map(Vec::len), Some(4), "every source was asked");
    let due_cleared: i64 =
        sqlx::query_scalar("SELECT count(*) FROM assets WHERE state = 'attached' AND due_at IS NULL")
            .fetch_one(ctx.pool())
            .await
            .expect("count");
    assert_eq!(due_cleared, 4);
}

#[tokio::test]
async fn released_assets_retire_with_their_bytes_and_abandoned_and_expired_ones_go() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let (released_key, abandoned_key, expired_key, young_key) = (key(ws), key(ws), key(ws), key(ws));
    let just_abandoned_key = key(ws);
    let released = seed(&ctx, ws, "released", "3 days", &released_key).await;
    // Never attached, past its window: retired for its trial. And one retired so a week ago, its trial over.
    let just_abandoned = seed(&ctx, ws, "pending", "8 days", &just_abandoned_key).await;
    let abandoned = seed(&ctx, ws, "abandoned", "8 days", &abandoned_key).await;
    let expired = seed(&ctx, ws, "retired", "40 days", &expired_key).await;
    let young_upload = seed(&ctx, ws, "pending", "2 days", &young_key).await;

    settle_everything(&ctx).await;

    assert_eq!(state(&ctx, released).await.as_deref(), Some("retired"));
    assert!(object_exists(&ctx.s3, &ctx.bucket, &released_key).await, "retiring keeps the bytes");
    let purge_in_days: f64 = sqlx::query_scalar(
        "SELECT (extract(epoch FROM purge_after - now()) / 86400)::float8 FROM assets WHERE id = $1 AND due_at = purge_after",
    )
    .bind(released)
    .fetch_one(ctx.pool())
    .await
    .expect("purge time");
    assert!((29.9..=30.0).contains(&purge_in_days), "{purge_in_days}");

    // An abandoned upload is retired first, bytes in place, for its trial alone: no retention of its own, looked at
    // again an hour on at the soonest.
    assert_eq!(state(&ctx, just_abandoned).await.as_deref(), Some("retired"));
    assert!(object_exists(&ctx.s3, &ctx.bucket, &just_abandoned_key).await, "retired first: the bytes stay");
    assert_eq!(events(&ctx, just_abandoned).await.remove(0).0, "retire");
    let (no_retention, due_in_hours): (bool, f64) = sqlx::query_as(
        "SELECT purge_after = retired_at, (extract(epoch FROM due_at - now()) / 3600)::float8 FROM assets WHERE id = $1",
    )
    .bind(just_abandoned)
    .fetch_one(ctx.pool())
    .await
    .expect("its purge time");
    assert!(no_retention && (0.9..=1.0).contains(&due_in_hours), "{no_retention} {due_in_hours}");

    for (id, key, action) in [(abandoned, &abandoned_key, "delete"), (expired, &expired_key, "purge")] {
        assert_eq!(state(&ctx, id).await, None, "{action}: the row is gone");
        assert!(!object_exists(&ctx.s3, &ctx.bucket, key).await, "{action}: the bytes are gone");
        assert!(!stored_object_exists(&ctx, key).await, "{action}: the object row is gone");
        let (recorded, evidence) = events(&ctx, id).await.remove(0);
        assert_eq!(recorded, action);
        assert_eq!(evidence["sharers"], 0);
        let (freed, row): (i64, Value) =
            sqlx::query_as("SELECT bytes_freed, asset_row FROM settlement_events WHERE asset_id = $1")
                .bind(id)
                .fetch_one(ctx.pool())
                .await
                .expect("event");
        assert_eq!(freed, 100);
        assert_eq!(row["storage_key"], key.as_str(), "the audit row keeps the asset row for undelete");
    }

    // Two days old: past its grace period, not yet abandoned: looked at again when the window ends.
    assert_eq!(state(&ctx, young_upload).await.as_deref(), Some("pending"));
    assert!(object_exists(&ctx.s3, &ctx.bucket, &young_key).await);
    let (action, evidence) = events(&ctx, young_upload).await.remove(0);
    assert_eq!((action.as_str(), &evidence["deferred"]["why"]), ("defer", &Value::from("abandon_window")));
    let due_in_days: f64 =
        sqlx::query_scalar("SELECT (extract(epoch FROM due_at - now()) / 86400)::float8 FROM assets WHERE id = $1")
            .bind(young_upload)
            .fetch_one(ctx.pool())
            .await
            .expect("due");
    assert!((4.9..=5.0).contains(&due_in_days), "due again when seven days have passed: {due_in_days}");
}

#[tokio::test]
async fn shared_bytes_survive_the_delete_of_one_sharer() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let shared_key = key(ws);
    let abandoned = seed(&ctx, ws, "abandoned", "8 days", &shared_key).await;
    let sharer = seed(&ctx, Uuid::new_v4(), "attached", "8 days", &shared_key).await;
    sqlx::query("UPDATE assets SET due_at = NULL WHERE id = $1")
        .bind(sharer)
        .execute(ctx.pool())
        .await
        .expect("attached");
    // The sharer is in use: a product shows it (else discovery would rightly retire it).
    owner_tables(&ctx).await;
    sqlx::query("INSERT INTO products (hero) VALUES ($1)").bind(sharer).execute(ctx.pool()).await.expect("owner");

    settle_everything(&ctx).await;

    assert_eq!(state(&ctx, abandoned).await, None, "the abandoned row goes");
    assert_eq!(state(&ctx, sharer).await.as_deref(), Some("attached"));
    assert!(object_exists(&ctx.s3, &ctx.bucket, &shared_key).await, "the sharer's bytes stay");
    assert!(stored_object_exists(&ctx, &shared_key).await);
    let (action, evidence) = events(&ctx, abandoned).await.remove(0);
    assert_eq!((action.as_str(), &evidence["sharers"]), ("delete", &Value::from(1)));
}

#[tokio::test]
async fn nothing_written_within_the_grace_period_is_retired_or_deleted() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let recent_key = key(ws);
    let recently_released = seed(&ctx, ws, "released", "3 days", &recent_key).await;
    // The release itself is the newest write: an hour ago.
    sqlx::query("UPDATE assets SET updated_at = now() - interval '1 hour' WHERE id = $1")
        .bind(recently_released)
        .execute(ctx.pool())
        .await
        .expect("recent write");
    // An old abandoned upload whose bytes were just reused by another upload.
    let reused_key = key(ws);
    let abandoned = seed(&ctx, ws, "abandoned", "8 days", &reused_key).await;
    sqlx::query("UPDATE stored_objects SET updated_at = now() - interval '5 minutes' WHERE storage_key = $1")
        .bind(&reused_key)
        .execute(ctx.pool())
        .await
        .expect("object reused");

    settle_everything(&ctx).await;

    assert_eq!(state(&ctx, recently_released).await.as_deref(), Some("released"));
    assert_eq!(state(&ctx, abandoned).await.as_deref(), Some("retired"));
    assert!(object_exists(&ctx.s3, &ctx.bucket, &reused_key).await);
    for id in [recently_released, abandoned] {
        let (action, evidence) = events(&ctx, id).await.remove(0);
        assert_eq!((action.as_str(), &evidence["deferred"]["why"]), ("defer", &Value::from("grace")));
        let due_in_hours: f64 =
            sqlx::query_scalar("SELECT (extract(epoch FROM due_at - now()) / 3600)::float8 FROM assets WHERE id = $1")
                .bind(id)
                .fetch_one(ctx.pool())
                .await
                .expect("due");
        assert!(due_in_hours > 22.0 && due_in_hours <= 24.0, "due when the grace period ends: {due_in_hours}");
    }
}

fn record(message_id: &str, body: &str, receive_count: u32) -> SqsMessage {
    let mut record = SqsMessage::default();
    record.message_id = Some(message_id.to_owned());
    record.body = Some(body.to_owned());
    record.attributes.insert("ApproximateReceiveCount".into(), receive_count.to_string());
    record
}

fn event(records: Vec<SqsMessage>) -> SqsEvent {
    let mut event = SqsEvent::default();
    event.records = records;
    event
}

/// The message the sweep sent for the one asset it claimed (taken off the queue).
async fn claimed_message(ctx: &TestContext) -> lifecycle::CleanupMessage {
    assert_eq!(sweep(ctx).await, 1);
    let bodies = ctx.drain_queue().await;
    lifecycle::CleanupMessage::parse(&bodies[0]).expect("the sweep's message")
}

#[tokio::test]
async fn duplicate_and_redelivered_messages_never_repeat_an_action() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let k = key(ws);
    let abandoned = seed(&ctx, ws, "abandoned", "8 days", &k).await;
    let message = claimed_message(&ctx).await;
    let body = message.to_body();
    let consumer = consumer(&ctx);

    // The same message twice in one batch (at-least-once delivery), settled concurrently.
    let response = handle(&consumer, event(vec![record("m-1", &body, 1), record("m-1-copy", &body, 1)])).await;
    assert!(response.batch_item_failures.is_empty());
    // And redelivered after it was settled.
    let response = handle(&consumer, event(vec![record("m-1-again", &body, 2)])).await;
    assert!(response.batch_item_failures.is_empty(), "settling a removed asset is a success");

    assert_eq!(state(&ctx, abandoned).await, None);
    let actions: Vec<String> = events(&ctx, abandoned).await.into_iter().map(|(a, _)| a).collect();
    assert_eq!(actions, ["delete"], "one delete, however often the message came");
    assert!(!object_exists(&ctx.s3, &ctx.bucket, &k).await);
}

#[tokio::test]
async fn a_stale_claim_changes_nothing() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let released = seed(&ctx, ws, "released", "3 days", &key(ws)).await;
    let mut message = claimed_message(&ctx).await;
    // A message from an earlier claim whose lease ran out and was claimed again since.
    message.claim_token = Uuid::new_v4();

    let response = handle(&consumer(&ctx), event(vec![record("old", &message.to_body(), 1)])).await;

    assert!(response.batch_item_failures.is_empty());
    assert_eq!(state(&ctx, released).await.as_deref(), Some("released"));
    assert!(events(&ctx, released).await.is_empty());
}

#[tokio::test]
async fn a_message_naming_the_wrong_workspace_is_rejected_and_touches_nothing() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let k = key(ws);
    let abandoned = seed(&ctx, ws, "abandoned", "8 days", &k).await;
    let mut message = claimed_message(&ctx).await;
    message.workspace_id = platform::WorkspaceId(Uuid::new_v4());

    // Even on its final receive the asset is not marked: the message may not change another workspace's row.
    let response = handle(&consumer(&ctx), event(vec![record("forged", &message.to_body(), 5)])).await;

    let failed: Vec<&str> = response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
    assert_eq!(failed, ["forged"]);
    assert_eq!(state(&ctx, abandoned).await.as_deref(), Some("retired"));
    assert!(object_exists(&ctx.s3, &ctx.bucket, &k).await);
    let recorded = events(&ctx, abandoned).await;
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].0, "reject", "the rejection is on record");
    assert_eq!(recorded[0].1["message_workspace"], message.workspace_id.to_string());
    let attempts: i32 = sqlx::query_scalar("SELECT attempts FROM assets WHERE id = $1")
        .bind(abandoned)
        .fetch_one(ctx.pool())
        .await
        .expect("attempts");
    assert_eq!(attempts, 0);
}

#[tokio::test]
async fn a_malformed_body_fails_that_message_alone_and_an_unknown_asset_is_a_success() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let abandoned = seed(&ctx, ws, "abandoned", "8 days", &key(ws)).await;
    let message = claimed_message(&ctx).await;
    let unknown = lifecycle::CleanupMessage::new(
        AssetId(Uuid::new_v4()),
        platform::WorkspaceId(ws),
        Uuid::new_v4(),
        Uuid::new_v4(),
    );

    let response = handle(
        &consumer(&ctx),
        event(vec![
            record("good", &message.to_body(), 1),
            record("garbage", "{not json", 1),
            record("future", r#"{"version":9}"#, 1),
            record("unknown", &unknown.to_body(), 1),
        ]),
    )
    .await;

    let mut failed: Vec<&str> = response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
    failed.sort();
    assert_eq!(failed, ["future", "garbage"]);
    assert_eq!(state(&ctx, abandoned).await, None, "the good message in the same batch settled");
}

#[tokio::test]
async fn a_record_without_a_message_id_fails_the_whole_invocation() {
    let ctx = TestContext::new().await;
    let mut nameless = record("x", "{}", 1);
    nameless.message_id = None;
    let result = consumer(&ctx)
        .handle(lambda_runtime::LambdaEvent::new(
            event(vec![record("fine", "{}", 1), nameless]),
            lambda_runtime::Context::default(),
        ))
        .await;
    let error = result.expect_err("no empty identifier is ever reported");
    assert_eq!(error.to_string(), "record 1 of the batch has no message id");
}

/// A schema change between the pass and the settle: every settle refuses and nothing is destroyed, whether the
/// change detector's generation or (with the detector switched off) the catalog fingerprint sees it. The claim
/// goes back to the next pass without spending a receive; that pass checks the new schema and refuses.
#[tokio::test]
async fn a_schema_change_after_the_pass_makes_every_settle_refuse_and_destroys_nothing() {
    for detector in [true, false] {
        for breakage in [
            "DROP TABLE legacy",
            // Many rows: a column that looks like an undeclared source (a stray id would only hold its asset).
            "ALTER TABLE legacy ADD COLUMN picture uuid; INSERT INTO legacy (picture) SELECT id FROM assets, generate_series(1, 12)",
            "CREATE TABLE products (hero uuid REFERENCES assets (id) ON DELETE CASCADE)",
            "INSERT INTO asset_reference_sources (table_name, column_name, json_path) VALUES ('gone', 'body', '$.**')",
            "DROP DOMAIN asset_id",
        ] {
            let ctx = TestContext::new().await;
            sqlx::raw_sql("CREATE TABLE legacy (id serial PRIMARY KEY, note text)")
                .execute(ctx.pool())
                .await
                .expect("an application table");
            if !detector {
                sqlx::raw_sql("ALTER EVENT TRIGGER asset_sweeper_schema_changes DISABLE")
                    .execute(ctx.pool())
                    .await
                    .expect("detector off");
            }
            let ws = Uuid::new_v4();
            let k = key(ws);
            let abandoned = seed(&ctx, ws, "abandoned", "8 days", &k).await;
            let message = claimed_message(&ctx).await;
            sqlx::raw_sql(sqlx::AssertSqlSafe(breakage)).execute(ctx.pool()).await.expect("break the schema");

            let consumer = consumer(&ctx);
            let response = handle(&consumer, event(vec![record("m", &message.to_body(), 1)])).await;

            let case = format!("{breakage} (detector {detector})");
            assert!(response.batch_item_failures.is_empty(), "postponed, not failed: {case}");
            assert_eq!(state(&ctx, abandoned).await.as_deref(), Some("retired"), "{case}");
            assert!(object_exists(&ctx.s3, &ctx.bucket, &k).await, "{case}");
            let error = last_error(&ctx, abandoned).await;
            assert!(error.contains("the schema changed after the sweep pass checked it"), "{case}: {error}");
            assert!(error.ends_with("[retryable]"), "{case}: {error}");
            let (leased, attempts): (bool, i32) =
                sqlx::query_as("SELECT lease_token IS NOT NULL, attempts FROM assets WHERE id = $1")
                    .bind(abandoned)
                    .fetch_one(ctx.pool())
                    .await
                    .expect("lease");
            assert_eq!((leased, attempts), (false, 0), "the claim is given back, no attempt spent: {case}");

            if breakage == "DROP TABLE legacy" {
                continue; // A table going is no refusal: the next pass's verdict is valid again.
            }
            // The next pass sees the change and refuses: it claims nothing, and a settle on its verdict fails.
            let sweeper = Sweeper::new(ctx.pool().clone(), ctx.sqs.clone(), ctx.settings(&[]));
            let report = sweeper.run_pass(Instant::now() + Duration::from_secs(600)).await.expect("sweep");
            assert_eq!((report.outcome, report.claimed), (lifecycle::runs::RunOutcome::Refused, 0), "{case}");
            let response = handle(&consumer, event(vec![record("m", &message.to_body(), 2)])).await;
            assert_eq!(response.batch_item_failures.len(), 1, "{case}");
            assert_eq!(state(&ctx, abandoned).await.as_deref(), Some("retired"), "{case}");
            assert!(object_exists(&ctx.s3, &ctx.bucket, &k).await, "{case}");
        }
    }
}

/// A verdict older than SCHEMA_VERDICT_MAX_AGE settles nothing: the claim goes back. DDL that cannot change the
/// reference map (a view) moves the detector's generation; the consumer then compares the catalog fingerprint,
/// finds it unchanged and settles.
#[tokio::test]
async fn a_stale_verdict_refuses_and_an_unrelated_change_settles_by_fingerprint() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let released = seed(&ctx, ws, "released", "3 days", &key(ws)).await;
    let message = claimed_message(&ctx).await;
    sqlx::query("UPDATE schema_verdicts SET checked_at = now() - interval '2 hours'")
        .execute(ctx.pool())
        .await
        .expect("age the verdict");
    let consumer = consumer(&ctx);
    let response = handle(&consumer, event(vec![record("m", &message.to_body(), 1)])).await;
    assert!(response.batch_item_failures.is_empty(), "postponed");
    assert!(last_error(&ctx, released).await.contains("older than SCHEMA_VERDICT_MAX_AGE"));
    assert_eq!(state(&ctx, released).await.as_deref(), Some("released"));

    // The next pass claims it again under a fresh verdict; a view created after it moves the generation.
    let message = claimed_message(&ctx).await;
    sqlx::raw_sql("CREATE VIEW recent_assets AS SELECT id FROM assets").execute(ctx.pool()).await.expect("view");
    let moved: bool = sqlx::query_scalar(
        "SELECT asset_sweeper_schema_generation() > v.generation
           FROM (SELECT generation FROM schema_verdicts ORDER BY id DESC LIMIT 1) v",
    )
    .fetch_one(ctx.pool())
    .await
    .expect("generations");
    assert!(moved, "the view moved the generation");
    let response = handle(&consumer, event(vec![record("m2", &message.to_body(), 1)])).await;
    assert!(response.batch_item_failures.is_empty(), "{:?}", response.batch_item_failures);
    assert_eq!(state(&ctx, released).await.as_deref(), Some("retired"));
}

/// The verdict holds while the sweep's role reads what it read: its own attributes and the roles it is a member
/// of, transitively. Another application's `CREATE ROLE`, or a grant between roles the sweep is no member of,
/// changes nothing; a membership of its own, direct or through a group, does, and then every settle postpones,
/// even on its final receive: a role change is an administrator's, and the next pass checks again.
#[tokio::test]
async fn only_a_change_of_the_sweeps_own_rights_stops_settles_and_they_postpone_even_on_their_final_receive() {
    let ctx = TestContext::new().await;
    let sweep_login = TestLogin::new(&ctx.db, "GRANT asset_sweeper_sweep TO {login}").await;
    let fingerprint = |role: String| {
        let pool = ctx.pool().clone();
        async move {
            sqlx::query_scalar::<_, String>("SELECT asset_sweeper_role_fingerprint($1)")
                .bind(role)
                .fetch_one(&pool)
                .await
                .expect("fingerprint")
        }
    };
    let superuser: String = sqlx::query_scalar("SELECT current_user::text").fetch_one(ctx.pool()).await.expect("me");
    let (before, superuser_before) =
        (fingerprint(sweep_login.name.clone()).await, fingerprint(superuser.clone()).await);

    // Elsewhere on the server: a new login, and a group granted to it.
    let group = TestLogin::new(&ctx.db, "").await;
    let elsewhere = TestLogin::new(&ctx.db, &format!("GRANT {} TO {{login}}", group.name)).await;
    assert_eq!(fingerprint(sweep_login.name.clone()).await, before, "{} is none of the sweep's", elsewhere.name);
    assert_eq!(fingerprint(superuser.clone()).await, superuser_before, "a superuser's rights are its own");

    // The sweep's verdict, then a group of its own that gains a membership: its rights changed.
    let ws = Uuid::new_v4();
    let released = seed(&ctx, ws, "released", "3 days", &key(ws)).await;
    let message = claimed_message(&ctx).await;
    sqlx::query("UPDATE schema_verdicts SET role_name = $1, role_fingerprint = $2")
        .bind(&sweep_login.name)
        .bind(&before)
        .execute(ctx.pool())
        .await
        .expect("the verdict as the sweep's login made it");
    let grant = |sql: String| {
        let pool = ctx.pool().clone();
        async move { sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&pool).await.expect("grant") }
    };
    grant(format!("GRANT {} TO {}", group.name, sweep_login.name)).await;
    let direct = fingerprint(sweep_login.name.clone()).await;
    assert_ne!(direct, before, "a membership of its own");
    grant("GRANT pg_read_all_data TO ".to_owned() + &group.name).await;
    assert_ne!(fingerprint(sweep_login.name.clone()).await, direct, "a membership through its group");

    let consumer = consumer(&ctx);
    let last = integration_tests::MAX_RECEIVE_COUNT;
    let response = handle(&consumer, event(vec![record("m", &message.to_body(), last)])).await;
    assert!(response.batch_item_failures.is_empty(), "postponed, not failed: {:?}", response.batch_item_failures);
    assert_eq!(state(&ctx, released).await.as_deref(), Some("released"), "nothing settled, nothing marked failed");
    let why = last_error(&ctx, released).await;
    assert!(why.contains("attributes or memberships changed"), "{why}");
    assert!(integration_tests::drain(&ctx.sqs, &ctx.queue.dlq_url).await.is_empty(), "nothing dead-lettered");
}

async fn last_error(ctx: &TestContext, id: Uuid) -> String {
    sqlx::query_scalar::<_, Option<String>>("SELECT last_error FROM assets WHERE id = $1")
        .bind(id)
        .fetch_one(ctx.pool())
        .await
        .expect("last error")
        .unwrap_or_default()
}

/// One record that panics fails its own message; the others in the batch settle.
#[tokio::test]
async fn a_panicking_record_fails_alone() {
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let doomed = seed(&ctx, ws, "released", "3 days", &key(ws)).await;
    let other = seed(&ctx, ws, "released", "3 days", &key(ws)).await;
    assert_eq!(sweep(&ctx).await, 2);
    let event = receive_event(&ctx.sqs, &ctx.queue.url).await;
    assert_eq!(event.records.len(), 2);
    let doomed_message = event
        .records
        .iter()
        .find(|r| r.body.as_deref().is_some_and(|b| b.contains(&doomed.to_string())))
        .and_then(|r| r.message_id.clone())
        .expect("the doomed asset's message");

    let response =
        with_failpoint("consumer::panic", &format!("return({doomed})"), handle(&consumer(&ctx), event)).await;

    let failed: Vec<&str> = response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
    assert_eq!(failed, [doomed_message.as_str()]);
    assert_eq!(state(&ctx, other).await.as_deref(), Some("retired"));
    assert_eq!(state(&ctx, doomed).await.as_deref(), Some("released"));
    assert!(last_error(&ctx, doomed).await.contains("the settle panicked"));
}

/// The commit succeeds but its answer is lost: the settle must not take the removal back, or bytes would be left
/// that no row knows. The same failure before a commit (a refused row delete) does take it back (tested below).
#[tokio::test]
async fn an_ambiguous_commit_never_undoes_a_removal_whose_rows_are_gone() {
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let k = key(ws);
    let abandoned = seed(&ctx, ws, "abandoned", "8 days", &k).await;
    let message = claimed_message(&ctx).await;

    let response = with_failpoint(
        "consumer::commit_answer_lost",
        &format!("return({abandoned})"),
        handle(&consumer(&ctx), event(vec![record("m", &message.to_body(), 1)])),
    )
    .await;

    assert_eq!(response.batch_item_failures.len(), 1, "the error is still reported");
    assert_eq!(state(&ctx, abandoned).await, None, "the commit happened");
    assert!(!stored_object_exists(&ctx, &k).await);
    assert!(!object_exists(&ctx.s3, &ctx.bucket, &k).await, "the removal stands: no bytes without a row");
    // The redelivery finds nothing to do.
    let response = handle(&consumer(&ctx), event(vec![record("m", &message.to_body(), 2)])).await;
    assert!(response.batch_item_failures.is_empty());
}

/// Configures `failpoint` for the duration of `f`, holding the process-wide failpoint turn.
async fn with_failpoint<T>(failpoint: &str, action: &str, f: impl std::future::Future<Output = T>) -> T {
    fail::cfg(failpoint, action).expect("failpoint");
    let result = f.await;
    fail::remove(failpoint);
    result
}

#[tokio::test]
async fn a_crash_after_the_bytes_went_leaves_a_row_without_bytes_and_the_next_settle_finishes() {
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let k = key(ws);
    let abandoned = seed(&ctx, ws, "abandoned", "8 days", &k).await;
    let message = claimed_message(&ctx).await;
    let consumer = consumer(&ctx);

    let response = with_failpoint(
        "consumer::after_bytes_removed",
        &format!("return({k})"),
        handle(&consumer, event(vec![record("m", &message.to_body(), 1)])),
    )
    .await;

    assert_eq!(response.batch_item_failures.len(), 1);
    // Never bytes that no row knows: the row (and its object row) outlive the bytes.
    assert!(!object_exists(&ctx.s3, &ctx.bucket, &k).await, "the bytes went before the crash");
    assert_eq!(state(&ctx, abandoned).await.as_deref(), Some("retired"));
    assert!(stored_object_exists(&ctx, &k).await);
    assert!(events(&ctx, abandoned).await.is_empty(), "the rolled-back settle left no decision");

    // The redelivered message finishes the job: deleting a missing object is fine.
    let response = handle(&consumer, event(vec![record("m", &message.to_body(), 2)])).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(state(&ctx, abandoned).await, None);
    assert!(!stored_object_exists(&ctx, &k).await);
    assert_eq!(events(&ctx, abandoned).await[0].0, "delete");
}

#[tokio::test]
async fn a_crash_before_the_bytes_went_or_a_failed_s3_call_leaves_everything() {
    let _turn = FAILPOINTS.lock().await;
    for failpoint in ["consumer::before_bytes_removed", "consumer::s3_delete"] {
        let ctx = TestContext::new().await;
        let ws = Uuid::new_v4();
        let k = key(ws);
        let abandoned = seed(&ctx, ws, "abandoned", "8 days", &k).await;
        let message = claimed_message(&ctx).await;

        let response = with_failpoint(
            failpoint,
            &format!("return({k})"),
            handle(&consumer(&ctx), event(vec![record("m", &message.to_body(), 1)])),
        )
        .await;

        assert_eq!(response.batch_item_failures.len(), 1, "{failpoint}");
        assert!(object_exists(&ctx.s3, &ctx.bucket, &k).await, "{failpoint}");
        assert_eq!(state(&ctx, abandoned).await.as_deref(), Some("retired"), "{failpoint}");
        assert!(stored_object_exists(&ctx, &k).await, "{failpoint}");
    }
}

#[tokio::test]
async fn the_final_receive_marks_the_asset_failed_and_the_message_reaches_the_dlq() {
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let k = key(ws);
    let poison = seed(&ctx, ws, "abandoned", "8 days", &k).await;
    sweep(&ctx).await;
    let consumer = consumer(&ctx);

    // The bucket refuses every delete: each delivery fails until SQS dead-letters the message.
    let mut deliveries = 0;
    fail::cfg("consumer::s3_delete", &format!("return({k})")).expect("failpoint");
    loop {
        let event = receive_event(&ctx.sqs, &ctx.queue.url).await;
        if event.records.is_empty() {
            break;
        }
        deliveries += 1;
        let before_last = deliveries < integration_tests::MAX_RECEIVE_COUNT;
        if before_last {
            assert_eq!(state(&ctx, poison).await.as_deref(), Some("retired"));
        }
        let response = handle(&consumer, event.clone()).await;
        assert_eq!(response.batch_item_failures.len(), 1);
        acknowledge(&ctx.sqs, &ctx.queue.url, &event, &response).await;
    }
    fail::remove("consumer::s3_delete");

    assert_eq!(deliveries, integration_tests::MAX_RECEIVE_COUNT);
    let (state_now, attempts, last_error): (String, i32, Option<String>) =
        sqlx::query_as("SELECT state, attempts, last_error FROM assets WHERE id = $1")
            .bind(poison)
            .fetch_one(ctx.pool())
            .await
            .expect("asset");
    assert_eq!((state_now.as_str(), attempts), ("failed", 5));
    assert!(last_error.is_some_and(|e| e.contains("injected S3 failure")));
    assert_eq!(events(&ctx, poison).await.last().map(|(a, _)| a.as_str()), Some("failed"));
    assert!(object_exists(&ctx.s3, &ctx.bucket, &k).await, "nothing was destroyed");
    let dead = integration_tests::drain(&ctx.sqs, &ctx.queue.dlq_url).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(lifecycle::CleanupMessage::parse(&dead[0]).expect("message").asset_id.0, poison);
    // A failed asset waits for an operator: the sweep does not claim it again.
    sqlx::query("UPDATE assets SET due_at = now() - interval '1 minute' WHERE id = $1")
        .bind(poison)
        .execute(ctx.pool())
        .await
        .expect("due");
    assert_eq!(sweep(&ctx).await, 0);
}

#[tokio::test]
async fn when_the_final_receive_write_fails_the_message_still_fails_and_nothing_is_destroyed() {
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let k = key(ws);
    let poison = seed(&ctx, ws, "abandoned", "8 days", &k).await;
    let message = claimed_message(&ctx).await;

    fail::cfg("consumer::s3_delete", &format!("return({k})")).expect("failpoint");
    let response = with_failpoint(
        "consumer::final_receive_write",
        "return",
        handle(&consumer(&ctx), event(vec![record("m", &message.to_body(), 5)])),
    )
    .await;
    fail::remove("consumer::s3_delete");

    assert_eq!(response.batch_item_failures.len(), 1, "the failure is still reported");
    assert_eq!(state(&ctx, poison).await.as_deref(), Some("retired"));
    assert!(object_exists(&ctx.s3, &ctx.bucket, &k).await);
}

#[tokio::test]
async fn a_retired_asset_restores_before_its_purge_time_and_not_after() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let (k, late_key) = (key(ws), key(ws));
    let released = seed(&ctx, ws, "released", "3 days", &k).await;
    let expired = seed(&ctx, ws, "retired", "40 days", &late_key).await;
    sqlx::query("UPDATE assets SET due_at = NULL WHERE id = $1")
        .bind(expired)
        .execute(ctx.pool())
        .await
        .expect("not due");
    settle_everything(&ctx).await;
    assert_eq!(state(&ctx, released).await.as_deref(), Some("retired"));

    lifecycle::restore::restore(ctx.pool(), &ctx.s3, &ctx.bucket, AssetId(released), "alice")
        .await
        .expect("restorable until its purge time");
    assert_eq!(state(&ctx, released).await.as_deref(), Some("attached"));
    assert!(object_exists(&ctx.s3, &ctx.bucket, &k).await);
    let (action, evidence) = events(&ctx, released).await.pop().expect("restore event");
    assert_eq!((action.as_str(), &evidence["by"]), ("restore", &Value::from("alice")));

    let late = lifecycle::restore::restore(ctx.pool(), &ctx.s3, &ctx.bucket, AssetId(expired), "alice").await;
    let message = late.expect_err("past its purge time").to_string();
    assert!(message.contains("was due to be purged at") && message.contains("too late to restore"), "{message}");
    assert_eq!(state(&ctx, expired).await.as_deref(), Some("retired"));

    let again = lifecycle::restore::restore(ctx.pool(), &ctx.s3, &ctx.bucket, AssetId(released), "alice").await;
    assert!(again.expect_err("attached now").to_string().contains("is attached, not retired"));
    let unknown = lifecycle::restore::restore(ctx.pool(), &ctx.s3, &ctx.bucket, AssetId(Uuid::nil()), "a").await;
    assert!(unknown.expect_err("unknown").to_string().contains("does not exist"));
}

#[tokio::test]
async fn a_keep_brings_back_missing_bytes_from_a_kept_version() {
    let ctx = TestContext::new().await;
    owner_tables(&ctx).await;
    let ws = Uuid::new_v4();
    let (k, lost_key) = (key(ws), key(ws));
    let referenced = seed(&ctx, ws, "released", "3 days", &k).await;
    let lost = seed(&ctx, ws, "released", "3 days", &lost_key).await;
    sqlx::query("INSERT INTO products (hero) VALUES ($1), ($2)")
        .bind(referenced)
        .bind(lost)
        .execute(ctx.pool())
        .await
        .expect("references");
    // A wrong delete elsewhere: the versioned bucket keeps the bytes behind a delete marker.
    ctx.s3.delete_object().bucket(&ctx.bucket).key(&k).send().await.expect("delete");
    // And bytes gone for good: every version removed.
    let versions = ctx.s3.list_object_versions().bucket(&ctx.bucket).prefix(&lost_key).send().await.expect("versions");
    for v in versions.versions() {
        ctx.s3
            .delete_object()
            .bucket(&ctx.bucket)
            .key(&lost_key)
            .set_version_id(v.version_id().map(str::to_owned))
            .send()
            .await
            .expect("purge version");
    }
    assert!(!object_exists(&ctx.s3, &ctx.bucket, &k).await);

    settle_everything(&ctx).await;

    assert_eq!(state(&ctx, referenced).await.as_deref(), Some("attached"));
    assert!(object_exists(&ctx.s3, &ctx.bucket, &k).await, "restored from the kept version");
    let actions: Vec<String> = events(&ctx, referenced).await.into_iter().map(|(a, _)| a).collect();
    assert_eq!(actions, ["keep", "integrity"]);
    let actions: Vec<String> = events(&ctx, lost).await.into_iter().map(|(a, _)| a).collect();
    assert_eq!(actions, ["keep", "lost"]);
    put_bytes(&ctx.s3, &ctx.bucket, "unrelated", b"x").await;
}

#[tokio::test]
async fn hidden_bytes_come_back_by_copying_their_kept_version_and_no_version_is_destroyed() {
    let ctx = TestContext::new().await;
    owner_tables(&ctx).await;
    let ws = Uuid::new_v4();
    let k = format!("{ws}/a photo+{}.png", Uuid::new_v4());
    let referenced = seed(&ctx, ws, "released", "3 days", &k).await;
    // The bytes with metadata a copy must keep.
    ctx.s3
        .put_object()
        .bucket(&ctx.bucket)
        .key(&k)
        .content_type("image/png")
        .metadata("origin", "upload")
        .body(aws_sdk_s3::primitives::ByteStream::from(b"the photo".to_vec()))
        .send()
        .await
        .expect("put");
    sqlx::query("INSERT INTO products (hero) VALUES ($1)").bind(referenced).execute(ctx.pool()).await.expect("ref");
    ctx.s3.delete_object().bucket(&ctx.bucket).key(&k).send().await.expect("a wrong delete");
    let listed = |ctx: &TestContext, k: String| {
        let (s3, bucket) = (ctx.s3.clone(), ctx.bucket.clone());
        async move {
            let page = s3.list_object_versions().bucket(bucket).prefix(&k).send().await.expect("versions");
            (page.versions().len(), page.delete_markers().len())
        }
    };
    let (versions_before, markers_before) = listed(&ctx, k.clone()).await;

    settle_everything(&ctx).await;

    assert_eq!(state(&ctx, referenced).await.as_deref(), Some("attached"));
    let head = ctx.s3.head_object().bucket(&ctx.bucket).key(&k).send().await.expect("current again");
    assert_eq!(head.content_type(), Some("image/png"));
    assert_eq!(head.metadata().and_then(|m| m.get("origin")).map(String::as_str), Some("upload"));
    let body = ctx.s3.get_object().bucket(&ctx.bucket).key(&k).send().await.expect("get").body.collect().await;
    assert_eq!(body.expect("body").into_bytes().as_ref(), b"the photo");
    // A copy on top: every earlier version and the delete marker are still there.
    assert_eq!(listed(&ctx, k.clone()).await, (versions_before + 1, markers_before));
    let actions: Vec<String> = events(&ctx, referenced).await.into_iter().map(|(a, _)| a).collect();
    assert_eq!(actions, ["keep", "integrity"]);
}

#[tokio::test]
async fn a_deferred_asset_settles_once_its_grace_period_has_passed() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let released = seed(&ctx, ws, "released", "3 days", &key(ws)).await;
    sqlx::query("UPDATE assets SET updated_at = now() - interval '1 hour' WHERE id = $1")
        .bind(released)
        .execute(ctx.pool())
        .await
        .expect("a recent write");
    settle_everything(&ctx).await;
    assert_eq!(events(&ctx, released).await[0].0, "defer");

    // A day passes: every timestamp of the asset and its object moves back 24 hours.
    sqlx::raw_sql(
        "UPDATE assets SET created_at = created_at - interval '24 hours', updated_at = updated_at - interval '24 hours',
                due_at = due_at - interval '24 hours';
         UPDATE stored_objects SET updated_at = updated_at - interval '24 hours';",
    )
    .execute(ctx.pool())
    .await
    .expect("time passes");
    settle_everything(&ctx).await;

    assert_eq!(state(&ctx, released).await.as_deref(), Some("retired"), "the defer did not restart its own grace");
    let actions: Vec<String> = events(&ctx, released).await.into_iter().map(|(a, _)| a).collect();
    assert_eq!(actions, ["defer", "retire"]);
}

#[tokio::test]
async fn a_stale_message_failing_on_its_final_receive_does_not_mark_the_asset() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let released = seed(&ctx, ws, "released", "3 days", &key(ws)).await;
    let mut message = claimed_message(&ctx).await;
    message.claim_token = Uuid::new_v4();
    sqlx::raw_sql("DROP DOMAIN asset_id").execute(ctx.pool()).await.expect("break the schema");
    // The next pass refuses: a failure that needs a person, which a final receive would mark.
    assert_eq!(sweep(&ctx).await, 0);

    let response = handle(&consumer(&ctx), event(vec![record("stale", &message.to_body(), 5)])).await;

    assert_eq!(response.batch_item_failures.len(), 1);
    assert_eq!(state(&ctx, released).await.as_deref(), Some("released"), "a stale claim marks nothing");
}

#[tokio::test]
async fn when_the_transaction_fails_after_the_bytes_went_the_removal_is_taken_back() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let k = key(ws);
    let abandoned = seed(&ctx, ws, "abandoned", "8 days", &k).await;
    let message = claimed_message(&ctx).await;
    // The application's own rule refuses the row delete, after the bytes were already removed.
    sqlx::raw_sql(
        "CREATE FUNCTION refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'asset rows are kept by policy'; END $$;
         CREATE TRIGGER keep_assets BEFORE DELETE ON assets FOR EACH ROW EXECUTE FUNCTION refuse_delete();",
    )
    .execute(ctx.pool())
    .await
    .expect("trigger");

    let response = handle(&consumer(&ctx), event(vec![record("m", &message.to_body(), 1)])).await;

    assert_eq!(response.batch_item_failures.len(), 1);
    assert_eq!(state(&ctx, abandoned).await.as_deref(), Some("retired"));
    assert!(object_exists(&ctx.s3, &ctx.bucket, &k).await, "the delete marker was removed again");
}

#[tokio::test]
async fn every_record_names_the_commit_its_build_came_from() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let released = seed(&ctx, ws, "released", "3 days", &key(ws)).await;
    settle_everything(&ctx).await;

    let (commit, dirty) = match platform::version::COMMIT.strip_suffix("+dirty") {
        Some(commit) => (commit, true),
        None => (platform::version::COMMIT, false),
    };
    assert!(commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()), "a commit id: {commit}");
    let known = std::process::Command::new("git")
        .args(["cat-file", "-e", &format!("{commit}^{{commit}}")])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("git runs");
    assert!(known.success(), "{commit} is a commit of this repository");
    assert!(platform::version::CODE_VERSION.ends_with(&format!("+{commit}{}", if dirty { "+dirty" } else { "" })));

    let recorded: Vec<String> = sqlx::query_scalar(
        "SELECT code_version FROM settlement_events WHERE asset_id = $1
         UNION ALL SELECT code_version FROM sweep_runs
         UNION ALL SELECT code_version FROM schema_verdicts",
    )
    .bind(released)
    .fetch_all(ctx.pool())
    .await
    .expect("code versions");
    assert!(recorded.len() >= 3, "an audit row, a run row and a verdict: {recorded:?}");
    assert!(recorded.iter().all(|v| v == platform::version::CODE_VERSION), "{recorded:?}");
}

/// A write of a reference to `asset` through `source` ("banners.image", a domain column, or "pages.body", a
/// declared JSONB document), in the caller's transaction or its own.
async fn write_reference(executor: impl sqlx::PgExecutor<'_>, source: &str, asset: Uuid) -> Result<(), sqlx::Error> {
    let sql = match source {
        "banners.image" => "INSERT INTO banners (image) VALUES ($1)",
        "pages.body" => "INSERT INTO pages (body) VALUES (jsonb_build_object('blocks', jsonb_build_array($1::text)))",
        // One statement over every row of [`BLANK_ROWS`], as a backfill writes it.
        "banners.image, every row" => "UPDATE banners SET image = $1 WHERE image IS NULL",
        "galleries.images, every row" => "UPDATE galleries SET images = ARRAY[gen_random_uuid(), $1]::asset_id[]",
        "pages.body, every row" => {
            "UPDATE pages SET body = jsonb_build_object('blocks', jsonb_build_array(id::text, $1::text))"
        }
        other => panic!("no such source {other}"),
    };
    sqlx::query(sqlx::AssertSqlSafe(sql)).bind(asset).execute(executor).await.map(|_| ())
}

/// Rows naming no asset in the guarded owner tables, for a bulk update to rewrite.
const BLANK_ROWS: &str = "
    INSERT INTO banners (image) SELECT NULL FROM generate_series(1, 100);
    INSERT INTO galleries (title) SELECT 'album ' || n FROM generate_series(1, 100) AS n;
    INSERT INTO pages (body) SELECT '{\"blocks\": []}' FROM generate_series(1, 100);";

/// A fresh context with the guarded owner tables and one abandoned upload, claimed: (context, asset, its key, the
/// sweep's message for it).
async fn claimed_abandoned_upload() -> (TestContext, Uuid, String, lifecycle::CleanupMessage) {
    let ctx = TestContext::new().await;
    owner_tables(&ctx).await;
    sqlx::raw_sql(BLANK_ROWS).execute(ctx.pool()).await.expect("rows naming nothing");
    let ws = Uuid::new_v4();
    let k = key(ws);
    let abandoned = seed(&ctx, ws, "abandoned", "8 days", &k).await;
    let message = claimed_message(&ctx).await;
    (ctx, abandoned, k, message)
}

/// Settles `event` on a thread and runtime of its own, with its own clients (a connection serves the runtime that
/// made it), so the test can write while the settle holds its locks, even while a failpoint blocks that thread.
fn settle_apart(ctx: &TestContext, event: SqsEvent) -> tokio::task::JoinHandle<SqsBatchResponse> {
    let settings = ctx.settings(&[]);
    let url = ctx.db.url.clone();
    tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        runtime.block_on(async move {
            let pool = sqlx::PgPool::connect(&url).await.expect("the settle's pool");
            let config = platform::aws::sdk_config().await;
            let consumer = Consumer::new(pool, platform::aws::s3_client(&config, true), settings);
            handle(&consumer, event).await
        })
    })
}

/// Whether any record of the three guarded sources names `asset`.
async fn referenced(ctx: &TestContext, asset: Uuid) -> bool {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM banners WHERE image = $1)
             OR EXISTS (SELECT 1 FROM galleries WHERE $1 = ANY (images::uuid[]))
             OR EXISTS (SELECT 1 FROM pages WHERE body @? format('$.** ? (@ == \"%s\")', $1)::jsonpath)",
    )
    .bind(asset)
    .fetch_one(ctx.pool())
    .await
    .expect("references")
}

/// A reference written while a settle that removes the asset holds it: the write waits for the settle, then fails
/// with the guard's error. Never a committed reference to removed bytes. Written by one row, and by one statement
/// rewriting a hundred rows of each kind of source.
#[tokio::test]
async fn a_reference_written_while_a_settle_removes_the_asset_fails_with_the_guards_error() {
    let _turn = FAILPOINTS.lock().await;
    for source in [
        "banners.image",
        "pages.body",
        "banners.image, every row",
        "galleries.images, every row",
        "pages.body, every row",
    ] {
        let (ctx, abandoned, k, message) = claimed_abandoned_upload().await;
        // The settle pauses after the bytes went, holding the asset's row.
        fail::cfg("consumer::after_bytes_removed", "sleep(2000)").expect("failpoint");
        let settling = settle_apart(&ctx, event(vec![record("m", &message.to_body(), 1)]));
        let deadline = Instant::now() + Duration::from_secs(10);
        while object_exists(&ctx.s3, &ctx.bucket, &k).await {
            assert!(Instant::now() < deadline, "the settle never removed the bytes");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let written = write_reference(ctx.pool(), source, abandoned).await;
        fail::remove("consumer::after_bytes_removed");
        let response = settling.await.expect("the settle thread");

        assert!(response.batch_item_failures.is_empty(), "{source}");
        let error = written.expect_err("the write of a reference to a removed asset fails").to_string();
        assert!(error.contains(&format!("refers to asset {abandoned}, which asset-sweeper has removed")), "{error}");
        assert_eq!(state(&ctx, abandoned).await, None, "{source}");
        assert!(!referenced(&ctx, abandoned).await, "no committed reference to removed bytes ({source})");
    }
}

/// A reference written, not yet committed, when the settle comes: the settle waits for it, and its recheck then
/// sees it and keeps the asset.
#[tokio::test]
async fn a_settle_waits_for_an_uncommitted_reference_and_keeps_the_asset() {
    for source in ["banners.image", "pages.body", "banners.image, every row"] {
        let (ctx, abandoned, k, message) = claimed_abandoned_upload().await;
        let mut writer = ctx.pool().begin().await.expect("writer");
        write_reference(&mut *writer, source, abandoned).await.expect("uncommitted write");
        let settling = settle_apart(&ctx, event(vec![record("m", &message.to_body(), 1)]));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!settling.is_finished(), "the settle waits for the writer ({source})");
        writer.commit().await.expect("the writer commits");
        let response = settling.await.expect("the settle thread");

        assert!(response.batch_item_failures.is_empty(), "{source}");
        assert_eq!(state(&ctx, abandoned).await.as_deref(), Some("attached"), "{source}");
        assert!(object_exists(&ctx.s3, &ctx.bucket, &k).await, "{source}");
        let actions: Vec<String> = events(&ctx, abandoned).await.into_iter().map(|(a, _)| a).collect();
        assert_eq!(actions, ["keep"], "{source}");
    }
}

/// A guard dropped after the pass is a schema change: the settle waits for the next check, which refuses, naming
/// the source and the command that guards it.
#[tokio::test]
async fn a_dropped_guard_makes_settles_wait_and_the_next_pass_refuse() {
    let ctx = TestContext::new().await;
    owner_tables(&ctx).await;
    let ws = Uuid::new_v4();
    let released = seed(&ctx, ws, "released", "3 days", &key(ws)).await;
    let message = claimed_message(&ctx).await;
    let triggers: Vec<String> = sqlx::query_scalar(
        "SELECT tgname::text FROM pg_trigger WHERE tgrelid = 'banners'::regclass AND tgname LIKE 'asset_sweeper_guard_%'",
    )
    .fetch_all(ctx.pool())
    .await
    .expect("the banners guard");
    assert_eq!(triggers.len(), 2, "on insert and on update: {triggers:?}");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP TRIGGER {} ON banners", triggers[1])))
        .execute(ctx.pool())
        .await
        .expect("drop half the guard");

    let response = handle(&consumer(&ctx), event(vec![record("m", &message.to_body(), 1)])).await;
    assert!(response.batch_item_failures.is_empty(), "postponed, not failed");
    assert_eq!(state(&ctx, released).await.as_deref(), Some("released"), "nothing settled on the old verdict");

    let sweeper = Sweeper::new(ctx.pool().clone(), ctx.sqs.clone(), ctx.settings(&[]));
    let report = sweeper.run_pass(Instant::now() + Duration::from_secs(600)).await.expect("sweep");
    assert_eq!(report.outcome, lifecycle::runs::RunOutcome::Refused);
    let reason = report.reason.expect("a reason").to_string();
    assert!(reason.contains(r#""problem":"unguarded_source""#) && reason.contains(r#""column":"image""#), "{reason}");
    assert!(reason.contains("asset-sweeper guards install"), "{reason}");
}
