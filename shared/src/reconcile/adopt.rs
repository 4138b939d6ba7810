//! Adoption: bytes no row knows become assets, so the ordinary pipeline (the recheck, the grace floor, the brake,
//! the audit trail, undelete) settles them like any other. Only under a managed prefix an operator approved
//! (invariant 14), never under one another writer shares, only keys written before the grace period, and never
//! over a stored object a row already has: an upload that got there first keeps it, and one that comes later
//! reuses the adopted object like any existing bytes.
//!
//! An adopted asset's id is one nobody could hold, so a record can only name it by key: the consumer destroys one
//! only once the census's key scan has covered the schema and no record names its key ([`hold`]).

use std::time::Duration;

use serde::Serialize;
use serde_json::json;
use sqlx::PgConnection;
use uuid::Uuid;

use super::layout::KeyLayout;
use super::{Findings, Listing};
use crate::audit::{AuditAction, Event};
use crate::lifecycle::{self, Decision};
use crate::{AssetId, WorkspaceId};

/// Keys adopted from one prefix into one workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Adopted {
    /// The managed prefix.
    pub prefix: String,
    /// The workspace the keys name (or the unowned one).
    pub workspace_id: Uuid,
    /// How many keys.
    pub keys: i64,
    /// Their bytes.
    pub bytes: i64,
}

/// The content hash of an adopted object: its bytes were never hashed by the application.
pub const ADOPTED_HASH: &str = "adopted";

/// Adopts what `listing` holds that no row knows, in the caller's transaction: keys under an approved prefix
/// that no other writer shares, last written before `grace` ago, at most `max`. Notes each managed prefix met for
/// the first time (awaiting approval), and fills `findings.adopted` and `findings.awaiting_approval`. A dry run
/// calls this too and rolls it back: it shows what would be adopted.
pub async fn adopt(
    conn: &mut PgConnection,
    listing: Listing,
    layout: &KeyLayout,
    findings: &mut Findings,
    grace: Duration,
    max: u32,
) -> Result<(), sqlx::Error> {
    let prefixes: Vec<String> = layout.prefixes().into_iter().map(str::to_owned).collect();
    let signature = layout.signature();
    // A prefix met with another layout (a wider pattern adopts more) is met anew: its approval is gone. Read after
    // the statement, so a prefix this one notes or resets is not approved.
    sqlx::query!(
        "INSERT INTO reconcile_prefixes (prefix, layout) SELECT unnest($1::text[]), $2
         ON CONFLICT (prefix) DO UPDATE
            SET layout = EXCLUDED.layout, first_seen_at = now(), approved_at = NULL, approved_by = NULL, reason = NULL
          WHERE reconcile_prefixes.layout IS DISTINCT FROM EXCLUDED.layout",
        &prefixes,
        signature,
    )
    .execute(&mut *conn)
    .await?;
    let approved = sqlx::query_scalar!(
        "SELECT prefix FROM reconcile_prefixes WHERE approved_at IS NOT NULL AND prefix = ANY ($1) AND layout = $2",
        &prefixes,
        signature,
    )
    .fetch_all(&mut *conn)
    .await?;
    let refused = |prefix: &str| findings.off_pattern.iter().any(|o| o.prefix == prefix);
    let eligible: Vec<String> = approved.iter().filter(|p| !refused(p)).cloned().collect();
    let mut awaiting: Vec<String> = findings
        .unknown
        .iter()
        .filter(|u| u.keys > u.young && !approved.contains(&u.prefix) && !refused(&u.prefix))
        .map(|u| u.prefix.clone())
        .collect();
    awaiting.dedup();
    findings.awaiting_approval = awaiting;
    if eligible.is_empty() {
        return Ok(());
    }
    // The sweeper's own write: the rows are dated from the bucket's LastModified, and the insert of the asset
    // does not restart its object's grace floor as an application's upload reusing the bytes would.
    sqlx::query!("SELECT set_config('asset_sweeper.actor', 'sweeper', true)").fetch_one(&mut *conn).await?;
    // One statement: the stored object only where none exists (an upload's own row wins, and one still
    // uncommitted is waited for), the asset only for an object this statement wrote. Dated from the bucket's
    // LastModified, so its grace floor ran out with the key's. Due never, until [`schedule`] finds the key scan
    // has read every text and JSON column since: a record naming the key written before the adoption is seen.
    let rows = sqlx::query!(
        r#"WITH candidates AS MATERIALIZED (
               SELECT DISTINCT ON (k.storage_key) k.storage_key, k.byte_size, k.last_modified, k.prefix, k.workspace_id
                 FROM reconcile_keys k
                WHERE k.listing_id = $1 AND k.workspace_id IS NOT NULL AND k.prefix = ANY ($2)
                  AND k.last_modified <= now() - $3 * interval '1 second'
                  AND NOT EXISTS (SELECT 1 FROM stored_objects o WHERE o.storage_key = k.storage_key)
                ORDER BY k.storage_key
                LIMIT $4
           ),
           objects AS (
               INSERT INTO stored_objects (storage_key, content_hash, byte_size, created_at, updated_at)
               SELECT storage_key, $5, byte_size, last_modified, last_modified FROM candidates
               ON CONFLICT (storage_key) DO NOTHING
               RETURNING storage_key
           ),
           rows AS (
               INSERT INTO assets (workspace_id, storage_key, content_hash, byte_size, state, due_at, created_at,
                                   updated_at)
               SELECT c.workspace_id, c.storage_key, $5, c.byte_size, 'pending', 'infinity', c.last_modified,
                      c.last_modified
                 FROM candidates c JOIN objects o USING (storage_key)
               RETURNING id, workspace_id, storage_key, byte_size, created_at
           ),
           noted AS (
               INSERT INTO adopted_assets (asset_id, storage_key, workspace_id, listing_id, last_modified, layout)
               SELECT id, storage_key, workspace_id, $1, created_at, $6 FROM rows
           )
           SELECT r.id AS "id!", r.workspace_id AS "workspace_id!", r.storage_key AS "storage_key!",
                  r.byte_size AS "byte_size!", r.created_at AS "last_modified!", c.prefix AS "prefix!"
             FROM rows r JOIN candidates c USING (storage_key)
            ORDER BY c.prefix, r.workspace_id, r.storage_key"#,
        listing.id,
        &eligible,
        grace.as_secs_f64(),
        i64::from(max),
        ADOPTED_HASH,
        signature,
    )
    .fetch_all(&mut *conn)
    .await?;
    let evidence: Vec<_> = rows
        .iter()
        .map(|r| {
            json!({
                "found_by": "reconciliation",
                "listing": listing.id,
                "listing_taken_at": listing.taken_at,
                "prefix": r.prefix,
                "last_modified": r.last_modified,
            })
        })
        .collect();
    let events: Vec<Event<'_>> = rows
        .iter()
        .zip(evidence)
        .map(|(r, evidence)| {
            Event::new(AssetId(r.id), WorkspaceId(r.workspace_id), AuditAction::Adopted, evidence)
                .storage_key(&r.storage_key)
        })
        .collect();
    crate::audit::write_all(&mut *conn, &events).await?;
    for r in &rows {
        match findings.adopted.last_mut() {
            Some(a) if a.prefix == r.prefix && a.workspace_id == r.workspace_id => {
                a.keys += 1;
                a.bytes += r.byte_size;
            }
            _ => findings.adopted.push(Adopted {
                prefix: r.prefix.clone(),
                workspace_id: r.workspace_id,
                keys: 1,
                bytes: r.byte_size,
            }),
        }
    }
    Ok(())
}

/// Makes due the adopted assets waiting for the key scan ([`adopt`] leaves them due never) once it has covered
/// every text and JSON column since their adoption, with the layout that adopted them (a key another layout no
/// longer extracts would never be found named); answers how many. The sweep runs it after the census and before
/// the brake, which counts them.
pub async fn schedule(conn: impl sqlx::PgExecutor<'_>) -> Result<u64, sqlx::Error> {
    let scheduled = sqlx::query!(
        "UPDATE assets a SET due_at = now()
           FROM adopted_assets d
          WHERE d.asset_id = a.id AND a.state = 'pending' AND a.due_at = 'infinity'
            AND NOT EXISTS (SELECT 1 FROM census_columns c WHERE asset_sweeper_keys_unscanned(c, d))"
    )
    .execute(conn)
    .await?;
    Ok(scheduled.rows_affected())
}

/// `decision` as an adopted asset's holds leave it: a delete or purge waits while [`hold`] says so. What the settle
/// acts on and the plan shows.
pub async fn weigh(
    conn: &mut PgConnection,
    asset: AssetId,
    storage_key: &str,
    decision: Decision,
) -> Result<(Decision, Option<Hold>), sqlx::Error> {
    let hold = match decision {
        Decision::Delete | Decision::Purge => hold(conn, asset, storage_key).await?,
        _ => None,
    };
    Ok((lifecycle::held(decision, hold.as_ref()), hold))
}

/// Why an adopted asset's bytes must wait, though nothing refers to it by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hold {
    /// A record names its key: `schema.table.column`. The integration gap to fix: a record without an asset row.
    Named(String),
    /// The key scan has not covered these text and JSON columns as they stand since the adoption (the first few).
    Unscanned(Vec<String>),
}

/// Whether `asset`, about to be destroyed, was adopted and must wait: read in the settle's transaction, after the
/// asset and its object are locked. `None` for an asset the application wrote, for an adopted one whose bytes
/// another asset shares (only its row goes), and for an adopted one no record names once the key scan has read
/// every text and JSON column, in a scan begun after the adoption, with the layout that adopted it.
pub async fn hold(conn: &mut PgConnection, asset: AssetId, storage_key: &str) -> Result<Option<Hold>, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT EXISTS (SELECT 1 FROM adopted_assets d WHERE d.asset_id = $1) AS "adopted!",
                  (SELECT asset_sweeper_column_name(c)
                     FROM named_keys n JOIN census_columns c ON c.relid = n.relid AND c.attnum = n.attnum
                    WHERE n.storage_key = $2
                    ORDER BY 1 LIMIT 1) AS named_by,
                  ARRAY(SELECT asset_sweeper_column_name(c)
                          FROM census_columns c JOIN adopted_assets d ON d.asset_id = $1
                         WHERE asset_sweeper_keys_unscanned(c, d)
                         ORDER BY 1 LIMIT 5) AS "unscanned!""#,
        asset.0,
        storage_key,
    )
    .fetch_one(&mut *conn)
    .await?;
    if !row.adopted {
        return Ok(None);
    }
    // Bytes another asset row shares are not removed: the adopted row alone goes, as for any sharer. The sharers are
    // locked, so none can go before the settle counts them again and removes the row only.
    let shared = sqlx::query_scalar!(
        r#"SELECT count(*) AS "shared!" FROM (SELECT 1 FROM assets WHERE storage_key = $2 AND id <> $1 FOR KEY SHARE) s"#,
        asset.0,
        storage_key,
    )
    .fetch_one(conn)
    .await?;
    if shared > 0 {
        return Ok(None);
    }
    if let Some(column) = row.named_by {
        return Ok(Some(Hold::Named(column)));
    }
    Ok((!row.unscanned.is_empty()).then_some(Hold::Unscanned(row.unscanned)))
}
