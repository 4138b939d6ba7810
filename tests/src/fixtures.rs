//! Rows as an application would write them, for tests and benchmarks.

use sqlx::PgPool;
use uuid::Uuid;

/// Inserts one asset (and its stored object) in `state`, due `due` ago (an SQL interval such as `'1 hour'`;
/// a negative one is in the future) or not due at all. A `retired` asset's purge time is its due time.
pub async fn insert_asset(pool: &PgPool, workspace: Uuid, state: &str, due_ago: Option<&str>) -> Uuid {
    let key = format!("{workspace}/{}", Uuid::new_v4());
    sqlx::query("INSERT INTO stored_objects (storage_key, content_hash, byte_size) VALUES ($1, 'sha256:test', 100)")
        .bind(&key)
        .execute(pool)
        .await
        .expect("insert stored object");
    sqlx::query_scalar(
        "INSERT INTO assets (workspace_id, storage_key, content_hash, byte_size, state, due_at, retired_at, purge_after)
         SELECT $1, $2, 'sha256:test', 100, $3, due, retired.at, CASE WHEN $3 = 'retired' THEN due END
           FROM (SELECT now() - $4::interval AS due) d,
                LATERAL (SELECT CASE WHEN $3 = 'retired' THEN due - interval '30 days' END AS at) retired
         RETURNING id",
    )
    .bind(workspace)
    .bind(&key)
    .bind(state)
    .bind(due_ago)
    .fetch_one(pool)
    .await
    .expect("insert asset")
}

/// Inserts `n` released assets of `workspace`, due between `oldest_ago` and now (oldest first in id order),
/// each with its own stored object of `bytes` bytes. Set-based, for large backlogs.
pub async fn insert_released(pool: &PgPool, workspace: Uuid, n: i64, oldest_ago: &str, bytes: i64) -> Vec<Uuid> {
    sqlx::query_scalar(
        "WITH objects AS (
             INSERT INTO stored_objects (storage_key, content_hash, byte_size)
             SELECT $1::text || '/' || i, 'sha256:' || i, $4 FROM generate_series(1, $2) AS i
             RETURNING storage_key
         )
         INSERT INTO assets (workspace_id, storage_key, content_hash, byte_size, state, due_at)
         SELECT $1, storage_key, 'sha256:test', $4, 'released',
                now() - $3::interval + (split_part(storage_key, '/', 2)::int * interval '1 millisecond')
           FROM objects
         RETURNING id",
    )
    .bind(workspace)
    .bind(n)
    .bind(oldest_ago)
    .bind(bytes)
    .fetch_all(pool)
    .await
    .expect("insert released assets")
}
