//! Structured JSON logs, one line per event, with the current span's fields (asset and workspace ids).

use tracing_subscriber::EnvFilter;

/// Installs the JSON subscriber; `RUST_LOG` filters (default `info`). Safe to call more than once.
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(true)
        .with_span_list(false)
        .with_ansi(false)
        .try_init();
}
