//! A real engine for the bucket comparison's SQL text, here where Athena cannot run: Apache DataFusion, reading the
//! report's data files (S3's own Parquet or ORC) and the export's Parquet files from LocalStack's S3 through
//! object_store, as Athena reads them from S3. It runs a query when it is started and keeps the output for the
//! pages, so a caller polls and pages it as it does Athena.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use chrono::DateTime;
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type, TimeUnit, TimestampMillisecondType};
use datafusion::execution::context::SessionContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::ParquetReadOptions;
use datafusion_orc::{OrcReadOptions, SessionContextOrcExt};
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    Attributes, CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use reconcile::engine::{Datasets, Dialect, Engine, EngineError, Finding, Page, Row, Running};
use reconcile::inventory::Manifest;

/// Rows in a page, as Athena's `GetQueryResults` gives at most.
pub const PAGE: usize = 1000;

/// DataFusion over LocalStack's S3.
pub struct LocalEngine {
    ctx: SessionContext,
    dialect: Dialect,
    done: Mutex<HashMap<String, (Vec<Row>, u64)>>,
    /// Polls answered `Running` before the output is ready, as a query that outlives a pass.
    running_for: AtomicU32,
    /// Fail this many of the next polls, as Athena fails a query.
    fail_next: AtomicU32,
}

const NAME: &str = "datafusion";

fn failed(e: impl std::fmt::Display) -> EngineError {
    EngineError::Failed { engine: NAME, reason: e.to_string() }
}

impl LocalEngine {
    /// An engine that reads `buckets` from the S3 at `AWS_ENDPOINT_URL`.
    pub fn new(buckets: &[&str]) -> LocalEngine {
        let ctx = SessionContext::new();
        let endpoint = std::env::var("AWS_ENDPOINT_URL").unwrap_or_else(|_| "http://localhost:4566".to_owned());
        for bucket in buckets {
            let store = object_store::aws::AmazonS3Builder::new()
                .with_bucket_name(*bucket)
                .with_endpoint(&endpoint)
                .with_allow_http(true)
                .with_region(std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".to_owned()))
                .with_access_key_id(std::env::var("AWS_ACCESS_KEY_ID").unwrap_or_else(|_| "test".to_owned()))
                .with_secret_access_key(std::env::var("AWS_SECRET_ACCESS_KEY").unwrap_or_else(|_| "test".to_owned()))
                .build()
                .expect("an S3 store");
            let url = url::Url::parse(&format!("s3://{bucket}")).expect("a bucket's URL");
            ctx.register_object_store(&url, Arc::new(EmptyRanges(store)));
        }
        LocalEngine {
            ctx,
            dialect: Dialect::Local,
            done: Mutex::new(HashMap::new()),
            running_for: AtomicU32::new(0),
            fail_next: AtomicU32::new(0),
        }
    }

    /// Answers `Running` to the first `polls` polls of each query.
    #[must_use]
    pub fn running_for(self, polls: u32) -> LocalEngine {
        self.running_for.store(polls, Ordering::SeqCst);
        self
    }

    /// Fails the first query that finishes.
    #[must_use]
    pub fn failing_once(self) -> LocalEngine {
        self.failing(1)
    }

    /// Fails the first `queries` queries.
    #[must_use]
    pub fn failing(self, queries: u32) -> LocalEngine {
        self.fail_next.store(queries, Ordering::SeqCst);
        self
    }

    /// The report `manifest` (its data files in `bucket`) as the table `inventory`.
    pub async fn register_report(&self, bucket: &str, manifest: &Manifest) {
        let files: Vec<String> = manifest.files.iter().map(|f| format!("s3://{bucket}/{}", f.key)).collect();
        self.register_files(files, &manifest.file_format).await.expect("the report's files");
    }

    async fn register_files(&self, files: Vec<String>, format: &str) -> Result<(), EngineError> {
        let frame = match format.to_ascii_lowercase().as_str() {
            "parquet" => self.ctx.read_parquet(files, ParquetReadOptions::default()).await,
            "orc" => self.ctx.read_orc(files, OrcReadOptions::default()).await,
            other => return Err(failed(format!("the local engine reads Parquet and ORC reports, not {other}"))),
        }
        .map_err(failed)?;
        self.ctx.deregister_table("inventory").map_err(failed)?;
        self.ctx.register_table("inventory", frame.into_view()).map_err(failed)?;
        Ok(())
    }

    /// The export's files under `url` (`s3://bucket/folder/`) as the table `known`.
    pub async fn register_known(&self, url: &str) -> Result<(), EngineError> {
        let frame = self.ctx.read_parquet(url.to_owned(), ParquetReadOptions::default()).await.map_err(failed)?;
        self.ctx.deregister_table("known").map_err(failed)?;
        self.ctx.register_table("known", frame.into_view()).map_err(failed)?;
        Ok(())
    }

    async fn run(&self, sql: &str) -> Result<(Vec<Row>, u64), EngineError> {
        let frame = self.ctx.sql(sql).await.map_err(failed)?;
        let plan = frame.create_physical_plan().await.map_err(failed)?;
        let batches = datafusion::physical_plan::collect(plan.clone(), self.ctx.task_ctx()).await.map_err(failed)?;
        let mut rows = Vec::new();
        for batch in &batches {
            rows.extend(rows_of(batch)?);
        }
        Ok((rows, scanned(&plan)))
    }
}

/// An object store that answers a request for no bytes with none. datafusion-orc asks for each stream of a stripe
/// by its range, and orc-rust's writer (which writes the tests' ORC reports) writes empty streams, which
/// object_store refuses to request.
#[derive(Debug)]
struct EmptyRanges<T>(T);

impl<T: std::fmt::Display> std::fmt::Display for EmptyRanges<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[async_trait::async_trait]
impl<T: ObjectStore> ObjectStore for EmptyRanges<T> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.0.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.0.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> object_store::Result<GetResult> {
        if let Some(GetRange::Bounded(range)) = &options.range
            && range.is_empty()
        {
            let meta = self.0.head(location).await?;
            let payload = GetResultPayload::Stream(futures::stream::empty().boxed());
            return Ok(GetResult { payload, meta, range: range.clone(), attributes: Attributes::default() });
        }
        self.0.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.0.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.0.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.0.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> object_store::Result<()> {
        self.0.copy_opts(from, to, options).await
    }
}

/// The bytes the plan's scans read, as DataFusion's Parquet scan counts them (Athena's figure for the same).
fn scanned(plan: &Arc<dyn ExecutionPlan>) -> u64 {
    let own = plan.metrics().and_then(|m| m.sum_by_name("bytes_scanned")).map_or(0, |v| v.as_usize() as u64);
    own + plan.children().into_iter().map(scanned).sum::<u64>()
}

fn rows_of(batch: &RecordBatch) -> Result<Vec<Row>, EngineError> {
    let bad = |reason: String| EngineError::Row { engine: NAME, reason };
    let column = |name: &str, to: &DataType| {
        let array = batch.column_by_name(name).ok_or_else(|| bad(format!("no column {name}")))?;
        cast(array, to).map_err(|e| bad(format!("{name}: {e}")))
    };
    let finding = column("finding", &DataType::Utf8)?;
    let prefix = column("prefix", &DataType::Utf8)?;
    let key = column("key", &DataType::Utf8)?;
    let keys = column("keys", &DataType::Int64)?;
    let bytes = column("bytes", &DataType::Int64)?;
    let modified = column("modified", &DataType::Timestamp(TimeUnit::Millisecond, None))?;
    let (finding, prefix, key) = (finding.as_string::<i32>(), prefix.as_string::<i32>(), key.as_string::<i32>());
    let (keys, bytes) = (keys.as_primitive::<Int64Type>(), bytes.as_primitive::<Int64Type>());
    let modified = modified.as_primitive::<TimestampMillisecondType>();
    let text = |a: &datafusion::arrow::array::StringArray, i: usize| (!a.is_null(i)).then(|| a.value(i).to_owned());
    (0..batch.num_rows())
        .map(|i| {
            let finding: Finding = finding.value(i).parse().map_err(|e| bad(format!("{e}")))?;
            Ok(Row {
                finding,
                prefix: text(prefix, i),
                key: text(key, i),
                keys: keys.value(i),
                bytes: if bytes.is_null(i) { 0 } else { bytes.value(i) },
                modified: (!modified.is_null(i)).then(|| DateTime::from_timestamp_millis(modified.value(i))).flatten(),
            })
        })
        .collect()
}

impl Engine for LocalEngine {
    fn name(&self) -> &'static str {
        NAME
    }

    fn dialect(&self) -> &Dialect {
        &self.dialect
    }

    async fn attach(&self, datasets: &Datasets<'_>) -> Result<(), EngineError> {
        self.register_files(datasets.report.data_files(), &datasets.report.manifest.file_format).await?;
        self.register_known(datasets.export).await
    }

    async fn start(&self, sql: &str) -> Result<String, EngineError> {
        let output = self.run(sql).await?;
        let mut done = self.done.lock().map_err(failed)?;
        let id = format!("local-{}", done.len() + 1);
        done.insert(id.clone(), output);
        Ok(id)
    }

    async fn poll(&self, id: &str) -> Result<Running, EngineError> {
        if self.fail_next.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            return Ok(Running::Failed("the test's engine fails this one".to_owned()));
        }
        if self.running_for.load(Ordering::SeqCst) > 0 {
            self.running_for.fetch_sub(1, Ordering::SeqCst);
            return Ok(Running::Running);
        }
        let done = self.done.lock().map_err(failed)?;
        Ok(match done.get(id) {
            Some((_, scanned)) => Running::Succeeded { scanned: *scanned },
            None => Running::Failed(format!("no query {id}")),
        })
    }

    async fn page(&self, id: &str, token: Option<&str>) -> Result<Page, EngineError> {
        let done = self.done.lock().map_err(failed)?;
        let (rows, _) = done.get(id).ok_or_else(|| failed(format!("no query {id}")))?;
        let from: usize = token.map_or(Ok(0), str::parse).map_err(failed)?;
        let to = (from + PAGE).min(rows.len());
        Ok(Page { rows: rows[from..to].to_vec(), next: (to < rows.len()).then(|| to.to_string()) })
    }
}
