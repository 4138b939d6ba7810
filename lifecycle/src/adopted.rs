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

/// Where adopted assets stand (what `status` shows beside reconciliation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Standing {
    /// Adopted assets not yet settled away.
    pub adopted: i64,
    /// Of them, those a record names by key: a record without an asset row, the integration gap to fix.
    pub named_without_row: i64,
    /// The first few of those: (key, `schema.table.column` naming it).
    pub named_sample: Vec<(String, String)>,
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
        let adopted = sqlx::query!(
            r#"SELECT count(*) AS "adopted!",
                  count(*) FILTER (WHERE EXISTS (
                      SELECT 1 FROM named_keys n JOIN census_columns c ON c.relid = n.relid AND c.attnum = n.attnum
                       WHERE asset_sweeper_names_key(n.storage_key, d.storage_key))) AS "named!"
             FROM adopted_assets d JOIN assets a ON a.id = d.asset_id"#
        )
        .fetch_one(&mut *conn)
        .await?;
        let named_sample = sqlx::query!(
            r#"SELECT DISTINCT ON (d.storage_key) d.storage_key,
                  asset_sweeper_column_name(c) AS "column!"
             FROM adopted_assets d
             JOIN assets a ON a.id = d.asset_id
             JOIN named_keys n ON asset_sweeper_names_key(n.storage_key, d.storage_key)
             JOIN census_columns c ON c.relid = n.relid AND c.attnum = n.attnum
            ORDER BY d.storage_key LIMIT 5"#
        )
        .fetch_all(&mut *conn)
        .await?;
        Ok(Standing {
            adopted: adopted.adopted,
            named_without_row: adopted.named,
            named_sample: named_sample.into_iter().map(|n| (n.storage_key, n.column)).collect(),
        })
    }

    fn log(scheduled: &u64) {
        if *scheduled > 0 {
            tracing::info!(scheduled, "adopted assets made due");
        }
    }
}
