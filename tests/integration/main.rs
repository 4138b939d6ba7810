//! One test binary for every integration test (one link, one harness).

mod consumer;
mod harness;
mod infra;
mod schema;
mod settings;
mod soak;
mod sweep;
