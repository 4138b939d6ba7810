//! `asset-sweeper`: the operator's tool. It reads the same settings as the functions (DESIGN.md: Operators);
//! every command prints for people, or JSON with `--json`, and a refusal or a failure is one line on stderr with
//! exit code 2.

mod approve;
mod connect;
mod migrate;
mod restore;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde_json::Value;

#[derive(Parser)]
#[command(name = "asset-sweeper", version, about = "Operate asset-sweeper: migrations, brake approvals, restores.")]
struct Cli {
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply the asset-sweeper migrations (needs only DATABASE_URL or DATABASE_SECRET_ARN).
    Migrate,
    /// Release a braked workspace for the passes of the next hours, recorded with who and why.
    Approve(approve::Args),
    /// Bring a retired asset back to `attached`, its bytes checked (and brought back from a kept version).
    Restore(restore::Args),
}

/// What a command prints: a line or more for people, and the same facts as JSON.
pub struct Output {
    text: String,
    json: Value,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Migrate => migrate::run().await,
        Command::Approve(args) => approve::run(args).await,
        Command::Restore(args) => restore::run(args).await,
    };
    match result {
        Ok(output) if cli.json => {
            println!("{}", output.json);
            ExitCode::SUCCESS
        }
        Ok(output) => {
            println!("{}", output.text);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("asset-sweeper: {e:#}");
            ExitCode::from(2)
        }
    }
}
