//! The asset bucket: removing bytes (the one network call made while a settle holds its locks) and checking
//! that a kept asset's bytes are there, bringing back the newest kept version when they are not.

use std::time::Duration;

use aws_sdk_s3::error::DisplayErrorContext;

/// What a kept asset's bytes turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Presence {
    Present,
    /// The object was missing; this earlier version was copied back as the current one.
    Restored {
        version_id: String,
    },
    /// Missing, and the bucket keeps no earlier version.
    Lost,
}

/// Removes the object. A missing object counts as removed (S3 answers 204). In a versioned bucket this adds a
/// delete marker and the bytes stay as a noncurrent version until the lifecycle expires them.
pub async fn remove(s3: &aws_sdk_s3::Client, bucket: &str, key: &str, timeout: Duration) -> Result<(), String> {
    fail::fail_point!("consumer::s3_delete", |_| Err("injected S3 failure".to_owned()));
    match tokio::time::timeout(timeout, s3.delete_object().bucket(bucket).key(key).send()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("DeleteObject {key}: {}", DisplayErrorContext(&e))),
        Err(_) => Err(format!("DeleteObject {key}: no answer within {timeout:?}")),
    }
}

/// Checks that `key` exists; if not, restores its newest kept version.
pub async fn ensure_present(s3: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Result<Presence, String> {
    match s3.head_object().bucket(bucket).key(key).send().await {
        Ok(_) => return Ok(Presence::Present),
        Err(e) if e.as_service_error().is_some_and(|e| e.is_not_found()) => {}
        Err(e) => return Err(format!("HeadObject {key}: {}", DisplayErrorContext(&e))),
    }
    let listing = s3
        .list_object_versions()
        .bucket(bucket)
        .prefix(key)
        .send()
        .await
        .map_err(|e| format!("ListObjectVersions {key}: {}", DisplayErrorContext(&e)))?;
    let newest = listing
        .versions()
        .iter()
        .filter(|v| v.key() == Some(key))
        .max_by_key(|v| v.last_modified().map(|t| (t.secs(), t.subsec_nanos())))
        .and_then(|v| v.version_id());
    let Some(version_id) = newest else { return Ok(Presence::Lost) };
    s3.copy_object()
        .bucket(bucket)
        .key(key)
        .copy_source(format!("{bucket}/{}?versionId={version_id}", encode_key(key)))
        .send()
        .await
        .map_err(|e| format!("CopyObject {key} from version {version_id}: {}", DisplayErrorContext(&e)))?;
    Ok(Presence::Restored { version_id: version_id.to_owned() })
}

/// A key as `CopySource` wants it: URL-encoded, with `/` kept.
fn encode_key(key: &str) -> String {
    let mut encoded = String::with_capacity(key.len());
    for byte in key.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => encoded.push(byte as char),
            _ => encoded.push_str(&format!("%{byte:02X}")),
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_source_keys_are_url_encoded_except_slashes() {
        assert_eq!(encode_key("ws/a b+c/é.png"), "ws/a%20b%2Bc/%C3%A9.png");
    }
}
