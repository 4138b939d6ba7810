//! One test binary for every integration test (one link, one harness).

// Counts in tests and benchmarks are small and known: their casts, assertions included, stay as written.
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]

mod adoption;
mod bucket;
mod census;
mod cli;
mod consumer;
mod discovery;
mod docs;
mod e2e;
mod effect;
mod engine;
mod findings;
mod harness;
mod holds;
mod hostile;
mod infra;
mod lambda_executor;
mod launcher;
mod midflight;
mod money;
mod observed;
mod observed_e2e;
mod pipeline;
mod quota;
mod reconcile;
mod records;
mod report;
mod schema;
mod settings;
mod shapes;
mod soak;
mod sweep;
mod zoo;
