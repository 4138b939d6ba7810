//! The library both Lambda functions share. It has no Lambda runtime dependency: settings, the schema and
//! database access, AWS clients, and the domain types the functions agree on.

pub mod aws;
pub mod db;
pub mod ids;
pub mod message;
pub mod metrics;
pub mod queues;
pub mod recheck;
pub mod references;
pub mod secrets;
pub mod settings;
pub mod telemetry;
pub mod verdict;

pub use ids::{AssetId, StorageKey, WorkspaceId};
pub use message::CleanupMessage;
pub use settings::{Settings, SettingsError};
