//! Several readers of one table at once: a round of a table's batches, consecutive block ranges each read on its
//! own connection at the same time (`CENSUS_READERS`: the census's own connection and the others a pass lends
//! it). Each range is one batch as a batch alone is — its own statement, snapshot, transaction and limit — so
//! nothing a batch proves changes: the scan is dated before its first round, and its cursor moves past a range
//! only once every range before it has been read. While one reader's values are searched here, the others'
//! statements run in the database: a batch's time was a third the server's and two thirds this side's.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgConnection;
use sqlx::pool::PoolConnection;

use super::named::KeyScan;
use super::scan::{Found, Group, Rows, scan};

/// The connections that read beside the census's own, each for one range of a round.
pub type Readers = Vec<PoolConnection<sqlx::Postgres>>;

/// What each of a round's ranges read, in their order: the first on `conn` (under the batch limit already), each
/// other on a reader of its own, in a task of its own so its values are searched on another core.
pub(super) async fn round(
    conn: &mut PgConnection,
    readers: &mut Readers,
    group: &Group,
    ranges: &[Rows],
    keys: Option<&Arc<KeyScan>>,
    batch_timeout: Duration,
) -> Vec<Result<Vec<Found>, sqlx::Error>> {
    let Some((first, others)) = ranges.split_first() else { return Vec::new() };
    if !others.is_empty()
        && let Some(keys) = keys
        && let Err(e) = keys.read_before_readers(&mut *conn).await
    {
        return vec![Err(e)];
    }
    let shared = Arc::new(group.clone());
    let lent: Vec<_> = readers.drain(..others.len().min(readers.len())).collect();
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
    let mut results = vec![scan(conn, group, *first, keys.map(|k| &**k)).await];
    for task in tasks {
        results.push(match task.await {
            // A reader whose batch failed is not lent again in this pass: its connection may be what failed.
            Ok((reader, read)) => {
                if read.is_ok() {
                    readers.push(reader);
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
) -> Result<Vec<Found>, sqlx::Error> {
    // A lent reader's batch failing, as a reader whose connection broke would.
    fail::fail_point!("census::lent_reader", |_| Err(sqlx::Error::Protocol("injected: a census reader failed".into())));
    super::advance::limit(conn, Some(batch_timeout)).await?;
    let read = scan(conn, group, rows, keys).await;
    let reset = super::advance::limit(conn, None).await;
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
