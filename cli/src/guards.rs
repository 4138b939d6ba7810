//! `guards install`: the reference guard on every source that is not a foreign key, and none on a column that
//! is no longer a source. Idempotent; one transaction. The schema check refuses while a source lacks its guard.

use anyhow::Context;
use schema::{self, SchemaCheckError, SchemaProblem};
use serde_json::json;

use crate::{Output, connect};

#[derive(clap::Subcommand)]
pub(crate) enum Command {
    /// Put the guard each source needs in place (and drop guards no source needs); needs the right to create
    /// triggers on the application's tables.
    Install,
}

pub(crate) async fn run(command: Command) -> anyhow::Result<Output> {
    match command {
        Command::Install => install().await,
    }
}

/// The database and the schema check's own settings, nothing else: an owner installing guards from a deploy
/// script has no queue or bucket to name.
async fn install() -> anyhow::Result<Output> {
    let options = settings::Settings::schema_check_from_env()?;
    let pool = connect::database().await?;
    let mut conn = pool.acquire().await.context("cannot reach the database")?;
    let report =
        schema::check::install_guards(&mut conn, options).await.context("cannot install the reference guards")?;
    // Read back through the schema check itself: what the next pass will find.
    let unguarded: Vec<SchemaProblem> = match schema::check(&mut conn, options).await {
        Ok(_) => Vec::new(),
        Err(SchemaCheckError::Refused(refusal)) => {
            refusal.problems.into_iter().filter(|p| matches!(p, SchemaProblem::UnguardedSource { .. })).collect()
        }
        Err(SchemaCheckError::Database(e)) => return Err(e).context("cannot read the guards back"),
    };
    let mut text = format!("{} reference guard(s) in place", report.installed.len());
    for installed in &report.installed {
        text.push_str(&format!("\n  {}  {}", installed.source, installed.trigger));
    }
    for (table, trigger) in &report.removed {
        text.push_str(&format!("\n  removed {trigger} from {table}: no longer a source"));
    }
    let attention: Vec<String> = unguarded.iter().map(ToString::to_string).collect();
    for problem in &attention {
        text.push_str(&format!("\n  ! {problem}"));
    }
    Ok(Output {
        text,
        json: json!({ "installed": report.installed, "removed": report.removed, "unguarded": unguarded }),
        attention,
    })
}
