//! Reading the bucket: an S3 Inventory report (in S3 or, for a copy of one, on local disk) for a large bucket,
//! `ListObjectsV2` for a small one. Either way the keys go into `reconcile_keys` a batch at a time as they arrive.

use std::io::Read;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use tokio::sync::mpsc;

use super::ingest::{self, Encoder, Ingested};
use super::inventory::columnar::{self, Kind};
use super::inventory::{self, Format, InventoryError, Manifest};
use super::ranged;
use super::{BucketKey, ReconcileError};
use platform::aws::AwsFailure;
use platform::keys::KeyLayout;

/// Keys handed to one `COPY`.
pub const BATCH: usize = 10_000;

/// An inventory report, opened: its manifest checked, its files not yet read.
#[derive(Debug)]
pub struct Report {
    /// Where its manifest is (`s3://bucket/key` or a local path).
    pub location: String,
    /// Its manifest.
    pub manifest: Manifest,
    format: Format,
    store: Store,
}

#[derive(Debug)]
enum Store {
    S3 { client: aws_sdk_s3::Client, bucket: String },
    Local { root: PathBuf },
}

impl Report {
    /// Opens the report whose manifest is at `location`: `s3://bucket/key/manifest.json`, or a path on local disk
    /// (a report copied from S3 with its keys as paths below some folder). It must list `asset_bucket`.
    pub async fn open(s3: &aws_sdk_s3::Client, location: &str, asset_bucket: &str) -> Result<Report, ReconcileError> {
        if let Some(address) = location.strip_prefix("s3://") {
            let (bucket, key) = address.split_once('/').ok_or_else(|| {
                InventoryError::Manifest(format!("{location} names no key: write s3://bucket/path/manifest.json"))
            })?;
            let bytes = get(s3, bucket, key).await?;
            let (manifest, format) = Manifest::parse(&bytes, asset_bucket)?;
            let store = Store::S3 { client: s3.clone(), bucket: bucket.to_owned() };
            return Ok(Report { location: location.to_owned(), manifest, format, store });
        }
        let path = Path::new(location);
        let bytes = std::fs::read(path).map_err(|e| InventoryError::Manifest(format!("{location}: {e}")))?;
        let (manifest, format) = Manifest::parse(&bytes, asset_bucket)?;
        let root = local_root(path, &manifest)?;
        Ok(Report { location: location.to_owned(), manifest, format, store: Store::Local { root } })
    }

    /// When S3 began the scan this report records.
    pub fn taken_at(&self) -> DateTime<Utc> {
        // Checked when the manifest was parsed.
        self.manifest.taken_at().unwrap_or_default()
    }

    /// The bytes of its data files, as its manifest sizes them.
    pub fn data_bytes(&self) -> u64 {
        self.manifest.files.iter().map(|f| f.size).sum()
    }

    /// Whether its files are Parquet or ORC, which a columnar engine reads as S3 wrote them (a CSV report's keys are
    /// URL-encoded, and its columns text).
    pub fn columnar(&self) -> bool {
        matches!(self.format, Format::Columnar(_))
    }

    /// Whether it lists every version (`is_latest`, `is_delete_marker`), not only current objects.
    pub fn versions(&self) -> bool {
        let schema = self.manifest.file_schema.to_ascii_lowercase();
        schema.contains("is_latest") || schema.contains("islatest")
    }

    /// Its data files' addresses, `s3://bucket/key` (none for a copy on local disk).
    pub fn data_files(&self) -> Vec<String> {
        match &self.store {
            Store::S3 { bucket, .. } => {
                self.manifest.files.iter().map(|f| format!("s3://{bucket}/{}", f.key)).collect()
            }
            Store::Local { .. } => Vec::new(),
        }
    }

    /// The folder S3 named for its scan, `YYYY-MM-DDTHH-MMZ`: the one its manifest is in.
    pub fn folder(&self) -> &str {
        self.location.rsplit('/').nth(1).unwrap_or_default()
    }

    /// Streams data file `index` into listing `listing`: decompressed and parsed on a blocking thread while the
    /// batches before are copied, never more than a few batches in memory.
    pub async fn ingest_file(
        &self,
        conn: &mut PgConnection,
        listing: i64,
        layout: &KeyLayout,
        index: usize,
    ) -> Result<Ingested, ReconcileError> {
        let Some(file) = self.manifest.files.get(index) else { return Ok(Ingested::default()) };
        let body = self.body(file).await?;
        // Parsed and encoded on a blocking thread while Postgres takes in the chunks before: one COPY per file.
        let (sender, mut chunks) = mpsc::channel::<(String, Ingested)>(4);
        let (name, owned_layout) = (file.key.clone(), layout.clone());
        let parse = tokio::task::spawn_blocking(move || {
            let mut encoder = Encoder::new(listing, &owned_layout);
            body.read(&name, |batch| {
                for key in &batch {
                    encoder.push(key).map_err(|reason| InventoryError::File { file: name.clone(), reason })?;
                }
                sender.blocking_send(encoder.take()).map_err(|_| InventoryError::File {
                    file: name.clone(),
                    reason: "the database side stopped reading".to_owned(),
                })
            })
        });
        let mut copy = ingest::begin(conn).await?;
        let mut ingested = Ingested::default();
        while let Some((data, counts)) = chunks.recv().await {
            if !data.is_empty() {
                copy.send(data.as_bytes()).await?;
            }
            ingested += counts;
        }
        match parse.await {
            Ok(Ok(_)) => {
                copy.finish().await?;
                Ok(ingested)
            }
            // The reading's own error is the one to report; the aborted COPY fails the caller's transaction.
            Ok(Err(e)) => {
                let _ = copy.abort(e.to_string()).await;
                Err(e.into())
            }
            Err(e) => {
                let reason = e.to_string();
                let _ = copy.abort(reason.clone()).await;
                Err(InventoryError::File { file: file.key.clone(), reason }.into())
            }
        }
    }

    /// Data file `file`, opened as its format reads it: CSV as one stream, Parquet and ORC at any offset.
    async fn body(&self, file: &inventory::ManifestFile) -> Result<Body, ReconcileError> {
        let unreadable = |e: std::io::Error| InventoryError::File { file: file.key.clone(), reason: e.to_string() };
        Ok(match (&self.store, self.format) {
            (Store::S3 { client, bucket }, Format::Csv(columns)) => {
                let out = client
                    .get_object()
                    .bucket(bucket)
                    .key(&file.key)
                    .send()
                    .await
                    .map_err(|e| AwsFailure::from_sdk(format!("GetObject {}", file.key), &e))?;
                Body::Csv(Box::new(tokio_util::io::SyncIoBridge::new(out.body.into_async_read())), columns)
            }
            (Store::S3 { client, bucket }, Format::Columnar(kind)) => {
                let runtime = tokio::runtime::Handle::current();
                let object = ranged::Object::new(client.clone(), bucket, &file.key, file.size, runtime);
                Body::S3(object, kind)
            }
            (Store::Local { root }, format) => {
                let opened = std::fs::File::open(root.join(&file.key)).map_err(unreadable)?;
                match format {
                    Format::Csv(columns) => Body::Csv(Box::new(std::io::BufReader::new(opened)), columns),
                    Format::Columnar(kind) => Body::Local(opened, kind),
                }
            }
        })
    }
}

/// A data file, open.
enum Body {
    Csv(Box<dyn Read + Send>, inventory::csv::Columns),
    S3(ranged::Object, Kind),
    Local(std::fs::File, Kind),
}

impl Body {
    /// Reads the file named `name`, handing its current objects to `batch` a batch at a time.
    fn read(
        self,
        name: &str,
        batch: impl FnMut(Vec<BucketKey>) -> Result<(), InventoryError>,
    ) -> Result<u64, InventoryError> {
        match self {
            Body::Csv(stream, columns) => inventory::csv::read_file(name, stream, columns, BATCH, batch),
            Body::S3(object, kind) => {
                let rows = columnar::read_file(name, kind, object.clone(), BATCH, batch)?;
                tracing::info!(file = name, rows, requests = object.requests(), "inventory file read by ranged GETs");
                Ok(rows)
            }
            Body::Local(file, kind) => columnar::read_file(name, kind, file, BATCH, batch),
        }
    }
}

/// Lists every managed prefix of `bucket` into listing `listing`, a page at a time.
pub async fn ingest_listing(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    conn: &mut PgConnection,
    listing: i64,
    layout: &KeyLayout,
) -> Result<Ingested, ReconcileError> {
    let mut ingested = Ingested::default();
    let prefixes = layout.prefixes();
    for (i, prefix) in prefixes.iter().enumerate() {
        // A prefix inside another is listed with it.
        if prefixes
            .iter()
            .enumerate()
            .any(|(j, outer)| j != i && outer.len() < prefix.len() && prefix.starts_with(outer))
        {
            continue;
        }
        let mut pages = s3.list_objects_v2().bucket(bucket).prefix(*prefix).into_paginator().send();
        let mut batch = Vec::with_capacity(BATCH);
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| AwsFailure::from_sdk(format!("ListObjectsV2 {bucket}/{prefix}"), &e))?;
            for object in page.contents() {
                let (Some(key), Some(modified)) = (object.key(), object.last_modified()) else { continue };
                let last_modified =
                    DateTime::from_timestamp(modified.secs(), modified.subsec_nanos()).unwrap_or_default();
                batch.push(BucketKey { key: key.to_owned(), byte_size: object.size().unwrap_or(0), last_modified });
            }
            if batch.len() >= BATCH {
                ingested += ingest::copy(conn, listing, layout, &std::mem::take(&mut batch)).await?;
            }
        }
        ingested += ingest::copy(conn, listing, layout, &batch).await?;
    }
    Ok(ingested)
}

async fn get(s3: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Result<Vec<u8>, ReconcileError> {
    let operation = || format!("GetObject s3://{bucket}/{key}");
    let out =
        s3.get_object().bucket(bucket).key(key).send().await.map_err(|e| AwsFailure::from_sdk(operation(), &e))?;
    let bytes = out.body.collect().await.map_err(|e| InventoryError::Manifest(format!("{}: {e}", operation())))?;
    Ok(bytes.into_bytes().to_vec())
}

/// The folder a local copy of a report keeps its destination bucket's keys under: the nearest folder above the
/// manifest below which the first data file's key exists.
fn local_root(manifest_path: &Path, manifest: &Manifest) -> Result<PathBuf, InventoryError> {
    let Some(first) = manifest.files.first() else { return Ok(PathBuf::new()) };
    manifest_path.ancestors().skip(1).find(|dir| dir.join(&first.key).is_file()).map(Path::to_path_buf).ok_or_else(
        || {
            InventoryError::Unusable(format!(
                "its data file {} is in no folder above {}",
                first.key,
                manifest_path.display()
            ))
        },
    )
}
