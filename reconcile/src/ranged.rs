//! One S3 object read at any offset by ranged GETs, for the inventory formats whose index is at the end of the file.
//! Bytes are fetched a window at a time and the last few windows kept: a Parquet reader asks for each page (and
//! each page's header) apart, and the columns it reads interleave, so a request per ask would be a request per
//! page. Memory is bounded by [`KEPT`] windows; an ask of a window or more (an ORC stream) is fetched as asked.
//!
//! The reads block: they run on the thread that decodes the file (a blocking thread), driving the GETs on the
//! runtime that thread was spawned from.

use std::collections::VecDeque;
use std::io::{self, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use platform::aws::AwsFailure;

/// Bytes fetched at once.
pub const WINDOW: u64 = 4 << 20;
/// Windows kept: one per column being decoded, and the footer.
pub const KEPT: usize = 8;

/// An object of a known length.
#[derive(Clone)]
pub struct Object {
    inner: Arc<Inner>,
}

struct Inner {
    client: aws_sdk_s3::Client,
    bucket: String,
    key: String,
    len: u64,
    runtime: tokio::runtime::Handle,
    /// Windows fetched, oldest first: each its offset and bytes.
    windows: Mutex<VecDeque<(u64, Bytes)>>,
    /// GETs sent.
    requests: AtomicU64,
}

impl std::fmt::Debug for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s3://{}/{} ({} bytes)", self.inner.bucket, self.inner.key, self.inner.len)
    }
}

impl Object {
    /// `key` in `bucket`, `len` bytes long (as its manifest says: a GET that finds another length fails, naming
    /// both), read through `runtime`.
    pub fn new(
        client: aws_sdk_s3::Client,
        bucket: &str,
        key: &str,
        len: u64,
        runtime: tokio::runtime::Handle,
    ) -> Object {
        let inner = Inner {
            client,
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            len,
            runtime,
            windows: Mutex::new(VecDeque::new()),
            requests: AtomicU64::new(0),
        };
        Object { inner: Arc::new(inner) }
    }

    /// `length` bytes from `start`.
    pub fn bytes(&self, start: u64, length: u64) -> io::Result<Bytes> {
        let inner = &self.inner;
        let end = start.checked_add(length).filter(|end| *end <= inner.len).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{length} bytes from {start} run past the end of {self:?}"),
            )
        })?;
        if length == 0 {
            return Ok(Bytes::new());
        }
        if length >= WINDOW {
            return self.fetch(start, end);
        }
        let mut windows = inner.windows.lock().map_err(|_| io::Error::other("a reader of this object panicked"))?;
        let held = windows.iter().find(|(at, bytes)| *at <= start && end <= at + bytes.len() as u64);
        if let Some((at, bytes)) = held {
            let from = usize::try_from(start - at).map_err(io::Error::other)?;
            return Ok(bytes.slice(from..from + usize::try_from(length).map_err(io::Error::other)?));
        }
        let window = self.fetch(start, (start + WINDOW).min(inner.len))?;
        let asked = window.slice(..usize::try_from(length).map_err(io::Error::other)?);
        windows.push_back((start, window));
        if windows.len() > KEPT {
            windows.pop_front();
        }
        Ok(asked)
    }

    /// The GETs sent so far.
    pub fn requests(&self) -> u64 {
        self.inner.requests.load(Ordering::Relaxed)
    }

    /// A reader from `start` to the end.
    pub fn reader(&self, start: u64) -> Reader {
        Reader { object: self.clone(), at: start }
    }

    /// Bytes `start..end`, by one ranged GET.
    fn fetch(&self, start: u64, end: u64) -> io::Result<Bytes> {
        let inner = &self.inner;
        let operation = || format!("GetObject s3://{}/{} bytes {start}-{}", inner.bucket, inner.key, end - 1);
        inner.requests.fetch_add(1, Ordering::Relaxed);
        let got = inner.runtime.block_on(async {
            let out = inner
                .client
                .get_object()
                .bucket(&inner.bucket)
                .key(&inner.key)
                .range(format!("bytes={start}-{}", end - 1))
                .send()
                .await
                .map_err(|e| io::Error::other(AwsFailure::from_sdk(operation(), &e).to_string()))?;
            let whole = out.content_range().and_then(|r| r.rsplit_once('/')).map(|(_, total)| total.to_owned());
            let bytes = out.body.collect().await.map_err(|e| io::Error::other(format!("{}: {e}", operation())))?;
            Ok::<_, io::Error>((whole, bytes.into_bytes()))
        })?;
        let (whole, bytes) = got;
        if let Some(whole) = whole.filter(|w| w.parse::<u64>().ok() != Some(inner.len)) {
            return Err(io::Error::other(format!(
                "{} is {whole} bytes, not the {} its manifest says",
                inner.key, inner.len
            )));
        }
        if bytes.len() as u64 != end - start {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{} gave {} bytes where {} were asked", operation(), bytes.len(), end - start),
            ));
        }
        Ok(bytes)
    }
}

/// Reads an [`Object`] front to back from an offset, through its windows.
pub struct Reader {
    object: Object,
    at: u64,
}

impl Read for Reader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.object.inner.len.saturating_sub(self.at);
        let length = left.min(buf.len() as u64);
        if length == 0 {
            return Ok(0);
        }
        let bytes = self.object.bytes(self.at, length)?;
        buf[..bytes.len()].copy_from_slice(&bytes);
        self.at += bytes.len() as u64;
        Ok(bytes.len())
    }
}

impl parquet::file::reader::Length for Object {
    fn len(&self) -> u64 {
        self.inner.len
    }
}

impl parquet::file::reader::ChunkReader for Object {
    type T = Reader;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Reader> {
        Ok(self.reader(start))
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        Ok(self.bytes(start, length as u64)?)
    }
}

impl orc_rust::reader::ChunkReader for Object {
    type T = Reader;

    fn len(&self) -> u64 {
        self.inner.len
    }

    fn get_read(&self, offset_from_start: u64) -> io::Result<Reader> {
        Ok(self.reader(offset_from_start))
    }

    fn get_bytes(&self, offset_from_start: u64, length: u64) -> io::Result<Bytes> {
        self.bytes(offset_from_start, length)
    }
}
