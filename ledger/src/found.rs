//! What reconciliation found, as the ledger counts it: per workspace, the keys no row knew and the keys adopted of
//! them, read back from a listing's `findings` (reconciliation writes them through its own type, and
//! `money::the_ledger_reads_back_the_keys_a_comparison_found_and_adopted` holds these fields to what it writes).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::figure::{Figure, figure};

/// Keys of one workspace (under one prefix) and their bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Found {
    /// The workspace the keys name.
    pub workspace_id: Uuid,
    /// How many keys.
    pub keys: i64,
    /// Their bytes.
    pub bytes: i64,
}

/// A listing's findings, as far as money reads them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Findings {
    /// Keys no row knew, per prefix and workspace.
    #[serde(default, deserialize_with = "platform::recorded::readable")]
    pub unknown: Vec<Found>,
    /// Keys adopted of them, per prefix and workspace.
    #[serde(default, deserialize_with = "platform::recorded::readable")]
    pub adopted: Vec<Found>,
}

impl Findings {
    /// Findings read from a listing's `findings`; anything unreadable counts as nothing found.
    pub fn of(findings: &Value) -> Findings {
        Findings::deserialize(findings).unwrap_or_default()
    }

    /// Per workspace, the keys no row knew less those adopted, where some are left.
    pub fn left_unknown(&self) -> BTreeMap<Uuid, Figure> {
        let mut sums: BTreeMap<Uuid, (i64, i64)> = BTreeMap::new();
        for (f, sign) in self.unknown.iter().map(|f| (f, 1)).chain(self.adopted.iter().map(|f| (f, -1))) {
            let sum = sums.entry(f.workspace_id).or_default();
            *sum = (sum.0.saturating_add(sign * f.keys), sum.1.saturating_add(sign * f.bytes));
        }
        sums.into_iter()
            .filter(|(_, (keys, _))| *keys > 0)
            .map(|(ws, (keys, bytes))| (ws, figure(keys, bytes)))
            .collect()
    }
}

/// The findings of the newest comparison, if one ran.
pub async fn newest(conn: &mut PgConnection) -> Result<Findings, sqlx::Error> {
    let findings = sqlx::query_scalar!(
        r#"SELECT findings FROM reconcile_listings WHERE compared_at IS NOT NULL
            ORDER BY compared_at DESC, id DESC LIMIT 1"#
    )
    .fetch_optional(conn)
    .await?
    .flatten();
    Ok(findings.as_ref().map(Findings::of).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn what_is_left_unknown_is_found_less_adopted_per_workspace_and_an_unreadable_entry_counts_as_nothing() {
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let findings = Findings::of(&json!({
            "unknown": [
                {"prefix": "p/", "workspace_id": a, "keys": 5, "bytes": 50, "young": 0, "sample": []},
                {"prefix": "q/", "workspace_id": a, "keys": 1, "bytes": 10},
                {"prefix": "p/", "workspace_id": b, "keys": 2, "bytes": 20},
                {"prefix": "p/", "workspace_id": b, "bytes": 999},
            ],
            "adopted": [{"prefix": "p/", "workspace_id": b, "keys": 2, "bytes": 20}],
        }));
        assert_eq!(findings.left_unknown(), BTreeMap::from([(a, Figure { objects: 6, bytes: 60 })]));
        assert_eq!(Findings::of(&json!({"unknown": "not a list"})), Findings::default());
    }
}
