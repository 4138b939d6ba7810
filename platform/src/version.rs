//! What a build says about itself.

/// The commit the build came from (`+dirty` when tracked files differed from it at build time), or `unknown`
/// when it was built without its git history and without `ASSET_SWEEPER_COMMIT`.
pub const COMMIT: &str = env!("ASSET_SWEEPER_COMMIT");

/// Written into every run record, schema verdict and audit row: the product's version and its commit.
pub const CODE_VERSION: &str = concat!("asset-sweeper@", env!("CARGO_PKG_VERSION"), "+", env!("ASSET_SWEEPER_COMMIT"));
