//! Adopted assets, after their adoption: each waits, due never, until the census's key scan has read every text and
//! JSON column since (a record naming its key written before the adoption is then seen); this step of the pass
//! makes those due, before the brake, which counts them.

use platform::step::{Share, Step};
use serde::Serialize;
use sqlx::{PgConnection, PgPool};

use crate::assets;

/// The step that makes adopted assets due once the key scan has covered them.
#[derive(Debug, Clone, Copy)]
pub struct AdoptedDue;

/// Where adopted assets stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Standing {
    /// Adopted and still `pending`.
    pub pending: i64,
    /// Of those, waiting for the key scan (due never).
    pub waiting_for_key_scan: i64,
}

impl Step for AdoptedDue {
    type Progress = u64;
    type Standing = Standing;
    type Error = sqlx::Error;
    const NAME: &'static str = "adoption";
    const ON_FAILURE: &'static str = "adopted assets could not be made due: the next pass tries again";

    async fn advance(&self, pool: &PgPool, _share: Share) -> Result<u64, sqlx::Error> {
        // One statement over the adopted rows that wait: the statement timeout bounds it, not the share.
        assets::schedule_adopted(pool).await
    }

    async fn standing(conn: &mut PgConnection) -> Result<Standing, sqlx::Error> {
        sqlx::query_as!(
            Standing,
            r#"SELECT count(*) AS "pending!", count(*) FILTER (WHERE a.due_at = 'infinity') AS "waiting_for_key_scan!"
                 FROM adopted_assets d JOIN assets a ON a.id = d.asset_id
                WHERE a.state = 'pending'"#
        )
        .fetch_one(conn)
        .await
    }

    fn log(scheduled: &u64) {
        if *scheduled > 0 {
            tracing::info!(scheduled, "adopted assets made due");
        }
    }
}
