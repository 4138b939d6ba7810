//! The facts a decision is made on, read from the database by its clock: the asset's row and its stored object's
//! (locked for a settle), and how many other rows share its bytes. `crate::rules` decides on them without reading.

use std::time::Duration;

use platform::AssetId;
use sqlx::PgConnection;

use crate::rules::{AssetState, Facts};

/// Reads the facts about `asset`; with `lock`, locks its row and its stored object's row for the transaction
/// (the object row is what a concurrent upload of the same bytes needs).
pub async fn read(
    conn: &mut PgConnection,
    asset: AssetId,
    grace: Duration,
    abandon_after: Duration,
    lock: bool,
) -> Result<Option<Facts>, sqlx::Error> {
    // One text for both: the lock is the only difference, so the locked read and the plan's cannot drift apart.
    macro_rules! select_facts {
        ($ending:tt) => {
            sqlx::query_as!(
                Facts,
                r#"SELECT a.workspace_id, a.storage_key, a.byte_size, a.state AS "state: AssetState", a.lease_token,
                          asset_sweeper_due(a) AS "due!",
                          asset_sweeper_grace_ends(a, o, $2 * interval '1 second') > now() AS "within_grace!",
                          asset_sweeper_grace_ends(a, o, $2 * interval '1 second')::text AS "grace_ends!",
                          a.created_at + $3 * interval '1 second' <= now() AS "abandoned!",
                          a.purge_after IS NOT NULL AND a.purge_after <= now() AS "purge_due!",
                          asset_sweeper_tried(a) AS "tried!",
                          a.retired_at = a.purge_after IS TRUE AS "retired_abandoned!",
                          EXISTS (SELECT 1 FROM adopted_assets d WHERE d.asset_id = a.id) AS "adopted!",
                          a.retired_at, a.purge_after,
                          to_jsonb(a) AS "row_json!"
                     FROM assets a JOIN stored_objects o ON o.storage_key = a.storage_key
                    WHERE a.id = $1"#
                    + $ending,
                asset.0,
                grace.as_secs_f64(),
                abandon_after.as_secs_f64()
            )
            .fetch_optional(conn)
            .await
        };
    }
    if lock { select_facts!(" FOR UPDATE OF a, o") } else { select_facts!("") }
}

/// How many other asset rows share `asset`'s stored object; with `lock`, each of them locked against a delete
/// (`FOR KEY SHARE`) for the caller's transaction, so none goes before a settle counts them again.
pub async fn sharers(
    conn: &mut PgConnection,
    storage_key: &str,
    asset: AssetId,
    lock: bool,
) -> Result<i64, sqlx::Error> {
    if lock {
        return sqlx::query_scalar!(
            r#"SELECT count(*) AS "shared!" FROM (SELECT 1 FROM assets WHERE storage_key = $2 AND id <> $1 FOR KEY SHARE) s"#,
            asset.0,
            storage_key,
        )
        .fetch_one(conn)
        .await;
    }
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "sharers!" FROM assets WHERE storage_key = $1 AND id <> $2"#,
        storage_key,
        asset.0
    )
    .fetch_one(conn)
    .await
}
