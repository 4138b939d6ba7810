//! The application zoo: applications that name their files their own way, each with the schema its framework
//! creates and the names its framework writes, taken through what a new team does — reconcile, approve, passes,
//! settle — against LocalStack S3 and a real database. Every live file keeps its bytes; every real orphan is retired
//! (bytes in place), then purged.
//!
//! - a Django site, Django itself (from PyPI, `tests/apps/django_site`) writing through django-storages under a
//!   storage location, with a Wagtail-like renditions table: held first by the census's relative names alone, then
//!   kept by its declared key sources;
//! - Rails Active Storage's blobs, bare keys at the service's root;
//! - a key derived from a row's id and its file name, in a partitioned table, with the race of a row written while a
//!   settle waits;
//! - the declarations a key source refuses, each by name.

use std::process::Command;
use std::time::{Duration, Instant};

use integration_tests::TestContext;
use integration_tests::fixtures::{object_exists, put_bytes, state};
use serde_json::Value;
use sweep_lambda::Sweeper;
use sweep_lambda::record::SweepReport;
use uuid::Uuid;

use crate::adoption::{approve, approve_brake, through_first_adoption_brake};
use crate::pipeline::{actions, settle_queue};
use crate::reconcile::{put_report, row};

/// Written long before any grace period, as the inventory reports it.
const OLD: &str = "2025-01-01T00:00:00.000Z";

/// Where reconciliation looks, and what the keys there look like.
#[derive(Clone, Copy)]
struct Layout {
    prefixes: &'static str,
    pattern: &'static str,
}

/// One pass of the real sweep reading the inventory reports in `folder`.
async fn pass(ctx: &TestContext, layout: Layout, folder: &str) -> SweepReport {
    pass_with(ctx, layout, folder, "24h").await
}

/// [`pass`] a census cycle later (its rest between cycles over).
async fn pass_a_cycle_later(ctx: &TestContext, layout: Layout, folder: &str) -> SweepReport {
    pass_with(ctx, layout, folder, "0s").await
}

async fn pass_with(ctx: &TestContext, layout: Layout, folder: &str, census_rest: &str) -> SweepReport {
    let inventory = format!("s3://{}/{folder}", ctx.bucket);
    let overrides = [
        ("RECONCILE_PREFIXES", layout.prefixes),
        ("RECONCILE_KEY_PATTERN", layout.pattern),
        ("RECONCILE_INVENTORY", inventory.as_str()),
        ("CENSUS_CYCLE_INTERVAL", census_rest),
    ];
    Sweeper::new(ctx.pool().clone(), ctx.sqs.clone(), ctx.settings(&overrides))
        .with_storage(ctx.s3.clone())
        .run_pass(Instant::now() + Duration::from_secs(600))
        .await
        .expect("sweep pass")
}

/// An inventory report of `keys`, each written long ago, taken at `scan`.
async fn report(ctx: &TestContext, folder: &str, scan: &str, keys: &[String]) {
    let rows: String = keys.iter().map(|k| row(&ctx.bucket, &urlencoding(k), true, false, 128, OLD)).collect();
    put_report(ctx, folder, scan, &[rows], None).await;
}

/// A key as S3 Inventory's CSV writes it (URL-encoded).
fn urlencoding(key: &str) -> String {
    percent_encoding::utf8_percent_encode(key, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// What a new team does: a reconciliation recorded, the prefix approved after reading it, the next report adopts;
/// then passes until the census has covered the adoption and the adopted assets are claimed. Returns the folder.
async fn adopt(ctx: &TestContext, layout: Layout, prefix: &str, keys: &[String]) -> String {
    let folder = format!("inventory/{}/daily/", ctx.bucket);
    report(ctx, &folder, "2026-11-29T00-00Z", keys).await;
    let first = pass(ctx, layout, &folder).await;
    assert_eq!(first.outcome, lifecycle::runs::RunOutcome::Ok, "{:?}", first.reason);
    approve(ctx, prefix).await;
    report(ctx, &folder, "2026-11-30T00-00Z", keys).await;
    let adopting = pass(ctx, layout, &folder).await;
    let compared = adopting.reconcile.clone().expect("reconciled").compared.expect("compared");
    assert_eq!(compared.adopted_keys as usize, keys.len(), "{compared:?}");
    folder
}

/// The asset adoption wrote for `key`.
async fn adopted(ctx: &TestContext, key: &str) -> Uuid {
    sqlx::query_scalar("SELECT asset_id FROM adopted_assets WHERE storage_key = $1")
        .bind(key)
        .fetch_one(ctx.pool())
        .await
        .unwrap_or_else(|e| panic!("{key} adopted: {e}"))
}

async fn last_evidence(ctx: &TestContext, id: Uuid) -> Value {
    sqlx::query_scalar("SELECT evidence FROM settlement_events WHERE asset_id = $1 ORDER BY id DESC LIMIT 1")
        .bind(id)
        .fetch_one(ctx.pool())
        .await
        .expect("an event")
}

/// Makes the assets under `keys` due now, as time passing beyond their deferral or retention would.
async fn due_now(ctx: &TestContext, keys: &[String], purge: bool) {
    sqlx::query(
        "UPDATE assets SET due_at = now(),
                purge_after = CASE WHEN $2 AND state = 'retired' THEN now() - interval '1 second' ELSE purge_after END,
                retired_at = CASE WHEN $2 AND state = 'retired' THEN retired_at - interval '31 days' ELSE retired_at END
          WHERE storage_key = ANY ($1)",
    )
    .bind(keys)
    .bind(purge)
    .execute(ctx.pool())
    .await
    .expect("due");
}

/// What each problem of `report`'s refusal says from `starting` on (the statement it names, say), as an operator
/// reads it.
fn named_statements(report: &SweepReport, starting: &str) -> Vec<String> {
    let refusal: schema::SchemaRefusal =
        serde_json::from_value(report.reason.clone().expect("a reason")["schema_check"].clone()).expect("the refusal");
    refusal
        .problems
        .iter()
        .map(ToString::to_string)
        .filter_map(|p| p.find(starting).map(|at| p[at..].to_owned()))
        .collect()
}

/// The Django site of `tests/apps/django_site`, run through its pinned environment as a subprocess.
struct Django {
    python: String,
    script: String,
    env: Vec<(String, String)>,
}

impl Django {
    fn new(ctx: &TestContext) -> Self {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let env_dir = Command::new(format!("{root}/localstack/python-env")).arg("django").output().expect("python-env");
        assert!(env_dir.status.success(), "python-env django: {}", String::from_utf8_lossy(&env_dir.stderr));
        let venv = String::from_utf8(env_dir.stdout).expect("a path").trim().to_owned();
        let endpoint = std::env::var("AWS_ENDPOINT_URL").expect("AWS_ENDPOINT_URL");
        let env = [
            ("DJANGO_DATABASE_URL", ctx.db.url.as_str()),
            ("AWS_ENDPOINT_URL", endpoint.as_str()),
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_DEFAULT_REGION", "us-east-1"),
            ("DJANGO_BUCKET", ctx.bucket.as_str()),
            ("DJANGO_LOCATION", "media"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .to_vec();
        Django { python: format!("{venv}/bin/python"), script: format!("{root}/tests/apps/django_site/site.py"), env }
    }

    /// Runs one command of the site; its one line of JSON.
    fn run(&self, args: &[&str]) -> Value {
        let out = Command::new(&self.python)
            .arg(&self.script)
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output()
            .expect("the Django site runs");
        assert!(out.status.success(), "site.py {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("site.py {args:?} printed no JSON: {e}"))
    }

    fn key(&self, args: &[&str]) -> String {
        self.run(args)["key"].as_str().expect("a key").to_owned()
    }
}

const DJANGO: Layout = Layout { prefixes: "media/", pattern: r"media/.+" };

#[tokio::test]
async fn a_django_site_under_a_storage_location_keeps_every_live_file_and_its_orphans_retire_then_purge() {
    let ctx = TestContext::new().await;
    let site = Django::new(&ctx);
    site.run(&["migrate"]);
    // What editors do over a site's life: images with renditions, documents; then some are deleted, and Django
    // leaves their files in the bucket.
    let deleted_image = site.run(&["upload-image", "Old hero", "old hero.png", "2048"]);
    let deleted_id = deleted_image["id"].to_string();
    let orphan_renditions =
        [site.key(&["render", &deleted_id, "fill-100x100"]), site.key(&["render", &deleted_id, "width-800"])];
    let live_image = site.run(&["upload-image", "Cat", "cat.png", "1024"]);
    let live_id = live_image["id"].to_string();
    let mut live = vec![
        live_image["key"].as_str().expect("a key").to_owned(),
        site.key(&["render", &live_id, "fill-300x150|jpegquality-60"]),
        site.key(&["upload-image", "Dog", "dog.png", "1024"]),
        site.key(&["upload-document", "Board pack", "Board Pack Q3.pdf", "4096"]),
    ];
    let deleted_document = site.key(&["upload-document", "Draft", "draft.pdf", "4096"]);
    let gone = site.run(&["delete", "Image", &deleted_id]);
    assert_eq!(gone["cascaded"].as_array().map(Vec::len), Some(2), "{gone}");
    let document_id = sqlx::query_scalar::<_, i64>("SELECT id FROM gallery_document WHERE file = $1")
        .bind(deleted_document.trim_start_matches("media/"))
        .fetch_one(ctx.pool())
        .await
        .expect("the draft's row");
    site.run(&["delete", "Document", &document_id.to_string()]);
    let mut orphans = vec![deleted_image["key"].as_str().expect("a key").to_owned(), deleted_document];
    orphans.extend(orphan_renditions);
    live.sort();
    orphans.sort();
    for key in live.iter().chain(&orphans) {
        assert!(key.starts_with("media/"), "{key}");
        assert!(object_exists(&ctx.s3, &ctx.bucket, key).await, "{key} is in the bucket");
    }
    // The rows hold names relative to the storage root, never the key.
    let stored: Vec<String> =
        sqlx::query_scalar("SELECT file FROM gallery_image UNION ALL SELECT file FROM gallery_rendition")
            .fetch_all(ctx.pool())
            .await
            .expect("names");
    assert!(stored.iter().all(|name| !name.starts_with("media/")), "{stored:?}");

    // Adopted as the docs tell it, with nothing declared: the census reads the names relative to the root.
    let every: Vec<String> = live.iter().chain(&orphans).cloned().collect();
    let folder = adopt(&ctx, DJANGO, "media/", &every).await;
    let scheduling = pass(&ctx, DJANGO, &folder).await;
    assert_eq!(scheduling.adopted_due, 8, "{scheduling:?}");
    through_first_adoption_brake(&scheduling, Uuid::nil()).await;
    approve_brake(&ctx, Uuid::nil()).await;
    let claiming = pass(&ctx, DJANGO, &folder).await;
    assert_eq!(claiming.enqueued, 8, "{claiming:?}");
    settle_queue(&ctx).await;
    for key in &live {
        let id = adopted(&ctx, key).await;
        let held = last_evidence(&ctx, id).await;
        assert_eq!(held["deferred"]["why"], "named", "{key}: {held}");
        assert!(held["deferred"]["named_by"].as_str().is_some_and(|c| c.starts_with("public.gallery_")), "{held}");
        assert_eq!(state(&ctx, id).await.as_deref(), Some("pending"), "{key}");
    }
    let relative: i64 = sqlx::query_scalar("SELECT count(DISTINCT storage_key) FROM named_keys WHERE relative")
        .fetch_one(ctx.pool())
        .await
        .expect("named keys");
    assert_eq!(relative, 4, "each live file named relative to the root, and only those");
    for key in &orphans {
        let id = adopted(&ctx, key).await;
        assert_eq!(actions(&ctx, id).await, vec!["adopted", "retire"], "{key}");
        assert!(object_exists(&ctx.s3, &ctx.bucket, key).await, "{key}: retired, its bytes in place");
    }
    let served = site.run(&["check"]);
    assert_eq!((served["live"].as_u64(), &served["missing"]), (Some(4), &serde_json::json!([])), "{served}");

    // The key sources integrating.md gives for a Django site with a storage location. The check demands the index
    // each needs and names the statement; the operator runs it, then installs the guards.
    sqlx::raw_sql(
        "INSERT INTO asset_key_sources (table_name, template)
         VALUES ('gallery_image', 'media/{file}'), ('gallery_rendition', 'media/{file}'),
                ('gallery_document', 'media/{file}')",
    )
    .execute(ctx.pool())
    .await
    .expect("declared");
    let refused = pass(&ctx, DJANGO, &folder).await;
    assert_eq!(refused.outcome, lifecycle::runs::RunOutcome::Refused, "{:?}", refused.reason);
    let indexes = named_statements(&refused, "CREATE INDEX CONCURRENTLY");
    assert_eq!(indexes.len(), 3, "{indexes:?}");
    for index in indexes {
        sqlx::raw_sql(sqlx::AssertSqlSafe(index.clone())).execute(ctx.pool()).await.expect("the named index");
    }
    integration_tests::install_guards(ctx.pool()).await;

    // A day later the named ones are looked at again: each declared row now keeps its file, by its key source.
    due_now(&ctx, &live, false).await;
    let keeping = pass(&ctx, DJANGO, &folder).await;
    assert_eq!((keeping.outcome, keeping.enqueued), (lifecycle::runs::RunOutcome::Ok, 4), "{:?}", keeping.reason);
    settle_queue(&ctx).await;
    for key in &live {
        let id = adopted(&ctx, key).await;
        assert_eq!(actions(&ctx, id).await.last().map(String::as_str), Some("keep"), "{key}");
        let kept = last_evidence(&ctx, id).await;
        assert!(kept["referenced_by"].as_str().is_some_and(|s| s.contains("(key media/{file})")), "{kept}");
        assert_eq!(state(&ctx, id).await.as_deref(), Some("attached"), "{key}");
    }

    // The orphans' retention over, nothing naming them, they are purged; the site still serves every live file.
    due_now(&ctx, &orphans, true).await;
    let purging = pass(&ctx, DJANGO, &folder).await;
    assert_eq!(purging.enqueued, 4, "{purging:?}");
    settle_queue(&ctx).await;
    for key in &orphans {
        assert!(!object_exists(&ctx.s3, &ctx.bucket, key).await, "{key} purged");
    }
    for key in &live {
        assert!(object_exists(&ctx.s3, &ctx.bucket, key).await, "{key} kept");
    }
    let served = site.run(&["check"]);
    assert_eq!((served["live"].as_u64(), &served["missing"]), (Some(4), &serde_json::json!([])), "{served}");
}

/// Active Storage's own tables, as `rails active_storage:install` creates them.
const ACTIVE_STORAGE: &str = "
    CREATE TABLE active_storage_blobs (
        id bigserial PRIMARY KEY, key varchar NOT NULL, filename varchar NOT NULL, content_type varchar,
        metadata text, service_name varchar NOT NULL, byte_size bigint NOT NULL, checksum varchar,
        created_at timestamp(6) NOT NULL);
    CREATE UNIQUE INDEX index_active_storage_blobs_on_key ON active_storage_blobs (key);
    CREATE TABLE active_storage_attachments (
        id bigserial PRIMARY KEY, name varchar NOT NULL, record_type varchar NOT NULL, record_id bigint NOT NULL,
        blob_id bigint NOT NULL REFERENCES active_storage_blobs (id), created_at timestamp(6) NOT NULL);
    CREATE TABLE active_storage_variant_records (
        id bigserial PRIMARY KEY, blob_id bigint NOT NULL REFERENCES active_storage_blobs (id),
        variation_digest varchar NOT NULL);";

/// A blob key as Active Storage makes one: 28 lowercase base36 characters.
fn blob_key() -> String {
    let digits = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut n = Uuid::new_v4().as_u128();
    (0..28)
        .map(|_| {
            let c = digits[(n % 36) as usize] as char;
            n /= 36;
            c
        })
        .collect()
}

#[tokio::test]
async fn rails_active_storage_blobs_at_the_service_root_are_kept_by_their_key_source() {
    let ctx = TestContext::new().await;
    sqlx::raw_sql(ACTIVE_STORAGE).execute(ctx.pool()).await.expect("active storage tables");
    sqlx::raw_sql("INSERT INTO asset_key_sources (table_name, template) VALUES ('active_storage_blobs', '{key}')")
        .execute(ctx.pool())
        .await
        .expect("declared");
    integration_tests::install_guards(ctx.pool()).await;
    let (live, orphans): (Vec<String>, Vec<String>) =
        ((0..3).map(|_| blob_key()).collect(), (0..2).map(|_| blob_key()).collect());
    for key in live.iter().chain(&orphans) {
        put_bytes(&ctx.s3, &ctx.bucket, key, b"a blob's bytes").await;
    }
    for key in &live {
        sqlx::query(
            "INSERT INTO active_storage_blobs (key, filename, service_name, byte_size, created_at)
             VALUES ($1, 'photo.jpg', 'amazon', 14, now())",
        )
        .bind(key)
        .execute(ctx.pool())
        .await
        .expect("blob");
    }
    // Orphans: blobs whose purge job was lost, rows gone and bytes left.
    let layout = Layout { prefixes: "*", pattern: "[0-9a-z]{28}" };
    let every: Vec<String> = live.iter().chain(&orphans).cloned().collect();
    let folder = adopt(&ctx, layout, "", &every).await;
    let scheduling = pass(&ctx, layout, &folder).await;
    assert_eq!(scheduling.outcome, lifecycle::runs::RunOutcome::Braked, "{scheduling:?}");
    through_first_adoption_brake(&scheduling, Uuid::nil()).await;
    approve_brake(&ctx, Uuid::nil()).await;
    let claiming = pass(&ctx, layout, &folder).await;
    assert_eq!(claiming.enqueued, 5, "{claiming:?}");
    settle_queue(&ctx).await;
    for key in &live {
        let id = adopted(&ctx, key).await;
        assert_eq!(actions(&ctx, id).await, vec!["adopted", "keep"], "{key}");
        assert_eq!(
            last_evidence(&ctx, id).await["referenced_by"],
            "public.active_storage_blobs.key (key {key})",
            "{key}"
        );
    }
    for key in &orphans {
        let id = adopted(&ctx, key).await;
        assert_eq!(actions(&ctx, id).await, vec!["adopted", "retire"], "{key}");
        assert!(object_exists(&ctx.s3, &ctx.bucket, key).await, "{key} retired in place");
    }
}

#[tokio::test]
async fn a_key_derived_from_an_id_and_a_file_name_in_a_partitioned_table_written_while_a_settle_waits_keeps_its_file() {
    let ctx = TestContext::new().await;
    // Partitioned by id, as a large attachments table is: the declaration, its index, its guard and the recheck
    // are the partitioned table's, the rows its partitions'.
    sqlx::raw_sql(
        "CREATE TABLE attachments (id bigint PRIMARY KEY, filename text NOT NULL) PARTITION BY RANGE (id);
         CREATE TABLE attachments_early PARTITION OF attachments FOR VALUES FROM (0) TO (5);
         CREATE TABLE attachments_late PARTITION OF attachments FOR VALUES FROM (5) TO (1000);
         INSERT INTO attachments VALUES (1, 'invoice.pdf');
         INSERT INTO asset_key_sources (table_name, template) VALUES ('attachments', 'uploads/{id}/{filename}');",
    )
    .execute(ctx.pool())
    .await
    .expect("attachments");
    let layout = Layout { prefixes: "uploads/", pattern: r"uploads/[0-9]+/[^/]+" };
    let (kept, late, orphan) =
        ("uploads/1/invoice.pdf".to_owned(), "uploads/7/report.pdf".to_owned(), "uploads/9/old.pdf".to_owned());
    for key in [&kept, &late, &orphan] {
        put_bytes(&ctx.s3, &ctx.bucket, key, b"an attachment").await;
    }
    let folder = format!("inventory/{}/daily/", ctx.bucket);
    report(&ctx, &folder, "2026-11-29T00-00Z", &[kept.clone(), late.clone(), orphan.clone()]).await;
    // The check demands an index on the template's whole expression, and names it: not built concurrently, which
    // Postgres refuses on a partitioned table.
    let refused = pass(&ctx, layout, &folder).await;
    assert_eq!(refused.outcome, lifecycle::runs::RunOutcome::Refused, "{:?}", refused.reason);
    let index = named_statements(&refused, "CREATE INDEX");
    assert_eq!(
        index,
        vec![
            r#"CREATE INDEX ON "public"."attachments" (('uploads/'::text || "id"::text || '/'::text || "filename"));"#
        ]
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(index[0].clone())).execute(ctx.pool()).await.expect("the named index");
    integration_tests::install_guards(ctx.pool()).await;
    let folder = adopt(&ctx, layout, "uploads/", &[kept.clone(), late.clone(), orphan.clone()]).await;
    // No text column but the source's own: the census has nothing to read, so the adopting pass made them due, and
    // the brake held the first adoption.
    approve_brake(&ctx, Uuid::nil()).await;
    let claiming = pass(&ctx, layout, &folder).await;
    assert_eq!(claiming.enqueued, 3, "{claiming:?}");
    // The guard (on insert and on update) is the partitioned table's, so every partition has it.
    let guarded: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
          WHERE t.tgname LIKE 'asset\\_sweeper\\_guard%' ORDER BY 1",
    )
    .fetch_all(ctx.pool())
    .await
    .expect("guards");
    assert_eq!(
        guarded,
        [
            "attachments",
            "attachments",
            "attachments_early",
            "attachments_early",
            "attachments_late",
            "attachments_late"
        ]
    );

    // The application writes the row naming `late` (into the later partition) and has not committed when the settle reaches its asset: the
    // guard holds the asset, the settle waits for it, and its recheck then sees the row.
    let late_id = adopted(&ctx, &late).await;
    let mut write = ctx.pool().begin().await.expect("the application's transaction");
    sqlx::query("INSERT INTO attachments VALUES (7, 'report.pdf')").execute(&mut *write).await.expect("the row");
    let committer = tokio::spawn({
        let pool = ctx.pool().clone();
        async move {
            crate::pipeline::until_a_lock_wait(&pool, "", "the settle never reached the held asset").await;
            write.commit().await.expect("the application commits");
        }
    });
    settle_queue(&ctx).await;
    committer.await.expect("the application's write waited for and committed");
    assert_eq!(actions(&ctx, late_id).await, vec!["adopted", "keep"]);
    assert_eq!(state(&ctx, late_id).await.as_deref(), Some("attached"));
    let kept_id = adopted(&ctx, &kept).await;
    assert_eq!(actions(&ctx, kept_id).await, vec!["adopted", "keep"]);
    let orphan_id = adopted(&ctx, &orphan).await;
    assert_eq!(actions(&ctx, orphan_id).await, vec!["adopted", "retire"]);
    for key in [&kept, &late, &orphan] {
        assert!(object_exists(&ctx.s3, &ctx.bucket, key).await, "{key}");
    }
}

#[tokio::test]
async fn a_key_source_that_cannot_be_meant_is_refused_by_name_with_its_fix() {
    let ctx = TestContext::new().await;
    sqlx::raw_sql("CREATE TABLE photos (id bigint PRIMARY KEY, file varchar(100), meta jsonb)")
        .execute(ctx.pool())
        .await
        .expect("photos");
    let refused = |template: &'static str, table: &'static str| {
        let pool = ctx.pool().clone();
        async move {
            let err = sqlx::query("INSERT INTO asset_key_sources (table_name, template) VALUES ($1, $2)")
                .bind(table)
                .bind(template)
                .execute(&pool)
                .await
                .expect_err(template);
            err.as_database_error().map(|e| e.message().to_owned()).unwrap_or_else(|| err.to_string())
        }
    };
    let missing = refused("media/{path}", "photos").await;
    assert!(missing.contains("has no column path"), "{missing}");
    let not_text = refused("media/{meta}", "photos").await;
    assert!(not_text.contains("column meta is jsonb, not text"), "{not_text}");
    let expression = refused("'media/' || file", "photos").await;
    assert!(expression.contains("is an SQL expression") && expression.contains("'media/{file}'"), "{expression}");
    let call = refused("media/{file}?v=now()", "photos").await;
    assert!(call.contains("calls a function"), "{call}");
    let volatile = refused("media/{file}-random()", "photos").await;
    assert!(volatile.contains("calls a function"), "{volatile}");
    let no_column = refused("media/cat.png", "photos").await;
    assert!(no_column.contains("names no column"), "{no_column}");
    let no_table = refused("media/{file}", "no_such_table").await;
    assert!(no_table.contains("does not exist"), "{no_table}");
    let own = refused("{storage_key}", "assets").await;
    assert!(own.contains("does not exist") || own.contains("not a table of the application"), "{own}");

    // A root outside every managed prefix names no key of ours: the schema check refuses it by name.
    sqlx::raw_sql(
        "CREATE INDEX ON photos (file);
         INSERT INTO asset_key_sources (table_name, template) VALUES ('photos', 'medai/{file}')",
    )
    .execute(ctx.pool())
    .await
    .expect("declared");
    integration_tests::install_guards(ctx.pool()).await;
    let folder = format!("inventory/{}/daily/", ctx.bucket);
    report(&ctx, &folder, "2026-11-29T00-00Z", &["media/cat.png".to_owned()]).await;
    let pass = pass(&ctx, DJANGO, &folder).await;
    assert_eq!(pass.outcome, lifecycle::runs::RunOutcome::Refused, "{:?}", pass.reason);
    let said = named_statements(&pass, "key source");
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].starts_with(
            r#"key source public.photos "medai/{file}": its root "medai/" is not within a managed prefix"#
        ),
        "{said:?}"
    );
    assert!(said[0].contains("fix the declaration in asset_sweeper.asset_key_sources"), "{said:?}");
}

/// A Laravel disk with a `root`: its rows store paths below it (`docs/a.pdf` for the key `files/docs/a.pdf`).
const LARAVEL: Layout = Layout { prefixes: "files/", pattern: r"files/.+" };

/// A person's way back sticks, and `status` is not OK while a file it removed is named: adopted orphans retired,
/// one purged; a person restores one and undeletes the other, and the passes after leave both alone (discovery
/// does not retire them again on the evidence that removed them), `explain` saying who keeps them. A third,
/// purged, is then named by a row the application writes: `status` asks for a person until it is undeleted.
#[tokio::test]
async fn a_restore_or_undelete_sticks_and_status_names_a_removed_file_a_record_names() {
    let ctx = TestContext::new().await;
    let url = ctx.db.url.clone();
    // A page's JSON names a fourth file both ways, by its path and by its URL: held, and the census's notes of
    // one key and column, written once however many names of it a batch holds.
    sqlx::raw_sql(
        "CREATE TABLE documents (id bigserial PRIMARY KEY, path varchar(255) NOT NULL);
         CREATE TABLE pages (id bigserial PRIMARY KEY, body jsonb);
         INSERT INTO pages (body) VALUES
             ('{\"file\": \"docs/d.pdf\", \"url\": \"https://cdn.example.com/files/docs/d.pdf\"}'),
             ('{\"file\": \"d.pdf\"}');",
    )
    .execute(ctx.pool())
    .await
    .expect("documents");
    let keys: Vec<String> = ["a", "b", "c"].iter().map(|n| format!("files/docs/{n}.pdf")).collect();
    let held_key = "files/docs/d.pdf".to_owned();
    for key in keys.iter().chain([&held_key]) {
        put_bytes(&ctx.s3, &ctx.bucket, key, b"a document").await;
    }
    let every: Vec<String> = keys.iter().chain([&held_key]).cloned().collect();
    let folder = adopt(&ctx, LARAVEL, "files/", &every).await;
    let held = pass(&ctx, LARAVEL, &folder).await;
    through_first_adoption_brake(&held, Uuid::nil()).await;
    approve_brake(&ctx, Uuid::nil()).await;
    pass(&ctx, LARAVEL, &folder).await;
    settle_queue(&ctx).await;
    let ids = [adopted(&ctx, &keys[0]).await, adopted(&ctx, &keys[1]).await, adopted(&ctx, &keys[2]).await];
    for id in ids {
        assert_eq!(state(&ctx, id).await.as_deref(), Some("retired"));
    }
    let held = adopted(&ctx, &held_key).await;
    assert_eq!(last_evidence(&ctx, held).await["deferred"]["named_by"], "public.pages.body");
    assert_eq!(state(&ctx, held).await.as_deref(), Some("pending"));
    // Two are purged; the first is restored while retired, the second undeleted.
    due_now(&ctx, &keys[1..], true).await;
    pass(&ctx, LARAVEL, &folder).await;
    settle_queue(&ctx).await;
    for id in &ids[1..] {
        assert!(state(&ctx, *id).await.is_none(), "purged");
    }
    let layout = [("RECONCILE_PREFIXES", LARAVEL.prefixes), ("RECONCILE_KEY_PATTERN", LARAVEL.pattern)];
    let cli = |args: &[&str]| crate::cli::run_with(&url, Some(&ctx), &layout, args);
    let restored = cli(&["restore", &ids[0].to_string(), "--by", "ana"]);
    assert!(restored.status.success(), "{}", String::from_utf8_lossy(&restored.stderr));
    let undeleted = cli(&["undelete", &ids[1].to_string(), "--by", "ana"]);
    assert!(undeleted.status.success(), "{}", String::from_utf8_lossy(&undeleted.stderr));

    // Passes later, discovery has walked them and left them alone: nothing refers to them, as before, and that
    // evidence is what a person overruled.
    for _ in 0..2 {
        let later = pass(&ctx, LARAVEL, &folder).await;
        assert_eq!(later.outcome, lifecycle::runs::RunOutcome::Ok, "{:?}", later.reason);
        settle_queue(&ctx).await;
    }
    assert_eq!(actions(&ctx, ids[0]).await, vec!["adopted", "retire", "restore"]);
    assert_eq!(actions(&ctx, ids[1]).await, vec!["adopted", "retire", "purge", "undelete"]);
    for id in &ids[..2] {
        assert_eq!(state(&ctx, *id).await.as_deref(), Some("attached"));
    }
    let explained = crate::cli::stdout(&cli(&["explain", &ids[0].to_string()]));
    assert!(explained.contains("kept by a person: restored by ana at "), "{explained}");
    let explained = crate::cli::stdout(&cli(&["explain", &ids[1].to_string()]));
    assert!(explained.contains("kept by a person: undeleted by ana at "), "{explained}");

    // The application writes a row naming the third, purged file, as Laravel stores it: below the disk's root.
    sqlx::query("INSERT INTO documents (path) VALUES ('docs/c.pdf')").execute(ctx.pool()).await.expect("a row");
    // The census's next cycle reads it (a cycle ends in one pass, the next begins in the pass after).
    pass_a_cycle_later(&ctx, LARAVEL, &folder).await;
    pass_a_cycle_later(&ctx, LARAVEL, &folder).await;
    let page = cli(&["status"]);
    assert_eq!(page.status.code(), Some(1), "not OK while a removed file is named");
    let text = String::from_utf8_lossy(&page.stdout).into_owned();
    assert!(
        text.contains("1 adopted object(s) were retired or removed and a record names them now")
            && text.contains("files/docs/c.pdf (removed, named by public.documents.path)"),
        "{text}"
    );
    let undeleted = cli(&["undelete", &ids[2].to_string(), "--by", "ana"]);
    assert!(undeleted.status.success(), "{}", String::from_utf8_lossy(&undeleted.stderr));
    let text = String::from_utf8_lossy(&cli(&["status"]).stdout).into_owned();
    assert!(!text.contains("were retired or removed and a record names them"), "{text}");
    assert!(text.contains("kept by a person: 3 asset(s) restored or undeleted"), "{text}");
    assert!(object_exists(&ctx.s3, &ctx.bucket, &keys[2]).await, "its bytes back from the kept version");
}
