//! Domain newtypes, so an asset id can never be passed where a workspace id is expected.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The primary key of one row in `assets`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, sqlx::Type)]
#[serde(transparent)]
#[sqlx(transparent)]
pub struct AssetId(pub Uuid);

/// The workspace (tenant) that owns an asset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, sqlx::Type)]
#[serde(transparent)]
#[sqlx(transparent)]
pub struct WorkspaceId(pub Uuid);

macro_rules! display_inner {
    ($($t:ty),*) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }
    )*};
}
display_inner!(AssetId, WorkspaceId);
