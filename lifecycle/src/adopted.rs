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
    /// Of those, named only relative to a root (a Django or Laravel name): a key source the application has not
    /// declared, which would keep them with an asset row of their own.
    pub relative_only: i64,
    /// The first few of those: (key, `schema.table.column` naming it).
    pub relative_sample: Vec<(String, String)>,
    /// Adopted assets retired, deleted or purged that a record names now (by key or relative to a root): a file
    /// readers may miss, which a person restores or undeletes.
    pub removed_named: i64,
    /// The first few of those: (key, its state or `removed`, `schema.table.column` naming it).
    pub removed_sample: Vec<(String, String, String)>,
    /// Assets a person restored or undeleted that discovery passes over (`kept_by`).
    pub kept_by_person: i64,
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
        // Each adopted key with what names it now: its asset's state (none once removed), whether a record names it
        // by key, and whether only relative to a root. One read of the adopted rows.
        let named = sqlx::query!(
            r#"SELECT d.storage_key AS "key!", a.state AS "state?", n.column AS "column?", n.relative AS "relative?"
                 FROM adopted_assets d
                 LEFT JOIN assets a ON a.id = d.asset_id
                 LEFT JOIN LATERAL (
                      SELECT asset_sweeper_column_name(c) AS column, bool_and(k.relative) OVER () AS relative
                        FROM named_keys k JOIN census_columns c ON c.relid = k.relid AND c.attnum = k.attnum
                       WHERE asset_sweeper_names_key(k.storage_key, d.storage_key)
                       ORDER BY k.relative, 1 LIMIT 1) n ON true
                WHERE a.id IS NOT NULL OR n.column IS NOT NULL
                ORDER BY d.storage_key"#
        )
        .fetch_all(&mut *conn)
        .await?;
        let mut standing = Standing {
            adopted: 0,
            named_without_row: 0,
            named_sample: Vec::new(),
            relative_only: 0,
            relative_sample: Vec::new(),
            removed_named: 0,
            removed_sample: Vec::new(),
            kept_by_person: 0,
        };
        for row in named {
            standing.adopted += i64::from(row.state.is_some());
            let Some(column) = row.column else { continue };
            match row.state.as_deref() {
                // Held, and waiting for the application: by a name it should declare, or one it writes.
                Some("pending") => {
                    standing.named_without_row += 1;
                    if standing.named_sample.len() < 5 {
                        standing.named_sample.push((row.key.clone(), column.clone()));
                    }
                    if row.relative == Some(true) {
                        standing.relative_only += 1;
                        if standing.relative_sample.len() < 5 {
                            standing.relative_sample.push((row.key, column));
                        }
                    }
                }
                Some("retired") | None => {
                    standing.removed_named += 1;
                    if standing.removed_sample.len() < 5 {
                        let state = row.state.unwrap_or_else(|| "removed".to_owned());
                        standing.removed_sample.push((row.key, state, column));
                    }
                }
                _ => {}
            }
        }
        standing.kept_by_person = sqlx::query_scalar!(
            r#"SELECT count(*) AS "kept!" FROM assets WHERE kept_by IS NOT NULL AND state = 'attached'"#
        )
        .fetch_one(&mut *conn)
        .await?;
        Ok(standing)
    }

    fn log(scheduled: &u64) {
        if *scheduled > 0 {
            tracing::info!(scheduled, "adopted assets made due");
        }
    }
}
