//! The schema at commit (invariant 20): a migration that commits while a settle waits for the asset's row — it
//! adds a column, copies the reference into it and clears the old one — is seen by that settle, which holds the
//! asset instead of destroying it on a map that no longer says where the reference is. With the change detector
//! (a lock every DDL command waits for, then the generation) and without it (the catalog fingerprint). And autovacuum's lock on the detector's table, which is no DDL.

use crate::pipeline::{actions, key, last_event, pass, settle_queue, until_a_session_waits};
use integration_tests::TestContext;
use integration_tests::fixtures::{object_exists, seed, state};
use lifecycle::runs::RunOutcome;
use uuid::Uuid;

#[tokio::test]
async fn a_migration_committed_while_a_settle_waits_for_the_asset_makes_it_hold_the_asset() {
    for detector in [true, false] {
        let ctx = TestContext::new().await;
        if !detector {
            sqlx::raw_sql(
                "DROP EVENT TRIGGER asset_sweeper_schema_changes; DROP EVENT TRIGGER asset_sweeper_schema_drops;",
            )
            .execute(ctx.pool())
            .await
            .expect("no detector");
        }
        let ws = Uuid::new_v4();
        let upload_key = key(ws);
        // An upload the application attached without saying so: only its reference keeps it.
        let upload = seed(&ctx, ws, "abandoned", "8 days", &upload_key).await;
        sqlx::raw_sql(
            "CREATE TABLE products (id serial PRIMARY KEY, hero uuid REFERENCES assets (id));
             CREATE INDEX products_hero ON products (hero);",
        )
        .execute(ctx.pool())
        .await
        .expect("products");
        sqlx::query("INSERT INTO products (hero) VALUES ($1)").bind(upload).execute(ctx.pool()).await.expect("row");

        let report = pass(&ctx, &[]).await;
        assert_eq!((report.outcome, report.enqueued), (RunOutcome::Ok, 1), "{:?}", report.reason);

        // Something holds the asset's row (a write of the application's), so the settle waits for it.
        let mut holding = ctx.pool().begin().await.expect("begin");
        sqlx::query("SELECT 1 FROM assets WHERE id = $1 FOR KEY SHARE")
            .bind(upload)
            .execute(&mut *holding)
            .await
            .expect("hold the row");

        let migration = async {
            until_a_session_waits(
                ctx.pool(),
                "Lock",
                "%asset_sweeper_grace_ends(a, o%",
                "no settle ever waited for the asset's row",
            )
            .await;
            // The migration: a new column, the reference copied into it, the old one cleared; committed.
            sqlx::raw_sql(
                "BEGIN;
                 ALTER TABLE products ADD COLUMN cover asset_id;
                 UPDATE products SET cover = hero;
                 UPDATE products SET hero = NULL;
                 COMMIT;",
            )
            .execute(ctx.pool())
            .await
            .expect("the migration commits");
            holding.commit().await.expect("release the row");
        };
        tokio::join!(settle_queue(&ctx), migration);

        let label = if detector { "with the detector" } else { "without the detector" };
        assert_eq!(state(&ctx, upload).await.as_deref(), Some("retired"), "{label}");
        assert!(object_exists(&ctx.s3, &ctx.bucket, &upload_key).await, "{label}: the bytes are gone");
        assert_eq!(actions(&ctx, upload).await, ["defer"], "{label}");
        let (_, evidence) = last_event(&ctx, upload).await;
        assert_eq!(evidence["deferred"]["why"], "schema_changed", "{label}: {evidence}");
    }
}

/// Autovacuum takes `SHARE UPDATE EXCLUSIVE` on the change detector's table for the milliseconds it spends there (the
/// fold deletes its rows, so it is vacuumed and analyzed often). That mode conflicts with the settle's `SHARE`, yet
/// it is no DDL: a settle that meets it asks again rather than hold an abandoned upload for 20 minutes.
#[tokio::test]
async fn a_vacuum_of_the_change_detectors_table_during_a_settle_does_not_hold_the_asset() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let upload_key = key(ws);
    let upload = seed(&ctx, ws, "abandoned", "8 days", &upload_key).await;
    let report = pass(&ctx, &[]).await;
    assert_eq!((report.outcome, report.enqueued), (RunOutcome::Ok, 1), "{:?}", report.reason);

    // What autovacuum holds while it vacuums the table.
    let mut vacuum = ctx.pool().begin().await.expect("begin");
    sqlx::query("LOCK TABLE asset_sweeper_private.asset_sweeper_schema_changes IN SHARE UPDATE EXCLUSIVE MODE")
        .execute(&mut *vacuum)
        .await
        .expect("the vacuum's lock");
    let vacuum_ends = async {
        // The settle found the lock taken and sleeps before it asks again; the vacuum then ends.
        let asking = "%asset_sweeper_hold_schema()%";
        until_a_session_waits(ctx.pool(), "PgSleep", asking, "no settle asked for the lock again").await;
        vacuum.commit().await.expect("the vacuum ends");
    };
    tokio::join!(settle_queue(&ctx), vacuum_ends);

    assert_eq!(actions(&ctx, upload).await, ["delete"], "{:?}", last_event(&ctx, upload).await);
    assert_eq!(state(&ctx, upload).await, None);
    assert!(!object_exists(&ctx.s3, &ctx.bucket, &upload_key).await);
}
