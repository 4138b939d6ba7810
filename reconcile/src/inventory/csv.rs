//! Gzipped CSV data files: no header row, the columns the manifest's `fileSchema` lists, every field quoted, each key
//! URL-encoded. Decompressed and parsed as the bytes arrive.

use std::io::Read;

use chrono::{DateTime, Utc};
use flate2::read::MultiGzDecoder;

use super::InventoryError;
use crate::BucketKey;

/// Where in a row each column this product reads is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Columns {
    key: usize,
    size: usize,
    last_modified: usize,
    is_latest: Option<usize>,
    is_delete_marker: Option<usize>,
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
    let mut reader =
        ::csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(MultiGzDecoder::new(body));
    let mut record = ::csv::StringRecord::new();
    let mut rows = 0;
    let mut keys = Vec::with_capacity(batch_size);
    loop {
        match reader.read_record(&mut record) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) if matches!(e.kind(), ::csv::ErrorKind::Io(_)) => {
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
fn current(record: &::csv::StringRecord, columns: Columns) -> Result<Option<BucketKey>, String> {
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

    fn columns() -> Columns {
        Columns::of("Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate, ETag").expect("columns")
    }

    #[test]
    fn a_report_of_all_versions_yields_the_current_objects_with_their_keys_decoded() {
        let columns = columns();
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
        let e = Columns::of("Bucket, Key, VersionId, LastModifiedDate").expect_err("no size");
        assert!(e.to_string().contains("has no Size field"), "{e}");
        let columns = columns();
        let bad = "\"assets\",\"ws/x.png\",\"v\",\"true\",\"false\",\"many\",\"2025-11-01T10:00:00.000Z\",\"e\"\n";
        let e = read_file("f.csv.gz", &gzipped(bad)[..], columns, 10, |_| Ok(())).expect_err("a bad size");
        assert_eq!(e.to_string(), "inventory file f.csv.gz, row 1: size \"many\" of \"ws/x.png\" is not a number");
        let e = read_file("f.csv.gz", &gzipped(bad)[..20], columns, 10, |_| Ok(())).expect_err("truncated");
        assert!(e.to_string().starts_with("inventory file f.csv.gz cannot be read"), "{e}");
    }
}
