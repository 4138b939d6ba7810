//! A bucket and its rows at a benchmark's size: assets attached three days ago in 100 workspaces, each with its stored
//! object keyed `{workspace}/{id}.png`, and the keys a report of the bucket lists (every row's but some, and some no
//! row knows), for the reconciliation benchmarks.

use sqlx::{AssertSqlSafe, PgPool};
use uuid::Uuid;

async fn exec(pool: &PgPool, sql: &str) {
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned())).execute(pool).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// `rows` assets attached three days ago, each with its stored object keyed `{workspace}/{id}.png`.
pub async fn rows(pool: &PgPool, rows: usize) {
    // Loading, not the application writing: the touch triggers would turn each row into a second write.
    exec(pool, "ALTER TABLE assets DISABLE TRIGGER USER").await;
    exec(
        pool,
        &format!(
            "CREATE TABLE numbered AS
               SELECT n, gen_random_uuid() AS id,
                      ('00000000-0000-4000-8000-0000000000' || lpad((n % 100)::text, 2, '0'))::uuid AS ws
                 FROM generate_series(1, {rows}) n;
             INSERT INTO stored_objects (storage_key, content_hash, byte_size, created_at, updated_at)
             SELECT ws || '/' || id || '.png', 'sha256:' || n, 1000, now() - interval '3 days',
                    now() - interval '3 days' FROM numbered;
             INSERT INTO assets (id, workspace_id, storage_key, content_hash, byte_size, state, created_at, updated_at)
             SELECT id, ws, ws || '/' || id || '.png', 'sha256:' || n, 1000, 'attached', now() - interval '3 days',
                    now() - interval '3 days' FROM numbered;
             DROP TABLE numbered;"
        ),
    )
    .await;
    exec(pool, "ALTER TABLE assets ENABLE TRIGGER USER").await;
    exec(pool, "VACUUM ANALYZE").await;
}

/// The report's keys: every row's but `drift` of them, and `drift` keys no row knows.
pub async fn listed_keys(pool: &PgPool, drift: usize) -> Vec<String> {
    let mut keys: Vec<String> =
        sqlx::query_scalar("SELECT storage_key FROM stored_objects ORDER BY md5(storage_key) OFFSET $1")
            .bind(drift as i64)
            .fetch_all(pool)
            .await
            .expect("keys");
    keys.extend((0..drift).map(|i| format!("00000000-0000-4000-8000-0000000000{:02}/{}.png", i % 100, Uuid::new_v4())));
    keys
}

/// The process's peak resident memory so far (`VmHWM`) of process `pid` (`self` for this one), in KiB; 0 where
/// /proc does not say.
pub fn peak_resident_kib(pid: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Starts this process's peak resident memory again from what it holds now (Linux's `clear_refs`), so the next
/// [`peak_resident_kib`] is one phase's.
pub fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}
