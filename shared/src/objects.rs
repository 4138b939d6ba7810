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
    /// The object was hidden by a delete marker; removing it made this kept version current again.
    Restored {
        /// The version that is current again.
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
    fail::fail_point!("consumer::s3_delete", |_| Err(StorageError::Injected));
    let operation = || format!("DeleteObject {key}");
    match tokio::time::timeout(timeout, s3.delete_object().bucket(bucket).key(key).send()).await {
        Ok(Ok(out)) => Ok(out.delete_marker().unwrap_or(false).then(|| out.version_id().map(str::to_owned)).flatten()),
        Ok(Err(e)) => Err(AwsFailure::from_sdk(operation(), &e).into()),
        Err(_) => Err(AwsFailure::timed_out(operation()).into()),
    }
}

/// Takes back a removal whose transaction then failed: deleting the delete marker makes the bytes current again,
/// so no row is left pointing at hidden bytes that a reuse of the key would trust.
pub async fn undo_remove(s3: &aws_sdk_s3::Client, bucket: &str, key: &str, marker: &str) -> Result<(), StorageError> {
    s3.delete_object()
        .bucket(bucket)
        .key(key)
        .version_id(marker)
        .send()
        .await
        .map(|_| ())
        .map_err(|e| AwsFailure::from_sdk(format!("DeleteObject {key} (delete marker {marker})"), &e).into())
}

/// Checks that `key` exists; if not, makes its newest kept version current again.
pub async fn ensure_present(s3: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Result<Presence, StorageError> {
    match s3.head_object().bucket(bucket).key(key).send().await {
        Ok(_) => return Ok(Presence::Present),
        Err(e) if e.as_service_error().is_some_and(|e| e.is_not_found()) => {}
        Err(e) => return Err(AwsFailure::from_sdk(format!("HeadObject {key}"), &e).into()),
    }
    let mut versions = Vec::new();
    let mut markers = Vec::new();
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
        markers.extend(page.delete_markers().iter().filter(|m| m.key() == Some(key)).cloned());
        if page.is_truncated() != Some(true) {
            break;
        }
        key_marker = page.next_key_marker().map(str::to_owned);
        version_marker = page.next_version_id_marker().map(str::to_owned);
    }
    let stamp = |t: Option<&aws_sdk_s3::primitives::DateTime>| t.map(|t| (t.secs(), t.subsec_nanos()));
    let Some(newest) = versions.iter().max_by_key(|v| stamp(v.last_modified())) else { return Ok(Presence::Lost) };
    // The bytes are hidden by delete markers: removing the markers above the newest version makes it current
    // again, exactly as it was (metadata included).
    for marker in markers.iter().filter(|m| stamp(m.last_modified()) >= stamp(newest.last_modified())) {
        s3.delete_object()
            .bucket(bucket)
            .key(key)
            .set_version_id(marker.version_id().map(str::to_owned))
            .send()
            .await
            .map_err(|e| AwsFailure::from_sdk(format!("DeleteObject {key} (a delete marker)"), &e))?;
    }
    if let Err(e) = s3.head_object().bucket(bucket).key(key).send().await {
        tracing::warn!(key, error = %aws_sdk_s3::error::DisplayErrorContext(&e), "bytes still missing after restore");
        return Err(StorageError::StillMissing { key: key.to_owned() });
    }
    Ok(Presence::Restored { version_id: newest.version_id().unwrap_or_default().to_owned() })
}
