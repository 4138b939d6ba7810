//! One sweep at a time (invariant 9): a Postgres session advisory lock on a connection of its own.
//!
//! The connection is detached from the pool, so the lock can never be handed back to the pool with it still
//! held (a warm Lambda would then skip every later pass); if the process dies, the session and the lock end.
//! Behind a transaction-pooling proxy this needs a pinned session: see docs/deploying.md, "The database".

use sqlx::{Connection, PgConnection, PgPool};

/// The advisory-lock key every sweep takes ("ASWEEPER" in ASCII).
pub const SWEEP_LOCK_KEY: i64 = 0x4153_5745_4550_4552;

/// A held sweep lock and the session that holds it.
pub struct SweepLock {
    conn: PgConnection,
}

impl SweepLock {
    /// Takes the lock if no other sweep holds it; `None` when one does.
    pub async fn try_acquire(pool: &PgPool) -> Result<Option<SweepLock>, sqlx::Error> {
        let mut conn = pool.acquire().await?.detach();
        let acquired = sqlx::query_scalar!(r#"SELECT pg_try_advisory_lock($1) AS "acquired!""#, SWEEP_LOCK_KEY)
            .fetch_one(&mut conn)
            .await?;
        if acquired {
            Ok(Some(SweepLock { conn }))
        } else {
            let _ = conn.close().await;
            Ok(None)
        }
    }

    /// The locked session, for work that may as well run on it (the schema check).
    pub fn conn(&mut self) -> &mut PgConnection {
        &mut self.conn
    }

    /// Releases the lock and closes the session.
    pub async fn release(mut self) {
        let _ = sqlx::query!("SELECT pg_advisory_unlock($1)", SWEEP_LOCK_KEY).fetch_one(&mut self.conn).await;
        let _ = self.conn.close().await;
    }
}
