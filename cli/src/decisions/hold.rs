//! `hold`: windows in which nothing is deleted or purged, in any workspace (docs/operating.md, "Holds"). An operator
//! declares one before a migration the application did not declare itself, lists them, and releases one (any, by
//! id: the application's roles release only their own). Needs only the database.

use anyhow::{Context, bail};
use lifecycle::holds;
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
            let id = holds::declare(&mut conn, lasting, &reason).await?;
            let window = holds::window(&mut conn, std::time::Duration::ZERO).await?;
            let text = window.as_ref().map_or_else(|| format!("hold {id} declared"), |w| w.describe());
            Ok(Output { text, json: json!({ "declared": id, "window": window }), attention: Vec::new() })
        }
        Command::List => {
            let open = holds::declared(&mut conn).await?;
            let quiet = settings::Settings::schema_quiet_period_from_env()?;
            let window = holds::window(&mut conn, quiet).await?;
            let mut text = match &window {
                Some(window) => format!("deletes and purges wait: {}", window.describe()),
                None => "no window is open: deletes and purges go on".to_owned(),
            };
            for hold in &open {
                text.push_str(&format!(
                    "\n  hold {}: {} (declared by {} at {}, ends {})",
                    hold.id, hold.reason, hold.declared_by, hold.declared_at, hold.ends_at
                ));
            }
            Ok(Output { text, json: json!({ "open": open, "window": window }), attention: Vec::new() })
        }
        Command::Release { id } => {
            if !holds::release(&mut conn, id).await? {
                bail!("hold {id} is not open (no such hold, released already, or ended)");
            }
            let window = holds::window(&mut conn, std::time::Duration::ZERO).await?;
            let text = match &window {
                Some(other) => format!("hold {id} released; still open: {}", other.describe()),
                None => format!("hold {id} released"),
            };
            Ok(Output { text, json: json!({ "released": id, "window": window }), attention: Vec::new() })
        }
    }
}
