//! One census batch: a range of one table's blocks, read once for all the columns that stand there, searched for
//! asset ids (and storage keys), with the mixed-case spellings at declared paths noted for the recheck.

use sqlx::{AssertSqlSafe, PgConnection};
use uuid::Uuid;

use migrator::UUID_IN_TEXT;
use platform::sql::quote_ident;

/// Columns of one table at the same point of their scans: read together, by one statement per batch.
pub(super) struct Group {
    pub(super) relid: sqlx::postgres::types::Oid,
    /// The table's file when the work was planned: a scan that starts now is of this file.
    pub(super) filenode: Option<sqlx::postgres::types::Oid>,
    pub(super) next_block: i64,
    /// `schema.table` of the table holding the rows, quoted.
    pub(super) heap: String,
    /// Its size in blocks now.
    pub(super) blocks: i64,
    pub(super) columns: Vec<Column>,
}

pub(super) struct Column {
    pub(super) attnum: i16,
    pub(super) name: String,
    pub(super) family: String,
    pub(super) shape: String,
    pub(super) json_paths: Vec<String>,
}

/// Failpoint `census::block_limit`: a batch of more blocks than its argument is cancelled by the server's own
/// statement timeout, as a batch of oversized documents would be.
fn injected_block_limit() -> Option<i64> {
    fail::fail_point!("census::block_limit", |limit: Option<String>| limit.and_then(|l| l.parse().ok()));
    None
}

/// Reads blocks `[group.next_block, end)` of the group's table; for each column, in order, one asset it holds.
/// Mixed-case spellings of ids at a declared path are noted for the recheck, not found.
pub(super) async fn scan(conn: &mut PgConnection, group: &Group, end: i64) -> Result<Vec<Option<Uuid>>, sqlx::Error> {
    if injected_block_limit().is_some_and(|limit| end - group.next_block > limit) {
        let timed_out = sqlx::raw_sql("SET statement_timeout = 1; SELECT pg_sleep(1)").execute(&mut *conn).await;
        sqlx::raw_sql("RESET statement_timeout").execute(&mut *conn).await?;
        timed_out?;
    }
    let (sql, paths) = statement(group);
    let mut query = sqlx::query_as::<_, (i32, Uuid, Option<String>)>(AssertSqlSafe(sql))
        .bind(format!("({},0)", group.next_block))
        .bind(format!("({end},0)"))
        .bind(UUID_IN_TEXT);
    for p in paths {
        query = query.bind(p);
    }
    let rows = query.persistent(false).fetch_all(&mut *conn).await?;
    let mut found = vec![None; group.columns.len()];
    let (mut ids, mut spellings) = (Vec::new(), Vec::new());
    for (k, id, spelling) in rows {
        match spelling {
            Some(spelling) => {
                ids.push(id);
                spellings.push(spelling);
            }
            None => {
                if let Some(slot) = usize::try_from(k).ok().and_then(|k| found.get_mut(k)) {
                    *slot = Some(id);
                }
            }
        }
    }
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
    Ok(found)
}

/// One batch's statement over `group`'s columns, and the declared paths it binds: `$1` and `$2` are the block range
/// (`ctid`s), `$3` the uuid pattern ([`UUID_IN_TEXT`]), `$4`… each declared JSONB source's paths, in the group's
/// column order. Each row found is `(k, id, spelling)`: `k` the column's position in the group, `spelling` set for
/// a mixed-case id at a declared path. A pure function of the group, so its text can be read in a test.
pub(super) fn statement(group: &Group) -> (String, Vec<Vec<String>>) {
    let selected: Vec<String> = group.columns.iter().map(|c| quote_ident(&c.name)).collect();
    let mut finds = Vec::new();
    // Values searched for uuid-shaped strings, and text values compared with storage keys (an adopted asset's key
    // is a name, not a finding: the key scan keeps it for that record): gathered from every
    // column, so each search and each join with `assets` runs once per batch, not once per column. A hyphenated
    // uuid has four hyphens: a value without them is not searched at all (LIKE costs a fraction of the search).
    let (mut searched, mut keyed) = (Vec::new(), Vec::new());
    // $1, $2: the block range; $3: the uuid pattern; $4…: each declared source's paths.
    let mut paths: Vec<Vec<String>> = Vec::new();
    for (k, column) in group.columns.iter().enumerate() {
        let col = format!("r.{}", quote_ident(&column.name));
        match column.family.as_str() {
            "uuid" if column.shape == "array" => {
                finds.push(format!("SELECT {k}, e::uuid, NULL::text FROM r, unnest({col}) e"));
            }
            "uuid" => finds.push(format!("SELECT {k}, {col}::uuid, NULL::text FROM r WHERE {col} IS NOT NULL")),
            _ if !column.json_paths.is_empty() => {
                paths.push(column.json_paths.clone());
                let n = paths.len() + 3;
                // The strings the declared paths select, as the recheck reads them (a filter on strings).
                let at_paths = format!(
                    "unnest(${n}::text[]) p, jsonb_path_query({col}, (p || ' ? (@.type() == \"string\")')::jsonpath, '{{}}', true) v"
                );
                // Ids at a declared path are references; every other asset id in the document is a finding.
                finds.push(format!(
                    "SELECT {k}, m[1]::uuid, NULL::text FROM r, regexp_matches({col}::text, $3, 'g') m
                      WHERE {col}::text LIKE '%-%-%-%-%'
                        AND lower(m[1]) NOT IN (SELECT lower(v #>> '{{}}') FROM {at_paths})"
                ));
                // An id at a path in mixed case is a reference the recheck finds once its spelling is noted.
                finds.push(format!(
                    "SELECT {k}, (v #>> '{{}}')::uuid, v #>> '{{}}' FROM r, {at_paths}
                      WHERE v #>> '{{}}' ~ ('^' || $3 || '$')
                        AND v #>> '{{}}' NOT IN (lower(v #>> '{{}}'), upper(v #>> '{{}}'))"
                ));
            }
            family => {
                searched.push(format!("SELECT {k} AS k, {col}::text AS v FROM r WHERE {col} IS NOT NULL"));
                if family == "text" {
                    let texts =
                        if column.shape == "array" { format!("unnest({col})::text") } else { format!("{col}::text") };
                    keyed.push(format!("SELECT {k} AS k, {texts} AS v FROM r"));
                }
            }
        }
    }
    if !searched.is_empty() {
        finds.push(format!(
            "SELECT x.k, m[1]::uuid, NULL::text FROM ({}) x, regexp_matches(x.v, $3, 'g') m
              WHERE x.v LIKE '%-%-%-%-%'",
            searched.join(" UNION ALL ")
        ));
    }
    if !keyed.is_empty() {
        finds.push(format!(
            "SELECT x.k, a.id, NULL::text FROM ({}) x JOIN assets a ON a.storage_key = x.v
              WHERE NOT EXISTS (SELECT 1 FROM adopted_assets d WHERE d.asset_id = a.id)",
            keyed.join(" UNION ALL ")
        ));
    }
    // Built here, not checked at compile time: the table and its columns are the application's, known only now.
    let sql = format!(
        "WITH r AS MATERIALIZED (SELECT {} FROM ONLY {} WHERE ctid >= $1::tid AND ctid < $2::tid),
              found(k, id, spelling) AS ({})
         SELECT DISTINCT ON (f.k, f.spelling) f.k, f.id, f.spelling
           FROM found f JOIN assets a ON a.id = f.id ORDER BY f.k, f.spelling",
        selected.join(", "),
        group.heap,
        finds.join(" UNION ALL "),
    );
    (sql, paths)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::postgres::types::Oid;

    /// A column at attribute `attnum`: `family` `uuid`, `text` or `json`, `shape` `scalar` or `array`.
    fn column(attnum: i16, name: &str, family: &str, shape: &str, json_paths: &[&str]) -> Column {
        Column {
            attnum,
            name: name.into(),
            family: family.into(),
            shape: shape.into(),
            json_paths: json_paths.iter().map(|p| (*p).to_owned()).collect(),
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
            columns,
        }
    }

    #[test]
    fn uuid_columns_are_read_as_uuids_scalar_or_each_element() {
        let group = group(
            r#""public"."products""#,
            vec![column(2, "owner_id", "uuid", "scalar", &[]), column(3, "gallery", "uuid", "array", &[])],
        );
        let expected = [
            r#"WITH r AS MATERIALIZED (SELECT "owner_id", "gallery" FROM ONLY "public"."products" WHERE ctid >= $1::tid AND ctid < $2::tid),"#,
            r#"              found(k, id, spelling) AS (SELECT 0, r."owner_id"::uuid, NULL::text FROM r WHERE r."owner_id" IS NOT NULL UNION ALL SELECT 1, e::uuid, NULL::text FROM r, unnest(r."gallery") e)"#,
            r#"         SELECT DISTINCT ON (f.k, f.spelling) f.k, f.id, f.spelling"#,
            r#"           FROM found f JOIN assets a ON a.id = f.id ORDER BY f.k, f.spelling"#,
        ]
        .join("\n");
        let (sql, paths) = statement(&group);
        assert_eq!(sql, expected);
        assert!(paths.is_empty());
    }

    #[test]
    fn text_and_json_values_are_searched_together_and_text_is_compared_with_storage_keys() {
        let group = group(
            r#""public"."pages""#,
            vec![
                column(2, r#"title "alt""#, "text", "scalar", &[]),
                column(3, "tags", "text", "array", &[]),
                column(4, "meta", "json", "scalar", &[]),
                column(5, "history", "json", "array", &[]),
            ],
        );
        let expected = [
            r#"WITH r AS MATERIALIZED (SELECT "title ""alt""", "tags", "meta", "history" FROM ONLY "public"."pages" WHERE ctid >= $1::tid AND ctid < $2::tid),"#,
            // Every value searched for uuid-shaped strings, in one search for the batch...
            r#"              found(k, id, spelling) AS (SELECT x.k, m[1]::uuid, NULL::text FROM (SELECT 0 AS k, r."title ""alt"""::text AS v FROM r WHERE r."title ""alt""" IS NOT NULL UNION ALL SELECT 1 AS k, r."tags"::text AS v FROM r WHERE r."tags" IS NOT NULL UNION ALL SELECT 2 AS k, r."meta"::text AS v FROM r WHERE r."meta" IS NOT NULL UNION ALL SELECT 3 AS k, r."history"::text AS v FROM r WHERE r."history" IS NOT NULL) x, regexp_matches(x.v, $3, 'g') m"#,
            // ...and every text (an array's each element) joined once with the assets' keys, adopted ones left out.
            r#"              WHERE x.v LIKE '%-%-%-%-%' UNION ALL SELECT x.k, a.id, NULL::text FROM (SELECT 0 AS k, r."title ""alt"""::text AS v FROM r UNION ALL SELECT 1 AS k, unnest(r."tags")::text AS v FROM r) x JOIN assets a ON a.storage_key = x.v"#,
            r#"              WHERE NOT EXISTS (SELECT 1 FROM adopted_assets d WHERE d.asset_id = a.id))"#,
            r#"         SELECT DISTINCT ON (f.k, f.spelling) f.k, f.id, f.spelling"#,
            r#"           FROM found f JOIN assets a ON a.id = f.id ORDER BY f.k, f.spelling"#,
        ]
        .join("\n");
        let (sql, paths) = statement(&group);
        assert_eq!(sql, expected);
        assert!(paths.is_empty());
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
        let expected = [
            r#"WITH r AS MATERIALIZED (SELECT "body", "cover" FROM ONLY "public"."documents" WHERE ctid >= $1::tid AND ctid < $2::tid),"#,
            r#"              found(k, id, spelling) AS (SELECT 0, m[1]::uuid, NULL::text FROM r, regexp_matches(r."body"::text, $3, 'g') m"#,
            r#"                      WHERE r."body"::text LIKE '%-%-%-%-%'"#,
            r#"                        AND lower(m[1]) NOT IN (SELECT lower(v #>> '{}') FROM unnest($4::text[]) p, jsonb_path_query(r."body", (p || ' ? (@.type() == "string")')::jsonpath, '{}', true) v) UNION ALL SELECT 0, (v #>> '{}')::uuid, v #>> '{}' FROM r, unnest($4::text[]) p, jsonb_path_query(r."body", (p || ' ? (@.type() == "string")')::jsonpath, '{}', true) v"#,
            r#"                      WHERE v #>> '{}' ~ ('^' || $3 || '$')"#,
            r#"                        AND v #>> '{}' NOT IN (lower(v #>> '{}'), upper(v #>> '{}')) UNION ALL SELECT 1, m[1]::uuid, NULL::text FROM r, regexp_matches(r."cover"::text, $3, 'g') m"#,
            r#"                      WHERE r."cover"::text LIKE '%-%-%-%-%'"#,
            r#"                        AND lower(m[1]) NOT IN (SELECT lower(v #>> '{}') FROM unnest($5::text[]) p, jsonb_path_query(r."cover", (p || ' ? (@.type() == "string")')::jsonpath, '{}', true) v) UNION ALL SELECT 1, (v #>> '{}')::uuid, v #>> '{}' FROM r, unnest($5::text[]) p, jsonb_path_query(r."cover", (p || ' ? (@.type() == "string")')::jsonpath, '{}', true) v"#,
            r#"                      WHERE v #>> '{}' ~ ('^' || $3 || '$')"#,
            r#"                        AND v #>> '{}' NOT IN (lower(v #>> '{}'), upper(v #>> '{}')))"#,
            r#"         SELECT DISTINCT ON (f.k, f.spelling) f.k, f.id, f.spelling"#,
            r#"           FROM found f JOIN assets a ON a.id = f.id ORDER BY f.k, f.spelling"#,
        ]
        .join("\n");
        let (sql, paths) = statement(&group);
        assert_eq!(sql, expected);
        // Each declared source's paths: $4 and $5, after the block range and the uuid pattern.
        assert_eq!(paths, [vec!["$.hero.id".to_owned(), "$.images[*]".to_owned()], vec!["$.id".to_owned()]]);
    }
}
