//! The asset bucket's promises, read rather than assumed. Undelete and "a wrong delete can be undone" rest on
//! two settings of the bucket that nothing in this product sets: versioning `Enabled`, so a `DeleteObject` adds a
//! delete marker and the bytes stay as a noncurrent version; and a lifecycle rule that expires noncurrent versions,
//! so the bytes kept that way do not cost money for ever. `versioning` is what the consumer asks before each batch;
//! `read` is what the sweep records once a pass.

use std::fmt;

use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::operation::get_bucket_versioning::GetBucketVersioningOutput;
use aws_sdk_s3::types::{BucketVersioningStatus, ExpirationStatus, LifecycleRule, LifecycleRuleFilter};
use serde::{Deserialize, Serialize};

use crate::aws::AwsFailure;

/// The bucket's versioning status, as `GetBucketVersioning` answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Versioning {
    /// A delete adds a delete marker; the bytes stay as a noncurrent version.
    Enabled,
    /// Versioning was on and is now off: a delete replaces the null version, destroying its bytes.
    Suspended,
    /// The bucket never had versioning: a delete destroys the bytes.
    NeverEnabled,
    /// A status this build does not know (S3 answered it as given): not taken for `Enabled`.
    Unrecognised(String),
}

impl Versioning {
    /// Whether a removed object's bytes stay behind as a noncurrent version, so that a delete or purge can be
    /// undone (`asset-sweeper undelete`): only when versioning is `Enabled`.
    pub fn keeps_removed_bytes(&self) -> bool {
        *self == Versioning::Enabled
    }

    /// The status as S3 names it (`NeverEnabled` for the absent one).
    pub fn as_str(&self) -> &str {
        match self {
            Versioning::Enabled => "Enabled",
            Versioning::Suspended => "Suspended",
            Versioning::NeverEnabled => "NeverEnabled",
            Versioning::Unrecognised(status) => status,
        }
    }

    /// Why deletes and purges must wait with this status, naming `bucket`; `None` when they need not.
    pub fn held_because(&self, bucket: &str) -> Option<String> {
        let why = match self {
            Versioning::Enabled => return None,
            Versioning::Suspended => format!("versioning of bucket {bucket} is Suspended"),
            Versioning::NeverEnabled => format!("bucket {bucket} has never had versioning enabled"),
            Versioning::Unrecognised(status) => {
                format!("bucket {bucket} answered the versioning status {status:?}, which this build does not know")
            }
        };
        Some(format!("{why}: a delete would destroy the bytes instead of keeping them as a noncurrent version"))
    }
}

impl fmt::Display for Versioning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Versioning {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// As S3 names it; a status this build does not know is read as [`Versioning::Unrecognised`], never as `Enabled`.
impl<'de> Deserialize<'de> for Versioning {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let status = String::deserialize(deserializer)?;
        Ok(match status.as_str() {
            "Enabled" => Versioning::Enabled,
            "Suspended" => Versioning::Suspended,
            "NeverEnabled" => Versioning::NeverEnabled,
            _ => Versioning::Unrecognised(status),
        })
    }
}

/// How long the bucket keeps a noncurrent version, from the lifecycle rules that count (see [`noncurrent_expiry`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoncurrentExpiry {
    /// The fewest `NoncurrentDays` of the rules that count: S3 honours the shorter of two expirations that apply
    /// to one object, so this is how long an undelete is sure to find the bytes under every rule.
    pub days: i32,
    /// The key prefixes the rules that count cover; empty when one of them covers the whole bucket.
    pub prefixes: Vec<String>,
}

/// What the bucket promises: whether a delete keeps the bytes, and for how long.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BucketSafety {
    /// Its versioning status.
    pub versioning: Versioning,
    /// Its noncurrent-version expiry; `None` when no rule counts, and the bytes of every delete are kept (and
    /// paid for) for ever.
    pub noncurrent_expiry: Option<NoncurrentExpiry>,
}

impl BucketSafety {
    /// Classifies what S3 answered: the versioning, and the lifecycle rules (none when the bucket has no lifecycle
    /// configuration).
    pub fn from_sdk(versioning: &GetBucketVersioningOutput, rules: &[LifecycleRule]) -> Self {
        BucketSafety { versioning: versioning_of(versioning), noncurrent_expiry: noncurrent_expiry(rules) }
    }

    /// Whether the product may destroy anything (delete, purge): only when a removal can be undone.
    pub fn destruction_allowed(&self) -> bool {
        self.versioning.keeps_removed_bytes()
    }
}

/// Why the bucket's configuration could not be read. Names the bucket.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BucketError {
    /// `GetBucketVersioning` failed.
    #[error("cannot read the versioning of bucket {bucket}: {cause}")]
    Versioning {
        /// The bucket.
        bucket: String,
        /// The failed call.
        #[source]
        cause: AwsFailure,
    },
    /// `GetBucketLifecycleConfiguration` failed (other than with `NoSuchLifecycleConfiguration`, which is an
    /// answer: no rules).
    #[error("cannot read the lifecycle configuration of bucket {bucket}: {cause}")]
    Lifecycle {
        /// The bucket.
        bucket: String,
        /// The failed call.
        #[source]
        cause: AwsFailure,
    },
}

/// Why deletes and purges must wait, given what reading `bucket`'s versioning gave; `None` when it is `Enabled`. A
/// status that could not be read is not proven, and holds them as surely as one that is off.
pub fn destruction_held(bucket: &str, versioning: &Result<Versioning, BucketError>) -> Option<String> {
    match versioning {
        Ok(versioning) => versioning.held_because(bucket),
        Err(e) => Some(format!("{e}: that a delete keeps the bytes as a noncurrent version is not proven")),
    }
}

/// Reads `bucket`'s versioning status: one `GetBucketVersioning` call.
pub async fn versioning(s3: &aws_sdk_s3::Client, bucket: &str) -> Result<Versioning, BucketError> {
    let answer = s3.get_bucket_versioning().bucket(bucket).send().await.map_err(|e| BucketError::Versioning {
        bucket: bucket.to_owned(),
        cause: AwsFailure::from_sdk(format!("GetBucketVersioning {bucket}"), &e),
    })?;
    Ok(versioning_of(&answer))
}

/// Reads what `bucket` promises: its versioning and its lifecycle rules. A failure of either call is an error: a
/// promise that could not be read is not proven.
pub async fn read(s3: &aws_sdk_s3::Client, bucket: &str) -> Result<BucketSafety, BucketError> {
    let versioning = versioning(s3, bucket).await?;
    let rules = match s3.get_bucket_lifecycle_configuration().bucket(bucket).send().await {
        Ok(answer) => answer.rules().to_vec(),
        Err(e) if e.as_service_error().and_then(ProvideErrorMetadata::code) == Some("NoSuchLifecycleConfiguration") => {
            Vec::new()
        }
        Err(e) => {
            return Err(BucketError::Lifecycle {
                bucket: bucket.to_owned(),
                cause: AwsFailure::from_sdk(format!("GetBucketLifecycleConfiguration {bucket}"), &e),
            });
        }
    };
    Ok(BucketSafety { versioning, noncurrent_expiry: noncurrent_expiry(&rules) })
}

/// The versioning status in S3's answer: no status at all is a bucket that never had versioning.
pub fn versioning_of(answer: &GetBucketVersioningOutput) -> Versioning {
    match answer.status() {
        Some(BucketVersioningStatus::Enabled) => Versioning::Enabled,
        Some(BucketVersioningStatus::Suspended) => Versioning::Suspended,
        None => Versioning::NeverEnabled,
        Some(other) => Versioning::Unrecognised(other.as_str().to_owned()),
    }
}

/// The noncurrent-version expiry the rules give, when one counts. A rule counts when it is `Enabled`; has a
/// `NoncurrentVersionExpiration` with `NoncurrentDays` and without `NewerNoncurrentVersions` (with it, S3 keeps
/// the newest N noncurrent versions of every key for ever, and a deleted asset's bytes are its newest); and selects
/// objects by key prefix alone: no filter, an empty prefix (the whole bucket), or one prefix — in the filter, in
/// the filter's `And` without tags or sizes, or in the legacy `Prefix` field. A rule limited by tags or object
/// size does not count: nothing tags the product's objects, and a size limit leaves some of them out.
pub fn noncurrent_expiry(rules: &[LifecycleRule]) -> Option<NoncurrentExpiry> {
    let mut days: Option<i32> = None;
    let mut whole_bucket = false;
    let mut prefixes = Vec::new();
    for rule in rules {
        if *rule.status() != ExpirationStatus::Enabled {
            continue;
        }
        let Some(expiration) = rule.noncurrent_version_expiration() else { continue };
        let (Some(rule_days), None) = (expiration.noncurrent_days(), expiration.newer_noncurrent_versions()) else {
            continue;
        };
        let prefix = match rule.filter() {
            Some(filter) => match prefix_only(filter) {
                Some(prefix) => prefix,
                None => continue,
            },
            // The field S3 kept before filters existed, and still answers for rules written that way.
            #[allow(deprecated)]
            None => rule.prefix().unwrap_or_default(),
        };
        days = Some(days.map_or(rule_days, |d| d.min(rule_days)));
        if prefix.is_empty() {
            whole_bucket = true;
        } else {
            prefixes.push(prefix.to_owned());
        }
    }
    if whole_bucket {
        prefixes.clear();
    }
    prefixes.sort();
    prefixes.dedup();
    days.map(|days| NoncurrentExpiry { days, prefixes })
}

/// The prefix a filter selects by, when it selects by nothing else (`""` for the whole bucket).
fn prefix_only(filter: &LifecycleRuleFilter) -> Option<&str> {
    if filter.tag().is_some() || filter.object_size_greater_than().is_some() || filter.object_size_less_than().is_some()
    {
        return None;
    }
    match filter.and() {
        None => Some(filter.prefix().unwrap_or_default()),
        Some(and) => {
            let sized = and.object_size_greater_than().is_some() || and.object_size_less_than().is_some();
            (and.tags().is_empty() && !sized && filter.prefix().is_none()).then(|| and.prefix().unwrap_or_default())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_s3::types::{LifecycleRuleAndOperator, NoncurrentVersionExpiration, Tag};

    fn answer(status: Option<BucketVersioningStatus>) -> GetBucketVersioningOutput {
        GetBucketVersioningOutput::builder().set_status(status).build()
    }

    fn expiring(days: i32) -> NoncurrentVersionExpiration {
        NoncurrentVersionExpiration::builder().noncurrent_days(days).build()
    }

    fn rule(status: ExpirationStatus, expiration: Option<NoncurrentVersionExpiration>) -> LifecycleRule {
        LifecycleRule::builder()
            .status(status)
            .set_noncurrent_version_expiration(expiration)
            .build()
            .expect("a rule with a status")
    }

    fn filtered(days: i32, filter: LifecycleRuleFilter) -> LifecycleRule {
        LifecycleRule::builder()
            .status(ExpirationStatus::Enabled)
            .noncurrent_version_expiration(expiring(days))
            .filter(filter)
            .build()
            .expect("a rule with a status")
    }

    fn expiry(days: i32, prefixes: &[&str]) -> Option<NoncurrentExpiry> {
        Some(NoncurrentExpiry { days, prefixes: prefixes.iter().map(|p| (*p).to_owned()).collect() })
    }

    #[test]
    fn only_enabled_versioning_allows_destruction_and_no_status_is_a_bucket_never_versioned() {
        let safety = |status| BucketSafety::from_sdk(&answer(status), &[]);
        let enabled = safety(Some(BucketVersioningStatus::Enabled));
        assert_eq!(enabled.versioning, Versioning::Enabled);
        assert!(enabled.destruction_allowed());
        assert_eq!(enabled.versioning.held_because("assets"), None);

        let suspended = safety(Some(BucketVersioningStatus::Suspended));
        assert_eq!(suspended.versioning, Versioning::Suspended);
        assert!(!suspended.destruction_allowed());
        let why = suspended.versioning.held_because("assets").expect("held");
        assert!(why.starts_with("versioning of bucket assets is Suspended: "), "{why}");

        let never = safety(None);
        assert_eq!(never.versioning, Versioning::NeverEnabled);
        assert!(!never.destruction_allowed());
        assert!(never.versioning.held_because("assets").is_some_and(|w| w.contains("bucket assets has never")));

        let denied = AwsFailure {
            operation: "GetBucketVersioning assets".into(),
            cause: crate::aws::AwsCause::Service {
                status: 403,
                code: "AccessDenied".into(),
                message: "no".into(),
                retryable: false,
            },
        };
        let unread = Err(BucketError::Versioning { bucket: "assets".into(), cause: denied });
        let why = destruction_held("assets", &unread).expect("not proven is held");
        assert!(
            why.starts_with("cannot read the versioning of bucket assets: GetBucketVersioning assets failed"),
            "{why}"
        );
        assert_eq!(destruction_held("assets", &Ok(Versioning::Enabled)), None);

        let unknown = safety(Some(BucketVersioningStatus::from("Frozen")));
        assert_eq!(unknown.versioning, Versioning::Unrecognised("Frozen".into()));
        assert!(!unknown.destruction_allowed(), "a status this build does not know is not Enabled");
        assert_eq!(
            serde_json::to_value(&never).expect("json"),
            serde_json::json!({
                "versioning": "NeverEnabled", "noncurrent_expiry": null
            })
        );
    }

    #[test]
    fn a_status_read_back_from_a_run_row_is_the_one_written_and_an_unknown_one_is_never_enabled() {
        for status in [
            Versioning::Enabled,
            Versioning::Suspended,
            Versioning::NeverEnabled,
            Versioning::Unrecognised("Paused".into()),
        ] {
            let stored = serde_json::to_value(&status).expect("json");
            assert_eq!(serde_json::from_value::<Versioning>(stored).expect("read back"), status);
        }
        let unknown: Versioning = serde_json::from_value(serde_json::json!("enabled")).expect("read");
        assert!(!unknown.keeps_removed_bytes(), "{unknown:?}");
    }

    #[test]
    #[allow(deprecated)] // the legacy `Prefix` field, which S3 still answers for rules written with it
    fn an_enabled_noncurrent_expiry_over_the_whole_bucket_or_a_prefix_counts() {
        use ExpirationStatus::Enabled;
        assert_eq!(noncurrent_expiry(&[]), None, "no lifecycle configuration");
        // No filter, an empty filter, an empty prefix, the legacy empty `Prefix`: the whole bucket.
        assert_eq!(noncurrent_expiry(&[rule(Enabled, Some(expiring(30)))]), expiry(30, &[]));
        assert_eq!(noncurrent_expiry(&[filtered(30, LifecycleRuleFilter::builder().build())]), expiry(30, &[]));
        assert_eq!(
            noncurrent_expiry(&[filtered(30, LifecycleRuleFilter::builder().prefix("").build())]),
            expiry(30, &[])
        );
        let legacy = LifecycleRule::builder().status(Enabled).prefix("").noncurrent_version_expiration(expiring(7));
        assert_eq!(noncurrent_expiry(&[legacy.build().expect("rule")]), expiry(7, &[]));
        // A prefix, bare, inside `And` alone, or legacy.
        let uploads = LifecycleRuleFilter::builder().prefix("uploads/").build();
        assert_eq!(noncurrent_expiry(&[filtered(30, uploads)]), expiry(30, &["uploads/"]));
        let and = LifecycleRuleAndOperator::builder().prefix("images/").build();
        assert_eq!(
            noncurrent_expiry(&[filtered(10, LifecycleRuleFilter::builder().and(and).build())]),
            expiry(10, &["images/"])
        );
        let legacy =
            LifecycleRule::builder().status(Enabled).prefix("docs/").noncurrent_version_expiration(expiring(5));
        assert_eq!(noncurrent_expiry(&[legacy.build().expect("rule")]), expiry(5, &["docs/"]));
        // The shortest of the rules that count; a rule over the whole bucket makes the prefixes moot.
        let rules =
            [filtered(30, LifecycleRuleFilter::builder().prefix("b/").build()), rule(Enabled, Some(expiring(90)))];
        assert_eq!(noncurrent_expiry(&rules), expiry(30, &[]));
        let rules = [
            filtered(30, LifecycleRuleFilter::builder().prefix("b/").build()),
            filtered(20, LifecycleRuleFilter::builder().prefix("a/").build()),
        ];
        assert_eq!(noncurrent_expiry(&rules), expiry(20, &["a/", "b/"]));
    }

    #[test]
    fn a_disabled_rule_a_rule_without_noncurrent_expiry_and_one_limited_by_tag_size_or_count_do_not_count() {
        use ExpirationStatus::{Disabled, Enabled};
        assert_eq!(noncurrent_expiry(&[rule(Disabled, Some(expiring(30)))]), None);
        assert_eq!(noncurrent_expiry(&[rule(Enabled, None)]), None, "current versions only");
        let tag = Tag::builder().key("k").value("v").build().expect("tag");
        assert_eq!(noncurrent_expiry(&[filtered(30, LifecycleRuleFilter::builder().tag(tag.clone()).build())]), None);
        let big = LifecycleRuleFilter::builder().object_size_greater_than(1_000_000).build();
        assert_eq!(noncurrent_expiry(&[filtered(30, big)]), None, "small objects left out");
        let tagged = LifecycleRuleAndOperator::builder().prefix("images/").tags(tag).build();
        assert_eq!(noncurrent_expiry(&[filtered(30, LifecycleRuleFilter::builder().and(tagged).build())]), None);
        let sized = LifecycleRuleAndOperator::builder().prefix("images/").object_size_less_than(10).build();
        assert_eq!(noncurrent_expiry(&[filtered(30, LifecycleRuleFilter::builder().and(sized).build())]), None);
        // The newest noncurrent version of a deleted asset is kept for ever under `NewerNoncurrentVersions`.
        let keep_newest = NoncurrentVersionExpiration::builder().noncurrent_days(30).newer_noncurrent_versions(1);
        assert_eq!(noncurrent_expiry(&[rule(Enabled, Some(keep_newest.build()))]), None);
    }
}
