//! Findings hold assets, not the fleet (invariant 21): one end user's comment holding a CDN link with an asset id
//! keeps that asset, named with its column and row, while every other asset of every workspace settles; the quota
//! counts what the finding holds, not every stored byte. Before, the pass refused for every workspace until an
//! operator excluded the column (which blinded the census there), and uploads were refused too.

use crate::pipeline::{key, last_event, pass, settle_queue};
use integration_tests::TestContext;
use integration_tests::fixtures::{object_exists, seed, state};
use lifecycle::runs::RunOutcome;
use serde_json::Value;
use uuid::Uuid;

#[tokio::test]
async fn a_stray_id_in_a_comment_holds_only_its_asset_while_other_workspaces_settle() {
    // A failpoint of another test (`census::advance`) would fail this one's census.
    let _turn = integration_tests::FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    let (ws, other_ws) = (Uuid::new_v4(), Uuid::new_v4());
    let (quoted_key, other_key, elsewhere_key, upload_key) = (key(ws), key(ws), key(other_ws), key(other_ws));
    let quoted = seed(&ctx, ws, "released", "3 days", &quoted_key).await;
    let other = seed(&ctx, ws, "released", "3 days", &other_key).await;
    let elsewhere = seed(&ctx, other_ws, "released", "3 days", &elsewhere_key).await;
    let upload = seed(&ctx, other_ws, "abandoned", "8 days", &upload_key).await;
    sqlx::query("INSERT INTO workspace_quotas (workspace_id, quota_bytes) VALUES ($1, 1000)")
        .bind(ws)
        .execute(ctx.pool())
        .await
        .expect("quota");
    // What end users type: prose, and one of them pastes a link to an image (written without hyphens, as a CDN
    // might), past the sample's first rows.
    sqlx::raw_sql(
        "CREATE TABLE comments (id serial PRIMARY KEY, body text);
         INSERT INTO comments (body) SELECT 'nice product, 5 stars ' || g FROM generate_series(1, 400) g;",
    )
    .execute(ctx.pool())
    .await
    .expect("comments");
    sqlx::query("UPDATE comments SET body = 'look: https://cdn.example.com/i/' || replace($1::text, '-', '') || '.jpg' WHERE id = 250")
        .bind(quoted)
        .execute(ctx.pool())
        .await
        .expect("the comment");

    let report = pass(&ctx, &[]).await;
    assert_eq!(report.outcome, RunOutcome::Ok, "one stray value refuses nothing: {:?}", report.reason);
    assert!(report.census_error.is_none(), "{:?}", report.census_error);
    settle_queue(&ctx).await;

    // Only the named asset is held, with the column and the row that name it.
    assert_eq!(state(&ctx, quoted).await.as_deref(), Some("released"));
    assert!(object_exists(&ctx.s3, &ctx.bucket, &quoted_key).await);
    let (action, evidence) = last_event(&ctx, quoted).await;
    assert_eq!((action.as_str(), &evidence["deferred"]["why"]), ("defer", &Value::from("found")), "{evidence}");
    assert_eq!(evidence["deferred"]["found_in"], "public.comments.body");
    let ctid = evidence["deferred"]["record"]["ctid"].as_str().expect("the row").to_owned();
    let named: i32 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT id FROM comments WHERE ctid = '{ctid}'")))
        .fetch_one(ctx.pool())
        .await
        .expect("the row the evidence names");
    assert_eq!(named, 250);

    // Everything else settles, in both workspaces.
    assert_eq!(state(&ctx, other).await.as_deref(), Some("retired"));
    assert_eq!(state(&ctx, elsewhere).await.as_deref(), Some("retired"));
    assert_eq!(state(&ctx, upload).await, None, "the abandoned upload of the other workspace is deleted");
    assert!(!object_exists(&ctx.s3, &ctx.bucket, &upload_key).await);

    // The quota counts the bytes the finding holds, not every stored byte.
    let (held, stored, refused): (i64, i64, bool) =
        sqlx::query_as("SELECT held_bytes, stored_bytes, schema_refused FROM asset_sweeper_usage($1)")
            .bind(ws)
            .fetch_one(ctx.pool())
            .await
            .expect("usage");
    assert_eq!((held, stored, refused), (100, 200, false));

    // The comment edited, two complete scans later the finding is forgotten and the asset goes the usual way.
    sqlx::query("UPDATE comments SET body = 'edited' WHERE id = 250").execute(ctx.pool()).await.expect("edit");
    for _ in 0..2 {
        let again = pass(&ctx, &[("CENSUS_CYCLE_INTERVAL", "0s")]).await;
        assert_eq!(again.outcome, RunOutcome::Ok, "{:?}", again.reason);
    }
    let findings: i64 =
        sqlx::query_scalar("SELECT count(*) FROM census_findings").fetch_one(ctx.pool()).await.expect("findings");
    assert_eq!(findings, 0);
}

/// The sample reads a table's newest rows too: an id inserted into a column that is no source after the census
/// proved it is seen, and held, by the next pass, not the next census cycle (a day later by default).
#[tokio::test]
async fn an_id_inserted_after_the_census_proved_its_column_is_held_by_the_next_pass() {
    // A failpoint of another test (`census::advance`) would fail this one's census.
    let _turn = integration_tests::FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let asset_key = key(ws);
    let asset = seed(&ctx, ws, "released", "3 days", &asset_key).await;
    due(&ctx, asset, "1 day").await;
    sqlx::raw_sql(
        "CREATE TABLE notes (id serial PRIMARY KEY, body text);
         INSERT INTO notes (body) SELECT repeat('a note of no consequence ', 12) FROM generate_series(1, 1000);",
    )
    .execute(ctx.pool())
    .await
    .expect("notes");
    let quiet = [("DISCOVERY_ENABLED", "false")];
    let first = pass(&ctx, &quiet).await;
    assert_eq!(first.census.as_ref().map(|c| c.columns_unproven), Some(0), "{:?}", first.census);

    // Past the first rows the sample reads: a new row, at the table's end.
    sqlx::query("INSERT INTO notes (body) VALUES ('the old banner: ' || $1::text)")
        .bind(asset)
        .execute(ctx.pool())
        .await
        .expect("a new note");
    due(&ctx, asset, "-1 minute").await;
    let second = pass(&ctx, &quiet).await;
    assert_eq!(second.outcome, RunOutcome::Ok, "{:?}", second.reason);
    assert_eq!(second.census.as_ref().map(|c| c.batches), Some(0), "the census rests: {:?}", second.census);
    settle_queue(&ctx).await;
    assert_eq!(state(&ctx, asset).await.as_deref(), Some("released"));
    assert!(object_exists(&ctx.s3, &ctx.bucket, &asset_key).await);
    let (_, evidence) = last_event(&ctx, asset).await;
    assert_eq!(evidence["deferred"]["found_in"], "public.notes.body", "{evidence}");
}

/// A table the sample found nothing in is not read again while the rows where the sample reads are the same row
/// versions (what keeps a steady pass at GitLab's size in seconds), and is read again as soon as one of them
/// changes: a row edited among a table's first rows, a row added at its end, and a row deep inside a table whose
/// column is empty but for it (so that column's first rows were the whole table). Updates stay in their page
/// (`fillfactor`), where only the witness of that page's rows can see them.
#[tokio::test]
async fn a_table_the_sample_found_nothing_in_is_read_again_once_a_row_where_it_reads_changes() {
    // A failpoint of another test (`census::advance`) would fail this one's census.
    let _turn = integration_tests::FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let mut assets = Vec::new();
    for _ in 0..3 {
        assets.push(seed(&ctx, ws, "released", "3 days", &key(ws)).await);
    }
    let mut tables = String::new();
    // Only `sparse` has a column with fewer values than the sample reads; the others' first rows end early on.
    for (table, note) in [("edited", ""), ("appended", ""), ("sparse", ", note text"), ("untouched", "")] {
        tables.push_str(&format!(
            "CREATE TABLE {table} (id serial PRIMARY KEY, body text{note}) WITH (fillfactor = 50);
             INSERT INTO {table} (body) SELECT repeat('a page of no consequence ', 12) FROM generate_series(1, 2000);"
        ));
    }
    sqlx::raw_sql(sqlx::AssertSqlSafe(tables)).execute(ctx.pool()).await.expect("tables");
    let quiet = [("DISCOVERY_ENABLED", "false")];
    let witnessed = |ctx: &TestContext| {
        let pool = ctx.pool().clone();
        async move {
            sqlx::query_as::<_, (String, String)>(
                "SELECT relid::regclass::text, recorded_at::text FROM sample_witnesses ORDER BY 1",
            )
            .fetch_all(&pool)
            .await
            .expect("witnesses")
        }
    };
    let first = pass(&ctx, &quiet).await;
    assert_eq!(first.census.as_ref().map(|c| c.columns_unproven), Some(0), "{:?}", first.census);
    let recorded = witnessed(&ctx).await;
    let names: Vec<&str> = recorded.iter().map(|w| w.0.as_str()).collect();
    assert_eq!(names, ["appended", "edited", "sparse", "untouched"], "a witness of each table the sample read");

    // Nothing written: nothing is read again.
    let second = pass(&ctx, &quiet).await;
    assert_eq!(second.outcome, RunOutcome::Ok, "{:?}", second.reason);
    assert_eq!(witnessed(&ctx).await, recorded, "no table was sampled again");

    // Each change where the sample reads, naming an asset.
    let length = |ctx: &TestContext| {
        let pool = ctx.pool().clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT asset_sweeper_blocks('appended'::regclass)")
                .fetch_one(&pool)
                .await
                .expect("length")
        }
    };
    let appended_blocks = length(&ctx).await;
    for (table, sql, asset) in [
        ("edited", "UPDATE edited SET body = 'the banner: ' || $1::text WHERE id = 5", assets[0]),
        ("appended", "INSERT INTO appended (body) VALUES ('the banner: ' || $1::text)", assets[1]),
        ("sparse", "UPDATE sparse SET note = 'the banner: ' || $1::text WHERE id = 1000", assets[2]),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql)).bind(asset).execute(ctx.pool()).await.expect(table);
    }
    let (moved_block, at_block): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT (ctid::text::point)[0]::bigint FROM sparse WHERE id = 1000),
                asset_sweeper_blocks('sparse'::regclass)",
    )
    .fetch_one(ctx.pool())
    .await
    .expect("where the row went");
    assert!(moved_block < at_block - 4, "the update stayed deep inside the table: block {moved_block} of {at_block}");
    assert_eq!(length(&ctx).await, appended_blocks, "the new row fits the last block: only its rows' witness sees it");
    let third = pass(&ctx, &quiet).await;
    assert_eq!(third.outcome, RunOutcome::Ok, "{:?}", third.reason);
    let found: Vec<(String, Uuid)> =
        sqlx::query_as("SELECT relid::regclass::text, asset_id FROM census_findings ORDER BY 1")
            .fetch_all(ctx.pool())
            .await
            .expect("findings");
    assert_eq!(
        found,
        [("appended".to_owned(), assets[1]), ("edited".to_owned(), assets[0]), ("sparse".to_owned(), assets[2])],
        "each change is seen by the next pass"
    );
    // The tables that hold a finding are read every pass from now on; the untouched one still is not.
    let now = witnessed(&ctx).await;
    assert_eq!(now, recorded.into_iter().filter(|w| w.0 == "untouched").collect::<Vec<_>>());
}

/// Moves `asset`'s due time to `from_now` as the sweeper's own write (which does not move the grace floor).
async fn due(ctx: &TestContext, asset: Uuid, from_now: &str) {
    let mut tx = ctx.pool().begin().await.expect("begin");
    sqlx::query("SELECT set_config('asset_sweeper.actor', 'sweeper', true)").execute(&mut *tx).await.expect("actor");
    sqlx::query("UPDATE assets SET due_at = now() + $2::interval WHERE id = $1")
        .bind(asset)
        .bind(from_now)
        .execute(&mut *tx)
        .await
        .expect("due");
    tx.commit().await.expect("commit");
}

/// One end user's comment too large to read within the census's batch limit, even alone (here a 96 MB text stored
/// out of line, under a limit of a quarter second): it failed every pass's census before, so its column was never
/// proven and deletes and purges waited forever. Now it is read from its start as far as the limit allows, what
/// that part names is held, the value is recorded and shown by `status`, and the column is proven: an abandoned
/// upload elsewhere is deleted. Edited to a readable size, the record is forgotten by the next complete scan.
#[tokio::test]
async fn a_value_too_large_for_the_batch_limit_holds_what_its_start_names_without_holding_the_proof() {
    // A failpoint of another test (`census::advance`) would fail this one's census.
    let _turn = integration_tests::FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    let (ws, other_ws) = (Uuid::new_v4(), Uuid::new_v4());
    let (named_key, upload_key) = (key(ws), key(other_ws));
    let named = seed(&ctx, ws, "released", "3 days", &named_key).await;
    let upload = seed(&ctx, other_ws, "abandoned", "8 days", &upload_key).await;
    // Two thousand ordinary comments, and in their midst (past the rows the schema check samples, before the
    // blocks it reads at the end) one of 96 MB that names an asset in its first line, stored uncompressed out of
    // line as a long text often is.
    long_texts(&ctx, "comments", "body").await;
    sqlx::query(
        "INSERT INTO comments (body)
         SELECT CASE WHEN g = 1000 THEN 'my banner ' || $1::text || E'\\n' || repeat('and on and on and on. ', 4500000)
                     ELSE 'a fine product, I would buy it again ' || g END
           FROM generate_series(1, 2000) g",
    )
    .bind(named)
    .execute(ctx.pool())
    .await
    .expect("the comments");

    let limit = [("CENSUS_BATCH_TIMEOUT", "250ms"), ("DISCOVERY_ENABLED", "false")];
    let report = pass(&ctx, &limit).await;
    assert_eq!(report.outcome, RunOutcome::Ok, "{:?}", report.reason);
    assert!(report.census_error.is_none(), "the census reads past the value: {:?}", report.census_error);
    let census = report.census.as_ref().expect("the census ran");
    assert_eq!((census.unread, census.columns_unproven), (1, 0), "{census:?}");

    // The value is recorded with what was read of it: its first megabyte of characters.
    let (record, read, stored): (String, i32, i64) = sqlx::query_as(
        "SELECT u.record, u.read_chars, u.stored_bytes FROM census_unread u
           JOIN pg_attribute a ON a.attrelid = u.relid AND a.attnum = u.attnum
          WHERE u.relid = 'comments'::regclass AND a.attname = 'body'",
    )
    .fetch_one(ctx.pool())
    .await
    .expect("the unread value is recorded");
    assert_eq!(read, schema::census::unread::SLICE_CHARS);
    assert!(stored > 90_000_000, "{stored}");
    let id: i32 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT id FROM comments WHERE ctid = '{record}'")))
        .fetch_one(ctx.pool())
        .await
        .expect("the row it names");
    assert_eq!(id, 1000);

    settle_queue(&ctx).await;
    // What its start names is held, with the row...
    assert_eq!(state(&ctx, named).await.as_deref(), Some("released"));
    assert!(object_exists(&ctx.s3, &ctx.bucket, &named_key).await);
    let (_, evidence) = last_event(&ctx, named).await;
    assert_eq!(
        (&evidence["deferred"]["why"], &evidence["deferred"]["found_in"]),
        (&Value::from("found"), &Value::from("public.comments.body")),
        "{evidence}"
    );
    assert_eq!(evidence["deferred"]["record"]["ctid"], Value::from(record.clone()));
    // ...and the column is proven all the same: the abandoned upload of another workspace is deleted.
    assert_eq!(state(&ctx, upload).await, None);
    assert!(!object_exists(&ctx.s3, &ctx.bucket, &upload_key).await);

    // An operator sees the row.
    let status = crate::cli::run(&ctx.db.url, Some(&ctx), &["status"]);
    let status = String::from_utf8(status.stdout).expect("utf-8");
    assert!(status.contains(&format!("? public.comments.body row {record}: ")), "{status}");

    // The comment cut to a readable size: the next complete scan forgets the record.
    sqlx::query("UPDATE comments SET body = left(body, 200) WHERE id = 1000").execute(ctx.pool()).await.expect("edit");
    let again = pass(
        &ctx,
        &[("CENSUS_BATCH_TIMEOUT", "250ms"), ("DISCOVERY_ENABLED", "false"), ("CENSUS_CYCLE_INTERVAL", "0s")],
    )
    .await;
    assert_eq!(again.census.as_ref().map(|c| c.unread), Some(0), "{:?}", again.census);
    let unread: i64 =
        sqlx::query_scalar("SELECT count(*) FROM census_unread").fetch_one(ctx.pool()).await.expect("unread");
    assert_eq!(unread, 0);
}

/// A table `table (id serial, column text)` whose texts are stored uncompressed out of line, as a long text often
/// is: the census reads the start of one without the rest.
pub(crate) async fn long_texts(ctx: &TestContext, table: &str, column: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE {table} (id serial PRIMARY KEY, {column} text);
         ALTER TABLE {table} ALTER COLUMN {column} SET STORAGE EXTERNAL;"
    )))
    .execute(ctx.pool())
    .await
    .expect("a table of long texts");
}

/// Issue: a late reference in free text lost an abandoned upload. An end user pasted a never-attached upload's link
/// into an old comment after the census had proven the column and gone to rest; the comment stays in a middle block
/// the sample does not read, and the upload was deleted on a proof older than the decision. Now an abandoned upload
/// is retired first (bytes in place), and removed only once a census begun after its retirement has read every
/// column: that census finds the link, and the upload is kept, while another abandoned upload nothing names is
/// deleted after its trial, and not before.
#[tokio::test]
async fn an_abandoned_upload_named_in_an_old_comment_after_the_census_proved_it_is_retired_then_kept() {
    // A failpoint of another test (`census::advance`) would fail this one's census.
    let _turn = integration_tests::FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let (named_key, plain_key) = (key(ws), key(ws));
    let named = seed(&ctx, ws, "pending", "8 days", &named_key).await;
    let plain = seed(&ctx, ws, "pending", "8 days", &plain_key).await;
    sqlx::raw_sql(
        "CREATE TABLE comments (id serial PRIMARY KEY, body text);
         INSERT INTO comments (body) SELECT repeat('a comment of no consequence ', 8) FROM generate_series(1, 2000);",
    )
    .execute(ctx.pool())
    .await
    .expect("comments");
    let quiet = [("DISCOVERY_ENABLED", "false")];
    let first = pass(&ctx, &quiet).await;
    assert_eq!(first.census.as_ref().map(|c| c.columns_unproven), Some(0), "{:?}", first.census);

    // The census proved the column and rests. An end user edits an old comment, in a middle block.
    sqlx::query(
        "UPDATE comments SET body = 'the photo: https://cdn.example.com/' || $1::text || '.jpg' WHERE id = 1000",
    )
    .bind(named)
    .execute(ctx.pool())
    .await
    .expect("the edit");
    settle_queue(&ctx).await;
    for (asset, asset_key) in [(named, &named_key), (plain, &plain_key)] {
        assert_eq!(last_event(&ctx, asset).await.0, "retire", "an abandoned upload is retired first");
        assert_eq!(state(&ctx, asset).await.as_deref(), Some("retired"));
        assert!(object_exists(&ctx.s3, &ctx.bucket, asset_key).await, "its bytes stay in place");
    }

    // Due again, while the census still rests: its trial is not over.
    due(&ctx, plain, "-1 minute").await;
    due(&ctx, named, "-1 minute").await;
    let resting = pass(&ctx, &quiet).await;
    assert_eq!(resting.census.as_ref().map(|c| c.batches), Some(0), "the census rests: {:?}", resting.census);
    settle_queue(&ctx).await;
    for asset in [named, plain] {
        let (action, evidence) = last_event(&ctx, asset).await;
        assert_eq!((action.as_str(), &evidence["deferred"]["why"]), ("defer", &Value::from("trial")), "{evidence}");
    }

    // A census begun after the retirements reads everything: it finds the link, which keeps its upload; the other
    // one's trial is over, and it is deleted.
    due(&ctx, plain, "-1 minute").await;
    due(&ctx, named, "-1 minute").await;
    let cycled = pass(&ctx, &[("DISCOVERY_ENABLED", "false"), ("CENSUS_CYCLE_INTERVAL", "0s")]).await;
    assert_eq!(cycled.outcome, RunOutcome::Ok, "{:?}", cycled.reason);
    settle_queue(&ctx).await;
    let (action, evidence) = last_event(&ctx, named).await;
    assert_eq!((action.as_str(), &evidence["deferred"]["why"]), ("defer", &Value::from("found")), "{evidence}");
    assert!(object_exists(&ctx.s3, &ctx.bucket, &named_key).await, "the named upload keeps its bytes");
    assert_eq!(last_event(&ctx, plain).await.0, "delete");
    assert_eq!(state(&ctx, plain).await, None, "the upload nothing names is deleted after its trial");
    assert!(!object_exists(&ctx.s3, &ctx.bucket, &plain_key).await);
}
