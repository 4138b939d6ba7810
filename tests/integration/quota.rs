//! The storage quota as the application meets it, in its own upload transactions: a replaced file frees its space
//! at the save, stored bytes may reach twice the quota and no more (with the exact sentence), and while the schema
//! check refuses every stored byte counts. `usage` shows the same figures.

use crate::pipeline::{owner_tables, pass};
use integration_tests::{TestContext, TestDatabase, TestLogin};
use lifecycle::runs::RunOutcome;
use serde_json::Value;
use sqlx::Connection;
use uuid::Uuid;

const SENTENCE: &str = "Too many replaced images are waiting to be removed tonight. Try again tomorrow.";

/// The application's save of a product whose hero image is replaced by a new upload of `bytes`, in one
/// transaction: the old image is released, the upload is checked, then written and attached. Returns the new
/// asset, or the database's message when the check refused (and nothing was written).
async fn replace_hero(ctx: &TestContext, ws: Uuid, product: i32, bytes: i64) -> Result<Uuid, String> {
    let mut conn = ctx.pool().acquire().await.expect("connection");
    let mut tx = conn.begin().await.expect("begin");
    let result: Result<Uuid, sqlx::Error> = async {
        sqlx::query(
            "UPDATE assets SET state = 'released', due_at = now() + interval '1 day'
              WHERE id = (SELECT hero FROM products WHERE id = $1)",
        )
        .bind(product)
        .execute(&mut *tx)
        .await?;
        let id = upload(&mut tx, ws, bytes).await?;
        sqlx::query("UPDATE products SET hero = $2 WHERE id = $1").bind(product).bind(id).execute(&mut *tx).await?;
        sqlx::query("UPDATE assets SET state = 'attached', due_at = NULL WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        Ok(id)
    }
    .await;
    match result {
        Ok(id) => {
            tx.commit().await.expect("commit");
            Ok(id)
        }
        Err(e) => {
            tx.rollback().await.expect("rollback");
            Err(e.as_database_error().map_or_else(|| e.to_string(), |d| d.message().to_owned()))
        }
    }
}

async fn quota(ctx: &TestContext, ws: Uuid, bytes: i64) {
    sqlx::query("INSERT INTO workspace_quotas (workspace_id, quota_bytes) VALUES ($1, $2)")
        .bind(ws)
        .bind(bytes)
        .execute(ctx.pool())
        .await
        .expect("quota");
}

/// An upload's rows, after the quota check, as the integration contract has the application write them.
async fn upload(conn: &mut sqlx::PgConnection, ws: Uuid, bytes: i64) -> Result<Uuid, sqlx::Error> {
    sqlx::query("SELECT asset_sweeper_check_upload($1, $2)").bind(ws).bind(bytes).execute(&mut *conn).await?;
    let key = format!("{ws}/{}.png", Uuid::new_v4());
    sqlx::query("INSERT INTO stored_objects (storage_key, content_hash, byte_size) VALUES ($1, md5($1), $2)")
        .bind(&key)
        .bind(bytes)
        .execute(&mut *conn)
        .await?;
    sqlx::query_scalar(
        "INSERT INTO assets (workspace_id, storage_key, content_hash, byte_size) VALUES ($1, $2, md5($2), $3)
         RETURNING id",
    )
    .bind(ws)
    .bind(&key)
    .bind(bytes)
    .fetch_one(&mut *conn)
    .await
}

/// An upload alone in its own transaction (nothing replaced): the check's message when it refuses.
async fn lone_upload(ctx: &TestContext, ws: Uuid, bytes: i64) -> Result<(), String> {
    let mut tx = ctx.pool().begin().await.expect("begin");
    let result = upload(&mut tx, ws, bytes).await;
    tx.rollback().await.expect("rollback");
    result.map(|_| ()).map_err(|e| e.as_database_error().map_or_else(|| e.to_string(), |d| d.message().to_owned()))
}

/// `usage --json` of the real binary for `ws`: (quota, held, stored, waiting, headroom, schema refused).
fn usage(ctx: &TestContext, ws: Uuid) -> (i64, i64, i64, i64, i64, bool) {
    let output = crate::cli::run(ctx.db.url.as_str(), None, &["usage", &ws.to_string(), "--json"]);
    let parsed: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("usage prints JSON ({e}): {}", String::from_utf8_lossy(&output.stderr)));
    let u = &parsed["workspaces"][0];
    let n = |k: &str| u[k].as_i64().unwrap_or(-1);
    (
        n("quota_bytes"),
        n("held_bytes"),
        n("stored_bytes"),
        n("waiting_bytes"),
        n("headroom_bytes"),
        u["schema_refused"] == true,
    )
}

#[tokio::test]
async fn a_replacement_at_a_full_quota_succeeds_stored_bytes_stop_at_twice_the_quota_and_a_refused_schema_counts_every_byte()
 {
    let ctx = TestContext::new().await;
    owner_tables(&ctx).await;
    let ws = Uuid::new_v4();
    let other = Uuid::new_v4();
    quota(&ctx, ws, 1000).await;
    sqlx::raw_sql("INSERT INTO products (hero) VALUES (NULL)").execute(ctx.pool()).await.expect("product");
    // A pass checks the schema: its valid verdict is what lets released bytes count as free.
    assert_eq!(pass(&ctx, &[]).await.outcome, RunOutcome::Ok);

    // The first image fills the quota.
    replace_hero(&ctx, ws, 1, 1000).await.expect("the first image fits the quota exactly");
    assert_eq!(usage(&ctx, ws), (1000, 1000, 1000, 0, 0, false));
    assert!(lone_upload(&ctx, ws, 1).await.is_err_and(|e| e.contains("storage quota is used up")), "full");
    // Another workspace's bytes and quota are its own.
    lone_upload(&ctx, other, 1_000_000).await.expect("a workspace without a quota is not limited");

    // Replacing it with one of the same size: the old image is freed at the save, and waits for removal.
    replace_hero(&ctx, ws, 1, 1000).await.expect("a replacement at a full quota succeeds");
    assert_eq!(usage(&ctx, ws), (1000, 1000, 2000, 1000, 0, false));

    // Once more the same day: stored would pass twice the quota.
    let refused = replace_hero(&ctx, ws, 1, 1000).await.expect_err("past twice the quota");
    assert_eq!(refused, SENTENCE);
    assert_eq!(usage(&ctx, ws), (1000, 1000, 2000, 1000, 0, false), "the refused save wrote nothing");

    // Cleared, the image frees its space for the quota, not for the stored limit.
    sqlx::raw_sql("UPDATE assets SET state = 'released', due_at = now() + interval '1 day' WHERE id = (SELECT hero FROM products);
                   UPDATE products SET hero = NULL")
        .execute(ctx.pool())
        .await
        .expect("cleared");
    assert_eq!(usage(&ctx, ws), (1000, 0, 2000, 2000, 0, false));
    assert_eq!(lone_upload(&ctx, ws, 1).await, Err(SENTENCE.to_owned()));

    // The schema check refuses (a cascading foreign key to assets): every stored byte counts as held.
    sqlx::raw_sql("UPDATE workspace_quotas SET quota_bytes = 3000").execute(ctx.pool()).await.expect("raised");
    assert_eq!(usage(&ctx, ws), (3000, 0, 2000, 2000, 3000, false));
    lone_upload(&ctx, ws, 2500).await.expect("nothing is held: 2 500 bytes fit");
    sqlx::raw_sql(
        "CREATE TABLE thumbnails (id serial PRIMARY KEY, asset uuid REFERENCES assets (id) ON DELETE CASCADE);
                   CREATE INDEX thumbnails_asset ON thumbnails (asset)",
    )
    .execute(ctx.pool())
    .await
    .expect("a cascading reference");
    assert_eq!(pass(&ctx, &[]).await.outcome, RunOutcome::Refused);
    assert_eq!(usage(&ctx, ws), (3000, 2000, 2000, 2000, 1000, true));
    let refused = lone_upload(&ctx, ws, 2500).await.expect_err("an unreadable reference must not look free");
    assert!(refused.contains("holds 2000 of 3000 bytes"), "{refused}");
    let text = crate::cli::run(ctx.db.url.as_str(), None, &["usage", &ws.to_string()]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("quota 3000 B; held 2000 B; stored 2000 B (2000 B waiting for removal); headroom 1000 B")
            && text.contains("every stored byte counts as held"),
        "{text}"
    );
}

#[tokio::test]
async fn a_malformed_check_is_refused_by_name_and_two_uploads_cannot_both_pass_on_the_same_figures() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    quota(&ctx, ws, 1000).await;
    let bad = lone_upload(&ctx, ws, -5).await.expect_err("a negative size");
    assert!(bad.contains("byte_size must be the upload's size in bytes, got -5"), "{bad}");
    assert_eq!(pass(&ctx, &[]).await.outcome, RunOutcome::Ok);

    // The first upload's transaction holds the workspace's quota row: the second waits for it, then sees its bytes.
    let mut first = ctx.pool().begin().await.expect("begin");
    let uploaded = upload(&mut first, ws, 600).await.expect("600 of 1000");
    let pool = ctx.pool().clone();
    let second = tokio::spawn(async move {
        let mut tx = pool.begin().await.expect("begin");
        let result = upload(&mut tx, ws, 600).await.map(|_| ());
        tx.rollback().await.expect("rollback");
        result.map_err(|e| e.to_string())
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(!second.is_finished(), "the second upload waits for the first's transaction");
    first.commit().await.expect("commit");
    let second = second.await.expect("task");
    assert!(second.is_err_and(|e| e.contains("holds 600 of 1000 bytes")), "it counted the first upload");

    // Bytes two rows share count once; a retired row's bytes are stored, waiting, not held.
    sqlx::query(
        "INSERT INTO assets (workspace_id, storage_key, content_hash, byte_size, state)
         SELECT workspace_id, storage_key, content_hash, byte_size, 'attached' FROM assets WHERE id = $1",
    )
    .bind(uploaded)
    .execute(ctx.pool())
    .await
    .expect("a second row on the same bytes");
    sqlx::query(
        "WITH o AS (INSERT INTO stored_objects (storage_key, content_hash, byte_size) VALUES ($1 || '/old.png', 'h', 100)
                    RETURNING storage_key)
         INSERT INTO assets (workspace_id, storage_key, content_hash, byte_size, state, retired_at, purge_after)
         SELECT $1::uuid, storage_key, 'h', 100, 'retired', now(), now() + interval '30 days' FROM o",
    )
    .bind(ws)
    .execute(ctx.pool())
    .await
    .expect("a retired asset");
    assert_eq!(usage(&ctx, ws), (1000, 600, 700, 100, 400, false));
    // The totals kept as rows change agree with a count from `assets`, before and after a pass folds them.
    assert_eq!(recounted(&ctx, ws).await, (600, 700));
    pass(&ctx, &[]).await;
    let folded: i64 = sqlx::query_scalar("SELECT count(*) FROM workspace_object_changes")
        .fetch_one(ctx.pool())
        .await
        .expect("changes");
    assert_eq!(folded, 0, "the pass folded every change");
    assert_eq!(usage(&ctx, ws), (1000, 600, 700, 100, 400, false));
}

/// Held and stored bytes of `ws` counted from `assets` itself: what the kept totals must equal.
async fn recounted(ctx: &TestContext, ws: Uuid) -> (i64, i64) {
    sqlx::query_as(
        "SELECT coalesce(sum(bytes) FILTER (WHERE held), 0)::bigint, coalesce(sum(bytes), 0)::bigint
           FROM (SELECT max(byte_size) AS bytes, bool_or(state IN ('pending', 'attached', 'failed')) AS held
                   FROM assets WHERE workspace_id = $1 GROUP BY storage_key) objects",
    )
    .bind(ws)
    .fetch_one(ctx.pool())
    .await
    .expect("recount")
}

#[tokio::test]
async fn under_repeatable_read_a_second_upload_on_the_same_figures_fails_to_serialize_rather_than_pass() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    quota(&ctx, ws, 100).await;
    assert_eq!(pass(&ctx, &[]).await.outcome, RunOutcome::Ok);
    let repeatable = |pool: sqlx::PgPool| async move {
        let mut tx = pool.begin().await.expect("begin");
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ").execute(&mut *tx).await.expect("isolation");
        // The snapshot is taken here, before either upload commits.
        sqlx::query("SELECT 1").execute(&mut *tx).await.expect("snapshot");
        tx
    };
    let mut first = repeatable(ctx.pool().clone()).await;
    let mut second = repeatable(ctx.pool().clone()).await;
    upload(&mut first, ws, 60).await.expect("60 of 100");
    let pending = tokio::spawn(async move {
        let result = upload(&mut second, ws, 60).await.map(|_| ());
        let _ = second.rollback().await;
        result.map_err(|e| e.as_database_error().and_then(|d| d.code()).map(|c| c.into_owned()))
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    first.commit().await.expect("the first commits");
    let second = pending.await.expect("task");
    assert_eq!(second, Err(Some("40001".to_owned())), "its snapshot does not hold the first upload: it must not pass");
    let usage: (i64, i64) = sqlx::query_as("SELECT held_bytes, stored_bytes FROM asset_sweeper_usage($1)")
        .bind(ws)
        .fetch_one(ctx.pool())
        .await
        .expect("usage");
    assert_eq!(usage, (60, 60));
}

/// The largest quota (docs/integrating.md, "The storage quota"): 1 EiB.
const QUOTA_LIMIT: i64 = 1 << 60;

#[tokio::test]
async fn a_quota_out_of_range_is_refused_naming_the_range_and_none_overflows_the_check_or_usage() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    for bytes in [i64::MAX, QUOTA_LIMIT + 1, 0] {
        let refused = sqlx::query("INSERT INTO workspace_quotas (workspace_id, quota_bytes) VALUES ($1, $2)")
            .bind(ws)
            .bind(bytes)
            .execute(ctx.pool())
            .await
            .expect_err("out of range");
        let message = refused.as_database_error().map(|d| d.message().to_owned()).unwrap_or_default();
        assert!(
            message.contains(&format!("a quota of {bytes} bytes for workspace {ws} is out of range"))
                && message.contains("a quota is from 1 to 1152921504606846976 bytes (1 EiB)")
                && message.contains("delete the workspace's row for no limit"),
            "{message}"
        );
    }

    // The limit itself: every figure, and the largest upload size, stay in range.
    quota(&ctx, ws, QUOTA_LIMIT).await;
    let (q, held, stored, waiting, headroom, _) = usage(&ctx, ws);
    assert_eq!((q, held, stored, waiting, headroom), (QUOTA_LIMIT, 0, 0, 0, QUOTA_LIMIT));
    let refused = lone_upload(&ctx, ws, i64::MAX).await.expect_err("past the quota");
    assert!(refused.contains("storage quota is used up"), "{refused}");
    lone_upload(&ctx, ws, QUOTA_LIMIT).await.expect("exactly the quota");

    // A row written before the limit existed (the check bypassed as a loader would) still reads, and uploads pass.
    sqlx::raw_sql(
        "ALTER TABLE workspace_quotas DISABLE TRIGGER workspace_quotas_in_range;
         UPDATE workspace_quotas SET quota_bytes = 9223372036854775807;
         ALTER TABLE workspace_quotas ENABLE TRIGGER workspace_quotas_in_range;",
    )
    .execute(ctx.pool())
    .await
    .expect("a quota from before the limit");
    let output = crate::cli::run(ctx.db.url.as_str(), None, &["usage", &ws.to_string()]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        text.contains(&format!("quota {} B; held 0 B", i64::MAX)) && text.contains(&format!("headroom {} B", i64::MAX))
    );
    lone_upload(&ctx, ws, i64::MAX).await.expect("no sum overflows");
}

#[tokio::test]
async fn a_null_argument_to_the_upload_check_is_refused_naming_the_argument() {
    let ctx = TestDatabase::new().await;
    let ws = Uuid::new_v4();
    for (workspace, bytes, says, code) in [
        (None, Some(5), "workspace_id must be the uploading workspace's id, got NULL", "22004"),
        (Some(ws), None, "byte_size must be the upload's size in bytes, got NULL", "22023"),
    ] {
        // With and without a quota: a NULL is never "no quota".
        for with_quota in [false, true] {
            if with_quota {
                sqlx::query(
                    "INSERT INTO workspace_quotas (workspace_id, quota_bytes) VALUES ($1, 100) ON CONFLICT DO NOTHING",
                )
                .bind(ws)
                .execute(&ctx.pool)
                .await
                .expect("quota");
            }
            let refused = sqlx::query("SELECT asset_sweeper_check_upload($1, $2)")
                .bind(workspace)
                .bind(bytes)
                .execute(&ctx.pool)
                .await
                .expect_err("a NULL argument");
            let db = refused.as_database_error().expect("the database's refusal");
            assert!(db.message().contains(says), "{}", db.message());
            assert_eq!(db.code().as_deref(), Some(code));
        }
    }
}

/// The grants docs/integrating.md says an upload needs, one statement each, for the role `{login}`.
fn documented_upload_grants() -> Vec<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/integrating.md")).expect("the doc");
    let (_, section) = doc.split_once("### The grants an upload needs").expect("the section");
    let (_, block) = section.split_once("```sql\n").expect("its SQL");
    let (block, _) = block.split_once("```").expect("its end");
    block.split(';').map(str::trim).filter(|s| !s.is_empty()).map(|s| s.replace("app_uploads", "{login}")).collect()
}

/// A save as `login` names it in integrating.md: the replaced hero image released, the quota checked, the upload's
/// object and asset written, the product pointed at it (a guarded `asset_id` column) and the asset attached; then a
/// second upload that reuses the first's bytes. The database's refusal, if any.
async fn save_as(login: &TestLogin, ws: Uuid, bytes: i64) -> Result<(), String> {
    let mut conn = login.connect().await;
    let mut tx = conn.begin().await.map_err(|e| e.to_string())?;
    let result: Result<(), sqlx::Error> = async {
        sqlx::query(
            "UPDATE asset_sweeper.assets SET state = 'released', due_at = now() + interval '24 hours'
              WHERE id = (SELECT hero FROM public.products WHERE id = 1)",
        )
        .execute(&mut *tx)
        .await?;
        sqlx::query("SELECT asset_sweeper.asset_sweeper_check_upload($1, $2)")
            .bind(ws)
            .bind(bytes)
            .execute(&mut *tx)
            .await?;
        let key = format!("{ws}/{}.png", Uuid::new_v4());
        sqlx::query(
            "INSERT INTO asset_sweeper.stored_objects (storage_key, content_hash, byte_size) VALUES ($1, md5($1), $2)
             ON CONFLICT (storage_key) DO UPDATE SET byte_size = EXCLUDED.byte_size",
        )
        .bind(&key)
        .bind(bytes)
        .execute(&mut *tx)
        .await?;
        let id: Uuid = sqlx::query_scalar(
            "INSERT INTO asset_sweeper.assets (workspace_id, storage_key, content_hash, byte_size)
             VALUES ($1, $2, md5($2), $3) RETURNING id",
        )
        .bind(ws)
        .bind(&key)
        .bind(bytes)
        .fetch_one(&mut *tx)
        .await?;
        sqlx::query("UPDATE public.products SET hero = $1 WHERE id = 1").bind(id).execute(&mut *tx).await?;
        sqlx::query("UPDATE asset_sweeper.assets SET state = 'attached', due_at = NULL WHERE id = $1 RETURNING id")
            .bind(id)
            .fetch_one(&mut *tx)
            .await?;
        // Reusing existing bytes: the object found by its hash, a new asset row on its key.
        let existing: String =
            sqlx::query_scalar("SELECT storage_key FROM asset_sweeper.stored_objects WHERE content_hash = md5($1)")
                .bind(&key)
                .fetch_one(&mut *tx)
                .await?;
        sqlx::query(
            "INSERT INTO asset_sweeper.assets (workspace_id, storage_key, content_hash, byte_size, state)
             VALUES ($1, $2, md5($2), $3, 'pending')",
        )
        .bind(ws)
        .bind(&existing)
        .bind(bytes)
        .execute(&mut *tx)
        .await?;
        Ok(())
    }
    .await;
    match result {
        Ok(()) => tx.commit().await.map_err(|e| e.to_string()),
        Err(e) => Err(e.as_database_error().map_or_else(|| e.to_string(), |d| d.message().to_owned())),
    }
}

#[tokio::test]
async fn the_upload_runs_with_exactly_the_grants_integrating_md_names_and_with_the_application_role_alone() {
    let db = TestDatabase::new().await;
    sqlx::raw_sql(
        "CREATE TABLE products (id serial PRIMARY KEY, hero asset_id);
         CREATE INDEX products_hero ON products (hero);
         INSERT INTO products (hero) VALUES (NULL);",
    )
    .execute(&db.pool)
    .await
    .expect("the application's table");
    integration_tests::install_guards(&db.pool).await;
    let ws = Uuid::new_v4();
    sqlx::query("INSERT INTO workspace_quotas (workspace_id, quota_bytes) VALUES ($1, 1000)")
        .bind(ws)
        .execute(&db.pool)
        .await
        .expect("quota");
    // What the application's own table needs, granted by its owner: not the sweeper's to document.
    let own = "GRANT SELECT, UPDATE ON public.products TO {login};";
    let grants = documented_upload_grants();
    assert_eq!(grants.len(), 5, "{grants:?}");

    let documented = TestLogin::new(&db, &format!("{own} {};", grants.join("; "))).await;
    save_as(&documented, ws, 400).await.expect("the upload with the documented grants");
    save_as(&documented, ws, 400).await.expect("a replacement with the documented grants");
    let refused = save_as(&documented, ws, 400).await.expect_err("over the quota");
    assert!(refused.contains("storage quota is used up"), "the check ran, as the owner: {refused}");
    let member = TestLogin::new(&db, &format!("{own} GRANT asset_sweeper_application TO {{login}};")).await;
    sqlx::raw_sql("DELETE FROM workspace_quotas").execute(&db.pool).await.expect("no quota");
    save_as(&member, ws, 400).await.expect("the upload as a member of asset_sweeper_application");

    // Each documented grant is needed: without it, the upload is refused.
    for (i, left_out) in grants.iter().enumerate() {
        let rest: Vec<&str> = grants.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, g)| g.as_str()).collect();
        let without = TestLogin::new(&db, &format!("{own} {};", rest.join("; "))).await;
        let refused = save_as(&without, ws, 1).await.expect_err(left_out);
        assert!(refused.contains("permission denied"), "without {left_out}: {refused}");
    }
}
