//! Adoption against LocalStack S3 and a real database, driven by the real sweep and the real consumer: bytes no
//! row knows, under a prefix an operator approved, become `pending` assets the consumer retires, then purges; nothing is
//! adopted before the approval or under a prefix another writer shares; an orphan a record names by key (a URL in
//! a text column, a path in a JSON document) is kept and reported; an unnamed one waits while the key scan has not
//! covered the schema; an upload racing the adoption keeps its bytes.

use std::time::{Duration, Instant};

use chrono::Utc;
use integration_tests::TestContext;
use integration_tests::fixtures::{object_exists, put_bytes, seed, state};
use serde_json::Value;
use sweep_lambda::Sweeper;
use sweep_lambda::record::SweepReport;
use uuid::Uuid;

use crate::pipeline::{actions, key, owner_tables, settle_queue};
use crate::reconcile::{PATTERN, put_report, row};

/// Written long before any grace period.
const OLD: &str = "2025-01-01T00:00:00.000Z";

/// One sweep pass reading the inventory reports in `folder` for `prefixes`.
async fn pass(ctx: &TestContext, prefixes: &str, folder: &str) -> SweepReport {
    let inventory = format!("s3://{}/{folder}", ctx.bucket);
    let overrides = [
        ("RECONCILE_PREFIXES", prefixes),
        ("RECONCILE_KEY_PATTERN", PATTERN),
        ("RECONCILE_INVENTORY", inventory.as_str()),
    ];
    Sweeper::new(ctx.pool().clone(), ctx.sqs.clone(), ctx.settings(&overrides))
        .with_storage(ctx.s3.clone())
        .run_pass(Instant::now() + Duration::from_secs(600))
        .await
        .expect("sweep pass")
}

/// What an operator's `asset-sweeper approve --prefix` records after reading the newest report (the CLI's own test
/// runs the command): as many adoptable keys as that report found there.
pub(crate) async fn approve(ctx: &TestContext, prefix: &str) {
    let approved = sqlx::query(
        "UPDATE reconcile_prefixes
            SET approved_at = now(), approved_by = 'test', reason = 'read', approved_until = now() + interval '1 day',
                approved_keys = coalesce(reported_keys, 0), approved_bytes = 0
          WHERE prefix = $1",
    )
    .bind(prefix)
    .execute(ctx.pool())
    .await
    .expect("approve");
    assert_eq!(approved.rows_affected(), 1, "a recorded reconciliation met {prefix:?}");
}

/// What an operator's `asset-sweeper approve WORKSPACE` records after reading the plan of a first adoption, which
/// the brake holds whatever its size (the CLI's own test runs the command): the workspace's due figures now.
pub(crate) async fn approve_brake(ctx: &TestContext, workspace: Uuid) {
    sqlx::query(
        "INSERT INTO brake_approvals (workspace_id, approved_by, reason, expires_at, due_assets, due_bytes)
         SELECT $1, 'test', 'read the plan', now() + interval '1 day', count(*), coalesce(sum(byte_size), 0)
           FROM assets a WHERE a.workspace_id = $1 AND asset_sweeper_due(a)",
    )
    .bind(workspace)
    .execute(ctx.pool())
    .await
    .expect("approve the brake");
}

/// A pass that finds a first adoption due: the brake holds the workspace, whatever its size, until a person reads
/// its plan and approves; then the next pass claims it.
pub(crate) async fn through_first_adoption_brake(held: &SweepReport, workspace: Uuid) {
    assert_eq!(held.enqueued, 0, "a first adoption waits for a person: {held:?}");
    let braked = held.per_workspace.get(&platform::WorkspaceId(workspace)).and_then(|w| w.braked.clone());
    assert!(braked.as_deref().is_some_and(|b| b.starts_with("first adoption")), "{held:?}");
}

/// The asset adoption wrote for `key`, if any.
async fn adopted(ctx: &TestContext, key: &str) -> Option<Uuid> {
    sqlx::query_scalar("SELECT asset_id FROM adopted_assets WHERE storage_key = $1")
        .bind(key)
        .fetch_optional(ctx.pool())
        .await
        .expect("adopted_assets")
}

/// Time passing beyond the grace period since an upload reused `keys`' stored objects.
async fn age_objects(ctx: &TestContext, keys: &[&str]) {
    sqlx::query("UPDATE stored_objects SET updated_at = now() - interval '2 days' WHERE storage_key = ANY ($1)")
        .bind(keys.iter().map(|k| (*k).to_owned()).collect::<Vec<_>>())
        .execute(ctx.pool())
        .await
        .expect("age");
}

async fn last_evidence(ctx: &TestContext, id: Uuid) -> Value {
    sqlx::query_scalar("SELECT evidence FROM settlement_events WHERE asset_id = $1 ORDER BY id DESC LIMIT 1")
        .bind(id)
        .fetch_one(ctx.pool())
        .await
        .expect("an event")
}

#[tokio::test]
async fn orphans_of_an_approved_prefix_are_adopted_and_removed_unless_a_record_names_their_key() {
    let ctx = TestContext::new().await;
    owner_tables(&ctx).await;
    sqlx::raw_sql("CREATE TABLE posts (id serial PRIMARY KEY, html text)").execute(ctx.pool()).await.expect("posts");
    let (ws, shared_ws) = (Uuid::new_v4(), Uuid::new_v4());
    let known = key(ws);
    let known_id = seed(&ctx, ws, "attached", "3 days", &known).await;
    sqlx::query("INSERT INTO products (hero) VALUES ($1)").bind(known_id).execute(ctx.pool()).await.expect("product");
    let (in_text, in_json, unnamed, young) = (key(ws), key(ws), key(ws), key(ws));
    let outside = format!("exports/{}.csv", Uuid::new_v4());
    let (shared_orphan, another_writers) = (key(shared_ws), format!("{shared_ws}/backup/part-1"));
    for k in [&in_text, &in_json, &unnamed, &young, &outside, &shared_orphan, &another_writers] {
        put_bytes(&ctx.s3, &ctx.bucket, k, b"bytes no row knows").await;
    }
    // How an application refers to files before it adopts this product: by URL, in HTML and in a document.
    sqlx::query("INSERT INTO posts (html) VALUES ($1)")
        .bind(format!("<p><img src=\"https://cdn.example.com/{in_text}?w=640\"></p>"))
        .execute(ctx.pool())
        .await
        .expect("post");
    sqlx::query("INSERT INTO pages (body) VALUES ($1)")
        .bind(serde_json::json!({ "blocks": [{ "type": "hero", "src": format!("/{in_json}") }] }))
        .execute(ctx.pool())
        .await
        .expect("page");

    let b = ctx.bucket.clone();
    let now = Utc::now().format("%Y-%m-%dT%H:%M:%S.000Z").to_string();
    let files = vec![
        [&known, &in_text, &in_json, &unnamed, &outside].map(|k| row(&b, k, true, false, 18, OLD)).concat(),
        row(&b, &young, true, false, 18, &now)
            + &row(&b, &shared_orphan, true, false, 18, OLD)
            + &row(&b, &another_writers, true, false, 18, OLD),
    ];
    let folder = format!("inventory/{b}/daily/");
    let prefixes = format!("{ws}/,{shared_ws}/");

    // The first reconciliation of a prefix adopts nothing: it waits for a person.
    put_report(&ctx, &folder, "2026-11-29T00-00Z", &files, None).await;
    let first = pass(&ctx, &prefixes, &folder).await.reconcile.expect("reconciled").compared.expect("compared");
    assert_eq!((first.unknown_keys, first.adopted_keys), (4, 0), "{first:?}");
    assert_eq!(first.awaiting_approval, vec![format!("{ws}/")], "a shared prefix awaits nothing: it is refused");
    assert_eq!(first.shared_prefixes, vec![format!("{shared_ws}/")]);
    assert!(adopted(&ctx, &unnamed).await.is_none());

    // Approved (the shared prefix too, which still adopts nothing), the next report adopts the old orphans.
    approve(&ctx, &format!("{ws}/")).await;
    approve(&ctx, &format!("{shared_ws}/")).await;
    put_report(&ctx, &folder, "2026-11-30T00-00Z", &files, None).await;
    let adopting = pass(&ctx, &prefixes, &folder).await;
    let second = adopting.reconcile.clone().expect("reconciled").compared.expect("compared");
    assert_eq!((second.adopted_keys, second.adopted_bytes), (3, 54), "{second:?}");
    assert!(second.awaiting_approval.is_empty());
    // Adopted, they wait for a key scan begun after their adoption: the census of this pass ran before it.
    assert_eq!((adopting.adopted_due, adopting.enqueued), (0, 0), "{adopting:?}");
    let (text_id, json_id, unnamed_id) = (
        adopted(&ctx, &in_text).await.expect("adopted"),
        adopted(&ctx, &in_json).await.expect("adopted"),
        adopted(&ctx, &unnamed).await.expect("adopted"),
    );
    for k in [&young, &known, &outside, &shared_orphan, &another_writers] {
        assert!(adopted(&ctx, k).await.is_none(), "{k} is young, known, outside or shared: never adopted");
    }
    assert_eq!(actions(&ctx, unnamed_id).await, vec!["adopted"]);
    assert_eq!(state(&ctx, unnamed_id).await.as_deref(), Some("pending"));

    // The next pass's census reads the text and JSON columns again, which makes them due; dated from
    // LastModified, their grace period is over.
    let scheduling = pass(&ctx, &prefixes, &folder).await;
    assert_eq!(scheduling.adopted_due, 3, "{scheduling:?}");
    through_first_adoption_brake(&scheduling, ws).await;
    approve_brake(&ctx, ws).await;
    let claiming = pass(&ctx, &prefixes, &folder).await;
    assert_eq!(claiming.enqueued, 3, "{claiming:?}");
    // Should the key scan of `posts` be undone before they settle (as for a column it has not covered yet), the
    // unnamed orphan waits; the named ones are kept, each naming its record.
    sqlx::query("UPDATE census_columns SET keys_proven_at = NULL WHERE table_name = 'posts'")
        .execute(ctx.pool())
        .await
        .expect("undo the key scan");
    settle_queue(&ctx).await;
    let waiting = last_evidence(&ctx, unnamed_id).await;
    assert_eq!(waiting["deferred"]["why"], "key_scan", "{waiting}");
    assert_eq!(waiting["deferred"]["unscanned"], serde_json::json!(["public.posts.html"]), "{waiting}");
    for (id, column) in [(text_id, "public.posts.html"), (json_id, "public.pages.body")] {
        let kept = last_evidence(&ctx, id).await;
        assert_eq!(kept["deferred"]["why"], "named", "{kept}");
        assert_eq!(kept["deferred"]["named_by"], column, "{kept}");
    }
    for k in [&in_text, &in_json, &unnamed] {
        assert!(object_exists(&ctx.s3, &ctx.bucket, k).await, "{k} waits");
    }

    // The next pass's census covers `posts` again: the unnamed orphan is retired first, its bytes in place (still
    // served, restorable), never deleted outright.
    sqlx::query("UPDATE assets SET due_at = now() WHERE id = $1")
        .bind(unnamed_id)
        .execute(ctx.pool())
        .await
        .expect("due");
    let retiring = pass(&ctx, &prefixes, &folder).await;
    assert_eq!(retiring.enqueued, 1, "{retiring:?}");
    settle_queue(&ctx).await;
    assert_eq!(actions(&ctx, unnamed_id).await, vec!["adopted", "defer", "retire"]);
    assert_eq!(state(&ctx, unnamed_id).await.as_deref(), Some("retired"));
    assert!(object_exists(&ctx.s3, &ctx.bucket, &unnamed).await, "retired adopted bytes stay in place");

    // Its retention over (a month on, every census since having read the schema) and nothing naming it meanwhile,
    // the purge removes it.
    sqlx::query(
        "UPDATE assets SET retired_at = retired_at - interval '31 days', purge_after = now() - interval '1 second',
                due_at = now() WHERE id = $1",
    )
    .bind(unnamed_id)
    .execute(ctx.pool())
    .await
    .expect("retention over");
    let removed = pass(&ctx, &prefixes, &folder).await;
    assert_eq!(removed.enqueued, 1, "{removed:?}");
    settle_queue(&ctx).await;
    assert_eq!(actions(&ctx, unnamed_id).await, vec!["adopted", "defer", "retire", "purge"]);
    assert!(!object_exists(&ctx.s3, &ctx.bucket, &unnamed).await, "the unnamed orphan's bytes are gone");
    assert!(state(&ctx, unnamed_id).await.is_none());
    for k in [&in_text, &in_json, &young, &known, &outside, &shared_orphan, &another_writers] {
        assert!(object_exists(&ctx.s3, &ctx.bucket, k).await, "{k} is untouched");
    }
    let mut conn = ctx.pool().acquire().await.expect("a connection");
    let standing = reconcile::standing(&mut conn).await.expect("standing");
    assert_eq!((standing.adopted, standing.named_without_row), (2, 2), "{standing:?}");
}

#[tokio::test]
async fn an_upload_racing_the_adoption_of_its_key_keeps_its_bytes() {
    let ctx = TestContext::new().await;
    owner_tables(&ctx).await;
    let ws = Uuid::new_v4();
    let (reused, in_flight) = (key(ws), key(ws));
    for k in [&reused, &in_flight] {
        put_bytes(&ctx.s3, &ctx.bucket, k, b"bytes no row knows").await;
    }
    let b = ctx.bucket.clone();
    let files = vec![row(&b, &reused, true, false, 18, OLD) + &row(&b, &in_flight, true, false, 18, OLD)];
    let folder = format!("inventory/{b}/daily/");
    let prefix = format!("{ws}/");
    let signature = platform::keys::KeyLayout::new(&prefix, PATTERN).expect("a layout").signature();
    sqlx::query(
        "INSERT INTO reconcile_prefixes (prefix, layout, approved_at, approved_by, approved_until, approved_keys)
         VALUES ($1, $2, now(), 'test', now() + interval '1 day', 2)",
    )
    .bind(&prefix)
    .bind(signature)
    .execute(ctx.pool())
    .await
    .expect("approved");
    put_report(&ctx, &folder, "2026-11-30T00-00Z", &files, None).await;

    // An upload of `in_flight` has written its rows and not committed when the adoption reaches the key: the
    // adoption waits for it, and the upload's object wins.
    let mut upload = ctx.pool().begin().await.expect("the upload's transaction");
    let upload_id: Uuid = sqlx::query_scalar(
        "WITH o AS (INSERT INTO stored_objects (storage_key, content_hash, byte_size) VALUES ($1, 'sha256:x', 18)
                    ON CONFLICT (storage_key) DO NOTHING)
         INSERT INTO assets (workspace_id, storage_key, content_hash, byte_size) VALUES ($2, $1, 'sha256:x', 18)
         RETURNING id",
    )
    .bind(&in_flight)
    .bind(ws)
    .fetch_one(&mut *upload)
    .await
    .expect("the upload's rows");
    let sweep = tokio::spawn({
        let (ctx_pool, prefix, folder) = (ctx.pool().clone(), prefix.clone(), folder.clone());
        let (sqs, s3, settings) = (
            ctx.sqs.clone(),
            ctx.s3.clone(),
            ctx.settings(&[
                ("RECONCILE_PREFIXES", prefix.as_str()),
                ("RECONCILE_KEY_PATTERN", PATTERN),
                ("RECONCILE_INVENTORY", format!("s3://{b}/{folder}").as_str()),
            ]),
        );
        async move {
            Sweeper::new(ctx_pool, sqs, settings)
                .with_storage(s3)
                .run_pass(Instant::now() + Duration::from_secs(600))
                .await
                .expect("sweep pass")
        }
    });
    crate::pipeline::until_a_lock_wait(
        ctx.pool(),
        "WITH candidates AS MATERIALIZED",
        "the adoption never reached the upload's key",
    )
    .await;
    upload.commit().await.expect("the upload commits");
    let report = sweep.await.expect("the pass");
    let compared = report.reconcile.clone().expect("reconciled").compared.expect("compared");
    assert_eq!(compared.adopted_keys, 1, "only the key no upload holds: {compared:?}");
    assert!(adopted(&ctx, &in_flight).await.is_none(), "the upload's object is its own");
    let adopted_id = adopted(&ctx, &reused).await.expect("adopted");

    // Then the application reuses the adopted bytes (the reuse protocol: a row under the existing key). The
    // adopted asset goes; the bytes stay for the upload's asset.
    let reuser: Uuid = sqlx::query_scalar(
        "INSERT INTO assets (workspace_id, storage_key, content_hash, byte_size, state) VALUES ($1, $2, 'sha256:y', 18,
                'attached') RETURNING id",
    )
    .bind(ws)
    .bind(&reused)
    .fetch_one(ctx.pool())
    .await
    .expect("reuse");
    sqlx::query("INSERT INTO products (hero) VALUES ($1)").bind(reuser).execute(ctx.pool()).await.expect("product");
    age_objects(&ctx, &[&reused]).await;
    assert_eq!(report.enqueued, 0, "adopted bytes wait for the key scan");
    let scheduling = pass(&ctx, &prefix, &folder).await;
    assert_eq!(scheduling.adopted_due, 1, "{scheduling:?}");
    through_first_adoption_brake(&scheduling, ws).await;
    approve_brake(&ctx, ws).await;
    let settling = pass(&ctx, &prefix, &folder).await;
    assert_eq!(settling.enqueued, 1, "{settling:?}");
    settle_queue(&ctx).await;
    assert_eq!(actions(&ctx, adopted_id).await, vec!["adopted", "retire"]);
    assert_eq!(state(&ctx, adopted_id).await.as_deref(), Some("retired"));
    assert_eq!(state(&ctx, reuser).await.as_deref(), Some("attached"));
    assert_eq!(state(&ctx, upload_id).await.as_deref(), Some("pending"));
    assert!(object_exists(&ctx.s3, &ctx.bucket, &reused).await, "the reusing asset keeps working bytes");
    assert!(object_exists(&ctx.s3, &ctx.bucket, &in_flight).await, "the upload keeps its bytes");
}

/// The key scan keeps only spans that name an adopted key (nothing else asks for them), read when the pass began:
/// a reconciliation adopting at that moment must not slip between. Its adoption is dated before the scan begins,
/// so the scan would count as covering it, while its key, not yet committed, was not among those read. The key
/// scan finds the adoption table locked and keeps every span for that pass.
#[tokio::test]
async fn an_adoption_being_written_as_the_key_scan_begins_keeps_its_key_named() {
    // A failpoint of another test (`census::advance`) would fail this census.
    let _turn = integration_tests::FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let (adopting, never) = (key(ws), key(ws));
    sqlx::raw_sql("CREATE TABLE posts (id serial PRIMARY KEY, html text)").execute(ctx.pool()).await.expect("posts");
    sqlx::query("INSERT INTO posts (html) VALUES ($1), ($2)")
        .bind(format!("<img src=\"https://cdn.example.com/{adopting}?w=640\">"))
        .bind(format!("<a href=\"/{never}\">the file</a>"))
        .execute(ctx.pool())
        .await
        .expect("posts");
    let layout = platform::keys::KeyLayout::new(&format!("{ws}/"), PATTERN).expect("the layout");
    let census = census_with(&layout, Duration::from_secs(30));
    // Nothing adopted: the texts name keys of ours, and none is kept.
    key_scan(&ctx, &census).await;
    assert!(!named(&ctx, &adopting).await && !named(&ctx, &never).await);

    // A reconciliation writing its adoption, not yet committed, as the next scan begins.
    let mut adoption = ctx.pool().begin().await.expect("begin");
    let asset = seed(&ctx, ws, "pending", "1 day", &adopting).await;
    sqlx::query(
        "INSERT INTO adopted_assets (asset_id, storage_key, workspace_id, listing_id, last_modified, layout)
         VALUES ($1, $2, $3, 1, now() - interval '1 year', $4)",
    )
    .bind(asset)
    .bind(&adopting)
    .bind(ws)
    .bind(layout.signature())
    .execute(&mut *adoption)
    .await
    .expect("the adoption");
    key_scan(&ctx, &census).await;
    adoption.commit().await.expect("commit");

    // The scan began after the adoption's date, so it is what decides: it kept the adopted key named.
    let unscanned: bool = sqlx::query_scalar(
        "SELECT bool_or(asset_sweeper_keys_unscanned(c, d)) FROM census_columns c, adopted_assets d
          WHERE c.table_name = 'posts' AND c.column_name = 'html'",
    )
    .fetch_one(ctx.pool())
    .await
    .expect("covered");
    assert!(!unscanned, "the scan covers the adoption");
    assert!(named(&ctx, &adopting).await, "the adopted key is named by the post");
}

/// An adoption committed after the key scan read the adopted keys (at the pass's first span), before the scan of
/// another table begins: its key was not among those kept, so that scan must not count as covering it. A scan is
/// dated no later than the keys were read, so the adoption waits for the next scan.
#[tokio::test]
async fn an_adoption_committed_after_the_keys_were_read_waits_for_the_next_scan() {
    let _turn = integration_tests::FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let adopting = key(ws);
    // The census reads `drafts` first (its oid is lower): its link makes the key scan read the adopted keys, and
    // the scan of `posts` begins after that.
    sqlx::raw_sql(
        "CREATE TABLE drafts (id serial PRIMARY KEY, html text);
         CREATE TABLE posts (id serial PRIMARY KEY, html text);",
    )
    .execute(ctx.pool())
    .await
    .expect("tables");
    sqlx::query("INSERT INTO drafts (html) VALUES ($1)")
        .bind(format!("<a href=\"/{}\">draft</a>", key(ws)))
        .execute(ctx.pool())
        .await
        .expect("draft");
    sqlx::query("INSERT INTO posts (html) VALUES ($1)")
        .bind(format!("<img src=\"https://cdn.example.com/{adopting}?w=640\">"))
        .execute(ctx.pool())
        .await
        .expect("post");
    let layout = platform::keys::KeyLayout::new(&format!("{ws}/"), PATTERN).expect("the layout");
    let asset = seed(&ctx, ws, "pending", "1 day", &adopting).await;
    let (url, signature, key) = (ctx.db.url.clone(), layout.signature(), adopting.clone());
    // Between reading the keys and the first batch, another session adopts the file and commits (on a thread of its
    // own: the census waits in the failpoint meanwhile). Only in this test's census: the failpoint is the process's,
    // and other tests' passes read keys too (each test runs on a thread of its own).
    thread_local!(static THIS_TEST: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    THIS_TEST.with(|t| t.set(true));
    let adopted_once = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    fail::cfg_callback("census::keys_read", move || {
        if !THIS_TEST.with(std::cell::Cell::get) || adopted_once.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let (url, signature, key) = (url.clone(), signature.clone(), key.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
            runtime.block_on(async {
                let pool = sqlx::PgPool::connect(&url).await.expect("connect");
                sqlx::query(
                    "INSERT INTO asset_sweeper_private.adopted_assets
                            (asset_id, storage_key, workspace_id, listing_id, last_modified, layout)
                     VALUES ($1, $2, $3, 1, now() - interval '1 year', $4)",
                )
                .bind(asset)
                .bind(&key)
                .bind(ws)
                .bind(&signature)
                .execute(&pool)
                .await
                .expect("the adoption");
            });
        })
        .join()
        .expect("the adoption's thread");
    })
    .expect("failpoint");
    let census = census_with(&layout, Duration::from_secs(30));
    key_scan(&ctx, &census).await;
    fail::remove("census::keys_read");

    let (unscanned, named_now): (bool, bool) = sqlx::query_as(
        "SELECT bool_or(asset_sweeper_keys_unscanned(c, d)),
                EXISTS (SELECT 1 FROM named_keys n WHERE asset_sweeper_names_key(n.storage_key, $1))
           FROM census_columns c, adopted_assets d WHERE c.table_name = 'posts'",
    )
    .bind(&adopting)
    .fetch_one(ctx.pool())
    .await
    .expect("covered");
    assert!(!named_now, "its key was not among those read");
    assert!(unscanned, "so the scan does not cover the adoption: it waits for the next");
    // The next scan reads it among the adopted keys, and names it.
    key_scan(&ctx, &census).await;
    assert!(named(&ctx, &adopting).await);
}

/// What a scan saw the scan before is not written again (a million named keys were a million row versions a cycle,
/// half its time), and the forgetting rule holds as before: a name one complete scan misses (an update can move a
/// row into a block the scan has read) is kept, a name two scans in a row miss is forgotten; for a key named whole
/// and one named relative to a root alike. Each scan's sightings are read by the next scan's end, and then go.
#[tokio::test]
async fn a_name_one_scan_misses_is_kept_and_one_two_scans_miss_is_forgotten_without_rewriting_what_each_saw() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let (whole, relative) = (key(ws), key(ws));
    let file_name = relative.rsplit('/').next().expect("a file name").to_owned();
    sqlx::raw_sql(
        "CREATE TABLE posts (id serial PRIMARY KEY, html text);
         CREATE TABLE photos (id serial PRIMARY KEY, file varchar(200));",
    )
    .execute(ctx.pool())
    .await
    .expect("tables");
    sqlx::query("INSERT INTO posts (html) VALUES ($1)")
        .bind(format!("<img src=\"https://cdn.example.com/{whole}?w=640\">"))
        .execute(ctx.pool())
        .await
        .expect("post");
    // As a framework stores a file under its storage root: the key less its leading segment.
    sqlx::query("INSERT INTO photos (file) VALUES ($1)").bind(&file_name).execute(ctx.pool()).await.expect("photo");
    let layout = platform::keys::KeyLayout::new(&format!("{ws}/"), PATTERN).expect("the layout");
    adopt_keys(&ctx, &[whole.clone(), relative.clone()], ws, &layout).await;
    let census = census_with(&layout, Duration::from_secs(30));
    // Each row of `named_keys` as written: its version (`xmin`) changes when it is written again.
    let versions = || async {
        sqlx::query_as::<_, (String, bool, String)>(
            "SELECT storage_key, relative, xmin::text FROM named_keys ORDER BY storage_key, relative",
        )
        .fetch_all(ctx.pool())
        .await
        .expect("named keys")
    };

    key_scan(&ctx, &census).await;
    let first = versions().await;
    // The key named whole is kept as the span the URL gives (the key and what the pattern lets follow it).
    let ways: Vec<bool> = first.iter().map(|(_, relative, _)| *relative).collect();
    assert_eq!(ways.len(), 2, "{first:?}");
    for (kept, relative_row, _) in &first {
        let (named, way) = if *relative_row { (&relative, "relative") } else { (&whole, "whole") };
        assert!(kept.starts_with(named.as_str()), "{way}: {first:?}");
    }
    key_scan(&ctx, &census).await;
    assert_eq!(versions().await, first, "a second scan sights what the first wrote, and writes nothing of it");

    // Both records edited to name nothing: the scan that follows misses the names, and keeps them (the scan before
    // it saw them); the next one misses them too, and forgets them.
    sqlx::raw_sql("UPDATE posts SET html = '<p>gone</p>'; UPDATE photos SET file = 'elsewhere.png';")
        .execute(ctx.pool())
        .await
        .expect("edited");
    key_scan(&ctx, &census).await;
    assert!(named(&ctx, &whole).await && named_relative(&ctx, &relative).await, "one scan missed them");
    key_scan(&ctx, &census).await;
    assert!(!named(&ctx, &whole).await && !named_relative(&ctx, &relative).await, "two scans missed them");
    let sightings: i64 =
        sqlx::query_scalar("SELECT count(*) FROM named_sightings").fetch_one(ctx.pool()).await.expect("sightings");
    assert_eq!(sightings, 0, "two scans that saw nothing leave no sighting behind");
}

/// Whether `key` is held as named relative to a root.
async fn named_relative(ctx: &TestContext, key: &str) -> bool {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM named_keys WHERE storage_key = $1 AND relative)")
        .bind(key)
        .fetch_one(ctx.pool())
        .await
        .expect("named_keys")
}

/// The census as a pass runs it, with the key scan's `layout` and a batch limit of `batch_timeout`, never resting
/// between cycles.
fn census_with(layout: &platform::keys::KeyLayout, batch_timeout: Duration) -> schema::census::Census<'_> {
    schema::census::Census {
        max_batches: u32::MAX,
        batch_blocks: 1_024,
        batch_timeout,
        cycle_interval: Duration::ZERO,
        readers: 2,
        layout: Some(layout),
        replica: None,
    }
}

/// `keys` of `ws`, adopted a year ago with `layout`: the `adopted_assets` rows the key scan reads.
pub(crate) async fn adopt_keys(ctx: &TestContext, keys: &[String], ws: Uuid, layout: &platform::keys::KeyLayout) {
    sqlx::query(
        "INSERT INTO adopted_assets (asset_id, storage_key, workspace_id, listing_id, last_modified, layout)
         SELECT gen_random_uuid(), k, $2, 1, now() - interval '1 year', $3 FROM unnest($1::text[]) k",
    )
    .bind(keys)
    .bind(ws)
    .bind(layout.signature())
    .execute(ctx.pool())
    .await
    .expect("adopted files");
}

/// One census cycle with its key scan, as a pass runs it.
async fn key_scan(ctx: &TestContext, census: &schema::census::Census<'_>) {
    use platform::step::{Share, Step};
    let share = Share::of(100, Instant::now() + Duration::from_secs(600));
    let progress = census.advance(ctx.pool(), share).await.expect("the census");
    assert_eq!(progress.columns_unproven, 0, "{progress:?}");
}

/// Whether a span the key scan kept names `key`.
async fn named(ctx: &TestContext, key: &str) -> bool {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM named_keys n WHERE asset_sweeper_names_key(n.storage_key, $1))")
        .bind(key)
        .fetch_one(ctx.pool())
        .await
        .expect("named_keys")
}

/// A legacy column of paths whose values are adopted files' keys (how an application names files before it adopts
/// this product) is a name the key scan keeps, not a column of asset ids: the schema check's sample passes over
/// adopted keys as the census does. Before, every pass refused for every workspace (`unexplained_asset_ids`).
#[tokio::test]
async fn a_column_of_adopted_keys_refuses_nothing() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    sqlx::raw_sql("CREATE TABLE legacy_avatars (id serial PRIMARY KEY, path text)")
        .execute(ctx.pool())
        .await
        .expect("table");
    for _ in 0..12 {
        let path = key(ws);
        let asset = seed(&ctx, ws, "pending", "1 day", &path).await;
        sqlx::query(
            "INSERT INTO adopted_assets (asset_id, storage_key, workspace_id, listing_id, last_modified, layout)
             VALUES ($1, $2, $3, 1, now() - interval '1 year', 'legacy')",
        )
        .bind(asset)
        .bind(&path)
        .bind(ws)
        .execute(ctx.pool())
        .await
        .expect("adopted");
        sqlx::query("INSERT INTO legacy_avatars (path) VALUES ($1)")
            .bind(&path)
            .execute(ctx.pool())
            .await
            .expect("row");
    }
    let report = crate::pipeline::pass(&ctx, &[]).await;
    // Not refused: held only by the brake, as any first adoption is.
    assert_eq!(report.outcome, lifecycle::runs::RunOutcome::Braked, "{:?}", report.reason);
    through_first_adoption_brake(&report, ws).await;
}

/// The refusal's own advice, followed as an operator would: a text column holding many asset ids that is no source (a
/// log of views) refuses the pass, and the statement the refusal names excludes it for ids alone. The key scan still
/// reads it, so the legacy file one of its lines names by key keeps its bytes while an unnamed one is removed. An
/// exclusion of everything (what the advice used to write) deleted both.
#[tokio::test]
async fn the_exclusion_a_refusal_offers_leaves_the_files_its_column_names_by_key_held() {
    let _turn = integration_tests::FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    sqlx::raw_sql("CREATE TABLE activity (id serial PRIMARY KEY, line text)").execute(ctx.pool()).await.expect("table");
    let ws = Uuid::new_v4();
    let line = |text: String| {
        let pool = ctx.pool().clone();
        async move {
            sqlx::query("INSERT INTO activity (line) VALUES ($1)").bind(text).execute(&pool).await.expect("line");
        }
    };
    for _ in 0..30 {
        let viewed = seed(&ctx, ws, "attached", "3 days", &key(ws)).await;
        line(format!("viewed asset {viewed}")).await;
    }
    let (named, unnamed) = (key(ws), key(ws));
    for k in [&named, &unnamed] {
        put_bytes(&ctx.s3, &ctx.bucket, k, b"bytes no row knows").await;
    }
    line(format!("imported https://cdn.example.com/{named} from the old site")).await;

    let b = ctx.bucket.clone();
    let files = vec![[&named, &unnamed].map(|k| row(&b, k, true, false, 18, OLD)).concat()];
    let folder = format!("inventory/{b}/daily/");
    let prefixes = format!("{ws}/");
    put_report(&ctx, &folder, "2026-11-29T00-00Z", &files, None).await;

    let refused = pass(&ctx, &prefixes, &folder).await;
    assert_eq!(refused.outcome, lifecycle::runs::RunOutcome::Refused, "{:?}", refused.reason);
    let refusal: schema::SchemaRefusal =
        serde_json::from_value(refused.reason.expect("a reason")["schema_check"].clone()).expect("the refusal");
    let advice = refusal
        .problems
        .iter()
        .map(ToString::to_string)
        .find(|p| p.starts_with("public.activity.line"))
        .expect("activity.line refused");
    let exclusion = &advice[advice.find("INSERT INTO").expect("the advice names its statement")..];
    assert!(exclusion.contains("'ids'"), "{exclusion}");
    sqlx::raw_sql(sqlx::AssertSqlSafe(exclusion.to_owned())).execute(ctx.pool()).await.expect("the advice runs");

    // Reconciled, approved, adopted; the next pass's key scan reads the excluded column and finds the name.
    let reconciled = pass(&ctx, &prefixes, &folder).await;
    assert_eq!(reconciled.outcome, lifecycle::runs::RunOutcome::Ok, "{:?}", reconciled.reason);
    approve(&ctx, &prefixes).await;
    put_report(&ctx, &folder, "2026-11-30T00-00Z", &files, None).await;
    pass(&ctx, &prefixes, &folder).await;
    let (named_id, unnamed_id) =
        (adopted(&ctx, &named).await.expect("adopted"), adopted(&ctx, &unnamed).await.expect("adopted"));
    let scheduling = pass(&ctx, &prefixes, &folder).await;
    assert_eq!(scheduling.adopted_due, 2, "{scheduling:?}");
    through_first_adoption_brake(&scheduling, ws).await;
    approve_brake(&ctx, ws).await;
    pass(&ctx, &prefixes, &folder).await;
    settle_queue(&ctx).await;
    assert!(object_exists(&ctx.s3, &ctx.bucket, &named).await, "the file a record names by key keeps its bytes");
    assert_eq!(state(&ctx, named_id).await.as_deref(), Some("pending"));
    let kept = last_evidence(&ctx, named_id).await;
    assert_eq!(
        (kept["deferred"]["why"].as_str(), kept["deferred"]["named_by"].as_str()),
        (Some("named"), Some("public.activity.line")),
        "{kept}"
    );
    assert!(object_exists(&ctx.s3, &ctx.bucket, &unnamed).await, "the unnamed one is retired, its bytes in place");
    assert_eq!(actions(&ctx, unnamed_id).await.last().map(String::as_str), Some("retire"));
    let names: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM named_keys n JOIN census_columns c ON c.relid = n.relid AND c.attnum = n.attnum
          WHERE c.table_name = 'activity' AND c.reads = 'keys'",
    )
    .fetch_one(ctx.pool())
    .await
    .expect("named keys");
    assert_eq!(names, 1, "read for keys alone");
}

#[tokio::test]
async fn keys_under_a_pinned_prefix_are_not_adopted_until_the_pin_ends() {
    let ctx = TestContext::new().await;
    owner_tables(&ctx).await;
    let ws = Uuid::new_v4();
    let (pinned, free) = (format!("{ws}/partner-{}.png", Uuid::new_v4()), key(ws));
    for k in [&pinned, &free] {
        put_bytes(&ctx.s3, &ctx.bucket, k, b"bytes no row knows").await;
    }
    let b = ctx.bucket.clone();
    let files = vec![[&pinned, &free].map(|k| row(&b, k, true, false, 18, OLD)).concat()];
    let folder = format!("inventory/{b}/daily/");
    let prefixes = format!("{ws}/");
    put_report(&ctx, &folder, "2026-11-28T00-00Z", &files, None).await;
    pass(&ctx, &prefixes, &folder).await;
    approve(&ctx, &prefixes).await;
    // Another service serves these from the bucket: an operator pins their prefix.
    sqlx::query(
        "INSERT INTO asset_pins (key_prefix, reason, ends_at) VALUES ($1, 'the partner export', now() + interval '1 day')",
    )
    .bind(format!("{ws}/partner-"))
    .execute(ctx.pool())
    .await
    .expect("a pin");
    put_report(&ctx, &folder, "2026-11-29T00-00Z", &files, None).await;
    let first = pass(&ctx, &prefixes, &folder).await.reconcile.expect("reconciled").compared.expect("compared");
    assert_eq!((first.unknown_keys, first.adopted_keys), (2, 1), "{first:?}");
    assert!(adopted(&ctx, &free).await.is_some());
    assert!(adopted(&ctx, &pinned).await.is_none(), "a pinned key is not adopted");

    // The pin over, the next report adopts it.
    sqlx::query("UPDATE asset_pins SET pinned_at = now() - interval '1 day', ends_at = now() - interval '1 second'")
        .execute(ctx.pool())
        .await
        .expect("ended");
    put_report(&ctx, &folder, "2026-11-30T00-00Z", &files, None).await;
    let second = pass(&ctx, &prefixes, &folder).await.reconcile.expect("reconciled").compared.expect("compared");
    assert_eq!(second.adopted_keys, 1, "{second:?}");
    assert!(adopted(&ctx, &pinned).await.is_some());
    assert!(object_exists(&ctx.s3, &ctx.bucket, &pinned).await);
}

#[tokio::test]
async fn an_approved_prefix_whose_next_report_has_fifty_times_the_unknown_keys_adopts_nothing_until_approved_again() {
    let ctx = TestContext::new().await;
    let url = ctx.db.url.as_str();
    let ws = Uuid::new_v4();
    let prefix = format!("{ws}/");
    let folder = format!("inventory/{}/daily/", ctx.bucket);
    let layout = [("RECONCILE_PREFIXES", prefix.as_str()), ("RECONCILE_KEY_PATTERN", PATTERN)];
    let report = |keys: &[String]| keys.iter().map(|k| row(&ctx.bucket, k, true, false, 18, OLD)).collect::<String>();
    let approve = || {
        let args = ["approve", "--prefix", prefix.as_str(), "--by", "ops@example.com", "--reason", "read the report"];
        crate::cli::stdout(&crate::cli::run_with(url, Some(&ctx), &layout, &args))
    };
    let adopted_count = || async {
        let n: i64 =
            sqlx::query_scalar("SELECT count(*) FROM adopted_assets").fetch_one(ctx.pool()).await.expect("count");
        n
    };

    // Two legacy files no row knows: reported, read by a person, approved for two.
    let legacy: Vec<String> = (0..2).map(|_| key(ws)).collect();
    put_report(&ctx, &folder, "2026-11-28T00-00Z", &[report(&legacy)], None).await;
    let first = pass(&ctx, &prefix, &folder).await.reconcile.expect("reconciled").compared.expect("compared");
    assert_eq!(first.awaiting_approval, vec![prefix.clone()]);
    let approved = approve();
    assert!(approved.contains("found 2 key(s)") && approved.contains("no report finds more than 2"), "{approved}");

    // Before the next report the database is restored from an older backup: a hundred files lose their rows at once.
    let orphaned: Vec<String> = legacy.iter().cloned().chain((0..98).map(|_| key(ws))).collect();
    put_report(&ctx, &folder, "2026-11-29T00-00Z", &[report(&orphaned)], None).await;
    let jumped = pass(&ctx, &prefix, &folder).await.reconcile.expect("reconciled").compared.expect("compared");
    assert_eq!((jumped.unknown_keys, jumped.adopted_keys), (100, 0), "{jumped:?}");
    assert_eq!(adopted_count().await, 0, "nothing adopted: not even the two that were approved");
    let withdrawn = jumped.withdrawn.first().expect("the approval withdrawn");
    assert_eq!(
        (withdrawn.approved_keys, withdrawn.previous_keys, withdrawn.keys, withdrawn.approved_by.as_str()),
        (2, Some(2), 100, "ops@example.com")
    );
    assert_eq!(jumped.awaiting_approval, vec![prefix.clone()], "{jumped:?}");

    let status = crate::cli::run_with(url, Some(&ctx), &layout, &["status"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains(&format!("prefix {prefix:?} had its approval withdrawn: a report found 100 adoptable key(s)")),
        "{text}"
    );
    assert!(text.contains("against the 2 approved (by ops@example.com) and 2 in the report before"), "{text}");
    assert_eq!(status.status.code(), Some(1), "a withdrawn approval needs a person");

    // The same report again adopts nothing: the approval is gone, not merely skipped once.
    put_report(&ctx, &folder, "2026-11-30T00-00Z", &[report(&orphaned)], None).await;
    let again = pass(&ctx, &prefix, &folder).await.reconcile.expect("reconciled").compared.expect("compared");
    assert_eq!((again.adopted_keys, again.awaiting_approval.clone()), (0, vec![prefix.clone()]), "{again:?}");

    // A person reads the new report and approves what it shows: the next one adopts them all.
    let approved = approve();
    assert!(approved.contains("found 100 key(s)"), "{approved}");
    put_report(&ctx, &folder, "2026-12-01T00-00Z", &[report(&orphaned)], None).await;
    let adopting = pass(&ctx, &prefix, &folder).await.reconcile.expect("reconciled").compared.expect("compared");
    assert_eq!(adopting.adopted_keys, 100, "{adopting:?}");
    assert!(adopting.withdrawn.is_empty());
}

/// A document too large to read within the census's batch limit names an adopted file relative to a root in its
/// first part (a framework's JSON of a page, stored as text): the slice the census reads of it holds the file as
/// the whole would have. Before, only keys named whole were read in a slice.
#[tokio::test]
async fn a_name_relative_to_a_root_in_the_read_part_of_a_value_too_large_to_read_holds_its_file() {
    // A failpoint of another test (`census::advance`) would fail this one's census.
    let _turn = integration_tests::FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let adopted_key = key(ws);
    let relative = adopted_key.rsplit('/').next().expect("a file name").to_owned();
    crate::findings::long_texts(&ctx, "pages", "content").await;
    // 96 MB: past a quarter second's limit, read in part.
    sqlx::query(
        "INSERT INTO pages (content)
         SELECT '{\"hero\":{\"file\":\"' || $1 || '\"},\"body\":\"' || repeat('and on and on and on. ', 4500000) || '\"}'",
    )
    .bind(&relative)
    .execute(ctx.pool())
    .await
    .expect("the page");
    let layout = platform::keys::KeyLayout::new(&format!("{ws}/"), PATTERN).expect("the layout");
    adopt_keys(&ctx, std::slice::from_ref(&adopted_key), ws, &layout).await;
    let census = census_with(&layout, Duration::from_millis(250));
    key_scan(&ctx, &census).await;
    let (read, chars): (i64, Option<i32>) =
        sqlx::query_as("SELECT count(*), max(read_chars) FROM census_unread WHERE NOT untried")
            .fetch_one(ctx.pool())
            .await
            .expect("unread");
    assert_eq!((read, chars), (1, Some(schema::census::unread::SLICE_CHARS)), "read in part");
    assert!(named_relative(&ctx, &adopted_key).await, "the name in the part read holds the file");
}
