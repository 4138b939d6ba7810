//! `pin`: keep an asset, a workspace or a key prefix as it is, for a reference the database cannot show (another
//! service's store, a link in a sent email, a page a CDN keeps): discovery does not make it due, reconciliation
//! does not adopt it, a settle neither retires, deletes nor purges it. Each pin has a reason and ends by itself
//! (within a year); `release` ends one sooner. Needs only the database.

use anyhow::{Context, bail};
use lifecycle::holds::{self, Pinned};
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
            let pinned = match (asset, workspace, prefix) {
                (Some(asset), _, _) => Pinned::Asset(asset),
                (None, Some(workspace), _) => Pinned::Workspace(workspace),
                (None, None, Some(prefix)) => Pinned::Prefix(prefix),
                (None, None, None) => bail!("pin one of --asset, --workspace or --prefix"),
            };
            let lasting = chrono::Duration::from_std(lasting.into()).context("--for is too long")?;
            let pin = holds::add_pin(&mut conn, pinned, lasting, &reason).await?;
            Ok(Output { text: pin.describe(), json: json!({ "pinned": pin }), attention: Vec::new() })
        }
        Command::List => {
            let pins = holds::pins(&mut conn).await?;
            let mut text = format!("{} pin(s) in force", pins.len());
            for pin in &pins {
                text.push_str(&format!("\n  {}", pin.describe()));
            }
            Ok(Output { text, json: json!({ "pins": pins }), attention: Vec::new() })
        }
        Command::Release { id } => {
            if !holds::unpin(&mut conn, id).await? {
                bail!("pin {id} is not in force (no such pin, released already, or ended)");
            }
            Ok(Output { text: format!("pin {id} released"), json: json!({ "released": id }), attention: Vec::new() })
        }
    }
}
