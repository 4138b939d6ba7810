//! `pin`: keep an asset, a workspace or a key prefix as it is, for a reference the database cannot show (another
//! service's store, a link in a sent email, a page a CDN keeps): discovery does not make it due, reconciliation
//! does not adopt it, a settle neither retires, deletes nor purges it. Each pin has a reason and ends by itself
//! (within a year); `release` ends one sooner. Needs only the database.

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use serde_json::json;
use uuid::Uuid;

use crate::{Output, connect};

#[derive(clap::Subcommand)]
pub(crate) enum Command {
    /// Pin one of an asset, a workspace or a key prefix.
    Add {
        /// An asset, by id.
        #[arg(long, conflicts_with_all = ["workspace", "prefix"], required_unless_present_any = ["workspace", "prefix"])]
        asset: Option<Uuid>,
        /// Every asset of a workspace, and its keys no row knows.
        #[arg(long, conflicts_with = "prefix")]
        workspace: Option<Uuid>,
        /// Every key that begins with this.
        #[arg(long)]
        prefix: Option<String>,
        /// How long from now, such as 90d (at most a year).
        #[arg(long = "for")]
        lasting: humantime::Duration,
        /// Why: the reference the database cannot show.
        #[arg(long)]
        reason: String,
    },
    /// The pins in force, those ending first at the top.
    List,
    /// End a pin now.
    Release {
        /// Its id, as `pin list` shows it.
        id: i64,
    },
}

pub(crate) async fn run(command: Command) -> anyhow::Result<Output> {
    let pool = connect::database().await?;
    let mut conn = pool.acquire().await.context("cannot reach the database")?;
    match command {
        Command::Add { asset, workspace, prefix, lasting, reason } => {
            if reason.trim().is_empty() {
                bail!("a pin needs a reason: the reference the database cannot show");
            }
            if prefix.as_deref().is_some_and(str::is_empty) {
                bail!("--prefix is empty: that would pin every key; pin a workspace or a longer prefix");
            }
            let lasting = chrono::Duration::from_std(lasting.into()).context("--for is too long")?;
            if lasting > chrono::Duration::days(366) {
                bail!("a pin ends within a year: pin again before it ends");
            }
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO asset_pins (asset_id, workspace_id, key_prefix, reason, ends_at)
                 VALUES ($1, $2, $3, $4, now() + $5) RETURNING id",
            )
            .bind(asset)
            .bind(workspace)
            .bind(prefix.as_deref())
            .bind(reason.trim())
            .bind(lasting)
            .fetch_one(&mut *conn)
            .await
            .context("cannot record the pin")?;
            let pins = list(&mut conn).await?;
            let pin = pins.iter().find(|p| p.id == id);
            let text = pin.map_or_else(|| format!("pin {id} recorded"), lifecycle::holds::Pin::describe);
            Ok(Output { text, json: json!({ "pinned": pin }), attention: Vec::new() })
        }
        Command::List => {
            let pins = list(&mut conn).await?;
            let mut text = format!("{} pin(s) in force", pins.len());
            for pin in &pins {
                text.push_str(&format!("\n  {}", pin.describe()));
            }
            Ok(Output { text, json: json!({ "pins": pins }), attention: Vec::new() })
        }
        Command::Release { id } => {
            let released: Option<bool> = sqlx::query_scalar(
                "UPDATE asset_pins SET released_by = session_user, released_at = now()
                  WHERE id = $1 AND released_at IS NULL AND ends_at > now()
                 RETURNING true",
            )
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?;
            if released.is_none() {
                bail!("pin {id} is not in force (no such pin, released already, or ended)");
            }
            Ok(Output { text: format!("pin {id} released"), json: json!({ "released": id }), attention: Vec::new() })
        }
    }
}

/// The pins in force, ending soonest first.
pub(crate) async fn list(conn: &mut sqlx::PgConnection) -> Result<Vec<lifecycle::holds::Pin>, sqlx::Error> {
    let rows: Vec<(i64, String, String, String, DateTime<Utc>)> = sqlx::query_as(
        "SELECT id, CASE WHEN asset_id IS NOT NULL THEN 'asset ' || asset_id
                         WHEN workspace_id IS NOT NULL THEN 'workspace ' || workspace_id
                         ELSE 'prefix ' || key_prefix END,
                reason, pinned_by, ends_at
           FROM asset_pins WHERE released_at IS NULL AND ends_at > now() ORDER BY ends_at, id",
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(id, pins, reason, pinned_by, ends_at)| lifecycle::holds::Pin { id, pins, reason, pinned_by, ends_at })
        .collect())
}
