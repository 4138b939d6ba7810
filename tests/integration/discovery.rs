//! Discovery (invariant 12) with the real sweep and consumer: an asset whose owner record went without anyone
//! releasing it is found, retired and purged; one still referred to through any source kind is never made due; a
//! workspace that suddenly looks unreferenced is held by the brake; the cursor resumes, wraps and keeps to its
//! share of the pass; an application referring to the asset again while discovery works keeps it.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::pipeline::{actions, owner_tables, pass, settle_queue};
use integration_tests::fixtures::{object_exists, seed, state};
use integration_tests::{FAILPOINTS, TestContext};
use lifecycle::discovery::Stop;
use lifecycle::runs::RunOutcome;
use platform::WorkspaceId;
use serde_json::Value;
use sweep_lambda::Sweeper;
use uuid::Uuid;

/// An attached asset, in use for `age` (an SQL interval), that nobody has scheduled: no due time.
async fn attached(ctx: &TestContext, ws: Uuid, age: &str) -> (Uuid, String) {
    let key = format!("{ws}/{}.png", Uuid::new_v4());
    let id = seed(ctx, ws, "attached", age, &key).await;
    // A due time is scheduling, not a write about the asset: clearing it leaves the grace floor where it was.
    sqlx::query("UPDATE assets SET due_at = NULL WHERE id = $1")
        .bind(id)
        .execute(ctx.pool())
        .await
        .expect("unscheduled");
    (id, key)
}

async fn sql(ctx: &TestContext, statement: &str, id: Uuid) {
    sqlx::query(sqlx::AssertSqlSafe(statement.to_owned())).bind(id).execute(ctx.pool()).await.expect(statement);
}

/// `n` attached assets of `ws`, three days old and unscheduled, each referred to by a `products` row; without
/// bytes (nothing here destroys them). Set-based, for the brake's sizes.
async fn referenced_assets(ctx: &TestContext, ws: Uuid, n: i64) -> Vec<Uuid> {
    let ids = sqlx::query_scalar(
        "WITH objects AS (
             INSERT INTO stored_objects (storage_key, content_hash, byte_size, created_at, updated_at)
             SELECT $1::text || '/' || i, 'sha256:' || i, 100, now() - interval '3 days', now() - interval '3 days'
               FROM generate_series(1, $2) AS i
             RETURNING storage_key
         ), assets AS (
             INSERT INTO assets (workspace_id, storage_key, content_hash, byte_size, state, created_at, updated_at)
             SELECT $1, storage_key, 'sha256:test', 100, 'attached', now() - interval '3 days', now() - interval '3 days'
               FROM objects
             RETURNING id
         ), owners AS (INSERT INTO products (hero) SELECT id FROM assets)
         SELECT id FROM assets",
    )
    .bind(ws)
    .bind(n)
    .fetch_all(ctx.pool())
    .await
    .expect("referenced assets");
    // The asset rows touched their objects (an upload restarts the grace floor): set them back to their age.
    sqlx::query("UPDATE stored_objects SET updated_at = now() - interval '3 days' WHERE storage_key LIKE $1 || '/%'")
        .bind(ws.to_string())
        .execute(ctx.pool())
        .await
        .expect("object age");
    ids
}

#[tokio::test]
async fn an_owner_row_deleted_without_a_release_gets_its_asset_retired_then_purged_and_no_referenced_one_is_made_due() {
    // A failpoint of another test (`census::advance`) would fail this one's census, and stall its pass.
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    owner_tables(&ctx).await;
    let ws = Uuid::new_v4();
    let (forgotten, forgotten_key) = attached(&ctx, ws, "3 days").await;
    let (by_fk, _) = attached(&ctx, ws, "3 days").await;
    let (by_domain, _) = attached(&ctx, ws, "3 days").await;
    let (by_array, _) = attached(&ctx, ws, "3 days").await;
    let (by_document, _) = attached(&ctx, ws, "3 days").await;
    let (by_uppercase, _) = attached(&ctx, ws, "3 days").await;
    // Unreferenced, but attached an hour ago: inside the grace period.
    let (young, young_key) = attached(&ctx, ws, "1 hour").await;
    sql(&ctx, "INSERT INTO products (hero) VALUES ($1)", forgotten).await;
    sql(&ctx, "INSERT INTO products (hero) VALUES ($1)", by_fk).await;
    sql(&ctx, "INSERT INTO banners (image) VALUES ($1)", by_domain).await;
    sql(&ctx, "INSERT INTO galleries (images) VALUES (ARRAY[gen_random_uuid(), $1]::asset_id[])", by_array).await;
    sql(&ctx, "INSERT INTO pages (body) VALUES (jsonb_build_object('blocks', jsonb_build_array(jsonb_build_object('image', $1::text))))", by_document).await;
    sql(&ctx, "INSERT INTO pages (body) VALUES (jsonb_build_object('hero', upper($1::text)))", by_uppercase).await;
    // The application deletes the owner record with plain SQL and forgets to release the asset.
    sql(&ctx, "DELETE FROM products WHERE hero = $1", forgotten).await;

    let first = pass(&ctx, &[]).await;
    assert_eq!(first.outcome, RunOutcome::Ok, "{:?}", first.reason);
    let discovery = first.discovery.as_ref().expect("the run records discovery");
    assert_eq!((discovery.scanned, discovery.found, discovery.stopped), (6, 1, Stop::CycleComplete));
    assert_eq!(first.enqueued, 1, "due when its grace floor ended: claimed in the same pass");
    settle_queue(&ctx).await;

    assert_eq!(state(&ctx, forgotten).await.as_deref(), Some("retired"));
    assert_eq!(actions(&ctx, forgotten).await, ["discovered", "retire"]);
    let evidence: Value = sqlx::query_scalar(
        "SELECT evidence FROM settlement_events WHERE asset_id = $1 AND action = 'discovered' AND sweep_run_id = $2",
    )
    .bind(forgotten)
    .bind(first.run_id)
    .fetch_one(ctx.pool())
    .await
    .expect("the discovered event names the pass");
    assert_eq!(
        (&evidence["referenced"], &evidence["sources_checked"], &evidence["was"]),
        (&Value::from(false), &Value::from(4), &Value::from("attached"))
    );
    assert!(object_exists(&ctx.s3, &ctx.bucket, &forgotten_key).await, "retiring keeps the bytes");
    for kept in [by_fk, by_domain, by_array, by_document, by_uppercase, young] {
        assert_eq!(state(&ctx, kept).await.as_deref(), Some("attached"), "{kept}");
        assert!(actions(&ctx, kept).await.is_empty(), "never made due: {kept}");
    }
    assert!(object_exists(&ctx.s3, &ctx.bucket, &young_key).await);

    // Its retention ends, a month on (every census since having read the schema): the purge takes bytes and row.
    sql(&ctx, "UPDATE assets SET retired_at = retired_at - interval '31 days', purge_after = now() - interval '1 minute', due_at = now() - interval '1 minute' WHERE id = $1", forgotten).await;
    let second = pass(&ctx, &[]).await;
    assert_eq!(second.outcome, RunOutcome::Ok, "{:?}", second.reason);
    assert_eq!(second.discovery.as_ref().map(|d| (d.cycle, d.found)), Some((2, 0)), "a new cycle, nothing new");
    settle_queue(&ctx).await;
    assert_eq!(state(&ctx, forgotten).await, None);
    assert!(!object_exists(&ctx.s3, &ctx.bucket, &forgotten_key).await);
    assert_eq!(actions(&ctx, forgotten).await, ["discovered", "retire", "purge"]);
}

/// Ids written at a declared path in mixed case before the product was adopted (no guard noted their spellings) are
/// references the recheck matches only once the census has noted them. A pass whose census has not read that source
/// since it was declared makes nothing due, naming the source; once the census has read it, discovery runs, finds
/// the unreferenced asset and keeps the others.
#[tokio::test]
async fn discovery_makes_nothing_due_until_the_census_has_read_each_declared_source_once() {
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    owner_tables(&ctx).await;
    let ws = Uuid::new_v4();
    let mut mixed = Vec::new();
    for _ in 0..3 {
        let (id, _) = attached(&ctx, ws, "3 days").await;
        // The first letter upper case, the rest as Postgres writes them: neither all lower nor all upper case.
        let text = id.to_string();
        let first = text.find(|c: char| c.is_ascii_alphabetic()).expect("a letter");
        let spelled = format!(
            "{}{}",
            &text[..first],
            text[first..].replacen(&text[first..=first], &text[first..=first].to_uppercase(), 1)
        );
        assert!(spelled != text && spelled != text.to_uppercase(), "{spelled}");
        sqlx::query("INSERT INTO pages (body) VALUES (jsonb_build_object('hero', $1::text))")
            .bind(&spelled)
            .execute(ctx.pool())
            .await
            .expect("page");
        mixed.push(id);
    }
    // Written before the product came: no guard noted how they are spelled.
    sqlx::raw_sql("DELETE FROM asset_id_spellings").execute(ctx.pool()).await.expect("no spellings");
    let (forgotten, _) = attached(&ctx, ws, "3 days").await;

    fail::cfg("census::advance", "return").expect("failpoint");
    let unread = pass(&ctx, &[]).await;
    fail::remove("census::advance");
    // The census failed and nothing else could move: the pass says so rather than `ok`.
    assert_eq!(unread.outcome, RunOutcome::Stalled, "{:?}", unread.reason);
    assert_eq!(unread.stalled.as_ref().map(|held| held[0].step.as_str()), Some("census"), "{:?}", unread.stalled);
    let waited = unread.discovery.as_ref().expect("discovery ran");
    assert_eq!((waited.stopped, waited.found, waited.scanned), (Stop::CensusUnread, 0, 0), "{waited:?}");
    assert_eq!(waited.waiting_for, vec!["public.pages.body".to_owned()]);
    for id in mixed.iter().chain([&forgotten]) {
        assert!(actions(&ctx, *id).await.is_empty(), "nothing made due while the census has not read the source");
    }

    let read = pass(&ctx, &[]).await;
    let discovered = read.discovery.as_ref().expect("discovery ran");
    assert_eq!((discovered.stopped, discovered.found), (Stop::CycleComplete, 1), "{discovered:?}");
    settle_queue(&ctx).await;
    assert_eq!(actions(&ctx, forgotten).await, ["discovered", "retire"]);
    for id in &mixed {
        assert_eq!(state(&ctx, *id).await.as_deref(), Some("attached"), "{id}");
        assert!(actions(&ctx, *id).await.is_empty(), "never made due: {id}");
    }
}

#[tokio::test]
async fn a_workspace_that_suddenly_looks_unreferenced_is_held_by_the_brake_and_a_broken_path_stops_discovery() {
    // A failpoint of another test (`census::advance`) would fail this one's census, and stall its pass.
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    owner_tables(&ctx).await;
    let (mass, normal) = (Uuid::new_v4(), Uuid::new_v4());
    let mass_assets = referenced_assets(&ctx, mass, 120).await;
    referenced_assets(&ctx, normal, 120).await;
    let (normal_forgotten, _) = attached(&ctx, normal, "3 days").await;
    // One workspace's owner rows go at once: everything of it now looks unreferenced.
    sqlx::query("DELETE FROM products WHERE hero = ANY ($1)")
        .bind(&mass_assets)
        .execute(ctx.pool())
        .await
        .expect("delete");

    let report = pass(&ctx, &[]).await;
    assert_eq!(report.outcome, RunOutcome::Braked);
    assert_eq!(report.discovery.as_ref().map(|d| d.found), Some(121));
    let held = &report.per_workspace[&WorkspaceId(mass)];
    assert_eq!(held.braked.as_deref(), Some("120 of 120 assets due, above 25%"));
    assert_eq!(held.claimed, 0);
    assert_eq!(report.per_workspace[&WorkspaceId(normal)].enqueued, 1, "the other workspace proceeds");
    settle_queue(&ctx).await;
    assert_eq!(state(&ctx, normal_forgotten).await.as_deref(), Some("retired"));
    let retired: i64 = sqlx::query_scalar("SELECT count(*) FROM assets WHERE workspace_id = $1 AND state = 'retired'")
        .bind(mass)
        .fetch_one(ctx.pool())
        .await
        .expect("count");
    assert_eq!(retired, 0, "nothing of the braked workspace retires");

    // A declared path that stops matching where the documents hold their ids: the census finds the ids outside it
    // and the check refuses, so discovery makes nothing due.
    let documented = Uuid::new_v4();
    let (in_document, _) = attached(&ctx, documented, "3 days").await;
    sql(&ctx, "INSERT INTO pages (body) VALUES (jsonb_build_object('hero', $1::text))", in_document).await;
    sqlx::raw_sql("UPDATE asset_reference_sources SET json_path = '$.cover' WHERE table_name = 'pages'")
        .execute(ctx.pool())
        .await
        .expect("break the path");
    let refused = pass(&ctx, &[]).await;
    assert_eq!(refused.outcome, RunOutcome::Refused, "{:?}", refused.reason);
    assert!(refused.discovery.is_none(), "a refused check stops discovery");
    assert_eq!(state(&ctx, in_document).await.as_deref(), Some("attached"));
    assert!(actions(&ctx, in_document).await.is_empty());
}

#[tokio::test]
async fn the_cursor_resumes_across_passes_wraps_and_keeps_discovery_within_its_time_share() {
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    owner_tables(&ctx).await;
    let ws = Uuid::new_v4();
    let mut ids = referenced_assets(&ctx, ws, 22).await;
    let mut unreferenced = Vec::new();
    for _ in 0..3 {
        unreferenced.push(attached(&ctx, ws, "3 days").await.0);
    }
    ids.extend(&unreferenced);
    ids.sort();
    let pace = [("DISCOVERY_BATCH_SIZE", "4"), ("DISCOVERY_MAX_PER_PASS", "10")];

    // Ten a pass, from where the last one stopped.
    let first = pass(&ctx, &pace).await;
    let d = first.discovery.as_ref().expect("discovery");
    assert_eq!((d.cycle, d.batches, d.scanned, d.stopped), (1, 3, 10, Stop::Cap));
    assert_eq!(d.cursor, Uuid::from_u128(ids[9].as_u128() + 1), "the cursor is past the tenth asset");
    let recorded: Value = sqlx::query_scalar("SELECT discovery FROM sweep_runs WHERE id = $1")
        .bind(first.run_id)
        .fetch_one(ctx.pool())
        .await
        .expect("run row");
    assert_eq!((&recorded["scanned"], &recorded["cursor"]), (&Value::from(10), &Value::from(d.cursor.to_string())));
    let second = pass(&ctx, &pace).await;
    let d = second.discovery.as_ref().expect("discovery");
    assert_eq!((d.cycle, d.scanned, d.cycle_scanned, d.stopped), (1, 10, 20, Stop::Cap));
    let third = pass(&ctx, &pace).await;
    let d = third.discovery.as_ref().expect("discovery");
    assert_eq!((d.cycle, d.scanned, d.cycle_scanned, d.cycle_found), (1, 5, 25, 3));
    assert_eq!((d.stopped, d.cursor), (Stop::CycleComplete, Uuid::nil()));
    assert!(d.last_cycle_seconds.is_some(), "the cycle's length is recorded");
    let found: HashSet<Uuid> = sqlx::query_scalar("SELECT asset_id FROM settlement_events WHERE action = 'discovered'")
        .fetch_all(ctx.pool())
        .await
        .expect("events")
        .into_iter()
        .collect();
    assert_eq!(found, unreferenced.iter().copied().collect(), "each found once, by whichever pass walked past it");

    // The next cycle wraps to the first asset; the three are scheduled now, so it walks the other 22.
    let fourth = pass(&ctx, &pace).await;
    let d = fourth.discovery.as_ref().expect("discovery");
    assert_eq!((d.cycle, d.scanned, d.found), (2, 10, 0));

    // A slow database: each batch takes 300 ms, and discovery's share of a four-second pass is a quarter of it.
    let waits: Vec<String> = ids.iter().map(Uuid::to_string).collect();
    fail::cfg("discovery::schedule", &format!("return(300 {})", waits.join(" "))).expect("failpoint");
    let sweeper = Sweeper::new(ctx.pool().clone(), ctx.sqs.clone(), ctx.settings(&[("DISCOVERY_BATCH_SIZE", "1")]));
    let started = Instant::now();
    let slow = sweeper.run_pass(started + Duration::from_secs(4)).await.expect("sweep pass");
    fail::remove("discovery::schedule");
    let d = slow.discovery.as_ref().expect("discovery");
    assert_eq!(d.stopped, Stop::TimeShare, "{d:?}");
    assert!((1..=5).contains(&d.batches), "a second's share holds a few 300 ms batches, not the 22 left: {d:?}");
}

#[tokio::test]
async fn an_application_referring_to_the_asset_again_while_discovery_schedules_it_keeps_it() {
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    owner_tables(&ctx).await;
    let ws = Uuid::new_v4();
    let (asset, key) = attached(&ctx, ws, "3 days").await;

    // Discovery has asked the sources and found nothing; before it schedules, the application uses the asset again.
    lifecycle::discovery::PAUSED.store(false, std::sync::atomic::Ordering::SeqCst);
    fail::cfg("discovery::schedule", &format!("return(3000 {asset})")).expect("failpoint");
    let settings = ctx.settings(&[]);
    let url = ctx.db.url.clone();
    let sweeping = tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        runtime.block_on(async move {
            let pool = sqlx::PgPool::connect(&url).await.expect("the sweep's pool");
            let sqs = platform::aws::sqs_client(&platform::aws::sdk_config().await);
            Sweeper::new(pool, sqs, settings).run_pass(Instant::now() + Duration::from_secs(600)).await
        })
    });
    // The write lands inside the pause, whenever the batch reaches it.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !lifecycle::discovery::PAUSED.load(std::sync::atomic::Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "discovery never reached the asset's batch");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sql(&ctx, "INSERT INTO banners (image) VALUES ($1)", asset).await;
    let report = sweeping.await.expect("the sweep thread").expect("sweep pass");
    fail::remove("discovery::schedule");
    assert_eq!(report.discovery.as_ref().map(|d| d.found), Some(1), "it could not know");
    assert_eq!(report.enqueued, 1);

    // The settle rechecks under lock: the new reference keeps the asset and its bytes.
    settle_queue(&ctx).await;
    assert_eq!(state(&ctx, asset).await.as_deref(), Some("attached"));
    assert!(object_exists(&ctx.s3, &ctx.bucket, &key).await);
    assert_eq!(actions(&ctx, asset).await, ["discovered", "keep"]);
    let due: Option<String> = sqlx::query_scalar("SELECT due_at::text FROM assets WHERE id = $1")
        .bind(asset)
        .fetch_one(ctx.pool())
        .await
        .expect("due");
    assert_eq!(due, None, "kept: unscheduled again, for the next cycle to look at");
}

/// A cycle that has walked every asset rests for `DISCOVERY_CYCLE_INTERVAL` before the next begins: an asset whose
/// owner row goes meanwhile is found by the first pass after the rest, not by one during it (a resting pass looks
/// at nothing, and says so); one whose record a retention rule deletes, by that pass; with no rest, by the next.
#[tokio::test]
async fn discovery_rests_between_cycles_for_its_interval_and_then_finds_what_went_meanwhile() {
    // A failpoint of another test (`census::advance`) would fail this one's census, and stall its pass.
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    owner_tables(&ctx).await;
    let ws = Uuid::new_v4();
    let kept = referenced_assets(&ctx, ws, 3).await;
    let hourly = [("DISCOVERY_CYCLE_INTERVAL", "1h")];
    let first = pass(&ctx, &hourly).await;
    let walked = first.discovery.as_ref().expect("discovery ran");
    assert_eq!((walked.stopped, walked.scanned, walked.found), (Stop::CycleComplete, 3, 0), "{walked:?}");

    // The owner row of one goes right after the cycle ended.
    sqlx::query("DELETE FROM products WHERE hero = $1").bind(kept[0]).execute(ctx.pool()).await.expect("delete");
    let resting = pass(&ctx, &hourly).await;
    assert_eq!(resting.outcome, RunOutcome::Ok, "{:?}", resting.reason);
    let rested = resting.discovery.as_ref().expect("discovery reported");
    assert_eq!((rested.stopped, rested.batches, rested.scanned), (Stop::Resting, 0, 0), "{rested:?}");
    assert!(actions(&ctx, kept[0]).await.is_empty(), "nothing is looked at while discovery rests");

    // The rest over (as an hour later: the last cycle moved back), the next cycle finds it.
    sqlx::query("UPDATE discovery_state SET last_cycle_completed_at = last_cycle_completed_at - interval '61 minutes'")
        .execute(ctx.pool())
        .await
        .expect("an hour on");
    let after = pass(&ctx, &hourly).await;
    let found = after.discovery.as_ref().expect("discovery ran");
    assert_eq!((found.stopped, found.scanned, found.found), (Stop::CycleComplete, 3, 1), "{found:?}");
    assert_eq!(actions(&ctx, kept[0]).await, ["discovered"]);

    // A pass whose records step deletes a record walks at once, rest or not: what that record was the last
    // reference to is found in the same pass.
    sqlx::raw_sql(
        "ALTER TABLE products ADD COLUMN made timestamptz NOT NULL DEFAULT now() - interval '1 year';
         INSERT INTO products (hero) SELECT NULL FROM generate_series(1, 40);",
    )
    .execute(ctx.pool())
    .await
    .expect("a record of when");
    sqlx::query("INSERT INTO retention_rules (table_name, timestamp_column, keep, filter) VALUES ('products', 'made', '30 days', $1)")
        .bind(format!("hero = '{}'", kept[1]))
        .execute(ctx.pool())
        .await
        .expect("a retention rule");
    let expiring = pass(&ctx, &hourly).await;
    assert_eq!(expiring.records.as_ref().map(|r| r.deleted), Some(1), "{:?}", expiring.records_error);
    let walked = expiring.discovery.as_ref().expect("discovery ran");
    assert_eq!((walked.stopped, walked.scanned, walked.found), (Stop::CycleComplete, 2, 1), "{walked:?}");
    assert_eq!(actions(&ctx, kept[1]).await, ["discovered"]);

    // Without a rest, every pass walks: the next one starts its cycle at once.
    let continuous = pass(&ctx, &[("DISCOVERY_CYCLE_INTERVAL", "0s")]).await;
    let again = continuous.discovery.as_ref().expect("discovery ran");
    assert_eq!((again.stopped, again.scanned), (Stop::CycleComplete, 1), "{again:?}");
}
