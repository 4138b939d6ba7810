//! Schema verdicts: the sweep checks the schema once per pass (invariant 4) and records what it found with the
//! catalog state it covered; the consumer settles only while that verdict is recent and the catalog still matches
//! it, which one cheap statement tells. So the consumer's cost does not grow with the application's schema, and
//! a change between the pass and the settle (a new column holding asset ids, a cascading foreign key) still makes
//! every settle refuse until the next pass has checked it.
//!
//! The catalog state is named two ways, both read before the check (so a change committed during the check
//! leaves them behind and is never trusted): the change detector's generation, which every committed DDL command
//! and every write to the declarations moves (event triggers that `schema/sql/detector.sql` installs where the
//! migrating role may create them), and a fingerprint of everything the check reads from the catalog. The generation is the fast
//! path; when it moved, or the detector is not in place, the consumer compares fingerprints, whose cost grows
//! with the schema. The connected role's rights (global objects no event trigger sees) are compared every time.

use std::fmt;
use std::time::{Duration, Instant};

use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::map::{CheckOptions, ReferenceMap, SchemaCheckError, SchemaProblem, SchemaRefusal};

/// A verdict a sweep pass recorded.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Its row in `schema_verdicts`.
    pub id: i64,
    /// The map, or why the check refused.
    pub outcome: Result<ReferenceMap, SchemaRefusal>,
    /// How long the check took.
    pub duration: Duration,
}

/// Checks the schema and records the verdict, for the consumer to settle on.
pub async fn record(
    conn: &mut PgConnection,
    options: CheckOptions,
    sweep_run_id: Option<Uuid>,
) -> Result<Recorded, sqlx::Error> {
    let started = Instant::now();
    // Before the check: a change that commits while it runs leaves these behind.
    // The changes appended since the last pass go into the count (the generation stays what it was), so the
    // consumer's reading of it stays a few rows.
    sqlx::query!("SELECT asset_sweeper_fold_schema_changes()").fetch_one(&mut *conn).await?;
    let before = sqlx::query!(
        r#"SELECT asset_sweeper_schema_generation() AS "generation!", asset_sweeper_detector_state() AS detector,
                  asset_sweeper_catalog_fingerprint() AS "fingerprint!", current_user::text AS "role_name!",
                  asset_sweeper_role_fingerprint() AS "role_fingerprint!""#
    )
    .fetch_one(&mut *conn)
    .await?;
    let outcome = match crate::check::check(conn, options.clone()).await {
        Ok(map) => Ok(map),
        Err(SchemaCheckError::Refused(refusal)) => Err(refusal),
        Err(SchemaCheckError::Database(e)) => return Err(e),
    };
    // A change that committed during the check (and may be undone before a settle) leaves a verdict no state
    // of the catalog can match: the consumer refuses until the next pass.
    let after = sqlx::query!(
        r#"SELECT asset_sweeper_schema_generation() AS "generation!", asset_sweeper_catalog_fingerprint() AS "fingerprint!""#
    )
    .fetch_one(&mut *conn)
    .await?;
    let (detector, fingerprint) = if after.generation == before.generation && after.fingerprint == before.fingerprint {
        (before.detector, before.fingerprint)
    } else {
        (None, "changed during the check".to_owned())
    };
    let duration = started.elapsed();
    let (valid, sources, problems, warnings, unproven) = match &outcome {
        Ok(map) => (true, &map.sources, Vec::new(), map.warnings.clone(), map.unproven.clone()),
        Err(refusal) => (false, &refusal.sources, refusal.problems.clone(), Vec::new(), Vec::new()),
    };
    let id = sqlx::query_scalar!(
        "INSERT INTO schema_verdicts (sweep_run_id, valid, generation, detector, fingerprint, role_name,
                                      role_fingerprint, sources, problems, warnings, sample_rows, duration_ms,
                                      code_version, unproven)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
         RETURNING id",
        sweep_run_id,
        valid,
        before.generation,
        detector,
        fingerprint,
        before.role_name,
        before.role_fingerprint,
        sqlx::types::Json(sources) as _,
        sqlx::types::Json(problems) as _,
        sqlx::types::Json(warnings) as _,
        options.sample_rows as i32,
        i64::try_from(duration.as_millis()).unwrap_or(i64::MAX),
        platform::version::CODE_VERSION,
        sqlx::types::Json(unproven) as _,
    )
    .fetch_one(&mut *conn)
    .await?;
    // Verdicts older than a week are pruned; the newest, this one, is always kept.
    sqlx::query!("DELETE FROM schema_verdicts WHERE id < $1 AND checked_at < now() - interval '7 days'", id)
        .execute(&mut *conn)
        .await?;
    Ok(Recorded { id, outcome, duration })
}

/// How the consumer knew the catalog had not changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Matched {
    /// The detector's generation had not moved: one row read.
    Generation,
    /// The generation moved or no detector is in place, and the catalog fingerprint still matched.
    Fingerprint,
}

/// A verdict the consumer may settle on.
#[derive(Debug, Clone)]
pub struct Current {
    /// Its row in `schema_verdicts`.
    pub id: i64,
    /// The pass that recorded it.
    pub sweep_run_id: Option<Uuid>,
    /// How the catalog was found unchanged.
    pub matched: Matched,
}

/// Why the consumer may not settle on the newest verdict. Nothing is retired, deleted or purged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerdictError {
    /// No verdict was ever recorded.
    #[error("no sweep pass has checked the schema yet: nothing is settled until one has")]
    Missing,
    #[error(
        "the newest schema verdict ({checked_at}) is older than SCHEMA_VERDICT_MAX_AGE ({max_age}): nothing is \
         settled until a sweep pass checks the schema again"
    )]
    /// The newest verdict is older than `SCHEMA_VERDICT_MAX_AGE`.
    Stale {
        /// When the check ran.
        checked_at: String,
        /// `SCHEMA_VERDICT_MAX_AGE`.
        max_age: String,
    },
    #[error(
        "the schema changed after the sweep pass checked it at {checked_at}: nothing is settled until the next \
         pass checks it again"
    )]
    /// The catalog changed since the check.
    Changed {
        /// When the check ran.
        checked_at: String,
    },
    #[error(
        "the schema verdict was made as database role {verdict_role}, whose attributes or memberships changed \
         since (this function connects as {role}): nothing is settled until a pass checks the schema again"
    )]
    /// The role the check ran as has other rights now.
    OtherRole {
        /// The role the check ran as.
        verdict_role: String,
        /// The role of this connection.
        role: String,
    },
    /// The verdict's stored map does not parse (with why).
    #[error("the newest schema verdict holds a map this build cannot read: {0}")]
    Unreadable(String),
    /// The check refused.
    #[error(transparent)]
    Refused(#[from] SchemaRefusal),
}

impl VerdictError {
    /// Whether the next pass can clear it without a person: a missing, stale or overtaken verdict can, and so can
    /// one made before the role's rights changed (the next pass checks the schema with the rights the role has
    /// now; a role change is an administrator's, never a message's fault); a refusal or an unreadable verdict
    /// cannot.
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            VerdictError::Missing
                | VerdictError::Stale { .. }
                | VerdictError::Changed { .. }
                | VerdictError::OtherRole { .. }
        )
    }
}

struct Newest {
    id: i64,
    sweep_run_id: Option<Uuid>,
    checked_at: String,
    valid: bool,
    /// Not read again for the verdict the caller already holds.
    sources: Option<serde_json::Value>,
    problems: serde_json::Value,
    warnings: Option<serde_json::Value>,
    unproven: Option<serde_json::Value>,
    verdict_role: String,
    role: String,
    fresh: bool,
    same_rights: bool,
    same_generation: bool,
    unchanged: bool,
}

/// The newest verdict, if the consumer may settle on it: recorded within `max_age`, for this role, on the catalog
/// as it still is. One statement; it reads the catalog fingerprint only when the generation does not settle it.
/// `known` is the id of a valid verdict whose map the caller already holds (a warm function's): its map is
/// neither read nor parsed again, and the result carries no map (`None`).
pub async fn current(
    conn: &mut PgConnection,
    max_age: Duration,
    known: Option<i64>,
) -> Result<(Current, Option<ReferenceMap>), CurrentError> {
    let newest = sqlx::query_as!(
        Newest,
        r#"SELECT v.id, v.sweep_run_id, v.checked_at::text AS "checked_at!", v.valid,
                  CASE WHEN v.valid AND v.id = $2 THEN NULL ELSE v.sources END AS sources, v.problems,
                  CASE WHEN v.valid AND v.id = $2 THEN NULL ELSE v.warnings END AS warnings,
                  CASE WHEN v.valid AND v.id = $2 THEN NULL
                       ELSE coalesce(v.unproven, '["every column: the verdict was recorded before the census existed"]')
                  END AS unproven,
                  v.role_name AS verdict_role, current_user::text AS "role!",
                  v.checked_at > now() - $1 * interval '1 second' AS "fresh!",
                  v.role_fingerprint = asset_sweeper_role_fingerprint(v.role_name) AS "same_rights!",
                  fast.same AS "same_generation!",
                  CASE WHEN fast.same THEN true
                       ELSE v.fingerprint = asset_sweeper_catalog_fingerprint() END AS "unchanged!"
             FROM (SELECT * FROM schema_verdicts ORDER BY id DESC LIMIT 1) v
            CROSS JOIN LATERAL (
                  SELECT coalesce(v.detector IS NOT NULL AND v.generation = asset_sweeper_schema_generation()
                                  AND v.detector = asset_sweeper_detector_state(), false) AS same
            ) fast"#,
        max_age.as_secs_f64(),
        known,
    )
    .fetch_optional(conn)
    .await?;
    let Some(newest) = newest else { return Err(VerdictError::Missing.into()) };
    if !newest.fresh {
        let max_age = humantime::format_duration(max_age).to_string();
        return Err(VerdictError::Stale { checked_at: newest.checked_at, max_age }.into());
    }
    // The sweep and the consumer connect as roles of their own (docs/security.md): the verdict is the sweep's,
    // made with what its role reads, and holds while that role's attributes and memberships are unchanged. The
    // consumer's own reading needs no comparison: `row_security = off` and its privileges make a recheck it cannot
    // run in full fail, never answer with fewer references.
    if !newest.same_rights {
        return Err(VerdictError::OtherRole { verdict_role: newest.verdict_role, role: newest.role }.into());
    }
    if !newest.unchanged {
        return Err(VerdictError::Changed { checked_at: newest.checked_at }.into());
    }
    let unreadable = |e: serde_json::Error| VerdictError::Unreadable(e.to_string());
    if !newest.valid {
        let problems: Vec<SchemaProblem> = serde_json::from_value(newest.problems).map_err(unreadable)?;
        let sources = serde_json::from_value(newest.sources.unwrap_or_default()).map_err(unreadable)?;
        return Err(VerdictError::Refused(SchemaRefusal { problems, sources }).into());
    }
    let current = Current {
        id: newest.id,
        sweep_run_id: newest.sweep_run_id,
        matched: if newest.same_generation { Matched::Generation } else { Matched::Fingerprint },
    };
    let map = match (newest.sources, newest.warnings, newest.unproven) {
        (Some(sources), Some(warnings), Some(unproven)) => Some(ReferenceMap {
            sources: serde_json::from_value(sources).map_err(unreadable)?,
            warnings: serde_json::from_value(warnings).map_err(unreadable)?,
            unproven: serde_json::from_value(unproven).map_err(unreadable)?,
        }),
        _ => None,
    };
    Ok((current, map))
}

/// Why no verdict could be used: the verdict itself, or the database that holds it.
#[derive(Debug, thiserror::Error)]
pub enum CurrentError {
    /// The verdict may not be settled on.
    #[error(transparent)]
    Verdict(#[from] VerdictError),
    /// The database could not be read.
    #[error("cannot read the schema verdict: {0}")]
    Database(#[from] sqlx::Error),
}

impl fmt::Display for Matched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Matched::Generation => "generation",
            Matched::Fingerprint => "fingerprint",
        })
    }
}
