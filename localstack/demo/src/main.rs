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
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

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

/// `asset-sweeper report` over the demo's day: its text, its JSON, and the HTML page it wrote beside the build.
struct OperatorReport {
    text: String,
    json: serde_json::Value,
    html: PathBuf,
}

fn operator_report(database_url: &str) -> anyhow::Result<OperatorReport> {
    let exe = std::env::current_exe().context("the demo's own path")?;
    let dir = exe.parent().context("the build directory")?;
    let cli = dir.join(format!("asset-sweeper{}", std::env::consts::EXE_SUFFIX));
    let html = dir.join("demo-report.html");
    let run = |json: bool| -> anyhow::Result<String> {
        let mut command = std::process::Command::new(&cli);
        command.args(["report", "--since", "1d", "--html"]).arg(&html).env("DATABASE_URL", database_url);
        if json {
            command.arg("--json");
        }
        let output = command.output().with_context(|| format!("running {}", cli.display()))?;
        anyhow::ensure!(
            output.status.success(),
            "asset-sweeper report failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    };
    let text = run(false)?;
    let json = serde_json::from_str(&run(true)?).context("the report's JSON")?;
    Ok(OperatorReport { text, json, html })
}

/// `asset-sweeper approve <workspace>` as the operator runs it once the brake holds a first adoption: the plan it
/// prints (what records name of the adopted files) is the one it records.
fn operator_approves(database_url: &str, workspace: uuid::Uuid) -> anyhow::Result<String> {
    let exe = std::env::current_exe().context("the demo's own path")?;
    let cli =
        exe.parent().context("the build directory")?.join(format!("asset-sweeper{}", std::env::consts::EXE_SUFFIX));
    let output = std::process::Command::new(&cli)
        .args(["approve", &workspace.to_string(), "--by", "the demo", "--reason", "read the first adoption's plan"])
        .env("DATABASE_URL", database_url)
        .output()
        .with_context(|| format!("running {}", cli.display()))?;
    anyhow::ensure!(
        output.status.success(),
        "asset-sweeper approve failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
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

    progress("1/6 database: applying the asset-sweeper migrations and the demo application's tables");
    // The application's sessions, on a search path of `public` alone: its own tables go there, and the sweeper's are
    // found only by the names the application must use (`asset_sweeper.assets`, a view of the table the owner keeps
    // in `asset_sweeper_private`). Not the server's default `"$user", public`: under a login named `asset_sweeper`
    // (the embedded PostgreSQL's admin) that path would put the demo's tables into the sweeper's schema, and find
    // the sweeper's objects by their plain names.
    let options: PgConnectOptions = database_url.parse().context("DATABASE_URL is not a PostgreSQL URL")?;
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect_with(options.options([("search_path", "public")]))
        .await
        .context("connecting to DATABASE_URL")?;
    migrator::migrate(&pool).await?;
    catalog::install_owner_tables(&pool).await?;

    progress(&format!("2/6 deploy: both functions and infra/template.yaml into LocalStack as stack {}", args.stack));
    let logins = demo::logins::create(&pool, &database_url, &args.stack).await?;
    let (url, name) = (database_url.clone(), args.stack.clone());
    let stack = tokio::task::spawn_blocking(move || deploy::deploy(&root, &url, &logins, &name)).await??;
    progress(&format!("    deployed: sweep {}, consumer {}", stack.sweep_function_name, stack.consumer_function_name));
    let clients = Clients::from_env().await;

    progress("3/6 seed: three workspaces, their records and files, in every situation the sweeper meets");
    let catalog = catalog::seed(&pool, &clients.s3, &stack.asset_bucket_name).await?;
    progress(&format!("    {} assets, {} of them due", catalog.assets.len(), catalog.due().count()));

    progress(
        "4/6 bucket: orphan bytes and a row whose bytes are gone; an inventory report; an operator's reconciliation",
    );
    let bucket = &stack.asset_bucket_name;
    let planted = demo::bucket::plant(&pool, &clients.s3, bucket).await?;
    let now = chrono::Utc::now();
    let first_report =
        demo::bucket::write_report(&clients.s3, bucket, &stack.name, &planted, now - chrono::Duration::minutes(2))
            .await?;
    let first = demo::bucket::reconcile_and_approve(&pool, &clients.s3, bucket, &first_report).await?;
    progress(&format!(
        "    {first_report}: {} key(s) no row knows, {} adopted before approval; approved the whole bucket",
        first.unknown_keys, first.adopted
    ));
    demo::bucket::write_report(&clients.s3, bucket, &stack.name, &planted, now - chrono::Duration::minutes(1)).await?;

    progress("5/6 sweep: invoking the deployed sweep function with a scheduled event, three times");
    let pass = drive::invoke_sweep(&clients, &stack).await?;
    let text = |key: &str| pass[key].as_str().map_or_else(|| pass[key].to_string(), str::to_owned);
    progress(&format!("    pass {}: {}, enqueued {}", text("run_id"), text("outcome"), text("enqueued")));
    // The second pass's census reads every text and JSON column again since the first adopted the orphans.
    let second = drive::invoke_sweep(&clients, &stack).await?;
    progress(&format!(
        "    pass {}: adopted made due {}, enqueued {}",
        second["run_id"].as_str().unwrap_or_default(),
        second["adopted_due"],
        second["enqueued"]
    ));
    // A workspace's first adoption waits for a person whatever its size: the operator reads its plan (what records
    // name of the adopted files) and approves; the next pass claims them.
    let plan = operator_approves(&database_url, planted.workspace)?;
    for line in plan.lines().filter(|l| l.contains("adopted")) {
        progress(&format!("    {}", line.trim()));
    }
    let third = drive::invoke_sweep(&clients, &stack).await?;
    progress(&format!(
        "    pass {}: the approved first adoption claimed, enqueued {}",
        third["run_id"].as_str().unwrap_or_default(),
        third["enqueued"]
    ));

    progress("6/6 settle: LocalStack's event source mapping feeds the deployed consumer until the queue is empty");
    drive::wait_for_outcome(&pool, &clients, &stack, &catalog, &mut progress).await?;
    demo::bucket::wait_until_settled(&pool, &planted, std::time::Duration::from_secs(300), &mut progress).await?;

    let report = Report::gather(&pool, &clients, &stack, &catalog).await?;
    let reconciled = demo::bucket::Outcome::gather(&pool, &clients.s3, bucket, &planted, first).await?;

    // What it cost and what it freed, as an operator reads it: one more pass records the money after the
    // settlements, then `asset-sweeper report` writes its page.
    let after = drive::invoke_sweep(&clients, &stack).await?;
    progress(&format!(
        "    pass {}: money recorded after the settlements",
        after["run_id"].as_str().unwrap_or_default()
    ));
    let money = operator_report(&database_url)?;
    progress(&format!("    the operator's report, with its charts: {}", money.html.display()));
    if args.json {
        let both = serde_json::json!({
            "catalog": report, "reconciliation": reconciled, "money": money.json, "report_html": money.html,
        });
        println!("{}", serde_json::to_string_pretty(&both)?);
    } else {
        println!("{report}\n{reconciled}\n{}", money.text);
    }
    progress(&format!("done in {:.0} s", started.elapsed().as_secs_f64()));
    Ok(report.surprises().is_empty() && reconciled.surprises().is_empty())
}
