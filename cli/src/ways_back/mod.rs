//! The ways back from a decision: an asset undeleted or restored (one, or every one a pass removed or retired), and
//! failed messages sent round again.

pub(crate) mod redrive;
pub(crate) mod restore;
pub(crate) mod undelete;
pub(crate) mod undo;
