//! Where in S3: a folder's address, and what makes a bucket name valid.

use std::fmt;

/// A folder in S3: `s3://bucket/prefix/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InventoryLocation {
    /// The bucket.
    pub bucket: String,
    /// The folder's key prefix, ending in `/` (empty for the bucket's root).
    pub prefix: String,
}

impl InventoryLocation {
    /// Parses `s3://bucket/prefix/` (the trailing slash may be left out).
    pub fn parse(text: &str) -> Result<Self, String> {
        let (bucket, prefix) = split(text, "s3://bucket/prefix/")?;
        let prefix = if prefix.is_empty() || prefix.ends_with('/') { prefix.to_owned() } else { format!("{prefix}/") };
        Ok(InventoryLocation { bucket: bucket.to_owned(), prefix })
    }
}

impl fmt::Display for InventoryLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.prefix)
    }
}

/// Where AWS delivers a log: a bucket and the start of every log object's key, kept exactly as written (a log's
/// prefix need not end in `/`: a CloudFront location ends in the distribution's id, which each file's name begins
/// with).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLocation {
    /// The bucket.
    pub bucket: String,
    /// What every log object's key begins with.
    pub prefix: String,
}

impl LogLocation {
    /// Parses `s3://bucket/prefix`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (bucket, prefix) = split(text, "s3://bucket/prefix")?;
        Ok(LogLocation { bucket: bucket.to_owned(), prefix: prefix.to_owned() })
    }
}

impl fmt::Display for LogLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.prefix)
    }
}

/// How S3 names the access log objects it delivers (`TargetObjectKeyFormat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AccessLogLayout {
    /// `[prefix]YYYY-MM-DD-hh-mm-ss-[unique]`: one folder, names in delivery order.
    #[default]
    Simple,
    /// `[prefix][account]/[region]/[bucket]/YYYY/MM/DD/YYYY-MM-DD-hh-mm-ss-[unique]`: the location names the folder of
    /// the bucket (up to and including `[bucket]/`), and each day has a folder of its own.
    Partitioned,
}

/// `s3://bucket/rest` as its valid bucket name and the rest; `shape` is what the address should look like.
fn split<'t>(text: &'t str, shape: &str) -> Result<(&'t str, &'t str), String> {
    let rest = text.strip_prefix("s3://").ok_or_else(|| format!("must be an {shape} address, got {text:?}"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if let Some(reason) = bucket_name_problem(bucket) {
        return Err(format!("names bucket {bucket:?}, which {reason}"));
    }
    Ok((bucket, prefix))
}

/// Why `name` is not a valid S3 bucket name, if it is not (S3's naming rules, which LocalStack also enforces).
pub fn bucket_name_problem(name: &str) -> Option<&'static str> {
    let bytes = name.as_bytes();
    if !(3..=63).contains(&bytes.len()) {
        return Some("must be 3 to 63 characters long");
    }
    if !bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-' || *b == b'.') {
        return Some("may contain only lowercase letters, digits, '-' and '.'");
    }
    let edge_ok = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if !edge_ok(bytes[0]) || !edge_ok(bytes[bytes.len() - 1]) {
        return Some("must begin and end with a letter or digit");
    }
    None
}
