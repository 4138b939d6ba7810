//! `demo`: the main job end to end on local infrastructure. Run through `scripts/demo`, which provides Postgres
//! and LocalStack; this binary does the rest and prints the report (progress on stderr, the report on stdout).
//!
//!   DATABASE_URL=postgres://… demo [--stack NAME] [--json]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use demo::report::Report;
use demo::{Clients, catalog, deploy, drive};
use sqlx::postgres::PgPoolOptions;

const USAGE: &str = "usage: DATABASE_URL=postgres://... demo [--stack NAME] [--json]";

struct Args {
    stack: String,
    json: bool,
}

fn args() -> anyhow::Result<Args> {
    let mut parsed = Args { stack: "asset-sweeper-demo".into(), json: false };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--stack" => parsed.stack = args.next().context("--stack needs a name")?,
            "--json" => parsed.json = true,
            "-h" | "--help" => bail!("{USAGE}"),
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    Ok(parsed)
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("demo: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs every step; `Ok(false)` when an outcome was not the expected one.
async fn run() -> anyhow::Result<bool> {
    let args = args()?;
    let database_url = std::env::var("DATABASE_URL").context("DATABASE_URL is not set (scripts/demo sets it)")?;
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let started = Instant::now();
    let mut progress = |line: &str| eprintln!("[{:>6.1}s] {line}", started.elapsed().as_secs_f64());

    progress("1/5 database: applying the asset-sweeper migrations and the demo application's tables");
    let pool =
        PgPoolOptions::new().max_connections(4).connect(&database_url).await.context("connecting to DATABASE_URL")?;
    shared::db::migrate(&pool).await?;
    catalog::install_owner_tables(&pool).await?;

    progress(&format!("2/5 deploy: both functions and infra/template.yaml into LocalStack as stack {}", args.stack));
    let (url, name) = (database_url.clone(), args.stack.clone());
    let stack = tokio::task::spawn_blocking(move || deploy::deploy(&root, &url, &name)).await??;
    progress(&format!("    deployed: sweep {}, consumer {}", stack.sweep_function_name, stack.consumer_function_name));
    let clients = Clients::from_env().await;

    progress("3/5 seed: three workspaces, their records and files, in every situation the sweeper meets");
    let catalog = catalog::seed(&pool, &clients.s3, &stack.asset_bucket_name).await?;
    progress(&format!("    {} assets, {} of them due", catalog.assets.len(), catalog.due().count()));

    progress("4/5 sweep: invoking the deployed sweep function with a scheduled event");
    let pass = drive::invoke_sweep(&clients, &stack).await?;
    let text = |key: &str| pass[key].as_str().map_or_else(|| pass[key].to_string(), str::to_owned);
    progress(&format!("    pass {}: {}, enqueued {}", text("run_id"), text("outcome"), text("enqueued")));

    progress("5/5 settle: LocalStack's event source mapping feeds the deployed consumer until the queue is empty");
    drive::wait_for_outcome(&pool, &clients, &stack, &catalog, &mut progress).await?;

    let report = Report::gather(&pool, &clients, &stack, &catalog).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{report}");
    }
    progress(&format!("done in {:.0} s", started.elapsed().as_secs_f64()));
    Ok(report.surprises().is_empty())
}
