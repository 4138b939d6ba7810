//! One pass's share of the census: bring its rows in step with the schema, plan the work once, then read batch
//! after batch until the cycle is done, the time share is spent or the batch cap is reached.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

use super::group::{Column, Group, Rows};
use super::readers::{self, Readers, limit};
use super::scan::Found;
use super::{Columns, Target, named, summary, timed_out, unread};
use platform::keys::KeyLayout;

/// How far a pass may go.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// No batch starts after this.
    pub until: Instant,
    /// The most statements this pass runs.
    pub max_batches: u32,
    /// Table blocks each statement reads.
    pub batch_blocks: u32,
    /// How long each statement may read (`CENSUS_BATCH_TIMEOUT`).
    pub batch_timeout: Duration,
    /// How long after a cycle ends the next one begins (columns never proven are read meanwhile).
    pub cycle_interval: Duration,
}

/// Why the census stopped in a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// Every column was read in this cycle: the next starts after the cycle interval.
    CycleComplete,
    /// The last cycle ended less than the cycle interval ago, and every column is proven: nothing to read.
    Resting,
    /// Its share of the pass's time ran out.
    TimeShare,
    /// It ran its most batches for one pass.
    BatchCap,
}

/// What the census did in one pass, and where it stands: the run record's `census`.
#[derive(Debug, Clone, Serialize)]
pub struct Progress {
    /// The cycle it worked on.
    pub cycle: i64,
    /// When that cycle's first batch ran.
    pub cycle_started_at: Option<String>,
    /// Statements run in this pass.
    pub batches: u64,
    /// Table blocks read in this pass.
    pub blocks: u64,
    /// Columns whose scan ended in this pass.
    pub columns_finished: u64,
    /// Columns in which this pass found an asset id.
    pub findings: u64,
    /// Values this pass could not read whole within the batch limit (recorded in `census_unread`).
    pub unread: u64,
    /// The longest batch of this pass, in milliseconds: how long one census statement held its snapshot.
    pub longest_batch_ms: u64,
    /// Connections that read this pass's batches: the census's own and those the pool lent it (`CENSUS_READERS`).
    pub readers: u64,
    /// Reading a replica (`CENSUS_DATABASE_URL`): how long the pass waited, in milliseconds, for the standby to
    /// replay what the primary had written when it began. `None` when the census read the primary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica_wait_ms: Option<u64>,
    /// Time spent in the batches' reading statements, in milliseconds (the rest of the pass's census time is
    /// its bookkeeping).
    pub reading_ms: u64,
    /// Columns the census reads (one per table holding rows).
    pub columns: i64,
    /// Of those, read completely in the current cycle.
    pub columns_done: i64,
    /// Of those, never proven as they stand.
    pub columns_unproven: i64,
    /// How much of the cycle's reading is done, by table blocks, in percent.
    pub percent_done: f64,
    /// Columns whose last scan found an asset id.
    pub columns_found: u64,
    /// How long the last complete cycle took, in seconds.
    pub last_cycle_seconds: Option<f64>,
    /// Why it stopped.
    pub stopped: Stop,
    /// When it stopped short having read nothing in this pass: the statement that held it (a batch that outlasted
    /// its limit, over which table), or the table it was about to read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,
}

/// Brings the census's columns in step with `targets`, then reads batches until the cycle is complete, the time
/// runs out or the batch cap is reached. Each batch is its own short statement; nothing is held between them.
/// With a key `layout` (reconciliation configured), each batch also notes the keys of ours its text names. Every
/// statement of the census obeys the batch limit; the session's own is back when it returns.
pub async fn advance(
    conn: &mut PgConnection,
    readers: &mut Readers,
    targets: &[Target],
    budget: Budget,
    layout: Option<&KeyLayout>,
) -> Result<Progress, sqlx::Error> {
    fail::fail_point!("census::advance", |_| Err(sqlx::Error::Protocol("injected: the census failed".into())));
    let progress = read(conn, readers, targets, budget, layout).await;
    // A batch that failed leaves its limit set: the session's own comes back here whatever happened.
    let reset = limit(conn, None).await;
    let progress = progress?;
    reset?;
    Ok(progress)
}

/// [`advance`], under the batch limit.
async fn read(
    conn: &mut PgConnection,
    readers: &mut Readers,
    targets: &[Target],
    budget: Budget,
    layout: Option<&KeyLayout>,
) -> Result<Progress, sqlx::Error> {
    let reading_with = readers.count() as u64;
    // Reading a replica, what it reads is as old as the primary when the pass began: a cycle or a scan begun in this
    // pass is dated from then.
    let floor = readers.floor().map(|floor| floor.at);
    sync(conn, targets, layout).await?;
    let shared_keys = layout.map(|layout| Arc::new(named::KeyScan::new(layout)));
    let keys = shared_keys.as_deref();
    let mut batches = 0u64;
    let mut blocks = 0u64;
    let mut columns_finished = 0u64;
    let mut findings = 0u64;
    let mut unread = 0u64;
    let (mut longest, mut reading) = (Duration::ZERO, Duration::ZERO);
    // A table's batches are halved when one outlasts the statement timeout (TOASTed documents, or a table of
    // hundreds of columns, can make a few blocks hold far more than their 8 KiB), and the size is remembered for
    // that table; a batch quick at the smaller size doubles it again, up to the configured size.
    let configured = i64::from(budget.batch_blocks.max(1));
    let mut last_timeout: Option<String> = None;
    let mut work = plan(conn, budget.cycle_interval, layout.is_some()).await?.into_iter();
    let mut group = work.next();
    // The cycle's clock starts only past the rest: reading unproven columns while resting is not a cycle. It starts
    // past the rest even with nothing left to read: the key scan's reads during the rest (after an adoption) may
    // have read every column for this cycle already, and a cycle that never started would never complete, so no
    // later cycle would read a value written since.
    sqlx::query!(
        "UPDATE census_state SET cycle_started_at = coalesce(cycle_started_at, least(now(), $2))
          WHERE last_cycle_completed_at IS NULL OR last_cycle_completed_at <= now() - $1 * interval '1 second'",
        budget.cycle_interval.as_secs_f64(),
        floor,
    )
    .execute(&mut *conn)
    .await?;
    let stopped = loop {
        let Some(current) = group.as_mut() else { break Stop::CycleComplete };
        if batches >= u64::from(budget.max_batches) {
            break Stop::BatchCap;
        }
        if Instant::now() >= budget.until {
            break Stop::TimeShare;
        }
        let batch_blocks = current.batch_blocks.unwrap_or(configured).clamp(1, configured);
        // A round: a batch for each reader, as many as the pass may still run.
        let width = (readers.count() as u64).min(u64::from(budget.max_batches) - batches);
        let round_blocks = batch_blocks.saturating_mul(i64::try_from(width).unwrap_or(1));
        let mut end = current.next_block.saturating_add(round_blocks).min(current.blocks);
        if end >= current.blocks {
            // The table may have grown since the work was planned: its end is where it ends now.
            current.blocks = file_now(conn, current.relid).await?.0.max(current.blocks);
            end = current.next_block.saturating_add(round_blocks).min(current.blocks);
        }
        // Statements this round runs.
        let mut ran = 1;
        let started = Instant::now();
        // A scan's first batch dates it by the database's clock before it reads anything: every name it sights is
        // stamped by that clock, later (a time measured here and subtracted there came out after a busy machine's
        // first sightings, and the next scan's end forgot names this one had seen).
        let scan_began = match (current.next_block, floor) {
            (0, Some(floor)) => Some(floor),
            (0, None) => Some(sqlx::query_scalar!(r#"SELECT now() AS "now!""#).fetch_one(&mut *conn).await?),
            _ => None,
        };
        let mut found = if current.next_block < end {
            limit(conn, Some(budget.batch_timeout)).await?;
            let step = usize::try_from(batch_blocks).unwrap_or(usize::MAX);
            let ranges: Vec<Rows> = (current.next_block..end)
                .step_by(step)
                .map(|from| Rows::blocks(from, from.saturating_add(batch_blocks).min(end)))
                .collect();
            ran = ranges.len() as u64;
            let read = readers::round(conn, readers, current, &ranges, shared_keys.as_ref(), budget.batch_timeout);
            let read = read.await.into_iter().map(|result| unless_retyped(current, result)).collect::<Option<Vec<_>>>();
            let Some(read) = read else {
                group = work.next();
                batches += ran;
                continue;
            };
            let mut read = read.into_iter().zip(&ranges);
            let Some((first, first_rows)) = read.next() else {
                return Err(sqlx::Error::Protocol("a census round read no range".into()));
            };
            match first {
                Ok((mut found, mut noted)) => {
                    // The ranges after the first count as far as each read, in order: one that failed is the next
                    // round's first, where its failure is met as a batch's alone is.
                    for (more, rows) in read {
                        match more {
                            Ok((more, more_noted)) => {
                                readers::merge(&mut found, more);
                                noted.merge(more_noted);
                            }
                            Err(e) => {
                                let table = &current.heap;
                                tracing::info!(%table, block = rows.from.0, error = %e, "a census reader's batch failed: read again next");
                                end = rows.from.0;
                                break;
                            }
                        }
                    }
                    // Before the scan's end is recorded: a scan that ends forgets the names it did not sight.
                    noted.write(&mut *conn, current.relid, keys).await?;
                    found
                }
                Err(e) if timed_out(&e) && first_rows.to.0 - current.next_block > 1 => {
                    let halved = ((first_rows.to.0 - current.next_block) / 2).max(1);
                    let table = &current.heap;
                    tracing::warn!(%table, batch_blocks = halved, "a census batch timed out: reading fewer blocks");
                    last_timeout = Some(outlasted(current, first_rows.to.0, started.elapsed(), budget.batch_timeout));
                    current.batch_blocks = Some(halved);
                    remember_batch(conn, current.relid, current.batch_blocks).await?;
                    batches += ran;
                    continue;
                }
                // One block cannot be read within the limit: it is read value by value, and what cannot be read
                // whole is recorded, so it holds what it names without holding the column's proof.
                Err(e) if timed_out(&e) => {
                    end = first_rows.to.0;
                    last_timeout = Some(outlasted(current, end, started.elapsed(), budget.batch_timeout));
                    let table = &current.heap;
                    tracing::warn!(%table, block = current.next_block, "a census block timed out alone: reading it value by value");
                    let read = unread::read_block(conn, current, current.next_block, keys, budget.until).await;
                    let Some(read) = unless_retyped(current, read) else {
                        group = work.next();
                        batches += ran;
                        continue;
                    };
                    let (found, values) = read?;
                    unread += values;
                    found
                }
                Err(e) => return Err(e),
            }
        } else {
            vec![Found::default(); current.columns.len()]
        };
        // At the table's end, the values a block read value by value left untried (its pass's share ran out) are
        // read before the scan may end: no proof covers a value nobody read.
        let mut finished = end >= current.blocks;
        if finished {
            limit(conn, Some(budget.batch_timeout)).await?;
            let Some(retried) = unless_retyped(current, unread::retry(conn, current, keys, budget.until).await) else {
                group = work.next();
                batches += ran;
                continue;
            };
            let retried = retried?;
            readers::merge(&mut found, retried.found);
            unread += retried.unread;
            finished = retried.left == 0;
        }
        limit(conn, None).await?;
        let took = started.elapsed();
        longest = longest.max(took);
        reading += took;
        if current.batch_blocks.is_some_and(|b| b < configured) && took < budget.batch_timeout / 4 {
            let doubled = current.batch_blocks.map_or(configured, |b| b.saturating_mul(2));
            current.batch_blocks = (doubled < configured).then_some(doubled);
            remember_batch(conn, current.relid, current.batch_blocks).await?;
        }
        let first = current.next_block == 0;
        // A scan begun here is dated from the batch's start, or from when the key scan read the adopted keys if
        // that was earlier (an adoption after it is not covered by this scan).
        let began = scan_began.map(|at| keys.and_then(named::KeyScan::since).map_or(at, |since| at.min(since)));
        if record(conn, current, end, finished, &found, began).await? {
            // Rewritten under the scan: read it again from its first block, in its new file.
            let (blocks_then, filenode) = file_now(conn, current.relid).await?;
            (current.next_block, current.blocks, current.filenode) = (0, blocks_then, filenode);
            batches += ran;
            continue;
        }
        named::record(conn, current, first, finished, layout).await?;
        batches += ran;
        blocks += u64::try_from(end - current.next_block).unwrap_or(0);
        findings += found.iter().map(|f| f.assets.len() as u64).sum::<u64>();
        current.next_block = end;
        if finished {
            columns_finished += current.columns.len() as u64;
            group = work.next();
        }
    };
    let state = summary(conn).await?;
    // Counted before a completed cycle ends, so the record shows the cycle this pass finished.
    let completed = if stopped == Stop::CycleComplete { complete_cycle(conn).await? } else { None };
    // Nothing left to read yet the cycle did not end here: it is resting between cycles.
    let stopped = if stopped == Stop::CycleComplete && completed.is_none() { Stop::Resting } else { stopped };
    let held_by = (blocks == 0 && matches!(stopped, Stop::TimeShare | Stop::BatchCap)).then(|| {
        last_timeout.unwrap_or_else(|| match &group {
            Some(current) => {
                format!("its share ran out before it read {} (block {})", current.heap, current.next_block)
            }
            None => "its share ran out before it read anything".to_owned(),
        })
    });
    Ok(Progress {
        cycle: state.cycle,
        cycle_started_at: state.cycle_started_at,
        batches,
        blocks,
        columns_finished,
        findings,
        unread,
        longest_batch_ms: u64::try_from(longest.as_millis()).unwrap_or(u64::MAX),
        readers: reading_with,
        replica_wait_ms: None,
        reading_ms: u64::try_from(reading.as_millis()).unwrap_or(u64::MAX),
        columns: state.columns,
        columns_done: state.columns_done,
        columns_unproven: state.columns_unproven,
        percent_done: state.percent_done,
        columns_found: state.findings.len() as u64,
        last_cycle_seconds: completed.or(state.last_cycle_seconds),
        stopped,
        held_by,
    })
}

/// Adds a row for every column of `targets` on every table holding its rows, resets a row whose type or declared
/// paths changed, and drops the rows of columns no longer read (and the keys they named); a key scan made with
/// another `layout` than
/// today's covers nothing any more. Two statements.
async fn sync(conn: &mut PgConnection, targets: &[Target], layout: Option<&KeyLayout>) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE census_columns SET keys_proven_at = NULL
          WHERE keys_proven_at IS NOT NULL AND ($1::text IS NULL OR keys_layout IS DISTINCT FROM $1)",
        layout.map(KeyLayout::signature),
    )
    .execute(&mut *conn)
    .await?;
    let cols = Columns::of(targets);
    sqlx::query!(
        r#"WITH t AS (
               -- The type the reading was chosen for: a column retyped since the schema check planned it keeps no
               -- type a batch would read it by (0), and the next pass plans it again.
               SELECT l.relid, l.attnum, CASE WHEN l.type_oid = t.type_oid THEN l.type_oid ELSE 0 END AS type_oid,
                      t.schema_name, t.table_name, t.column_name, t.family, t.shape,
                      ARRAY(SELECT jsonb_array_elements_text(t.paths)) AS json_paths, t.reads
                 FROM asset_sweeper_census_leaves($1, $2, $3) l
                 JOIN unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::jsonb[], $7::text[],
                             $8::oid[])
                      WITH ORDINALITY AS t(schema_name, table_name, column_name, family, shape, paths, reads, type_oid,
                                           position)
                   ON t.position = l.position
           ),
           gone AS (
               DELETE FROM census_columns c
                WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.relid = c.relid AND t.attnum = c.attnum)
               RETURNING c.relid, c.attnum
           ),
           -- A column no longer read names no key, and holds no asset.
           unnamed AS (
               DELETE FROM named_keys n USING gone g WHERE n.relid = g.relid AND n.attnum = g.attnum
           ),
           unsighted AS (
               DELETE FROM named_sightings s USING gone g WHERE s.relid = g.relid AND s.attnum = g.attnum
           ),
           unfound AS (
               DELETE FROM census_findings f USING gone g WHERE f.relid = g.relid AND f.attnum = g.attnum
           ),
           unrecorded AS (
               DELETE FROM census_unread u USING gone g WHERE u.relid = g.relid AND u.attnum = g.attnum
           )
           INSERT INTO census_columns AS c (relid, attnum, type_oid, json_paths, table_schema, table_name,
                                            column_name, family, shape, reads)
           SELECT relid, attnum, type_oid, json_paths, schema_name, table_name, column_name, family, shape, reads
             FROM t
           ON CONFLICT (relid, attnum) DO UPDATE
              SET table_schema = EXCLUDED.table_schema, table_name = EXCLUDED.table_name,
                  column_name = EXCLUDED.column_name, family = EXCLUDED.family, shape = EXCLUDED.shape,
                  type_oid = EXCLUDED.type_oid, json_paths = EXCLUDED.json_paths, reads = EXCLUDED.reads,
                  added_at = now(),
                  next_block = 0, scan_started_at = NULL, done_cycle = 0, proven_at = NULL, keys_proven_at = NULL,
                  found_asset = NULL, found_at = NULL, found_cycle = NULL, scan_found_rows = 0, found_rows = 0
            WHERE (c.type_oid, c.json_paths, c.reads) IS DISTINCT FROM
                  (EXCLUDED.type_oid, EXCLUDED.json_paths, EXCLUDED.reads)
               OR (c.table_schema, c.table_name, c.column_name) IS DISTINCT FROM
                  (EXCLUDED.table_schema, EXCLUDED.table_name, EXCLUDED.column_name)"#,
        &cols.schemas,
        &cols.tables,
        &cols.columns,
        &cols.families,
        &cols.shapes,
        &cols.paths,
        &cols.reads,
        &cols.types as &[sqlx::postgres::types::Oid],
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The columns to read in this cycle, in order: never-proven columns first (they hold destruction back), then
/// table by table; columns of one table whose scans stand at the same block go together. Within `interval` of the
/// last cycle's end only never-proven columns are read. With `keys`, text and JSON columns the key scan has not
/// covered, or not since the newest adoption still waiting for it, are read whether or not this cycle read them. One statement per pass: each batch then costs only its reading statement and the update that
/// records it.
async fn plan(conn: &mut PgConnection, interval: Duration, keys: bool) -> Result<Vec<Group>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"SELECT c.relid, c.next_block,
                  quote_ident(n.nspname) || '.' || quote_ident(t.relname) AS "heap!",
                  asset_sweeper_blocks(c.relid) AS "blocks!",
                  pg_relation_filenode(c.relid) AS filenode,
                  array_agg(c.attnum ORDER BY c.attnum) AS "attnums!",
                  array_agg(a.attname::text ORDER BY c.attnum) AS "names!",
                  array_agg(c.family ORDER BY c.attnum) AS "families!",
                  array_agg(c.shape ORDER BY c.attnum) AS "shapes!",
                  jsonb_agg(to_jsonb(c.json_paths) ORDER BY c.attnum) AS "paths!",
                  array_agg(c.reads ORDER BY c.attnum) AS "reads!",
                  array_agg(c.type_oid ORDER BY c.attnum) AS "types!",
                  min(c.batch_blocks)::bigint AS batch_blocks
             FROM census_columns c
            CROSS JOIN census_state s
             JOIN pg_class t ON t.oid = c.relid
             JOIN pg_namespace n ON n.oid = t.relnamespace
             JOIN pg_attribute a ON a.attrelid = c.relid AND a.attnum = c.attnum AND NOT a.attisdropped
            WHERE (c.done_cycle < s.cycle
                   AND (c.proven_at IS NULL OR s.cycle_started_at IS NOT NULL OR s.last_cycle_completed_at IS NULL
                        OR s.last_cycle_completed_at <= now() - $1 * interval '1 second'))
               -- Whether or not read in this cycle: adopted bytes wait for a key scan begun after their adoption.
               OR ($2 AND c.family IN ('text', 'json', 'value') AND c.reads <> 'ids'
                   AND (c.keys_proven_at IS NULL
                        OR c.keys_proven_at <= (SELECT max(d.adopted_at) FROM adopted_assets d
                                                  JOIN assets a ON a.id = d.asset_id
                                                 WHERE a.due_at = 'infinity')))
            GROUP BY c.relid, c.next_block, n.nspname, t.relname
            ORDER BY bool_or(c.proven_at IS NULL) DESC, c.relid, c.next_block"#,
        interval.as_secs_f64(),
        keys,
    )
    .fetch_all(conn)
    .await?;
    let mut groups = Vec::with_capacity(rows.len());
    for row in rows {
        let paths: Vec<Vec<String>> = serde_json::from_value(row.paths).unwrap_or_default();
        let columns = row
            .attnums
            .into_iter()
            .zip(row.names)
            .zip(row.families.into_iter().zip(row.shapes))
            .zip(paths.into_iter().chain(std::iter::repeat(Vec::new())))
            .zip(row.reads.into_iter().zip(row.types))
            .map(|((((attnum, name), (family, shape)), json_paths), (reads, type_oid))| Column {
                attnum,
                name,
                family,
                shape,
                json_paths,
                reads,
                type_oid: type_oid.0,
            })
            .collect();
        groups.push(Group {
            relid: row.relid,
            filenode: row.filenode,
            next_block: row.next_block,
            heap: row.heap,
            blocks: row.blocks,
            batch_blocks: row.batch_blocks,
            columns,
        });
    }
    Ok(groups)
}

/// `result`, unless it is the refusal of a column retyped since the plan ([`crate::typed::retyped`]): then `None`,
/// said in the log. Its batch read nothing and records nothing; the next pass plans the column for its type,
/// unproven.
fn unless_retyped<T>(group: &Group, result: Result<T, sqlx::Error>) -> Option<Result<T, sqlx::Error>> {
    match result {
        Err(error) if crate::typed::retyped(&error) => {
            let table = &group.heap;
            tracing::warn!(%table, %error, "a census batch read nothing: a column's type changed since it was planned");
            None
        }
        result => Some(result),
    }
}

/// The statement that outlasted the batch limit, as the run record names it.
fn outlasted(group: &Group, end: i64, took: Duration, limit: Duration) -> String {
    format!(
        "the census statement over {} (blocks {} to {}) ran {:.1} s against its {} limit",
        group.heap,
        group.next_block,
        end,
        took.as_secs_f64(),
        humantime::format_duration(limit)
    )
}

/// Keeps the batch size for the table `relid` (`None`: the configured size) for the passes to come.
async fn remember_batch(
    conn: &mut PgConnection,
    relid: sqlx::postgres::types::Oid,
    blocks: Option<i64>,
) -> Result<(), sqlx::Error> {
    let blocks = blocks.map(|b| i32::try_from(b).unwrap_or(i32::MAX));
    sqlx::query!("UPDATE census_columns SET batch_blocks = $2 WHERE relid = $1", relid, blocks).execute(conn).await?;
    Ok(())
}

/// A table's size in blocks now (0 once it is gone) and its file.
async fn file_now(
    conn: &mut PgConnection,
    relid: sqlx::postgres::types::Oid,
) -> Result<(i64, Option<sqlx::postgres::types::Oid>), sqlx::Error> {
    let row = sqlx::query!(
        r#"SELECT asset_sweeper_blocks($1::oid) AS "blocks!",
                  pg_relation_filenode($1::oid) AS filenode"#,
        relid
    )
    .fetch_one(conn)
    .await?;
    Ok((row.blocks, row.filenode))
}

/// Moves the group's cursor to `end` and keeps what the batch found: each asset as a finding naming its column and
/// a row (which holds the asset), and how many rows held one. When the scan is `finished` on the file it began on,
/// its columns are proven as of its start (the findings hold their assets one by one), their counts of rows become
/// the last complete scan's, findings neither it nor the scan before it saw are forgotten (an update can move a
/// row into a block a scan has read: one scan missing a finding must not forget it), and the cursor wraps.
/// Answers whether the table was rewritten under the scan, which then starts over, proving nothing and keeping
/// what it found.
async fn record(
    conn: &mut PgConnection,
    group: &Group,
    end: i64,
    finished: bool,
    found: &[Found],
    began: Option<DateTime<Utc>>,
) -> Result<bool, sqlx::Error> {
    let attnums: Vec<i16> = group.columns.iter().map(|c| c.attnum).collect();
    let rows: Vec<i64> = found.iter().map(|f| f.rows).collect();
    let examples: Vec<Option<Uuid>> = found.iter().map(|f| f.assets.first().map(|(id, _)| *id)).collect();
    let mut noted = Vec::new();
    for (column, f) in group.columns.iter().zip(found) {
        for (asset, record) in &f.assets {
            let (relid, column, record) = (group.relid, column.name.clone(), record.clone());
            noted.push(super::Finding { asset: *asset, relid, column, record });
        }
    }
    // Before the scan's end is recorded, so a clean end forgets only what neither scan saw.
    let assets: Vec<Uuid> = noted.iter().map(|f| f.asset).collect();
    super::note_findings(&mut *conn, noted).await?;
    // A scan's first batch dates it.
    let started_at = began.filter(|_| group.next_block == 0);
    // The table's file this scan reads: the planned one for a first batch, else the one recorded then. Another
    // file now means a rewrite moved the rows: the scan starts over.
    let rewritten = sqlx::query_scalar!(
        r#"WITH current AS (
               SELECT c.attnum, r.rewritten, c.proven_at AS previous,
                      CASE WHEN $6::timestamptz IS NOT NULL THEN $6::timestamptz
                           ELSE c.scan_started_at END AS started,
                      -- The scan ended on the file it began on, with no value it left untried.
                      $3 AND NOT r.rewritten
                         AND NOT EXISTS (SELECT 1 FROM census_unread u
                                          WHERE u.relid = c.relid AND u.attnum = c.attnum AND u.untried) AS clean_end
                 FROM census_columns c
                CROSS JOIN LATERAL (
                      SELECT CASE WHEN $6::timestamptz IS NOT NULL THEN $7::oid ELSE c.filenode END
                                 IS DISTINCT FROM pg_relation_filenode(c.relid) AS rewritten
                ) r
                WHERE c.relid = $1 AND c.attnum = ANY ($2)
           ),
           updated AS (
               UPDATE census_columns c
                  SET next_block = CASE WHEN w.rewritten OR w.clean_end THEN 0 ELSE $4::bigint END,
                      filenode = CASE WHEN $6::timestamptz IS NOT NULL THEN $7::oid ELSE c.filenode END,
                      scan_started_at = CASE WHEN w.rewritten THEN NULL
                                             WHEN $6::timestamptz IS NOT NULL THEN $6::timestamptz
                                             ELSE c.scan_started_at END,
                      -- A first batch starts the count afresh; a clean end makes it the last complete scan's.
                      scan_found_rows = CASE WHEN w.clean_end OR w.rewritten THEN 0
                                             WHEN $6::timestamptz IS NOT NULL THEN f.rows
                                             ELSE c.scan_found_rows + f.rows END,
                      found_rows = CASE WHEN w.clean_end
                                        THEN CASE WHEN $6::timestamptz IS NOT NULL THEN f.rows
                                                  ELSE c.scan_found_rows + f.rows END
                                        ELSE c.found_rows END,
                      -- One asset found, for the status: cleared by a complete scan that found none.
                      found_asset = CASE WHEN f.example IS NOT NULL THEN f.example
                                         WHEN w.clean_end AND CASE WHEN $6::timestamptz IS NOT NULL THEN f.rows
                                                                   ELSE c.scan_found_rows + f.rows END = 0
                                              THEN NULL
                                         ELSE c.found_asset END,
                      found_at = CASE WHEN f.example IS NOT NULL THEN now() ELSE c.found_at END,
                      found_cycle = CASE WHEN f.example IS NOT NULL THEN s.cycle ELSE c.found_cycle END,
                      proven_at = CASE WHEN w.clean_end
                                       THEN CASE WHEN $6::timestamptz IS NOT NULL THEN $6::timestamptz
                                                 ELSE c.scan_started_at END
                                       ELSE c.proven_at END,
                      done_cycle = CASE WHEN w.clean_end THEN s.cycle ELSE c.done_cycle END
                 FROM unnest($2::int2[], $5::uuid[], $9::int8[]) AS f(attnum, example, rows), census_state s,
                      current w
                WHERE c.relid = $1 AND c.attnum = f.attnum AND w.attnum = c.attnum
               RETURNING w.rewritten
           ),
           forgotten AS (
               DELETE FROM census_findings d USING current w
                WHERE w.clean_end AND d.relid = $1 AND d.attnum = w.attnum AND d.seen_at < w.previous
                  AND NOT (d.asset_id = ANY ($8))
           ),
           -- A value this scan did not record again was read whole, or is gone.
           read_now AS (
               DELETE FROM census_unread u USING current w
                WHERE w.clean_end AND u.relid = $1 AND u.attnum = w.attnum AND u.recorded_at < w.started
           )
           SELECT rewritten FROM updated"#,
        group.relid,
        &attnums,
        finished,
        end,
        &examples as &[Option<Uuid>],
        started_at,
        group.filenode,
        &assets,
        &rows,
    )
    .fetch_all(conn)
    .await?;
    Ok(rewritten.into_iter().any(|r| r == Some(true)))
}

/// Ends the cycle when every column has been read in it, and answers how long it took; the next one starts with
/// the next pass's first batch.
async fn complete_cycle(conn: &mut PgConnection) -> Result<Option<f64>, sqlx::Error> {
    sqlx::query_scalar!(
        "UPDATE census_state s
            SET last_cycle_completed_at = now(),
                last_cycle_seconds = extract(epoch FROM now() - s.cycle_started_at)::float8,
                cycle = s.cycle + 1, cycle_started_at = NULL
          WHERE s.cycle_started_at IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM census_columns c WHERE c.done_cycle < s.cycle)
          RETURNING s.last_cycle_seconds"
    )
    .fetch_optional(conn)
    .await
    .map(Option::flatten)
}
