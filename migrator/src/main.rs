//! `asset-sweeper-migrate DATABASE_URL`: brings that database's asset-sweeper schema up to date with the product's
//! migrator (the versioned migrations, then the SQL definitions whose text changed), and says what it applied. Builds
//! before any checked query does, so `scripts/sqlx-prepare` migrates its database with it. Its session has none of
//! the product's statement and lock timeouts: it is for a database of its own, not for production, where
//! `asset-sweeper migrate` runs.

use std::process::ExitCode;

use migrator::{Applied, MigrationError};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};

const USAGE: &str = "usage: asset-sweeper-migrate DATABASE_URL";

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let url = match args.as_slice() {
        [url] if !url.starts_with('-') => url,
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match migrate(url).await {
        Ok(applied) => {
            println!("migrations applied: {}", applied.migrations);
            if !applied.detector {
                println!("warning: {}", migrator::no_detector(&applied.role));
            }
            if applied.definitions.is_empty() {
                println!("definitions applied: none (unchanged)");
            }
            for file in &applied.definitions {
                println!("definitions applied: {file}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            // The URL is not repeated: it may hold a password.
            eprintln!("asset-sweeper-migrate: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn migrate(url: &str) -> Result<Applied, MigrationError> {
    let options: PgConnectOptions = url.parse().map_err(MigrationError::Connect)?;
    // One connection first: a pool retries a server it cannot reach until it times out, then says only that.
    PgConnection::connect_with(&options).await.map_err(MigrationError::Connect)?.close().await.ok();
    let pool = PgPoolOptions::new().max_connections(1).connect_with(options).await.map_err(MigrationError::Connect)?;
    let applied = migrator::migrate(&pool).await;
    pool.close().await;
    applied
}
