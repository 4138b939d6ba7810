//! Rows as an application would write them, for tests and benchmarks.

use sqlx::{AssertSqlSafe, PgPool};
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

/// Puts `bytes` under `key` in the bucket.
pub async fn put_bytes(s3: &aws_sdk_s3::Client, bucket: &str, key: &str, bytes: &[u8]) {
    s3.put_object()
        .bucket(bucket)
        .key(key)
        .body(aws_sdk_s3::primitives::ByteStream::from(bytes.to_vec()))
        .send()
        .await
        .expect("put object");
}

/// Makes `s3://bucket/prefix` a location only AWS's log delivery can write, as docs/operating.md has an operator do:
/// S3's log delivery allowed to put its logs, and every principal that is not an AWS service denied putting or
/// deleting an object below the prefix. The sweep reads no log location whose policy does not say so.
pub async fn protect_logs(s3: &aws_sdk_s3::Client, bucket: &str, prefix: &str) {
    let below = format!("arn:aws:s3:::{bucket}/{prefix}*");
    let policy = serde_json::json!({
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "S3ServerAccessLogsPolicy",
                "Effect": "Allow",
                "Principal": {"Service": "logging.s3.amazonaws.com"},
                "Action": "s3:PutObject",
                "Resource": below,
            },
            {
                "Sid": "OnlyLogDeliveryWritesTheLogs",
                "Effect": "Deny",
                "Principal": "*",
                "Action": ["s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion", "s3:ReplicateObject", "s3:ReplicateDelete"],
                "Resource": below,
                "Condition": {"BoolIfExists": {"aws:PrincipalIsAWSService": "false"}},
            },
        ],
    });
    s3.put_bucket_policy().bucket(bucket).policy(policy.to_string()).send().await.expect("the logs' bucket policy");
}

/// Whether `key` currently exists in the bucket (a delete marker counts as gone).
pub async fn object_exists(s3: &aws_sdk_s3::Client, bucket: &str, key: &str) -> bool {
    match s3.head_object().bucket(bucket).key(key).send().await {
        Ok(_) => true,
        Err(e) if e.as_service_error().is_some_and(|e| e.is_not_found()) => false,
        Err(e) => panic!("HeadObject {key}: {e:?}"),
    }
}

/// Seeds an asset as an application would have left it `age` ago (an SQL interval), with its bytes in the
/// bucket under `key` (shared if another asset already uses it), and due now. A `retired` asset's purge time
/// has passed; a `pending` one is as old as `age`. `abandoned` is an upload never attached that the sweeper
/// retired for its trial `age` ago (`retired`, its purge time its retirement): once a census has read everything
/// since, it is deleted.
pub async fn seed(ctx: &crate::TestContext, workspace: Uuid, state: &str, age: &str, key: &str) -> Uuid {
    seed_in(ctx.pool(), &ctx.s3, &ctx.bucket, workspace, state, age, key).await
}

/// [`seed`], its bytes in a bucket other than the test's own: a deployed stack's asset bucket.
pub async fn seed_in(
    pool: &PgPool,
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    workspace: Uuid,
    state: &str,
    age: &str,
    key: &str,
) -> Uuid {
    put_bytes(s3, bucket, key, format!("bytes of {key}").as_bytes()).await;
    sqlx::query(
        "INSERT INTO stored_objects (storage_key, content_hash, byte_size) VALUES ($1, 'sha256:' || md5($1), 100)
         ON CONFLICT (storage_key) DO NOTHING",
    )
    .bind(key)
    .execute(pool)
    .await
    .expect("stored object");
    let id = sqlx::query_scalar(
        "INSERT INTO assets (workspace_id, storage_key, content_hash, byte_size, state, due_at, created_at,
                             updated_at, retired_at, purge_after)
         SELECT $1, $2, 'sha256:' || md5($2), 100, CASE WHEN $3 = 'abandoned' THEN 'retired' ELSE $3 END,
                now() - interval '1 minute', t, t,
                CASE WHEN $3 IN ('retired', 'abandoned') THEN t END,
                CASE $3 WHEN 'retired' THEN now() - interval '1 minute' WHEN 'abandoned' THEN t END
           FROM (SELECT now() - $4::interval AS t) ages
         RETURNING id",
    )
    .bind(workspace)
    .bind(key)
    .bind(state)
    .bind(age)
    .fetch_one(pool)
    .await
    .expect("asset");
    // The insert touched the object (a reuse restarts its grace period): set it back to the seeded age.
    sqlx::query("UPDATE stored_objects SET updated_at = now() - $2::interval WHERE storage_key = $1")
        .bind(key)
        .bind(age)
        .execute(pool)
        .await
        .expect("object age");
    id
}

/// The asset's state now; `None` once its row is gone.
pub async fn state(ctx: &crate::TestContext, id: Uuid) -> Option<String> {
    sqlx::query_scalar("SELECT state FROM assets WHERE id = $1")
        .bind(id)
        .fetch_optional(ctx.pool())
        .await
        .expect("state")
}

/// Grows the application from `from` to `tables` tables of eight columns (uuid, text and jsonb among them, five
/// that could hold asset ids; the body a text with dates and slugs, hyphens that make a uuid search look twice)
/// and `rows` rows each: a real application's schema, for the scale benchmarks.
pub async fn grow_application(pool: &PgPool, from: usize, tables: usize, rows: usize) {
    for i in from..tables {
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE TABLE app_{i} (id bigserial PRIMARY KEY, ref uuid, title text, body text, doc jsonb,
                                   n integer, at timestamptz, tag text);
             INSERT INTO app_{i} (ref, title, body, doc, n, at, tag)
             SELECT gen_random_uuid(), 'title ' || g, 'posted 2026-11-30, /blog/' || g || '-first-steps-in-rust',
                    jsonb_build_object('k', g), g, now(), 't'
               FROM generate_series(1, {rows}) g;
             ANALYZE app_{i};"
        )))
        .execute(pool)
        .await
        .expect("application table");
    }
}

/// A table `name` of `columns` columns that could hold asset ids, text and JSON by turns (`c1` text, `c2` jsonb, …),
/// with `rows` rows of a real application's values: the wide table (a GitLab-sized schema has one of 174 such
/// columns) whose census statement reads every column in one batch.
pub async fn grow_wide_table(pool: &PgPool, name: &str, columns: usize, rows: usize) {
    let kind = |c: usize| if c.is_multiple_of(2) { "jsonb" } else { "text" };
    let definitions: Vec<String> = (1..=columns).map(|c| format!("c{c} {}", kind(c))).collect();
    let names: Vec<String> = (1..=columns).map(|c| format!("c{c}")).collect();
    let values: Vec<String> = (1..=columns)
        .map(|c| match kind(c) {
            "jsonb" => format!("jsonb_build_object('field', {c}, 'note', 'row ' || g || ', 2026-11-30')"),
            _ => format!("'setting {c} of row ' || g || ': /docs/' || g || '-first-steps'"),
        })
        .collect();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE TABLE {name} (id bigserial PRIMARY KEY, {});
         INSERT INTO {name} ({}) SELECT {} FROM generate_series(1, {rows}) g;
         ANALYZE {name};",
        definitions.join(", "),
        names.join(", "),
        values.join(", "),
    )))
    .execute(pool)
    .await
    .expect("the wide table");
}

/// `assets` attached assets of 1 000 bytes, created three days ago across 100 workspaces, as a catalogue is loaded
/// (not written by the application: the touch triggers are off meanwhile), and the table `numbered (n, id)` that
/// numbers them from 1, which the caller uses to place references and then drops.
pub async fn attached_catalogue(pool: &PgPool, assets: usize) {
    sqlx::raw_sql(AssertSqlSafe(format!(
        "ALTER TABLE assets DISABLE TRIGGER USER;
         CREATE TABLE numbered AS SELECT n, gen_random_uuid() AS id FROM generate_series(1, {assets}) n;
         INSERT INTO stored_objects (storage_key, content_hash, byte_size, created_at, updated_at)
         SELECT 'w/' || n, 'sha256:' || n, 1000, now() - interval '3 days', now() - interval '3 days' FROM numbered;
         INSERT INTO assets (id, workspace_id, storage_key, content_hash, byte_size, state, created_at, updated_at)
         SELECT id, ('00000000-0000-0000-0000-0000000000' || lpad((n % 100)::text, 2, '0'))::uuid, 'w/' || n,
                'sha256:' || n, 1000, 'attached', now() - interval '3 days', now() - interval '3 days'
           FROM numbered;
         ALTER TABLE assets ENABLE TRIGGER USER;"
    )))
    .execute(pool)
    .await
    .expect("the catalogue");
}

/// Makes `assets` due again, for the next sweep to claim.
pub async fn due_again(pool: &PgPool, assets: &[Uuid]) {
    sqlx::query("UPDATE assets SET due_at = now() - interval '1 second' WHERE id = ANY ($1)")
        .bind(assets)
        .execute(pool)
        .await
        .expect("due again");
}

/// As if a week had passed since `asset` was retired and the census had read everything since: its retirement and
/// purge time a week earlier (before the scans that proved the schema in the test), due now. Written as the
/// sweeper's own write, which moves no grace floor.
pub async fn trial_over(pool: &PgPool, asset: Uuid) {
    let mut tx = pool.begin().await.expect("begin");
    sqlx::query("SELECT set_config('asset_sweeper.actor', 'sweeper', true)").execute(&mut *tx).await.expect("actor");
    sqlx::query(
        "UPDATE asset_sweeper_private.assets
            SET retired_at = retired_at - interval '7 days', purge_after = purge_after - interval '7 days',
                due_at = now() - interval '1 second'
          WHERE id = $1 AND state = 'retired'",
    )
    .bind(asset)
    .execute(&mut *tx)
    .await
    .expect("a week later");
    tx.commit().await.expect("commit");
}

/// An asset the sweeper deleted, as its audit trail alone records it (no row is left): the id a reference guard
/// refuses to let a write name.
pub async fn removed_asset(pool: &PgPool) -> Uuid {
    sqlx::query_scalar(
        "INSERT INTO settlement_events (asset_id, workspace_id, action, evidence, code_version)
         VALUES (gen_random_uuid(), gen_random_uuid(), 'delete', '{}', 'test') RETURNING asset_id",
    )
    .fetch_one(pool)
    .await
    .expect("a removed asset's audit row")
}
