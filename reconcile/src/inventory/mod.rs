//! S3 Inventory reports, as S3 writes them: a `manifest.json` naming the data files of one scan, in the format the
//! inventory was configured to write. Each is read as a stream, a bounded batch of keys at a time, so a report of a
//! billion keys never sits in memory:
//! - [`csv`]: gzipped CSV without a header row, its columns as the manifest's `fileSchema` lists, keys URL-encoded;
//! - [`columnar`]: Apache Parquet and Apache ORC, self-describing, their columns found by name, keys as written.

pub mod columnar;
pub mod csv;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use columnar::Kind;

/// The manifest of one inventory report.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// The bucket the report lists.
    pub source_bucket: String,
    /// When S3 began scanning the bucket, in milliseconds since the epoch (S3 writes it as a string).
    pub creation_timestamp: String,
    /// `CSV`, `ORC` or `Parquet`.
    pub file_format: String,
    /// The columns: comma-separated names for CSV, an ORC `struct<name:type,…>`, a Parquet `message … { … }`.
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

/// How a report's data files are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Gzipped CSV, with each column this product reads at its position.
    Csv(csv::Columns),
    /// Parquet or ORC.
    Columnar(Kind),
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
    pub fn parse(bytes: &[u8], bucket: &str) -> Result<(Manifest, Format), InventoryError> {
        let manifest: Manifest = serde_json::from_slice(bytes).map_err(|e| InventoryError::Manifest(e.to_string()))?;
        if manifest.source_bucket != bucket {
            return Err(InventoryError::Unusable(format!(
                "it lists bucket {:?}, not the asset bucket {bucket:?}",
                manifest.source_bucket
            )));
        }
        manifest.taken_at()?;
        let format = match manifest.file_format.to_ascii_lowercase().as_str() {
            "csv" => Format::Csv(csv::Columns::of(&manifest.file_schema)?),
            "parquet" => Format::Columnar(Kind::Parquet.checked(&manifest.file_schema)?),
            "orc" => Format::Columnar(Kind::Orc.checked(&manifest.file_schema)?),
            other => {
                return Err(InventoryError::Unusable(format!(
                    "its format is {other:?}; S3 Inventory writes CSV, ORC or Parquet, and this product reads each"
                )));
            }
        };
        Ok((manifest, format))
    }

    /// When S3 began scanning: nothing written later can be expected in the report.
    pub fn taken_at(&self) -> Result<DateTime<Utc>, InventoryError> {
        self.creation_timestamp.trim().parse::<i64>().ok().and_then(DateTime::from_timestamp_millis).ok_or_else(|| {
            InventoryError::Manifest(format!("creationTimestamp {:?} is not a time", self.creation_timestamp))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) const MANIFEST: &str = r#"{
        "sourceBucket": "assets",
        "destinationBucket": "arn:aws:s3:::inventory",
        "version": "2016-11-30",
        "creationTimestamp": "1764547200000",
        "fileFormat": "CSV",
        "fileSchema": "Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate, ETag",
        "files": [{ "key": "inv/assets/all/data/a.csv.gz", "size": 120, "MD5checksum": "00" }]
    }"#;

    #[test]
    fn a_report_is_of_the_asset_bucket_in_a_format_s3_writes() {
        let (manifest, format) = Manifest::parse(MANIFEST.as_bytes(), "assets").expect("a manifest");
        assert_eq!(manifest.taken_at().expect("a time").to_rfc3339(), "2025-12-01T00:00:00+00:00");
        assert!(matches!(format, Format::Csv(_)), "{format:?}");
        let other = Manifest::parse(MANIFEST.as_bytes(), "photos").expect_err("another bucket");
        assert!(other.to_string().contains("lists bucket \"assets\", not the asset bucket \"photos\""), "{other}");
        let avro = MANIFEST.replace("\"CSV\"", "\"Avro\"");
        let e = Manifest::parse(avro.as_bytes(), "assets").expect_err("Avro");
        assert!(e.to_string().contains("its format is \"avro\"; S3 Inventory writes CSV, ORC or Parquet"), "{e}");
        let timeless = MANIFEST.replace("1764547200000", "yesterday");
        let e = Manifest::parse(timeless.as_bytes(), "assets").expect_err("no time");
        assert!(e.to_string().contains("creationTimestamp \"yesterday\" is not a time"), "{e}");
    }
}
