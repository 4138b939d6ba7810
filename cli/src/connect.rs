//! Reaching the database and the bucket with the functions' own settings.

use anyhow::Context;
use schema::{self, ReferenceMap, SchemaCheckError, SchemaRefusal};
use settings::Settings;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Postgres, Transaction};

/// The database alone, for commands that need nothing else: `DATABASE_URL`, else the `DATABASE_SECRET_ARN`
/// secret, as the functions read them.
pub(crate) async fn database() -> anyhow::Result<PgPool> {
    connect(Settings::database_from_env().await?).await
}

/// Everything the functions read, with the database connected and the SDK configured.
pub(crate) async fn everything() -> anyhow::Result<(Settings, PgPool, aws_config::SdkConfig)> {
    let sdk = platform::aws::sdk_config().await;
    let settings = Settings::load(&sdk).await?;
    let pool = connect(settings.database.connect_options()).await?;
    Ok((settings, pool, sdk))
}

/// A read-only transaction and what the schema check made of the schema inside it, for the dry runs that ask
/// what a pass would do: the caller rolls it back. A refusal is an answer to show, not an error.
pub(crate) async fn checked_read_only(
    pool: &PgPool,
    settings: &Settings,
) -> anyhow::Result<(Transaction<'static, Postgres>, Result<ReferenceMap, SchemaRefusal>)> {
    let mut tx = pool.begin().await?;
    platform::db::read_only(&mut tx).await?;
    let map = match schema::check(&mut tx, settings.into()).await {
        Ok(map) => Ok(map),
        Err(SchemaCheckError::Refused(refusal)) => Err(refusal),
        Err(SchemaCheckError::Database(e)) => return Err(e).context("the schema check could not read the catalog"),
    };
    Ok((tx, map))
}

/// The schema check as a command that only shows it runs it: in a read-only transaction, rolled back, so it
/// records nothing (the findings its sample sees are the sweep's to write, and an operator's role may not).
pub(crate) async fn check(pool: &PgPool, options: schema::CheckOptions) -> Result<ReferenceMap, SchemaCheckError> {
    let mut tx = pool.begin().await?;
    platform::db::read_only(&mut tx).await?;
    let checked = schema::check(&mut tx, options).await;
    tx.rollback().await?;
    checked
}

/// A pool whose sessions get the functions' statement, lock and idle-in-transaction timeouts: an operator's
/// command stuck behind an application's lock (a migration, say) fails with one line instead of hanging, and one
/// left idle inside a transaction cannot hold the application's rows.
async fn connect(options: PgConnectOptions) -> anyhow::Result<PgPool> {
    let host = options.get_host().to_owned();
    PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(std::time::Duration::from_secs(10))
        .connect_with(platform::db::session_options(options))
        .await
        .with_context(|| format!("cannot reach the database at {host}"))
}
