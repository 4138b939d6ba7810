//! The objects in the asset bucket: removing bytes (the one network call made while a settle holds its locks)
//! and checking that a kept asset's bytes are there, bringing back the newest kept version when they are not.

use std::time::Duration;

use crate::aws::AwsFailure;

/// A bucket call that failed, typed so the final receive can say whether trying again may help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    /// The S3 call failed.
    #[error(transparent)]
    Call(#[from] AwsFailure),
    /// Restoring a kept version did not make the object readable.
    #[error("{key} is still missing after its delete markers were removed")]
    StillMissing {
        /// The object's key.
        key: String,
    },
    /// A test failpoint.
    #[error("injected S3 failure")]
    Injected,
}

impl StorageError {
    /// Whether trying again may succeed without a person.
    pub fn retryable(&self) -> bool {
        match self {
            StorageError::Call(failure) => failure.retryable(),
            StorageError::StillMissing { .. } | StorageError::Injected => false,
        }
    }
}

/// What a kept asset's bytes turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Presence {
    /// The object is there.
    Present,
    /// The object was hidden by a delete marker; this kept version was copied back onto the key.
    Restored {
        /// The kept version whose bytes are current again.
        version_id: String,
    },
    /// Missing, and the bucket keeps no earlier version.
    Lost,
}

/// Removes the object. A missing object counts as removed (S3 answers 204). In a versioned bucket this adds a
/// delete marker, whose version id is returned, and the bytes stay as a noncurrent version until the lifecycle
/// expires them.
pub async fn remove(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
    timeout: Duration,
) -> Result<Option<String>, StorageError> {
    if injected("consumer::s3_delete", key) {
        return Err(StorageError::Injected);
    }
    let operation = || format!("DeleteObject {key}");
    match tokio::time::timeout(timeout, s3.delete_object().bucket(bucket).key(key).send()).await {
        Ok(Ok(out)) => Ok(out.delete_marker().unwrap_or(false).then(|| out.version_id().map(str::to_owned)).flatten()),
        Ok(Err(e)) => Err(AwsFailure::from_sdk(operation(), &e).into()),
        Err(_) => Err(AwsFailure::timed_out(operation()).into()),
    }
}

/// Takes back a removal whose transaction then failed, so no row is left pointing at hidden bytes that a reuse of
/// the key would trust: the bytes the delete marker hid are copied back onto the key.
pub async fn undo_remove(s3: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Result<(), StorageError> {
    match ensure_present(s3, bucket, key).await? {
        Presence::Present | Presence::Restored { .. } => Ok(()),
        Presence::Lost => Err(StorageError::StillMissing { key: key.to_owned() }),
    }
}

/// Checks that `key` exists; if not, copies its newest kept version back onto the key.
///
/// Copying, rather than removing the delete markers above that version, is what lets every function's role do
/// without `s3:DeleteObjectVersion`: nothing here destroys a version. The markers stay, as noncurrent versions,
/// and only the bucket's noncurrent-version expiry ever removes bytes. A copy is limited to 5 GiB by S3; a larger
/// object fails with S3's own error and waits for a person.
pub async fn ensure_present(s3: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Result<Presence, StorageError> {
    let version_id = match inspect(s3, bucket, key).await? {
        Found::Present => return Ok(Presence::Present),
        Found::Lost => return Ok(Presence::Lost),
        Found::Hidden { version_id } => version_id,
    };
    let kept = s3
        .head_object()
        .bucket(bucket)
        .key(key)
        .version_id(&version_id)
        .send()
        .await
        .map_err(|e| AwsFailure::from_sdk(format!("HeadObject {key} (version {version_id})"), &e))?;
    // The same bytes, metadata and tags as a new current version (S3 copies metadata unless told otherwise). The
    // storage class is named because a copy is written as STANDARD otherwise; naming it also makes the copy a
    // change in the eyes of S3-compatible stores that refuse a same-key copy without one, whatever the version.
    let class = kept.storage_class().cloned().unwrap_or(aws_sdk_s3::types::StorageClass::Standard);
    s3.copy_object()
        .bucket(bucket)
        .key(key)
        .copy_source(format!("{}/{}?versionId={}", bucket, url_encoded(key), url_encoded(&version_id)))
        .storage_class(class)
        .send()
        .await
        .map_err(|e| AwsFailure::from_sdk(format!("CopyObject {key} (version {version_id})"), &e))?;
    if let Err(e) = s3.head_object().bucket(bucket).key(key).send().await {
        tracing::warn!(key, error = %aws_sdk_s3::error::DisplayErrorContext(&e), "bytes still missing after restore");
        return Err(StorageError::StillMissing { key: key.to_owned() });
    }
    Ok(Presence::Restored { version_id })
}

/// What a key's bytes are, found without changing anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// The object is there.
    Present,
    /// Hidden by a delete marker, with this kept version the newest.
    Hidden {
        /// The newest kept version: what [`ensure_present`] would copy back.
        version_id: String,
    },
    /// Missing, and the bucket keeps no version.
    Lost,
}

/// Whether `key` exists, and if not, which kept version could bring it back. Reads only.
pub async fn inspect(s3: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Result<Found, StorageError> {
    match s3.head_object().bucket(bucket).key(key).send().await {
        Ok(_) => return Ok(Found::Present),
        Err(e) if e.as_service_error().is_some_and(|e| e.is_not_found()) => {}
        Err(e) => return Err(AwsFailure::from_sdk(format!("HeadObject {key}"), &e).into()),
    }
    let mut versions = Vec::new();
    let (mut key_marker, mut version_marker) = (None, None);
    loop {
        let page = s3
            .list_object_versions()
            .bucket(bucket)
            .prefix(key)
            .set_key_marker(key_marker)
            .set_version_id_marker(version_marker)
            .send()
            .await
            .map_err(|e| AwsFailure::from_sdk(format!("ListObjectVersions {key}"), &e))?;
        versions.extend(page.versions().iter().filter(|v| v.key() == Some(key)).cloned());
        if page.is_truncated() != Some(true) {
            break;
        }
        key_marker = page.next_key_marker().map(str::to_owned);
        version_marker = page.next_version_id_marker().map(str::to_owned);
    }
    let stamp = |t: Option<&aws_sdk_s3::primitives::DateTime>| t.map(|t| (t.secs(), t.subsec_nanos()));
    // S3 lists a key's versions newest first; two written within one tick of `LastModified` are told apart by that
    // order, so of equal stamps the one listed first wins.
    let newest = versions.iter().enumerate().max_by_key(|(i, v)| (stamp(v.last_modified()), std::cmp::Reverse(*i)));
    Ok(match newest.map(|(_, v)| v) {
        Some(newest) => Found::Hidden { version_id: newest.version_id().unwrap_or_default().to_owned() },
        None => Found::Lost,
    })
}

/// `CopySource` is URL-encoded: every byte but the unreserved ones and the path's slashes.
fn url_encoded(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~' | b'/') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// Whether a test configured `failpoint` to fail this call: its action is `return(<keys>)`, and `key` is among them.
/// Scoped to the keys a test names, so the tests running beside it (every test shares one process and its
/// failpoints) settle their own assets untouched.
#[cfg_attr(not(feature = "failpoints"), allow(unused_variables))]
pub fn injected(failpoint: &str, key: &str) -> bool {
    fail::fail_point!(failpoint, |keys: Option<String>| keys.is_some_and(|keys| keys.contains(key)));
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_source_encodes_what_a_url_cannot_carry() {
        assert_eq!(url_encoded("ws/a b+ü.png"), "ws/a%20b%2B%C3%BC.png");
        assert_eq!(url_encoded("3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY"), "3HL4kqtJlcpXroDTDmJ%2BrmSpXd3dIbrHY");
    }
}
