//! sweep-lambda against real Postgres and LocalStack SQS: what it claims, how fairly, within which limits, and
//! what it records when it cannot or must not enqueue.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use integration_tests::fixtures::{insert_asset, insert_released};
use integration_tests::{FAILPOINTS, TestContext};
use lifecycle::CleanupMessage;
use lifecycle::runs::RunOutcome as Outcome;
use sqlx::{Connection, PgConnection};
use sweep_lambda::Sweeper;
use sweep_lambda::record::{Stop, SweepReport};
use uuid::Uuid;

fn later() -> Instant {
    Instant::now() + Duration::from_secs(600)
}

fn sweeper(ctx: &TestContext, overrides: &[(&str, &str)]) -> Sweeper {
    Sweeper::new(ctx.pool().clone(), ctx.sqs.clone(), ctx.settings(overrides))
}

async fn pass(ctx: &TestContext, overrides: &[(&str, &str)]) -> SweepReport {
    sweeper(ctx, overrides).run_pass(later()).await.expect("sweep pass")
}

/// The asset ids of every message now on the queue (which is emptied).
async fn enqueued(ctx: &TestContext) -> Vec<Uuid> {
    ctx.drain_queue()
        .await
        .iter()
        .map(|body| CleanupMessage::parse(body).expect("the sweep writes valid messages").asset_id.0)
        .collect()
}

fn set(ids: impl IntoIterator<Item = Uuid>) -> BTreeSet<Uuid> {
    ids.into_iter().collect()
}

async fn leased(ctx: &TestContext) -> BTreeSet<Uuid> {
    let ids: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM assets WHERE lease_token IS NOT NULL")
        .fetch_all(ctx.pool())
        .await
        .expect("leased rows");
    set(ids)
}

/// A recorded run.
#[derive(Debug, sqlx::FromRow)]
struct RunRow {
    outcome: String,
    claimed: i32,
    enqueued: i32,
    released: i32,
    reason: Option<serde_json::Value>,
    error: Option<String>,
}

async fn run_row(ctx: &TestContext, run_id: Uuid) -> RunRow {
    sqlx::query_as("SELECT outcome, claimed, enqueued, released, reason, error FROM sweep_runs WHERE id = $1")
        .bind(run_id)
        .fetch_one(ctx.pool())
        .await
        .expect("the pass wrote its run row")
}

#[tokio::test]
async fn exactly_the_due_rows_are_claimed_and_never_a_leased_one() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let due_a = insert_asset(ctx.pool(), ws, "released", Some("2 hours")).await;
    let due_b = insert_asset(ctx.pool(), ws, "retired", Some("1 minute")).await;
    let expired_lease = insert_asset(ctx.pool(), ws, "released", Some("3 hours")).await;
    let live_lease = insert_asset(ctx.pool(), ws, "released", Some("3 hours")).await;
    insert_asset(ctx.pool(), ws, "released", Some("-1 hour")).await; // due in an hour
    insert_asset(ctx.pool(), ws, "attached", None).await;
    insert_asset(ctx.pool(), ws, "failed", Some("5 hours")).await; // waits for an operator
    let pending = insert_asset(ctx.pool(), ws, "pending", None).await; // due a day after upload
    sqlx::query(
        "UPDATE assets SET lease_token = gen_random_uuid(),
                leased_until = CASE WHEN id = $1 THEN now() - interval '1 second' ELSE now() + interval '1 hour' END
          WHERE id IN ($1, $2)",
    )
    .bind(expired_lease)
    .bind(live_lease)
    .execute(ctx.pool())
    .await
    .expect("leases");

    let report = pass(&ctx, &[]).await;

    assert_eq!(report.outcome, Outcome::Ok);
    assert_eq!(report.stopped, Some(Stop::Drained));
    assert_eq!((report.claimed, report.enqueued, report.released), (3, 3, 0));
    let bodies = ctx.drain_queue().await;
    let messages: Vec<CleanupMessage> = bodies.iter().map(|b| CleanupMessage::parse(b).expect("valid")).collect();
    assert_eq!(set(messages.iter().map(|m| m.asset_id.0)), set([due_a, due_b, expired_lease]));
    assert!(!messages.iter().any(|m| m.asset_id.0 == pending), "a fresh upload is not due yet");

    // Each message carries the row's own lease token, the run id and the workspace, and the lease outlives
    // every delivery the queue could make (visibility 30 s × (5 + 1)).
    for m in &messages {
        let (token, workspace, lease_secs): (Uuid, Uuid, f64) = sqlx::query_as(
            "SELECT lease_token, workspace_id, extract(epoch FROM leased_until - now())::float8 FROM assets WHERE id = $1",
        )
        .bind(m.asset_id.0)
        .fetch_one(ctx.pool())
        .await
        .expect("claimed row");
        assert_eq!((m.claim_token, m.workspace_id.0, m.sweep_run_id), (token, workspace, report.run_id));
        assert!(lease_secs > 150.0 && lease_secs <= 180.0, "lease of {lease_secs}s");
    }
    let run = run_row(&ctx, report.run_id).await;
    assert_eq!((run.outcome.as_str(), run.claimed, run.enqueued, run.released), ("ok", 3, 3, 0));
}

#[tokio::test]
async fn a_sweep_that_finds_the_lock_held_records_a_skipped_run_and_claims_nothing() {
    let ctx = TestContext::new().await;
    insert_released(ctx.pool(), Uuid::new_v4(), 5, "1 hour", 10).await;
    let mut other = PgConnection::connect(&ctx.db.url).await.expect("second session");
    let held: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(sweep_lambda::lock::SWEEP_LOCK_KEY)
        .fetch_one(&mut other)
        .await
        .expect("lock");
    assert!(held);

    let report = pass(&ctx, &[]).await;
    assert_eq!((report.outcome, report.claimed), (Outcome::Skipped, 0));
    assert_eq!(run_row(&ctx, report.run_id).await.outcome, "skipped");
    assert_eq!(ctx.queue_depth().await, 0);
    assert!(leased(&ctx).await.is_empty());

    other.close().await.expect("close");
    let report = pass(&ctx, &[]).await;
    assert_eq!((report.outcome, report.enqueued), (Outcome::Ok, 5), "the lock ends with the session holding it");
}

#[tokio::test]
async fn two_passes_never_enqueue_an_asset_twice_while_its_lease_lives_but_do_after_it_expires() {
    let ctx = TestContext::new().await;
    let ids = insert_released(ctx.pool(), Uuid::new_v4(), 3, "1 hour", 10).await;

    assert_eq!(pass(&ctx, &[]).await.enqueued, 3);
    assert_eq!(pass(&ctx, &[]).await.enqueued, 0, "leased rows are not due");
    assert_eq!(set(enqueued(&ctx).await), set(ids.clone()));

    // The lease running out (a consumer that never settled): the next pass sends the assets again.
    sqlx::query("UPDATE assets SET leased_until = now() - interval '1 second'")
        .execute(ctx.pool())
        .await
        .expect("expire leases");
    assert_eq!(pass(&ctx, &[]).await.enqueued, 3);
    assert_eq!(set(enqueued(&ctx).await), set(ids));
}

#[tokio::test]
async fn a_large_backlog_in_one_workspace_does_not_keep_another_waiting_past_one_pass() {
    let ctx = TestContext::new().await;
    let (big, small) = (Uuid::new_v4(), Uuid::new_v4());
    // The big workspace's rows are all older: oldest-first alone would serve only it.
    insert_released(ctx.pool(), big, 3_000, "2 days", 10).await;
    let small_ids = insert_released(ctx.pool(), small, 10, "1 hour", 10).await;

    let report =
        pass(&ctx, &[("SWEEP_MAX_PER_PASS", "100"), ("SWEEP_BATCH_SIZE", "100"), ("BRAKE_MAX_SHARE_PERCENT", "100")])
            .await;

    assert_eq!(report.claimed, 100);
    assert_eq!(report.stopped, Some(Stop::Cap));
    let sent = set(enqueued(&ctx).await);
    assert!(set(small_ids.clone()).is_subset(&sent), "the small workspace waited behind the big one");
    assert_eq!(report.per_workspace[&platform::WorkspaceId(small)].enqueued, 10);
    assert_eq!(report.per_workspace[&platform::WorkspaceId(big)].enqueued, 90);
}

#[tokio::test]
async fn a_pass_stops_at_its_cap_and_takes_the_oldest_first() {
    let ctx = TestContext::new().await;
    let ids = insert_released(ctx.pool(), Uuid::new_v4(), 250, "1 hour", 10).await;
    let settings = [("SWEEP_MAX_PER_PASS", "100"), ("SWEEP_BATCH_SIZE", "40"), ("BRAKE_MAX_SHARE_PERCENT", "100")];

    let report = pass(&ctx, &settings).await;
    assert_eq!((report.claimed, report.enqueued, report.stopped), (100, 100, Some(Stop::Cap)));
    // insert_released makes id order the due order.
    assert_eq!(set(enqueued(&ctx).await), set(ids[..100].to_vec()));
    assert_eq!(run_row(&ctx, report.run_id).await.reason.map(|r| r["stopped"].clone()), Some(serde_json::json!("cap")));
}

#[tokio::test]
async fn a_pass_whose_time_budget_is_spent_starts_no_batch() {
    let ctx = TestContext::new().await;
    insert_released(ctx.pool(), Uuid::new_v4(), 20, "1 hour", 10).await;

    let report = sweeper(&ctx, &[]).run_pass(Instant::now()).await.expect("pass");
    assert_eq!((report.claimed, report.stopped), (0, Some(Stop::TimeBudget)));
    assert!(leased(&ctx).await.is_empty());
    assert_eq!(ctx.queue_depth().await, 0);
}

#[tokio::test]
async fn entries_sqs_rejects_have_their_claims_released_and_the_run_is_partial() {
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    let ids = insert_released(ctx.pool(), Uuid::new_v4(), 25, "1 hour", 10).await;
    let rejected = [ids[3], ids[17]];
    fail::cfg("sweep::reject_entry", &format!("return({} {})", rejected[0], rejected[1])).expect("failpoint");

    let report = pass(&ctx, &[]).await;
    fail::remove("sweep::reject_entry");

    assert_eq!(report.outcome, Outcome::Partial);
    assert_eq!((report.claimed, report.enqueued, report.released), (25, 23, 2));
    assert!(report.error.as_deref().is_some_and(|e| e.contains("InvalidMessageContents")), "{:?}", report.error);
    let leased_now = leased(&ctx).await;
    assert!(rejected.iter().all(|id| !leased_now.contains(id)), "a rejected entry kept its claim");
    assert_eq!(leased_now.len(), 23);
    let sent = set(enqueued(&ctx).await);
    assert_eq!(sent.len(), 23);
    assert!(rejected.iter().all(|id| !sent.contains(id)));
    let run = run_row(&ctx, report.run_id).await;
    assert_eq!((run.outcome.as_str(), run.claimed, run.enqueued, run.released), ("partial", 25, 23, 2));
    assert!(run.error.is_some());

    // The released rows are claimable by the next pass.
    let report = pass(&ctx, &[]).await;
    assert_eq!(set(enqueued(&ctx).await), set(rejected));
    assert_eq!(report.outcome, Outcome::Ok);
}

#[tokio::test]
async fn when_the_queue_stops_answering_mid_pass_a_pass_releases_everything_and_records_what_it_sent() {
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    insert_released(ctx.pool(), Uuid::new_v4(), 30, "1 hour", 10).await;

    fail::cfg("sweep::send_call", &format!("return({})", ctx.queue.url)).expect("failpoint");
    let report = pass(&ctx, &[("SWEEP_BATCH_SIZE", "10")]).await;
    fail::remove("sweep::send_call");

    assert_eq!(report.outcome, Outcome::Partial);
    assert_eq!(report.stopped, Some(Stop::QueueUnavailable), "it stops claiming once the queue is gone");
    assert_eq!((report.claimed, report.enqueued, report.released), (10, 0, 10));
    assert!(leased(&ctx).await.is_empty());
    let run = run_row(&ctx, report.run_id).await;
    assert_eq!((run.outcome.as_str(), run.enqueued, run.released), ("partial", 0, 10));
    assert_eq!(run.reason.map(|r| r["stopped"].clone()), Some(serde_json::json!("queue_unavailable")));
    assert!(run.error.is_some_and(|e| e.contains("SendMessageBatch failed")));
}

#[tokio::test]
async fn with_the_queue_unreadable_a_pass_claims_nothing_and_records_why() {
    let ctx = TestContext::new().await;
    insert_released(ctx.pool(), Uuid::new_v4(), 30, "1 hour", 10).await;
    let missing = format!("{}-gone", ctx.queue.url);

    let report = pass(&ctx, &[("CLEANUP_QUEUE_URL", &missing)]).await;

    assert_eq!((report.outcome, report.stopped), (Outcome::Partial, Some(Stop::QueueUnavailable)));
    assert_eq!((report.claimed, report.enqueued, report.released), (0, 0, 0));
    assert!(leased(&ctx).await.is_empty());
    let run = run_row(&ctx, report.run_id).await;
    assert!(run.error.is_some_and(|e| e.contains("GetQueueAttributes")), "the error names the call");
}

/// The queue never holds more than its ceiling: a pass claims only the room left, says how many it held back
/// and why, and the next pass (with the consumer stalled) claims nothing and sends nothing twice.
#[tokio::test]
async fn the_backlog_ceiling_holds_and_the_run_says_what_it_held_back() {
    let ctx = TestContext::new().await;
    insert_released(ctx.pool(), Uuid::new_v4(), 50, "1 hour", 10).await;
    let ceiling = [("SWEEP_QUEUE_CEILING", "20"), ("SWEEP_BATCH_SIZE", "15")];

    let report = pass(&ctx, &ceiling).await;
    assert_eq!((report.outcome, report.stopped), (Outcome::Ok, Some(Stop::Backlog)));
    assert_eq!(report.enqueued, 20);
    assert_eq!(ctx.queue_depth().await, 20);
    let run = run_row(&ctx, report.run_id).await;
    let reason = run.reason.expect("reason");
    assert_eq!(reason["stopped"], "backlog");
    assert_eq!(reason["backlog"], serde_json::json!({"queue_depth": 0, "ceiling": 20, "held_back": 30}));

    // The consumer is stalled: nothing leaves the queue, so the next pass has no room.
    let report = pass(&ctx, &ceiling).await;
    assert_eq!((report.claimed, report.stopped), (0, Some(Stop::Backlog)));
    assert_eq!(ctx.queue_depth().await, 20);
    // The consumer takes all twenty; the next pass fills the room they left, with assets never sent before.
    let first: BTreeSet<Uuid> = set(enqueued(&ctx).await);
    assert_eq!(first.len(), 20);
    let report = pass(&ctx, &ceiling).await;
    assert_eq!(report.enqueued, 20);
    let second = set(enqueued(&ctx).await);
    assert!(first.is_disjoint(&second), "no asset is sent twice");
}

/// A source no index serves refuses the pass with the statement that makes one; `UNINDEXED_SOURCES=warn` lets it
/// through with the warning on record.
#[tokio::test]
async fn an_unindexed_source_refuses_the_pass_with_the_create_index_statement() {
    assert_refused(
        "CREATE TABLE products (id serial PRIMARY KEY, hero uuid REFERENCES assets (id))",
        r#"CREATE INDEX CONCURRENTLY ON \"public\".\"products\" (\"hero\");"#,
    )
    .await;
    assert_refused(
        "CREATE TABLE galleries (id serial PRIMARY KEY, images asset_id[]); CREATE INDEX ON galleries (id, images)",
        r#"CREATE INDEX CONCURRENTLY ON \"public\".\"galleries\" USING gin (\"images\");"#,
    )
    .await;

    let ctx = TestContext::new().await;
    insert_released(ctx.pool(), Uuid::new_v4(), 3, "1 hour", 10).await;
    sqlx::raw_sql("CREATE TABLE products (id serial PRIMARY KEY, hero uuid REFERENCES assets (id))")
        .execute(ctx.pool())
        .await
        .expect("owner table");
    let report = pass(&ctx, &[("UNINDEXED_SOURCES", "warn")]).await;
    assert_eq!((report.outcome, report.enqueued), (Outcome::Ok, 3));
    let reason = run_row(&ctx, report.run_id).await.reason.expect("reason");
    assert_eq!(reason["schema_warnings"][0]["problem"], "unindexed_source", "{reason}");
}

/// Runs a pass with one due asset after `breakage`, and checks it refused with `expected` in its reason.
async fn assert_refused(breakage: &str, expected: &str) {
    let ctx = TestContext::new().await;
    insert_released(ctx.pool(), Uuid::new_v4(), 3, "1 hour", 10).await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(breakage)).execute(ctx.pool()).await.expect("break the schema");

    let report = pass(&ctx, &[]).await;

    assert_eq!(report.outcome, Outcome::Refused, "{breakage}");
    assert_eq!((report.claimed, report.enqueued), (0, 0));
    assert_eq!(ctx.queue_depth().await, 0);
    assert!(leased(&ctx).await.is_empty());
    let run = run_row(&ctx, report.run_id).await;
    assert_eq!((run.outcome.as_str(), run.claimed), ("refused", 0));
    let reason = run.reason.expect("a refusal records its reason").to_string();
    assert!(reason.contains(expected), "{reason} lacks {expected}");
}

#[tokio::test]
async fn a_declared_source_that_does_not_exist_refuses_the_pass() {
    assert_refused(
        "INSERT INTO asset_reference_sources (table_name, column_name, json_path) VALUES ('pages', 'body', '$.**')",
        r#""problem":"declared_source_missing""#,
    )
    .await;
}

#[tokio::test]
async fn a_declared_source_of_the_wrong_type_refuses_the_pass() {
    assert_refused(
        "CREATE TABLE pages (id serial PRIMARY KEY, body text);
         INSERT INTO asset_reference_sources (table_name, column_name, json_path) VALUES ('pages', 'body', '$.**')",
        r#""found":"text""#,
    )
    .await;
}

#[tokio::test]
async fn a_cascading_foreign_key_to_assets_refuses_the_pass() {
    assert_refused(
        "CREATE TABLE products (id serial PRIMARY KEY, image uuid REFERENCES assets (id) ON DELETE CASCADE)",
        r#""on_delete":"CASCADE""#,
    )
    .await;
}

#[tokio::test]
async fn a_missing_asset_id_domain_refuses_the_pass() {
    assert_refused("DROP DOMAIN asset_id", r#""problem":"domain_missing""#).await;
}

#[tokio::test]
async fn an_undeclared_column_holding_asset_ids_refuses_the_pass_until_it_is_excluded() {
    let undeclared = "CREATE TABLE legacy_gallery (id serial PRIMARY KEY, picture uuid, caption text);
         INSERT INTO legacy_gallery (picture, caption) SELECT id, 'a cat' FROM assets, generate_series(1, 4)";
    assert_refused(undeclared, r#""column":"picture""#).await;
    // Embedded in text (a URL) counts too.
    assert_refused(
        "CREATE TABLE legacy_pages (id serial PRIMARY KEY, html text);
         INSERT INTO legacy_pages (html) SELECT '<img src=\"/a/' || id || '.png\">' FROM assets, generate_series(1, 4)",
        r#""column":"html""#,
    )
    .await;

    // An operator's explicit exclusion is a statement that the column is not a reference.
    let ctx = TestContext::new().await;
    insert_released(ctx.pool(), Uuid::new_v4(), 3, "1 hour", 10).await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(undeclared)).execute(ctx.pool()).await.expect("undeclared column");
    sqlx::query(
        "INSERT INTO asset_reference_exclusions (table_name, column_name, reason)
         VALUES ('legacy_gallery', 'picture', 'copied ids, kept for history')",
    )
    .execute(ctx.pool())
    .await
    .expect("exclusion");
    let report = pass(&ctx, &[]).await;
    assert_eq!((report.outcome, report.enqueued), (Outcome::Ok, 3));
}

#[tokio::test]
async fn the_brake_holds_back_a_mass_release_and_an_approval_lets_the_next_pass_through() {
    let ctx = TestContext::new().await;
    let (mass, normal) = (Uuid::new_v4(), Uuid::new_v4());
    // Everything the mass workspace holds became due at once, as an outage that made it all look unused would.
    insert_released(ctx.pool(), mass, 150, "1 hour", 1_000).await;
    for _ in 0..5 {
        insert_asset(ctx.pool(), normal, "attached", None).await;
    }
    let normal_due = insert_asset(ctx.pool(), normal, "released", Some("1 hour")).await;

    let report = pass(&ctx, &[]).await;

    assert_eq!(report.outcome, Outcome::Braked);
    assert_eq!(report.braked_workspaces, 1);
    assert_eq!(set(enqueued(&ctx).await), set([normal_due]), "only the unbraked workspace is enqueued");
    let mass_counts = &report.per_workspace[&platform::WorkspaceId(mass)];
    assert_eq!(mass_counts.braked.as_deref(), Some("150 of 150 assets due, above 25%"));
    assert_eq!(mass_counts.claimed, 0);
    assert_eq!(run_row(&ctx, report.run_id).await.outcome, "braked");
    let recorded: serde_json::Value =
        sqlx::query_scalar("SELECT per_workspace -> $2::text FROM sweep_runs WHERE id = $1")
            .bind(report.run_id)
            .bind(mass.to_string())
            .fetch_one(ctx.pool())
            .await
            .expect("per-workspace figures");
    assert_eq!(
        (&recorded["due_assets"], &recorded["live_assets"], &recorded["due_bytes"]),
        (&serde_json::json!(150), &serde_json::json!(150), &serde_json::json!(150_000))
    );

    // What `asset-sweeper approve` records, with the plan it read (its own test runs the command).
    sqlx::query(
        "INSERT INTO brake_approvals (workspace_id, approved_by, reason, due_assets, due_bytes)
         VALUES ($1, 'ops@example.com', 'migration', 150, 150000)",
    )
    .bind(mass)
    .execute(ctx.pool())
    .await
    .expect("approve");
    let report = pass(&ctx, &[]).await;
    assert_eq!((report.outcome, report.enqueued), (Outcome::Ok, 150));
    let approval = report.per_workspace[&platform::WorkspaceId(mass)].approval.as_ref().expect("approval recorded");
    assert_eq!(approval.approved_by, "ops@example.com");
}

/// `n` more assets of `workspace` in `state`, of 1 000 bytes each, due now when `due` (keys `{workspace}/{tag}-{i}`).
async fn more_assets(ctx: &TestContext, workspace: Uuid, tag: &str, n: i64, state: &str, due: bool) -> Vec<Uuid> {
    sqlx::query_scalar(
        "WITH objects AS (
             INSERT INTO stored_objects (storage_key, content_hash, byte_size)
             SELECT $1::text || '/' || $2 || '-' || i, 'sha256:' || $2 || i, 1000 FROM generate_series(1, $3) AS i
             RETURNING storage_key
         )
         INSERT INTO assets (workspace_id, storage_key, content_hash, byte_size, state, due_at)
         SELECT $1, storage_key, 'sha256:test', 1000, $4, CASE WHEN $5 THEN now() END
           FROM objects RETURNING id",
    )
    .bind(workspace)
    .bind(tag)
    .bind(n)
    .bind(state)
    .bind(due)
    .fetch_all(ctx.pool())
    .await
    .expect("more assets")
}

#[tokio::test]
async fn a_brake_approval_covers_the_plan_the_operator_read_and_one_that_grew_beyond_it_is_held_again_with_both_counts()
{
    let ctx = TestContext::new().await;
    let url = ctx.db.url.as_str();
    let (grown, steady) = (Uuid::new_v4(), Uuid::new_v4());
    for ws in [grown, steady] {
        insert_released(ctx.pool(), ws, 100, "1 hour", 1_000).await;
        more_assets(&ctx, ws, "kept", 20, "attached", false).await;
    }
    assert_eq!(pass(&ctx, &[]).await.braked_workspaces, 2, "100 of 120 due: both braked");
    ctx.drain_queue().await;

    // The operator reads what the approval would cover, and nothing is recorded.
    let approvals = || async {
        let n: i64 =
            sqlx::query_scalar("SELECT count(*) FROM brake_approvals").fetch_one(ctx.pool()).await.expect("count");
        n
    };
    let grown_id = grown.to_string();
    let approve = |ws: &str, dry: bool| {
        let mut args = vec!["approve", ws, "--by", "ops@example.com", "--reason", "catalogue migration"];
        if dry {
            args.push("--dry-run");
        }
        crate::cli::stdout(&crate::cli::run(url, None, &args))
    };
    let shown = approve(&grown_id, true);
    assert!(shown.contains(&format!("workspace {grown}: 100 asset(s), 100000 bytes due, of 120 asset(s)")), "{shown}");
    assert!(shown.contains(&format!("{grown}/1 ")) && shown.contains("… and 90 more"), "the first candidates: {shown}");
    assert!(shown.contains("nothing recorded (--dry-run)"), "{shown}");
    assert_eq!(approvals().await, 0, "a dry run records nothing");
    let granted = approve(&grown_id, false);
    assert!(granted.contains("while at most 110 asset(s) and 110000 bytes are due"), "{granted}");
    approve(&steady.to_string(), false);
    let recorded: (i64, i64, i64) = sqlx::query_as(
        "SELECT due_assets, due_bytes, jsonb_array_length(sample)::bigint FROM brake_approvals WHERE workspace_id = $1",
    )
    .bind(grown)
    .fetch_one(ctx.pool())
    .await
    .expect("the approval's plan");
    assert_eq!(recorded, (100, 100_000, 10), "the plan it printed is the plan it recorded");

    // Before the next pass: tenfold due in one workspace (a restored backup, a dropped table), 5% more in the other.
    more_assets(&ctx, grown, "orphaned", 900, "released", true).await;
    let steady_more = more_assets(&ctx, steady, "more", 5, "released", true).await;
    let report = pass(&ctx, &[]).await;

    assert_eq!((report.outcome, report.braked_workspaces), (Outcome::Braked, 1));
    let held = &report.per_workspace[&platform::WorkspaceId(grown)];
    assert_eq!(held.claimed, 0);
    let outgrown = held.outgrown.as_ref().expect("the approval it outgrew");
    assert_eq!((outgrown.figure.what, outgrown.figure.approved, outgrown.figure.now), ("assets", 100, 1_000));
    let why = held.braked.as_deref().unwrap_or_default();
    assert!(why.starts_with("1000 of 1020 assets due, above 25%; approval"), "{why}");
    assert!(why.contains("was granted on 100 assets and 100000 bytes: 1000 assets now against 100 approved"), "{why}");
    let passed = &report.per_workspace[&platform::WorkspaceId(steady)];
    assert_eq!((passed.claimed, passed.braked.as_deref()), (105, None), "within the tolerance it goes through");
    assert!(passed.approval.is_some());
    let sent = set(enqueued(&ctx).await);
    assert_eq!(sent.len(), 105);
    assert!(steady_more.iter().all(|id| sent.contains(id)), "only the steady workspace is enqueued");

    let status = crate::cli::run(url, Some(&ctx), &["status"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains(&format!("held: {grown}: 1000 of 1020 assets due")), "{text}");
    assert!(text.contains("1000 assets now against 100 approved, beyond the 10% tolerance"), "{text}");
    assert!(text.contains("(granted on 100 asset(s), 100000 bytes due)"), "the approvals in force: {text}");
    assert_eq!(status.status.code(), Some(1), "a held workspace needs a person");
}

#[tokio::test]
async fn the_scheduled_event_fixture_drives_the_handler() {
    let ctx = TestContext::new().await;
    insert_released(ctx.pool(), Uuid::new_v4(), 4, "1 hour", 10).await;
    let fixture = include_str!("../fixtures/eventbridge-scheduled-event.json");
    // The fixture is the EventBridge shape the schedule rule delivers.
    let typed: aws_lambda_events::event::eventbridge::EventBridgeEvent =
        serde_json::from_str(fixture).expect("EventBridge event");
    assert_eq!(typed.detail_type, "Scheduled Event");
    let mut context = lambda_runtime::Context::default();
    context.request_id = "fixture".into();
    context.deadline = (std::time::SystemTime::now() + Duration::from_secs(900))
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;

    let report = sweeper(&ctx, &[]).handle(lambda_runtime::LambdaEvent::new(typed, context)).await.expect("handler");
    assert_eq!((report.outcome, report.enqueued), (Outcome::Ok, 4));
    let response = serde_json::to_value(&report).expect("the response serializes");
    assert_eq!(response["outcome"], "ok");
}

#[tokio::test]
async fn a_column_of_a_domain_over_uuid_holding_asset_ids_refuses_the_pass() {
    assert_refused(
        "CREATE DOMAIN legacy_ref AS uuid;
         CREATE TABLE legacy_banners (id serial PRIMARY KEY, image legacy_ref[]);
         INSERT INTO legacy_banners (image) SELECT ARRAY[id::legacy_ref] FROM assets, generate_series(1, 4)",
        r#""column":"image","data_type":"uuid[]""#,
    )
    .await;
}

#[tokio::test]
async fn a_composite_foreign_key_and_a_domain_built_on_asset_id_are_sources_not_unexplained_columns() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let kept = insert_asset(ctx.pool(), ws, "attached", None).await;
    insert_released(ctx.pool(), ws, 3, "1 hour", 10).await;
    sqlx::raw_sql(
        "ALTER TABLE assets ADD UNIQUE (workspace_id, id);
         CREATE TABLE products (id serial PRIMARY KEY, workspace uuid, hero uuid,
                                FOREIGN KEY (workspace, hero) REFERENCES assets (workspace_id, id));
         CREATE INDEX products_hero ON products (hero);
         CREATE DOMAIN thumbnail AS asset_id;
         CREATE TABLE pages (id serial PRIMARY KEY, thumb thumbnail);
         CREATE INDEX pages_thumb ON pages (thumb);",
    )
    .execute(ctx.pool())
    .await
    .expect("owner tables");
    integration_tests::install_guards(ctx.pool()).await;
    sqlx::query("INSERT INTO products (workspace, hero) VALUES ($1, $2)")
        .bind(ws)
        .bind(kept)
        .execute(ctx.pool())
        .await
        .expect("product");
    sqlx::query("INSERT INTO pages (thumb) VALUES ($1)").bind(kept).execute(ctx.pool()).await.expect("page");

    let report = pass(&ctx, &[]).await;
    assert_eq!((report.outcome, report.enqueued), (Outcome::Ok, 3), "{:?}", report.reason);

    let mut conn = ctx.pool().acquire().await.expect("connection");
    let map = schema::check(&mut conn, (&ctx.settings(&[])).into()).await.expect("valid map");
    let found: Vec<String> = map.sources.iter().map(ToString::to_string).collect();
    assert_eq!(found, ["public.products.hero (foreign key)", "public.pages.thumb (asset_id)"]);
}

#[tokio::test]
async fn a_pass_marks_the_run_row_of_a_pass_that_died_as_failed() {
    let ctx = TestContext::new().await;
    let dead = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO sweep_runs (id, started_at, code_version, claimed) VALUES ($1, now() - interval '2 hours', 'old', 7)",
    )
    .bind(dead)
    .execute(ctx.pool())
    .await
    .expect("a run that never finished");

    pass(&ctx, &[]).await;

    let run = run_row(&ctx, dead).await;
    assert_eq!((run.outcome.as_str(), run.claimed), ("failed", 7), "how far it got is kept");
    assert!(run.error.is_some_and(|e| e.contains("without finishing")));
}
