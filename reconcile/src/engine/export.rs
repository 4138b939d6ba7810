//! The keys the product's rows know, exported for an engine outside the database: one row per stored object under
//! the managed prefixes, written to S3 as Parquet files of at most [`ROWS_PER_FILE`] rows, in key order, a file at a
//! time. Each file ends at a key; the next begins after it, so an export interrupted between files (a pass's share
//! spent, a function's deadline) resumes from the last key written, and memory holds one file.
//!
//! The columns are what the comparison needs and nothing the application wrote beyond the key: the key and its
//! size; the managed prefix and whether the key is off the pattern, as this product's key layout classifies it (the
//! pattern is a Rust expression, which no other engine's regular expressions are sure to read alike); since when
//! the bytes are due (the earliest creation of an asset in use or restorable on the key), and whether the key was
//! found lost, so the engine can tell which missing keys matter.

use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, Int64Builder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use sqlx::PgConnection;

use crate::ReconcileError;
use platform::aws::AwsFailure;
use platform::keys::{KeyClass, KeyLayout};
use platform::location::InventoryLocation;

/// Rows per file: a file is built in memory before it is put (tens of MB at most).
pub const ROWS_PER_FILE: usize = 1_000_000;
/// Rows read from the database at once.
const BATCH: i64 = 50_000;

/// The export's columns, as the comparison and the export's Athena table name them.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("storage_key", DataType::Utf8, false),
        Field::new("byte_size", DataType::Int64, false),
        Field::new("prefix", DataType::Utf8, false),
        Field::new("off_pattern", DataType::Boolean, false),
        Field::new("due_since_ms", DataType::Int64, true),
        Field::new("found_lost", DataType::Boolean, false),
    ]))
}

/// Where one listing's export goes: `<location>listing=<id>/`, the partition the export's table reads.
pub fn folder(location: &InventoryLocation, listing: i64) -> String {
    format!("{}listing={listing}/", location.prefix)
}

/// One file written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// Its key in the export's bucket.
    pub key: String,
    /// The last key it read (written or passed over): the next file begins after it.
    pub last_key: Option<String>,
    /// Rows written.
    pub rows: u64,
    /// Its size.
    pub bytes: u64,
    /// Whether it was the last: every stored object has been read.
    pub done: bool,
}

/// One listing's export: where it goes, and which keys are ours.
#[derive(Debug, Clone, Copy)]
pub struct Export<'a> {
    /// The client of the export's bucket.
    pub s3: &'a aws_sdk_s3::Client,
    /// The export table's location: each listing's files go under their own `listing=<id>/`.
    pub location: &'a InventoryLocation,
    /// Which keys are ours, and how each is classified.
    pub layout: &'a KeyLayout,
    /// The listing.
    pub listing: i64,
}

impl Export<'_> {
    /// Writes file `number`: the stored objects after `after` (from the first, with none), up to `per_file` of them
    /// under the managed prefixes.
    pub async fn write_file(
        &self,
        conn: &mut PgConnection,
        number: u32,
        after: Option<&str>,
        per_file: usize,
    ) -> Result<Written, ReconcileError> {
        let Export { s3, location, layout, listing } = *self;
        let failed = |e: parquet::errors::ParquetError| ReconcileError::Export(e.to_string());
        let properties = WriterProperties::builder().set_compression(Compression::SNAPPY).build();
        let mut writer = ArrowWriter::try_new(Vec::new(), schema(), Some(properties)).map_err(failed)?;
        let mut last_key = after.map(str::to_owned);
        let mut rows = 0u64;
        let done = loop {
            let limit = BATCH.min(i64::try_from(per_file as u64 - rows).unwrap_or(BATCH));
            let batch = sqlx::query!(
                r#"SELECT o.storage_key, o.byte_size,
                      (SELECT floor(extract(epoch FROM min(a.created_at)) * 1000)::bigint FROM assets a
                        WHERE a.storage_key = o.storage_key AND a.state IN ('attached', 'released', 'retired'))
                        AS due_since_ms,
                      o.storage_key IN (SELECT l.storage_key FROM lost_assets l) AS "found_lost!"
                 FROM stored_objects o
                WHERE o.storage_key > coalesce($1, '')
                ORDER BY o.storage_key
                LIMIT $2"#,
                last_key.as_deref(),
                limit,
            )
            .fetch_all(&mut *conn)
            .await?;
            let read = batch.len();
            let mut keys = StringBuilder::new();
            let mut sizes = Int64Builder::new();
            let mut prefixes = StringBuilder::new();
            let mut off = BooleanBuilder::new();
            let mut due = Int64Builder::new();
            let mut lost = BooleanBuilder::new();
            for row in &batch {
                let (prefix, off_pattern) = match layout.classify(&row.storage_key) {
                    KeyClass::Outside => continue,
                    KeyClass::Ours { prefix, .. } => (prefix, false),
                    KeyClass::OffPattern { prefix } => (prefix, true),
                };
                keys.append_value(&row.storage_key);
                sizes.append_value(row.byte_size);
                prefixes.append_value(prefix);
                off.append_value(off_pattern);
                due.append_option(row.due_since_ms);
                lost.append_value(row.found_lost);
            }
            let columns: Vec<ArrayRef> = vec![
                Arc::new(keys.finish()),
                Arc::new(sizes.finish()),
                Arc::new(prefixes.finish()),
                Arc::new(off.finish()),
                Arc::new(due.finish()),
                Arc::new(lost.finish()),
            ];
            let batch_rows =
                RecordBatch::try_new(schema(), columns).map_err(|e| ReconcileError::Export(e.to_string()))?;
            rows += batch_rows.num_rows() as u64;
            writer.write(&batch_rows).map_err(failed)?;
            if let Some(row) = batch.last() {
                last_key = Some(row.storage_key.clone());
            }
            if read < usize::try_from(limit).unwrap_or(usize::MAX) {
                break true;
            }
            if rows >= per_file as u64 {
                break false;
            }
        };
        let key = format!("{}part-{number:05}.parquet", folder(location, listing));
        // Written even with no rows: a file of this number an interrupted attempt wrote must not keep its rows.
        let body = writer.into_inner().map_err(failed)?;
        let bytes = body.len() as u64;
        s3.put_object()
            .bucket(&location.bucket)
            .key(&key)
            .body(body.into())
            .send()
            .await
            .map_err(|e| AwsFailure::from_sdk(format!("PutObject s3://{}/{key}", location.bucket), &e))?;
        Ok(Written { key, last_key, rows, bytes, done })
    }
}
