//! Why a destruction waits though no source refers to the asset: its id found by the census in a column that is no
//! source (invariant 21), or adopted bytes whose key a record names, or that the census's key scan has not yet
//! covered the schema for (invariant 13), or a window in which nothing is destroyed (a migration's, declared, or
//! the quiet period after a schema change). Read in the settle's transaction, after the asset and its object are
//! locked; the plan reads the same.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::rules::{Decision, Deferral, Facts};
use platform::AssetId;

mod declared;
pub use declared::{DeclareError, Declared, Pinned, add_pin, declare, declared, pins, release, unpin};

/// `decision` as an adopted asset's holds leave it: a delete or purge waits while [`hold`] says so. What the settle
/// acts on (with `lock`) and the plan and explain show (without, in a read-only transaction).
/// A pinned asset is neither retired, deleted nor purged, whatever else holds it; a delete or purge that nothing
/// else holds waits while a [`Window`] is open (`quiet`: how long after a schema change).
pub async fn weigh(
    conn: &mut PgConnection,
    asset: AssetId,
    facts: &Facts,
    decision: Decision,
    quiet: Duration,
    lock: bool,
) -> Result<(Decision, Option<Hold>), sqlx::Error> {
    let (workspace, storage_key) = (facts.workspace_id, facts.storage_key.as_str());
    if matches!(decision, Decision::Retire | Decision::Delete | Decision::Purge)
        && let Some(pin) = pin(&mut *conn, asset, workspace, storage_key).await?
    {
        return Ok((Decision::Defer(Deferral::Pinned), Some(Hold::Pinned(pin))));
    }
    let hold = match decision {
        Decision::Retire | Decision::Delete | Decision::Purge => match found(&mut *conn, asset).await? {
            Some(found) => Some(found),
            // Whether it was adopted was read with the asset's row, under its lock.
            None if facts.adopted => hold(&mut *conn, asset, storage_key, lock).await?,
            None => None,
        },
        _ => None,
    };
    let decided = held(decision, hold.as_ref());
    if matches!(decided, Decision::Delete | Decision::Purge)
        && let Some(window) = window(conn, quiet).await?
    {
        return Ok((Decision::Defer(Deferral::Window), Some(Hold::Window(window))));
    }
    Ok((decided, hold))
}

/// What a pin keeps, for whom, and until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pin {
    /// Its row in `asset_pins`.
    pub id: i64,
    /// What it pins: `asset <id>`, `workspace <id>` or `prefix <key prefix>`.
    pub pins: String,
    /// Why: the reference the database cannot show.
    pub reason: String,
    /// The login that pinned it.
    pub pinned_by: String,
    /// When it ends.
    pub ends_at: DateTime<Utc>,
}

impl Pin {
    /// One line for a person.
    pub fn describe(&self) -> String {
        format!(
            "pin {} on {} by {} ({}) until {}",
            self.id,
            self.pins,
            self.pinned_by,
            self.reason,
            self.ends_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )
    }
}

impl Pin {
    /// A row of `asset_pins`, what it pins said once for every reader.
    fn of(row: PinRow) -> Pin {
        let pins = match (row.asset_id, row.workspace_id, row.key_prefix) {
            (Some(asset), _, _) => format!("asset {asset}"),
            (None, Some(workspace), _) => format!("workspace {workspace}"),
            (None, None, prefix) => format!("prefix {}", prefix.unwrap_or_default()),
        };
        Pin { id: row.id, pins, reason: row.reason, pinned_by: row.pinned_by, ends_at: row.ends_at }
    }
}

/// `asset_pins` as its readers select it.
struct PinRow {
    id: i64,
    asset_id: Option<Uuid>,
    workspace_id: Option<Uuid>,
    key_prefix: Option<String>,
    reason: String,
    pinned_by: String,
    ends_at: DateTime<Utc>,
}

/// The pin that keeps the asset now, if any: its own, its workspace's, or one on a prefix of its key.
pub async fn pin(
    conn: &mut PgConnection,
    asset: AssetId,
    workspace: Uuid,
    storage_key: &str,
) -> Result<Option<Pin>, sqlx::Error> {
    let row = sqlx::query_as!(
        PinRow,
        "SELECT p.id, p.asset_id, p.workspace_id, p.key_prefix, p.reason, p.pinned_by, p.ends_at
           FROM asset_pins p WHERE p.id = asset_sweeper_pin_of($1, $2, $3)",
        asset.0,
        workspace,
        storage_key,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(Pin::of))
}

/// A window in which nothing is deleted or purged, anywhere.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Window {
    /// Declared around a migration (`asset_sweeper_hold` in SQL, `asset-sweeper hold` by an operator): until it
    /// ends or is released.
    Declared {
        /// Its row in `destruction_holds`.
        id: i64,
        /// Why, as declared.
        reason: String,
        /// The login that declared it.
        declared_by: String,
        /// When it ends.
        ends_at: DateTime<Utc>,
        /// Since when deletes and purges have been held without a break: by this window and those declared before
        /// it back to back, as an application that re-declares its hold for ever does (the sweep's metric
        /// `DeletesHeldSeconds`, and the alarm on it). Over the windows of the last 30 days.
        held_since: DateTime<Utc>,
    },
    /// The schema changed at `changed_at`: a migration half done may still fill a column the census has read empty.
    Quiet {
        /// The newest change the detector recorded.
        changed_at: DateTime<Utc>,
        /// When the quiet period after it ends.
        ends_at: DateTime<Utc>,
    },
}

impl Window {
    /// How long deletes and purges have been held at `now`: since the first of the declared windows back to back,
    /// or since the schema's newest change.
    pub fn held_seconds(&self, now: DateTime<Utc>) -> u64 {
        let since = match self {
            Window::Declared { held_since, .. } => *held_since,
            Window::Quiet { changed_at, .. } => *changed_at,
        };
        u64::try_from((now - since).num_seconds()).unwrap_or(0)
    }

    /// When it ends (a declared one, unless released first).
    pub fn ends_at(&self) -> DateTime<Utc> {
        match self {
            Window::Declared { ends_at, .. } | Window::Quiet { ends_at, .. } => *ends_at,
        }
    }

    /// One line for a person: what holds, since when or by whom, and until when.
    pub fn describe(&self) -> String {
        match self {
            Window::Declared { id, reason, declared_by, ends_at, held_since } => format!(
                "hold {id} declared by {declared_by} ({reason}) until {}, deletes and purges held since {} ({} without \
                 a break); release it with `asset-sweeper hold release {id}`",
                ends_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                held_since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                // Whole minutes: a person reads "3days 4h 12m", not the seconds.
                humantime::format_duration(Duration::from_secs(self.held_seconds(Utc::now()) / 60 * 60)),
            ),
            Window::Quiet { changed_at, ends_at } => format!(
                "the schema changed at {}: deletes and purges wait until {} (SCHEMA_QUIET_PERIOD)",
                changed_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                ends_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
        }
    }
}

/// The window open now, if any: of the declared ones, the one that ends last; else the quiet period after the
/// schema's newest change, when `quiet` is not zero.
pub async fn window(conn: &mut PgConnection, quiet: Duration) -> Result<Option<Window>, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT h.id AS "id?", h.reason AS "reason?", h.declared_by AS "declared_by?", h.ends_at AS "ends_at?",
                  -- The start of the unbroken run of windows holding now: the latest start no earlier window
                  -- still covered (a running maximum of the ends before it), over the last 30 days' windows.
                  -- A window ends at its end or its release, whichever came first (`least` passes over NULL).
                  (WITH w AS (SELECT declared_at AS s, least(ends_at, released_at) AS e
                                FROM destruction_holds WHERE declared_at <= now()),
                        r AS (SELECT s, max(e) OVER (ORDER BY s ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                                        AS covered_until
                                FROM w WHERE e > now() - interval '30 days')
                   SELECT max(s) FROM r WHERE covered_until IS NULL OR covered_until < s) AS held_since,
                  asset_sweeper_schema_changed_at() AS changed_at,
                  asset_sweeper_schema_changed_at() + $1 * interval '1 second' > now() AS "quiet!"
             FROM (SELECT 1) one
             LEFT JOIN LATERAL (SELECT id, reason, declared_by, ends_at FROM destruction_holds
                                 WHERE released_at IS NULL AND ends_at > now()
                                 ORDER BY ends_at DESC LIMIT 1) h ON true"#,
        quiet.as_secs_f64(),
    )
    .fetch_one(conn)
    .await?;
    if let (Some(id), Some(reason), Some(declared_by), Some(ends_at)) =
        (row.id, row.reason, row.declared_by, row.ends_at)
    {
        let held_since = row.held_since.unwrap_or_else(Utc::now);
        return Ok(Some(Window::Declared { id, reason, declared_by, ends_at, held_since }));
    }
    Ok(match row.changed_at {
        Some(changed_at) if row.quiet && !quiet.is_zero() => {
            let ends_at = changed_at + chrono::Duration::from_std(quiet).unwrap_or(chrono::Duration::MAX);
            Some(Window::Quiet { changed_at, ends_at })
        }
        _ => None,
    })
}

/// Where the census (or the schema check's sample) found `asset`'s id in a column that is no source: the column
/// (`schema.table.column`) and the row's `ctid`. Such an asset is kept, not retired, deleted or purged: the
/// reference is the application's to fix (declare the column, or exclude it), and the finding is forgotten once
/// two complete scans of the column no longer see it.
async fn found(conn: &mut PgConnection, asset: AssetId) -> Result<Option<Hold>, sqlx::Error> {
    let found = sqlx::query!(
        r#"SELECT asset_sweeper_column_name(c) AS "column!", f.record
             FROM census_findings f JOIN census_columns c ON c.relid = f.relid AND c.attnum = f.attnum
            WHERE f.asset_id = $1
            ORDER BY 1 LIMIT 1"#,
        asset.0,
    )
    .fetch_optional(conn)
    .await?;
    Ok(found.map(|f| Hold::Found { column: f.column, record: f.record }))
}

/// Why an adopted asset's bytes must wait, though nothing refers to it by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hold {
    /// A record names its key: `schema.table.column`. The integration gap to fix: a record without an asset row.
    Named(String),
    /// The key scan has not covered these text and JSON columns as they stand since the adoption (the first few).
    Unscanned(Vec<String>),
    /// The census found its id in a column that is no source: `schema.table.column`, and the row's `ctid`.
    Found {
        /// The column, `schema.table.column`.
        column: String,
        /// The row's `ctid` when it was seen.
        record: String,
    },
    /// A window in which nothing is destroyed is open.
    Window(Window),
    /// A pin keeps it.
    Pinned(Pin),
}

/// Whether `asset`, about to be destroyed, was adopted and must wait: read in the settle's transaction, after the
/// asset and its object are locked. `None` for an asset the application wrote, for an adopted one whose bytes
/// another asset shares (only its row goes), and for an adopted one no record names once the key scan has read
/// every text and JSON column, in a scan begun after the adoption, with the layout that adopted it. With `lock`
/// (the settle), the sharers are locked; without (a read-only look), they are only counted.
pub async fn hold(
    conn: &mut PgConnection,
    asset: AssetId,
    storage_key: &str,
    lock: bool,
) -> Result<Option<Hold>, sqlx::Error> {
    // Most assets were written by the application, not adopted: for them nothing below is read (it searches every
    // named key and every census column, milliseconds a settle at a thousand tables).
    let adopted = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM adopted_assets d WHERE d.asset_id = $1) AS "adopted!""#,
        asset.0
    )
    .fetch_one(&mut *conn)
    .await?;
    if !adopted {
        return Ok(None);
    }
    let row = sqlx::query!(
        r#"SELECT (SELECT asset_sweeper_column_name(c)
                     FROM named_keys n JOIN census_columns c ON c.relid = n.relid AND c.attnum = n.attnum
                    WHERE asset_sweeper_names_key(n.storage_key, $2)
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
    // Bytes another asset row shares are not removed: the adopted row alone goes, as for any sharer. The sharers are
    // locked, so none can go before the settle counts them again and removes the row only.
    let shared = crate::facts::sharers(&mut *conn, storage_key, asset, lock).await?;
    if shared > 0 {
        return Ok(None);
    }
    if let Some(column) = row.named_by {
        return Ok(Some(Hold::Named(column)));
    }
    Ok((!row.unscanned.is_empty()).then_some(Hold::Unscanned(row.unscanned)))
}

/// A retirement, delete or purge of adopted bytes waits while a record names their key or the key scan has not
/// covered the schema (`hold`, read under the settle's locks): retiring adopted bytes is their trial, and a trial of
/// a file a record names would only hide it for nothing. Every other decision stands.
pub fn held(decision: Decision, hold: Option<&Hold>) -> Decision {
    let removing = matches!(decision, Decision::Retire | Decision::Delete | Decision::Purge);
    match (decision, hold) {
        (_, Some(Hold::Named(_))) if removing => Decision::Defer(Deferral::Named),
        (_, Some(Hold::Unscanned(_))) if removing => Decision::Defer(Deferral::KeyScan),
        (Decision::Retire | Decision::Delete | Decision::Purge, Some(Hold::Found { .. })) => {
            Decision::Defer(Deferral::Found)
        }
        (decision, _) => decision,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adopted_bytes_wait_while_named_or_unscanned_and_only_their_removal_waits() {
        let named = Hold::Named("public.pages.body".into());
        let unscanned = Hold::Unscanned(vec!["public.pages.body".into()]);
        assert_eq!(held(Decision::Delete, Some(&named)), Decision::Defer(Deferral::Named));
        assert_eq!(held(Decision::Purge, Some(&unscanned)), Decision::Defer(Deferral::KeyScan));
        assert_eq!(held(Decision::Delete, None), Decision::Delete);
        assert_eq!(held(Decision::Retire, Some(&named)), Decision::Defer(Deferral::Named));
        assert_eq!(held(Decision::Retire, Some(&unscanned)), Decision::Defer(Deferral::KeyScan));
        assert_eq!(held(Decision::Retire, None), Decision::Retire);
        assert_eq!(held(Decision::Keep, Some(&unscanned)), Decision::Keep);
    }
}
