//! Asking every reference source whether it still refers to one asset (invariant 1). Runs on whatever
//! connection it is given: the consumer calls it inside its settle transaction, with the asset row locked.

use serde::Serialize;
use serde_json::Value;
use sqlx::{AssertSqlSafe, PgConnection};
use uuid::Uuid;

use platform::ids::AssetId;
use platform::sql::{quote_ident, quote_literal};

use crate::map::{ReferenceMap, SourceKind};

/// One source's answer, kept as evidence in the audit record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SourceAnswer {
    /// The source, as `schema.table.column`.
    pub source: String,
    /// Whether it refers to the asset.
    pub referenced: bool,
    /// The key of one record that refers (its primary key, else its `ctid`): what an operator looks up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<Value>,
}

/// What the recheck found: every source of the map, in order, with its answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Recheck {
    /// One answer per source of the map, in the map's order.
    pub answers: Vec<SourceAnswer>,
}

impl Recheck {
    /// The first source that keeps the asset, if any.
    pub fn referenced_by(&self) -> Option<&str> {
        self.keeping().map(|a| a.source.as_str())
    }

    /// The first answer that keeps the asset, with its record.
    pub fn keeping(&self) -> Option<&SourceAnswer> {
        self.answers.iter().find(|a| a.referenced)
    }
}

/// Asks every source of `map` whether it refers to `asset`, and which record does, in one statement, so all answers come from one
/// snapshot: a reference moving from one source to another while the check runs cannot fall between them.
///
/// Each test is one the usual index answers: a btree for `=`, a GIN index for `@>` on arrays and for `@?` on
/// JSON documents (`jsonb_ops` for `$.**` paths). The statement is not kept prepared: a cached generic plan
/// cannot see the values, and for `EXISTS (… @? $n)` Postgres then prefers a sequential scan it expects to stop
/// early — which reads every row when nothing refers. An unnamed statement is planned with the values.
pub async fn recheck(conn: &mut PgConnection, map: &ReferenceMap, asset: AssetId) -> Result<Recheck, sqlx::Error> {
    if map.sources.is_empty() {
        return Ok(Recheck { answers: Vec::new() });
    }
    let id = asset.0;
    // Built first and bound as constants, so each `@?` is planned with its values and served by the document's
    // index (a spelling read inside the statement would hide them from the planner, which then scans the table). A
    // spelling noted after this read belongs to a write that must wait for the asset row this transaction holds.
    let declared = declared_paths(map);
    let mut paths =
        if declared.is_empty() { Vec::new() } else { paths_matching(conn, &declared, id).await? }.into_iter();
    let sql = statement(map);
    let mut query = sqlx::query_scalar::<_, Vec<Option<Value>>>(AssertSqlSafe(sql)).bind(id);
    for _ in &declared {
        query = query.bind(paths.next().unwrap_or_default());
    }
    let found = query.persistent(false).fetch_one(conn).await?;
    let answers = map
        .sources
        .iter()
        .zip(found)
        .map(|(source, record)| SourceAnswer { source: source.to_string(), referenced: record.is_some(), record })
        .collect();
    Ok(Recheck { answers })
}

/// The declared path of each JSON source of `map`, in the map's order: what [`statement`] binds as `$2`, `$3`…,
/// once narrowed to the spellings of the asset's id.
fn declared_paths(map: &ReferenceMap) -> Vec<&str> {
    map.sources
        .iter()
        .filter_map(|s| match &s.kind {
            SourceKind::Json { json_path } => Some(json_path.as_str()),
            _ => None,
        })
        .collect()
}

/// The recheck's statement for `map`: one subquery per source, in the map's order, each naming one record that
/// refers. `$1` is the asset id; `$2`, `$3`… each JSON source's declared path narrowed to the id's spellings, in
/// the map's order ([`declared_paths`]). A pure function of the map, so its text can be read in a test.
pub(crate) fn statement(map: &ReferenceMap) -> String {
    let mut tests = Vec::with_capacity(map.sources.len());
    let mut json_sources = 0;
    for source in &map.sources {
        let table = source.quoted_table();
        let column = quote_ident(&source.column);
        let condition = match &source.kind {
            SourceKind::ForeignKey | SourceKind::Domain => format!("{column} = $1"),
            // The catalog's own spelling of the column type, so `@>` compares like with like.
            SourceKind::DomainArray => format!("{column} @> ARRAY[$1::uuid]::{}", source.column_type),
            SourceKind::Nested => format!("{}({column}) @> ARRAY[$1::uuid]", crate::check::NESTED_IDS),
            SourceKind::Json { .. } => {
                json_sources += 1;
                format!("{column} @? ${}::jsonpath", json_sources + 1)
            }
            SourceKind::Key(template) => template.condition("", "(SELECT storage_key FROM assets WHERE id = $1)"),
        };
        let key = record_key(&source.key_columns);
        tests.push(match source.kind {
            // `LIMIT 1` stops at the first referring row, as `EXISTS` would, and names it.
            SourceKind::ForeignKey | SourceKind::Domain | SourceKind::Key(_) => {
                format!("(SELECT {key} FROM {table} WHERE {condition} LIMIT 1)")
            }
            // For `@>` and `@?` Postgres guesses hundreds of matching rows, so under a `LIMIT 1` it costs a
            // sequential scan that stops at the first — and reads the whole table when nothing refers (53 ms an
            // asset at 200 000 rows of an `asset_id[]` source). A materialized CTE is planned for all its rows, which
            // takes the index; it reads every referring row, and there are few but for a widely shared asset.
            SourceKind::DomainArray | SourceKind::Json { .. } | SourceKind::Nested => format!(
                "(WITH r AS MATERIALIZED (SELECT {key} AS k FROM {table} WHERE {condition}) SELECT k FROM r LIMIT 1)"
            ),
        });
    }
    // Built here, not checked at compile time: its tables and columns are the application's, from the map.
    format!("SELECT ARRAY[{}]::jsonb[]", tests.join(", "))
}

/// Each of `declared` narrowed to the strings that spell `id` (`asset_sweeper_path_matching`), in order.
async fn paths_matching(conn: &mut PgConnection, declared: &[&str], id: Uuid) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT asset_sweeper_path_matching(p.path, m.matches) AS "path!"
             FROM unnest($1::text[]) WITH ORDINALITY AS p(path, n)
            CROSS JOIN (SELECT asset_sweeper_id_matches($2) AS matches) m
            ORDER BY p.n"#,
        declared as &[&str],
        id,
    )
    .fetch_all(conn)
    .await
}

/// A JSON object naming a row by its primary key, or by its `ctid` when the table has none.
fn record_key(key_columns: &[String]) -> String {
    if key_columns.is_empty() {
        return "jsonb_build_object('ctid', ctid::text)".to_owned();
    }
    let pairs: Vec<String> = key_columns.iter().map(|c| format!("{}, {}", quote_literal(c), key_value(c))).collect();
    format!("jsonb_build_object({})", pairs.join(", "))
}

/// Key column `c` as JSON. A type of the application's own may carry a cast to JSON of its own, which `to_jsonb`
/// would run in the consumer's session: its value is written by its output function instead (as text). The
/// system's types (oids below 16384) keep their JSON form.
fn key_value(c: &str) -> String {
    let c = quote_ident(c);
    format!("CASE WHEN pg_typeof({c})::oid < 16384 THEN to_jsonb({c}) ELSE to_jsonb(format('%s', {c})) END")
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

    /// A map with one source of each kind, and a second JSON source whose names need quoting and whose document
    /// has a default GIN index (`value_indexed`, which the recheck does not branch on).
    fn map() -> ReferenceMap {
        let json = |json_path: &str| SourceKind::Json { json_path: json_path.into() };
        let sources = vec![
            source("public", "products", "image_id", SourceKind::ForeignKey, "uuid"),
            ReferenceSource {
                key_columns: vec!["site_id".into(), "slug".into()],
                ..source("public", "pages", "hero", SourceKind::Domain, "asset_id")
            },
            ReferenceSource {
                key_columns: Vec::new(),
                ..source("public", "galleries", "images", SourceKind::DomainArray, "asset_id[]")
            },
            source("public", "documents", "body", json("$.blocks[*].asset_id"), "jsonb"),
            ReferenceSource {
                key_columns: vec!["it's".into()],
                value_indexed: true,
                ..source("app", r#"page "drafts""#, r#"doc's "body""#, json("$.hero.id"), "jsonb")
            },
        ];
        ReferenceMap { sources, warnings: Vec::new(), unproven: Vec::new() }
    }

    #[test]
    fn the_recheck_is_one_statement_with_a_subquery_per_source_in_the_maps_order() {
        let map = map();
        insta::assert_snapshot!(statement(&map));
        // $2 and $3: each JSON source's declared path, in the map's order, once narrowed to the id's spellings.
        assert_eq!(declared_paths(&map), ["$.blocks[*].asset_id", "$.hero.id"]);
    }

    #[test]
    fn a_map_without_json_sources_binds_the_asset_id_alone() {
        let mut map = map();
        map.sources.truncate(1);
        insta::assert_snapshot!(statement(&map));
        assert!(declared_paths(&map).is_empty());
    }
}
