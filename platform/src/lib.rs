//! The ground every subsystem of asset-sweeper stands on, and nothing of the lifecycle: ids and typed text enums,
//! the build's version, the database pool and the limits of every session, AWS clients and secrets, object storage
//! and queues, what the bucket promises (versioning, noncurrent-version expiry), the bucket's key layout, SQL
//! quoting, metrics, the audit trail every settlement writes, and what an operator's approval covers.
//!
//! "Invariant N" in comments throughout the workspace is the Nth safety invariant of docs/design.md.

#![warn(missing_docs)]

pub mod approval;
pub mod audit;
pub mod aws;
pub mod bucket;
pub mod db;
pub mod ids;
pub mod keys;
pub mod location;
pub mod metrics;
pub mod objects;
pub mod queues;
pub mod recorded;
pub mod secrets;
pub mod sql;
pub mod step;
pub mod text_enum;
pub mod version;

pub use ids::{AssetId, WorkspaceId};
