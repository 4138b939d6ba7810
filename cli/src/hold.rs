//! `hold`: windows in which nothing is deleted or purged, in any workspace (docs/operating.md, "Holds"). An operator
//! declares one before a migration the application did not declare itself, lists them, and releases one (any, by
//! id: the application's roles release only their own). Needs only the database.

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use serde_json::json;

use crate::{Output, connect};

#[derive(clap::Subcommand)]
pub(crate) enum Command {
    /// Declare a window: nothing is deleted or purged until it ends (at most 7 days) or is released.
    Declare {
        /// How long from now, such as 4h.
        #[arg(long = "for")]
        lasting: humantime::Duration,
        /// Why: the migration, and who to ask about it.
        #[arg(long)]
        reason: String,
    },
    /// The windows open now, and the quiet period after the schema's last change.
    List,
    /// End a window now.
    Release {
        /// Its id, as `hold list` shows it.
        id: i64,
    },
}

pub(crate) async fn run(command: Command) -> anyhow::Result<Output> {
    let pool = connect::database().await?;
    let mut conn = pool.acquire().await.context("cannot reach the database")?;
    match command {
        Command::Declare { lasting, reason } => {
            let lasting = chrono::Duration::from_std(lasting.into()).context("--for is too long")?;
            // Through the function the application calls too: its checks (a reason, at most a week) are one.
            let id: i64 = sqlx::query_scalar("SELECT asset_sweeper_hold(now() + $1, $2)")
                .bind(lasting)
                .bind(reason.trim())
                .fetch_one(&mut *conn)
                .await
                .map_err(refusal)?;
            let window = lifecycle::holds::window(&mut conn, std::time::Duration::ZERO).await?;
            let text = window.as_ref().map_or_else(|| format!("hold {id} declared"), |w| w.describe());
            Ok(Output { text, json: json!({ "declared": id, "window": window }), attention: Vec::new() })
        }
        Command::List => {
            let open: Vec<OpenHold> = sqlx::query_as(
                "SELECT id, reason, declared_by, declared_at, ends_at FROM destruction_holds
                  WHERE released_at IS NULL AND ends_at > now() ORDER BY ends_at DESC",
            )
            .fetch_all(&mut *conn)
            .await?;
            let quiet = settings::Settings::schema_quiet_period_from_env()?;
            let window = lifecycle::holds::window(&mut conn, quiet).await?;
            let mut text = match &window {
                Some(window) => format!("deletes and purges wait: {}", window.describe()),
                None => "no window is open: deletes and purges go on".to_owned(),
            };
            for (id, reason, by, at, ends) in &open {
                text.push_str(&format!("\n  hold {id}: {reason} (declared by {by} at {at}, ends {ends})"));
            }
            let holds: Vec<serde_json::Value> = open
                .iter()
                .map(|(id, reason, by, at, ends)| {
                    json!({ "id": id, "reason": reason, "declared_by": by, "declared_at": at, "ends_at": ends })
                })
                .collect();
            Ok(Output { text, json: json!({ "open": holds, "window": window }), attention: Vec::new() })
        }
        Command::Release { id } => {
            let released: Option<bool> = sqlx::query_scalar(
                "UPDATE destruction_holds SET released_by = session_user, released_at = now()
                  WHERE id = $1 AND released_at IS NULL AND ends_at > now()
                 RETURNING true",
            )
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?;
            if released.is_none() {
                bail!("hold {id} is not open (no such hold, released already, or ended)");
            }
            let window = lifecycle::holds::window(&mut conn, std::time::Duration::ZERO).await?;
            let text = match &window {
                Some(other) => format!("hold {id} released; still open: {}", other.describe()),
                None => format!("hold {id} released"),
            };
            Ok(Output { text, json: json!({ "released": id, "window": window }), attention: Vec::new() })
        }
    }
}

/// A window's row: id, reason, who declared it, when, and when it ends.
type OpenHold = (i64, String, String, DateTime<Utc>, DateTime<Utc>);

/// The function's own refusal (a missing reason, a window past a week) as the line to print.
fn refusal(e: sqlx::Error) -> anyhow::Error {
    match e.as_database_error() {
        Some(db) => anyhow::anyhow!("{}", db.message().trim_start_matches("asset-sweeper: ")),
        None => anyhow::Error::new(e).context("cannot declare the hold"),
    }
}
