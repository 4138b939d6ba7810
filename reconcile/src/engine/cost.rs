//! What a comparison on an engine will scan, said before it runs: at most every data file of the report and every
//! file of the export (a columnar engine reads fewer bytes: only the five columns the comparison names, and none of
//! a file's other columns), priced at Athena's rate ([`ledger::scan`]). Before the export is written, its size is
//! estimated from the planner's statistics of `stored_objects`.

use serde::{Deserialize, Serialize};
use sqlx::PgConnection;

use ledger::scan::Scan;

/// The most a comparison scans.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Estimate {
    /// The report's data files, as its manifest sizes them.
    pub inventory_bytes: u64,
    /// The export's files: written, or estimated.
    pub known_bytes: u64,
    /// Whether `known_bytes` is an estimate (the export is not written yet).
    pub known_estimated: bool,
}

impl Estimate {
    /// The bytes, and what Athena bills for them.
    pub fn athena(&self) -> Scan {
        Scan::athena(self.inventory_bytes.saturating_add(self.known_bytes))
    }
}

/// Bytes a row of the export takes before compression, beyond its key: the size, two flags, a time, a prefix's
/// dictionary index and Parquet's levels.
const ROW_OVERHEAD: u64 = 24;

/// The export's size, from the planner's statistics of `stored_objects` (its row count and the key's average width):
/// no row is read.
pub async fn export_estimate(conn: &mut PgConnection) -> Result<u64, sqlx::Error> {
    let stats = sqlx::query!(
        r#"SELECT greatest(c.reltuples, 0)::bigint AS "rows!",
                  coalesce((SELECT s.avg_width FROM pg_stats s
                             WHERE s.schemaname = n.nspname AND s.tablename = c.relname
                               AND s.attname = 'storage_key'), 64)::bigint AS "width!"
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.oid = 'stored_objects'::regclass"#
    )
    .fetch_one(conn)
    .await?;
    let rows = u64::try_from(stats.rows).unwrap_or(0);
    let width = u64::try_from(stats.width).unwrap_or(64);
    Ok(rows.saturating_mul(width + ROW_OVERHEAD))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_is_every_file_of_both_at_athenas_price() {
        let estimate =
            Estimate { inventory_bytes: 600_000_000_000, known_bytes: 400_000_000_000, known_estimated: false };
        assert_eq!(estimate.athena(), Scan { bytes: 1_000_000_000_000, cents: 500 });
    }
}
