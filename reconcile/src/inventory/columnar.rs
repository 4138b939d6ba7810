//! Parquet and ORC data files, as S3 Inventory writes them (Parquet with Snappy, ORC with ZLIB): self-describing,
//! so each column this product reads is found by its name in the file's own schema, and a key is written as it is
//! (not URL-encoded as in CSV). Both are decoded into Arrow record batches of a bounded number of rows.
//!
//! Both formats keep their index at the end of the file (Parquet's footer, ORC's postscript), so a file is read by
//! offset, not front to back: from S3 by ranged GETs ([`crate::ranged`]), from disk as a file. Only the columns read
//! are fetched. In memory at once: one batch of rows, and for Parquet the pages being decoded, for ORC the streams
//! of the columns read of one stripe.

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, TimestampMillisecondType};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{ArrowError, DataType, TimeUnit};
use chrono::DateTime;

use super::InventoryError;
use crate::BucketKey;

/// The columns read, as S3 names them in both formats.
const KEY: &str = "key";
const SIZE: &str = "size";
const LAST_MODIFIED: &str = "last_modified_date";
/// In a report of all versions only.
const IS_LATEST: &str = "is_latest";
const IS_DELETE_MARKER: &str = "is_delete_marker";

/// Which of the two formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Apache Parquet.
    Parquet,
    /// Apache ORC.
    Orc,
}

/// A data file to read at any offset: an object in S3 or a file on disk.
pub trait Source: parquet::file::reader::ChunkReader + orc_rust::reader::ChunkReader + Send + Sync + 'static {}

impl<T> Source for T where T: parquet::file::reader::ChunkReader + orc_rust::reader::ChunkReader + Send + Sync + 'static {}

impl Kind {
    /// `self`, once the manifest's `fileSchema` is seen to hold the columns read.
    pub(crate) fn checked(self, schema: &str) -> Result<Kind, InventoryError> {
        let names = self.field_names(schema);
        for required in [KEY, SIZE, LAST_MODIFIED] {
            if !names.iter().any(|n| n.eq_ignore_ascii_case(required)) {
                return Err(InventoryError::Unusable(format!(
                    "its schema ({schema}) has no {required} field; add Size and Last modified to the inventory's fields"
                )));
            }
        }
        Ok(self)
    }

    /// The top-level field names of a `fileSchema`: ORC's `struct<bucket:string,key:string,…>`, or Parquet's
    /// `message s3.inventory { required binary bucket (UTF8); … }`.
    fn field_names(self, schema: &str) -> Vec<String> {
        let inner = |open: char, close: char| {
            let from = schema.find(open).map_or(0, |at| at + 1);
            let to = schema.rfind(close).filter(|to| *to >= from).unwrap_or(schema.len());
            &schema[from..to]
        };
        match self {
            Kind::Orc => inner('<', '>')
                .split(',')
                .filter_map(|field| field.split(':').next())
                .map(|name| name.trim().to_owned())
                .collect(),
            Kind::Parquet => inner('{', '}')
                .split(';')
                .filter_map(|field| field.split_whitespace().nth(2))
                .map(str::to_owned)
                .collect(),
        }
    }
}

/// Reads data file `file` from `source`, handing the current objects it lists to `batch`, `batch_size` at a time
/// (noncurrent versions and delete markers, in a report of all versions, are skipped). Returns the rows read.
pub fn read_file(
    file: &str,
    kind: Kind,
    source: impl Source,
    batch_size: usize,
    mut batch: impl FnMut(Vec<BucketKey>) -> Result<(), InventoryError>,
) -> Result<u64, InventoryError> {
    let unreadable = |reason: String| InventoryError::File { file: file.to_owned(), reason };
    let batches: Box<dyn Iterator<Item = Result<RecordBatch, ArrowError>>> = match kind {
        Kind::Parquet => {
            use parquet::arrow::ProjectionMask;
            use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
            let builder = ParquetRecordBatchReaderBuilder::try_new(source).map_err(|e| unreadable(e.to_string()))?;
            let schema = builder.parquet_schema();
            let names: Vec<&str> = schema.root_schema().get_fields().iter().map(|f| f.name()).collect();
            let wanted = wanted(file, &names)?;
            let mask = ProjectionMask::columns(schema, wanted.iter().map(String::as_str));
            let reader = builder.with_projection(mask).with_batch_size(batch_size).build();
            Box::new(reader.map_err(|e| unreadable(e.to_string()))?)
        }
        Kind::Orc => {
            use orc_rust::ArrowReaderBuilder;
            use orc_rust::projection::ProjectionMask;
            let builder = ArrowReaderBuilder::try_new(source).map_err(|e| unreadable(e.to_string()))?;
            let root = builder.file_metadata().root_data_type();
            let names: Vec<&str> = root.children().iter().map(|c| c.name()).collect();
            let wanted = wanted(file, &names)?;
            let mask = ProjectionMask::named_roots(root, &wanted);
            Box::new(builder.with_projection(mask).with_batch_size(batch_size).build())
        }
    };
    let mut rows = 0;
    let mut keys = Vec::with_capacity(batch_size);
    for record_batch in batches {
        let record_batch = record_batch.map_err(|e| unreadable(e.to_string()))?;
        let columns = Columns::of(&record_batch).map_err(|e| unreadable(e.to_string()))?;
        for i in 0..record_batch.num_rows() {
            rows += 1;
            let row_error = |reason: String| InventoryError::Row { file: file.to_owned(), row: rows, reason };
            if let Some(key) = columns.current(i).map_err(row_error)? {
                keys.push(key);
                if keys.len() == batch_size {
                    batch(std::mem::replace(&mut keys, Vec::with_capacity(batch_size)))?;
                }
            }
        }
    }
    if !keys.is_empty() {
        batch(keys)?;
    }
    Ok(rows)
}

/// The file's own names for the columns read: the three every report needs, and the version flags where present.
fn wanted(file: &str, names: &[&str]) -> Result<Vec<String>, InventoryError> {
    let find = |column: &str| names.iter().find(|n| n.eq_ignore_ascii_case(column)).map(|n| (*n).to_owned());
    let mut wanted = Vec::new();
    for required in [KEY, SIZE, LAST_MODIFIED] {
        wanted.push(find(required).ok_or_else(|| InventoryError::File {
            file: file.to_owned(),
            reason: format!("its schema has no {required} column (it has {})", names.join(", ")),
        })?);
    }
    wanted.extend([IS_LATEST, IS_DELETE_MARKER].into_iter().filter_map(find));
    Ok(wanted)
}

/// A record batch's columns, each cast to the one type read: a key may be written as a string or as binary, a
/// time at any precision with or without its zone (ORC's `timestamp` has none: S3's times are UTC).
struct Columns {
    key: ArrayRef,
    size: ArrayRef,
    last_modified: ArrayRef,
    is_latest: Option<ArrayRef>,
    is_delete_marker: Option<ArrayRef>,
}

impl Columns {
    fn of(batch: &RecordBatch) -> Result<Columns, ArrowError> {
        let column = |name: &str, to: &DataType| -> Result<Option<ArrayRef>, ArrowError> {
            let schema = batch.schema();
            let Some((at, _)) = schema.fields().iter().enumerate().find(|(_, f)| f.name().eq_ignore_ascii_case(name))
            else {
                return Ok(None);
            };
            arrow_cast::cast(batch.column(at), to).map(Some)
        };
        let required = |name: &str, to: &DataType| {
            column(name, to)?.ok_or_else(|| ArrowError::SchemaError(format!("no {name} column")))
        };
        Ok(Columns {
            key: required(KEY, &DataType::Utf8)?,
            size: required(SIZE, &DataType::Int64)?,
            last_modified: required(LAST_MODIFIED, &DataType::Timestamp(TimeUnit::Millisecond, None))?,
            is_latest: column(IS_LATEST, &DataType::Boolean)?,
            is_delete_marker: column(IS_DELETE_MARKER, &DataType::Boolean)?,
        })
    }

    /// The object row `i` lists, or `None` for a noncurrent version or a delete marker.
    fn current(&self, i: usize) -> Result<Option<BucketKey>, String> {
        let flag = |column: &Option<ArrayRef>| column.as_ref().map(|c| c.is_valid(i) && c.as_boolean().value(i));
        if flag(&self.is_latest) == Some(false) || flag(&self.is_delete_marker) == Some(true) {
            return Ok(None);
        }
        if self.key.is_null(i) {
            return Err("has no key, or one that is not UTF-8".to_owned());
        }
        let key = self.key.as_string::<i32>().value(i).to_owned();
        if self.size.is_null(i) {
            return Err(format!("the size of {key:?} is missing"));
        }
        let byte_size = self.size.as_primitive::<Int64Type>().value(i);
        if self.last_modified.is_null(i) {
            return Err(format!("the last modified date of {key:?} is missing"));
        }
        let millis = self.last_modified.as_primitive::<TimestampMillisecondType>().value(i);
        let last_modified = DateTime::from_timestamp_millis(millis)
            .ok_or_else(|| format!("last modified date {millis} of {key:?} is not a time"))?;
        Ok(Some(BucketKey { key, byte_size, last_modified }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The schemas in S3's own manifests: Parquet as older and newer reports spell it, and ORC.
    const PARQUET: &str = "message s3.inventory { required binary bucket (UTF8); required binary key (UTF8); \
        optional binary version_id (UTF8); optional boolean is_latest; optional boolean is_delete_marker; \
        optional int64 size; optional int64 last_modified_date (TIMESTAMP_MILLIS); optional binary e_tag (UTF8);}";
    const PARQUET_NEWER: &str = "message s3.inventory {  required binary bucket (STRING);  required binary key \
        (STRING);  optional int64 size;  optional int64 last_modified_date (TIMESTAMP(MILLIS,true));  optional \
        binary e_tag (STRING);}";
    const ORC: &str = "struct<bucket:string,key:string,version_id:string,is_latest:boolean,is_delete_marker:boolean,\
        size:bigint,last_modified_date:timestamp,e_tag:string,storage_class:string>";

    #[test]
    fn the_schemas_s3_writes_hold_what_is_read_and_one_without_a_size_is_refused_by_name() {
        for (kind, schema) in [(Kind::Parquet, PARQUET), (Kind::Parquet, PARQUET_NEWER), (Kind::Orc, ORC)] {
            assert_eq!(kind.checked(schema).expect("S3's schema"), kind);
        }
        assert_eq!(
            Kind::Orc.field_names("struct<bucket:string,key:string>"),
            vec!["bucket".to_owned(), "key".to_owned()]
        );
        let e = Kind::Parquet.checked(&PARQUET.replace("optional int64 size;", "")).expect_err("no size");
        assert!(e.to_string().contains("has no size field"), "{e}");
        let e = Kind::Orc.checked(&ORC.replace("last_modified_date:timestamp,", "")).expect_err("no time");
        assert!(e.to_string().contains("has no last_modified_date field"), "{e}");
        // A field whose name merely contains a column's is not that column.
        let e = Kind::Orc.checked("struct<bucket:string,key:string,file_size:bigint,last_modified_date:timestamp>");
        assert!(e.expect_err("no size").to_string().contains("has no size field"));
    }

    #[test]
    fn a_file_must_name_the_three_columns_and_the_version_flags_are_read_where_present() {
        let wanted = wanted("f.parquet", &["bucket", "KEY", "size", "last_modified_date", "is_latest"]).expect("read");
        assert_eq!(wanted, vec!["KEY", "size", "last_modified_date", "is_latest"]);
        let e = wanted_error(&["bucket", "key", "last_modified_date"]);
        assert_eq!(
            e,
            "inventory file f.orc cannot be read: its schema has no size column (it has bucket, key, last_modified_date)"
        );
    }

    fn wanted_error(names: &[&str]) -> String {
        wanted("f.orc", names).expect_err("refused").to_string()
    }
}
