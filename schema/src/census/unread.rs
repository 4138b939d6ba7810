//! A block the census cannot read within its batch limit (`CENSUS_BATCH_TIMEOUT`), even alone: one value of it
//! is too large or too slow to write out (a comment of a hundred megabytes, a type whose output function crawls).
//! Anyone who can write a row can write such a value, so it must neither stop the column's proof nor be passed
//! over in silence. The block is read again a row and a column at a time, each value by the batch's own
//! statements; a value that still outlasts the limit is read from its start, its first [`SLICE_CHARS`]
//! characters only (a slice Postgres takes without reading the rest of a long string), and recorded in
//! `census_unread` with what was read. What the slice names is held as it would be had the whole been read — an
//! asset id as a finding, a key of ours as named — and the scan moves on, so the column is proven without it.
//! The rest of the value is not proven: `status` and the run record name the row, and the next cycle tries it
//! again. Values a block leaves untried when the pass's share runs out are recorded `untried` and read before the
//! column's scan may end ([`retry`]): a column is never proven over a value nobody read.

use std::collections::HashSet;
use std::time::Instant;

use sqlx::{AssertSqlSafe, PgConnection};
use uuid::Uuid;

use super::group::{Group, Rows};
use super::named::KeyScan;
use super::scan::{Found, scan};
use super::timed_out;
use platform::sql::quote_ident;

/// How much of a value that cannot be read whole is read, in characters: a string stored out of line gives its
/// first megabyte or so without the rest being read (a JSON document, an array or another type is written out
/// whole first, and may not give even that).
pub const SLICE_CHARS: i32 = 1 << 20;

/// A value recorded as not read whole.
#[derive(Debug)]
struct Unread {
    attnum: i16,
    record: String,
    /// Its size as stored (compressed or not), when known.
    stored_bytes: Option<i64>,
    /// The characters read from its start.
    read_chars: i32,
    /// Not tried: the pass's share ran out first. Read before the column's scan may end ([`retry`]).
    untried: bool,
}

/// Reads block `block` of the group's table value by value, each within the session's statement timeout (the
/// batch limit), and records each value that could not be read whole; at `until` (the census's share of the
/// pass) the values not yet tried are recorded unread, so one block never holds the pass. Answers what it found,
/// per column as a batch does, and how many values it recorded unread.
pub(super) async fn read_block(
    conn: &mut PgConnection,
    group: &Group,
    block: i64,
    keys: Option<&KeyScan>,
    until: Instant,
) -> Result<(Vec<Found>, u64), sqlx::Error> {
    let lines = lines(conn, group, block).await?;
    let mut found = vec![Found::default(); group.columns.len()];
    let mut holding: Vec<HashSet<String>> = vec![HashSet::new(); group.columns.len()];
    let mut unread: Vec<Unread> = Vec::new();
    for line in lines {
        for (k, column) in group.columns.iter().enumerate() {
            if Instant::now() >= until {
                let record = format!("({block},{line})");
                unread.push(Unread { attnum: column.attnum, record, stored_bytes: None, read_chars: 0, untried: true });
                continue;
            }
            let (named_here, part) = one_value(conn, group, k, block, line, keys).await?;
            unread.extend(part);
            for (id, at) in named_here {
                found[k].add(id, at.clone());
                holding[k].insert(at);
            }
        }
    }
    for (f, rows) in found.iter_mut().zip(holding) {
        f.rows = i64::try_from(rows.len()).unwrap_or(i64::MAX);
    }
    let count = unread.len() as u64;
    note(conn, group, unread).await?;
    Ok((found, count))
}

/// What [`retry`] read.
pub(super) struct Retried {
    /// Per column, as a batch finds.
    pub(super) found: Vec<Found>,
    /// Values it could read only in part (recorded again as tried).
    pub(super) unread: u64,
    /// Values still untried: the share ran out first. The column's scan may not end while there are any.
    pub(super) left: u64,
}

/// Reads the values of the group's columns recorded untried (the share ran out inside a block read value by value),
/// in their order in the table, each as [`read_block`] reads one: whole, or its first part when it alone outlasts
/// the batch limit. The first is read whatever the time, so every pass moves on by at least one value; the rest
/// while `until` is ahead. A value read is no longer untried (recorded as read in part, or gone when read whole).
pub(super) async fn retry(
    conn: &mut PgConnection,
    group: &Group,
    keys: Option<&KeyScan>,
    until: Instant,
) -> Result<Retried, sqlx::Error> {
    let attnums: Vec<i16> = group.columns.iter().map(|c| c.attnum).collect();
    let untried = sqlx::query!(
        r#"SELECT attnum AS "attnum!", record AS "record!",
                  (record::tid::text::point)[0]::int8 AS "block!", (record::tid::text::point)[1]::int4 AS "line!"
             FROM census_unread WHERE relid = $1 AND attnum = ANY ($2) AND untried
            ORDER BY record::tid, attnum"#,
        group.relid,
        &attnums,
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut retried = Retried { found: vec![Found::default(); group.columns.len()], unread: 0, left: 0 };
    let mut unread: Vec<Unread> = Vec::new();
    let (mut read_attnums, mut read_records) = (Vec::new(), Vec::new());
    for (n, value) in untried.into_iter().enumerate() {
        let Some(k) = group.columns.iter().position(|c| c.attnum == value.attnum) else { continue };
        if n > 0 && Instant::now() >= until {
            retried.left += 1;
            continue;
        }
        let (named, part) = one_value(conn, group, k, value.block, value.line, keys).await?;
        unread.extend(part);
        retried.found[k].rows += i64::from(!named.is_empty());
        for (id, at) in named {
            retried.found[k].add(id, at);
        }
        read_attnums.push(value.attnum);
        read_records.push(value.record);
    }
    // Read: whole (nothing left to record), or in part (recorded again below, as tried).
    sqlx::query!(
        "DELETE FROM census_unread u USING unnest($2::int2[], $3::text[]) AS r(attnum, record)
          WHERE u.relid = $1 AND u.attnum = r.attnum AND u.record = r.record AND u.untried",
        group.relid,
        &read_attnums,
        &read_records,
    )
    .execute(&mut *conn)
    .await?;
    retried.unread = unread.len() as u64;
    note(conn, group, unread).await?;
    Ok(retried)
}

/// One value, column `k` of the row at (`block`, `line`), read as a batch reads it: whole, or from its start when it
/// alone outlasts the batch limit, and then also answered as unread with what was read. Answers the assets it
/// names, each with the row.
async fn one_value(
    conn: &mut PgConnection,
    group: &Group,
    k: usize,
    block: i64,
    line: i32,
    keys: Option<&KeyScan>,
) -> Result<(Vec<(Uuid, String)>, Option<Unread>), sqlx::Error> {
    let alone = Group {
        relid: group.relid,
        filenode: group.filenode,
        next_block: block,
        heap: group.heap.clone(),
        blocks: group.blocks,
        batch_blocks: Some(1),
        columns: vec![group.columns[k].clone()],
    };
    // Read as a batch reads it, with its key scan.
    match scan(conn, &alone, Rows::row(block, line), keys).await {
        Ok((mut found, noted)) => {
            noted.write(conn, group.relid, keys).await?;
            Ok((found.pop().map(|f| f.assets).unwrap_or_default(), None))
        }
        Err(e) if timed_out(&e) => {
            let record = format!("({block},{line})");
            let (ids, part) = slice(conn, group, k, &record, keys).await?;
            Ok((ids.into_iter().map(|id| (id, record.clone())).collect(), part))
        }
        Err(e) => Err(e),
    }
}

/// The line numbers of the block's rows; reading addresses alone reads no value.
async fn lines(conn: &mut PgConnection, group: &Group, block: i64) -> Result<Vec<i32>, sqlx::Error> {
    let sql = format!(
        "SELECT (ctid::text::point)[1]::int4 FROM ONLY {} WHERE ctid >= $1::tid AND ctid < $2::tid ORDER BY 1",
        group.heap
    );
    let (from, to) = Rows::blocks(block, block + 1).bounds();
    sqlx::query_scalar(AssertSqlSafe(sql)).bind(from).bind(to).persistent(false).fetch_all(conn).await
}

/// The first [`SLICE_CHARS`] characters of column `k` at `record`, searched for asset ids (answered) and keys of
/// ours (noted as named); and the value as unread, with what was read (nothing when even the slice outlasts the
/// limit). No value (a null, a row gone since) is no unread value.
async fn slice(
    conn: &mut PgConnection,
    group: &Group,
    k: usize,
    record: &str,
    keys: Option<&KeyScan>,
) -> Result<(Vec<Uuid>, Option<Unread>), sqlx::Error> {
    let column = &group.columns[k];
    // The adopted keys first, in a transaction of their own ([`super::scan::scan`]).
    if let Some(keys) = keys {
        keys.reads_relative(&mut *conn).await?;
    }
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    crate::typed::hold(&mut tx, &crate::typed::Planned::one(&group.heap, &column.name, column.type_oid)).await?;
    let sliced = read_slice(&mut tx, group, k, record, keys).await?;
    tx.commit().await?;
    Ok(sliced)
}

/// [`slice`]'s reading, once the column's type is confirmed.
async fn read_slice(
    conn: &mut PgConnection,
    group: &Group,
    k: usize,
    record: &str,
    keys: Option<&KeyScan>,
) -> Result<(Vec<Uuid>, Option<Unread>), sqlx::Error> {
    let column = &group.columns[k];
    let col = quote_ident(&column.name);
    // A plain string's slice is taken from its stored chunks, not from the whole value.
    let sql = format!(
        "SELECT substr({}, 1, $2), pg_column_size({col})::int8 FROM ONLY {} WHERE ctid = $1::tid AND {col} IS NOT NULL",
        super::text_of(&col, &column.family),
        group.heap,
    );
    let read: Result<Option<(String, i64)>, sqlx::Error> = sqlx::query_as(AssertSqlSafe(sql))
        .bind(record)
        .bind(SLICE_CHARS)
        .persistent(false)
        .fetch_optional(&mut *conn)
        .await;
    let (text, stored) = match read {
        Ok(Some(read)) => read,
        Ok(None) => return Ok((Vec::new(), None)),
        Err(e) if timed_out(&e) => {
            let unread = Unread {
                attnum: column.attnum,
                record: record.to_owned(),
                stored_bytes: None,
                read_chars: 0,
                untried: false,
            };
            return Ok((Vec::new(), Some(unread)));
        }
        Err(e) => return Err(e),
    };
    let read_chars = i32::try_from(text.chars().count()).unwrap_or(i32::MAX);
    let unread = Unread {
        attnum: column.attnum,
        record: record.to_owned(),
        stored_bytes: Some(stored),
        read_chars,
        untried: false,
    };
    if let Some(keys) = keys.filter(|_| column.key_scanned()) {
        let spans = keys.layout.spans_in(&text).into_iter().map(|span| (span, column.attnum)).collect();
        // The names relative to a root in what was read: a document's strings (a slice is too long to be one name).
        let mut relatives = super::relative::Found::default();
        if keys.reads_relative(&mut *conn).await? {
            keys.relative_in(&text, column.family == "json", column.attnum, &mut relatives);
        }
        keys.note(conn, group.relid, spans, relatives).await?;
    }
    let spelled: Vec<Uuid> =
        if column.ids_read() { super::ids::ids_in(&text).into_iter().collect() } else { Vec::new() };
    if spelled.is_empty() {
        return Ok((Vec::new(), Some(unread)));
    }
    let assets = super::assets_among(&mut *conn, &spelled).await?;
    Ok((spelled.into_iter().filter(|id| assets.contains(id)).collect(), Some(unread)))
}

/// Records the values not read whole, as of now; a clean end of their column's next scan forgets those it did not
/// record again.
async fn note(conn: &mut PgConnection, group: &Group, unread: Vec<Unread>) -> Result<(), sqlx::Error> {
    if unread.is_empty() {
        return Ok(());
    }
    for value in &unread {
        let column = group.columns.iter().find(|c| c.attnum == value.attnum).map_or("?", |c| c.name.as_str());
        if value.untried {
            tracing::info!(
                table = %group.heap,
                column,
                record = %value.record,
                "a value left untried when the census's share ran out: read before its column's scan ends"
            );
            continue;
        }
        tracing::warn!(
            table = %group.heap,
            column,
            record = %value.record,
            stored_bytes = value.stored_bytes,
            read_chars = value.read_chars,
            "a value the census could not read whole within its batch limit: what it read is held, the rest is not proven"
        );
    }
    let attnums: Vec<i16> = unread.iter().map(|u| u.attnum).collect();
    let records: Vec<String> = unread.iter().map(|u| u.record.clone()).collect();
    let stored: Vec<Option<i64>> = unread.iter().map(|u| u.stored_bytes).collect();
    let read: Vec<i32> = unread.iter().map(|u| u.read_chars).collect();
    let untried: Vec<bool> = unread.iter().map(|u| u.untried).collect();
    sqlx::query!(
        "INSERT INTO census_unread AS u (relid, attnum, record, stored_bytes, read_chars, untried)
         SELECT $1, a, r, s, c, n
           FROM unnest($2::int2[], $3::text[], $4::int8[], $5::int4[], $6::bool[]) AS t(a, r, s, c, n)
         ON CONFLICT (relid, attnum, record) DO UPDATE
            SET stored_bytes = EXCLUDED.stored_bytes, read_chars = EXCLUDED.read_chars, untried = EXCLUDED.untried,
                recorded_at = now()",
        group.relid,
        &attnums,
        &records,
        &stored as &[Option<i64>],
        &read,
        &untried,
    )
    .execute(conn)
    .await?;
    Ok(())
}
