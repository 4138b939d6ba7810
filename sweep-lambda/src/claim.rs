//! Claiming due rows with a lease, and giving claims back.

use std::time::Duration;

use shared::{AssetId, WorkspaceId};
use sqlx::PgPool;
use uuid::Uuid;

/// One claimed asset: the lease token is what the message carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub asset_id: AssetId,
    pub workspace_id: WorkspaceId,
    pub token: Uuid,
}

/// Claims up to `limit` due, unleased rows not in `skip`, at most `per_workspace` from each of `workspaces` (in
/// that order), oldest first within each, and leases them for `lease`. One statement, one short transaction.
///
/// SKIP LOCKED: rows a consumer is settling right now are skipped, not waited for. The per-workspace limit is
/// what keeps one workspace's backlog from starving the others.
pub async fn claim_batch(
    pool: &PgPool,
    workspaces: &[Uuid],
    per_workspace: i64,
    limit: i64,
    lease: Duration,
    skip: &[Uuid],
) -> Result<Vec<Claim>, sqlx::Error> {
    sqlx::query_as!(
        Claim,
        r#"WITH picked AS (
             SELECT c.id
               FROM unnest($1::uuid[]) WITH ORDINALITY AS w(workspace_id, position)
              CROSS JOIN LATERAL (
                    SELECT a.id FROM assets a
                     WHERE a.workspace_id = w.workspace_id AND asset_sweeper_claimable(a) AND a.id <> ALL ($5::uuid[])
                     ORDER BY a.due_at, a.id
                     LIMIT $2
                       FOR UPDATE SKIP LOCKED
              ) c
              ORDER BY w.position
              LIMIT $3
         )
         UPDATE assets a
            SET lease_token = gen_random_uuid(), leased_until = now() + $4 * interval '1 second'
           FROM picked
          WHERE a.id = picked.id
         RETURNING a.id AS "asset_id: AssetId", a.workspace_id AS "workspace_id: WorkspaceId",
                   a.lease_token AS "token!""#,
        workspaces,
        per_workspace,
        limit,
        lease.as_secs_f64(),
        skip,
    )
    .fetch_all(pool)
    .await
}

/// How many due, unleased rows of `workspaces` (not in `skip`) a pass could still claim: what a pass stopped by
/// the queue's ceiling held back.
pub async fn claimable(pool: &PgPool, workspaces: &[Uuid], skip: &[Uuid]) -> Result<u64, sqlx::Error> {
    let n = sqlx::query_scalar!(
        r#"SELECT count(*) AS "claimable!" FROM assets a
            WHERE a.workspace_id = ANY ($1) AND asset_sweeper_claimable(a) AND a.id <> ALL ($2::uuid[])"#,
        workspaces,
        skip,
    )
    .fetch_one(pool)
    .await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Ends the leases of `claims` that still hold the same token, so the next pass can claim them again.
pub async fn release(pool: &PgPool, claims: &[Claim]) -> Result<u64, sqlx::Error> {
    if claims.is_empty() {
        return Ok(0);
    }
    let ids: Vec<Uuid> = claims.iter().map(|c| c.asset_id.0).collect();
    let tokens: Vec<Uuid> = claims.iter().map(|c| c.token).collect();
    let done = sqlx::query!(
        "UPDATE assets a SET lease_token = NULL, leased_until = NULL
           FROM unnest($1::uuid[], $2::uuid[]) AS r(id, token)
          WHERE a.id = r.id AND a.lease_token = r.token",
        &ids,
        &tokens,
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}
