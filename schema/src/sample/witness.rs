//! Which tables the sample need not read again: a plain table whose sampled rows are, version for version, the rows a
//! sample that found nothing there read.
//!
//! The sample exists to see rows written since the census passed a table (its first rows and its last blocks, where
//! new rows go); a row the census read before an asset was retired is the census's to prove (invariant 13), whatever
//! the sample saw of it. So what a later sample could find that an earlier one did not is a row version written
//! since. Postgres never changes a row version in place: an insert, update or delete of a row in the sampled places
//! adds or removes a `(ctid, xmin)` there, and so moves their count or the sum of their hashes, which a sample that
//! found nothing records in the snapshot it read ([`take`]). Each pass compares that record with the table as it is
//! ([`unchanged`]): two TID range scans a table, instead of a statement per column that ships every value and asks
//! which ids and keys are assets (4 000 columns at GitLab's size: most of a pass).
//!
//! Only a table the sample reads the same way each time has a witness: a plain table of Postgres's heap (another
//! access method may change a row in place) with no inheritance children, read from its first block in file order
//! (a sequential scan, never an index's order, whatever the settings) and from its last blocks.
//! A partitioned table's first rows come from whichever partition leads it, and a materialized view is replaced
//! whole; both are read every pass. Anything else that could change what a sample reads starts afresh: the columns
//! read and their types, the sample's sizes, another build (which may recognise more in the same rows), any schema
//! change (the change detector's generation), a rewritten or resized file, a sample that found something, and 2^31
//! transactions (an `xmin` could be spelled again).

use std::collections::{HashMap, HashSet};

use platform::sql::{quote_ident, quote_literal};
use sqlx::PgConnection;
use sqlx::postgres::types::Oid;

use crate::map::Candidate;

/// Raised whenever what the sample reads, or how, changes: every witness taken before it is read again once.
const WITNESS_VERSION: u32 = 1;

/// At most this many tables' witnesses a statement: each takes two TID range scans, planned with the table's
/// indexes, and locks them until the statement ends.
const TABLES_PER_STATEMENT: usize = 32;

/// A row's place in its table's file, ordered as Postgres orders `tid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Tid {
    block: u32,
    offset: u16,
}

impl Tid {
    /// `(block,offset)`, as Postgres writes a `tid`.
    pub(crate) fn parse(text: &str) -> Option<Tid> {
        let (block, offset) = text.strip_prefix('(')?.strip_suffix(')')?.split_once(',')?;
        Some(Tid { block: block.parse().ok()?, offset: offset.parse().ok()? })
    }

    fn first_of(block: u32) -> Tid {
        Tid { block, offset: 0 }
    }

    fn sql(self) -> String {
        format!("'({},{})'::tid", self.block, self.offset)
    }
}

impl std::fmt::Display for Tid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "({},{})", self.block, self.offset)
    }
}

/// The rows a witness covers: those up to `head_until` (every row when `None`: a column had fewer non-null rows
/// than the sample asks for, so its scan read the whole table) and those from `tail_from` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Region {
    pub(crate) head_until: Option<Tid>,
    pub(crate) tail_from: Tid,
}

impl Region {
    /// The statement that counts `table`'s row versions in the region and sums a hash of each one's `ctid` and
    /// `xmin`, tagged `tag`: two TID range scans, or one scan of the table when the two ends meet.
    fn fingerprint(&self, tag: usize, table: &str) -> String {
        let rows = match self.head_until {
            Some(head) if head < self.tail_from => format!(
                "SELECT ctid, xmin FROM ONLY {table} WHERE ctid <= {}
                 UNION ALL SELECT ctid, xmin FROM ONLY {table} WHERE ctid >= {}",
                head.sql(),
                self.tail_from.sql()
            ),
            _ => format!("SELECT ctid, xmin FROM ONLY {table}"),
        };
        // The file's length under the same lock as the scans: it cannot be truncated or rewritten between the two.
        format!(
            "SELECT {tag}, count(*), coalesce(sum(hashtextextended(w.ctid::text || ' ' || w.xmin::text, 0)), 0)::text,
                    asset_sweeper_blocks({}::regclass)
               FROM ({rows}) w",
            quote_literal(table)
        )
    }
}

/// A plain table's witness, taken in the snapshot a sample that found nothing there read.
#[derive(Clone, Debug)]
pub(crate) struct Witness {
    table: String,
    relid: Oid,
    signature: String,
    region: Region,
    blocks: i64,
    relfilenode: Oid,
    generation: i64,
    /// The snapshot's next transaction id, as text (`xid8`).
    xmax: String,
    tuples: i64,
    fingerprint: String,
}

impl Witness {
    /// Its table, as SQL.
    pub(crate) fn table(&self) -> &str {
        &self.table
    }
}

/// The sample's sizes: rows a column from a table's start, blocks at its end, characters a value.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sizes {
    pub(crate) rows: u32,
    pub(crate) tail_blocks: i64,
    pub(crate) slice_chars: i32,
}

/// What makes two samples of a table the same reading: the witness's version, the build that read it (a release
/// may recognise more in the same rows), the sample's sizes, and each column read with its type and how it is read
/// (quoted, so no name can run into the next).
pub(crate) fn signature(table: &[&Candidate], sizes: Sizes, build: &str) -> String {
    let mut columns: Vec<String> = table
        .iter()
        .map(|c| format!("{} {} {} {} {}", quote_ident(&c.column), c.type_oid, c.family, c.shape, c.reads))
        .collect();
    columns.sort();
    format!(
        "v{WITNESS_VERSION} {build} rows {} tail {} slice {}: {}",
        sizes.rows,
        sizes.tail_blocks,
        sizes.slice_chars,
        columns.join(", ")
    )
}

/// Where a sample's head scans stopped: the last row each column's scan returned, or the whole table when one
/// returned fewer than `sample_rows` (it read on to the end). `heads` holds, per column of the table, the row
/// places its head scan returned.
pub(crate) fn head_until<'a>(heads: impl IntoIterator<Item = &'a HashSet<String>>, sample_rows: u32) -> Option<Tid> {
    let mut until = Tid::first_of(0);
    for rows in heads {
        if rows.len() < usize::try_from(sample_rows).unwrap_or(usize::MAX) {
            return None;
        }
        // A place that does not parse is not a place a region can start from: read the whole table.
        for row in rows {
            until = until.max(Tid::parse(row)?);
        }
    }
    Some(until)
}

/// Takes the witnesses of `tables` (a table's SQL name, its signature and where its head scans stopped), inside the
/// transaction, and the snapshot, whose sample read them. The tail starts where the sample's did: the table's file
/// cannot shrink while the transaction holds its lock, and rows past where it started are covered.
pub(crate) async fn take(
    conn: &mut PgConnection,
    tables: &[(String, String, Option<Tid>)],
    tail_blocks: i64,
) -> Result<Vec<Witness>, sqlx::Error> {
    if tables.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<String> = tables.iter().map(|t| t.0.clone()).collect();
    let files = sqlx::query!(
        r#"SELECT t.n AS "n!", c.oid AS "relid!", c.relfilenode AS "relfilenode!",
                  asset_sweeper_blocks(c.oid) AS "blocks!",
                  asset_sweeper_schema_generation() AS "generation!",
                  pg_snapshot_xmax(pg_current_snapshot())::text AS "xmax!"
             FROM unnest($1::text[]) WITH ORDINALITY AS t(name, n) JOIN pg_class c ON c.oid = to_regclass(t.name)"#,
        &names
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut witnesses = Vec::with_capacity(files.len());
    let mut regions = Vec::with_capacity(files.len());
    for file in files {
        let Some((name, signature, head)) = usize::try_from(file.n - 1).ok().and_then(|n| tables.get(n)) else {
            continue;
        };
        let tail_block = u32::try_from((file.blocks - tail_blocks).max(0)).unwrap_or(u32::MAX);
        let region = Region { head_until: *head, tail_from: Tid::first_of(tail_block) };
        regions.push((name.clone(), region));
        witnesses.push(Witness {
            table: name.clone(),
            relid: file.relid,
            signature: signature.clone(),
            region,
            blocks: file.blocks,
            relfilenode: file.relfilenode,
            generation: file.generation,
            xmax: file.xmax,
            tuples: 0,
            fingerprint: String::new(),
        });
    }
    for (witness, counted) in witnesses.iter_mut().zip(fingerprint(&mut *conn, &regions).await?) {
        witness.tuples = counted.tuples;
        witness.fingerprint = counted.sum;
    }
    Ok(witnesses)
}

/// A region as [`fingerprint`] found it: its row versions' count and hash sum, and the file's length in blocks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Counted {
    tuples: i64,
    sum: String,
    blocks: i64,
}

/// The count and hash sum of each table's region, in the order given, a statement for up to
/// [`TABLES_PER_STATEMENT`] tables.
async fn fingerprint(conn: &mut PgConnection, regions: &[(String, Region)]) -> Result<Vec<Counted>, sqlx::Error> {
    let mut sums = vec![Counted::default(); regions.len()];
    for (chunk_at, chunk) in regions.chunks(TABLES_PER_STATEMENT).enumerate() {
        let statement = chunk
            .iter()
            .enumerate()
            .map(|(i, (table, region))| format!("({})", region.fingerprint(chunk_at * TABLES_PER_STATEMENT + i, table)))
            .collect::<Vec<_>>()
            .join("\nUNION ALL\n");
        let rows: Vec<(i32, i64, String, i64)> =
            sqlx::query_as(sqlx::AssertSqlSafe(statement)).persistent(false).fetch_all(&mut *conn).await?;
        for (tag, tuples, sum, blocks) in rows {
            if let Some(slot) = usize::try_from(tag).ok().and_then(|t| sums.get_mut(t)) {
                *slot = Counted { tuples, sum, blocks };
            }
        }
    }
    Ok(sums)
}

/// Keeps `clean`'s witnesses (each replacing the table's last) and forgets those of the `dirty` tables (by SQL
/// name), whose sample found something: those tables are read every pass until one finds nothing.
pub(crate) async fn record(conn: &mut PgConnection, clean: &[Witness], dirty: &[String]) -> Result<(), sqlx::Error> {
    if !dirty.is_empty() {
        sqlx::query!(
            "DELETE FROM sample_witnesses WHERE relid IN (SELECT to_regclass(n) FROM unnest($1::text[]) AS n)",
            dirty
        )
        .execute(&mut *conn)
        .await?;
    }
    if clean.is_empty() {
        return Ok(());
    }
    let column = |f: fn(&Witness) -> String| clean.iter().map(f).collect::<Vec<String>>();
    sqlx::query!(
        "INSERT INTO sample_witnesses AS w (relid, signature, relfilenode, generation, blocks, head_until, tail_from,
                                             tuples, fingerprint, recorded_xid)
         SELECT relid, signature, relfilenode, generation, blocks, head_until::tid, tail_from::tid, tuples,
                fingerprint::numeric, recorded_xid::xid8
           FROM unnest($1::oid[], $2::text[], $3::oid[], $4::bigint[], $5::bigint[], $6::text[], $7::text[],
                       $8::bigint[], $9::text[], $10::text[])
                AS n(relid, signature, relfilenode, generation, blocks, head_until, tail_from, tuples, fingerprint,
                     recorded_xid)
         ON CONFLICT (relid) DO UPDATE
            SET signature = excluded.signature, relfilenode = excluded.relfilenode, generation = excluded.generation,
                blocks = excluded.blocks, head_until = excluded.head_until, tail_from = excluded.tail_from,
                tuples = excluded.tuples, fingerprint = excluded.fingerprint, recorded_xid = excluded.recorded_xid,
                recorded_at = now()",
        &clean.iter().map(|w| w.relid).collect::<Vec<_>>(),
        &column(|w| w.signature.clone()),
        &clean.iter().map(|w| w.relfilenode).collect::<Vec<_>>(),
        &clean.iter().map(|w| w.generation).collect::<Vec<_>>(),
        &clean.iter().map(|w| w.blocks).collect::<Vec<_>>(),
        &clean.iter().map(|w| w.region.head_until.map(|t| t.to_string())).collect::<Vec<_>>() as &[Option<String>],
        &column(|w| w.region.tail_from.to_string()),
        &clean.iter().map(|w| w.tuples).collect::<Vec<_>>(),
        &column(|w| w.fingerprint.clone()),
        &column(|w| w.xmax.clone()),
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Which of `tables` (a table's SQL name and its signature) are as the witness of a sample that found nothing
/// there left them, by SQL name: the same reading of the same file, no schema change since, and the same row
/// versions where the sample reads.
pub(crate) async fn unchanged(
    conn: &mut PgConnection,
    tables: &[(String, String)],
) -> Result<HashSet<String>, sqlx::Error> {
    if tables.is_empty() {
        return Ok(HashSet::new());
    }
    let (names, signatures): (Vec<String>, Vec<String>) = tables.iter().cloned().unzip();
    let stored = sqlx::query!(
        r#"SELECT t.n AS "n!", w.head_until::text AS head_until, w.tail_from::text AS "tail_from!",
                  w.tuples, w.fingerprint::text AS "fingerprint!", w.blocks
             FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(name, signature, n)
             JOIN pg_class c ON c.oid = to_regclass(t.name)
             JOIN sample_witnesses w ON w.relid = c.oid
            WHERE asset_sweeper_plain_heap(c.oid)
              AND w.signature = t.signature AND w.relfilenode = c.relfilenode
              AND w.generation = asset_sweeper_schema_generation()
              AND pg_snapshot_xmax(pg_current_snapshot())::text::numeric - w.recorded_xid::text::numeric
                  BETWEEN 0 AND 2^31"#,
        &names,
        &signatures
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut regions = Vec::with_capacity(stored.len());
    let mut expected: HashMap<usize, Counted> = HashMap::new();
    for row in stored {
        let Some(name) = usize::try_from(row.n - 1).ok().and_then(|n| names.get(n)) else { continue };
        let Some(tail_from) = Tid::parse(&row.tail_from) else { continue };
        let head_until = match row.head_until.as_deref().map(Tid::parse) {
            Some(None) => continue,
            Some(Some(tid)) => Some(tid),
            None => None,
        };
        expected.insert(regions.len(), Counted { tuples: row.tuples, sum: row.fingerprint, blocks: row.blocks });
        regions.push((name.clone(), Region { head_until, tail_from }));
    }
    let now = fingerprint(&mut *conn, &regions).await?;
    Ok(regions
        .into_iter()
        .zip(now)
        .enumerate()
        .filter(|(i, (_, now))| expected.get(i) == Some(now))
        .map(|(_, ((name, _), _))| name)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_parse_as_postgres_writes_them_and_order_by_block_then_offset() {
        assert_eq!(Tid::parse("(12,3)"), Some(Tid { block: 12, offset: 3 }));
        assert_eq!(Tid::parse("12,3"), None);
        assert_eq!(Tid::parse("(4294967296,1)"), None);
        assert!(Tid::parse("(2,1)") > Tid::parse("(1,90)"));
        assert_eq!(Tid::parse("(7,0)").map(|t| t.to_string()).as_deref(), Some("(7,0)"));
    }

    #[test]
    fn a_head_scan_that_ran_short_of_rows_covers_the_whole_table() {
        let full: HashSet<String> = ["(0,1)", "(3,2)", "(1,7)"].iter().map(|s| s.to_string()).collect();
        let short: HashSet<String> = ["(0,1)"].iter().map(|s| s.to_string()).collect();
        assert_eq!(head_until([&full], 3), Some(Tid { block: 3, offset: 2 }));
        assert_eq!(head_until([&full, &short], 3), None);
        let odd: HashSet<String> = ["(0,1)", "(x,2)", "(1,7)"].iter().map(|s| s.to_string()).collect();
        assert_eq!(head_until([&odd], 3), None);
    }

    #[test]
    fn a_region_whose_ends_meet_is_read_whole_and_the_signature_names_every_column_quoted() {
        let apart = Region { head_until: Tid::parse("(2,5)"), tail_from: Tid { block: 9, offset: 0 } };
        let sql = apart.fingerprint(4, "\"public\".\"t\"");
        assert!(sql.contains("ctid <= '(2,5)'::tid") && sql.contains("ctid >= '(9,0)'::tid"), "{sql}");
        let met = Region { head_until: Tid::parse("(9,5)"), tail_from: Tid { block: 9, offset: 0 } };
        assert!(!met.fingerprint(4, "t").contains("WHERE ctid"));
        let whole = Region { head_until: None, tail_from: Tid { block: 9, offset: 0 } };
        assert!(!whole.fingerprint(4, "t").contains("WHERE ctid"));

        let column = |name: &str| Candidate {
            schema: "public".to_owned(),
            table: "t".to_owned(),
            column: name.to_owned(),
            shape: "scalar".to_owned(),
            family: "text".to_owned(),
            reads: "both".to_owned(),
            type_oid: 25,
        };
        let (a, b) = (column("a, b"), column("c"));
        let sizes = Sizes { rows: 100, tail_blocks: 4, slice_chars: 10 };
        let one = signature(&[&a, &b], sizes, "build-1");
        assert_eq!(one, signature(&[&b, &a], sizes, "build-1"), "the order columns come in does not matter");
        assert!(one.contains("\"a, b\" 25 text scalar both"), "{one}");
        assert_ne!(one, signature(&[&a, &b], Sizes { rows: 101, ..sizes }, "build-1"));
        assert_ne!(one, signature(&[&a], sizes, "build-1"));
        assert_ne!(one, signature(&[&a, &b], sizes, "build-2"), "another build reads every table again");
    }
}
