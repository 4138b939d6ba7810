//! S3 Inventory reports, as S3 writes them: a `manifest.json` naming gzipped CSV files without a header row, whose
//! columns the manifest's `fileSchema` lists, with each key URL-encoded. Read as a stream: a file is decoded and
//! parsed as it arrives, in bounded batches, so a report of a billion keys never sits in memory.

use std::io::Read;

use chrono::{DateTime, Utc};
use flate2::read::MultiGzDecoder;
use serde::Deserialize;

use super::BucketKey;

/// The manifest of one inventory report.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// The bucket the report lists.
    pub source_bucket: String,
    /// When S3 began scanning the bucket, in milliseconds since the epoch (S3 writes it as a string).
    pub creation_timestamp: String,
    /// `CSV`, `ORC` or `Parquet`; only CSV is read.
    pub file_format: String,
    /// The CSV columns, comma-separated.
    pub file_schema: String,
    /// The data files, keys in the destination bucket.
    pub files: Vec<ManifestFile>,
}

/// One data file of a report.
#[derive(Debug, Clone, Deserialize)]
pub struct ManifestFile {
    /// Its key in the destination bucket.
    pub key: String,
    /// Its size in bytes, compressed.
    pub size: u64,
}

/// Where in a row each column this product reads is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Columns {
    key: usize,
    size: usize,
    last_modified: usize,
    is_latest: Option<usize>,
    is_delete_marker: Option<usize>,
}

/// What is wrong with a report.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    /// The manifest is not an inventory manifest.
    #[error("the inventory manifest cannot be read: {0}")]
    Manifest(String),
    /// The report is of something this product cannot use.
    #[error("the inventory report cannot be used: {0}")]
    Unusable(String),
    /// A data file holds a row that is not what its schema says.
    #[error("inventory file {file}, row {row}: {reason}")]
    Row {
        /// The data file's key.
        file: String,
        /// The row, from 1.
        row: u64,
        /// What is wrong.
        reason: String,
    },
    /// A data file could not be read or decompressed.
    #[error("inventory file {file} cannot be read: {reason}")]
    File {
        /// The data file's key.
        file: String,
        /// What failed.
        reason: String,
    },
}

impl Manifest {
    /// Parses `bytes` and checks the report is one this product can read, of `bucket`.
    pub fn parse(bytes: &[u8], bucket: &str) -> Result<(Manifest, Columns), InventoryError> {
        let manifest: Manifest = serde_json::from_slice(bytes).map_err(|e| InventoryError::Manifest(e.to_string()))?;
        if manifest.source_bucket != bucket {
            return Err(InventoryError::Unusable(format!(
                "it lists bucket {:?}, not the asset bucket {bucket:?}",
                manifest.source_bucket
            )));
        }
        if !manifest.file_format.eq_ignore_ascii_case("csv") {
            return Err(InventoryError::Unusable(format!(
                "its format is {}; configure the inventory to write CSV",
                manifest.file_format
            )));
        }
        manifest.taken_at()?;
        let columns = Columns::of(&manifest.file_schema)?;
        Ok((manifest, columns))
    }

    /// When S3 began scanning: nothing written later can be expected in the report.
    pub fn taken_at(&self) -> Result<DateTime<Utc>, InventoryError> {
        self.creation_timestamp.trim().parse::<i64>().ok().and_then(DateTime::from_timestamp_millis).ok_or_else(|| {
            InventoryError::Manifest(format!("creationTimestamp {:?} is not a time", self.creation_timestamp))
        })
    }
}

impl Columns {
    /// The positions of the columns read, from a `fileSchema` such as `Bucket, Key, Size, LastModifiedDate`.
    pub fn of(schema: &str) -> Result<Columns, InventoryError> {
        let names: Vec<&str> = schema.split(',').map(str::trim).collect();
        let at = |name: &str| names.iter().position(|n| n.eq_ignore_ascii_case(name));
        let required = |name: &str| {
            at(name).ok_or_else(|| {
                InventoryError::Unusable(format!(
                    "its schema ({schema}) has no {name} field; add Size and Last modified to the inventory's fields"
                ))
            })
        };
        Ok(Columns {
            key: required("Key")?,
            size: required("Size")?,
            last_modified: required("LastModifiedDate")?,
            is_latest: at("IsLatest"),
            is_delete_marker: at("IsDeleteMarker"),
        })
    }
}

/// Reads the gzipped CSV data file `file` from `body`, handing the current objects it lists to `batch`,
/// `batch_size` at a time (noncurrent versions and delete markers, in a report of all versions, are skipped).
/// Returns the number of rows read.
pub fn read_file(
    file: &str,
    body: impl Read,
    columns: Columns,
    batch_size: usize,
    mut batch: impl FnMut(Vec<BucketKey>) -> Result<(), InventoryError>,
) -> Result<u64, InventoryError> {
    let mut reader = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(MultiGzDecoder::new(body));
    let mut record = csv::StringRecord::new();
    let mut rows = 0;
    let mut keys = Vec::with_capacity(batch_size);
    loop {
        match reader.read_record(&mut record) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) if matches!(e.kind(), csv::ErrorKind::Io(_)) => {
                return Err(InventoryError::File { file: file.to_owned(), reason: e.to_string() });
            }
            Err(e) => return Err(InventoryError::Row { file: file.to_owned(), row: rows + 1, reason: e.to_string() }),
        }
        rows += 1;
        let row_error = |reason: String| InventoryError::Row { file: file.to_owned(), row: rows, reason };
        if let Some(key) = current(&record, columns).map_err(row_error)? {
            keys.push(key);
            if keys.len() == batch_size {
                batch(std::mem::replace(&mut keys, Vec::with_capacity(batch_size)))?;
            }
        }
    }
    if !keys.is_empty() {
        batch(keys)?;
    }
    Ok(rows)
}

/// The object a row lists, or `None` for a noncurrent version or a delete marker.
fn current(record: &csv::StringRecord, columns: Columns) -> Result<Option<BucketKey>, String> {
    let field = |at: usize| record.get(at).ok_or_else(|| format!("has {} fields, fewer than its schema", record.len()));
    let flag = |at: Option<usize>| -> Result<bool, String> {
        at.map_or(Ok(false), |at| field(at).map(|v| v.eq_ignore_ascii_case("true")))
    };
    if columns.is_latest.is_some() && !flag(columns.is_latest)? || flag(columns.is_delete_marker)? {
        return Ok(None);
    }
    let encoded = field(columns.key)?;
    let key = decode_key(encoded).ok_or_else(|| format!("key {encoded:?} is not URL-encoded UTF-8"))?;
    let size = field(columns.size)?;
    let byte_size = size.parse::<i64>().map_err(|_| format!("size {size:?} of {key:?} is not a number"))?;
    let modified = field(columns.last_modified)?;
    let last_modified = DateTime::parse_from_rfc3339(modified)
        .map_err(|_| format!("last modified date {modified:?} of {key:?} is not a time"))?
        .with_timezone(&Utc);
    Ok(Some(BucketKey { key, byte_size, last_modified }))
}

/// Inventory keys are form-URL-encoded: a space is `+`, and a `+` in a key is `%2B`.
fn decode_key(encoded: &str) -> Option<String> {
    let spaced = encoded.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced).decode_utf8().ok().map(std::borrow::Cow::into_owned)
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    fn gzipped(text: &str) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(text.as_bytes()).expect("gzip");
        encoder.finish().expect("gzip")
    }

    const MANIFEST: &str = r#"{
        "sourceBucket": "assets",
        "destinationBucket": "arn:aws:s3:::inventory",
        "version": "2016-11-30",
        "creationTimestamp": "1764547200000",
        "fileFormat": "CSV",
        "fileSchema": "Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate, ETag",
        "files": [{ "key": "inv/assets/all/data/a.csv.gz", "size": 120, "MD5checksum": "00" }]
    }"#;

    #[test]
    fn a_report_of_all_versions_yields_the_current_objects_with_their_keys_decoded() {
        let (manifest, columns) = Manifest::parse(MANIFEST.as_bytes(), "assets").expect("a manifest");
        assert_eq!(manifest.taken_at().expect("a time").to_rfc3339(), "2025-12-01T00:00:00+00:00");
        let rows = "\"assets\",\"ws/a+b%2Bc%C3%BC.png\",\"v2\",\"true\",\"false\",\"12\",\"2025-11-01T10:00:00.000Z\",\"e\"\n\
                    \"assets\",\"ws/old.png\",\"v1\",\"false\",\"false\",\"9\",\"2025-10-01T10:00:00.000Z\",\"e\"\n\
                    \"assets\",\"ws/gone.png\",\"v3\",\"true\",\"true\",\"\",\"2025-10-02T10:00:00.000Z\",\"\"\n";
        let mut seen = Vec::new();
        let read = read_file("a.csv.gz", &gzipped(rows)[..], columns, 1, |b| {
            seen.extend(b);
            Ok(())
        })
        .expect("rows");
        assert_eq!(read, 3);
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].key, "ws/a b+cü.png");
        assert_eq!(seen[0].byte_size, 12);
        assert_eq!(seen[0].last_modified.to_rfc3339(), "2025-11-01T10:00:00+00:00");
    }

    #[test]
    fn a_report_this_product_cannot_read_is_refused_by_name() {
        let other = Manifest::parse(MANIFEST.as_bytes(), "photos").expect_err("another bucket");
        assert!(other.to_string().contains("lists bucket \"assets\", not the asset bucket \"photos\""), "{other}");
        let orc = MANIFEST.replace("\"CSV\"", "\"ORC\"");
        let e = Manifest::parse(orc.as_bytes(), "assets").expect_err("ORC");
        assert!(e.to_string().contains("configure the inventory to write CSV"), "{e}");
        let sizeless = MANIFEST.replace(" Size,", "");
        let e = Manifest::parse(sizeless.as_bytes(), "assets").expect_err("no size");
        assert!(e.to_string().contains("has no Size field"), "{e}");
        let (_, columns) = Manifest::parse(MANIFEST.as_bytes(), "assets").expect("a manifest");
        let bad = "\"assets\",\"ws/x.png\",\"v\",\"true\",\"false\",\"many\",\"2025-11-01T10:00:00.000Z\",\"e\"\n";
        let e = read_file("f.csv.gz", &gzipped(bad)[..], columns, 10, |_| Ok(())).expect_err("a bad size");
        assert_eq!(e.to_string(), "inventory file f.csv.gz, row 1: size \"many\" of \"ws/x.png\" is not a number");
        let e = read_file("f.csv.gz", &gzipped(bad)[..20], columns, 10, |_| Ok(())).expect_err("truncated");
        assert!(e.to_string().starts_with("inventory file f.csv.gz cannot be read"), "{e}");
    }
}
