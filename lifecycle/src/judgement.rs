//! The judgement of one asset, as a value: read its rows, recheck every source, decide by the rules, weigh the
//! holds, count the sharers of its bytes. The settle acts on it inside its transaction with the rows locked; the
//! operator's `plan` prints it from a read-only one. One function, so what the plan shows is what the settle does.

use std::time::Duration;

use platform::{AssetId, WorkspaceId};
use schema::ReferenceMap;
use schema::recheck::{self, Recheck};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::holds::{self, Hold};
use crate::reads::{self, Seen};
use crate::rules::{self, AssetState, Decision, Facts, Proven};

/// The windows the rules count with, and whether the bucket could undo a removal.
#[derive(Debug, Clone, Copy)]
pub struct Terms {
    /// Nothing written more recently than this is retired or deleted (invariant 3).
    pub grace: Duration,
    /// An upload still `pending` this long after it was created is abandoned.
    pub abandon_after: Duration,
    /// The asset bucket's versioning, as the caller read it, is `Enabled` (`platform::bucket`): without it deletes
    /// and purges wait (invariant 18).
    pub undoable: bool,
    /// Deletes and purges wait this long after the schema last changed (`SCHEMA_QUIET_PERIOD`).
    pub quiet: Duration,
}

/// The claim a message carries: what a settle checks the locked row against before anything is judged.
#[derive(Debug, Clone, Copy)]
pub struct Claimed {
    /// The workspace the message names.
    pub workspace_id: WorkspaceId,
    /// The lease the message was sent under.
    pub token: Uuid,
}

/// What one asset comes to.
#[derive(Debug)]
pub struct Judgement {
    /// Its rows, as read (and, for a settle, locked).
    pub facts: Facts,
    /// Every source's answer.
    pub found: Recheck,
    /// What the rules and the holds decide.
    pub decision: Decision,
    /// Why adopted bytes wait, when they do.
    pub hold: Option<Hold>,
    /// For a delete or purge: how many other asset rows share the bytes (then only the row goes).
    pub sharers: Option<i64>,
    /// What the access logs saw, when it changed the decision: a read that keeps, or logs a removal waits for.
    pub seen: Option<Seen>,
}

/// Why an asset was not judged.
#[derive(Debug)]
pub enum Judged {
    /// Judged: see the judgement.
    Judged(Box<Judgement>),
    /// No such asset (removed by an earlier settle, or never there).
    Gone,
    /// The claim names another workspace than the row's: nothing may be touched (invariant 7).
    WrongWorkspace(WorkspaceId),
    /// Already settled, claimed anew, no longer due, or waiting for an operator: this claim changes nothing.
    NotClaimed(Facts),
}

/// Judges `asset` against `map`. With `claim` (a settle) its rows are locked for the caller's transaction and must
/// still be held by that claim; without (the plan, explain) nothing is locked and nothing is checked against a claim.
pub async fn judge(
    conn: &mut PgConnection,
    map: &ReferenceMap,
    asset: AssetId,
    terms: Terms,
    claim: Option<Claimed>,
) -> Result<Judged, sqlx::Error> {
    // Both rows locked in one statement: the object row is what a concurrent upload of the same bytes needs.
    let Some(facts) = crate::facts::read(&mut *conn, asset, terms.grace, terms.abandon_after, claim.is_some()).await?
    else {
        return Ok(Judged::Gone);
    };
    if let Some(claim) = claim {
        if facts.workspace_id != claim.workspace_id.0 {
            return Ok(Judged::WrongWorkspace(WorkspaceId(facts.workspace_id)));
        }
        if facts.lease_token != Some(claim.token) || !facts.due || facts.state == AssetState::Failed {
            return Ok(Judged::NotClaimed(facts));
        }
    }
    let found = recheck::recheck(&mut *conn, map, asset).await?;
    let proven = Proven { schema: map.proven(), undoable: terms.undoable };
    let decision = rules::decide(found.keeping().is_some(), &facts, proven);
    // Adopted bytes have an id nobody holds: a record can only name them by key.
    let (decision, hold) = holds::weigh(&mut *conn, asset, &facts, decision, terms.quiet, claim.is_some()).await?;
    // A read is evidence the database cannot show (an email, a template, another service): it keeps, and a removal
    // waits for the logs that could show one.
    let (decision, seen) = match reads::weigh(&mut *conn, &facts, decision, terms.grace).await? {
        Some((decision, seen)) => (decision, Some(seen)),
        None => (decision, None),
    };
    let sharers = match decision {
        Decision::Delete | Decision::Purge => {
            Some(crate::facts::sharers(&mut *conn, &facts.storage_key, asset, false).await?)
        }
        _ => None,
    };
    Ok(Judged::Judged(Box::new(Judgement { facts, found, decision, hold, sharers, seen })))
}
