//! One batch's question, set-based: which of these assets does no reference source refer to? The same sources
//! and the same tests as the recheck, asked once for the whole batch in one statement instead of once per asset.

use sqlx::{AssertSqlSafe, PgConnection};
use uuid::Uuid;

use platform::sql::quote_ident;

use crate::map::{ReferenceMap, SourceKind};

/// The ids of `batch` (ascending) that no source of `map` refers to, in ascending order. One statement, so every
/// answer comes from one snapshot; nothing is locked and nothing is written. Run it after [`without_jit`].
///
/// Each source is read only where it can hold the batch's ids, through the index the schema check requires of it
/// (measured in `tests/benches/discovery.rs`; the shapes that lost are in docs/design.md, "Discovery"):
/// - scalar sources (foreign keys, `asset_id`) together: a range scan of each between the batch's first and last
///   id (the walk goes in id order, so the range holds the batch and little else), hashed against the batch;
/// - an `asset_id[]` source: `@>` per id on its GIN index;
/// - a JSON document: `@?` per id with the recheck's own path — the declared path narrowed to every spelling of
///   the id (lowercase, uppercase, and those noted in `asset_id_spellings`). On a default (`jsonb_ops`) GIN index
///   that path is found by its spellings alone (`$.**`), which the index answers from the values' entries without
///   intersecting every document that has the path's keys; the declared path then decides.
pub async fn unreferenced(
    conn: &mut PgConnection,
    map: &ReferenceMap,
    batch: &[Uuid],
) -> Result<Vec<Uuid>, sqlx::Error> {
    let (Some(first), Some(last)) = (batch.first(), batch.last()) else { return Ok(Vec::new()) };
    let Some((sql, paths)) = statement(map) else { return Ok(batch.to_vec()) };
    // Under the sources' locks, their columns' types confirmed first: an operator or cast planned for a column's
    // type is never resolved against a type the application gave it since ([`crate::typed`]).
    crate::typed::hold(&mut *conn, &planned(map)).await?;
    let mut query = sqlx::query_scalar::<_, Uuid>(AssertSqlSafe(sql)).bind(batch).bind(first).bind(last);
    for path in paths {
        query = query.bind(path);
    }
    query.persistent(false).fetch_all(conn).await
}

/// The columns `map`'s batch question reads, each with the type the map was derived for.
fn planned(map: &ReferenceMap) -> crate::typed::Planned {
    let mut planned = crate::typed::Planned::default();
    for source in &map.sources {
        planned.add_source(source);
    }
    planned
}

/// The batch question's statement for `map`, and the declared paths it binds: `$1` is the batch (ascending), `$2`
/// and `$3` its first and last id, `$4`… each JSON source's declared path, in the map's order. `None` for a map
/// without sources, which refer to no asset of any batch. A pure function of the map, so its text can be read in a
/// test.
pub(crate) fn statement(map: &ReferenceMap) -> Option<(String, Vec<&str>)> {
    let mut scalar = Vec::new();
    let mut per_id = Vec::new();
    // $1 the batch, $2 and $3 its bounds; declared paths follow.
    let mut paths: Vec<&str> = Vec::new();
    // Whether a key source asks for each asset's storage key.
    let mut keyed = false;
    for source in &map.sources {
        let table = source.quoted_table();
        let column = quote_ident(&source.column);
        match &source.kind {
            SourceKind::ForeignKey | SourceKind::Domain => {
                scalar.push(format!("SELECT {column}::text FROM {table} WHERE {column} BETWEEN $2 AND $3"));
            }
            SourceKind::Nested => per_id.push(format!(
                "NOT EXISTS (SELECT 1 FROM {table} WHERE {}({column}) @> ARRAY[b.id])",
                crate::check::NESTED_IDS
            )),
            SourceKind::DomainArray => per_id.push(format!(
                "NOT EXISTS (SELECT 1 FROM {table} WHERE {column} @> ARRAY[b.id]::{})",
                source.column_type
            )),
            SourceKind::Key(template) => {
                keyed = true;
                per_id.push(format!(
                    "NOT EXISTS (SELECT 1 FROM {table} WHERE {})",
                    template.condition("", "k.storage_key")
                ));
            }
            SourceKind::Json { json_path } => {
                paths.push(json_path);
                let declared = format!("asset_sweeper_path_matching(${}, m.matches)::jsonpath", paths.len() + 3);
                per_id.push(if source.value_indexed {
                    format!(
                        "NOT EXISTS (SELECT 1 FROM {table} WHERE {column} @? asset_sweeper_path_matching('$.**', m.matches)::jsonpath
                                       AND jsonb_path_exists({column}, {declared}, '{{}}', true))"
                    )
                } else {
                    format!("NOT EXISTS (SELECT 1 FROM {table} WHERE {column} @? {declared})")
                });
            }
        }
    }
    let mut conditions = per_id;
    if !scalar.is_empty() {
        conditions.insert(
            0,
            format!("NOT EXISTS (SELECT 1 FROM ({}) r(id) WHERE r.id = b.id::text)", scalar.join(" UNION ALL ")),
        );
    }
    if conditions.is_empty() {
        return None;
    }
    // Every spelling the recheck matches, once per id.
    let spellings =
        if paths.is_empty() { "" } else { "CROSS JOIN LATERAL (SELECT asset_sweeper_id_matches(b.id) AS matches) m" };
    // The storage key a key source is asked about, once per id.
    let keys = if keyed { " LEFT JOIN assets k ON k.id = b.id" } else { "" };
    // Built here, not checked at compile time: its tables and columns are the application's, from the map.
    let sql = format!(
        "SELECT b.id FROM unnest($1::uuid[]) AS b(id) {spellings}{keys}
          WHERE {}
          ORDER BY b.id",
        conditions.join("\n AND ")
    );
    Some((sql, paths))
}

/// Turns JIT off for the rest of the caller's transaction. The planner's estimate for a statement over many sources
/// is high enough to compile it, which took 440 ms of a 520 ms batch at 1 000 000 assets: for statements this
/// short, compiling costs more than it saves.
pub async fn without_jit(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query!("SELECT set_config('jit', 'off', true)").fetch_one(conn).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::map::ReferenceSource;

    fn source(schema: &str, table: &str, column: &str, kind: SourceKind, column_type: &str) -> ReferenceSource {
        ReferenceSource {
            schema: schema.into(),
            table: table.into(),
            column: column.into(),
            kind,
            column_type: column_type.into(),
            key_columns: vec!["id".into()],
            value_indexed: false,
        }
    }

    /// One source of each kind, and a second JSON document, on a default (`jsonb_ops`) GIN index, whose names need
    /// quoting.
    fn map() -> ReferenceMap {
        let json = |json_path: &str| SourceKind::Json { json_path: json_path.into() };
        let sources = vec![
            source("public", "products", "image_id", SourceKind::ForeignKey, "uuid"),
            source("public", "pages", "hero", SourceKind::Domain, "asset_id"),
            source("public", "galleries", "images", SourceKind::DomainArray, "asset_id[]"),
            source("public", "documents", "body", json("$.blocks[*].asset_id"), "jsonb"),
            ReferenceSource {
                value_indexed: true,
                ..source("app", r#"page "drafts""#, r#"doc's "body""#, json("$.hero.id"), "jsonb")
            },
        ];
        ReferenceMap { sources, warnings: Vec::new(), unproven: Vec::new() }
    }

    #[test]
    fn the_batch_question_reads_scalar_sources_by_range_and_the_others_per_id() {
        let map = map();
        let (sql, paths) = statement(&map).expect("a statement");
        // A value-indexed document is found by the id's spellings alone, then its declared path decides.
        insta::assert_snapshot!(sql);
        // $4 and $5, after the batch and its bounds.
        assert_eq!(paths, ["$.blocks[*].asset_id", "$.hero.id"]);
    }

    #[test]
    fn without_json_sources_no_spelling_is_read_and_without_sources_there_is_no_question() {
        let mut map = map();
        map.sources.truncate(1);
        let (sql, paths) = statement(&map).expect("a statement");
        // The spellings' join is left out, its space kept.
        insta::assert_snapshot!(sql);
        assert!(paths.is_empty());

        map.sources.clear();
        assert_eq!(statement(&map), None, "no source refers to any asset of a batch");
    }
}
