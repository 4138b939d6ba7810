//! A read keeps (docs/design.md, "Observed use"): what the access logs saw of an asset's file, weighed against a
//! decision to retire or remove it. A retired asset whose file was read after its retirement is kept (back to
//! `attached`, like a found reference); an asset whose file was read within `GRACE` is not retired yet; and no
//! removal happens until the delivered logs reach past its decision by their delivery lag, from every configured
//! source, each readable. With no source configured, none of this applies. Read in the settle's transaction, after
//! the asset is locked; the plan and explain read the same.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;

use crate::rules::{AssetState, Decision, Deferral, Facts};

/// The newest read of a file, as the logs recorded it (`observed_reads`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Read {
    /// When.
    pub at: DateTime<Utc>,
    /// Which logs saw it: `s3` or `cloudfront`.
    pub source: String,
    /// The IAM principal S3 named; none for an anonymous or a CloudFront request.
    pub requester: Option<String>,
    /// The site the request came from, when it said.
    pub referrer_host: Option<String>,
    /// What kind of client asked (`browser`, `crawler`, `sdk`, …).
    pub client: String,
}

impl Read {
    /// One line for a person: when, from where, by what.
    pub fn describe(&self) -> String {
        let mut line = format!(
            "read {} (from the {} logs",
            self.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            self.source
        );
        if let Some(host) = &self.referrer_host {
            line.push_str(&format!(", referred by {host}"));
        }
        if let Some(requester) = &self.requester {
            line.push_str(&format!(", by {requester}"));
        }
        line.push_str(&format!(", a {} client)", self.client));
        line
    }
}

/// Why a removal waits for the logs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Uncovered {
    /// The source's delivered logs do not reach far enough yet.
    Behind {
        /// The source: `s3` or `cloudfront`.
        source: String,
        /// How far they reach (the newest log object read), if any was.
        reaches: Option<DateTime<Utc>>,
        /// How far they must: the decision and the delivery lag.
        needs: DateTime<Utc>,
    },
    /// The source could not be read when the sweep last tried.
    Unreadable {
        /// The source: `s3` or `cloudfront`.
        source: String,
        /// What the sweep was told when it tried.
        error: String,
    },
}

impl Uncovered {
    /// One line for a person.
    pub fn describe(&self) -> String {
        let time = |t: &DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        match self {
            Uncovered::Behind { source, reaches: Some(reaches), needs } => format!(
                "the {source} logs read so far reach {}, and must reach {} (the decision and the delivery lag)",
                time(reaches),
                time(needs)
            ),
            Uncovered::Behind { source, reaches: None, needs } => {
                format!("no {source} log has been read yet, and they must reach {}", time(needs))
            }
            Uncovered::Unreadable { source, error } => format!("the {source} logs cannot be read: {error}"),
        }
    }
}

/// What the logs make of a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Seen {
    /// The file was read: since its retirement (kept), or within the grace period (not retired yet).
    Read(Read),
    /// A removal waits for the logs.
    Uncovered(Uncovered),
}

/// The newest read of `storage_key` the logs recorded.
pub async fn last_read(conn: &mut PgConnection, storage_key: &str) -> Result<Option<Read>, sqlx::Error> {
    sqlx::query_as!(
        Read,
        "SELECT read_at AS at, source, requester, referrer_host, client FROM observed_reads WHERE storage_key = $1",
        storage_key
    )
    .fetch_optional(conn)
    .await
}

/// Why the logs do not cover a decision taken at `decided_at`, if they do not: the first source behind or
/// unreadable. `None` when every configured source covers it, or none is configured.
pub async fn uncovered(conn: &mut PgConnection, decided_at: DateTime<Utc>) -> Result<Option<Uncovered>, sqlx::Error> {
    let sources = sqlx::query!(
        r#"SELECT source, error, $1::timestamptz + delivery_lag AS "needs!", counted_reach
             FROM log_sources ORDER BY source"#,
        decided_at
    )
    .fetch_all(conn)
    .await?;
    for source in sources {
        if let Some(error) = source.error {
            return Ok(Some(Uncovered::Unreadable { source: source.source, error }));
        }
        if source.counted_reach.is_none_or(|reaches| reaches < source.needs) {
            return Ok(Some(Uncovered::Behind {
                source: source.source,
                reaches: source.counted_reach,
                needs: source.needs,
            }));
        }
    }
    Ok(None)
}

/// `decision` as the logs leave it, and what they saw, when they change it. A retired asset read since its
/// retirement is kept; a retirement waits while the file was read within `grace`; a delete or purge waits until
/// every source's logs cover its decision (its purge time, fixed at its retirement).
pub async fn weigh(
    conn: &mut PgConnection,
    facts: &Facts,
    decision: Decision,
    grace: Duration,
) -> Result<Option<(Decision, Seen)>, sqlx::Error> {
    if !matches!(decision, Decision::Retire | Decision::Delete | Decision::Purge) {
        return Ok(None);
    }
    // The logs' reach first, then the read: each statement sees what was committed when it began, so a log object
    // recorded between the two, whose read would keep the file, is seen by the second whenever the first counted
    // its reach.
    let uncovered = match decision {
        Decision::Delete | Decision::Purge => uncovered(&mut *conn, facts.purge_after.unwrap_or_else(Utc::now)).await?,
        _ => None,
    };
    if let Some(read) = last_read(&mut *conn, &facts.storage_key).await? {
        let since_retired = facts.state == AssetState::Retired && facts.retired_at.is_some_and(|r| read.at > r);
        if since_retired {
            return Ok(Some((Decision::Keep, Seen::Read(read))));
        }
        let recent = Utc::now() - chrono::Duration::from_std(grace).unwrap_or_default() < read.at;
        if decision == Decision::Retire && recent {
            return Ok(Some((Decision::Defer(Deferral::Read), Seen::Read(read))));
        }
    }
    Ok(uncovered.map(|uncovered| (Decision::Defer(Deferral::Logs), Seen::Uncovered(uncovered))))
}
