//! The key scan: which of our keys the application's records name as text (a key, a path, a URL in a text or JSON
//! column). Bytes no row knew have an id nobody holds, so a record can only ever name them by key: an adopted
//! asset whose key is named here is kept (invariant 13 for adopted bytes). The scan rides on the census's
//! batches, reading the same block range: a scalar value the id search fetches anyway is read for keys there
//! ([`super::scan::scan`]), and only arrays (element by element) and declared documents by a statement of its own
//! here. A column's scan that ends with one layout throughout covers it, and
//! forgets the keys of that column two scans in a row did not see. What it keeps in `named_keys` are spans
//! ([`KeyLayout::spans_in`]): a key is named when a span starts with it (`asset_sweeper_names_key`), so a text full
//! of keys costs a row per key written, not one per end the pattern allows. A row is written once, when a scan
//! first sees its pair; later scans append sightings ([`sight`]), so a cycle rewrites nothing the cycle before saw.

use std::collections::HashSet;
use std::sync::OnceLock;

use chrono::{DateTime, Utc};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use sqlx::{AssertSqlSafe, Connection, PgConnection};
use unicode_normalization::UnicodeNormalization;
use uuid::Uuid;

use super::group::{Group, Rows};
use super::relative::{self, Names};
use platform::keys::KeyLayout;
use platform::sql::quote_ident;

/// What a URL leaves as it is in a path: a prefix with a space is found in a URL as `%20`.
const IN_PATH: &AsciiSet = &NON_ALPHANUMERIC.remove(b'/').remove(b'-').remove(b'_').remove(b'.').remove(b'~');

/// The strings a text naming one of our keys must contain, compared as written: each managed prefix, as configured
/// and in Unicode's NFC and NFD, as written, with `+` for its spaces, percent-encoded as in a path and as a whole
/// (`/` as `%2F`, in a query string) in both cases of hex, with JSON's escaped slashes (`\/`, `\u002f`), and as HTML
/// writes it (`&` as `&amp;`, `/` as `&#47;`, `&#x2F;`, `&#x2f;` or `&sol;`). A text that spells the prefix otherwise
/// (an encoder escaping letters, `\u` escapes or character references of its other characters) is not read for
/// keys. Postgres searches a value once per needle (`strpos`, linear in the value), so a needle holding another is
/// left out: a value holding it holds the other.
fn prefilter(layout: &KeyLayout) -> Vec<String> {
    let mut needles: Vec<String> = Vec::new();
    for prefix in layout.prefixes() {
        let forms = [prefix.to_owned(), prefix.nfc().collect(), prefix.nfd().collect()];
        for needle in forms.iter().flat_map(|form| spellings(form)) {
            if !needles.contains(&needle) {
                needles.push(needle);
            }
        }
    }
    needles.iter().filter(|n| !needles.iter().any(|other| other != *n && n.contains(other.as_str()))).cloned().collect()
}

/// How URLs, JSON and HTML write `prefix`.
fn spellings(prefix: &str) -> Vec<String> {
    let encoded =
        [utf8_percent_encode(prefix, IN_PATH).to_string(), utf8_percent_encode(prefix, NON_ALPHANUMERIC).to_string()];
    let mut spellings = vec![
        prefix.to_owned(),
        prefix.replace(' ', "+"),
        prefix.replace('/', "\\/"),
        prefix.replace('/', "\\u002f"),
        prefix.replace('/', "\\u002F"),
    ];
    for e in encoded {
        spellings.push(lower_hex(&e));
        spellings.push(e);
    }
    let html = prefix.replace('&', "&amp;");
    spellings.extend(["/", "&#47;", "&#x2F;", "&#x2f;", "&sol;"].map(|slash| html.replace('/', slash)));
    spellings
}

/// `encoded` with its percent escapes' hex digits in lowercase.
fn lower_hex(encoded: &str) -> String {
    let mut out = String::with_capacity(encoded.len());
    let mut left = 0;
    for c in encoded.chars() {
        if c == '%' {
            left = 2;
            out.push(c);
        } else if left > 0 {
            left -= 1;
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Adopted keys a pass holds in memory to keep only the spans that name one of them; with more, every span is kept.
const ADOPTED_KEYS_HELD: i64 = 1_000_000;

/// The key scan of one pass: its layout, and which spans it keeps. A span matters only if it names an adopted
/// asset's key (nothing else asks `named_keys`), and only an asset adopted before a scan began can be covered by
/// it (`asset_sweeper_keys_unscanned`): so the keys adopted when they are read (at the pass's first span) are all a
/// scan under way then or begun later in the pass needs, and a text full of keys of ours costs a row per key of an
/// adopted asset it names, not one per key it names.
pub(super) struct KeyScan {
    pub(super) layout: KeyLayout,
    /// Read at the pass's first span.
    adopted: OnceLock<Adopted>,
}

/// The adopted keys, as one pass read them.
struct Adopted {
    /// Sorted bytewise; `None` when every span is kept: too many to hold, or an adoption was being written.
    keys: Option<Vec<String>>,
    /// Their file names, for the names relative to a root, however many they are (leading to the keys when those
    /// are held); `None` when an adoption was being written, and every such name is asked of the database.
    names: Option<Names>,
    /// When they were read: a scan that begins after this is dated from it (its proof covers the adoptions before
    /// its start, and a later adoption's key is not among these).
    since: DateTime<Utc>,
}

impl KeyScan {
    pub(super) fn new(layout: &KeyLayout) -> Self {
        KeyScan { layout: layout.clone(), adopted: OnceLock::new() }
    }

    /// When the adopted keys were read, once they were.
    pub(super) fn since(&self) -> Option<DateTime<Utc>> {
        self.adopted.get().map(|a| a.since)
    }

    /// Reads the adopted keys under a `SHARE` lock taken without waiting, so no adoption is half written: one written
    /// later is dated after `since`. When the lock is held elsewhere (a reconciliation adopting), every span is kept
    /// for this pass.
    async fn load(conn: &mut PgConnection) -> Result<Adopted, sqlx::Error> {
        let mut tx = conn.begin().await?;
        // The transaction's start, by the database's clock: whatever was adopted before it is read below.
        let since = sqlx::query_scalar!(r#"SELECT now() AS "now!""#).fetch_one(&mut *tx).await?;
        // Under the session's own statement timeout, not the batch limit the census reads under: a large bucket's
        // keys take longer to read than a tight limit allows, and a batch cut short would only read them again.
        sqlx::raw_sql("SET LOCAL statement_timeout TO DEFAULT").execute(&mut *tx).await?;
        // Through the owner's function: the lock's mode needs rights on the table the sweep's role must not have.
        let locked = sqlx::query!("SELECT asset_sweeper_lock_adoptions()").execute(&mut *tx).await;
        if let Err(e) = locked {
            return if matches!(&e, sqlx::Error::Database(db) if db.code().as_deref() == Some("55P03")) {
                tx.rollback().await?;
                Ok(Adopted { keys: None, names: None, since })
            } else {
                Err(e)
            };
        }
        let mut keys = sqlx::query_scalar!("SELECT storage_key FROM adopted_assets LIMIT $1", ADOPTED_KEYS_HELD + 1)
            .fetch_all(&mut *tx)
            .await?;
        // Past the keys a pass holds, their file names still filter the names relative to a root (a hash and a bit
        // a name), where dropping the filter sent every short value of the schema to the database (8x a cycle).
        let held = keys.len() as i64 <= ADOPTED_KEYS_HELD;
        let file_names = if held {
            Vec::new()
        } else {
            sqlx::query_scalar!(r#"SELECT DISTINCT file_name AS "file_name!" FROM adopted_assets"#)
                .fetch_all(&mut *tx)
                .await?
        };
        tx.commit().await?;
        // An adoption committed from here on is dated after `since`: the test of the dating writes one here.
        fail::fail_point!("census::keys_read");
        if !held {
            return Ok(Adopted { keys: None, names: Some(Names::filtering(&file_names)), since });
        }
        keys.sort_unstable();
        let names = Names::resolving(&keys);
        Ok(Adopted { keys: Some(keys), names: Some(names), since })
    }

    /// The adopted keys as this pass read them (at its first batch that asks).
    async fn adopted(&self, conn: &mut PgConnection) -> Result<&Adopted, sqlx::Error> {
        if self.adopted.get().is_none() {
            let adopted = Self::load(&mut *conn).await?;
            // Readers are given keys already read ([`Self::read_before_readers`]); were two to read them at once,
            // the first kept is the one every batch uses, and its date is the one the scan's proof takes.
            let _ = self.adopted.set(adopted);
        }
        Ok(self.adopted.get().expect("set above"))
    }

    /// Reads the adopted keys now unless this pass has: before a round hands this scan to other readers.
    pub(super) async fn read_before_readers(&self, conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        self.adopted(conn).await.map(|_| ())
    }

    /// Whether names relative to a root are looked for in this pass: unless no key was adopted when it read them.
    pub(super) async fn reads_relative(&self, conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
        // The census benchmark's baseline: the same cycle, names relative to a root not read.
        fail::fail_point!("census::relative_names", |_| Ok(false));
        Ok(self.adopted(conn).await?.names.as_ref().is_none_or(|names| !names.is_empty()))
    }

    /// Adds to `found` what `value` (of the column `attnum`) names relative to a root ([`relative::each_candidate`],
    /// [`Names::resolve`]), passing over the names whose file name no adopted key has. Call only after
    /// [`Self::reads_relative`] said yes.
    pub(super) fn relative_in(&self, value: &str, json: bool, attnum: i16, found: &mut relative::Found) {
        let Some(adopted) = self.adopted.get() else { return };
        let keys = adopted.keys.as_deref();
        match adopted.names.as_ref() {
            Some(names) => relative::each_candidate(
                value,
                json,
                |name| names.may_end(name),
                |name| names.resolve(keys, name, attnum, found),
            ),
            None => relative::each_candidate(
                value,
                json,
                |_| true,
                |name| {
                    found.names.insert((name.to_owned(), attnum));
                },
            ),
        }
    }

    /// Keeps what one batch of the table `relid` found named, as seen now, in one statement ([`sight`]): each
    /// (span, column) pair of `named` that names an adopted key, and each adopted key `relatives` names relative
    /// to a root. Answers how many pairs.
    pub(super) async fn note(
        &self,
        conn: &mut PgConnection,
        relid: sqlx::postgres::types::Oid,
        named: HashSet<(String, i16)>,
        relatives: relative::Found,
    ) -> Result<u64, sqlx::Error> {
        if named.is_empty() && relatives.is_empty() {
            return Ok(0);
        }
        let held = self.adopted(&mut *conn).await?.keys.as_deref();
        let keeps = |span: &str| held.is_none_or(|keys| names_any(keys, span.as_bytes()));
        let whole: relative::Pairs<&str> =
            named.iter().filter(|(span, _)| keeps(span)).map(|(span, attnum)| (span.as_str(), *attnum)).unzip();
        let (relative, names) = relatives.split(held);
        if whole.0.is_empty() && relative.0.is_empty() && names.0.is_empty() {
            return Ok(0);
        }
        sight(conn, relid, Sighted { whole, relative, names }).await
    }
}

/// What one batch saw named: keys named whole (spans), keys named relative to a root resolved in the census, and
/// names relative to a root the database resolves; each with its column.
struct Sighted<'k> {
    whole: relative::Pairs<&'k str>,
    relative: relative::Pairs<&'k str>,
    names: relative::Pairs<String>,
}

/// Keeps each (key, column) pair of the table `relid` `sighted` as seen now, in one statement and one commit for a
/// batch: a pair no scan saw before is written, and every pair is sighted, a hash in one appended row per column
/// and way, so a scan rewrites nothing it saw the scan before (the forgetting reads the sightings: [`record`]).
/// The names left to the database are resolved by the index on the adopted keys' file names: each adopted key
/// a name is the end of, after a `/`. A pair listed twice is written once (`DO NOTHING`) and sighted twice, which
/// costs a hash. Answers how many pairs.
async fn sight(
    conn: &mut PgConnection,
    relid: sqlx::postgres::types::Oid,
    sighted: Sighted<'_>,
) -> Result<u64, sqlx::Error> {
    let pairs = sqlx::query_scalar!(
        r#"WITH named AS (
               SELECT k, a, false AS r FROM unnest($2::text[], $3::int2[]) AS t(k, a)
               UNION ALL
               SELECT k, a, true FROM unnest($4::text[], $5::int2[]) AS t(k, a)
               UNION ALL
               SELECT d.storage_key, c.attnum, true
                 FROM unnest($6::text[], $7::int2[]) AS c(name, attnum)
                 JOIN adopted_assets d ON d.file_name = substring(c.name FROM '[^/]*$')
                WHERE asset_sweeper_ends_key(d.storage_key, c.name)
           ),
           written AS (
               INSERT INTO named_keys (storage_key, relid, attnum, seen_at, relative)
               SELECT k, $1, a, now(), r FROM named
               ON CONFLICT DO NOTHING
           ),
           sighted AS (
               INSERT INTO named_sightings (relid, attnum, relative, keys)
               SELECT $1, a, r, array_agg(hashtextextended(k, 0)) FROM named GROUP BY a, r
               RETURNING cardinality(keys) AS pairs
           )
           SELECT coalesce(sum(pairs), 0)::int8 AS "pairs!" FROM sighted"#,
        relid,
        &sighted.whole.0 as &[&str],
        &sighted.whole.1,
        &sighted.relative.0 as &[&str],
        &sighted.relative.1,
        &sighted.names.0,
        &sighted.names.1,
    )
    .fetch_one(conn)
    .await?;
    Ok(u64::try_from(pairs).unwrap_or(0))
}

/// Whether one of `keys` (sorted bytewise) is a prefix of `span`. Logarithmic: the greatest key not above `span` is
/// a prefix of it, or every key that is shares no more with it than that key does, so the search goes on with that
/// common part, which is shorter each time.
fn names_any(keys: &[String], span: &[u8]) -> bool {
    let mut probe = span;
    loop {
        let below = keys.partition_point(|k| k.as_bytes() <= probe);
        let Some(key) = below.checked_sub(1).map(|i| keys[i].as_bytes()) else { return false };
        if probe.starts_with(key) {
            return true;
        }
        let common = key.iter().zip(probe).take_while(|(a, b)| a == b).count();
        if common == 0 {
            return false;
        }
        probe = &probe[..common];
    }
}

/// What batches saw that the census writes down beside what they found: ids at a declared path spelled otherwise
/// (for the recheck) and keys of ours named (for the key scan). Kept apart from the reading, so a batch read on a
/// replica, or on a reader of its own, is written by the census's own connection to the primary, once a round.
#[derive(Default)]
pub(super) struct Noted {
    /// Each id and the spelling it was found in.
    pub(super) spellings: (Vec<Uuid>, Vec<String>),
    /// Spans naming keys of ours, with their columns.
    pub(super) named: HashSet<(String, i16)>,
    /// Names relative to a root, with their columns.
    pub(super) relatives: super::relative::Found,
}

impl Noted {
    /// Adds what another range of the same table noted.
    pub(super) fn merge(&mut self, more: Noted) {
        self.spellings.0.extend(more.spellings.0);
        self.spellings.1.extend(more.spellings.1);
        self.named.extend(more.named);
        self.relatives.keys.extend(more.relatives.keys);
        self.relatives.names.extend(more.relatives.names);
    }

    /// Writes it down for the table `relid`: the spellings in one statement, the names by the pass's key scan.
    pub(super) async fn write(
        self,
        conn: &mut PgConnection,
        relid: sqlx::postgres::types::Oid,
        keys: Option<&KeyScan>,
    ) -> Result<(), sqlx::Error> {
        if let Some(keys) = keys {
            keys.note(&mut *conn, relid, self.named, self.relatives).await?;
        }
        let (ids, spellings) = self.spellings;
        if !ids.is_empty() {
            sqlx::query!(
                "INSERT INTO asset_id_spellings (asset_id, spelling) SELECT * FROM unnest($1::uuid[], $2::text[])
                 ON CONFLICT DO NOTHING",
                &ids,
                &spellings,
            )
            .execute(conn)
            .await?;
        }
        Ok(())
    }
}

/// Reads the text and JSON columns of `rows` the id search does not fetch whole and notes each key of ours they
/// name, with its column, in `noted`. Only values holding a managed prefix (in any of its spellings:
/// [`prefilter`]) leave the database. Run by [`super::scan::scan`], in the batch's transaction, once the columns'
/// types are confirmed.
pub(super) async fn read(
    conn: &mut PgConnection,
    group: &Group,
    rows: Rows,
    keys: &KeyScan,
    noted: &mut Noted,
) -> Result<(), sqlx::Error> {
    let Some(sql) = statement(group) else { return Ok(()) };
    let relative = keys.reads_relative(&mut *conn).await?;
    let (from, to) = rows.bounds();
    let values: Vec<(i16, String)> = sqlx::query_as(AssertSqlSafe(sql))
        .bind(from)
        .bind(to)
        .bind(prefilter(&keys.layout))
        .bind(relative)
        .persistent(false)
        .fetch_all(&mut *conn)
        .await?;
    let mut reader = keys.layout.span_reader();
    for (attnum, value) in values {
        noted.named.extend(reader.spans_in(&value).into_iter().map(|span| (span, attnum)));
        if relative {
            let json = group.columns.iter().any(|c| c.attnum == attnum && c.family == "json");
            keys.relative_in(&value, json, attnum, &mut noted.relatives);
        }
    }
    Ok(())
}

/// The key scan's statement over `group`'s text and JSON columns the id search does not fetch whole (arrays,
/// declared documents): `$1` and `$2` are the block range (`ctid`s), `$3` every spelling of the managed prefixes
/// ([`prefilter`]), `$4` whether names relative to a root are read (then a value no longer than a key passes too,
/// since it may be one); each row is a column's attribute number and one value holding a prefix. `None` when the
/// group has none. A pure function of the group, so its text can be
/// read in a test.
fn statement(group: &Group) -> Option<String> {
    // A scalar written out whole is read for keys where the id search fetched it.
    let read_here = |c: &&super::group::Column| c.key_scanned() && !c.keys_read_with_ids();
    let texts: Vec<(i16, String)> = group
        .columns
        .iter()
        .filter(read_here)
        .map(|c| {
            let col = format!("r.{}", quote_ident(&c.name));
            // A string array's elements one by one, so a key in one is read as written (not as the array quotes it).
            let value = match (c.family.as_str(), c.shape.as_str()) {
                ("text" | "json", "array") => format!("unnest({col})::text"),
                (family, _) => super::text_of(&col, family),
            };
            (c.attnum, format!("SELECT {}::int2 AS a, {value} AS v FROM r", c.attnum))
        })
        .collect();
    if texts.is_empty() {
        return None;
    }
    let selected: Vec<String> = group.columns.iter().filter(read_here).map(|c| quote_ident(&c.name)).collect();
    // Built here, not checked at compile time: the table and its columns are the application's, known only now.
    let sql = format!(
        "WITH r AS MATERIALIZED (SELECT {} FROM ONLY {} WHERE ctid >= $1::tid AND ctid < $2::tid)
         SELECT x.a, x.v FROM ({}) x
          WHERE x.v IS NOT NULL
            AND (($4 AND octet_length(x.v) <= 1024) OR EXISTS (SELECT 1 FROM unnest($3::text[]) p WHERE strpos(x.v, p) > 0))",
        selected.join(", "),
        group.heap,
        texts.into_iter().map(|(_, s)| s).collect::<Vec<_>>().join(" UNION ALL "),
    );
    Some(sql)
}

/// After a batch ended at the group's cursor (already recorded): a scan's first batch dates the layout it reads
/// with, a batch with another layout spoils the scan, and a scan that ended (`finished`) with one layout
/// throughout covers its columns as of its start. It forgets their keys seen by neither it nor the scan before
/// it: an update can move a row into a block a scan has read, and one scan missing a name must not forget it. `layout` is `None`
/// when reconciliation is not configured: nothing is covered then.
pub(super) async fn record(
    conn: &mut PgConnection,
    group: &Group,
    first: bool,
    finished: bool,
    layout: Option<&KeyLayout>,
) -> Result<(), sqlx::Error> {
    let attnums: Vec<i16> = group.columns.iter().filter(|c| c.key_scanned()).map(|c| c.attnum).collect();
    if attnums.is_empty() {
        return Ok(());
    }
    let signature = layout.map(KeyLayout::signature);
    sqlx::query!(
        "UPDATE census_columns
            SET keys_layout = CASE WHEN $3 THEN $4 WHEN keys_layout IS DISTINCT FROM $4 THEN NULL ELSE keys_layout END
          WHERE relid = $1 AND attnum = ANY ($2)",
        group.relid,
        &attnums,
        first,
        signature,
    )
    .execute(&mut *conn)
    .await?;
    if !finished {
        return Ok(());
    }
    sqlx::query!(
        "WITH before AS (
             SELECT relid, attnum, keys_proven_at FROM census_columns
              WHERE relid = $1 AND attnum = ANY ($2) AND keys_layout IS NOT NULL AND keys_layout = $3
                AND scan_started_at IS NOT NULL
         ),
         covered AS (
             UPDATE census_columns c SET keys_proven_at = c.scan_started_at
               FROM before b
              WHERE c.relid = b.relid AND c.attnum = b.attnum
             RETURNING c.relid, c.attnum, b.keys_proven_at AS previous, c.keys_proven_at AS started
         ),
         sighted AS (
             SELECT DISTINCT s.relid, s.attnum, s.relative, h
               FROM named_sightings s JOIN covered c ON s.relid = c.relid AND s.attnum = c.attnum,
                    unnest(s.keys) AS h
              WHERE s.seen_at >= c.previous
         ),
         forgotten AS (
             DELETE FROM named_keys n USING covered c
              WHERE n.relid = c.relid AND n.attnum = c.attnum AND n.seen_at < c.previous
                AND NOT EXISTS (SELECT 1 FROM sighted s
                                 WHERE s.relid = n.relid AND s.attnum = n.attnum AND s.relative = n.relative
                                   AND s.h = hashtextextended(n.storage_key, 0))
         )
         -- What the next scan's end reads: this scan's sightings; the previous scan's are read for the last time.
         DELETE FROM named_sightings s USING covered c
          WHERE s.relid = c.relid AND s.attnum = c.attnum AND s.seen_at < c.started",
        group.relid,
        &attnums,
        signature,
    )
    .execute(conn)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::group::Column;
    use super::*;
    use sqlx::postgres::types::Oid;

    fn group(columns: Vec<Column>) -> Group {
        Group {
            relid: Oid(16_384),
            filenode: Some(Oid(16_384)),
            next_block: 0,
            heap: r#""public"."pages""#.into(),
            blocks: 100,
            batch_blocks: None,
            columns,
        }
    }

    fn column(attnum: i16, name: &str, family: &str, shape: &str) -> Column {
        Column {
            attnum,
            name: name.into(),
            family: family.into(),
            shape: shape.into(),
            json_paths: Vec::new(),
            reads: "both".into(),
            type_oid: 25,
        }
    }

    #[test]
    fn the_key_scan_reads_arrays_and_declared_documents_that_hold_a_prefix_and_no_scalar_the_id_search_fetched() {
        let mut declared = column(6, "body", "json", "scalar");
        declared.json_paths = vec!["$.hero".into()];
        let group = group(vec![
            column(2, "owner_id", "uuid", "scalar"),
            column(3, r#"title "alt""#, "text", "scalar"),
            column(4, "tags", "text", "array"),
            column(5, "meta", "json", "scalar"),
            declared,
        ]);
        // Each value named by its column's attribute number; an array's elements one by one.
        insta::assert_snapshot!(statement(&group).expect("a statement"));
        let scalars = group.columns.iter().filter(|c| c.keys_read_with_ids()).map(|c| c.attnum).collect::<Vec<_>>();
        assert_eq!(scalars, vec![3, 5], "read for keys where the id search fetched them");
    }

    #[test]
    fn a_table_of_scalars_the_id_search_fetches_has_no_key_scan_statement() {
        let group = group(vec![column(2, "title", "text", "scalar"), column(3, "meta", "json", "scalar")]);
        assert_eq!(statement(&group), None);
    }

    #[test]
    fn a_span_is_kept_when_an_adopted_key_starts_it_however_many_keys_sort_between() {
        let mut keys: Vec<String> = [
            "uploads/a/abc",
            "uploads/a/abc-x",
            "uploads/a/abc.jpg",
            "uploads/a/abd",
            "uploads/b/z.png",
            "uploads/a/ab",
        ]
        .map(String::from)
        .to_vec();
        keys.sort_unstable();
        let span = |s: &str| s.as_bytes().to_vec();
        // Keys sorting between a prefix key and the span ("abc-x", "abc.jpg" before "abc.jpg?w=1") are passed over.
        assert!(names_any(&keys, &span("uploads/a/abc.jpg?w=1\" alt=")));
        assert!(names_any(&keys, &span("uploads/a/abc.png")), "uploads/a/abc is a prefix");
        assert!(names_any(&keys, &span("uploads/a/abzzz")), "uploads/a/ab is a prefix");
        assert!(!names_any(&keys, &span("uploads/a/a")));
        assert!(!names_any(&keys, &span("uploads/c/abc")));
        assert!(!names_any(&keys, &span("")));
        assert!(!names_any(&[], &span("uploads/a/abc")));
        // Against a linear search, on every cut of some texts.
        for text in ["uploads/a/abc.jpg?x", "uploads/a/abd/e", "uploads/b/z.png.png", "uploads/a/abc-y"] {
            for cut in 0..=text.len() {
                let probe = &text.as_bytes()[..cut];
                let linear = keys.iter().any(|k| probe.starts_with(k.as_bytes()));
                assert_eq!(names_any(&keys, probe), linear, "{:?}", String::from_utf8_lossy(probe));
            }
        }
    }

    #[test]
    fn a_table_of_uuid_columns_alone_has_no_key_scan() {
        let group = group(vec![column(2, "owner_id", "uuid", "scalar"), column(3, "gallery", "uuid", "array")]);
        assert_eq!(statement(&group), None);
    }

    #[test]
    fn a_prefix_is_searched_for_in_every_spelling_a_url_or_document_gives_it() {
        let layout = KeyLayout::new("Fotos/My Uploads/", r"Fotos/My Uploads/.+").expect("a layout");
        let needles = prefilter(&layout);
        for spelling in [
            "Fotos/My Uploads/",
            "Fotos/My+Uploads/",
            "Fotos/My%20Uploads/",
            "Fotos%2FMy%20Uploads%2F",
            "Fotos%2fMy%20Uploads%2f",
            "Fotos\\/My Uploads\\/",
            "Fotos\\u002fMy Uploads\\u002f",
            "Fotos&#47;My Uploads&#47;",
            "Fotos&#x2F;My Uploads&#x2F;",
            "Fotos&#x2f;My Uploads&#x2f;",
            "Fotos&sol;My Uploads&sol;",
        ] {
            assert!(needles.iter().any(|n| n == spelling), "{spelling}: {needles:?}");
        }
    }

    #[test]
    fn a_prefix_is_searched_for_in_both_normal_forms_and_as_html_escapes_an_ampersand() {
        let layout = KeyLayout::new("R&D/Caf\u{e9}/", r"R&D/Caf\u{e9}/.+").expect("a layout");
        let needles = prefilter(&layout);
        for spelling in [
            "R&D/Caf\u{e9}/",
            "R&D/Cafe\u{301}/",
            "R%26D%2FCafe%CC%81%2F",
            "R%26D%2fCaf%c3%a9%2f",
            "R&amp;D/Cafe\u{301}/",
            "R&amp;D&#x2F;Caf\u{e9}&#x2F;",
        ] {
            assert!(needles.iter().any(|n| n == spelling), "{spelling}: {needles:?}");
        }
    }

    #[test]
    fn every_spelling_of_a_prefix_is_read_for_the_key_it_starts() {
        let layout = KeyLayout::new("R&D/Caf\u{e9} Menus/", r"R&D/Caf\u{e9} Menus/[a-z]+\.png").expect("a layout");
        let key = "R&D/Caf\u{e9} Menus/lunch.png".to_owned();
        for form in ["R&D/Caf\u{e9} Menus/", "R&D/Cafe\u{301} Menus/"] {
            for spelling in spellings(form) {
                let text = format!("<p>see {spelling}lunch.png</p>");
                assert!(layout.named_in(&text).contains(&key), "{text}: {:?}", layout.named_in(&text));
            }
        }
    }

    #[test]
    fn a_needle_holding_another_is_left_out() {
        let layout = KeyLayout::new("uploads/, uploads/avatars/, thumbs/", r".+").expect("a layout");
        let needles = prefilter(&layout);
        assert!(needles.iter().any(|n| n == "uploads/") && needles.iter().any(|n| n == "thumbs&sol;"), "{needles:?}");
        assert!(!needles.iter().any(|n| n.contains("avatars")), "{needles:?}");
        let whole = KeyLayout::new("*", r".+").expect("a layout");
        assert_eq!(prefilter(&whole), vec![String::new()]);
    }
}
