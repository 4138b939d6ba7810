//! Several readers of one table at once: a round of a table's batches, consecutive block ranges each read on its
//! own connection at the same time (`CENSUS_READERS`: the census's own connection and the others a pass lends
//! it). Each range is one batch as a batch alone is — its own statement, snapshot, transaction and limit — so
//! nothing a batch proves changes: the scan is dated before its first round, and its cursor moves past a range
//! only once every range before it has been read. On a replica, every range has a reader of its own. While one
//! reader's values are searched here, the others' statements run in the database: a batch's time was a third the
//! server's and two thirds this side's.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgConnection;
use sqlx::pool::PoolConnection;

use super::group::{Group, Rows};
use super::named::{KeyScan, Noted};
use super::replica::Floor;
use super::scan::{Found, scan};

/// The connections that read a round's ranges beside the census's own (lent by the pass's pool), or, reading a
/// replica ([`super::replica`]), every range's: the census's own connection then only writes.
#[derive(Default)]
pub struct Readers {
    connections: Vec<PoolConnection<sqlx::Postgres>>,
    replica: Option<Floor>,
}

impl Readers {
    /// Connections to the primary, each reading one range of a round beside the census's own.
    pub fn lent(connections: Vec<PoolConnection<sqlx::Postgres>>) -> Self {
        Readers { connections, replica: None }
    }

    /// Connections to a standby confirmed to have replayed past `floor`, reading every range.
    pub(super) fn on_replica(connections: Vec<PoolConnection<sqlx::Postgres>>, floor: Floor) -> Self {
        Readers { connections, replica: Some(floor) }
    }

    /// The connections reading a round: the census's own among them unless it reads a replica.
    pub(super) fn count(&self) -> usize {
        self.connections.len() + usize::from(self.replica.is_none())
    }

    /// The primary as the pass found it, when the census reads a replica: what it reads there is dated from this.
    pub(super) fn floor(&self) -> Option<&Floor> {
        self.replica.as_ref()
    }
}

/// What a range read: per column what it found, and what it noted for the census's own connection to write.
pub(super) type Read = Result<(Vec<Found>, Noted), sqlx::Error>;

/// What each of a round's ranges read, in their order: on the primary the first on `conn` (under the batch limit
/// already) and each other on a reader of its own; on a replica each on a reader. A reader's range runs in a task of
/// its own, so its values are searched on another core.
pub(super) async fn round(
    conn: &mut PgConnection,
    readers: &mut Readers,
    group: &Group,
    ranges: &[Rows],
    keys: Option<&Arc<KeyScan>>,
    batch_timeout: Duration,
) -> Vec<Read> {
    let (own, others) = match readers.replica {
        Some(_) => (None, ranges),
        None => match ranges.split_first() {
            Some((first, others)) => (Some(first), others),
            None => return Vec::new(),
        },
    };
    // The adopted keys are read on the primary, before any other connection reads for the scan.
    if !others.is_empty()
        && let Some(keys) = keys
        && let Err(e) = keys.read_before_readers(&mut *conn).await
    {
        return vec![Err(e)];
    }
    let shared = Arc::new(group.clone());
    let lent: Vec<_> = readers.connections.drain(..others.len().min(readers.connections.len())).collect();
    let tasks: Vec<_> = others
        .iter()
        .zip(lent)
        .map(|(&rows, mut reader)| {
            let (group, keys) = (Arc::clone(&shared), keys.cloned());
            tokio::spawn(async move {
                let read = under_limit(&mut reader, &group, rows, keys.as_deref(), batch_timeout).await;
                (reader, read)
            })
        })
        .collect();
    let mut results = Vec::with_capacity(ranges.len());
    if let Some(first) = own {
        results.push(scan(conn, group, *first, keys.map(|k| &**k)).await);
    }
    for task in tasks {
        results.push(match task.await {
            // A reader whose batch failed is not lent again in this pass: its connection may be what failed.
            Ok((reader, read)) => {
                if read.is_ok() {
                    readers.connections.push(reader);
                }
                read
            }
            Err(stopped) => Err(sqlx::Error::Protocol(format!("a census reader stopped: {stopped}"))),
        });
    }
    // A range no reader was lent for is not read: said as a failure, so the round ends before it.
    results.resize_with(ranges.len(), || Err(sqlx::Error::Protocol("no census reader was lent for this range".into())));
    results
}

/// One range on a reader: under the batch limit, then the session's own again.
async fn under_limit(
    conn: &mut PgConnection,
    group: &Group,
    rows: Rows,
    keys: Option<&KeyScan>,
    batch_timeout: Duration,
) -> Read {
    // A lent reader's batch failing, as a reader whose connection broke would.
    fail::fail_point!("census::lent_reader", |_| Err(sqlx::Error::Protocol("injected: a census reader failed".into())));
    limit(conn, Some(batch_timeout)).await?;
    let read = scan(conn, group, rows, keys).await;
    let reset = limit(conn, None).await;
    let read = read?;
    reset?;
    Ok(read)
}

/// Folds what consecutive ranges found, range by range, into what one batch over them all would have found.
pub(super) fn merge(into: &mut [Found], more: Vec<Found>) {
    for (f, more) in into.iter_mut().zip(more) {
        f.rows += more.rows;
        for (id, at) in more.assets {
            f.add(id, at);
        }
    }
}

/// Puts the session's statements under `batch_timeout` (the census's reading statements), or with `None` back
/// under the session's own limit, the one its connection was opened with.
pub(super) async fn limit(conn: &mut PgConnection, batch_timeout: Option<Duration>) -> Result<(), sqlx::Error> {
    match batch_timeout {
        Some(timeout) => {
            let timeout = format!("{}ms", timeout.as_millis().max(1));
            sqlx::query!("SELECT set_config('statement_timeout', $1, false)", timeout).fetch_one(conn).await?;
        }
        None => {
            sqlx::raw_sql("RESET statement_timeout").execute(conn).await?;
        }
    }
    Ok(())
}
