//! S3 Inventory reports as S3 writes them, in each of its three formats, for the tests and the reconcile benchmark:
//! the fields and their order as S3 writes them when asked for size, last modified date and ETag (and the version
//! fields in a report of all versions), the manifest's `fileSchema` as S3 writes it, gzipped CSV with every field
//! quoted and keys URL-encoded, Parquet with S3's own message type and Snappy, ORC with S3's struct and ZLIB.

use std::io::Write as _;
use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, Int64Array, RecordBatch, StringArray, TimestampNanosecondArray};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use parquet::basic::Compression;
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;

/// One row of a report.
#[derive(Debug, Clone)]
pub struct Row {
    /// The object's key, as stored.
    pub key: String,
    /// Whether this is the object's current version.
    pub latest: bool,
    /// Whether this is a delete marker.
    pub delete_marker: bool,
    /// Bytes (none for a delete marker).
    pub size: Option<i64>,
    /// Milliseconds since the epoch.
    pub modified: i64,
}

impl Row {
    /// The current version of `key`, `size` bytes, written at `modified` (ms).
    pub fn current(key: &str, size: i64, modified: i64) -> Row {
        Row { key: key.to_owned(), latest: true, delete_marker: false, size: Some(size), modified }
    }
}

/// One of the formats S3 Inventory writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Gzipped CSV.
    Csv,
    /// Apache Parquet.
    Parquet,
    /// Apache ORC.
    Orc,
}

impl Format {
    /// All three.
    pub const ALL: [Format; 3] = [Format::Csv, Format::Parquet, Format::Orc];

    /// The manifest's `fileFormat`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Csv => "CSV",
            Format::Parquet => "Parquet",
            Format::Orc => "ORC",
        }
    }

    /// How S3 ends a data file's name.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Csv => "csv.gz",
            Format::Parquet => "parquet",
            Format::Orc => "orc",
        }
    }

    /// The manifest's `fileSchema` for a report of all versions with size, last modified date and ETag.
    pub fn schema(self) -> &'static str {
        match self {
            Format::Csv => "Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate, ETag",
            Format::Parquet => {
                "message s3.inventory { required binary bucket (UTF8); required binary key (UTF8); \
                 optional binary version_id (UTF8); optional boolean is_latest; optional boolean is_delete_marker; \
                 optional int64 size; optional int64 last_modified_date (TIMESTAMP_MILLIS); \
                 optional binary e_tag (UTF8);}"
            }
            Format::Orc => {
                "struct<bucket:string,key:string,version_id:string,is_latest:boolean,is_delete_marker:boolean,\
                 size:bigint,last_modified_date:timestamp,e_tag:string>"
            }
        }
    }

    /// A data file of `bucket` listing `rows`, in row groups (Parquet) or stripes (ORC) of `group` rows.
    pub fn write(self, bucket: &str, rows: &[Row], group: usize) -> Vec<u8> {
        match self {
            Format::Csv => csv(bucket, rows),
            Format::Parquet => parquet(bucket, rows, group),
            Format::Orc => orc(bucket, rows, group),
        }
    }
}

fn csv(bucket: &str, rows: &[Row]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    for r in rows {
        let time = chrono::DateTime::from_timestamp_millis(r.modified).expect("a time");
        let size = r.size.map(|s| s.to_string()).unwrap_or_default();
        let etag = if r.delete_marker { "" } else { "etag" };
        writeln!(
            gz,
            "\"{bucket}\",\"{}\",\"v1\",\"{}\",\"{}\",\"{size}\",\"{}\",\"{etag}\"",
            url_encoded(&r.key),
            r.latest,
            r.delete_marker,
            time.format("%Y-%m-%dT%H:%M:%S%.3fZ")
        )
        .expect("a row");
    }
    gz.finish().expect("gzip")
}

/// A key as S3 writes it in a CSV report: form-URL-encoded, a space as `+`.
pub fn url_encoded(key: &str) -> String {
    const KEPT: &percent_encoding::AsciiSet =
        &percent_encoding::NON_ALPHANUMERIC.remove(b'/').remove(b'-').remove(b'_').remove(b'.').remove(b' ');
    percent_encoding::utf8_percent_encode(key, KEPT).to_string().replace(' ', "+")
}

fn parquet(bucket: &str, rows: &[Row], group: usize) -> Vec<u8> {
    let schema = Arc::new(parquet::schema::parser::parse_message_type(Format::Parquet.schema()).expect("S3's schema"));
    let properties = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(group))
        // Pages smaller than a reader's window, as a large report's are.
        .set_data_page_size_limit(256 * 1024)
        .build();
    let mut out = Vec::new();
    let mut writer = SerializedFileWriter::new(&mut out, schema, Arc::new(properties)).expect("a writer");
    for chunk in rows.chunks(group.max(1)) {
        let mut row_group = writer.next_row_group().expect("a row group");
        let text = |f: &dyn Fn(&Row) -> Option<String>| -> (Vec<ByteArray>, Vec<i16>) {
            let values: Vec<Option<String>> = chunk.iter().map(f).collect();
            let levels = values.iter().map(|v| i16::from(v.is_some())).collect();
            (values.into_iter().flatten().map(|v| ByteArray::from(v.into_bytes())).collect(), levels)
        };
        let mut column = 0;
        while let Some(mut writer) = row_group.next_column().expect("a column") {
            match column {
                0 | 1 => {
                    let (values, _) = text(&|r| Some(if column == 0 { bucket.to_owned() } else { r.key.clone() }));
                    writer.typed::<ByteArrayType>().write_batch(&values, None, None).expect("written");
                }
                2 | 7 => {
                    let (values, levels) = text(&|r| match column {
                        2 => Some("v1".to_owned()),
                        _ => (!r.delete_marker).then(|| "etag".to_owned()),
                    });
                    writer.typed::<ByteArrayType>().write_batch(&values, Some(&levels), None).expect("written");
                }
                3 | 4 => {
                    let values: Vec<bool> =
                        chunk.iter().map(|r| if column == 3 { r.latest } else { r.delete_marker }).collect();
                    let levels = vec![1; values.len()];
                    writer.typed::<BoolType>().write_batch(&values, Some(&levels), None).expect("written");
                }
                _ => {
                    let values: Vec<Option<i64>> =
                        chunk.iter().map(|r| if column == 5 { r.size } else { Some(r.modified) }).collect();
                    let levels: Vec<i16> = values.iter().map(|v| i16::from(v.is_some())).collect();
                    let values: Vec<i64> = values.into_iter().flatten().collect();
                    writer.typed::<Int64Type>().write_batch(&values, Some(&levels), None).expect("written");
                }
            }
            writer.close().expect("a column");
            column += 1;
        }
        row_group.close().expect("a row group");
    }
    writer.close().expect("a file");
    out
}

fn orc(bucket: &str, rows: &[Row], group: usize) -> Vec<u8> {
    let text = |name: &str, nullable: bool| Field::new(name, DataType::Utf8, nullable);
    let schema = Arc::new(Schema::new(vec![
        text("bucket", false),
        text("key", false),
        text("version_id", true),
        Field::new("is_latest", DataType::Boolean, true),
        Field::new("is_delete_marker", DataType::Boolean, true),
        Field::new("size", DataType::Int64, true),
        // ORC's `timestamp`, without a zone, as S3 writes it.
        Field::new("last_modified_date", DataType::Timestamp(TimeUnit::Nanosecond, None), true),
        text("e_tag", true),
    ]));
    let mut out = Vec::new();
    let mut writer = orc_rust::ArrowWriterBuilder::new(&mut out, schema.clone())
        .with_compression(orc_rust::compression::CompressionType::Zlib)
        .with_batch_size(group)
        .try_build()
        .expect("a writer");
    for chunk in rows.chunks(group.max(1)) {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec![bucket; chunk.len()])),
            Arc::new(StringArray::from_iter_values(chunk.iter().map(|r| r.key.as_str()))),
            Arc::new(StringArray::from(vec!["v1"; chunk.len()])),
            Arc::new(BooleanArray::from_iter(chunk.iter().map(|r| Some(r.latest)))),
            Arc::new(BooleanArray::from_iter(chunk.iter().map(|r| Some(r.delete_marker)))),
            Arc::new(Int64Array::from_iter(chunk.iter().map(|r| r.size))),
            Arc::new(TimestampNanosecondArray::from_iter(chunk.iter().map(|r| Some(r.modified * 1_000_000)))),
            Arc::new(StringArray::from_iter(chunk.iter().map(|r| (!r.delete_marker).then_some("etag")))),
        ];
        writer.write(&RecordBatch::try_new(schema.clone(), columns).expect("a batch")).expect("written");
        writer.flush_stripe().expect("a stripe");
    }
    writer.close().expect("a file");
    out
}

/// A manifest of `bucket`'s report in `format`, listing `files` (each its key and size), S3's scan begun at
/// `taken_at` (ms).
pub fn manifest(bucket: &str, format: Format, files: &[(String, usize)], taken_at: i64) -> String {
    let files: Vec<serde_json::Value> = files
        .iter()
        .map(|(key, size)| serde_json::json!({ "key": key, "size": size, "MD5checksum": "unchecked" }))
        .collect();
    serde_json::json!({
        "sourceBucket": bucket,
        "destinationBucket": format!("arn:aws:s3:::{bucket}"),
        "version": "2016-11-30",
        "creationTimestamp": taken_at.to_string(),
        "fileFormat": format.name(),
        "fileSchema": format.schema(),
        "files": files,
    })
    .to_string()
}
