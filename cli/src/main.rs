//! `asset-sweeper`: the operator's tool. It reads the same settings as the functions (docs/operating.md);
//! every command prints for people, or JSON with `--json`, and a refusal or a failure is one line on stderr with
//! exit code 2.

// The commands, by what they are for.
mod decisions;
mod dry_runs;
mod health;
mod ways_back;
// Setting it up.
mod guards;
mod migrate;
// What several commands share: the settings and connections, the money figures, the records step's views.
mod connect;
mod money;
mod retention;

use decisions::{approve, hold, pin};
use dry_runs::{discover, explain, plan, reconcile};
use health::{references, report, status, usage};
use ways_back::{redrive, restore, undelete};

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde_json::Value;

#[derive(Parser)]
#[command(
    name = "asset-sweeper",
    version,
    about = "Operate asset-sweeper: its health, its decisions, and the ways back."
)]
struct Cli {
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The health page; exits 1 when something needs a person.
    Status(status::Args),
    /// What the next discovery batches would find (with --dry-run): assets nobody released that nothing refers to.
    Discover(discover::Args),
    /// Which records keep an asset, when it becomes due and why, and every decision about it.
    Explain(explain::Args),
    /// A dry run of the next pass: what it would claim and what settlement would decide. Changes nothing.
    Plan(plan::Args),
    /// The bucket against the rows, both ways: bytes no row knows and rows whose bytes are gone (--dry-run writes
    /// nothing); exits 1 when a prefix is shared with another writer or an asset's bytes are gone.
    Reconcile(reconcile::Args),
    /// The effective reference map and the schema check's verdict on each source; exits 1 when it refuses.
    References,
    /// The failed assets the dead-letter queue names made claimable again, and their messages moved back; every
    /// other message stays on the dead-letter queue.
    Redrive(redrive::Args),
    /// A deleted or purged asset back, from the bucket's kept versions and its audit row.
    Undelete(undelete::Args),
    /// Apply the asset-sweeper migrations (needs only DATABASE_URL or DATABASE_SECRET_ARN).
    Migrate,
    /// Release a braked workspace or retention rule for the passes of the next hours, or a prefix for adoption,
    /// recorded with who and why.
    Approve(approve::Args),
    /// A workspace's storage against its quota: held, stored, waiting for removal and headroom.
    Usage(usage::Args),
    /// What was found, freed, retired, restored and held per workspace over a period, with the money freed and
    /// still waiting; `--html FILE` writes it as one self-contained page with charts.
    Report(report::Args),
    /// Bring a retired asset back to `attached`, its bytes checked (and brought back from a kept version).
    Restore(restore::Args),
    /// The reference guards on the application's non-foreign-key sources (needs only DATABASE_URL or
    /// DATABASE_SECRET_ARN).
    Guards {
        #[command(subcommand)]
        command: guards::Command,
    },
    /// Windows in which nothing is deleted or purged, in any workspace: declare one around a migration, list them,
    /// release one (needs only DATABASE_URL or DATABASE_SECRET_ARN).
    Hold {
        #[command(subcommand)]
        command: hold::Command,
    },
    /// Keep an asset, a workspace or a key prefix as it is, for a reference the database cannot show: add, list,
    /// release (needs only DATABASE_URL or DATABASE_SECRET_ARN).
    Pin {
        #[command(subcommand)]
        command: pin::Command,
    },
}

/// What a command prints: a line or more for people, and the same facts as JSON; and what, if anything, needs
/// a person (the exit code says so).
pub struct Output {
    text: String,
    json: Value,
    attention: Vec<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // One line, like every other refusal: the usage that follows it is one `--help` away.
            let rendered = e.render().to_string();
            let message: Vec<&str> = rendered.lines().take_while(|l| !l.trim().is_empty()).map(str::trim).collect();
            eprintln!("asset-sweeper: {}", message.join(" ").trim_start_matches("error: "));
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Status(args) => status::run(args).await,
        Command::Discover(args) => discover::run(args).await,
        Command::Explain(args) => explain::run(args).await,
        Command::Plan(args) => plan::run(args).await,
        Command::Reconcile(args) => reconcile::run(args).await,
        Command::References => references::run().await,
        Command::Redrive(args) => redrive::run(args).await,
        Command::Undelete(args) => undelete::run(args).await,
        Command::Migrate => migrate::run().await,
        Command::Approve(args) => approve::run(args).await,
        Command::Usage(args) => usage::run(args).await,
        Command::Report(args) => report::run(args).await,
        Command::Restore(args) => restore::run(args).await,
        Command::Guards { command } => guards::run(command).await,
        Command::Hold { command } => hold::run(command).await,
        Command::Pin { command } => pin::run(command).await,
    };
    match result {
        Ok(output) => {
            let page = if cli.json { output.json.to_string() } else { output.text };
            // A reader that stopped reading (`status | head -1`) is no failure of the command: it exits as it would
            // have, where `println!` panicked on the closed pipe.
            let mut stdout = std::io::stdout().lock();
            if let Err(e) = writeln!(stdout, "{page}").and_then(|()| stdout.flush())
                && e.kind() != std::io::ErrorKind::BrokenPipe
            {
                eprintln!("asset-sweeper: could not write the output: {e}");
                return ExitCode::from(2);
            }
            if output.attention.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) }
        }
        Err(e) => {
            eprintln!("asset-sweeper: {e:#}");
            ExitCode::from(2)
        }
    }
}
