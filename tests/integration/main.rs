//! One test binary for every integration test (one link, one harness).

mod consumer;
mod docs;
mod e2e;
mod harness;
mod infra;
mod lambda_executor;
mod launcher;
mod schema;
mod settings;
mod soak;
mod sweep;
