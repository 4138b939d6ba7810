//! Adoption: bytes no row knows become assets, so the ordinary pipeline (the recheck, the grace floor, the brake,
//! the audit trail, undelete) settles them like any other. Only under a managed prefix an operator approved
//! (invariant 14), never under one another writer shares, only keys written before the grace period, and never
//! over a stored object a row already has: an upload that got there first keeps it, and one that comes later
//! reuses the adopted object like any existing bytes.
//!
//! An adopted asset's id is one nobody could hold, so a record can only name it by key: the consumer destroys one
//! only once the census's key scan has covered the schema and no record names its key
//! ([`lifecycle::holds::hold`]).

use std::time::Duration;

use serde::Serialize;
use serde_json::json;
use sqlx::PgConnection;
use uuid::Uuid;

use super::{Findings, Listing};
use lifecycle::assets::{self, Adoption};
use platform::audit::{AuditAction, Event};
use platform::keys::KeyLayout;
use platform::{AssetId, WorkspaceId};

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
    let adoption =
        Adoption { listing: listing.id, prefixes: &eligible, grace, max, hash: ADOPTED_HASH, layout: &signature };
    let rows = assets::adopt(&mut *conn, adoption).await?;
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
    platform::audit::write_all(&mut *conn, &events).await?;
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
