//! What the product would do, shown and never done: the next pass, one asset's judgement, discovery's next batches,
//! the bucket against the rows.

pub(crate) mod discover;
pub(crate) mod explain;
pub(crate) mod plan;
pub(crate) mod reconcile;
