//! The asset bucket: removing bytes (the one network call made while a settle holds its locks) and checking
//! that a kept asset's bytes are there, bringing back the newest kept version when they are not.

use std::time::Duration;

use aws_sdk_s3::error::DisplayErrorContext;

/// What a kept asset's bytes turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Presence {
    Present,
    /// The object was hidden by a delete marker; removing it made this kept version current again.
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

/// Checks that `key` exists; if not, makes its newest kept version current again.
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
    let stamp = |t: Option<&aws_sdk_s3::primitives::DateTime>| t.map(|t| (t.secs(), t.subsec_nanos()));
    let newest = listing.versions().iter().filter(|v| v.key() == Some(key)).max_by_key(|v| stamp(v.last_modified()));
    let Some(newest) = newest else { return Ok(Presence::Lost) };
    // The bytes are hidden by delete markers: removing the markers above the newest version makes it current
    // again, exactly as it was (metadata included).
    let markers = listing
        .delete_markers()
        .iter()
        .filter(|m| m.key() == Some(key) && stamp(m.last_modified()) >= stamp(newest.last_modified()));
    for marker in markers {
        s3.delete_object()
            .bucket(bucket)
            .key(key)
            .set_version_id(marker.version_id().map(str::to_owned))
            .send()
            .await
            .map_err(|e| format!("removing a delete marker of {key}: {}", DisplayErrorContext(&e)))?;
    }
    Ok(Presence::Restored { version_id: newest.version_id().unwrap_or_default().to_owned() })
}
