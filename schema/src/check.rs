//! The schema check that must pass before anything is destroyed (invariant 4). It fails closed: a declared source
//! that is missing, unreadable or not `jsonb`, a foreign key to `assets` whose delete action would change owner
//! records, a source without a guard or an index, or any other column whose sampled values are asset ids or storage
//! keys (and which is not listed in `asset_reference_exclusions`) makes it refuse, naming every cause.

use platform::sql::{quote_ident, quote_literal};
use sqlx::postgres::types::Oid;
use sqlx::{AssertSqlSafe, PgConnection};
use uuid::Uuid;

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

/// One row the sample read: an asset its text is a storage key of (for text), the row's table and `ctid`, its value
/// as text to search for ids, and how many rows the sample read.
type SampledRow = (Option<Uuid>, Oid, String, Option<String>, i64);

/// How many of a table's last blocks the sample reads, whole, besides its first rows: where rows inserted since the
/// census passed a table stand, so the next pass sees them, not the next cycle. Four blocks (32 KiB) a column:
/// about what the first rows cost. (A partitioned table's first rows only: its root has no blocks of its own.)
const SAMPLE_TAIL_BLOCKS: i64 = 4;

/// Samples up to `sample_rows` rows of each candidate from the start of its table and every row of its last blocks
/// ([`SAMPLE_TAIL_BLOCKS`]): the fast first look, which the census's full scans then prove or refute. Each asset id it
/// finds (in any spelling; for text, a storage key too) is noted as a finding naming the column and the row, which
/// holds that asset (unless the transaction is read-only: `plan` and `explain` look without writing). A column
/// whose sampled rows look like an undeclared source ([`crate::census::looks_like_source`]) is a problem.
async fn sample(
    conn: &mut PgConnection,
    candidates: &[Candidate],
    sample_rows: u32,
) -> Result<Vec<SchemaProblem>, sqlx::Error> {
    let read_only = sqlx::query_scalar!(r#"SELECT current_setting('transaction_read_only') = 'on' AS "read_only!""#)
        .fetch_one(&mut *conn)
        .await?;
    let mut problems = Vec::new();
    // A column excluded for ids is the key scan's alone.
    for Candidate { schema, table, column, shape, family, type_oid, .. } in
        candidates.iter().filter(|c| c.reads != "keys")
    {
        // Built here, not checked at compile time: the table and column are the application's, known only now.
        let table_sql = format!("{}.{}", quote_ident(schema), quote_ident(table));
        let col = quote_ident(column);
        let regclass = quote_literal(&table_sql);
        // Each form yields the sampled values as text `v`; ids are then found anywhere inside them.
        let values = match (family.as_str(), shape.as_str()) {
            ("uuid" | "text" | "json", "array") => "unnest(s.c)::text".to_owned(),
            (family, _) => crate::census::text_of("s.c", family),
        };
        // A text equal to an adopted asset's key is a name the key scan keeps, not a finding: passed over here
        // exactly as the census passes over it (a legacy column of paths must not refuse every workspace).
        let storage_keys = if family == "text" {
            "UNION ALL SELECT a.id, s.rel, s.at::text, NULL, (SELECT count(*) FROM rows)
                        FROM sample s JOIN assets a ON a.storage_key = s.v
                       WHERE NOT EXISTS (SELECT 1 FROM adopted_assets d WHERE d.asset_id = a.id)"
        } else {
            ""
        };
        // The rows of a partitioned table are named by their partition (`tableoid`), as the census names them.
        let sql = format!(
            "WITH head(rel, at, c) AS (
                 (SELECT tableoid, ctid, {col} FROM {table_sql} WHERE {col} IS NOT NULL LIMIT $1)
                 UNION ALL
                 -- The first of the last blocks as a value of its own, so the scan starts there (a TID range
                 -- scan); nothing for a partitioned table's root, which has no blocks.
                 (SELECT tableoid, ctid, {col} FROM {table_sql}
                   WHERE ctid >= (SELECT format('(%s,0)', greatest(b.n - $2, 0))::tid
                                    FROM asset_sweeper_blocks({regclass}::regclass) AS b(n) WHERE b.n > 0)
                     AND {col} IS NOT NULL)
             ),
             rows AS (SELECT DISTINCT ON (rel, at) * FROM head ORDER BY rel, at),
             -- A probe reads a value's start only: one end user's hundred-megabyte comment must not outlast it.
             sample AS (SELECT s.rel, s.at, substr({values}, 1, $3) AS v FROM rows s)
             SELECT NULL::uuid, s.rel, s.at::text, s.v, (SELECT count(*) FROM rows) FROM sample s
             {storage_keys}"
        );
        // Under the table's lock, the column's type confirmed first: one retyped since the candidates were read is
        // not read by a reading planned for its old type. A schema change, so this verdict goes stale anyway.
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        let planned = crate::typed::Planned::one(&table_sql, column, type_oid);
        let read: Result<Vec<SampledRow>, sqlx::Error> = async {
            crate::typed::hold(&mut tx, &planned).await?;
            sqlx::query_as(AssertSqlSafe(sql))
                .bind(i64::from(sample_rows))
                .bind(SAMPLE_TAIL_BLOCKS)
                .bind(crate::census::unread::SLICE_CHARS)
                .persistent(false)
                .fetch_all(&mut *tx)
                .await
        }
        .await;
        let read = match read {
            Ok(read) => {
                tx.commit().await?;
                read
            }
            Err(e) if crate::typed::retyped(&e) => {
                tx.rollback().await?;
                tracing::warn!(%table_sql, %column, error = %e, "the sample read nothing of a column retyped since");
                continue;
            }
            Err(e) => return Err(e),
        };
        let Some(sampled) = read.first().map(|r| r.4) else { continue };
        // Each value searched in one pass (`census::ids`); which ids are assets, one question per column.
        let mut found: Vec<(Uuid, Oid, String)> = Vec::new();
        let mut spelled: Vec<(Uuid, Oid, String)> = Vec::new();
        for (id, rel, at, text) in read.into_iter().map(|r| (r.0, r.1, r.2, r.3)) {
            match (id, text) {
                (Some(id), _) => found.push((id, rel, at)),
                (None, Some(text)) => {
                    spelled.extend(crate::census::ids::ids_in(&text).into_iter().map(|id| (id, rel, at.clone())));
                }
                (None, None) => {}
            }
        }
        if !spelled.is_empty() {
            let candidates: Vec<Uuid> = spelled.iter().map(|s| s.0).collect();
            let assets = crate::census::assets_among(&mut *conn, &candidates).await?;
            found.extend(spelled.into_iter().filter(|s| assets.contains(&s.0)));
        }
        if found.is_empty() {
            continue;
        }
        let rows = found.iter().map(|f| (f.1, &f.2)).collect::<std::collections::HashSet<_>>().len();
        if crate::census::looks_like_source(i64::try_from(rows).unwrap_or(i64::MAX), sampled) {
            let data_type = if shape == "array" { format!("{family}[]") } else { family.clone() };
            problems.push(SchemaProblem::UnexplainedAssetIds {
                schema: schema.clone(),
                table: table.clone(),
                column: column.clone(),
                data_type,
            });
        }
        if !read_only {
            let found = found
                .into_iter()
                .map(|(asset, relid, record)| crate::census::Finding { asset, relid, column: column.clone(), record })
                .collect();
            crate::census::note_findings(&mut *conn, found).await?;
        }
    }
    Ok(problems)
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
