//! One census batch: a range of one table's blocks, read once for all the columns that stand there, searched for
//! asset ids (and storage keys), with the mixed-case spellings at declared paths noted for the recheck.

use std::collections::HashSet;

use sqlx::{AssertSqlSafe, PgConnection, Row};
use uuid::Uuid;

use super::group::{Group, Rows};
use super::named::{KeyScan, Noted};
use migrator::{UUID_IN_TEXT, UUID_SPELLED_IN_TEXT, UUID_WHOLE};
use platform::sql::quote_ident;

/// Failpoint `census::block_limit`: a batch of more blocks than its argument is cancelled by the server's own
/// statement timeout, as a batch of oversized documents would be.
fn injected_block_limit() -> Option<i64> {
    fail::fail_point!("census::block_limit", |limit: Option<String>| limit.and_then(|l| l.parse().ok()));
    None
}

/// Failpoint `census::stall`: each batch's statement runs its argument in seconds, past any statement timeout, and is
/// then cancelled by it, as a statement Postgres JIT-compiles for minutes is (compilation ignores the timeout).
fn injected_stall() -> Option<f64> {
    fail::fail_point!("census::stall", |seconds: Option<String>| seconds.and_then(|s| s.parse().ok()));
    None
}

/// For the failpoints: runs `seconds` past any statement timeout, then fails as the server's own statement timeout
/// fails a statement, and puts the session's limit back.
async fn cancelled_by_the_server(conn: &mut PgConnection, seconds: f64) -> Result<(), sqlx::Error> {
    let cancelled = sqlx::raw_sql(AssertSqlSafe(format!(
        "SET statement_timeout = 0; SELECT pg_sleep({seconds}); SET statement_timeout = 1; SELECT pg_sleep(1)"
    )))
    .execute(&mut *conn)
    .await;
    sqlx::raw_sql("RESET statement_timeout").execute(&mut *conn).await?;
    cancelled.map(|_| ())
}

/// What one batch found in one column.
#[derive(Debug, Clone, Default)]
pub(super) struct Found {
    /// Rows of the batch holding at least one asset id.
    pub(super) rows: i64,
    /// Each asset found, with the `ctid` of one row holding it.
    pub(super) assets: Vec<(Uuid, String)>,
}

impl Found {
    /// Notes `asset` as found in the row at `at`, once: the first row found holding it is the one kept.
    pub(super) fn add(&mut self, asset: Uuid, at: String) {
        if !self.assets.iter().any(|(a, _)| *a == asset) {
            self.assets.push((asset, at));
        }
    }
}

/// Reads `rows` of the group's table; for each column, in order, what it found. Spellings of ids at a declared path
/// other than all lowercase or all uppercase are noted for the recheck, not found. With the pass's key scan, the
/// keys of ours named in the values it fetches anyway ([`Column::keys_read_with_ids`]) are noted too, and the key
/// scan's own statement reads the rest ([`super::named::read`]). Both in one transaction that first confirms the
/// columns' types under the table's lock ([`crate::typed`]): a column retyped since the plan is not read.
pub(super) async fn scan(
    conn: &mut PgConnection,
    group: &Group,
    rows: Rows,
    keys: Option<&KeyScan>,
) -> Result<(Vec<Found>, Noted), sqlx::Error> {
    if injected_block_limit().is_some_and(|limit| rows.to.0 - rows.from.0 > limit) {
        cancelled_by_the_server(conn, 0.0).await?;
    }
    if let Some(seconds) = injected_stall() {
        cancelled_by_the_server(conn, seconds).await?;
    }
    // The adopted keys are read first, in a transaction of their own: the lock they are read under must not last
    // as long as the batch's.
    if let Some(keys) = keys {
        keys.reads_relative(&mut *conn).await?;
    }
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    // The planner cannot estimate the batch's values (a materialized range of the table), and chose to sort every
    // text a batch compares with storage keys for a merge join: under the database's collation that sort was half
    // the statement (31 of 57 ms for 1 024 blocks of HTML). Hashed, the same comparison costs a third of it.
    // Nor hashed: every join of a batch is with `assets` (or `adopted_assets`), by a column an index holds, and a
    // hash join read the whole table to build its side, every batch: 35 ms a batch beside 10 000 assets, 420 ms
    // beside 1 000 000, where probing the index for each of the batch's 12 000 texts takes 15 ms whatever the size.
    // The batch is materialized once for all its columns: at the default `work_mem` (4 MB) a batch of 1 024
    // blocks was written to a temporary file and read back, every batch (1.2 GB of temporary files for a
    // 1.3 GB table). Room for three times its blocks keeps it in memory, up to 64 MB (a batch of 2 730 blocks):
    // each reader's batch takes its own, on the application's database.
    let kilobytes = (rows.to.0 - rows.from.0 + 1).saturating_mul(3 * 8).min(65_536);
    sqlx::query!(
        "SELECT set_config('enable_mergejoin', 'off', true) AS merge,
                set_config('enable_hashjoin', 'off', true) AS hash,
                set_config('work_mem', greatest(pg_size_bytes(current_setting('work_mem')) / 1024, $1) || 'kB', true)
                  AS memory",
        kilobytes
    )
    .fetch_one(&mut *tx)
    .await?;
    crate::typed::hold(&mut tx, &group.planned()).await?;
    let (found, mut noted) = read(&mut tx, group, rows, keys).await?;
    if let Some(keys) = keys {
        super::named::read(&mut tx, group, rows, keys, &mut noted).await?;
    }
    tx.commit().await?;
    Ok((found, noted))
}

/// [`scan`]'s reading, once the columns' types are confirmed.
async fn read(
    conn: &mut PgConnection,
    group: &Group,
    rows: Rows,
    keys: Option<&KeyScan>,
) -> Result<(Vec<Found>, Noted), sqlx::Error> {
    let Statement { sql, paths, searched, compared } = statement(group);
    let (from, to) = rows.bounds();
    let mut query = sqlx::query(AssertSqlSafe(sql))
        .bind(from)
        .bind(to)
        .bind(UUID_IN_TEXT)
        .bind(UUID_SPELLED_IN_TEXT)
        .bind(UUID_WHOLE);
    for p in paths {
        query = query.bind(p);
    }
    let read = query.persistent(false).fetch_all(&mut *conn).await?;
    let relative = match keys {
        Some(keys) => keys.reads_relative(&mut *conn).await?,
        None => false,
    };
    let mut relatives = super::relative::Found::default();
    // The values read as text are searched here, each in one pass ([`super::ids::ids_in`]); which of the ids they
    // spell are assets is one question for the whole batch.
    let mut named: Vec<(usize, Uuid, String)> = Vec::new();
    let (mut ids, mut spellings) = (Vec::new(), Vec::new());
    let mut candidates: HashSet<Uuid> = HashSet::new();
    // Each id spelled in a value: its column, and its row by its place in `rows_at` (a row's address kept once).
    let mut spelled_in: Vec<(usize, Uuid, usize)> = Vec::new();
    let mut rows_at: Vec<&str> = Vec::new();
    let mut spans: HashSet<(String, i16)> = HashSet::new();
    let mut reader = keys.map(|scan| scan.layout.span_reader());
    // Each value compared with the storage keys: its column, its row by its place in `rows_at`, the text.
    let mut keyed: Vec<(usize, usize, &str)> = Vec::new();
    for fetched in &read {
        let k: Option<i32> = fetched.try_get(0)?;
        let id: Option<Uuid> = fetched.try_get(1)?;
        let spelling: Option<String> = fetched.try_get(2)?;
        // A row of the table: the values read as text, in the order of `searched`, read where they arrived.
        let row = rows_at.len();
        rows_at.push(fetched.try_get(3)?);
        let texts = texts_of(fetched.try_get_raw(4)?)?;
        let texts = texts.into_iter().zip(&searched).filter_map(|(t, k)| Some((*k, t?)));
        for (k, text) in texts {
            let column = &group.columns[k];
            if let (Some(scan), Some(reader)) = (keys.filter(|_| column.keys_read_with_ids()), reader.as_mut()) {
                spans.extend(reader.spans_in(text).into_iter().map(|span| (span, column.attnum)));
                if relative {
                    scan.relative_in(text, column.family == "json", column.attnum, &mut relatives);
                }
            }
            // A column excluded for ids is fetched for its keys alone.
            if !column.ids_read() {
                continue;
            }
            if compared.contains(&k) {
                keyed.push((k, row, text));
            }
            super::ids::each_id_in(text, |id| {
                candidates.insert(id);
                spelled_in.push((k, id, row));
            });
        }
        let Some(k) = k.and_then(|k| usize::try_from(k).ok()).filter(|k| *k < group.columns.len()) else { continue };
        match (id, spelling) {
            (Some(id), Some(spelling)) => {
                ids.push(id);
                spellings.push(spelling);
            }
            (Some(id), None) => named.push((k, id, rows_at[row].to_owned())),
            (None, _) => {}
        }
    }
    let mut noted = Noted { named: spans, relatives, ..Noted::default() };
    named.retain(|(k, _, _)| group.columns[*k].ids_read());
    for (k, id, row) in keys_named(&mut *conn, &keyed).await? {
        named.push((k, id, rows_at[row].to_owned()));
    }
    if !candidates.is_empty() {
        let candidates: Vec<Uuid> = candidates.into_iter().collect();
        let assets = super::assets_among(&mut *conn, &candidates).await?;
        for (k, id, row) in spelled_in.into_iter().filter(|(_, id, _)| assets.contains(id)) {
            named.push((k, id, rows_at[row].to_owned()));
        }
    }
    let mut found = vec![Found::default(); group.columns.len()];
    let mut holding: Vec<HashSet<String>> = vec![HashSet::new(); group.columns.len()];
    for (k, id, at) in named {
        if !found[k].assets.iter().any(|(a, _)| *a == id) {
            found[k].assets.push((id, at.clone()));
        }
        holding[k].insert(at);
    }
    for (f, rows) in found.iter_mut().zip(holding) {
        f.rows = i64::try_from(rows.len()).unwrap_or(i64::MAX);
    }
    noted.spellings = (ids, spellings);
    Ok((found, noted))
}

/// Which of `texts` (each a column, a row and its value) are whole storage keys of assets not adopted (an adopted
/// asset's key is a name, not a finding: the key scan keeps it for that record): each as `(column, asset, row)`.
/// Asked after the batch's statement, so in a snapshot no older than the one its values were read in: every key that
/// snapshot held is compared (a key is never renamed). Only a text as long as some key can be one: the shortest and
/// longest are read from the index of the keys' lengths, so a body of prose (most texts) costs a comparison of two
/// integers rather than a search of the keys' index. Lengths are counted in bytes of UTF-8, as the texts arrive:
/// in a database of another encoding every text is compared.
async fn keys_named(
    conn: &mut PgConnection,
    texts: &[(usize, usize, &str)],
) -> Result<Vec<(usize, Uuid, usize)>, sqlx::Error> {
    if texts.is_empty() {
        return Ok(Vec::new());
    }
    let lengths = sqlx::query!(
        r#"SELECT min(octet_length(storage_key)) AS shortest, max(octet_length(storage_key)) AS longest,
                  current_setting('server_encoding') = 'UTF8' AS "utf8!"
             FROM assets"#
    )
    .fetch_one(&mut *conn)
    .await?;
    let (Some(shortest), Some(longest)) = (lengths.shortest, lengths.longest) else { return Ok(Vec::new()) };
    let fits = |text: &str| !lengths.utf8 || i32::try_from(text.len()).is_ok_and(|n| (shortest..=longest).contains(&n));
    let mut asked: Vec<&str> = texts.iter().map(|(_, _, text)| *text).filter(|text| fits(text)).collect();
    if asked.is_empty() {
        return Ok(Vec::new());
    }
    asked.sort_unstable();
    asked.dedup();
    // Every asset of each key: assets that share bytes share their key, and a text naming it names them all.
    let keys = super::not_adopted_keys(&mut *conn, &asked).await?;
    let named = texts.iter().filter_map(|(k, row, text)| Some((*k, keys.get(*text)?, *row)));
    Ok(named.flat_map(|(k, ids, row)| ids.iter().map(move |id| (k, *id, row))).collect())
}

/// A row's values read as text (a `text[]` in the binary format), each borrowed from the row as it arrived: a
/// batch's values are megabytes, and copying each into a string of its own was a tenth of the census's time.
/// `NULL` (a row with none of them) is no value.
fn texts_of(value: sqlx::postgres::PgValueRef<'_>) -> Result<Vec<Option<&str>>, sqlx::Error> {
    use sqlx::ValueRef;
    if value.is_null() {
        return Ok(Vec::new());
    }
    let malformed = |what: &str| sqlx::Error::Decode(format!("a census batch's values: {what}").into());
    if !matches!(value.format(), sqlx::postgres::PgValueFormat::Binary) {
        return Err(malformed("sent as text"));
    }
    let mut bytes = value.as_bytes().map_err(sqlx::Error::Decode)?;
    let int = |bytes: &mut &[u8]| -> Result<i32, sqlx::Error> {
        let (head, rest) = bytes.split_first_chunk::<4>().ok_or_else(|| malformed("cut short"))?;
        *bytes = rest;
        Ok(i32::from_be_bytes(*head))
    };
    // Dimensions, a flag for nulls, the element type; then each dimension's length and lower bound.
    let dimensions = int(&mut bytes)?;
    let _ = (int(&mut bytes)?, int(&mut bytes)?);
    let count = match dimensions {
        0 => 0,
        1 => {
            let count = int(&mut bytes)?;
            let _lower_bound = int(&mut bytes)?;
            usize::try_from(count).map_err(|_| malformed("a negative length"))?
        }
        _ => return Err(malformed("more than one dimension")),
    };
    let mut texts = Vec::with_capacity(count);
    for _ in 0..count {
        let length = int(&mut bytes)?;
        let Ok(length) = usize::try_from(length) else {
            texts.push(None);
            continue;
        };
        let (text, rest) = bytes.split_at_checked(length).ok_or_else(|| malformed("a value cut short"))?;
        bytes = rest;
        texts.push(Some(std::str::from_utf8(text).map_err(|e| sqlx::Error::Decode(e.into()))?));
    }
    Ok(texts)
}

/// One batch's statement over a group's columns ([`statement`]).
pub(super) struct Statement {
    pub(super) sql: String,
    /// The declared paths it binds, `$6`… in order.
    pub(super) paths: Vec<Vec<String>>,
    /// The position in the group of each value of a row's `texts`.
    pub(super) searched: Vec<usize>,
    /// The positions in the group of the scalar text columns whose values the census compares with the storage
    /// keys ([`keys_named`]): a text may be a whole key of ours.
    pub(super) compared: Vec<usize>,
}

/// One batch's statement over `group`'s columns: `$1` and `$2` are the block range (`ctid`s), `$3` and `$4` the uuid
/// patterns ([`UUID_IN_TEXT`], [`UUID_SPELLED_IN_TEXT`]), `$5` a whole id ([`UUID_WHOLE`]), `$6`… each declared
/// JSONB source's paths, in the group's column order. Each row is `(k, id, spelling, at, texts)`, `at` the row's
/// `ctid`: either an asset the row holds in column `k` (its position in the group; `spelling` set for an id at a
/// declared path spelled otherwise than all lowercase or all uppercase), or, with `k` NULL, the row's values to
/// search for ids, as text, one per column of `searched` (NULL where the row has none): one row sent per table row,
/// not per value (a quarter of the rows for four columns, and the statement a quarter faster). With nothing to join
/// with `assets` in the database (no uuid column, declared document or text array), the statement is one scan of the
/// range and only the rows of values. A pure function of the group, so its text can be read in a test.
pub(super) fn statement(group: &Group) -> Statement {
    let selected: Vec<String> = group.columns.iter().map(|c| quote_ident(&c.name)).collect();
    let mut finds = Vec::new();
    // Values read as text, which the batch searches for ids in one pass each (`super::ids`), and the elements of
    // text arrays compared with storage keys (an adopted asset's key is a name, not a finding: the key scan keeps it
    // for that record): gathered from every column, so each join with `assets` runs once per batch, not once per
    // column.
    let (mut searched, mut searched_at, mut present, mut keyed) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut compared = Vec::new();
    // $1, $2: the block range; $3, $4: the uuid patterns; $5: a whole id; $6…: each declared source's paths.
    let mut paths: Vec<Vec<String>> = Vec::new();
    for (k, column) in group.columns.iter().enumerate() {
        let col = format!("r.{}", quote_ident(&column.name));
        match column.family.as_str() {
            _ if !column.json_paths.is_empty() => {
                paths.push(column.json_paths.clone());
                let n = paths.len() + 5;
                // The strings the declared paths select that spell an id, as the recheck reads them (a filter on
                // strings).
                let at_paths = format!(
                    "unnest(${n}::text[]) p, jsonb_path_query({col}, (p || ' ? (@.type() == \"string\")')::jsonpath, '{{}}', true) v
                      WHERE v #>> '{{}}' ~* $5"
                );
                // Ids at a declared path are references; every other asset id in the document is a finding.
                finds.push(format!(
                    "SELECT {k}, f.id::uuid, NULL::text, r.at FROM r, {}
                      WHERE f.id::uuid NOT IN (SELECT (v #>> '{{}}')::uuid FROM {at_paths})",
                    ids_in(&format!("{col}::text"))
                ));
                // An id at a path spelled otherwise is a reference the recheck finds once its spelling is noted.
                finds.push(format!(
                    "SELECT {k}, (v #>> '{{}}')::uuid, v #>> '{{}}', r.at FROM r, {at_paths}
                        AND v #>> '{{}}' NOT IN ((v #>> '{{}}')::uuid::text, upper((v #>> '{{}}')::uuid::text))"
                ));
            }
            // Excluded for ids: fetched only where its keys are read from the fetched text. A uuid (or an array of
            // them) is searched as its text, in which every id is spelled as the search reads it: one question of
            // the assets for the batch's ids, not a probe of their index per row in the statement.
            family if column.ids_read() || column.keys_read_with_ids() => {
                searched.push(super::text_of(&col, family));
                searched_at.push(k);
                present.push(col.clone());
                // A scalar's text is fetched whole for the id search, so the census compares it with the keys
                // itself ([`keys_named`]); an array's elements are compared here, as written, not as the array
                // quotes them.
                match (family == "text" && column.ids_read(), column.shape == "array") {
                    (true, true) => keyed.push(format!("SELECT {k} AS k, unnest({col})::text AS v, r.at FROM r")),
                    (true, false) => compared.push(k),
                    (false, _) => {}
                }
            }
            _ => {}
        }
    }

    if !keyed.is_empty() {
        // Only a text as long as some storage key can be one: the shortest and longest are read in the batch's own
        // snapshot, from the index of the keys' lengths, so a body of prose (most texts) costs a comparison of two
        // integers rather than a search of the keys' index (issue 44: a third of a batch's statement).
        finds.push(format!(
            "SELECT x.k, a.id, NULL::text, x.at FROM ({}) x JOIN assets a ON a.storage_key = x.v
              WHERE octet_length(x.v) BETWEEN (SELECT min(octet_length(storage_key)) FROM assets)
                                          AND (SELECT max(octet_length(storage_key)) FROM assets)
                AND NOT EXISTS (SELECT 1 FROM adopted_assets d WHERE d.asset_id = a.id)",
            keyed.join(" UNION ALL ")
        ));
    }
    let values = || searched.join(", ");
    // Not `num_nonnulls`: a function takes at most 100 arguments, and a table may have hundreds of columns. Not
    // `IS NOT NULL`: a composite with one NULL field is neither NULL nor NOT NULL, and its other fields are read
    // all the same.
    let any_present = || present.iter().map(|col| format!("NOT {col} IS NULL")).collect::<Vec<_>>().join(" OR ");
    if finds.is_empty() {
        // Nothing to join with the assets in the database: one scan of the range, each row sent as it is read,
        // not first copied for the parts that read it (a third of the server's time for a table of prose).
        let sql = match searched.is_empty() {
            true => "SELECT NULL::int, NULL::uuid, NULL::text, NULL::text, NULL::text[] WHERE false".to_owned(),
            false => format!(
                "SELECT NULL::int, NULL::uuid, NULL::text, r.ctid::text, ARRAY[{}]::text[]
                   FROM ONLY {} r WHERE r.ctid >= $1::tid AND r.ctid < $2::tid AND ({})",
                values(),
                group.heap,
                any_present()
            ),
        };
        return Statement { sql, paths, searched: searched_at, compared };
    }
    let texts = match searched.is_empty() {
        true => "SELECT NULL::int, NULL::uuid, NULL::text, NULL::text, NULL::text[] WHERE false".to_owned(),
        false => format!(
            "SELECT NULL::int, NULL::uuid, NULL::text, r.at::text, ARRAY[{}]::text[] FROM r WHERE {}",
            values(),
            any_present()
        ),
    };
    // Built here, not checked at compile time: the table and its columns are the application's, known only now.
    let sql = format!(
        "WITH r AS MATERIALIZED (SELECT ctid AS at, {} FROM ONLY {} WHERE ctid >= $1::tid AND ctid < $2::tid),
              found(k, id, spelling, at) AS ({})
         SELECT DISTINCT f.k, f.id, f.spelling, f.at::text, NULL::text[]
           FROM found f JOIN assets a ON a.id = f.id
         UNION ALL
         {texts}",
        selected.join(", "),
        group.heap,
        finds.join(" UNION ALL "),
    );
    Statement { sql, paths, searched: searched_at, compared }
}

/// The uuid-shaped strings in `text`, in every spelling ($3 and $4), as a lateral table of one column `id`.
fn ids_in(text: &str) -> String {
    format!(
        "LATERAL (SELECT m[1] FROM regexp_matches({text}, $3, 'g') m
                  UNION SELECT m[1] FROM regexp_matches({text}, $4, 'g') m) f(id)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::census::group::Column;
    use sqlx::postgres::types::Oid;

    /// A column at attribute `attnum`: `family` `uuid`, `text` or `json`, `shape` `scalar` or `array`.
    fn column(attnum: i16, name: &str, family: &str, shape: &str, json_paths: &[&str]) -> Column {
        Column {
            attnum,
            name: name.into(),
            family: family.into(),
            shape: shape.into(),
            json_paths: json_paths.iter().map(|p| (*p).to_owned()).collect(),
            reads: "both".into(),
            type_oid: 25,
        }
    }

    /// The columns of `heap` (already quoted, as the plan writes it) at the start of their scans.
    fn group(heap: &str, columns: Vec<Column>) -> Group {
        Group {
            relid: Oid(16_384),
            filenode: Some(Oid(16_384)),
            next_block: 0,
            heap: heap.into(),
            blocks: 100,
            batch_blocks: None,
            columns,
        }
    }

    #[test]
    fn uuid_columns_are_searched_as_their_text_scalar_or_array_in_one_scan() {
        let group = group(
            r#""public"."products""#,
            vec![column(2, "owner_id", "uuid", "scalar", &[]), column(3, "gallery", "uuid", "array", &[])],
        );
        let Statement { sql, paths, searched, compared } = statement(&group);
        insta::assert_snapshot!(sql);
        assert!(paths.is_empty());
        // Each searched for ids; neither compared with the storage keys.
        assert_eq!((searched, compared), (vec![0, 1], vec![]));
    }

    #[test]
    fn text_and_json_values_are_sent_a_row_at_a_time_and_text_is_compared_with_storage_keys() {
        let group = group(
            r#""public"."pages""#,
            vec![
                column(2, r#"title "alt""#, "text", "scalar", &[]),
                column(3, "tags", "text", "array", &[]),
                column(4, "meta", "json", "scalar", &[]),
                column(5, "history", "json", "array", &[]),
            ],
        );
        let Statement { sql, paths, searched, compared } = statement(&group);
        insta::assert_snapshot!(sql);
        assert!(paths.is_empty());
        // One value of each column in a row's texts, in the group's order.
        assert_eq!(searched, [0, 1, 2, 3]);
        // The scalar text is compared with the keys by the census, from the value it fetched.
        assert_eq!(compared, [0]);
    }

    #[test]
    fn with_nothing_to_join_in_the_database_a_batch_is_one_scan_of_its_range_sent_as_read() {
        let group = group(
            r#""public"."pages""#,
            vec![column(2, "title", "text", "scalar", &[]), column(4, "meta", "json", "scalar", &[])],
        );
        let Statement { sql, paths, searched, compared } = statement(&group);
        insta::assert_snapshot!(sql);
        assert!(paths.is_empty());
        assert_eq!((searched, compared), (vec![0, 1], vec![0]));
    }

    #[test]
    fn a_declared_source_finds_ids_off_its_paths_and_notes_mixed_case_spellings_on_them() {
        let group = group(
            r#""public"."documents""#,
            vec![
                column(2, "body", "json", "scalar", &["$.hero.id", "$.images[*]"]),
                column(3, "cover", "json", "scalar", &["$.id"]),
            ],
        );
        let Statement { sql, paths, searched, compared } = statement(&group);
        insta::assert_snapshot!(sql);
        // Each declared source's paths: $6 and $7, after the block range, the two uuid patterns and a whole id.
        assert_eq!(paths, [vec!["$.hero.id".to_owned(), "$.images[*]".to_owned()], vec!["$.id".to_owned()]]);
        assert!(searched.is_empty() && compared.is_empty(), "a declared document's ids are read in the database");
    }
}
