//! The library both Lambda functions and the operator CLI share. It has no Lambda runtime dependency: settings,
//! the schema and database access, AWS clients, the domain's rules and types, and every write the audit trail
//! keeps. The function crates hold only their handlers; every rule more than one binary needs lives here.
//!
//! "Invariant N" in comments throughout the workspace is the Nth safety invariant of docs/design.md.

#![warn(missing_docs)]

pub mod audit;
pub mod aws;
pub mod brake;
pub mod census;
pub mod db;
pub mod discovery;
pub mod guards;
pub mod ids;
pub mod lifecycle;
pub mod message;
pub mod metrics;
pub mod objects;
pub mod queues;
pub mod quota;
pub mod recheck;
pub mod reconcile;
pub mod records;
pub mod references;
pub mod restore;
pub mod runs;
pub mod secrets;
pub mod settings;
pub mod text_enum;
pub mod verdict;
pub mod version;

pub use ids::{AssetId, WorkspaceId};
pub use message::CleanupMessage;
pub use settings::{Settings, SettingsError};
