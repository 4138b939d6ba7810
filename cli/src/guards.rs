//! `guards install`: the reference guard on every source that is not a foreign key, and none on a column that
//! is no longer a source. A table at a time, each waiting briefly for its lock: a busy table is named and left for
//! the next run, and the application's writes to the others never wait on it. Idempotent: a guard in place is not
//! touched. The schema check refuses while a source lacks its guard.

use std::time::Duration;

use anyhow::Context;
use schema::guards::Patience;
use serde_json::json;

use crate::{Output, connect};

#[derive(clap::Subcommand)]
pub(crate) enum Command {
    /// Put the guard each source needs in place (and drop guards no source needs); needs the right to create
    /// triggers on the application's tables.
    Install {
        /// The longest one try waits for a table's lock (writes to that table queue behind it meanwhile).
        #[arg(long, default_value = "2s")]
        lock_timeout: humantime::Duration,
        /// Tries per table before it is named as blocked and the others go on.
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
        attempts: u32,
    },
}

pub(crate) async fn run(command: Command) -> anyhow::Result<Output> {
    match command {
        Command::Install { lock_timeout, attempts } => {
            install(Patience { lock_timeout: Duration::from(lock_timeout), attempts }).await
        }
    }
}

/// The database, nothing else: an owner installing guards from a deploy script has no queue or bucket to name, and
/// no schema check runs first (it reads application rows; the guards need only the catalog).
async fn install(patience: Patience) -> anyhow::Result<Output> {
    let pool = connect::database().await?;
    let mut conn = pool.acquire().await.context("cannot reach the database")?;
    let (report, unguarded) =
        schema::check::install_guards(&mut conn, patience).await.context("cannot install the reference guards")?;
    let mut text =
        format!("{} reference guard(s) installed, {} already in place", report.installed.len(), report.in_place.len());
    for installed in &report.installed {
        text.push_str(&format!("\n  {}  {}", installed.source, installed.trigger));
    }
    for (table, trigger) in &report.removed {
        text.push_str(&format!("\n  removed {trigger} from {table}: no longer a source"));
    }
    let mut attention: Vec<String> =
        report.blocked.iter().map(|b| format!("{}: not changed: {}", b.table, b.reason)).collect();
    attention.extend(unguarded.iter().map(ToString::to_string));
    for problem in &attention {
        text.push_str(&format!("\n  ! {problem}"));
    }
    Ok(Output {
        text,
        json: json!({
            "installed": report.installed,
            "in_place": report.in_place,
            "removed": report.removed,
            "blocked": report.blocked,
            "unguarded": unguarded,
        }),
        attention,
    })
}
