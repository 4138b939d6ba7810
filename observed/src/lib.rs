//! Observed use: who read which of the bucket's files, as AWS's own logs record it. S3 server access logs name
//! every request S3 served; CloudFront standard logs name every request a distribution served, cache hits included
//! (which S3 never sees). A read is evidence of use that no row of the application shows: an email, a template,
//! another service. This crate turns one log line into an [`Access`], exactly as AWS documents each format, and
//! decides nothing: which reads keep a file is the lifecycle's.
//!
//! Both formats are written by AWS, but their quoted fields (a request's URI, referrer and user agent) are the
//! requester's: a line is read from its fixed fields first, and a field a requester wrote never moves another.

pub mod client;
pub mod cloudfront_log;
mod decode;
pub mod requester;
pub mod s3_log;
pub mod trust;

use chrono::{DateTime, Utc};

pub use client::ClientKind;

/// One request a log recorded, borrowed from its line: a day of a busy site's logs is a hundred million lines, and
/// most are reads of the same few files, so what a caller does not keep is never decoded or copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access<'a> {
    /// When it was made (UTC).
    pub at: DateTime<Utc>,
    /// The key as the log wrote it (URL-encoded; `-` for none), and for a CloudFront path the distribution's origin
    /// path (without slashes) that comes before it: see [`Access::keys`].
    key: &'a str,
    origin_path: Option<&'a str>,
    /// The bucket an S3 log line is of (a location may hold several buckets' logs); `None` for CloudFront, whose
    /// files are a distribution's own.
    pub bucket: Option<&'a str>,
    /// What was asked, as the log names it: S3's operation (`REST.GET.OBJECT`), or CloudFront's method (`GET`).
    pub operation: &'a str,
    /// The HTTP status of the response (`0` when the log has none: a viewer that closed the connection first).
    pub status: u16,
    /// Who asked: the IAM principal or canonical user S3 names, `None` for an anonymous request and for every
    /// request CloudFront logs (a viewer has no AWS identity).
    pub requester: Option<&'a str>,
    /// The referrer as the log wrote it, when the request said.
    pub referrer: Option<&'a str>,
    /// The user agent as the log wrote it, when the request said.
    pub user_agent: Option<&'a str>,
}

impl Access<'_> {
    /// Whether this is a read of an object's bytes or metadata that the server answered with them or confirmed
    /// them (`304`: the client holds a copy and is still using it): a GET, a HEAD, or the source side of a copy.
    pub fn is_read(&self) -> bool {
        let read = matches!(
            self.operation,
            "REST.GET.OBJECT"
                | "REST.HEAD.OBJECT"
                | "REST.COPY.OBJECT_GET"
                | "WEBSITE.GET.OBJECT"
                | "WEBSITE.HEAD.OBJECT"
                | "GET"
                | "HEAD"
        );
        read && ((200..300).contains(&self.status) || self.status == 304)
    }

    /// The key exactly as the log wrote it: what a reader of many lines groups by, decoding each distinct one once
    /// ([`Access::keys`]).
    pub fn logged_key(&self) -> &str {
        self.key
    }

    /// The storage keys it may have named, most likely first: AWS writes keys URL-encoded (S3's logs, for most
    /// operations, twice), and a key decoded once and twice differ only when it holds a `%`. Empty when the line
    /// names no key (a request for the bucket itself, a distribution's root).
    pub fn keys(&self) -> Vec<String> {
        if self.key == "-" {
            return Vec::new();
        }
        let mut keys = decode::candidates(self.key);
        // A CloudFront path starts with `/`, and names the key after the origin path; an S3 key is the key.
        if let Some(origin_path) = self.origin_path {
            for key in &mut keys {
                let path = key.trim_start_matches('/');
                *key = if origin_path.is_empty() { path.to_owned() } else { format!("{origin_path}/{path}") };
            }
        }
        keys.retain(|k| !k.is_empty() && !k.ends_with('/'));
        keys
    }

    /// The host of the page that asked, when the request says.
    pub fn referrer_host(&self) -> Option<String> {
        let host = referrer_host(self.referrer?)?;
        Some(if host.contains('%') {
            percent_encoding::percent_decode_str(&host).decode_utf8_lossy().into_owned()
        } else {
            host
        })
    }

    /// What kind of client asked, from its user agent.
    pub fn client(&self) -> ClientKind {
        ClientKind::of(self.user_agent.unwrap_or(""))
    }
}

/// Why a line is not an access. The caller counts and skips it with its object and line number; a line never
/// fails a pass.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    /// The line ends before a field every line has.
    #[error("the line ends before its {0} field")]
    Truncated(&'static str),
    /// A field is not what its format says it is.
    #[error("its {field} field {value:?} is not {expected}")]
    Malformed {
        /// The field's name, as AWS documents it.
        field: &'static str,
        /// What the line holds there (at most 80 characters of it).
        value: String,
        /// What the format says it holds.
        expected: &'static str,
    },
}

impl LineError {
    fn malformed(field: &'static str, value: &str, expected: &'static str) -> LineError {
        let value = value.chars().take(80).collect();
        LineError::Malformed { field, value, expected }
    }
}

/// The host of a referrer URL (`https://shop.example.com/p/1` → `shop.example.com`), lowercase, without its port.
fn referrer_host(referrer: &str) -> Option<String> {
    let rest = referrer.split_once("://").map_or(referrer, |(_, rest)| rest);
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => host.split(':').next().unwrap_or(host),
    };
    (!host.is_empty() && referrer != "-").then(|| host.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_referrers_host_is_its_authority_without_user_or_port() {
        assert_eq!(referrer_host("https://Shop.Example.com/p/1?x=y").as_deref(), Some("shop.example.com"));
        assert_eq!(referrer_host("http://user:pw@cdn.example.com:8443/a").as_deref(), Some("cdn.example.com"));
        assert_eq!(referrer_host("https://[2001:db8::1]:443/").as_deref(), Some("2001:db8::1"));
        assert_eq!(referrer_host("android-app://com.example.app").as_deref(), Some("com.example.app"));
        assert_eq!(referrer_host("-"), None);
        assert_eq!(referrer_host(""), None);
    }
}
