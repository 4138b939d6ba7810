//! One batch's question, set-based: which of these assets does no reference source refer to? The same sources
//! and the same tests as the recheck, asked once for the whole batch instead of once per asset.

use sqlx::{AssertSqlSafe, PgConnection};
use uuid::Uuid;

use crate::recheck::{path_matching, spellings};
use crate::references::{ReferenceMap, SourceKind, quote_ident};

/// How many assets one `@?` path asks about. The path is a chain of `||` that Postgres parses, indexes and runs
/// recursively, so it stays short; a batch asks one path per this many assets, all in one statement.
const IDS_PER_PATH: usize = 64;

/// The ids of `batch` (ascending) that no source of `map` refers to, in ascending order. One statement, so every
/// answer comes from one snapshot; nothing is locked and nothing is written.
///
/// Each source is read only where it can hold the batch's ids, through the index the schema check requires of it:
/// a scalar column (foreign key or `asset_id`) by a range scan between the batch's first and last id (the walk goes
/// in id order, so the range holds the batch and little else); an `asset_id[]` column by `&&` on its GIN index; a
/// JSON document by `@?` on its GIN index with every spelling of the batch's ids the recheck would match, after
/// which the ids at the declared path are read from the matching documents only.
pub(crate) async fn unreferenced(
    conn: &mut PgConnection,
    map: &ReferenceMap,
    batch: &[Uuid],
) -> Result<Vec<Uuid>, sqlx::Error> {
    let (Some(first), Some(last)) = (batch.first(), batch.last()) else { return Ok(Vec::new()) };
    if map.sources.is_empty() {
        return Ok(batch.to_vec());
    }
    let documents = map.sources.iter().any(|s| matches!(s.kind, SourceKind::Json { .. }));
    let spellings = if documents { spellings(conn, batch).await? } else { Vec::new() };
    // $1 the batch, $2 and $3 its bounds; the JSON paths follow.
    let mut paths: Vec<String> = Vec::new();
    let mut referenced = Vec::with_capacity(map.sources.len());
    for source in &map.sources {
        let table = source.quoted_table();
        let column = quote_ident(&source.column);
        referenced.push(match &source.kind {
            SourceKind::ForeignKey | SourceKind::Domain => {
                format!("SELECT {column}::text FROM {table} WHERE {column} BETWEEN $2 AND $3")
            }
            SourceKind::DomainArray => format!(
                "SELECT u::text FROM {table}, unnest({column}) u WHERE {column} && ($1::uuid[])::{}",
                source.column_type
            ),
            SourceKind::Json { json_path } => {
                paths.push(format!("{json_path} ? (@.type() == \"string\")"));
                let extract = paths.len() + 3;
                let mut tests = Vec::new();
                // Any split is sound: every spelling is asked in one path or another.
                for chunk in spellings.chunks(IDS_PER_PATH * 2) {
                    paths.push(path_matching(json_path, chunk));
                    tests.push(format!("{column} @? ${}::jsonpath", paths.len() + 3));
                }
                format!(
                    "SELECT lower(v #>> '{{}}') FROM {table}, jsonb_path_query({column}, ${extract}::jsonpath, '{{}}', true) v
                      WHERE {}",
                    tests.join(" OR ")
                )
            }
        });
    }
    // Built here, not checked at compile time: its tables and columns are the application's, from the map.
    let sql = format!(
        "WITH referenced(id) AS ({})
         SELECT b.id FROM unnest($1::uuid[]) AS b(id)
          WHERE NOT EXISTS (SELECT 1 FROM referenced r WHERE r.id = b.id::text)
          ORDER BY b.id",
        referenced.join(" UNION ALL ")
    );
    let mut query = sqlx::query_scalar::<_, Uuid>(AssertSqlSafe(sql)).bind(batch).bind(first).bind(last);
    for path in paths {
        query = query.bind(path);
    }
    // Unnamed, so it is planned with the paths' values and each `@?` is served by its index, as in the recheck.
    query.persistent(false).fetch_all(conn).await
}
