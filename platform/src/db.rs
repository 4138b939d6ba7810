//! The Postgres pool and the limits every session of the product gets.

use std::fmt;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Postgres, Transaction};

/// How to reach Postgres. The connection holds a password: `Debug` shows only where it points.
#[derive(Clone)]
pub struct DatabaseSettings {
    options: PgConnectOptions,
    /// Connections per function instance; two consumers and a sweep share one database.
    pub max_connections: u32,
}

impl DatabaseSettings {
    /// Settings that connect with `options`, at most `max_connections` at once.
    pub fn new(options: PgConnectOptions, max_connections: u32) -> Self {
        DatabaseSettings { options, max_connections }
    }

    /// Connection options, from `DATABASE_URL` or the `DATABASE_SECRET_ARN` secret.
    pub fn connect_options(&self) -> PgConnectOptions {
        self.options.clone()
    }
}

impl fmt::Debug for DatabaseSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatabaseSettings")
            .field("host", &self.options.get_host())
            .field("port", &self.options.get_port())
            .field("database", &self.options.get_database())
            .field("password", &"[redacted]")
            .field("max_connections", &self.max_connections)
            .finish()
    }
}

/// Every statement's limit. A settle is a handful of statements and one S3 call, so the consumer's function
/// timeout must cover this plus `S3_DELETE_TIMEOUT` (the template parity test checks it).
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a statement waits for a lock held elsewhere (an application migration, say).
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a session may sit idle inside an open transaction before Postgres ends it. A settle holds row locks
/// across one S3 call (`S3_DELETE_TIMEOUT`, at most 60 s); a process that stops between statements (a frozen
/// Lambda sandbox, a panic that leaked a connection) must not hold an application's rows for longer.
pub const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(120);

/// Lets the statements of the caller's transaction run until `deadline`, and at least `at_least`: a step with a
/// share of the pass bounds its statements by what is left of it.
pub async fn statements_until(
    tx: &mut sqlx::PgConnection,
    deadline: std::time::Instant,
    at_least: Duration,
) -> Result<(), sqlx::Error> {
    statements_for(tx, deadline.saturating_duration_since(std::time::Instant::now()).max(at_least)).await
}

/// Makes the caller's transaction read-only: the dry runs, the checks the operator's commands make and the batches
/// that only read change nothing, whatever the role they run as may write.
pub async fn read_only(tx: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query!("SET TRANSACTION READ ONLY").execute(tx).await?;
    Ok(())
}

/// Lets the statements of the caller's transaction run for `limit`, whatever the session's own timeout: a dry run
/// of a whole reconciliation reads a whole report.
pub async fn statements_for(tx: &mut sqlx::PgConnection, limit: Duration) -> Result<(), sqlx::Error> {
    sqlx::query!("SELECT set_config('statement_timeout', $1, true)", format!("{}ms", limit.as_millis()))
        .fetch_one(tx)
        .await?;
    Ok(())
}

/// Begins a transaction whose writes are the sweeper's own, not the application's: the `updated_at` triggers
/// leave the grace floor where it is (a failed mark or a redrive must not restart it; only application writes do).
pub async fn begin_as_sweeper(pool: &PgPool) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query!("SELECT set_config('asset_sweeper.actor', 'sweeper', true)").fetch_one(&mut *tx).await?;
    Ok(tx)
}

/// The role this session runs as, when that role is a superuser. The functions are meant to connect as logins of
/// their own (docs/security.md): a superuser passes every grant and policy the role model keeps a function to.
/// They warn instead of refusing: a first deployment often starts so, and nothing it settles is wrong for it.
pub async fn superuser(conn: &mut sqlx::PgConnection) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT rolname::text AS "role!" FROM pg_catalog.pg_roles WHERE rolname = current_user AND rolsuper"#
    )
    .fetch_optional(conn)
    .await
}

/// A pool that connects on first use, so a cold start does not fail or wait on the database before the first
/// event arrives.
///
/// Every session gets a statement and a lock timeout, so a statement stuck behind a lock (an application
/// migration holding `ACCESS EXCLUSIVE`, say) fails with an error the run record keeps instead of running the
/// function into its deadline.
pub fn pool(settings: &DatabaseSettings) -> PgPool {
    PgPoolOptions::new()
        .max_connections(settings.max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .connect_lazy_with(session_options(settings.connect_options()))
}

/// `options` with the limits every session of the project gets (functions and CLI alike): statement, lock and
/// idle-in-transaction timeouts, no JIT, and `row_security = off`, so a query that a row-level security policy would
/// filter (a recheck that would see fewer references than exist) fails instead of answering; and a search path
/// that holds no schema an application role may create in (`migrator::SESSION_SEARCH_PATH`), so nothing the
/// application plants can stand in for a built-in or a table of the sweeper's in these sessions.
pub fn session_options(options: PgConnectOptions) -> PgConnectOptions {
    let ms = |d: Duration| format!("{}ms", d.as_millis());
    options.options([
        ("search_path", migrator::SESSION_SEARCH_PATH.to_owned()),
        ("statement_timeout", ms(STATEMENT_TIMEOUT)),
        ("lock_timeout", ms(LOCK_TIMEOUT)),
        ("idle_in_transaction_session_timeout", ms(IDLE_IN_TRANSACTION_TIMEOUT)),
        ("row_security", "off".to_owned()),
        // A large statement's JIT compilation is not cancelled by the statement timeout: no statement of a pass
        // may outlive its share.
        ("jit", "off".to_owned()),
    ])
}

/// Whether a database error is one that passes: a serialization failure or deadlock, a lock or statement
/// timeout, a lost or refused connection, a server shutting down. Anything else (a constraint, a trigger's own
/// exception, a missing relation) needs a person or a change, and trying again will not help.
pub fn is_transient(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            matches!(
                code.as_ref(),
                "40001" | "40P01" | "55P03" | "57014" | "57P01" | "57P02" | "57P03" | "53300" | "25P03"
            ) || code.starts_with("08")
        }),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_connection_is_transient_and_a_decoding_error_is_not() {
        assert!(is_transient(&sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset))));
        assert!(is_transient(&sqlx::Error::PoolTimedOut));
        assert!(!is_transient(&sqlx::Error::RowNotFound));
        assert!(!is_transient(&sqlx::Error::Protocol("unexpected message".into())));
    }
}
