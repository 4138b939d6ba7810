//! The schema check's sample: the fast first look at the rows a pass can afford to read, which the census's full
//! scans then prove or refute.
//!
//! At an application's size (hundreds of tables, thousands of candidate columns) the sample's cost is not its
//! reading, which is a few blocks a column, but its statements: one transaction and one planned statement per
//! column cost about 5 ms each, 24 s a pass at GitLab's size. So several tables' columns are read by one plain
//! statement in one transaction ([`CHUNK_TABLES`], [`CHUNK_COLUMNS`]), each value shipped as text, and which of the
//! ids and names found are assets is asked once a chunk, not once a column. A plain table whose sampled rows are
//! the row versions of a sample that found nothing there is not read again ([`witness`]).

mod witness;

use std::collections::{HashMap, HashSet};

use platform::sql::{quote_ident, quote_literal};
use sqlx::postgres::types::Oid;
use sqlx::{AssertSqlSafe, PgConnection};
use uuid::Uuid;

use crate::census::Finding;
use crate::map::{Candidate, SchemaProblem};

/// How many of a table's last blocks the sample reads, whole, besides its first rows: where rows inserted since the
/// census passed a table stand, so the next pass sees them, not the next cycle. Four blocks (32 KiB) a column:
/// about what the first rows cost. (A partitioned table's first rows only: its root has no blocks of its own.)
const SAMPLE_TAIL_BLOCKS: i64 = 4;

/// At most this many tables a statement: each one's lock (and its partitions' and indexes', which planning takes)
/// is held until the chunk's transaction ends, and the server's lock table is shared with the application.
const CHUNK_TABLES: usize = 16;

/// At most this many columns a statement, so one with hundreds of columns plans as a statement of its own.
const CHUNK_COLUMNS: usize = 128;

/// At most this many relations locked a chunk (tables, partitions, their indexes): Postgres's lock table holds
/// `max_locks_per_transaction` (64 by default) times its connections, shared with the application, so a chunk takes
/// a small share of it, and a partitioned table of hundreds of leaves is a chunk of its own (as it was a statement
/// of its own before). A budget of 64 took the schema check at GitLab's size from 8.8 s (no budget) to 13.6 s.
const CHUNK_LOCKS: usize = 256;

/// The longest key S3 stores: a longer text names no object, and is not sent back to be matched.
const MAX_KEY_BYTES: usize = 1024;

/// One value the sample read: the candidate's index within its chunk, whether its table's first rows (or its last
/// blocks) hold it, the row's table and `ctid`, and the value as text, from its start
/// ([`crate::census::unread::SLICE_CHARS`]).
type SampledRow = (i32, bool, Oid, String, Option<String>);

/// How a table is read: how many relations its reading locks (the table, its partitions, their indexes), and
/// whether it is a plain table with no inheritance children, which a witness can vouch for.
#[derive(Clone, Copy)]
struct Relation {
    locks: usize,
    plain: bool,
}

/// Samples up to `sample_rows` rows of each candidate from the start of its table and every row of its last blocks
/// ([`SAMPLE_TAIL_BLOCKS`]). Each asset id it finds (in any spelling; for text, a storage key too) is noted as a
/// finding naming the column and the row, which holds that asset (unless the transaction is read-only: `plan` and
/// `explain` look without writing). A column whose sampled rows look like an undeclared source
/// ([`crate::census::looks_like_source`]) is a problem.
pub async fn sample(
    conn: &mut PgConnection,
    candidates: &[Candidate],
    sample_rows: u32,
) -> Result<Vec<SchemaProblem>, sqlx::Error> {
    let read_only = sqlx::query_scalar!(r#"SELECT current_setting('transaction_read_only') = 'on' AS "read_only!""#)
        .fetch_one(&mut *conn)
        .await?;
    // A witness is taken in the snapshot its sample read, so only where each chunk is a transaction of its own.
    let witnessing = !read_only && !sqlx::Connection::is_in_transaction(&*conn);
    let mut problems = Vec::new();
    // A column excluded for ids is the key scan's alone.
    let candidates: Vec<&Candidate> = candidates.iter().filter(|c| c.reads != "keys").collect();
    let relations = relations(&mut *conn, &candidates).await?;
    let relation = |c: &Candidate| {
        relations.get(&(c.schema.clone(), c.table.clone())).copied().unwrap_or(Relation { locks: 1, plain: false })
    };
    let plain: Vec<(String, String)> = tables_of(&candidates)
        .into_iter()
        .filter(|t| relation(t[0]).plain)
        .map(|t| (table_sql(t[0]), signature(&t, sample_rows)))
        .collect();
    let unchanged = witness::unchanged(&mut *conn, &plain).await?;
    // Plain tables first, so their chunks hold nothing a witness cannot vouch for.
    let (mut read, others): (Vec<&Candidate>, Vec<&Candidate>) =
        candidates.into_iter().filter(|c| !unchanged.contains(&table_sql(c))).partition(|c| relation(c).plain);
    read.extend(others);
    for chunk in chunks(read, |c| relation(c).locks) {
        let witnessed = witnessing && chunk.iter().all(|c| relation(c).plain);
        let (read, witnesses) = match read_chunk(&mut *conn, &chunk, sample_rows, witnessed).await? {
            Some(read) => read,
            None => (read_piecewise(&mut *conn, &chunk, sample_rows).await?, Vec::new()),
        };
        let (found, chunk_problems, dirty) = weigh(&mut *conn, &chunk, read).await?;
        problems.extend(chunk_problems);
        if !read_only {
            crate::census::note_findings(&mut *conn, found).await?;
        }
        if witnessed {
            let dirty: HashSet<String> =
                chunk.iter().zip(dirty).filter(|(_, d)| *d).map(|(c, _)| table_sql(c)).collect();
            let clean: Vec<_> = witnesses.into_iter().filter(|w| !dirty.contains(w.table())).collect();
            witness::record(&mut *conn, &clean, &dirty.into_iter().collect::<Vec<_>>()).await?;
        }
    }
    Ok(problems)
}

/// Reads `chunk` after a column of it was found retyped since the candidates were read: each table on its own, and a
/// table that still fails each column on its own, so only the retyped column is passed over. Rows are tagged with
/// their candidate's index within `chunk`.
async fn read_piecewise(
    conn: &mut PgConnection,
    chunk: &[&Candidate],
    sample_rows: u32,
) -> Result<Vec<SampledRow>, sqlx::Error> {
    let mut read = Vec::new();
    // A chunk holds its tables' candidates side by side, so a table's first index is the count before it.
    let mut first = 0;
    for table in tables_of(chunk) {
        let pieces: Vec<(usize, &[&Candidate])> = match read_chunk(&mut *conn, &table, sample_rows, false).await? {
            Some((rows, _)) => {
                read.extend(rows.into_iter().map(|r| (r.0.saturating_add(index(first)), r.1, r.2, r.3, r.4)));
                Vec::new()
            }
            None => table.iter().enumerate().map(|(i, c)| (first + i, std::slice::from_ref(c))).collect(),
        };
        for (at, column) in pieces {
            match read_chunk(&mut *conn, column, sample_rows, false).await? {
                Some((rows, _)) => read.extend(rows.into_iter().map(|r| (index(at), r.1, r.2, r.3, r.4))),
                None => tracing::warn!(
                    schema = %column[0].schema,
                    table = %column[0].table,
                    column = %column[0].column,
                    "the sample read nothing of a column retyped since its reading was planned"
                ),
            }
        }
        first += table.len();
    }
    Ok(read)
}

/// A candidate's index as the statement tags its rows.
fn index(i: usize) -> i32 {
    i32::try_from(i).unwrap_or(i32::MAX)
}

/// The candidates in statements' worth: whole tables, in the order given, at most [`CHUNK_TABLES`] tables, and, but
/// for a table that exceeds them on its own, [`CHUNK_COLUMNS`] columns and [`CHUNK_LOCKS`] relations locked
/// (`relations` says how many a table's reading locks).
fn chunks(candidates: Vec<&Candidate>, relations: impl Fn(&Candidate) -> usize) -> Vec<Vec<&Candidate>> {
    // Each chunk with how many tables it holds and how many relations they lock.
    let mut chunks: Vec<(Vec<&Candidate>, usize, usize)> = Vec::new();
    for table in tables_of(&candidates) {
        let locks = relations(table[0]);
        let fits = chunks.last().is_some_and(|(last, tables, locked)| {
            *tables < CHUNK_TABLES && last.len() + table.len() <= CHUNK_COLUMNS && locked + locks <= CHUNK_LOCKS
        });
        match chunks.last_mut() {
            Some((last, tables, locked)) if fits => {
                last.extend(table);
                *tables += 1;
                *locked += locks;
            }
            _ => chunks.push((table, 1, locks)),
        }
    }
    chunks.into_iter().map(|(chunk, _, _)| chunk).collect()
}

/// How each table is read ([`Relation`]): how many relations its reading locks until its chunk's transaction ends
/// (the table, its partitions, and every index of theirs, which planning opens), and whether it is plain (a heap
/// table with no children); by schema and name. One statement.
async fn relations(
    conn: &mut PgConnection,
    candidates: &[&Candidate],
) -> Result<HashMap<(String, String), Relation>, sqlx::Error> {
    let tables = tables_of(candidates);
    let names: Vec<String> = tables.iter().map(|t| table_sql(t[0])).collect();
    let counts = sqlx::query!(
        r#"SELECT t.n AS "n!", asset_sweeper_plain_heap(c.oid) AS "plain!",
                  -- Each member of the tree (a plain table's is the table alone) and its indexes, by their
                  -- catalog indexes: a condition OR-ed over pg_class read all of it for each table (1.4 s at
                  -- GitLab's size).
                  (SELECT count(*) + sum((SELECT count(*) FROM pg_index i WHERE i.indrelid = m.relid))
                     FROM (SELECT c.oid UNION SELECT p.relid FROM pg_partition_tree(c.oid) p) AS m(relid))::bigint
                      AS "relations!"
             FROM unnest($1::text[]) WITH ORDINALITY AS t(name, n) JOIN pg_class c ON c.oid = to_regclass(t.name)"#,
        &names
    )
    .fetch_all(conn)
    .await?;
    let mut relations = HashMap::new();
    for row in counts {
        let Some(table) = usize::try_from(row.n - 1).ok().and_then(|n| tables.get(n)) else { continue };
        let locks = usize::try_from(row.relations).unwrap_or(usize::MAX);
        relations.insert((table[0].schema.clone(), table[0].table.clone()), Relation { locks, plain: row.plain });
    }
    Ok(relations)
}

/// `candidates` grouped by table, in the order of each table's first.
fn tables_of<'a>(candidates: &[&'a Candidate]) -> Vec<Vec<&'a Candidate>> {
    let mut tables: Vec<Vec<&Candidate>> = Vec::new();
    for candidate in candidates {
        match tables.iter_mut().find(|t| t[0].schema == candidate.schema && t[0].table == candidate.table) {
            Some(table) => table.push(candidate),
            None => tables.push(vec![candidate]),
        }
    }
    tables
}

/// Reads `chunk` in one statement, under its tables' locks with every column's type confirmed first: one retyped
/// since the candidates were read is not read by a reading planned for its old type (`None`). Given how a table's
/// reading is signed, also takes each table's witness ([`witness::take`]) in the snapshot the rows were read in:
/// the chunk is then one repeatable-read transaction whose locks are taken before its snapshot (a table rewritten
/// between the two would look empty to it), and whose scans read each table from its first block, in file order.
async fn read_chunk(
    conn: &mut PgConnection,
    chunk: &[&Candidate],
    sample_rows: u32,
    witnessed: bool,
) -> Result<Option<(Vec<SampledRow>, Vec<witness::Witness>)>, sqlx::Error> {
    let mut planned = crate::typed::Planned::default();
    for c in chunk {
        planned.add(&table_sql(c), &c.column, c.type_oid);
    }
    let tables = tables_of(chunk);
    let mut tx = match witnessed {
        true => sqlx::Connection::begin_with(&mut *conn, "BEGIN ISOLATION LEVEL REPEATABLE READ").await?,
        false => sqlx::Connection::begin(&mut *conn).await?,
    };
    let read: Result<(Vec<SampledRow>, Vec<witness::Witness>), sqlx::Error> = async {
        if witnessed {
            // Neither takes a snapshot: the first statement that does comes after every lock.
            // Sequential scans, and only those, whatever the role's or the database's settings say.
            sqlx::raw_sql(
                "SET LOCAL enable_seqscan = on; SET LOCAL enable_tidscan = on;
                 SET LOCAL enable_indexscan = off; SET LOCAL enable_indexonlyscan = off;
                 SET LOCAL enable_bitmapscan = off; SET LOCAL synchronize_seqscans = off;
                 SET LOCAL max_parallel_workers_per_gather = 0",
            )
            .execute(&mut *tx)
            .await?;
            let names: Vec<String> = tables.iter().map(|t| table_sql(t[0])).collect();
            sqlx::query(AssertSqlSafe(format!("LOCK TABLE ONLY {} IN ACCESS SHARE MODE", names.join(", "))))
                .persistent(false)
                .execute(&mut *tx)
                .await?;
        }
        crate::typed::hold(&mut tx, &planned).await?;
        let rows: Vec<SampledRow> = sqlx::query_as(AssertSqlSafe(statement(chunk)))
            .bind(i64::from(sample_rows))
            .bind(SAMPLE_TAIL_BLOCKS)
            .bind(crate::census::unread::SLICE_CHARS)
            .persistent(false)
            .fetch_all(&mut *tx)
            .await?;
        if !witnessed {
            return Ok((rows, Vec::new()));
        }
        // Per candidate, the rows its head scan returned.
        let mut heads: Vec<HashSet<String>> = vec![HashSet::new(); chunk.len()];
        for (index, head, _, at, _) in &rows {
            if let Some(rows) = usize::try_from(*index).ok().filter(|_| *head).and_then(|i| heads.get_mut(i)) {
                rows.insert(at.clone());
            }
        }
        let mut first = 0;
        let mut signed = Vec::with_capacity(tables.len());
        for table in &tables {
            let until = witness::head_until(&heads[first..first + table.len()], sample_rows);
            signed.push((table_sql(table[0]), signature(table, sample_rows), until));
            first += table.len();
        }
        let witnesses = witness::take(&mut tx, &signed, SAMPLE_TAIL_BLOCKS).await?;
        Ok((rows, witnesses))
    }
    .await;
    match read {
        Ok(read) => {
            tx.commit().await?;
            Ok(Some(read))
        }
        Err(e) if crate::typed::retyped(&e) => {
            tx.rollback().await?;
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// What makes two samples of `table` the same reading ([`witness::signature`]).
fn signature(table: &[&Candidate], sample_rows: u32) -> String {
    let sizes = witness::Sizes {
        rows: sample_rows,
        tail_blocks: SAMPLE_TAIL_BLOCKS,
        slice_chars: crate::census::unread::SLICE_CHARS,
    };
    witness::signature(table, sizes, platform::version::CODE_VERSION)
}

/// A candidate's table as SQL. Built here, not checked at compile time: the table and column are the
/// application's, known only now.
fn table_sql(c: &Candidate) -> String {
    format!("{}.{}", quote_ident(&c.schema), quote_ident(&c.table))
}

/// The one statement that samples `chunk`: per candidate (tagged with its index), its first non-null rows and
/// those of its table's last blocks, each value as text `v` in which ids are then found anywhere. Plain scans, no
/// join: planning is most of a small read's cost. Binds: `$1` rows per column, `$2` tail blocks, `$3` characters
/// per value.
fn statement(chunk: &[&Candidate]) -> String {
    let mut reads = Vec::with_capacity(chunk.len() * 2);
    for (index, c) in chunk.iter().enumerate() {
        let table = table_sql(c);
        let col = quote_ident(&c.column);
        // An array's elements one a line, and an empty array's row as one line of nothing: every row read counts
        // among the rows sampled.
        let (value, elements) = match (c.family.as_str(), c.shape.as_str()) {
            ("uuid" | "text" | "json", "array") => {
                ("u.e::text".to_owned(), " LEFT JOIN LATERAL unnest(s.c) AS u(e) ON true")
            }
            (family, _) => (crate::census::text_of("s.c", family), ""),
        };
        // The first of the last blocks as a value of its own, so the scan starts there (a TID range scan); nothing
        // for a partitioned table's root, which has no blocks. The rows of a partitioned table are named by their
        // partition (`tableoid`), as the census names them.
        let tail = format!(
            "ctid >= (SELECT format('(%s,0)', greatest(b.n - $2, 0))::tid
                        FROM asset_sweeper_blocks({}::regclass) AS b(n) WHERE b.n > 0)",
            quote_literal(&table)
        );
        for (head, rows) in
            [(true, format!("{col} IS NOT NULL LIMIT $1")), (false, format!("{tail} AND {col} IS NOT NULL"))]
        {
            reads.push(format!(
                // A probe reads a value's start only: one end user's hundred-megabyte comment must not outlast it.
                "SELECT {index}, {head}, s.rel, s.at::text, substr({value}, 1, $3)
                   FROM (SELECT tableoid AS rel, ctid AS at, {col} AS c FROM {table} WHERE {rows}) s{elements}"
            ));
        }
    }
    reads.iter().map(|r| format!("({r})")).collect::<Vec<_>>().join("\nUNION ALL\n")
}

/// What `chunk`'s sampled `rows` hold: a finding for each asset id (any spelling) and, in a text column, each key
/// of an asset the key scan did not adopt; and a problem for each column whose rows look like an undeclared source.
/// Which ids and keys are assets: two questions for the chunk. Also says, per candidate, whether anything was found.
async fn weigh(
    conn: &mut PgConnection,
    chunk: &[&Candidate],
    rows: Vec<SampledRow>,
) -> Result<(Vec<Finding>, Vec<SchemaProblem>, Vec<bool>), sqlx::Error> {
    // Per candidate: the rows read (head and tail may overlap), and what each value may name.
    let mut read: Vec<HashSet<(Oid, String)>> = vec![HashSet::new(); chunk.len()];
    let mut spelled: Vec<(usize, Uuid, Oid, String)> = Vec::new();
    let mut named: Vec<(usize, String, Oid, String)> = Vec::new();
    for (index, _, rel, at, text) in rows {
        let Some(index) = usize::try_from(index).ok().filter(|i| *i < chunk.len()) else { continue };
        read[index].insert((rel, at.clone()));
        let Some(text) = text else { continue };
        spelled.extend(crate::census::ids::ids_in(&text).into_iter().map(|id| (index, id, rel, at.clone())));
        // A text equal to an adopted asset's key is a name the key scan keeps, not a finding: passed over here
        // exactly as the census passes over it (a legacy column of paths must not refuse every workspace).
        if chunk[index].family == "text" && text.len() <= MAX_KEY_BYTES {
            named.push((index, text, rel, at));
        }
    }
    let ids: Vec<Uuid> = spelled.iter().map(|s| s.1).collect();
    let assets = if ids.is_empty() { HashSet::new() } else { crate::census::assets_among(&mut *conn, &ids).await? };
    let keys: Vec<&str> = named.iter().map(|n| n.1.as_str()).collect::<HashSet<_>>().into_iter().collect();
    let keyed =
        if keys.is_empty() { HashMap::new() } else { crate::census::not_adopted_keys(&mut *conn, &keys).await? };

    let mut found: Vec<Vec<(Uuid, Oid, String)>> = vec![Vec::new(); chunk.len()];
    for (index, id, rel, at) in spelled {
        if assets.contains(&id) {
            found[index].push((id, rel, at));
        }
    }
    for (index, key, rel, at) in named {
        for id in keyed.get(&key).into_iter().flatten() {
            found[index].push((*id, rel, at.clone()));
        }
    }
    let dirty = found.iter().map(|f| !f.is_empty()).collect();
    let mut findings = Vec::new();
    let mut problems = Vec::new();
    for ((candidate, found), read) in chunk.iter().zip(found).zip(read) {
        if found.is_empty() {
            continue;
        }
        let rows = found.iter().map(|f| (f.1, &f.2)).collect::<HashSet<_>>().len();
        let sampled = i64::try_from(read.len()).unwrap_or(i64::MAX);
        if crate::census::looks_like_source(i64::try_from(rows).unwrap_or(i64::MAX), sampled) {
            let family = &candidate.family;
            problems.push(SchemaProblem::UnexplainedAssetIds {
                schema: candidate.schema.clone(),
                table: candidate.table.clone(),
                column: candidate.column.clone(),
                data_type: if candidate.shape == "array" { format!("{family}[]") } else { family.clone() },
            });
        }
        findings.extend(found.into_iter().map(|(asset, relid, record)| Finding {
            asset,
            relid,
            column: candidate.column.clone(),
            record,
        }));
    }
    Ok((findings, problems, dirty))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(table: &str, column: &str) -> Candidate {
        Candidate {
            schema: "public".to_owned(),
            table: table.to_owned(),
            column: column.to_owned(),
            shape: "scalar".to_owned(),
            family: "text".to_owned(),
            reads: "both".to_owned(),
            type_oid: 25,
        }
    }

    #[test]
    fn chunks_keep_tables_whole_and_within_their_limits() {
        let mut all = Vec::new();
        for t in 0..40 {
            for c in 0..(if t == 3 { 300 } else { 5 }) {
                all.push(candidate(&format!("t{t}"), &format!("c{c}")));
            }
        }
        // Table 7 locks 300 relations (a partitioned table), the others 30.
        let chunks = chunks(all.iter().collect(), |c| if c.table == "t7" { 300 } else { 30 });
        let mut seen = Vec::new();
        for chunk in &chunks {
            let tables = tables_of(chunk);
            assert!(tables.len() <= CHUNK_TABLES);
            // Only a table wider than a chunk on its own has a chunk past the column limit, and to itself.
            assert!(chunk.len() <= CHUNK_COLUMNS || tables.len() == 1, "{} columns", chunk.len());
            let locks: usize = tables.iter().map(|t| if t[0].table == "t7" { 300 } else { 30 }).sum();
            assert!(locks <= CHUNK_LOCKS || tables.len() == 1, "{locks} relations");
            for table in tables {
                assert!(!seen.contains(&table[0].table), "{} split across chunks", table[0].table);
                seen.push(table[0].table.clone());
            }
        }
        assert_eq!(seen.len(), 40);
        assert_eq!(chunks.iter().map(Vec::len).sum::<usize>(), all.len());
    }

    #[test]
    fn the_statement_tags_each_value_with_its_candidate_and_quotes_every_name() {
        let odd = candidate("we\"ird", "co l");
        let plain = candidate("t", "c");
        let sql = statement(&[&odd, &plain]);
        assert!(sql.contains("FROM \"public\".\"we\"\"ird\" WHERE \"co l\" IS NOT NULL LIMIT $1"), "{sql}");
        assert!(sql.contains("asset_sweeper_blocks('\"public\".\"we\"\"ird\"'::regclass)"), "{sql}");
        assert_eq!(sql.matches("SELECT 0,").count(), 2);
        assert_eq!(sql.matches("SELECT 1,").count(), 2);
    }
}
