//! Windows in which nothing is destroyed, against the real sweep and consumer: one the application declares around a
//! migration (as a login holding only `asset_sweeper_application`), one an operator declares with the CLI, and the
//! quiet period after a migration that adds a reference column and backfills it over several passes. Inside each,
//! deletes and purges wait in every workspace and their bytes stay; retiring goes on; after it, settling is as
//! usual.

use integration_tests::fixtures::{object_exists, seed, state};
use integration_tests::{TestContext, TestLogin};
use uuid::Uuid;

use crate::cli::run;
use crate::pipeline::{actions, deliver_all, deliver_all_with, key, last_event, owner_tables, pass};

/// An abandoned upload in one workspace (a delete), a retired asset past its purge time in another (a purge), and
/// an attached one nothing refers to (a retire): (delete, purge, retire, their keys).
async fn three_fates(ctx: &TestContext) -> ([Uuid; 3], [String; 3]) {
    let (ws, other) = (Uuid::new_v4(), Uuid::new_v4());
    let keys = [key(ws), key(other), key(other)];
    let abandoned = seed(ctx, ws, "abandoned", "8 days", &keys[0]).await;
    let retired = seed(ctx, other, "retired", "40 days", &keys[1]).await;
    let unreferenced = seed(ctx, other, "attached", "3 days", &keys[2]).await;
    ([abandoned, retired, unreferenced], keys)
}

/// Due again now: a deferral waits for the window's end, and these tests do not.
async fn due_now(ctx: &TestContext, ids: &[Uuid]) {
    sqlx::query("UPDATE assets SET due_at = now() WHERE id = ANY($1)")
        .bind(ids)
        .execute(ctx.pool())
        .await
        .expect("due now");
}

#[tokio::test]
async fn a_migration_window_the_application_declares_destroys_nothing_anywhere_until_released_and_retiring_goes_on() {
    let ctx = TestContext::new().await;
    owner_tables(&ctx).await;
    let ([abandoned, retired, unreferenced], keys) = three_fates(&ctx).await;
    // A retention rule with records past it: the application's records are not destroyed inside the window either.
    sqlx::raw_sql(
        "CREATE TABLE sessions (id serial PRIMARY KEY, at timestamptz NOT NULL);
         INSERT INTO sessions (at) SELECT now() - n * interval '1 day' FROM generate_series(0, 9) n;
         INSERT INTO retention_rules (table_name, timestamp_column, keep) VALUES ('sessions', 'at', '7 days');",
    )
    .execute(ctx.pool())
    .await
    .expect("a retention rule");
    let sessions = || async {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM sessions").fetch_one(ctx.pool()).await.expect("count");
        n
    };
    let app = TestLogin::new(&ctx.db, "GRANT asset_sweeper_application TO {login};").await;
    let mut conn = app.connect().await;

    // Refused as the application would mistype it: no reason, a window past a week, one already over.
    for (ends, reason, refusal) in [
        ("now() + interval '1 hour'", " ", "a hold needs a reason"),
        ("now() + interval '8 days'", "backfill", "a hold ends within 7 days"),
        ("now() - interval '1 minute'", "backfill", "a hold must end after now"),
    ] {
        let sql = format!("SELECT asset_sweeper.asset_sweeper_hold({ends}, '{reason}')");
        let e = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut conn).await.expect_err("refused");
        assert!(e.to_string().contains(refusal), "{e}");
    }
    let id: i64 = sqlx::query_scalar(
        "SELECT asset_sweeper.asset_sweeper_hold(now() + interval '1 hour', 'backfill of products.thumbnail')",
    )
    .fetch_one(&mut conn)
    .await
    .expect("the application declares its window");
    // The table is not the application's: it cannot read it, shorten a window, or release another's.
    let e = sqlx::query("UPDATE asset_sweeper_private.destruction_holds SET ends_at = now()")
        .execute(&mut conn)
        .await
        .expect_err("no write");
    assert!(e.to_string().contains("permission denied"), "{e}");
    let operators: i64 = sqlx::query_scalar(
        "INSERT INTO destruction_holds (reason, declared_by, ends_at) VALUES ('an operator''s', 'alice', \
         now() + interval '2 hours') RETURNING id",
    )
    .fetch_one(ctx.pool())
    .await
    .expect("an operator's hold");
    let released: bool = sqlx::query_scalar("SELECT asset_sweeper.asset_sweeper_release_hold($1)")
        .bind(operators)
        .fetch_one(&mut conn)
        .await
        .expect("asked");
    assert!(!released, "the application releases only its own windows");
    sqlx::query("UPDATE destruction_holds SET released_by = 'alice', released_at = now() WHERE id = $1")
        .bind(operators)
        .execute(ctx.pool())
        .await
        .expect("the operator's released");

    let report = pass(&ctx, &[]).await;
    let window = report.window.as_ref().expect("the pass saw the window");
    assert!(window.describe().contains("backfill of products.thumbnail"), "{}", window.describe());
    let reason: serde_json::Value = sqlx::query_scalar("SELECT reason FROM sweep_runs WHERE id = $1")
        .bind(report.run_id)
        .fetch_one(ctx.pool())
        .await
        .expect("the run row");
    assert_eq!(reason["window"]["kind"], "declared", "{reason}");
    assert_eq!(reason["window"]["id"], id, "{reason}");
    assert!(deliver_all(&ctx).await.is_empty());
    for (asset, key) in [(abandoned, &keys[0]), (retired, &keys[1])] {
        assert_eq!(actions(&ctx, asset).await, vec!["defer"]);
        let (_, evidence) = last_event(&ctx, asset).await;
        assert_eq!(evidence["deferred"]["why"], "window", "{evidence}");
        assert_eq!(evidence["deferred"]["window"]["declared_by"], app.name.as_str(), "{evidence}");
        assert!(object_exists(&ctx.s3, &ctx.bucket, key).await, "held bytes stay");
    }
    assert_eq!(state(&ctx, unreferenced).await.as_deref(), Some("retired"), "retiring goes on");
    assert_eq!(sessions().await, 10, "no record deleted inside the window");
    let status = run(&ctx.db.url, Some(&ctx), &["status"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains(&format!("deletes and purges wait, in every workspace: hold {id} declared by {}", app.name)),
        "{text}"
    );
    let explained = run(&ctx.db.url, Some(&ctx), &["explain", &abandoned.to_string()]);
    let text = String::from_utf8_lossy(&explained.stdout);
    assert!(text.contains("deferred: window") && text.contains(&format!("hold {id} declared by")), "{text}");

    // The migration is done: the application releases its window, and the next pass settles as usual.
    let released: bool = sqlx::query_scalar("SELECT asset_sweeper.asset_sweeper_release_hold($1)")
        .bind(id)
        .fetch_one(&mut conn)
        .await
        .expect("released");
    assert!(released);
    due_now(&ctx, &[abandoned, retired]).await;
    assert!(pass(&ctx, &[]).await.window.is_none());
    assert!(sessions().await < 10, "the rule applies once the window is released");
    assert!(deliver_all(&ctx).await.is_empty());
    assert_eq!(actions(&ctx, abandoned).await, vec!["defer", "delete"]);
    assert_eq!(actions(&ctx, retired).await, vec!["defer", "purge"]);
}

#[tokio::test]
async fn deletes_and_purges_wait_a_quiet_period_after_a_migration_that_backfills_references_over_several_passes() {
    let ctx = TestContext::new().await;
    owner_tables(&ctx).await;
    let ws = Uuid::new_v4();
    // Retired long ago, nothing refers to them yet: the migration will point products at the first two.
    let mut retired = Vec::new();
    for _ in 0..3 {
        let k = key(ws);
        retired.push((seed(&ctx, ws, "retired", "40 days", &k).await, k));
    }
    let quiet = [("SCHEMA_QUIET_PERIOD", "1h")];
    // The migration: a new reference column, empty when the census first reads it, backfilled a row per pass.
    sqlx::raw_sql(
        "ALTER TABLE products ADD COLUMN thumbnail asset_id;
         CREATE INDEX products_thumbnail ON products (thumbnail);
         INSERT INTO products (hero) SELECT NULL FROM generate_series(1, 2);",
    )
    .execute(ctx.pool())
    .await
    .expect("the migration's DDL");
    integration_tests::install_guards(ctx.pool()).await;
    for backfilled in 0..2 {
        let report = pass(&ctx, &quiet).await;
        assert!(matches!(report.window, Some(lifecycle::holds::Window::Quiet { .. })), "{:?}", report.window);
        assert!(deliver_all_with(&ctx, &quiet).await.is_empty());
        for (i, (asset, key)) in retired.iter().enumerate() {
            let (action, evidence) = last_event(&ctx, *asset).await;
            match i < backfilled {
                true => assert_eq!(action, "keep", "the backfill's reference keeps it"),
                false => {
                    assert_eq!((action.as_str(), &evidence["deferred"]["window"]["kind"]), ("defer", &"quiet".into()));
                }
            }
            assert!(object_exists(&ctx.s3, &ctx.bucket, key).await, "nothing purged inside the quiet period");
        }
        // The backfill, a row at a time, after the census has read the column.
        sqlx::query("UPDATE products SET thumbnail = $1 WHERE id = $2")
            .bind(retired[backfilled].0)
            .bind(i32::try_from(backfilled).expect("a row") + 1)
            .execute(ctx.pool())
            .await
            .expect("backfilled");
        due_now(&ctx, &retired.iter().map(|(id, _)| *id).collect::<Vec<_>>()).await;
    }

    // An operator's window holds as the quiet period ends.
    let declared = run(&ctx.db.url, Some(&ctx), &["hold", "declare", "--for", "2h", "--reason", "reindex"]);
    assert!(declared.status.success(), "{}", String::from_utf8_lossy(&declared.stderr));
    let too_long = run(&ctx.db.url, Some(&ctx), &["hold", "declare", "--for", "9d", "--reason", "forever"]);
    assert_eq!(too_long.status.code(), Some(2), "{}", String::from_utf8_lossy(&too_long.stderr));
    assert!(String::from_utf8_lossy(&too_long.stderr).contains("a hold ends within 7 days"));
    let listed = run(&ctx.db.url, Some(&ctx), &["hold", "list", "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    let open = listed["open"].as_array().expect("open holds");
    assert_eq!((open.len(), &open[0]["reason"]), (1, &"reindex".into()), "{listed}");
    // The quiet period over: the schema's changes an hour and more ago.
    sqlx::raw_sql(
        "UPDATE asset_sweeper_schema_state SET changed_at = now() - interval '2 hours';
         UPDATE asset_sweeper_schema_changes SET changed_at = now() - interval '2 hours';",
    )
    .execute(ctx.pool())
    .await
    .expect("the quiet period over");
    let report = pass(&ctx, &quiet).await;
    assert!(matches!(report.window, Some(lifecycle::holds::Window::Declared { .. })), "{:?}", report.window);
    assert!(deliver_all_with(&ctx, &quiet).await.is_empty());
    assert!(object_exists(&ctx.s3, &ctx.bucket, &retired[2].1).await, "the operator's window holds");
    let id = open[0]["id"].as_i64().expect("an id").to_string();
    let released = run(&ctx.db.url, Some(&ctx), &["hold", "release", &id]);
    assert!(released.status.success(), "{}", String::from_utf8_lossy(&released.stderr));
    let again = run(&ctx.db.url, Some(&ctx), &["hold", "release", &id]);
    assert!(String::from_utf8_lossy(&again.stderr).contains(&format!("hold {id} is not open")));

    // After it: what the migration pointed at is kept, the rest purged.
    due_now(&ctx, &retired.iter().map(|(id, _)| *id).collect::<Vec<_>>()).await;
    assert!(pass(&ctx, &quiet).await.window.is_none());
    assert!(deliver_all_with(&ctx, &quiet).await.is_empty());
    for (asset, key) in &retired[..2] {
        assert_eq!(state(&ctx, *asset).await.as_deref(), Some("attached"), "the backfill's reference keeps it");
        assert!(object_exists(&ctx.s3, &ctx.bucket, key).await);
    }
    assert_eq!(state(&ctx, retired[2].0).await, None, "purged once nothing holds it");
    assert!(!object_exists(&ctx.s3, &ctx.bucket, &retired[2].1).await);
}

#[tokio::test]
async fn a_pinned_asset_or_workspace_is_not_discovered_retired_deleted_or_purged_until_its_pin_ends() {
    let ctx = TestContext::new().await;
    owner_tables(&ctx).await;
    let (ws, pinned_ws) = (Uuid::new_v4(), Uuid::new_v4());
    // Referred to only from outside the database: a newsletter already sent, another service's store.
    let in_newsletter = seed(&ctx, ws, "attached", "3 days", &key(ws)).await;
    let unpinned = seed(&ctx, ws, "attached", "3 days", &key(ws)).await;
    let (abandoned_key, retired_key) = (key(pinned_ws), key(pinned_ws));
    let abandoned = seed(&ctx, pinned_ws, "abandoned", "8 days", &abandoned_key).await;
    let retired = seed(&ctx, pinned_ws, "retired", "40 days", &retired_key).await;
    // Unscheduled, as an application that never releases leaves them: discovery's to find.
    sqlx::query("UPDATE assets SET due_at = NULL WHERE id = ANY($1)")
        .bind([in_newsletter, unpinned])
        .execute(ctx.pool())
        .await
        .expect("unscheduled");

    // The application pins the asset, as a login holding only its role; who and when are stamped, not given.
    let app = TestLogin::new(&ctx.db, "GRANT asset_sweeper_application TO {login};").await;
    let mut conn = app.connect().await;
    let forged = sqlx::query(
        "INSERT INTO asset_sweeper.asset_pins (asset_id, reason, ends_at, pinned_by) \
         VALUES ($1, 'x', now() + interval '1 day', 'alice')",
    )
    .bind(in_newsletter)
    .execute(&mut conn)
    .await
    .expect_err("pinned_by is stamped");
    assert!(forged.to_string().contains("permission denied"), "{forged}");
    sqlx::query(
        "INSERT INTO asset_sweeper.asset_pins (asset_id, reason, ends_at) \
         VALUES ($1, 'linked from the November newsletter', now() + interval '30 days')",
    )
    .bind(in_newsletter)
    .execute(&mut conn)
    .await
    .expect("the application pins its asset");
    // An operator pins a workspace whose files another service serves.
    let pinned = run(
        &ctx.db.url,
        Some(&ctx),
        &["pin", "add", "--workspace", &pinned_ws.to_string(), "--for", "3d", "--reason", "served by the CDN export"],
    );
    assert!(pinned.status.success(), "{}", String::from_utf8_lossy(&pinned.stderr));
    let none = run(&ctx.db.url, Some(&ctx), &["pin", "add", "--prefix", "", "--for", "1d", "--reason", "all"]);
    assert!(String::from_utf8_lossy(&none.stderr).contains("--prefix is empty"), "{none:?}");

    let report = pass(&ctx, &[]).await;
    assert_eq!(report.discovery.as_ref().map(|d| d.found), Some(1), "only the unpinned one is made due");
    assert!(deliver_all(&ctx).await.is_empty());
    assert_eq!(state(&ctx, unpinned).await.as_deref(), Some("retired"));
    assert_eq!(state(&ctx, in_newsletter).await.as_deref(), Some("attached"), "not discovered");
    assert!(actions(&ctx, in_newsletter).await.is_empty());
    for (asset, key) in [(abandoned, &abandoned_key), (retired, &retired_key)] {
        let (action, evidence) = last_event(&ctx, asset).await;
        assert_eq!((action.as_str(), &evidence["deferred"]["why"]), ("defer", &"pinned".into()), "{evidence}");
        assert_eq!(evidence["deferred"]["pin"]["pins"], format!("workspace {pinned_ws}"), "{evidence}");
        assert!(object_exists(&ctx.s3, &ctx.bucket, key).await);
    }
    // Released (three days ago, past its grace period), the asset is kept by its pin too.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "SELECT set_config('asset_sweeper.actor', 'sweeper', true);
         UPDATE assets SET state = 'released', due_at = now() WHERE id = '{in_newsletter}';"
    )))
    .execute(ctx.pool())
    .await
    .expect("released");
    pass(&ctx, &[]).await;
    assert!(deliver_all(&ctx).await.is_empty());
    let (_, evidence) = last_event(&ctx, in_newsletter).await;
    assert!(
        evidence["deferred"]["because"].as_str().is_some_and(|b| b.contains("linked from the November newsletter")),
        "{evidence}"
    );
    let explained = run(&ctx.db.url, Some(&ctx), &["explain", &in_newsletter.to_string()]);
    assert!(String::from_utf8_lossy(&explained.stdout).contains("deferred: pinned"), "{explained:?}");
    let status = run(&ctx.db.url, Some(&ctx), &["status"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains(&format!("on workspace {pinned_ws}")) && text.contains("ends within a week"), "{text}");
    assert!(!text.contains("November newsletter"), "a pin a month away is not near its end: {text}");

    // The pins end (one released, one past its time): everything settles as usual.
    let listed = run(&ctx.db.url, Some(&ctx), &["pin", "list", "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    let workspace_pin = listed["pins"][0]["id"].as_i64().expect("the soonest-ending pin").to_string();
    let released = run(&ctx.db.url, Some(&ctx), &["pin", "release", &workspace_pin]);
    assert!(released.status.success(), "{}", String::from_utf8_lossy(&released.stderr));
    sqlx::query("UPDATE asset_pins SET pinned_at = now() - interval '1 day', ends_at = now() - interval '1 second' WHERE asset_id = $1")
        .bind(in_newsletter)
        .execute(ctx.pool())
        .await
        .expect("the pin ended");
    due_now(&ctx, &[in_newsletter, abandoned, retired]).await;
    pass(&ctx, &[]).await;
    assert!(deliver_all(&ctx).await.is_empty());
    assert_eq!(
        state(&ctx, in_newsletter).await.as_deref(),
        Some("retired"),
        "{:?}",
        last_event(&ctx, in_newsletter).await
    );
    assert_eq!((state(&ctx, abandoned).await, state(&ctx, retired).await), (None, None));
}
