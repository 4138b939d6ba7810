//! The reference map: every place an owner record can refer to an asset, and the schema check that must pass
//! before anything is destroyed (invariant 4).
//!
//! Sources are derived from the live catalog — every foreign key to `assets`, every column of the `asset_id`
//! domain (scalar or array) — plus the JSONB documents declared in `asset_reference_sources`. The check fails
//! closed: a declared source that is missing, unreadable or not `jsonb`, a foreign key to `assets` whose
//! delete action would change owner records, or any other column whose sampled values are asset ids or storage
//! keys (and which is not listed in `asset_reference_exclusions`) makes it refuse, naming every cause.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::settings::{Settings, UnindexedSources};
use sqlx::{AssertSqlSafe, PgConnection};

/// How a source refers to assets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SourceKind {
    /// A column with a foreign key to `assets(id)`.
    ForeignKey,
    /// A column of the `asset_id` domain.
    Domain,
    /// A column of `asset_id[]`.
    DomainArray,
    /// A declared `jsonb` column; `json_path` selects the asset ids in each document.
    Json {
        /// The SQL/JSON path, from `asset_reference_sources`.
        json_path: String,
    },
}

/// One column that can hold references to assets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReferenceSource {
    /// The schema of its table.
    pub schema: String,
    /// Its table.
    pub table: String,
    /// The column.
    pub column: String,
    /// How it holds asset ids.
    #[serde(flatten)]
    pub kind: SourceKind,
    /// The column's SQL type as the catalog prints it (`asset_id[]`, `jsonb`, ...).
    #[serde(default)]
    pub column_type: String,
    /// The table's primary-key columns, which name a referencing record in the evidence; empty without one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key_columns: Vec<String>,
    /// A GIN index of the default `jsonb_ops` class leads on the column: it indexes every value on its own, so a
    /// search by value alone is what it answers fastest (`jsonb_path_ops` indexes values by their paths).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub value_indexed: bool,
}

impl ReferenceSource {
    /// A source as the catalog shows it; its key columns and indexes are read when the map is checked.
    fn derived(schema: String, table: String, column: String, kind: SourceKind, column_type: String) -> Self {
        ReferenceSource { schema, table, column, kind, column_type, key_columns: Vec::new(), value_indexed: false }
    }

    /// `schema.table.column`, quoted as SQL identifiers, for the queries that read this source.
    pub fn quoted_table(&self) -> String {
        format!("{}.{}", quote_ident(&self.schema), quote_ident(&self.table))
    }
}

impl fmt::Display for ReferenceSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.schema, self.table, self.column)?;
        match &self.kind {
            SourceKind::ForeignKey => f.write_str(" (foreign key)"),
            SourceKind::Domain => f.write_str(" (asset_id)"),
            SourceKind::DomainArray => f.write_str(" (asset_id[])"),
            SourceKind::Json { json_path } => write!(f, " (jsonb {json_path})"),
        }
    }
}

/// The validated map: every source settlement must recheck.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReferenceMap {
    /// Every source, in a stable order.
    pub sources: Vec<ReferenceSource>,
    /// Problems a setting turned into warnings (an unindexed source under `UNINDEXED_SOURCES=warn`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<SchemaProblem>,
    /// Columns (`schema.table.column`) the census has not yet read completely as they stand: while any is named,
    /// nothing is deleted or purged; retiring, which is reversible, goes on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unproven: Vec<String>,
}

impl ReferenceMap {
    /// Whether the census has proven every column of the schema as it stands, so deleting and purging may go on.
    pub fn proven(&self) -> bool {
        self.unproven.is_empty()
    }
}

/// One reason the schema cannot be trusted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "problem", rename_all = "snake_case")]
pub enum SchemaProblem {
    /// The `asset_id` domain is gone: domain-typed references can no longer be found.
    DomainMissing,
    /// A declared JSONB source names a table or column that does not exist.
    DeclaredSourceMissing {
        /// The schema of the table.
        schema: String,
        /// The table.
        table: String,
        /// The column.
        column: String,
    },
    /// A declared JSONB source is not of type `jsonb`.
    DeclaredSourceWrongType {
        /// The schema of the table.
        schema: String,
        /// The table.
        table: String,
        /// The column.
        column: String,
        /// The type it has.
        found: String,
    },
    /// A reference source this role cannot read.
    SourceUnreadable {
        /// The schema of the table.
        schema: String,
        /// The table.
        table: String,
        /// The column.
        column: String,
    },
    /// A foreign key to `assets` that would delete or rewrite owner records when an asset row goes.
    DestructiveForeignKey {
        /// The schema of the table.
        schema: String,
        /// The table.
        table: String,
        /// The column.
        column: String,
        /// The key's `ON DELETE` action.
        on_delete: String,
    },
    /// A column that is no source but whose sampled values are asset ids or storage keys.
    UnexplainedAssetIds {
        /// The schema of the table.
        schema: String,
        /// The table.
        table: String,
        /// The column.
        column: String,
        /// The column's type.
        data_type: String,
    },
    /// A source no index can serve: every recheck of it would read the whole table.
    UnindexedSource {
        /// The schema of the table.
        schema: String,
        /// The table.
        table: String,
        /// The column.
        column: String,
        /// The statement that adds the index the recheck needs.
        create_index: String,
    },
    /// A column that is no source in which the census's full scan found an asset id (or a storage key).
    FoundByCensus {
        /// The schema of the table.
        schema: String,
        /// The table.
        table: String,
        /// The column.
        column: String,
        /// The asset it found.
        asset_id: uuid::Uuid,
    },
    /// A declared JSONB source holding an asset id outside its declared path, where the recheck does not look.
    IdOutsideDeclaredPath {
        /// The schema of the table.
        schema: String,
        /// The table.
        table: String,
        /// The column.
        column: String,
        /// The declared path.
        json_path: String,
        /// The asset it found.
        asset_id: uuid::Uuid,
    },
    /// A source that is not a foreign key and has no reference guard: an uncommitted write of a reference to it
    /// could slip past a settle.
    UnguardedSource {
        /// The schema of the table.
        schema: String,
        /// The table.
        table: String,
        /// The column.
        column: String,
        /// The command that installs every guard.
        install: String,
    },
}

impl SchemaProblem {
    /// The column the problem is about, as `(schema, table, column)`; `None` for a problem of the whole schema.
    pub fn column(&self) -> Option<(&str, &str, &str)> {
        match self {
            SchemaProblem::DomainMissing => None,
            SchemaProblem::DeclaredSourceMissing { schema, table, column }
            | SchemaProblem::DeclaredSourceWrongType { schema, table, column, .. }
            | SchemaProblem::SourceUnreadable { schema, table, column }
            | SchemaProblem::DestructiveForeignKey { schema, table, column, .. }
            | SchemaProblem::UnexplainedAssetIds { schema, table, column, .. }
            | SchemaProblem::FoundByCensus { schema, table, column, .. }
            | SchemaProblem::IdOutsideDeclaredPath { schema, table, column, .. }
            | SchemaProblem::UnindexedSource { schema, table, column, .. }
            | SchemaProblem::UnguardedSource { schema, table, column, .. } => Some((schema, table, column)),
        }
    }

    fn unreadable(schema: &str, table: &str, column: &str) -> Self {
        SchemaProblem::SourceUnreadable {
            schema: schema.to_owned(),
            table: table.to_owned(),
            column: column.to_owned(),
        }
    }
}

impl fmt::Display for SchemaProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchemaProblem::DomainMissing => f.write_str("the asset_id domain does not exist"),
            SchemaProblem::DeclaredSourceMissing { schema, table, column } => {
                write!(f, "declared source {schema}.{table}.{column} does not exist")
            }
            SchemaProblem::DeclaredSourceWrongType { schema, table, column, found } => {
                write!(f, "declared source {schema}.{table}.{column} is {found}, not jsonb")
            }
            SchemaProblem::SourceUnreadable { schema, table, column } => {
                write!(f, "{schema}.{table}.{column} cannot be read by this database role")
            }
            SchemaProblem::DestructiveForeignKey { schema, table, column, on_delete } => {
                write!(f, "foreign key {schema}.{table}.{column} -> assets is ON DELETE {on_delete}")
            }
            SchemaProblem::UnexplainedAssetIds { schema, table, column, data_type } => write!(
                f,
                "{schema}.{table}.{column} ({data_type}) holds asset ids or storage keys but is neither a \
                 reference source nor listed in asset_reference_exclusions"
            ),
            SchemaProblem::FoundByCensus { schema, table, column, asset_id } => write!(
                f,
                "{schema}.{table}.{column} holds asset {asset_id} (found by the census's full scan) but is neither a \
                 reference source nor listed in asset_reference_exclusions"
            ),
            SchemaProblem::IdOutsideDeclaredPath { schema, table, column, json_path, asset_id } => write!(
                f,
                "declared source {schema}.{table}.{column} holds asset {asset_id} outside its path {json_path} \
                 (found by the census): widen the declared path, or write ids where it looks"
            ),
            SchemaProblem::UnindexedSource { schema, table, column, create_index } => write!(
                f,
                "{schema}.{table}.{column} has no index that serves the recheck (each one would read the whole \
                 table): {create_index}"
            ),
            SchemaProblem::UnguardedSource { schema, table, column, install } => write!(
                f,
                "{schema}.{table}.{column} has no reference guard, so a reference written to it while a settle \
                 runs could go unseen: run `{install}`"
            ),
        }
    }
}

/// The schema check refused: nothing may be retired, deleted or purged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub struct SchemaRefusal {
    /// Every problem found.
    pub problems: Vec<SchemaProblem>,
    /// The sources derived before the check refused, for an operator's view of the map.
    #[serde(skip, default)]
    pub sources: Vec<ReferenceSource>,
}

impl fmt::Display for SchemaRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the reference map does not validate: ")?;
        for (i, problem) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

/// Why the check gave no map.
#[derive(Debug, thiserror::Error)]
pub enum SchemaCheckError {
    /// The schema cannot be trusted.
    #[error(transparent)]
    Refused(#[from] SchemaRefusal),
    /// The catalog could not be read.
    #[error("cannot read the catalog for the schema check: {0}")]
    Database(#[from] sqlx::Error),
}

/// Tables the project owns: their columns are bookkeeping, not owner records. `asset_sweeper_own_tables()`, which
/// refuses a retention rule on one of them, lists the same (the schema test compares them).
pub const OWN_TABLES: &[&str] = &[
    "assets",
    "stored_objects",
    "asset_reference_sources",
    "asset_reference_exclusions",
    "sweep_runs",
    "settlement_events",
    "brake_approvals",
    "asset_sweeper_migrations",
    "asset_sweeper_schema_state",
    "schema_verdicts",
    "census_columns",
    "census_state",
    "asset_id_spellings",
    "discovery_state",
    "reconcile_listings",
    "reconcile_keys",
    "lost_assets",
    "reconcile_prefixes",
    "adopted_assets",
    "named_keys",
    "retention_rules",
    "workspace_quotas",
    "workspace_objects",
    "workspace_usage",
    "workspace_object_changes",
];

/// `sqlx::query!` of `$head`, then SQL that is true when this role reads every row of column `a` of table `c` in
/// schema `n` (schema usage, column privilege, and no row-level security policy that would silently hide rows, and
/// so references, from it), then `$tail`. A macro, not a constant: the checked macros take only string literals,
/// and so the test is still written once.
macro_rules! query_with_readable {
    ($head:tt, $tail:tt $(, $arg:expr)* $(,)?) => {
        sqlx::query!(
            $head
                + "(has_schema_privilege(n.oid, 'USAGE') AND has_column_privilege(c.oid, a.attnum, 'SELECT')
                    AND (NOT c.relrowsecurity
                         OR (SELECT rolbypassrls FROM pg_roles WHERE rolname = current_user)
                         OR (pg_has_role(c.relowner, 'USAGE') AND NOT c.relforcerowsecurity)))"
                + $tail
            $(, $arg)*
        )
    };
}

/// How the check is run: from the settings the functions and the CLI share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckOptions {
    /// Values sampled from each uuid, text or JSON column that is not a source.
    pub sample_rows: u32,
    /// What an unindexed source does to the check.
    pub unindexed: UnindexedSources,
}

impl From<&Settings> for CheckOptions {
    fn from(settings: &Settings) -> Self {
        CheckOptions { sample_rows: settings.schema_sample_rows, unindexed: settings.unindexed_sources }
    }
}

/// What the catalog alone tells, before any row is read.
#[derive(Debug, Clone)]
pub struct Derived {
    /// Every source, in a stable order.
    pub sources: Vec<ReferenceSource>,
    /// The problems the catalog shows.
    pub problems: Vec<SchemaProblem>,
    /// The readable columns that are no source but could hold asset ids: what the sample and the census read.
    pub candidates: Vec<Candidate>,
}

/// A uuid, text or JSON column (or an array of one) that is neither a source, excluded, nor the project's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The schema of its table.
    pub schema: String,
    /// Its table (a partitioned table's root).
    pub table: String,
    /// The column.
    pub column: String,
    /// `scalar` or `array`.
    pub shape: String,
    /// `uuid`, `text` or `json`.
    pub family: String,
}

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

/// The sources, the problems and the candidate columns, from the catalog alone.
pub async fn derive(conn: &mut PgConnection) -> Result<Derived, sqlx::Error> {
    let mut problems = Vec::new();
    let mut sources = Vec::new();

    let domain = sqlx::query!(
        "SELECT t.oid, t.typarray FROM pg_type t
          WHERE t.typname = 'asset_id' AND t.typtype = 'd'
            AND t.typnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'assets'::regclass)",
    )
    .fetch_optional(&mut *conn)
    .await?
    .map(|t| (t.oid, t.typarray));
    if domain.is_none() {
        problems.push(SchemaProblem::DomainMissing);
    }

    // Foreign keys to assets, by the column that maps to assets.id (a key may be composite). Partitions inherit
    // their parent's key (conparentid <> 0): check the parent only.
    let keys = query_with_readable!(
        r#"SELECT n.nspname::text AS "schema!", c.relname::text AS "table!", a.attname::text AS "column!",
                  format_type(a.atttypid, a.atttypmod) AS "column_type!", con.confdeltype::text AS "action!", "#,
        r#" AS "readable!"
             FROM pg_constraint con
             JOIN pg_class c ON c.oid = con.conrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
            CROSS JOIN LATERAL unnest(con.conkey, con.confkey) AS k(attnum, refnum)
             JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.attnum
             JOIN pg_attribute ra ON ra.attrelid = con.confrelid AND ra.attnum = k.refnum
            WHERE con.contype = 'f' AND con.confrelid = 'assets'::regclass AND con.conparentid = 0
              AND ra.attname = 'id'
            ORDER BY 1, 2, 3"#
    )
    .fetch_all(&mut *conn)
    .await?;
    for key in keys {
        let (schema, table, column, column_type, action, readable) =
            (key.schema, key.table, key.column, key.column_type, key.action, key.readable);
        let on_delete = match action.as_str() {
            "c" => Some("CASCADE"),
            "n" => Some("SET NULL"),
            "d" => Some("SET DEFAULT"),
            _ => None,
        };
        if let Some(on_delete) = on_delete {
            problems.push(SchemaProblem::DestructiveForeignKey {
                schema: schema.clone(),
                table: table.clone(),
                column: column.clone(),
                on_delete: on_delete.to_owned(),
            });
        }
        if !readable {
            problems.push(SchemaProblem::unreadable(&schema, &table, &column));
        }
        sources.push(ReferenceSource::derived(schema, table, column, SourceKind::ForeignKey, column_type));
    }

    if let Some((domain_oid, _)) = domain {
        // Columns of asset_id, of any domain built on it, and arrays of those.
        let columns = query_with_readable!(
            r#"WITH RECURSIVE ref_types(oid) AS (
                   SELECT $1::oid
                   UNION
                   SELECT d.oid FROM pg_type d JOIN ref_types r ON d.typbasetype = r.oid WHERE d.typtype = 'd'
               )
               SELECT n.nspname::text AS "schema!", c.relname::text AS "table!", a.attname::text AS "column!",
                      format_type(a.atttypid, a.atttypmod) AS "column_type!",
                      a.atttypid IN (SELECT oid FROM ref_types) AS "scalar!", "#,
            r#" AS "readable!"
                 FROM pg_attribute a
                 JOIN pg_class c ON c.oid = a.attrelid
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE (a.atttypid IN (SELECT oid FROM ref_types)
                       OR a.atttypid IN (SELECT t.typarray FROM pg_type t JOIN ref_types r ON r.oid = t.oid))
                  AND a.attnum > 0 AND NOT a.attisdropped
                  AND c.relkind IN ('r', 'p') AND NOT c.relispartition
                ORDER BY 1, 2, 3"#,
            domain_oid,
        )
        .fetch_all(&mut *conn)
        .await?;
        for found in columns {
            let (schema, table, column, column_type, scalar, readable) =
                (found.schema, found.table, found.column, found.column_type, found.scalar, found.readable);
            // A domain column with a foreign key as well is one source, not two.
            if sources.iter().any(|s| s.schema == schema && s.table == table && s.column == column) {
                continue;
            }
            if !readable {
                problems.push(SchemaProblem::unreadable(&schema, &table, &column));
            }
            let kind = if scalar { SourceKind::Domain } else { SourceKind::DomainArray };
            sources.push(ReferenceSource::derived(schema, table, column, kind, column_type));
        }
    }

    // Each declaration and what the catalog says of its column: no data type when the table or column does not exist.
    let declared = query_with_readable!(
        r#"SELECT s.table_schema AS schema, s.table_name AS table, s.column_name AS column,
                  s.json_path::text AS "json_path!", format_type(a.atttypid, a.atttypmod) AS data_type, "#,
        r#" AS readable
             FROM asset_reference_sources s
             LEFT JOIN pg_namespace n ON n.nspname = s.table_schema
             LEFT JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = s.table_name AND c.relkind IN ('r', 'p')
             LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = s.column_name
                                     AND a.attnum > 0 AND NOT a.attisdropped
            ORDER BY s.id"#
    )
    .fetch_all(&mut *conn)
    .await?;
    for row in declared {
        let (schema, table, column, json_path, data_type, readable) =
            (row.schema, row.table, row.column, row.json_path, row.data_type, row.readable);
        match data_type.as_deref() {
            None => problems.push(SchemaProblem::DeclaredSourceMissing {
                schema: schema.clone(),
                table: table.clone(),
                column: column.clone(),
            }),
            Some("jsonb") => {
                if readable != Some(true) {
                    problems.push(SchemaProblem::unreadable(&schema, &table, &column));
                }
            }
            Some(found) => problems.push(SchemaProblem::DeclaredSourceWrongType {
                schema: schema.clone(),
                table: table.clone(),
                column: column.clone(),
                found: found.to_owned(),
            }),
        }
        let column_type = data_type.unwrap_or_default();
        let kind = SourceKind::Json { json_path };
        sources.push(ReferenceSource::derived(schema, table, column, kind, column_type));
    }

    let candidates = candidates(conn, &sources, &mut problems).await?;
    Ok(Derived { sources, problems, candidates })
}

/// The valid, whole-table indexes whose leading column is a source's: their access methods and that column's
/// operator classes, pairwise.
struct LeadingIndexes {
    methods: Vec<String>,
    classes: Vec<String>,
}

/// The indexes leading on `source`'s column; `None` when its table or column is missing (reported elsewhere).
async fn leading_indexes(
    conn: &mut PgConnection,
    source: &ReferenceSource,
) -> Result<Option<LeadingIndexes>, sqlx::Error> {
    let found = sqlx::query!(
        r#"SELECT coalesce(array_agg(am.amname::text) FILTER (WHERE i.indexrelid IS NOT NULL), '{}') AS "methods!",
                  coalesce(array_agg(oc.opcname::text) FILTER (WHERE i.indexrelid IS NOT NULL), '{}') AS "classes!"
             FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = $3 AND NOT a.attisdropped
             LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisvalid AND i.indpred IS NULL
                                 AND i.indkey[0] = a.attnum
             LEFT JOIN pg_class ic ON ic.oid = i.indexrelid
             LEFT JOIN pg_am am ON am.oid = ic.relam
             LEFT JOIN pg_opclass oc ON oc.oid = i.indclass[0]
            WHERE n.nspname = $1 AND c.relname = $2
            GROUP BY a.attnum"#,
        &source.schema,
        &source.table,
        &source.column,
    )
    .fetch_optional(conn)
    .await?;
    Ok(found.map(|f| LeadingIndexes { methods: f.methods, classes: f.classes }))
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

/// The primary-key columns of `schema.table`, in key order (empty for a table without one, or a missing one).
async fn primary_key(conn: &mut PgConnection, schema: &str, table: &str) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT a.attname::text AS "column!"
             FROM pg_index i
             JOIN pg_class c ON c.oid = i.indrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
            CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, position)
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
            WHERE n.nspname = $1 AND c.relname = $2 AND i.indisprimary
            ORDER BY k.position"#,
        schema,
        table,
    )
    .fetch_all(conn)
    .await
}

/// Every uuid, text and JSON column that is neither a source, excluded, nor the project's own; one this role
/// cannot read is a problem instead (fail closed: a column nobody can read might hold references).
async fn candidates(
    conn: &mut PgConnection,
    sources: &[ReferenceSource],
    problems: &mut Vec<SchemaProblem>,
) -> Result<Vec<Candidate>, sqlx::Error> {
    // Every column whose type is, or is a domain over, a uuid, string or JSON type, or an array of one.
    let rows = query_with_readable!(
        r#"WITH RECURSIVE base(oid, base) AS (
             SELECT oid, oid FROM pg_type WHERE typtype <> 'd'
             UNION ALL
             SELECT d.oid, b.base FROM pg_type d JOIN base b ON d.typbasetype = b.oid WHERE d.typtype = 'd'
         ),
         shaped AS (
             SELECT b.oid,
                    CASE WHEN bt.typcategory = 'A' THEN 'array' ELSE 'scalar' END AS shape,
                    CASE WHEN bt.typcategory = 'A' THEN eb.base ELSE b.base END AS scalar_base
               FROM base b
               JOIN pg_type bt ON bt.oid = b.base
               LEFT JOIN base eb ON eb.oid = bt.typelem AND bt.typcategory = 'A'
         ),
         families AS (
             SELECT sh.oid, sh.shape,
                    CASE WHEN st.typname = 'uuid' THEN 'uuid'
                         WHEN st.typname IN ('json', 'jsonb') THEN 'json'
                         WHEN st.typcategory = 'S' THEN 'text' END AS family
               FROM shaped sh JOIN pg_type st ON st.oid = sh.scalar_base
         )
         SELECT n.nspname::text AS "schema!", c.relname::text AS "table!", a.attname::text AS "column!",
                f.shape AS "shape!", f.family AS "family!", "#,
        r#" AS "readable!"
           FROM pg_attribute a
           JOIN pg_class c ON c.oid = a.attrelid
           JOIN pg_namespace n ON n.oid = c.relnamespace
           JOIN families f ON f.oid = a.atttypid AND f.family IS NOT NULL
          WHERE a.attnum > 0 AND NOT a.attisdropped
            AND c.relkind IN ('r', 'p') AND NOT c.relispartition
            AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%'
            AND NOT (c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'assets'::regclass)
                     AND c.relname = ANY ($1))
            AND NOT EXISTS (SELECT 1 FROM asset_reference_exclusions x
                             WHERE x.table_schema = n.nspname AND x.table_name = c.relname
                               AND x.column_name = a.attname)
          ORDER BY 1, 2, 3"#,
        OWN_TABLES as &[&str],
    )
    .fetch_all(&mut *conn)
    .await?;

    let mut found = Vec::new();
    for row in rows {
        let (schema, table, column) = (row.schema, row.table, row.column);
        if sources.iter().any(|s| s.schema == schema && s.table == table && s.column == column) {
            continue;
        }
        if !row.readable {
            problems.push(SchemaProblem::SourceUnreadable { schema, table, column });
            continue;
        }
        found.push(Candidate { schema, table, column, shape: row.shape, family: row.family });
    }
    Ok(found)
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

/// A POSIX regular expression whose first group is a hyphenated uuid in any letter case: how the sample and the
/// census find asset ids inside text and JSON.
pub const UUID_IN_TEXT: &str = "([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})";

/// Quotes an SQL identifier (catalog names are data, so they are never spliced in raw).
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Quotes an SQL string literal, for the few places a value must be spliced into DDL or a JSON key.
pub fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted_so_catalog_names_cannot_inject_sql() {
        assert_eq!(quote_ident("pages"), "\"pages\"");
        assert_eq!(quote_ident("we\"ird; DROP TABLE assets"), "\"we\"\"ird; DROP TABLE assets\"");
    }

    #[test]
    fn a_refusal_names_every_problem() {
        let refusal = SchemaRefusal {
            problems: vec![
                SchemaProblem::DomainMissing,
                SchemaProblem::DestructiveForeignKey {
                    schema: "public".into(),
                    table: "products".into(),
                    column: "image_id".into(),
                    on_delete: "CASCADE".into(),
                },
            ],
            sources: Vec::new(),
        };
        assert_eq!(
            refusal.to_string(),
            "the reference map does not validate: the asset_id domain does not exist; \
             foreign key public.products.image_id -> assets is ON DELETE CASCADE"
        );
    }
}
