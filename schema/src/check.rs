//! The schema check that must pass before anything is destroyed (invariant 4). It fails closed: a declared source
//! that is missing, unreadable or not `jsonb`, a foreign key to `assets` whose delete action would change owner
//! records, a source without a guard or an index, or any other column whose sampled values are asset ids or storage
//! keys (and which is not listed in `asset_reference_exclusions`) makes it refuse, naming every cause.

use migrator::UUID_IN_TEXT;
use platform::sql::quote_ident;
use sqlx::{AssertSqlSafe, PgConnection};

use crate::derive::{LeadingIndexes, derive, leading_indexes, primary_key};
use crate::guards;
use crate::map::{
    Candidate, CheckOptions, Derived, ReferenceMap, ReferenceSource, SchemaCheckError, SchemaProblem, SchemaRefusal,
    SourceKind, UnindexedSources,
};

/// Derives the reference map from the live schema and validates it: the sample (up to `sample_rows` values of each
/// column that is not a source) is the fast first look, the census's record the proof.
pub async fn check(conn: &mut PgConnection, options: CheckOptions) -> Result<ReferenceMap, SchemaCheckError> {
    let Derived { mut sources, mut problems, candidates } = derive(conn).await?;
    problems.extend(sample(conn, &candidates, options.sample_rows).await?);
    let standing = crate::census::standing(conn, &crate::census::targets(&sources, &problems, &candidates)).await?;
    problems.extend(standing.problems);
    problems.extend(crate::guards::unguarded(conn, &sources).await?);
    let mut warnings = Vec::new();
    for source in &mut sources {
        source.key_columns = primary_key(conn, &source.schema, &source.table).await?;
        let indexes = leading_indexes(conn, source).await?;
        source.value_indexed = indexes.as_ref().is_some_and(|i| i.classes.iter().any(|c| c == "jsonb_ops"));
        if let Some(unindexed) = unindexed(source, indexes.as_ref()) {
            match options.unindexed {
                UnindexedSources::Refuse => problems.push(unindexed),
                UnindexedSources::Warn => warnings.push(unindexed),
            }
        }
    }

    if problems.is_empty() {
        Ok(ReferenceMap { sources, warnings, unproven: standing.unproven })
    } else {
        Err(SchemaRefusal { problems, sources }.into())
    }
}

/// The problem of a source that no valid, whole-table index can serve, with the statement that makes one: a btree
/// whose leading column is the source for `=` (foreign keys, `asset_id`), a GIN index on it for `@>` (arrays) and
/// `@?` (JSON). A missing table or column is reported elsewhere.
fn unindexed(source: &ReferenceSource, indexes: Option<&LeadingIndexes>) -> Option<SchemaProblem> {
    let (method, using) = match source.kind {
        SourceKind::ForeignKey | SourceKind::Domain => ("btree", ""),
        SourceKind::DomainArray | SourceKind::Json { .. } => ("gin", " USING gin"),
    };
    if indexes.is_none_or(|i| i.methods.iter().any(|m| m == method)) {
        return None;
    }
    Some(SchemaProblem::UnindexedSource {
        schema: source.schema.clone(),
        table: source.table.clone(),
        column: source.column.clone(),
        create_index: format!(
            "CREATE INDEX CONCURRENTLY ON {}{using} ({});",
            source.quoted_table(),
            quote_ident(&source.column)
        ),
    })
}

/// Samples up to `sample_rows` values of each candidate and reports those whose values are asset ids (or, for
/// text, storage keys): the fast first look, which the census's full scans then prove or refute.
async fn sample(
    conn: &mut PgConnection,
    candidates: &[Candidate],
    sample_rows: u32,
) -> Result<Vec<SchemaProblem>, sqlx::Error> {
    let mut problems = Vec::new();
    for Candidate { schema, table, column, shape, family } in candidates {
        // Built here, not checked at compile time: the table and column are the application's, known only now.
        let table_sql = format!("{}.{}", quote_ident(schema), quote_ident(table));
        let col = quote_ident(column);
        // Each form yields the sampled values as text `v`; uuids are then found anywhere inside them.
        let values = if shape == "array" {
            format!(
                "SELECT unnest(x.{col})::text AS v FROM (SELECT {col} FROM {table_sql} WHERE {col} IS NOT NULL LIMIT $1) x"
            )
        } else {
            format!("SELECT {col}::text AS v FROM {table_sql} WHERE {col} IS NOT NULL LIMIT $1")
        };
        let storage_keys = if family == "text" {
            "OR EXISTS (SELECT 1 FROM sample s JOIN stored_objects o ON o.storage_key = s.v)"
        } else {
            ""
        };
        let sql = format!(
            "WITH sample AS ({values})
             SELECT EXISTS (
                 SELECT 1 FROM sample s,
                        regexp_matches(s.v, '{UUID_IN_TEXT}', 'g') m
                   JOIN assets a ON a.id = m[1]::uuid
             ) {storage_keys}"
        );
        let hit: bool =
            sqlx::query_scalar(AssertSqlSafe(sql)).bind(i64::from(sample_rows)).fetch_one(&mut *conn).await?;
        if hit {
            let data_type = if shape == "array" { format!("{family}[]") } else { family.clone() };
            problems.push(SchemaProblem::UnexplainedAssetIds {
                schema: schema.clone(),
                table: table.clone(),
                column: column.clone(),
                data_type,
            });
        }
    }
    Ok(problems)
}

/// Derives the sources as the schema check does (a check that refuses still names them) and [`guards::install`]s their
/// guards: what `asset-sweeper guards install` runs.
pub async fn install_guards(conn: &mut PgConnection, options: CheckOptions) -> Result<guards::Report, sqlx::Error> {
    let sources = match check(&mut *conn, options).await {
        Ok(map) => map.sources,
        Err(SchemaCheckError::Refused(refusal)) => refusal.sources,
        Err(SchemaCheckError::Database(e)) => return Err(e),
    };
    guards::install(conn, &sources).await
}
