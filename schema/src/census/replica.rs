//! The census on a replica (`CENSUS_DATABASE_URL`): a physical standby of the application's database holds the same
//! rows at the same addresses (table files, `ctid` ranges, oids), so a batch reads there what it would read on the
//! primary, and leaves the primary's CPU and disks to the application. What a standby answers is as old as what it
//! has replayed: a pass reads the primary's clock and WAL position first (its floor), reads nothing on a standby
//! that has not replayed past that position, and dates a scan or a cycle it begins from the floor, not from when
//! the standby read — a replica's lag is part of "when it was read". Everything the census writes (its cursor, its
//! findings, the names and spellings its batches noted) goes to the primary, by the census's own connection.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use sqlx::Postgres;
use sqlx::pool::PoolConnection;
use sqlx::postgres::PgConnectOptions;

/// The primary as a pass found it before reading: what a batch on a standby must have replayed, and the date of
/// what it then reads.
#[derive(Debug, Clone)]
pub struct Floor {
    /// The primary's clock.
    pub(super) at: DateTime<Utc>,
    /// The primary's WAL position then (`pg_current_wal_lsn`), as text.
    lsn: String,
    /// The primary's cluster (`pg_control_system`): a standby of it has the same.
    system: i64,
    /// The database the census reads.
    database: String,
}

/// Why the census read nothing on its replica in this pass. Each says what to fix, and deletes and purges wait
/// meanwhile (the columns it did not read stay unproven, and the cycle grows old).
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    /// The server is not replaying: a primary (this one, or a promoted standby whose rows have gone their own way).
    #[error(
        "CENSUS_DATABASE_URL names a server that is not a standby (pg_is_in_recovery() is false): the census reads \
         only a physical standby of the application's database there; unset it to read the primary"
    )]
    NotAStandby,
    /// A standby of another cluster: its rows are not this database's.
    #[error(
        "CENSUS_DATABASE_URL names a standby of another cluster (system identifier {replica}; the primary's is \
         {primary}): its rows are not this database's"
    )]
    OtherCluster {
        /// The primary's system identifier.
        primary: i64,
        /// The standby's.
        replica: i64,
    },
    /// The right cluster, another database.
    #[error("CENSUS_DATABASE_URL names database {replica:?}; the census reads {primary:?}")]
    OtherDatabase {
        /// The database the census reads on the primary.
        primary: String,
        /// The one the URL names.
        replica: String,
    },
    /// The standby had not replayed what the primary had written when the pass began, and did not within the wait.
    #[error(
        "the census's standby has replayed up to {replayed}, behind the primary's {floor} when this pass began, \
         after waiting {waited:?}: the census read nothing this pass"
    )]
    Behind {
        /// Where the standby's replay stood.
        replayed: String,
        /// The primary's WAL position when the pass began.
        floor: String,
        /// How long the pass waited.
        waited: Duration,
    },
}

impl From<ReplicaError> for sqlx::Error {
    fn from(error: ReplicaError) -> Self {
        sqlx::Error::Configuration(Box::new(error))
    }
}

/// The primary as it stands, from the census's own connection to it. The position is the end of a WAL record the
/// census writes for it (a logical decoding message, which no decoder here reads): every transaction visible at
/// `now()` wrote its commit record before it, and a standby's replay stops at a record's end. Not the primary's
/// write position: a commit made with `synchronous_commit = off` is visible before its record is written, and a
/// standby replayed up to the write position had not seen it (the replica test found it so).
pub(super) async fn floor(primary: &mut PgConnection) -> Result<Floor, sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT now() AS "at!", pg_logical_emit_message(false, 'asset-sweeper', 'census floor')::text AS "lsn!",
                  (SELECT system_identifier FROM pg_control_system()) AS "system!",
                  current_database()::text AS "database!""#
    )
    .fetch_one(primary)
    .await?;
    Ok(Floor { at: row.at, lsn: row.lsn, system: row.system, database: row.database })
}

/// `count` connections to the standby `options` names, each confirmed a standby of the primary's cluster and
/// database that has replayed past `floor` (waiting for that until `until`), to read every range
/// (`Readers::on_replica`): how long it waited is in the answer. A connection the standby refuses past the first is
/// one reader fewer.
pub(super) async fn readers(
    options: &PgConnectOptions,
    count: u32,
    floor: &Floor,
    until: Instant,
) -> Result<(Vec<PoolConnection<Postgres>>, Duration), sqlx::Error> {
    // The project's own pool, with every session's limits and path.
    let pool = platform::db::pool(&platform::db::DatabaseSettings::new(options.clone(), count.max(1)));
    let started = Instant::now();
    let mut connections = Vec::new();
    for n in 0..count.max(1) {
        let mut reader = match pool.acquire().await {
            Ok(reader) => reader,
            Err(e) if n == 0 => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, "a census reader could not connect to the standby: reading with fewer");
                break;
            }
        };
        // Closed when the census is done with it, as the primary's lent readers are.
        reader.close_on_drop();
        caught_up(&mut reader, floor, until).await?;
        connections.push(reader);
    }
    let waited = started.elapsed();
    Ok((connections, waited))
}

/// Confirms `standby` is one of the primary's cluster and database, and waits until it has replayed past the floor
/// or `until` has come. One server's replay only moves forward, so a connection confirmed once reads at or past
/// the floor for the rest of the pass.
async fn caught_up(standby: &mut PgConnection, floor: &Floor, until: Instant) -> Result<(), sqlx::Error> {
    let started = Instant::now();
    loop {
        let row = sqlx::query!(
            r#"SELECT pg_is_in_recovery() AS "recovering!",
                      (SELECT system_identifier FROM pg_control_system()) AS "system!",
                      current_database()::text AS "database!",
                      coalesce(pg_last_wal_replay_lsn() >= $1::text::pg_lsn, false) AS "replayed!",
                      coalesce(pg_last_wal_replay_lsn()::text, 'nothing') AS "at!""#,
            floor.lsn,
        )
        .fetch_one(&mut *standby)
        .await?;
        if !row.recovering {
            return Err(ReplicaError::NotAStandby.into());
        }
        if row.system != floor.system {
            return Err(ReplicaError::OtherCluster { primary: floor.system, replica: row.system }.into());
        }
        if row.database != floor.database {
            return Err(ReplicaError::OtherDatabase { primary: floor.database.clone(), replica: row.database }.into());
        }
        if row.replayed {
            return Ok(());
        }
        if Instant::now() >= until {
            let waited = started.elapsed();
            return Err(ReplicaError::Behind { replayed: row.at, floor: floor.lsn.clone(), waited }.into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
