//! Every write to the `assets` table, and the only one: the sweep's claims and releases, the settle's keep,
//! retire, defer and removal, the consumer's failure marks, discovery's and adoption's scheduling, and the
//! operator's restore, redrive and undelete. The application writes its own rows (upload, attach, release); the
//! product writes them only here, so what the sweeper may do to a row is read in one file.
//!
//! Each function is one statement (or two that belong together) in the caller's transaction or on the pool; the
//! caller decides, locks and records the audit event.

use std::time::Duration;

use platform::{AssetId, WorkspaceId};
use serde_json::Value;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::message::CleanupMessage;
use crate::rules::AssetState;

/// One claimed asset: the lease token is what the message carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The claimed asset.
    pub asset_id: AssetId,
    /// Its workspace.
    pub workspace_id: WorkspaceId,
    /// The lease's token.
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

/// A source refers to it: back to `attached`, its lease, due time and retirement cleared.
pub(crate) async fn keep(conn: &mut PgConnection, asset: AssetId) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE assets SET state = 'attached', due_at = NULL, lease_token = NULL, leased_until = NULL,
                retired_at = NULL, purge_after = NULL, last_error = NULL, kept_by = NULL, kept_since = NULL
          WHERE id = $1",
        asset.0,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Nothing refers to it: hidden, its bytes kept, restorable for `retention` (its purge time), and removed only
/// once its trial is over too (a census begun after now has read everything). Looked at again at its purge time,
/// and no sooner than a census could have read everything again. An abandoned upload is retired with no retention
/// (its purge time is its retirement), which is how its removal is known to be a delete.
pub(crate) async fn retire(conn: &mut PgConnection, asset: AssetId, retention: Duration) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE assets SET state = 'retired', retired_at = now(),
                purge_after = now() + $2 * interval '1 second',
                due_at = now() + greatest($2, $3) * interval '1 second',
                lease_token = NULL, leased_until = NULL
          WHERE id = $1",
        asset.0,
        retention.as_secs_f64(),
        crate::rules::CENSUS_HOLD.as_secs_f64(),
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// When a deferred asset is due again.
pub(crate) enum Until {
    /// When the grace period after the newest write about the asset or its object ends.
    GraceEnd(Duration),
    /// This long after the upload (the abandon window).
    AfterCreation(Duration),
    /// Its purge time (retention).
    PurgeTime,
    /// This long from now.
    Later(Duration),
}

/// Sets the next due time and ends the lease.
pub(crate) async fn defer(conn: &mut PgConnection, asset: AssetId, until: Until) -> Result<(), sqlx::Error> {
    let query = match until {
        Until::GraceEnd(grace) => sqlx::query!(
            "UPDATE assets a
                SET due_at = asset_sweeper_grace_ends(a, o, $2 * interval '1 second'),
                    lease_token = NULL, leased_until = NULL
               FROM stored_objects o
              WHERE a.id = $1 AND o.storage_key = a.storage_key",
            asset.0,
            grace.as_secs_f64(),
        ),
        Until::AfterCreation(window) => sqlx::query!(
            "UPDATE assets SET due_at = created_at + $2 * interval '1 second', lease_token = NULL,
                    leased_until = NULL
              WHERE id = $1",
            asset.0,
            window.as_secs_f64(),
        ),
        Until::Later(wait) => sqlx::query!(
            "UPDATE assets SET due_at = now() + $2 * interval '1 second', lease_token = NULL, leased_until = NULL
              WHERE id = $1",
            asset.0,
            wait.as_secs_f64(),
        ),
        Until::PurgeTime => sqlx::query!(
            "UPDATE assets SET due_at = purge_after, lease_token = NULL, leased_until = NULL WHERE id = $1",
            asset.0,
        ),
    };
    query.execute(conn).await?;
    Ok(())
}

/// Removes the asset's row; its stored object stays (another row shares the bytes, or they were never removed).
pub(crate) async fn remove(conn: &mut PgConnection, asset: AssetId) -> Result<(), sqlx::Error> {
    sqlx::query!("DELETE FROM assets WHERE id = $1", asset.0).execute(&mut *conn).await?;
    Ok(())
}

/// Removes the asset's row and then its stored object's: what a delete or purge leaves once the bytes are gone.
pub(crate) async fn remove_with_object(
    conn: &mut PgConnection,
    asset: AssetId,
    storage_key: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!("DELETE FROM assets WHERE id = $1", asset.0).execute(&mut *conn).await?;
    sqlx::query!("DELETE FROM stored_objects WHERE storage_key = $1", storage_key).execute(&mut *conn).await?;
    Ok(())
}

/// Gives `message`'s claim back without counting an attempt, keeping `error` as the last one: only while the
/// message's claim is the row's, and only for the workspace it names.
pub async fn postpone(pool: &PgPool, message: &CleanupMessage, error: &str) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE assets SET lease_token = NULL, leased_until = NULL, last_error = $3
          WHERE id = $1 AND workspace_id = $2 AND lease_token = $4",
        message.asset_id.0,
        message.workspace_id.0,
        error,
        message.claim_token,
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Counts a failed attempt of `message` with its `error`; on the `last` receive also marks the asset `failed` and
/// ends its lease. Only while the message's claim is the row's, and only for the workspace it names; answers the
/// row as it now is when it was written.
pub async fn mark_failed(
    conn: &mut PgConnection,
    message: &CleanupMessage,
    error: &str,
    last: bool,
) -> Result<Option<Value>, sqlx::Error> {
    let updated = sqlx::query_scalar!(
        r#"UPDATE assets
              SET attempts = attempts + 1, last_error = $3,
                  state = CASE WHEN $4 THEN 'failed' ELSE state END,
                  failed_at = CASE WHEN $4 THEN now() ELSE failed_at END,
                  lease_token = CASE WHEN $4 THEN NULL ELSE lease_token END,
                  leased_until = CASE WHEN $4 THEN NULL ELSE leased_until END
            WHERE id = $1 AND workspace_id = $2 AND lease_token = $5
           RETURNING to_jsonb(assets.*) AS "row!""#,
        message.asset_id.0,
        message.workspace_id.0,
        error,
        last,
        message.claim_token,
    )
    .fetch_optional(conn)
    .await?;
    Ok(updated)
}

/// Brings a retired asset back to `attached`, its retirement and lease cleared (its bytes were checked first).
pub(crate) async fn restore(conn: &mut PgConnection, asset: AssetId, by: &str) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE assets SET state = 'attached', retired_at = NULL, purge_after = NULL, due_at = NULL,
                lease_token = NULL, leased_until = NULL, kept_by = 'restored by ' || $2, kept_since = now()
          WHERE id = $1",
        asset.0,
        by,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// One asset [`redrive`] reset.
#[derive(Debug)]
pub struct Reset {
    /// The asset.
    pub id: AssetId,
    /// Its workspace.
    pub workspace_id: WorkspaceId,
    /// Its stored object.
    pub storage_key: String,
    /// The state it was reset to: `retired` if it had been retired, else `released`.
    pub state: AssetState,
    /// The row as it now is.
    pub row: Value,
}

/// The state `asset` is in, if it has a row.
pub async fn state_of(executor: impl sqlx::PgExecutor<'_>, asset: Uuid) -> Result<Option<AssetState>, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT state AS "state: AssetState" FROM assets WHERE id = $1"#, asset)
        .fetch_optional(executor)
        .await
}

/// What [`redrive`] would do to each of `ids` that has a row: its workspace, its state now, and the state a redrive
/// resets it to (`asset_sweeper_redriven_state`, the function the reset itself writes with).
pub async fn redrive_preview(
    executor: impl sqlx::PgExecutor<'_>,
    ids: &[Uuid],
) -> Result<Vec<(Uuid, Uuid, AssetState, AssetState)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT a.id, a.workspace_id, a.state AS "state: AssetState",
                  asset_sweeper_redriven_state(a) AS "reset_to!: AssetState"
             FROM assets a WHERE a.id = ANY ($1)"#,
        ids,
    )
    .fetch_all(executor)
    .await?;
    Ok(rows.into_iter().map(|r| (r.id, r.workspace_id, r.state, r.reset_to)).collect())
}

/// Resets the `failed` assets among `ids` so they settle again: due now, attempts and lease cleared.
pub async fn redrive(conn: &mut PgConnection, ids: &[Uuid]) -> Result<Vec<Reset>, sqlx::Error> {
    sqlx::query_as!(
        Reset,
        r#"UPDATE assets
              SET state = asset_sweeper_redriven_state(assets),
                  failed_at = NULL, attempts = 0, due_at = now(), lease_token = NULL, leased_until = NULL
            WHERE id = ANY ($1) AND state = 'failed'
           RETURNING id AS "id: AssetId", workspace_id AS "workspace_id: WorkspaceId", storage_key,
                     state AS "state: AssetState", to_jsonb(assets.*) AS "row!""#,
        ids,
    )
    .fetch_all(conn)
    .await
}

/// What [`undelete`] writes back: a deleted or purged asset, as its audit row kept it.
#[derive(Debug)]
pub struct Unremoved<'a> {
    /// The asset's own id, kept.
    pub id: Uuid,
    /// Its workspace.
    pub workspace: Uuid,
    /// Its stored object.
    pub key: &'a str,
    /// The content hash.
    pub hash: &'a str,
    /// Its size.
    pub size: i64,
    /// The row as the audit event kept it (its `created_at` is kept).
    pub row: &'a Value,
    /// Who brought it back: kept by their word (`kept_by`) until the evidence changes.
    pub by: &'a str,
}

/// Writes a deleted or purged asset back, `attached`, with its stored object unless one exists (the bytes were
/// brought back first).
pub async fn undelete(conn: &mut PgConnection, asset: &Unremoved<'_>) -> Result<(), sqlx::Error> {
    let (id, workspace, key, hash, size, row, by) =
        (asset.id, asset.workspace, asset.key, asset.hash, asset.size, asset.row, asset.by);
    sqlx::query!(
        "INSERT INTO stored_objects (storage_key, content_hash, byte_size) VALUES ($1, $2, $3)
         ON CONFLICT (storage_key) DO NOTHING",
        key,
        hash,
        size,
    )
    .execute(&mut *conn)
    .await?;
    // `$7::jsonb`: with `->>` alone the parameter's type is ambiguous when the query is checked.
    sqlx::query!(
        "INSERT INTO assets (id, workspace_id, storage_key, content_hash, byte_size, state, created_at, kept_by,
                             kept_since)
         VALUES ($1, $2, $3, $4, $5, $6, coalesce(($7::jsonb->>'created_at')::timestamptz, now()),
                 'undeleted by ' || $8, now())",
        id,
        workspace,
        key,
        hash,
        size,
        AssetState::Attached as AssetState,
        row,
        by,
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// An asset discovery made due.
#[derive(Debug)]
pub(crate) struct MadeDue {
    /// The asset.
    pub asset_id: AssetId,
    /// Its workspace.
    pub workspace_id: WorkspaceId,
    /// Its stored object.
    pub storage_key: String,
    /// Its state before (`attached`, or `pending` past its abandon window).
    pub was: String,
    /// When it is due, as the database prints it.
    pub due_at: String,
}

/// Makes `ids` due (`released`, due when their grace floor ends), those still unscheduled, past their grace floor
/// (the application may have written since discovery asked about them) and not pinned.
pub(crate) async fn discover(
    conn: &mut PgConnection,
    ids: &[Uuid],
    grace: Duration,
) -> Result<Vec<MadeDue>, sqlx::Error> {
    sqlx::query_as!(
        MadeDue,
        r#"UPDATE assets a SET state = 'released', due_at = asset_sweeper_grace_ends(a, o, $2 * interval '1 second')
             FROM assets was JOIN stored_objects o ON o.storage_key = was.storage_key
            WHERE a.id = ANY ($1) AND was.id = a.id AND asset_sweeper_unscheduled(a)
              AND asset_sweeper_grace_ends(a, o, $2 * interval '1 second') <= now()
              AND asset_sweeper_pin_of(a.id, a.workspace_id, a.storage_key) IS NULL
        RETURNING a.id AS "asset_id: AssetId", a.workspace_id AS "workspace_id: WorkspaceId", a.storage_key,
                  was.state AS "was!", a.due_at::text AS "due_at!""#,
        ids,
        grace.as_secs_f64(),
    )
    .fetch_all(conn)
    .await
}

/// An asset adoption wrote.
#[derive(Debug)]
pub struct AdoptedRow {
    /// The new asset.
    pub id: Uuid,
    /// The workspace its key names.
    pub workspace_id: Uuid,
    /// Its key.
    pub storage_key: String,
    /// Its size.
    pub byte_size: i64,
    /// When the bucket last wrote it.
    pub last_modified: chrono::DateTime<chrono::Utc>,
    /// The managed prefix it is under.
    pub prefix: String,
}

/// What [`adopt`] takes from the listing `listing` of `reconcile_keys`.
#[derive(Debug, Clone, Copy)]
pub struct Adoption<'a> {
    /// The listing the keys were read into.
    pub listing: i64,
    /// The approved prefixes to adopt under.
    pub prefixes: &'a [String],
    /// Only keys last written longer ago than this.
    pub grace: Duration,
    /// At most this many.
    pub max: u32,
    /// The content hash adopted objects get.
    pub hash: &'a str,
    /// The layout that adopts them.
    pub layout: &'a str,
}

/// Gives the keys of `adoption` no row knows a stored object and a `pending` asset each, due never, noted in
/// `adopted_assets`. One statement: the stored object only where none exists (an upload's own row wins, and one
/// still uncommitted is waited for), the asset only for an object this statement wrote. Dated from the bucket's
/// LastModified, so its grace floor ran out with the key's. Due never, until [`schedule_adopted`] finds the key
/// scan has read every text and JSON column since: a record naming the key written before the adoption is seen.
/// A pinned key (its workspace's pin, or one on a prefix of it) is not adopted while the pin is in force.
pub async fn adopt(conn: &mut PgConnection, adoption: Adoption<'_>) -> Result<Vec<AdoptedRow>, sqlx::Error> {
    let Adoption { listing, prefixes, grace, max, hash, layout } = adoption;
    sqlx::query_as!(
        AdoptedRow,
        r#"WITH candidates AS MATERIALIZED (
               SELECT DISTINCT ON (k.storage_key) k.storage_key, k.byte_size, k.last_modified, k.prefix, k.workspace_id
                 FROM reconcile_keys k
                WHERE k.listing_id = $1 AND k.workspace_id IS NOT NULL AND k.prefix = ANY ($2)
                  AND k.last_modified <= now() - $3 * interval '1 second'
                  AND NOT EXISTS (SELECT 1 FROM stored_objects o WHERE o.storage_key = k.storage_key)
                  AND asset_sweeper_pin_of(NULL, k.workspace_id, k.storage_key) IS NULL
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
        listing,
        prefixes,
        grace.as_secs_f64(),
        i64::from(max),
        hash,
        layout,
    )
    .fetch_all(conn)
    .await
}

/// Makes due the adopted assets waiting for the key scan ([`adopt`] leaves them due never) once it has covered
/// every text and JSON column since their adoption, with the layout that adopted them (a key another layout no
/// longer extracts would never be found named); answers how many. The sweep runs it after the census and before
/// the brake, which counts them.
pub(crate) async fn schedule_adopted(conn: impl sqlx::PgExecutor<'_>) -> Result<u64, sqlx::Error> {
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
