//! The asset bucket's promises as a pass found them (invariant 18), read once a pass and kept in the run row
//! (`reason.bucket`) and the metrics line: whether its versioning lets a delete be undone, and whether a lifecycle
//! rule expires the bytes deletes leave behind. The sweep destroys nothing: the consumer reads the versioning again
//! before each batch and holds deletes and purges while it is not `Enabled`. This record is what `status` and the
//! alarms see.

use platform::bucket::{self, BucketSafety, NoncurrentExpiry, Versioning};
use serde::{Deserialize, Serialize};

/// Whether the pass found deletes and purges allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Destruction {
    /// Versioning is `Enabled`: a delete keeps the bytes as a noncurrent version.
    Allowed,
    /// Versioning is off, or could not be read: the consumer defers every delete and purge.
    Held,
}

impl std::fmt::Display for Destruction {
    /// As the run row stores it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Destruction::Allowed => "allowed",
            Destruction::Held => "held",
        })
    }
}

/// The bucket as one pass found it: `reason.bucket` in the run row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketCheck {
    /// The asset bucket.
    pub bucket: String,
    /// Its versioning status; `null` when it could not be read.
    pub versioning: Option<Versioning>,
    /// Its noncurrent-version expiry, when a rule counts (`platform::bucket::noncurrent_expiry` says which do).
    pub noncurrent_expiry: Option<NoncurrentExpiry>,
    /// Whether deletes and purges may happen.
    pub destruction: Destruction,
    /// Why they may not, naming the bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_because: Option<String>,
    /// Why what deletes leave behind may be kept, and paid for, for ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_warning: Option<String>,
}

impl BucketCheck {
    /// Reads the bucket `name` with `s3` (two calls). Without a client, or when a call fails, nothing is proven:
    /// destruction is recorded held, with why.
    pub async fn read(s3: Option<&aws_sdk_s3::Client>, name: &str) -> Self {
        let read = match s3 {
            Some(s3) => bucket::read(s3, name).await.map_err(|e| e.to_string()),
            None => Err(format!("this sweep has no S3 client, so bucket {name} was not read")),
        };
        Self::of(name, read)
    }

    /// What a read of `bucket` comes to: the bucket's promises, or why they could not be read.
    pub fn of(bucket: &str, read: Result<BucketSafety, String>) -> Self {
        match read {
            Ok(safety) => {
                let held_because = safety.versioning.held_because(bucket);
                let cost_warning = safety.noncurrent_expiry.is_none().then(|| {
                    format!(
                        "no enabled lifecycle rule of bucket {bucket} expires noncurrent versions over the whole \
                         bucket or a prefix: the bytes every delete and purge leaves behind are kept, and paid for, \
                         for ever"
                    )
                });
                BucketCheck {
                    bucket: bucket.to_owned(),
                    destruction: if safety.destruction_allowed() { Destruction::Allowed } else { Destruction::Held },
                    versioning: Some(safety.versioning),
                    noncurrent_expiry: safety.noncurrent_expiry,
                    held_because,
                    cost_warning,
                }
            }
            Err(why) => BucketCheck {
                bucket: bucket.to_owned(),
                versioning: None,
                noncurrent_expiry: None,
                destruction: Destruction::Held,
                held_because: Some(format!("not proven that a delete keeps the bytes: {why}")),
                cost_warning: Some(format!("not proven that noncurrent versions expire: {why}")),
            },
        }
    }

    /// Deletes and purges are held: the metric `BucketUnprotected`.
    pub fn unprotected(&self) -> bool {
        self.destruction == Destruction::Held
    }

    /// No noncurrent-version expiry is known to count: the metric `NoncurrentExpiryMissing`.
    pub fn expiry_missing(&self) -> bool {
        self.noncurrent_expiry.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_record_says_why_destruction_is_held_and_what_the_missing_expiry_costs() {
        let enabled = BucketSafety {
            versioning: Versioning::Enabled,
            noncurrent_expiry: Some(NoncurrentExpiry { days: 30, prefixes: Vec::new() }),
        };
        let fine = BucketCheck::of("assets", Ok(enabled));
        assert!(!fine.unprotected() && !fine.expiry_missing());
        assert_eq!(
            serde_json::to_value(&fine).expect("json"),
            json!({
                "bucket": "assets", "versioning": "Enabled", "destruction": "allowed",
                "noncurrent_expiry": { "days": 30, "prefixes": [] },
            })
        );

        let suspended =
            BucketCheck::of("assets", Ok(BucketSafety { versioning: Versioning::Suspended, noncurrent_expiry: None }));
        assert!(suspended.unprotected() && suspended.expiry_missing());
        assert!(suspended.held_because.as_deref().is_some_and(|w| w.contains("bucket assets is Suspended")));
        assert!(suspended.cost_warning.as_deref().is_some_and(|w| w.contains("for ever")));

        let denied = BucketCheck::of("assets", Err("cannot read the versioning of bucket assets: denied".into()));
        assert!(denied.unprotected() && denied.expiry_missing() && denied.versioning.is_none());
        assert!(denied.held_because.as_deref().is_some_and(|w| w.starts_with("not proven")), "{denied:?}");

        // What the run row keeps reads back as what was written: the costs and `status` read it so.
        for check in [fine, suspended, denied] {
            let stored = serde_json::to_value(&check).expect("json");
            assert_eq!(serde_json::from_value::<BucketCheck>(stored).expect("read back"), check);
        }
    }
}
