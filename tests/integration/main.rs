//! One test binary for every integration test (one link, one harness).

mod harness;
mod schema;
mod sweep;
