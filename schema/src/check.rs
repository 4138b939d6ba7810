//! The schema check that must pass before anything is destroyed (invariant 4). It fails closed: a declared source
//! that is missing, unreadable or not `jsonb`, a foreign key to `assets` whose delete action would change owner
//! records, a source without a guard or an index, or any other column whose sampled values are asset ids or storage
//! keys (and which is not listed in `asset_reference_exclusions`) makes it refuse, naming every cause.

use platform::sql::{quote_ident, quote_literal};
use sqlx::{AssertSqlSafe, PgConnection};

use crate::derive::{LeadingIndexes, derive, leading_indexes, primary_key};
use crate::guards;
use crate::map::{
    CheckOptions, Derived, ReferenceMap, ReferenceSource, SchemaCheckError, SchemaProblem, SchemaRefusal, SourceKind,
    UnindexedSources,
};

/// Derives the reference map from the live schema and validates it: the sample (up to `sample_rows` values of each
/// column that is not a source, [`crate::sample`]) is the fast first look, the census's record the proof.
pub async fn check(conn: &mut PgConnection, options: CheckOptions) -> Result<ReferenceMap, SchemaCheckError> {
    let Derived { mut sources, mut problems, candidates } = derive(conn).await?;
    problems.extend(crate::sample::sample(conn, &candidates, options.sample_rows).await?);
    let mut standing = crate::census::standing(conn, &crate::census::targets(&sources, &problems, &candidates)).await?;
    if let Some(pace) = options.census_pace {
        standing.unproven.extend(crate::census::too_slow(conn, pace).await?);
    }
    problems.extend(standing.problems);
    problems.extend(crate::guards::unguarded(conn, &sources).await?);
    let mut warnings = Vec::new();
    for source in &mut sources {
        source.key_columns = primary_key(conn, &source.schema, &source.table).await?;
        if let SourceKind::Key(template) = &source.kind {
            problems.extend(outside_prefixes(source, template, options.managed_prefixes.as_deref()));
            if !key_source_indexed(conn, source, template).await? {
                let unindexed = unindexed_problem(conn, source, &template.index_definition()).await?;
                match options.unindexed {
                    UnindexedSources::Refuse => problems.push(unindexed),
                    UnindexedSources::Warn => warnings.push(unindexed),
                }
            }
            continue;
        }
        let indexes = match source.kind {
            SourceKind::Nested => nested_index(conn, source).await?,
            _ => leading_indexes(conn, source).await?,
        };
        source.value_indexed = indexes.as_ref().is_some_and(|i| i.classes.iter().any(|c| c == "jsonb_ops"));
        if let Some(definition) = unindexed(source, indexes.as_ref()) {
            let unindexed = unindexed_problem(conn, source, &definition).await?;
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

/// The index a source needs when no valid, whole-table index can serve it, as the end of its `CREATE INDEX`
/// statement (`USING gin ("tags")`): a btree whose leading column is the source for `=` (foreign keys,
/// `asset_id`), a GIN index on it for `@>` (arrays) and `@?` (JSON), a GIN index on `asset_sweeper_nested_ids` of it
/// for `@>` (composites). A missing table or column is reported elsewhere.
fn unindexed(source: &ReferenceSource, indexes: Option<&LeadingIndexes>) -> Option<String> {
    let (method, using) = match source.kind {
        SourceKind::ForeignKey | SourceKind::Domain => ("btree", ""),
        SourceKind::DomainArray | SourceKind::Json { .. } | SourceKind::Nested => ("gin", "USING gin "),
        // Asked of the planner (`key_source_indexed`).
        SourceKind::Key(_) => return None,
    };
    if indexes.is_none_or(|i| i.methods.iter().any(|m| m == method)) {
        return None;
    }
    let indexed = match source.kind {
        SourceKind::Nested => format!("{NESTED_IDS}({})", quote_ident(&source.column)),
        _ => quote_ident(&source.column),
    };
    Some(format!("{using}({indexed})"))
}

/// The problem of a source without the index `definition` describes, with the statement that makes it: built
/// `CONCURRENTLY`, so the application's writes go on meanwhile, except on a partitioned table, where Postgres refuses
/// that and builds the index on each partition itself (integrating.md says how to build it partition by partition).
async fn unindexed_problem(
    conn: &mut PgConnection,
    source: &ReferenceSource,
    definition: &str,
) -> Result<SchemaProblem, sqlx::Error> {
    let partitioned: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                         WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind = 'p')",
    )
    .bind(&source.schema)
    .bind(&source.table)
    .fetch_one(conn)
    .await?;
    let concurrently = if partitioned { "" } else { "CONCURRENTLY " };
    Ok(SchemaProblem::UnindexedSource {
        schema: source.schema.clone(),
        table: source.table.clone(),
        column: source.column.clone(),
        create_index: format!("CREATE INDEX {concurrently}ON {} {definition};", source.quoted_table()),
    })
}

/// A key source whose root lies outside every managed prefix (neither inside one nor holding one) names no key of
/// ours: a typo in its root, which would protect nothing while looking as if it did.
fn outside_prefixes(
    source: &ReferenceSource,
    template: &crate::key_sources::KeyTemplate,
    prefixes: Option<&[String]>,
) -> Option<SchemaProblem> {
    let prefixes = prefixes?;
    let root = template.root();
    if prefixes.iter().any(|p| root.starts_with(p.as_str()) || p.starts_with(root)) {
        return None;
    }
    Some(SchemaProblem::KeySourceInvalid {
        schema: source.schema.clone(),
        table: source.table.clone(),
        template: template.template.clone(),
        why: format!(
            "its root {root:?} is not within a managed prefix ({}), so it names no key of ours: start the template \
             with the prefix the application's storage root is (RECONCILE_PREFIXES)",
            prefixes.iter().map(|p| format!("{p:?}")).collect::<Vec<_>>().join(", ")
        ),
    })
}

/// Whether an index serves a key source's recheck: the planner, with sequential scans priced out, still reads the
/// table by one of its indexes for the recheck's own condition (for a partitioned table, every partition by one).
/// Asked of the plan, not of the index's text: Postgres prints an expression back in its own spelling.
async fn key_source_indexed(
    conn: &mut PgConnection,
    source: &ReferenceSource,
    template: &crate::key_sources::KeyTemplate,
) -> Result<bool, sqlx::Error> {
    let probe = quote_literal(&format!("{}\u{1}probe", template.root()));
    // Built here: the table and its columns are the application's, from the declaration the owner's trigger checked.
    let explain = format!(
        "EXPLAIN (FORMAT JSON) SELECT 1 FROM {} WHERE {}",
        source.quoted_table(),
        template.condition("", &format!("{probe}::text"))
    );
    sqlx::query("SELECT set_config('enable_seqscan', 'off', false)").execute(&mut *conn).await?;
    let plan = sqlx::query_scalar::<_, serde_json::Value>(AssertSqlSafe(explain)).fetch_one(&mut *conn).await;
    sqlx::query("RESET enable_seqscan").execute(&mut *conn).await?;
    Ok(!plan?.to_string().contains("\"Seq Scan\""))
}

/// The function a composite source's index and every test of it read the asset ids with.
pub(crate) const NESTED_IDS: &str = "asset_sweeper.asset_sweeper_nested_ids";

/// The valid, whole-table indexes on `asset_sweeper_nested_ids` of a composite source's column, as
/// [`leading_indexes`] answers for a column; `None` when its table or column is missing.
async fn nested_index(
    conn: &mut PgConnection,
    source: &ReferenceSource,
) -> Result<Option<LeadingIndexes>, sqlx::Error> {
    let found = sqlx::query!(
        r#"SELECT coalesce(array_agg(am.amname::text) FILTER (WHERE i.indexrelid IS NOT NULL), '{}') AS "methods!"
             FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = $3 AND NOT a.attisdropped
             LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisvalid AND i.indpred IS NULL AND i.indkey[0] = 0
                                 -- As Postgres prints the expression back: qualified or not, by this session's path.
                                 AND pg_get_indexdef(i.indexrelid, 1, false)
                                     IN ($4 || '(' || quote_ident($3) || ')',
                                         'asset_sweeper_nested_ids(' || quote_ident($3) || ')')
             LEFT JOIN pg_class ic ON ic.oid = i.indexrelid
             LEFT JOIN pg_am am ON am.oid = ic.relam
            WHERE n.nspname = $1 AND c.relname = $2
            GROUP BY a.attnum"#,
        &source.schema,
        &source.table,
        &source.column,
        NESTED_IDS,
    )
    .fetch_optional(conn)
    .await?;
    Ok(found.map(|f| LeadingIndexes { methods: f.methods, classes: Vec::new() }))
}

/// Derives the sources as the schema check does, from the catalog alone (no sample, no census: nothing that reads
/// an application row), and [`guards::install`]s their guards a table at a time: what `asset-sweeper guards install`
/// runs. Then reads back which sources are still unguarded.
pub async fn install_guards(
    conn: &mut PgConnection,
    patience: guards::Patience,
) -> Result<(guards::Report, Vec<SchemaProblem>), sqlx::Error> {
    let Derived { sources, .. } = derive(conn).await?;
    let report = guards::install(&mut *conn, &sources, patience).await?;
    let unguarded = guards::unguarded(conn, &sources).await?;
    Ok((report, unguarded))
}
