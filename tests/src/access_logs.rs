//! S3 server access logs as AWS writes them, for the tests that play its log delivery: LocalStack delivers none, so
//! a test writes the log objects itself, in the format and under the names AWS documents.

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// The canonical user S3's own example lines carry as the bucket owner.
pub const OWNER: &str = "79a59df900b949e55d96a1e698fbacedfd6e09d98eacf8f8d5218e7cd47ef2be";

/// One S3 server access log line, field by field as AWS's documented example has them: `key` as the log writes it
/// (URL-encoded, see [`logged`]), `requester` `-` for an anonymous request, `referrer` `-` for none.
pub fn s3_line(
    bucket: &str,
    key: &str,
    at: DateTime<Utc>,
    requester: &str,
    operation: &str,
    status: u16,
    referrer: &str,
) -> String {
    format!(
        "{OWNER} {bucket} [{}] 192.0.2.3 {requester} 3E57427F3EXAMPLE {operation} {key} \"GET /{bucket}/{key} HTTP/1.1\" \
         {status} - 113 113 7 - \"{referrer}\" \"Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0\" - \
         s9lzHYrFp76ZVxRcpX9+5cjAnEH2ROuNkd2BHfIa6UkFVdtjf5mKR3/eTPFvsiP/XV/VLi31234= SigV4 ECDHE-RSA-AES128-GCM-SHA256 \
         AuthHeader {bucket}.s3.us-east-1.amazonaws.com TLSV1.2 - Yes us-east-1",
        at.format("%d/%b/%Y:%H:%M:%S +0000")
    )
}

/// A key as S3's log writes it for a GET: URL-encoded twice, its slashes kept.
pub fn logged(key: &str) -> String {
    let once = percent_encoding::utf8_percent_encode(key, percent_encoding::NON_ALPHANUMERIC).to_string();
    let once = once.replace("%2F", "/");
    percent_encoding::utf8_percent_encode(&once, percent_encoding::NON_ALPHANUMERIC).to_string().replace("%2F", "/")
}

/// Delivers `lines` as one S3 access log object below `prefix` of `bucket`, named as S3 names one in the simple
/// layout (`prefix` `YYYY-mm-DD-HH-MM-SS-UniqueString`) at the time of its delivery, now; returns its key.
pub async fn deliver_s3_log(s3: &aws_sdk_s3::Client, bucket: &str, prefix: &str, lines: &[String]) -> String {
    let key = format!("{prefix}{}-{}", Utc::now().format("%Y-%m-%d-%H-%M-%S"), Uuid::new_v4().simple());
    let body = lines.join("\n") + "\n";
    s3.put_object().bucket(bucket).key(&key).body(body.into_bytes().into()).send().await.expect("a log object");
    key
}
