//! The key scan: which of our keys the application's records name as text (a key, a path, a URL in a text or JSON
//! column). Bytes no row knew have an id nobody holds, so a record can only ever name them by key: an adopted
//! asset whose key is named here is kept (invariant 13 for adopted bytes). The scan rides on the census's
//! batches, reading the same block range; a column's scan that ends with one layout throughout covers it, and
//! forgets the keys of that column two scans in a row did not see. What it keeps in `named_keys` are spans
//! ([`KeyLayout::spans_in`]): a key is named when a span starts with it (`asset_sweeper_names_key`), so a text full
//! of keys costs a row per key written, not one per end the pattern allows.

use std::collections::HashSet;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use sqlx::{AssertSqlSafe, PgConnection};
use unicode_normalization::UnicodeNormalization;

use super::scan::{Group, Rows};
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

/// Reads the text and JSON columns of `rows` and notes each key of ours they name, with its column. Only values
/// holding a managed prefix (in any of its spellings: [`prefilter`]) leave the database. Answers how many (span,
/// column) pairs.
pub(super) async fn scan(
    conn: &mut PgConnection,
    group: &Group,
    rows: Rows,
    layout: &KeyLayout,
) -> Result<u64, sqlx::Error> {
    let Some(sql) = statement(group) else { return Ok(0) };
    let (from, to) = rows.bounds();
    let values: Vec<(i16, String)> = sqlx::query_as(AssertSqlSafe(sql))
        .bind(from)
        .bind(to)
        .bind(prefilter(layout))
        .persistent(false)
        .fetch_all(&mut *conn)
        .await?;
    let mut named: HashSet<(String, i16)> = HashSet::new();
    for (attnum, value) in values {
        named.extend(layout.spans_in(&value).into_iter().map(|span| (span, attnum)));
    }
    note(conn, group.relid, named).await
}

/// Keeps each (span, column) pair of the table `relid` as seen now. Answers how many.
pub(super) async fn note(
    conn: &mut PgConnection,
    relid: sqlx::postgres::types::Oid,
    named: HashSet<(String, i16)>,
) -> Result<u64, sqlx::Error> {
    if named.is_empty() {
        return Ok(0);
    }
    let (keys, attnums): (Vec<String>, Vec<i16>) = named.into_iter().unzip();
    sqlx::query!(
        "INSERT INTO named_keys (storage_key, relid, attnum, seen_at)
         SELECT k, $1, a, now() FROM unnest($2::text[], $3::int2[]) AS t(k, a)
         ON CONFLICT (storage_key, relid, attnum) DO UPDATE SET seen_at = EXCLUDED.seen_at",
        relid,
        &keys,
        &attnums,
    )
    .execute(conn)
    .await?;
    Ok(keys.len() as u64)
}

/// The key scan's statement over `group`'s text and JSON columns: `$1` and `$2` are the block range (`ctid`s), `$3`
/// every spelling of the managed prefixes ([`prefilter`]); each row is a column's attribute number and one value
/// holding a prefix. `None` when the group has only uuid columns. A pure function of the group, so its text can be
/// read in a test.
fn statement(group: &Group) -> Option<String> {
    let texts: Vec<(i16, String)> = group
        .columns
        .iter()
        .filter(|c| c.key_scanned())
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
    let selected: Vec<String> =
        group.columns.iter().filter(|c| c.key_scanned()).map(|c| quote_ident(&c.name)).collect();
    // Built here, not checked at compile time: the table and its columns are the application's, known only now.
    let sql = format!(
        "WITH r AS MATERIALIZED (SELECT {} FROM ONLY {} WHERE ctid >= $1::tid AND ctid < $2::tid)
         SELECT x.a, x.v FROM ({}) x
          WHERE x.v IS NOT NULL AND EXISTS (SELECT 1 FROM unnest($3::text[]) p WHERE strpos(x.v, p) > 0)",
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
             RETURNING c.relid, c.attnum, b.keys_proven_at AS previous
         )
         DELETE FROM named_keys n USING covered c
          WHERE n.relid = c.relid AND n.attnum = c.attnum AND n.seen_at < c.previous",
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
    use super::super::scan::Column;
    use super::*;
    use sqlx::postgres::types::Oid;

    fn group(columns: Vec<Column>) -> Group {
        Group {
            relid: Oid(16_384),
            filenode: Some(Oid(16_384)),
            next_block: 0,
            heap: r#""public"."pages""#.into(),
            blocks: 100,
            columns,
        }
    }

    fn column(attnum: i16, name: &str, family: &str, shape: &str) -> Column {
        Column { attnum, name: name.into(), family: family.into(), shape: shape.into(), json_paths: Vec::new() }
    }

    #[test]
    fn the_key_scan_reads_text_and_json_values_that_hold_a_prefix_and_no_uuid_column() {
        let group = group(vec![
            column(2, "owner_id", "uuid", "scalar"),
            column(3, r#"title "alt""#, "text", "scalar"),
            column(4, "tags", "text", "array"),
            column(5, "meta", "json", "scalar"),
        ]);
        let expected = [
            r#"WITH r AS MATERIALIZED (SELECT "title ""alt""", "tags", "meta" FROM ONLY "public"."pages" WHERE ctid >= $1::tid AND ctid < $2::tid)"#,
            // Each value named by its column's attribute number; an array's elements one by one.
            r#"         SELECT x.a, x.v FROM (SELECT 3::int2 AS a, r."title ""alt"""::text AS v FROM r UNION ALL SELECT 4::int2 AS a, unnest(r."tags")::text AS v FROM r UNION ALL SELECT 5::int2 AS a, r."meta"::text AS v FROM r) x"#,
            r#"          WHERE x.v IS NOT NULL AND EXISTS (SELECT 1 FROM unnest($3::text[]) p WHERE strpos(x.v, p) > 0)"#,
        ]
        .join("\n");
        assert_eq!(statement(&group).as_deref(), Some(expected.as_str()));
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
