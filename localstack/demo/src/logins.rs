//! The functions' own database logins, as a DBA makes them under the role model (docs/security.md): one per
//! function, each a member of its group role only, so the deployed sweep and consumer connect as they would in
//! AWS, each from its own secret.

use anyhow::Context;
use sqlx::postgres::PgConnectOptions;
use sqlx::{AssertSqlSafe, PgPool};
use uuid::Uuid;

/// Where each deployed function connects.
#[derive(Debug, Clone)]
pub struct FunctionLogins {
    pub sweep_url: String,
    pub consumer_url: String,
}

/// Creates (or gives a new password to) the logins `<stack>_sweep` and `<stack>_consumer` on the database of
/// `database_url`, as its owner, and returns their URLs.
pub async fn create(pool: &PgPool, database_url: &str, stack: &str) -> anyhow::Result<FunctionLogins> {
    let base: String =
        stack.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).take(48).collect();
    let options: PgConnectOptions = database_url.parse().context("DATABASE_URL is not a PostgreSQL URL")?;
    let mut urls = Vec::new();
    for (function, group) in [("sweep", "asset_sweeper_sweep"), ("consumer", "asset_sweeper_consumer")] {
        let login = format!("{base}_{function}");
        let password = Uuid::new_v4().simple().to_string();
        // The name is ours (letters, digits and underscores) and the password a uuid's hex: nothing to quote.
        let sql = format!(
            "DO $$ BEGIN
                 IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = '{login}') THEN
                     ALTER ROLE {login} LOGIN PASSWORD '{password}';
                 ELSE
                     CREATE ROLE {login} LOGIN PASSWORD '{password}';
                 END IF;
             END $$;
             GRANT {group} TO {login};"
        );
        sqlx::raw_sql(AssertSqlSafe(sql)).execute(pool).await.with_context(|| format!("creating the login {login}"))?;
        let database = options.get_database().unwrap_or("postgres");
        urls.push(format!("postgres://{login}:{password}@{}:{}/{database}", options.get_host(), options.get_port()));
    }
    let consumer_url = urls.pop().unwrap_or_default();
    let sweep_url = urls.pop().unwrap_or_default();
    Ok(FunctionLogins { sweep_url, consumer_url })
}
