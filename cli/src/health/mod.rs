//! How it is doing, read and never changed: the health page, a workspace's storage, the report of a period, and the
//! reference map the schema check sees.

pub(crate) mod references;
pub(crate) mod report;
pub(crate) mod status;
pub(crate) mod usage;
