//! Adoption: bytes no row knows become assets, so the ordinary pipeline (the recheck, the grace floor, the brake,
//! the audit trail, undelete) settles them like any other. Only under a managed prefix an operator approved
//! (invariant 14), never under one another writer shares, only keys written before the grace period, and never
//! over a stored object a row already has: an upload that got there first keeps it, and one that comes later
//! reuses the adopted object like any existing bytes.
//!
//! An approval covers as many adoptable keys as the report the operator read showed there (invariant 24): a report
//! whose count for the prefix jumps beyond the tolerance over both that and the previous report's withdraws it, and
//! nothing is adopted there until a person reads the new report and approves again. A database restored from an
//! older backup, or a migration that dropped a table of references, orphans bytes in bulk: that is the jump.
//!
//! An adopted asset's id is one nobody could hold, so a record can only name it by key: the consumer destroys one
//! only once the census's key scan has covered the schema and no record names its key
//! ([`lifecycle::holds::hold`]).

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::PgConnection;
use uuid::Uuid;

use super::{Findings, Listing};
use lifecycle::assets::{self, Adoption};
use platform::approval::{Signed, Tolerance, count};
use platform::audit::{AuditAction, Event};
use platform::keys::KeyLayout;
use platform::{AssetId, WorkspaceId};

/// Keys adopted from one prefix into one workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

/// An approved prefix whose adoptable keys jumped: its approval is withdrawn until a person approves again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Withdrawn {
    /// The managed prefix.
    pub prefix: String,
    /// Who had approved it.
    pub approved_by: String,
    /// The adoptable keys the approval was granted on.
    pub approved_keys: i64,
    /// The previous report's, if one was compared since the prefix was met.
    pub previous_keys: Option<i64>,
    /// This report's.
    pub keys: i64,
    /// The tolerance it jumped beyond, in percent.
    pub tolerance_percent: u32,
}

/// A withdrawal as `reconcile_prefixes.withdrawn` records it: the listing that found the jump, when, and the figures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WithdrawnRecord {
    /// The listing whose report found the jump.
    pub listing: i64,
    /// When, as the database wrote it.
    pub at: String,
    /// The figures.
    #[serde(flatten)]
    pub withdrawn: Withdrawn,
}

/// How one comparison adopts.
#[derive(Debug, Clone, Copy)]
pub struct Terms {
    /// Keys written within this are not adopted.
    pub grace: Duration,
    /// The most keys adopted.
    pub max: u32,
    /// How far a prefix's adoptable keys may grow over its approval and the previous report.
    pub tolerance: Tolerance,
}

/// The content hash of an adopted object: its bytes were never hashed by the application.
pub const ADOPTED_HASH: &str = "adopted";

/// Adopts what `listing` holds that no row knows, in the caller's transaction: keys under a prefix whose approval
/// is unexpired and covers this report's count, that no other writer shares, last written before the grace period,
/// at most `max`. Notes each managed prefix met for the first time (awaiting approval) and each prefix's count (the
/// next report's previous one), withdraws an approval its prefix's count outgrew, and fills `findings.adopted`,
/// `findings.awaiting_approval` and `findings.withdrawn`. A dry run calls this too and rolls it back: it shows what
/// would be adopted.
pub async fn adopt(
    conn: &mut PgConnection,
    listing: Listing,
    layout: &KeyLayout,
    findings: &mut Findings,
    terms: Terms,
) -> Result<(), sqlx::Error> {
    let Terms { grace, max, tolerance } = terms;
    let prefixes: Vec<String> = layout.prefixes().into_iter().map(str::to_owned).collect();
    let signature = layout.signature();
    // A prefix met with another layout (a wider pattern adopts more) is met anew: its approval is gone. Read after
    // the statement, so a prefix this one notes or resets is not approved.
    sqlx::query!(
        "INSERT INTO reconcile_prefixes (prefix, layout) SELECT unnest($1::text[]), $2
         ON CONFLICT (prefix) DO UPDATE
            SET layout = EXCLUDED.layout, first_seen_at = now(), approved_at = NULL, approved_by = NULL, reason = NULL,
                approved_until = NULL, approved_keys = NULL, approved_bytes = NULL, reported_keys = NULL,
                withdrawn = NULL
          WHERE reconcile_prefixes.layout IS DISTINCT FROM EXCLUDED.layout",
        &prefixes,
        signature,
    )
    .execute(&mut *conn)
    .await?;
    // Keys adoptable now (written before the grace period), per prefix.
    let mut adoptable: HashMap<&str, i64> = prefixes.iter().map(|p| (p.as_str(), 0)).collect();
    for u in &findings.unknown {
        *adoptable.entry(u.prefix.as_str()).or_default() += u.keys - u.young;
    }
    let standing = sqlx::query!(
        r#"SELECT prefix, approved_by AS "approved_by!", approved_keys AS "approved_keys!", reported_keys
             FROM reconcile_prefixes
            WHERE approved_at IS NOT NULL AND approved_until > now() AND prefix = ANY ($1) AND layout = $2
            ORDER BY prefix
              FOR UPDATE"#,
        &prefixes,
        signature,
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut approved = Vec::with_capacity(standing.len());
    for p in standing {
        let keys = adoptable.get(p.prefix.as_str()).copied().unwrap_or(0);
        let baseline = p.approved_keys.max(p.reported_keys.unwrap_or(0));
        if tolerance.outgrown("keys", count(baseline), count(keys)).is_none() {
            approved.push(p.prefix);
            continue;
        }
        let withdrawn = Withdrawn {
            prefix: p.prefix,
            approved_by: p.approved_by,
            approved_keys: p.approved_keys,
            previous_keys: p.reported_keys,
            keys,
            tolerance_percent: tolerance.0,
        };
        tracing::warn!(prefix = %withdrawn.prefix, approved = withdrawn.approved_keys, previous = ?withdrawn.previous_keys,
                       keys, "adoptable keys jumped under an approved prefix: its approval is withdrawn");
        sqlx::query!(
            "UPDATE reconcile_prefixes
                SET approved_at = NULL, approved_by = NULL, reason = NULL, approved_until = NULL,
                    approved_keys = NULL, approved_bytes = NULL,
                    withdrawn = jsonb_build_object('listing', $2::bigint, 'at', now()) || $3::jsonb
              WHERE prefix = $1",
            withdrawn.prefix,
            listing.id,
            serde_json::to_value(&withdrawn).unwrap_or_default(),
        )
        .execute(&mut *conn)
        .await?;
        findings.withdrawn.push(withdrawn);
    }
    // This report's count is the next one's previous count.
    let (names, counts): (Vec<String>, Vec<i64>) = adoptable.iter().map(|(p, k)| ((*p).to_owned(), *k)).unzip();
    sqlx::query!(
        "UPDATE reconcile_prefixes r SET reported_keys = x.keys
           FROM unnest($1::text[], $2::bigint[]) AS x(prefix, keys)
          WHERE r.prefix = x.prefix AND r.layout = $3",
        &names,
        &counts,
        signature,
    )
    .execute(&mut *conn)
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
/// An operator's approval of adoption under one managed prefix, with what they read when they granted it.
pub struct PrefixGrant<'a> {
    /// The prefix, as stored (`reconcile_prefixes.prefix`).
    pub prefix: &'a str,
    /// The layout the approval was read with ([`KeyLayout::signature`]).
    pub layout: String,
    /// Who, why, for how long.
    pub signed: Signed<'a>,
    /// The adoptable keys the newest reconciliation found there, and their bytes: what the approval covers.
    pub keys: i64,
    /// Their bytes.
    pub bytes: i64,
    /// How the application names those keys, as that reconciliation read it (JSON `null` when it read none).
    pub naming: serde_json::Value,
    /// Approved though most of the keys are named by nothing the census can find (`--despite-unnamed`).
    pub despite_unnamed: bool,
}

/// Records `grant` in `reconcile_prefixes` (a prefix met anew under another layout starts its grace again): when it
/// expires (RFC 3339, UTC). In the caller's transaction, which read what the grant says was read.
pub async fn approve_prefix(conn: &mut PgConnection, grant: PrefixGrant<'_>) -> Result<String, sqlx::Error> {
    let until = sqlx::query_scalar!(
        r#"INSERT INTO reconcile_prefixes AS r (prefix, layout, approved_at, approved_by, reason, approved_until,
                                                approved_keys, approved_bytes, withdrawn, approved_naming,
                                                approved_despite_unnamed)
           VALUES ($1, $2, now(), $3, $4, now() + $5 * interval '1 hour', $6, $7, NULL, $8, $9)
           ON CONFLICT (prefix) DO UPDATE
              SET layout = EXCLUDED.layout, approved_at = now(), approved_by = EXCLUDED.approved_by,
                  reason = EXCLUDED.reason, approved_until = EXCLUDED.approved_until,
                  approved_keys = EXCLUDED.approved_keys, approved_bytes = EXCLUDED.approved_bytes, withdrawn = NULL,
                  approved_naming = EXCLUDED.approved_naming,
                  approved_despite_unnamed = EXCLUDED.approved_despite_unnamed,
                  first_seen_at = CASE WHEN r.layout = EXCLUDED.layout THEN r.first_seen_at ELSE now() END
           RETURNING approved_until AS "until!""#,
        grant.prefix,
        grant.layout,
        grant.signed.by,
        grant.signed.reason,
        grant.signed.hours(),
        grant.keys,
        grant.bytes,
        grant.naming,
        grant.despite_unnamed,
    )
    .fetch_one(conn)
    .await?;
    Ok(platform::approval::stamp(until))
}
