//! The blast-radius brake (invariant 11): a workspace whose due assets are too large a share of what it holds,
//! or too many in absolute terms, gets nothing enqueued until an operator approves it. An approval covers the plan
//! the operator read when granting it (its due assets and bytes) and no plan that outgrew it (invariant 24).

use std::collections::HashMap;

use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use platform::WorkspaceId;
use platform::approval::{Outgrown, Signed, Tolerance, count, first_outgrown};

/// The blast-radius brake (invariant 11), applied per workspace to what is due against what it holds.
#[derive(Debug, Clone)]
pub struct BrakeSettings {
    /// Largest share, in percent, of a workspace's assets or bytes that may be due in one pass.
    pub max_share_percent: u32,
    /// The share rule applies only from this many due assets, so a small workspace can release its few assets.
    pub share_min_assets: u64,
    /// Most assets of one workspace that may be due in one pass, whatever the share.
    pub max_assets: u64,
    /// Most bytes of one workspace that may be due in one pass, whatever the share.
    pub max_bytes: u64,
}

/// What one workspace has due now, against everything it holds.
#[derive(Debug, Clone, Serialize)]
pub struct WorkspaceDue {
    /// The workspace.
    #[serde(skip)]
    pub workspace_id: WorkspaceId,
    /// Its assets due now, claimed or not.
    pub due_assets: i64,
    /// Their bytes.
    pub due_bytes: i64,
    /// Every asset row it has, in any state.
    pub live_assets: i64,
    /// Their bytes.
    pub live_bytes: i64,
    /// Of its due assets, those reconciliation adopted (bytes no row knew).
    #[serde(default)]
    pub adopted_due: i64,
    /// Whether an adopted asset of the workspace was ever retired, deleted or purged: until one was, its adoption is
    /// a first one, which the brake holds whatever its size.
    #[serde(default)]
    pub adopted_removed_before: bool,
}

/// An operator's unexpired release of a workspace.
#[derive(Debug, Clone, Serialize)]
pub struct Approval {
    /// The workspace it releases.
    #[serde(skip)]
    pub workspace_id: WorkspaceId,
    /// Its row in `brake_approvals`.
    pub id: i64,
    /// Who approved.
    pub approved_by: String,
    /// Why, as they wrote it.
    pub reason: String,
    /// The workspace's due assets when it was granted: what the operator read.
    pub approved_assets: i64,
    /// Their bytes.
    pub approved_bytes: i64,
}

impl Approval {
    /// Where `due` outgrew what this approval was granted on, if it did: then it covers nothing.
    pub fn outgrown_by(&self, due: &WorkspaceDue, tolerance: Tolerance) -> Option<Outgrown> {
        first_outgrown(
            tolerance,
            &[
                ("assets", count(self.approved_assets), count(due.due_assets)),
                ("bytes", count(self.approved_bytes), count(due.due_bytes)),
            ],
        )
    }
}

/// Every workspace with due assets, the one whose oldest claimable asset is oldest first. Due counts include assets
/// already claimed by an earlier pass: they are destruction in flight.
pub async fn due_workspaces(conn: &mut sqlx::PgConnection) -> Result<Vec<WorkspaceDue>, sqlx::Error> {
    due(conn, None).await
}

/// What `workspace` has due now against what it holds (nothing due, when nothing is): the plan an approval is
/// granted on, counted by the statement the brake weighs every pass with.
pub async fn due_of(conn: &mut sqlx::PgConnection, workspace: Uuid) -> Result<WorkspaceDue, sqlx::Error> {
    Ok(due(conn, Some(workspace)).await?.pop().unwrap_or(WorkspaceDue {
        workspace_id: WorkspaceId(workspace),
        due_assets: 0,
        due_bytes: 0,
        live_assets: 0,
        live_bytes: 0,
        adopted_due: 0,
        adopted_removed_before: false,
    }))
}

/// The one statement of what is due: every workspace with due assets, or `only` that one (with nothing due, when
/// nothing is), against what each holds.
async fn due(conn: &mut sqlx::PgConnection, only: Option<Uuid>) -> Result<Vec<WorkspaceDue>, sqlx::Error> {
    sqlx::query_as!(
        WorkspaceDue,
        r#"WITH due AS (
             SELECT a.workspace_id, count(*) AS due_assets, sum(a.byte_size)::bigint AS due_bytes,
                    min(a.due_at) FILTER (WHERE asset_sweeper_claimable(a)) AS oldest
               FROM assets a
              WHERE asset_sweeper_due(a) AND ($1::uuid IS NULL OR a.workspace_id = $1)
              GROUP BY a.workspace_id
             UNION ALL
             -- The one workspace asked about, when it has nothing due: its holdings still count.
             SELECT $1, 0, 0, NULL
              WHERE $1::uuid IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM assets a WHERE asset_sweeper_due(a) AND a.workspace_id = $1)
         )
         SELECT d.workspace_id AS "workspace_id!: WorkspaceId", d.due_assets AS "due_assets!",
                d.due_bytes AS "due_bytes!", l.live_assets AS "live_assets!", l.live_bytes AS "live_bytes!",
                f.adopted_due AS "adopted_due!", f.adopted_removed_before AS "adopted_removed_before!"
           FROM due d
          CROSS JOIN LATERAL (
                SELECT count(*) AS live_assets, coalesce(sum(byte_size), 0)::bigint AS live_bytes
                  FROM assets WHERE workspace_id = d.workspace_id
          ) l
          CROSS JOIN LATERAL asset_sweeper_adoption_of(d.workspace_id) f
          ORDER BY d.oldest NULLS LAST, d.workspace_id"#,
        only,
    )
    .fetch_all(conn)
    .await
}

/// One due asset as an approval shows and records it.
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    /// The asset.
    pub asset_id: Uuid,
    /// Its key.
    pub storage_key: String,
    /// Its bytes.
    pub byte_size: i64,
}

/// The first `limit` of `workspace`'s due assets, the longest due first: what `approve` prints and records.
pub async fn candidates(
    conn: &mut sqlx::PgConnection,
    workspace: Uuid,
    limit: i64,
) -> Result<Vec<Candidate>, sqlx::Error> {
    sqlx::query_as!(
        Candidate,
        "SELECT a.id AS asset_id, a.storage_key, a.byte_size FROM assets a
          WHERE a.workspace_id = $1 AND asset_sweeper_due(a) ORDER BY a.due_at, a.id LIMIT $2",
        workspace,
        limit,
    )
    .fetch_all(conn)
    .await
}

/// What records name of a workspace's due adopted assets, as the census's key scan read them: the figures a
/// person approves a (first) adoption's brake on.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AdoptedNaming {
    /// Adopted assets due.
    pub due: i64,
    /// Of them, named by a record by key (held, not retired).
    pub by_key: i64,
    /// Named only relative to a root (held, not retired: declare the key source that names them).
    pub relative: i64,
    /// Named by nothing the census read: they will be retired (bytes in place, restorable), then purged.
    pub unnamed: i64,
    /// The first few of each: (how, key, `schema.table.column` or nothing).
    pub examples: Vec<(String, String, Option<String>)>,
}

/// What records name of `workspace`'s due adopted assets ([`AdoptedNaming`]).
pub async fn adopted_naming(conn: &mut sqlx::PgConnection, workspace: Uuid) -> Result<AdoptedNaming, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT d.storage_key AS "key!",
                  CASE WHEN bool_or(NOT n.relative) THEN 'key' WHEN bool_or(n.relative) THEN 'relative'
                       ELSE 'unnamed' END AS "how!",
                  min(asset_sweeper_column_name(c)) AS column
             FROM adopted_assets d
             JOIN assets a ON a.id = d.asset_id AND asset_sweeper_due(a)
             LEFT JOIN named_keys n ON asset_sweeper_names_key(n.storage_key, d.storage_key)
             LEFT JOIN census_columns c ON c.relid = n.relid AND c.attnum = n.attnum
            WHERE d.workspace_id = $1
            GROUP BY d.storage_key
            ORDER BY 2, 1"#,
        workspace,
    )
    .fetch_all(conn)
    .await?;
    let mut naming = AdoptedNaming { due: rows.len() as i64, ..AdoptedNaming::default() };
    for row in rows {
        let shown = naming.examples.iter().filter(|(how, _, _)| *how == row.how).count();
        match row.how.as_str() {
            "key" => naming.by_key += 1,
            "relative" => naming.relative += 1,
            _ => naming.unnamed += 1,
        }
        if shown < 3 {
            naming.examples.push((row.how, row.key, row.column));
        }
    }
    Ok(naming)
}

/// The newest unexpired approval of each of `workspaces` that has one.
pub async fn approvals(pool: &PgPool, workspaces: &[Uuid]) -> Result<HashMap<WorkspaceId, Approval>, sqlx::Error> {
    let rows = sqlx::query_as!(
        Approval,
        r#"SELECT DISTINCT ON (workspace_id) workspace_id AS "workspace_id: WorkspaceId", id, approved_by, reason,
                  due_assets AS approved_assets, due_bytes AS approved_bytes
             FROM brake_approvals
            WHERE workspace_id = ANY ($1) AND expires_at > now()
            ORDER BY workspace_id, approved_at DESC"#,
        workspaces,
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|a| (a.workspace_id, a)).collect())
}

/// An approval in force, as `status` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct InForce {
    /// The workspace it releases.
    pub workspace_id: Uuid,
    /// Who approved.
    pub approved_by: String,
    /// Why, as they wrote it.
    pub reason: String,
    /// When it ends, as the database prints it.
    pub expires_at: String,
    /// The due assets it was granted on.
    pub due_assets: i64,
    /// Their bytes.
    pub due_bytes: i64,
}

/// Every unexpired approval, the one ending first first.
pub async fn in_force(conn: &mut sqlx::PgConnection) -> Result<Vec<InForce>, sqlx::Error> {
    sqlx::query_as!(
        InForce,
        r#"SELECT workspace_id, approved_by, reason, expires_at::text AS "expires_at!", due_assets, due_bytes
             FROM brake_approvals WHERE expires_at > now() ORDER BY expires_at"#
    )
    .fetch_all(conn)
    .await
}

/// Why the brake trips for `due`, or `None` when the workspace may proceed.
pub fn verdict(due: &WorkspaceDue, limits: &BrakeSettings) -> Option<String> {
    // A first adoption rests on what the census and the key sources say names the files, nothing the application
    // ever told: a person reads its plan (what records name of them) before any of it is retired.
    if due.adopted_due > 0 && !due.adopted_removed_before {
        return Some(format!(
            "first adoption: {} adopted asset(s) due and none adopted in this workspace was removed before; read the \
             plan (what records name of them) and approve",
            due.adopted_due
        ));
    }
    let (due_assets, due_bytes) = (count(due.due_assets), count(due.due_bytes));
    let (live_assets, live_bytes) = (count(due.live_assets), count(due.live_bytes));
    if due_assets > limits.max_assets {
        return Some(format!("{due_assets} assets due, above the cap of {}", limits.max_assets));
    }
    if due_bytes > limits.max_bytes {
        return Some(format!("{due_bytes} bytes due, above the cap of {}", limits.max_bytes));
    }
    if due_assets >= limits.share_min_assets {
        let share = u128::from(limits.max_share_percent);
        if u128::from(due_assets) * 100 > share * u128::from(live_assets) {
            return Some(format!("{due_assets} of {live_assets} assets due, above {}%", limits.max_share_percent));
        }
        if u128::from(due_bytes) * 100 > share * u128::from(live_bytes) {
            return Some(format!("{due_bytes} of {live_bytes} bytes due, above {}%", limits.max_share_percent));
        }
    }
    None
}

/// One workspace with due assets, as the brake weighs it: what a pass may enqueue for, and what `plan` shows.
#[derive(Debug, Clone)]
pub struct Weighed {
    /// What it has due, against what it holds.
    pub due: WorkspaceDue,
    /// Why the brake trips for it, if it does.
    pub tripped: Option<String>,
    /// An operator's unexpired approval that covers what is due now, if there is one.
    pub approval: Option<Approval>,
    /// An unexpired approval the plan outgrew since it was granted: it covers nothing now.
    pub outgrown: Option<OutgrownApproval>,
}

/// An approval and the figure of the plan that grew beyond it: the run record's `outgrown`.
#[derive(Debug, Clone, Serialize)]
pub struct OutgrownApproval {
    /// The approval, with the figures it was granted on.
    pub approval: Approval,
    /// The figure now beyond it.
    pub figure: Outgrown,
}

impl Weighed {
    /// Whether nothing of this workspace may be enqueued: the brake tripped and no approval covers what is due.
    pub fn held(&self) -> bool {
        self.tripped.is_some() && self.approval.is_none()
    }

    /// Why nothing of this workspace may be enqueued, with the approval it outgrew, when it is held.
    pub fn held_because(&self) -> Option<String> {
        let tripped = self.tripped.as_ref().filter(|_| self.held())?;
        Some(match &self.outgrown {
            None => tripped.clone(),
            Some(o) => format!(
                "{tripped}; approval {} (by {}) was granted on {} assets and {} bytes: {}, so it is asked for again",
                o.approval.id, o.approval.approved_by, o.approval.approved_assets, o.approval.approved_bytes, o.figure
            ),
        })
    }
}

/// Every workspace with due assets, oldest first, each with the brake's verdict and its approval (one that covers
/// the plan within `tolerance`): the one home of who may proceed, for the sweep and for `plan`.
pub async fn weigh(pool: &PgPool, limits: &BrakeSettings, tolerance: Tolerance) -> Result<Vec<Weighed>, sqlx::Error> {
    let due = due_workspaces(&mut *pool.acquire().await?).await?;
    let ids: Vec<Uuid> = due.iter().map(|d| d.workspace_id.0).collect();
    let mut approved = approvals(pool, &ids).await?;
    Ok(due
        .into_iter()
        .map(|due| {
            let tripped = verdict(&due, limits);
            let (approval, outgrown) = match approved.remove(&due.workspace_id) {
                // Not tripped: nothing to approve, and the approval is kept for when it is.
                Some(approval) if tripped.is_some() => match approval.outgrown_by(&due, tolerance) {
                    Some(figure) => (None, Some(OutgrownApproval { approval, figure })),
                    None => (Some(approval), None),
                },
                approval => (approval, None),
            };
            Weighed { due, tripped, approval, outgrown }
        })
        .collect())
}

/// An operator's release of one workspace from the brake, with what they read when they granted it.
pub struct Grant<'a> {
    /// The workspace it releases.
    pub workspace: Uuid,
    /// Who, why, for how long.
    pub signed: Signed<'a>,
    /// The workspace's due assets they read, and their bytes: a pass that finds more holds it again.
    pub due_assets: i64,
    /// Their bytes.
    pub due_bytes: i64,
    /// The due assets they were shown.
    pub sample: serde_json::Value,
}

/// Records `grant` in `brake_approvals` (the one writer of that table): its id, and when it expires (RFC 3339,
/// UTC). In the caller's transaction, which read what the grant says was read.
pub async fn approve(conn: &mut sqlx::PgConnection, grant: Grant<'_>) -> Result<(i64, String), sqlx::Error> {
    let approval = sqlx::query!(
        r#"INSERT INTO brake_approvals (workspace_id, approved_by, reason, expires_at, due_assets, due_bytes, sample)
           VALUES ($1, $2, $3, now() + $4 * interval '1 hour', $5, $6, $7)
           RETURNING id, expires_at"#,
        grant.workspace,
        grant.signed.by,
        grant.signed.reason,
        grant.signed.hours(),
        grant.due_assets,
        grant.due_bytes,
        grant.sample,
    )
    .fetch_one(conn)
    .await?;
    Ok((approval.id, platform::approval::stamp(approval.expires_at)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: BrakeSettings =
        BrakeSettings { max_share_percent: 25, share_min_assets: 100, max_assets: 50_000, max_bytes: 1 << 40 };

    fn due(due_assets: i64, live_assets: i64, due_bytes: i64, live_bytes: i64) -> WorkspaceDue {
        WorkspaceDue {
            workspace_id: WorkspaceId(Uuid::nil()),
            due_assets,
            due_bytes,
            live_assets,
            live_bytes,
            adopted_due: 0,
            adopted_removed_before: false,
        }
    }

    #[test]
    fn a_first_adoption_is_braked_whatever_its_size_and_a_later_one_by_the_usual_rules() {
        let first = WorkspaceDue { adopted_due: 2, ..due(2, 10_000, 20, 100_000) };
        let tripped = verdict(&first, &LIMITS).expect("a first adoption");
        assert!(tripped.starts_with("first adoption: 2 adopted asset(s) due"), "{tripped}");
        let later = WorkspaceDue { adopted_removed_before: true, ..first };
        assert_eq!(verdict(&later, &LIMITS), None);
    }

    /// Approval `id`, by ops, granted on `assets` due assets of `bytes` bytes.
    fn approval(id: i64, assets: i64, bytes: i64) -> Approval {
        Approval {
            workspace_id: WorkspaceId(Uuid::nil()),
            id,
            approved_by: "ops".into(),
            reason: "a catalogue migration".into(),
            approved_assets: assets,
            approved_bytes: bytes,
        }
    }

    #[test]
    fn a_normal_release_passes() {
        assert_eq!(verdict(&due(200, 10_000, 2_000, 100_000), &LIMITS), None);
    }

    #[test]
    fn a_mass_release_trips_on_the_share_of_assets_or_bytes() {
        let tripped = verdict(&due(9_000, 10_000, 10, 100_000), &LIMITS).expect("90% of assets");
        assert_eq!(tripped, "9000 of 10000 assets due, above 25%");
        let tripped = verdict(&due(200, 10_000, 90_000, 100_000), &LIMITS).expect("90% of bytes");
        assert_eq!(tripped, "90000 of 100000 bytes due, above 25%");
    }

    #[test]
    fn a_small_workspace_may_release_most_of_its_few_assets() {
        assert_eq!(verdict(&due(3, 4, 30, 40), &LIMITS), None);
    }

    #[test]
    fn the_absolute_caps_apply_whatever_the_share() {
        let tripped = verdict(&due(60_000, 10_000_000, 1, 1 << 50), &LIMITS).expect("count cap");
        assert_eq!(tripped, "60000 assets due, above the cap of 50000");
        let tripped = verdict(&due(5, 10_000_000, (1 << 40) + 1, 1 << 50), &LIMITS).expect("bytes cap");
        assert!(tripped.contains("bytes due, above the cap"), "{tripped}");
    }

    #[test]
    fn a_workspace_is_held_only_when_the_brake_trips_and_nobody_approved() {
        let approval = approval(1, 200, 1);
        let weighed = |tripped: Option<&str>, approval: Option<Approval>| Weighed {
            due: due(200, 400, 1, 1),
            tripped: tripped.map(str::to_owned),
            approval,
            outgrown: None,
        };
        assert!(weighed(Some("too much"), None).held());
        assert!(!weighed(Some("too much"), Some(approval.clone())).held());
        assert!(!weighed(None, None).held());
        assert!(!weighed(None, Some(approval)).held());
    }

    #[test]
    fn an_approval_covers_the_plan_it_was_granted_on_and_not_one_that_outgrew_it() {
        let approval = approval(7, 100, 10_000);
        let ten = Tolerance(10);
        assert_eq!(approval.outgrown_by(&due(105, 200, 10_500, 20_000), ten), None);
        let grown = approval.outgrown_by(&due(1_000, 2_000, 10_000, 20_000), ten).expect("tenfold");
        assert_eq!((grown.what, grown.approved, grown.now), ("assets", 100, 1_000));
        let grown = approval.outgrown_by(&due(100, 200, 90_000, 100_000), ten).expect("bytes");
        assert_eq!(grown.what, "bytes");
        let weighed = Weighed {
            due: due(1_000, 2_000, 10_000, 20_000),
            tripped: Some("1000 of 2000 assets due, above 25%".into()),
            approval: None,
            outgrown: Some(OutgrownApproval { approval, figure: grown }),
        };
        let why = weighed.held_because().expect("held");
        assert!(why.starts_with("1000 of 2000 assets due, above 25%; approval 7 (by ops) was granted on 100"), "{why}");
    }
}
