//! The versioned message the sweep sends and the consumer reads. It only names which asset to look at: the
//! consumer takes workspace, storage key and action from the locked row, never from here (invariant 7).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use platform::ids::{AssetId, WorkspaceId};

/// The message format this build writes and reads.
/// The message format this build writes and reads.
pub const MESSAGE_VERSION: u32 = 1;

/// One claimed asset to settle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CleanupMessage {
    /// The format version ([`MESSAGE_VERSION`]).
    pub version: u32,
    /// The asset to settle.
    pub asset_id: AssetId,
    /// The workspace the sweep found it in: checked against the row, never trusted (invariant 7).
    pub workspace_id: WorkspaceId,
    /// The lease token the sweep set on the row when it claimed it.
    pub claim_token: Uuid,
    /// The pass that claimed it.
    pub sweep_run_id: Uuid,
}

/// Why a message body is not a cleanup message this build can read.
#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    /// Not JSON, or not the fields of a cleanup message.
    #[error("message body is not a cleanup message: {0}")]
    Malformed(#[from] serde_json::Error),
    /// A version this build does not read.
    #[error("cleanup message version {found} is not supported (this build reads version {MESSAGE_VERSION})")]
    UnsupportedVersion {
        /// The version the message says it is.
        found: u32,
    },
}

impl CleanupMessage {
    /// A current-version message for one claim.
    pub fn new(asset_id: AssetId, workspace_id: WorkspaceId, claim_token: Uuid, sweep_run_id: Uuid) -> Self {
        CleanupMessage { version: MESSAGE_VERSION, asset_id, workspace_id, claim_token, sweep_run_id }
    }

    /// The JSON body sent to SQS.
    pub fn to_body(&self) -> String {
        // A struct of ids and integers always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads a body, refusing other versions by name rather than misreading them.
    pub fn parse(body: &str) -> Result<Self, MessageError> {
        #[derive(Deserialize)]
        struct Versioned {
            version: u32,
        }
        let Versioned { version } = serde_json::from_str(body)?;
        if version != MESSAGE_VERSION {
            return Err(MessageError::UnsupportedVersion { found: version });
        }
        Ok(serde_json::from_str(body)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_round_trips_through_its_body() {
        let m =
            CleanupMessage::new(AssetId(Uuid::new_v4()), WorkspaceId(Uuid::new_v4()), Uuid::new_v4(), Uuid::new_v4());
        let body = m.to_body();
        assert!(body.starts_with(r#"{"version":1,"asset_id":""#), "{body}");
        assert_eq!(CleanupMessage::parse(&body).expect("round trip"), m);
    }

    #[test]
    fn other_versions_and_malformed_bodies_are_named() {
        let err = CleanupMessage::parse(r#"{"version":2,"asset_id":"x"}"#).expect_err("v2");
        assert_eq!(err.to_string(), "cleanup message version 2 is not supported (this build reads version 1)");
        let err = CleanupMessage::parse("hello").expect_err("not json");
        assert!(err.to_string().starts_with("message body is not a cleanup message"), "{err}");
        let err = CleanupMessage::parse(r#"{"version":1,"asset_id":"not-a-uuid"}"#).expect_err("bad id");
        assert!(err.to_string().contains("asset_id") || err.to_string().contains("UUID"), "{err}");
    }
}
