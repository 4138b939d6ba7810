//! `migrate`: the same embedded migrations and SQL definitions the functions were built with.

use serde_json::json;

use crate::{Output, connect};

pub(crate) async fn run() -> anyhow::Result<Output> {
    let pool = connect::database().await?;
    let applied = migrator::migrate(&pool).await?;
    let version = migrator::migrator().iter().map(|m| m.version).max().unwrap_or(0);
    let definitions = match applied.definitions.as_slice() {
        [] => String::new(),
        files => format!("; SQL definitions applied from {}", files.join(", ")),
    };
    let mut text =
        format!("applied {} migration(s); the schema is at version {version}{definitions}", applied.migrations);
    let mut warnings = Vec::new();
    if !applied.detector {
        warnings.push(migrator::no_detector(&applied.role));
    }
    for warning in &warnings {
        text.push_str(&format!("\n  ~ {warning}"));
    }
    Ok(Output {
        text,
        json: json!({
            "applied": applied.migrations,
            "version": version,
            "definitions": applied.definitions,
            "detector": applied.detector,
            "warnings": warnings,
        }),
        attention: Vec::new(),
    })
}
