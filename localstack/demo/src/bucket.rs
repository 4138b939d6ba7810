//! The bucket's side of the demo: what reconciliation finds when the bucket and the rows have drifted apart.
//! Planted beside the catalog: bytes no row knows in a "legacy uploads" workspace (written before the application
//! adopted the product: two nothing names, one a page names by URL) and a product image deleted behind its row's
//! back. An inventory report of the asset bucket is written as S3 writes one; an operator's reconciliation of it
//! adopts nothing (the bucket is a prefix no one has approved yet) and is approved; the deployed sweep then reads a
//! newer report, adopts the orphans and claims them with the catalog, and the consumer retires the two no record
//! names.

use std::io::Write as _;

use anyhow::Context;
use chrono::{DateTime, Duration, Utc};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use platform::keys::KeyLayout;
use reconcile::once::{self, Limits, Source};
use serde::Serialize;
use sqlx::{Connection as _, PgPool};
use uuid::Uuid;

/// The demo's keys: a workspace's folder, then the file's path. The whole bucket is managed (`*`).
pub const KEY_PATTERN: &str = r"(?P<workspace>[0-9a-f-]{36})/[^?#\s]+";
/// Where the reports land in the inventory bucket.
pub const INVENTORY_PREFIX: &str = "inventory/";

/// The inventory bucket of stack `stack`: outside the asset bucket, as AWS advises.
pub fn inventory_bucket(stack: &str) -> String {
    format!("{stack}-inventory")
}

/// The template parameters that turn reconciliation on for stack `stack`.
pub fn parameters(stack: &str) -> Vec<(String, String)> {
    vec![
        ("ReconcilePrefixes".into(), "*".into()),
        ("ReconcileKeyPattern".into(), KEY_PATTERN.into()),
        ("ReconcileInventoryBucket".into(), inventory_bucket(stack)),
        ("ReconcileInventoryPrefix".into(), INVENTORY_PREFIX.into()),
    ]
}

/// What was planted.
#[derive(Debug, Clone, Serialize)]
pub struct Planted {
    /// The workspace whose folder holds the orphans.
    pub workspace: Uuid,
    /// Orphans no record names: adopted, then retired (bytes in place until their purge).
    pub unnamed: Vec<String>,
    /// An orphan a page names by URL: adopted, kept, reported.
    pub named: String,
    /// The asset whose bytes were deleted behind its back, and its key.
    pub lost: (Uuid, String),
    /// When the orphans were written, as the report says: longer ago than `ABANDON_AFTER` (7 days), after which a
    /// `pending` asset nothing refers to is deleted.
    pub written_at: DateTime<Utc>,
}

/// Plants the orphans, the page naming one, and the product whose image is deleted behind its row's back.
pub async fn plant(pool: &PgPool, s3: &aws_sdk_s3::Client, bucket: &str) -> anyhow::Result<Planted> {
    let workspace = Uuid::new_v4();
    let unnamed: Vec<String> =
        ["2019-banner.png", "old-logo.svg"].iter().map(|f| format!("{workspace}/{}-{f}", Uuid::new_v4())).collect();
    let named = format!("{workspace}/{}-team-photo.jpg", Uuid::new_v4());
    for key in unnamed.iter().chain([&named]) {
        put(s3, bucket, key, b"bytes written before the application used asset-sweeper").await?;
    }
    sqlx::query(
        "INSERT INTO pages (workspace_id, slug, body)
         VALUES ($1, 'about-us', jsonb_build_object('blocks', jsonb_build_array(
             jsonb_build_object('type', 'image', 'src', 'https://cdn.example.com/' || $2))))",
    )
    .bind(workspace)
    .bind(&named)
    .execute(pool)
    .await
    .context("inserting the page that names an orphan by URL")?;

    let lost_key = format!("{workspace}/{}-product-shot.jpg", Uuid::new_v4());
    put(s3, bucket, &lost_key, b"a product image").await?;
    let mut tx = pool.begin().await?;
    sqlx::query(
        "INSERT INTO asset_sweeper.stored_objects (storage_key, content_hash, byte_size, updated_at)
         VALUES ($1, 'sha256:' || md5($1), 15, now() - interval '3 days')",
    )
    .bind(&lost_key)
    .execute(&mut *tx)
    .await?;
    let lost: Uuid = sqlx::query_scalar(
        "INSERT INTO asset_sweeper.assets (workspace_id, storage_key, content_hash, byte_size, state, created_at,
                                           updated_at)
         VALUES ($1, $2, 'sha256:' || md5($2), 15, 'attached', now() - interval '3 days', now() - interval '3 days')
         RETURNING id",
    )
    .bind(workspace)
    .bind(&lost_key)
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query("INSERT INTO products (workspace_id, name, hero_image) VALUES ($1, 'Legacy lantern', $2)")
        .bind(workspace)
        .bind(lost)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    // Deleted by hand in the console: a delete marker hides the bytes, which a kept version could bring back.
    s3.delete_object().bucket(bucket).key(&lost_key).send().await.context("deleting the product image")?;
    Ok(Planted { workspace, unnamed, named, lost: (lost, lost_key), written_at: Utc::now() - Duration::days(10) })
}

async fn put(s3: &aws_sdk_s3::Client, bucket: &str, key: &str, body: &[u8]) -> anyhow::Result<()> {
    s3.put_object()
        .bucket(bucket)
        .key(key)
        .body(body.to_vec().into())
        .send()
        .await
        .with_context(|| format!("putting s3://{bucket}/{key}"))?;
    Ok(())
}

/// Writes an inventory report of `bucket` into the stack's inventory bucket as S3 does (a gzipped CSV data file
/// and the manifest in a folder named for the scan time `at`), and answers the manifest's `s3://` address. S3
/// reports each object's LastModified; the demo's planted orphans are dated `planted.written_at`, as the rows of
/// the catalog are dated in the past.
pub async fn write_report(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    stack: &str,
    planted: &Planted,
    at: DateTime<Utc>,
) -> anyhow::Result<String> {
    let inventory = inventory_bucket(stack);
    match s3.create_bucket().bucket(&inventory).send().await {
        Ok(_) => {}
        Err(e) if e.as_service_error().is_some_and(|e| e.is_bucket_already_owned_by_you()) => {}
        Err(e) => return Err(e).with_context(|| format!("creating bucket {inventory}")),
    }
    let mut csv = String::new();
    let mut token = None;
    loop {
        let page = s3
            .list_objects_v2()
            .bucket(bucket)
            .set_continuation_token(token)
            .send()
            .await
            .with_context(|| format!("listing s3://{bucket}"))?;
        for object in page.contents() {
            let key = object.key().unwrap_or_default();
            let planted_orphan = planted.unnamed.iter().any(|k| k == key) || planted.named == key;
            let modified = match object.last_modified().and_then(|t| DateTime::from_timestamp(t.secs(), 0)) {
                Some(_) if planted_orphan => planted.written_at,
                Some(t) => t,
                None => at,
            };
            csv.push_str(&format!(
                "\"{bucket}\",\"{}\",\"{}\",\"{}\"\n",
                utf8_percent_encode(key, NON_ALPHANUMERIC),
                object.size().unwrap_or(0),
                modified.format("%Y-%m-%dT%H:%M:%S%.3fZ"),
            ));
        }
        token = page.next_continuation_token().map(str::to_owned);
        if token.is_none() {
            break;
        }
    }
    let stamp = at.format("%Y-%m-%dT%H-%MZ");
    let data_key = format!("{INVENTORY_PREFIX}data/{stamp}.csv.gz");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(csv.as_bytes())?;
    let data = gz.finish()?;
    let size = data.len();
    put(s3, &inventory, &data_key, &data).await?;
    let manifest = serde_json::json!({
        "sourceBucket": bucket,
        "destinationBucket": format!("arn:aws:s3:::{inventory}"),
        "version": "2016-11-30",
        "creationTimestamp": at.timestamp_millis().to_string(),
        "fileFormat": "CSV",
        "fileSchema": "Bucket, Key, Size, LastModifiedDate",
        "files": [{ "key": data_key, "size": size, "MD5checksum": "not checked" }],
    });
    let manifest_key = format!("{INVENTORY_PREFIX}{stamp}/manifest.json");
    put(s3, &inventory, &manifest_key, manifest.to_string().as_bytes()).await?;
    Ok(format!("s3://{inventory}/{manifest_key}"))
}

/// What the operator's reconciliation found before anything was approved.
#[derive(Debug, Clone, Serialize)]
pub struct FirstLook {
    /// Keys no row knows, and their bytes.
    pub unknown_keys: i64,
    /// Their bytes.
    pub unknown_bytes: i64,
    /// Prefixes waiting for approval (`""`: the whole bucket).
    pub awaiting_approval: Vec<String>,
    /// Keys adopted by it: none, before the approval.
    pub adopted: i64,
    /// Assets it found lost.
    pub lost: Vec<Uuid>,
}

/// What `asset-sweeper reconcile --inventory <manifest>` does, recorded: read, compare, adopt (nothing, before
/// the approval), record. Then what `asset-sweeper approve --prefix '*'` records, as the operator who read it.
pub async fn reconcile_and_approve(
    pool: &PgPool,
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    manifest: &str,
) -> anyhow::Result<FirstLook> {
    let layout = KeyLayout::new("*", KEY_PATTERN)?;
    let limits = Limits {
        grace: std::time::Duration::from_secs(24 * 3600),
        confirm: 1_000,
        adopt_max: 100_000,
        tolerance: platform::approval::Tolerance(10),
    };
    let mut conn = crate::sweeper_session(pool).await?;
    let mut tx = conn.begin().await?;
    let (listing, _, findings) =
        once::reconcile(&mut tx, s3, bucket, &layout, Source::Inventory(manifest), limits).await?;
    reconcile::record(&mut tx, listing, &findings).await?;
    tx.commit().await?;
    conn.close().await?;
    sqlx::query(
        "UPDATE asset_sweeper_private.reconcile_prefixes
            SET approved_at = now(), approved_by = 'the demo', reason = 'read the first report',
                approved_until = now() + interval '1 day', approved_keys = reported_keys, approved_bytes = 0
          WHERE prefix = ''",
    )
    .execute(pool)
    .await?;
    let (unknown_keys, unknown_bytes) = findings.unknown_totals();
    Ok(FirstLook {
        unknown_keys,
        unknown_bytes,
        awaiting_approval: findings.awaiting_approval.clone(),
        adopted: findings.adopted_totals().0,
        lost: findings.lost.iter().map(|l| l.asset.asset_id).collect(),
    })
}

/// What became of one planted orphan.
#[derive(Debug, Clone, Serialize)]
pub struct Orphan {
    /// Its key.
    pub key: String,
    /// Whether a record names it (the demo planted a page naming it).
    pub named: bool,
    /// The asset adoption gave it.
    pub asset: Option<Uuid>,
    /// The last settle's action about it.
    pub action: Option<String>,
    /// For a kept one: the column the consumer found naming it.
    pub named_by: Option<String>,
    /// Whether its bytes are still in the bucket.
    pub bytes_present: bool,
}

/// What reconciliation did with what was planted.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// The operator's first look, before the approval.
    pub first: FirstLook,
    /// The orphans.
    pub orphans: Vec<Orphan>,
    /// The product image deleted behind its row's back: recorded lost, with the version that could restore it.
    pub lost_recorded: bool,
    /// That version.
    pub restorable_version: Option<String>,
    /// Whether its row (and the record using it) is still there: lost bytes are reported, never acted on.
    pub lost_row_kept: bool,
}

impl Outcome {
    /// Reads what became of `planted`.
    pub async fn gather(
        pool: &PgPool,
        s3: &aws_sdk_s3::Client,
        bucket: &str,
        planted: &Planted,
        first: FirstLook,
    ) -> anyhow::Result<Self> {
        let mut orphans = Vec::new();
        let named = std::iter::once((&planted.named, true));
        for (key, named) in planted.unnamed.iter().map(|k| (k, false)).chain(named) {
            let row: Option<(Uuid, Option<String>, Option<serde_json::Value>)> = sqlx::query_as(
                "SELECT d.asset_id, e.action, e.evidence FROM asset_sweeper_private.adopted_assets d
                   LEFT JOIN LATERAL (SELECT action, evidence FROM asset_sweeper_private.settlement_events
                                       WHERE asset_id = d.asset_id AND action <> 'adopted'
                                       ORDER BY id DESC LIMIT 1) e ON true
                  WHERE d.storage_key = $1",
            )
            .bind(key)
            .fetch_optional(pool)
            .await?;
            let bytes_present = crate::report::object_exists(s3, bucket, key).await?;
            let (asset, action, evidence) = row.map_or((None, None, None), |(a, b, c)| (Some(a), b, c));
            let named_by = evidence.and_then(|e| e["deferred"]["named_by"].as_str().map(str::to_owned));
            orphans.push(Orphan { key: key.clone(), named, asset, action, named_by, bytes_present });
        }
        let lost: Option<Option<String>> =
            sqlx::query_scalar("SELECT restorable_version FROM asset_sweeper_private.lost_assets WHERE asset_id = $1")
                .bind(planted.lost.0)
                .fetch_optional(pool)
                .await?;
        let lost_row_kept: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM asset_sweeper.assets a JOIN products p ON p.hero_image = a.id
                             WHERE a.id = $1)",
        )
        .bind(planted.lost.0)
        .fetch_one(pool)
        .await?;
        Ok(Outcome { first, orphans, lost_recorded: lost.is_some(), restorable_version: lost.flatten(), lost_row_kept })
    }

    /// Everything that did not happen as it should, one line each.
    pub fn surprises(&self) -> Vec<String> {
        let mut found = Vec::new();
        if self.first.adopted != 0 || self.first.awaiting_approval != [String::new()] {
            found.push(format!(
                "the first reconciliation adopted {} key(s) and left {:?} awaiting approval: expected none, and the \
                 whole bucket",
                self.first.adopted, self.first.awaiting_approval
            ));
        }
        for o in &self.orphans {
            let (action, bytes, column) =
                if o.named { ("defer", true, Some("public.pages.body")) } else { ("retire", true, None) };
            if o.asset.is_none()
                || o.action.as_deref() != Some(action)
                || o.bytes_present != bytes
                || o.named_by.as_deref() != column
            {
                found.push(format!(
                    "orphan {}: adopted as {:?}, last action {:?}, named by {:?}, bytes present {}; expected {action}{}",
                    o.key,
                    o.asset,
                    o.action,
                    o.named_by,
                    o.bytes_present,
                    if o.named { " (kept: a page names it)" } else { " (retired: bytes in place until its purge)" }
                ));
            }
        }
        if !self.lost_recorded || self.restorable_version.is_none() || !self.lost_row_kept {
            found.push(format!(
                "the product image deleted behind its row's back: recorded lost {}, restorable version {:?}, row kept \
                 {}; expected lost, restorable, kept",
                self.lost_recorded, self.restorable_version, self.lost_row_kept
            ));
        }
        found
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "Reconciliation (the bucket against the rows)")?;
        writeln!(
            f,
            "  first look, before approval: {} key(s), {} no row knows; {} adopted; awaiting approval: {}",
            self.first.unknown_keys,
            crate::report::size(self.first.unknown_bytes),
            self.first.adopted,
            if self.first.awaiting_approval == [String::new()] {
                "the whole bucket".to_owned()
            } else {
                format!("{:?}", self.first.awaiting_approval)
            }
        )?;
        for o in &self.orphans {
            let what = match (o.bytes_present, &o.named_by, o.action.as_deref()) {
                (false, _, _) => "adopted, then removed by the consumer: nothing named it".to_owned(),
                (true, Some(column), _) => format!("adopted and kept: named by {column} but without an asset row"),
                (true, None, Some("retire")) => {
                    "adopted, then retired by the consumer: nothing named it; bytes in place, restorable until its \
                     purge"
                        .to_owned()
                }
                (true, None, _) => "adopted, still waiting".to_owned(),
            };
            writeln!(f, "  {}  {what}", o.key)?;
        }
        writeln!(
            f,
            "  lost: {} (row kept: {}; a kept version can restore it: {})",
            if self.lost_recorded { "reported" } else { "NOT reported" },
            self.lost_row_kept,
            self.restorable_version.as_deref().unwrap_or("none")
        )
    }
}

/// Waits until every planted orphan's adopted asset has a settle decision.
pub async fn wait_until_settled(
    pool: &PgPool,
    planted: &Planted,
    timeout: std::time::Duration,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<()> {
    let keys: Vec<String> = planted.unnamed.iter().chain([&planted.named]).cloned().collect();
    let started = std::time::Instant::now();
    loop {
        let settled: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM asset_sweeper_private.adopted_assets d
              WHERE d.storage_key = ANY ($1)
                AND EXISTS (SELECT 1 FROM asset_sweeper_private.settlement_events e
                             WHERE e.asset_id = d.asset_id AND e.action IN ('retire', 'delete', 'defer', 'keep', 'failed'))",
        )
        .bind(&keys)
        .fetch_one(pool)
        .await?;
        if settled >= i64::try_from(keys.len()).unwrap_or(i64::MAX) {
            return Ok(());
        }
        if started.elapsed() > timeout {
            anyhow::bail!("after {timeout:?}, {settled} of the {} adopted orphans were settled", keys.len());
        }
        progress(&format!("    adopted orphans settled: {settled} of {}", keys.len()));
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    }
}
