//! The reference map's model: every place an owner record can refer to an asset (a [`ReferenceSource`] of a
//! [`SourceKind`]), the validated [`ReferenceMap`], and the [`SchemaProblem`]s that make the schema check refuse
//! (invariant 4). [`crate::derive`] reads it from the catalog; [`crate::check`] validates it.

use std::fmt;

use platform::sql::{quote_ident, quote_literal};
use serde::{Deserialize, Serialize};

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
    /// A column of a composite type (or an array of one) with the `asset_id` domain somewhere inside, however deep:
    /// read by `asset_sweeper_nested_ids`, which its GIN index serves.
    Nested,
    /// A declared `jsonb` column; `json_path` selects the asset ids in each document.
    Json {
        /// The SQL/JSON path, from `asset_reference_sources`.
        json_path: String,
    },
    /// A declared key source (`asset_key_sources`): its rows name an asset by its storage key, which the template
    /// makes of the row's columns (`media/{file}`). Its `column` is the template's last column.
    Key(crate::key_sources::KeyTemplate),
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
    pub(crate) fn derived(
        schema: String,
        table: String,
        column: String,
        kind: SourceKind,
        column_type: String,
    ) -> Self {
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
            SourceKind::Nested => write!(f, " ({}, asset_id inside)", self.column_type),
            SourceKind::Json { json_path } => write!(f, " (jsonb {json_path})"),
            SourceKind::Key(template) => write!(f, " (key {template})"),
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
        /// The statements that make it `ON DELETE NO ACTION`, keeping the rest of its definition (empty in a
        /// verdict recorded before they were named).
        #[serde(default)]
        fix: String,
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
    /// A column whose type could hold an asset id in a form the census cannot read as written (a text search
    /// vector normalises and splits words; a large object's bytes are not in the row): refused by name until it
    /// is excluded.
    UnreadableShape {
        /// The schema of the table.
        schema: String,
        /// The table.
        table: String,
        /// The column.
        column: String,
        /// The column's type.
        data_type: String,
        /// The statement that lets it through, once a person has decided it holds no asset ids.
        exclude: String,
    },
    /// A column that could hold an asset id in rows on another server (a foreign table, or a partitioned table
    /// with a foreign partition): the census does not read another server, so it is refused by name until it is
    /// excluded.
    ForeignRows {
        /// The schema of the table.
        schema: String,
        /// The table.
        table: String,
        /// The column.
        column: String,
        /// The statement that lets it through, once a person has decided it holds no asset ids.
        exclude: String,
    },
    /// A declared key source the schema no longer allows: its table or a column is gone, a column's type changed
    /// to one the key source may not read, or its root lies outside every managed prefix.
    KeySourceInvalid {
        /// The schema of the table.
        schema: String,
        /// The table.
        table: String,
        /// The template as declared.
        template: String,
        /// What is wrong, and what fixes it.
        why: String,
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
            SchemaProblem::DomainMissing | SchemaProblem::KeySourceInvalid { .. } => None,
            SchemaProblem::DeclaredSourceMissing { schema, table, column }
            | SchemaProblem::DeclaredSourceWrongType { schema, table, column, .. }
            | SchemaProblem::SourceUnreadable { schema, table, column }
            | SchemaProblem::DestructiveForeignKey { schema, table, column, .. }
            | SchemaProblem::UnexplainedAssetIds { schema, table, column, .. }
            | SchemaProblem::FoundByCensus { schema, table, column, .. }
            | SchemaProblem::IdOutsideDeclaredPath { schema, table, column, .. }
            | SchemaProblem::UnindexedSource { schema, table, column, .. }
            | SchemaProblem::UnguardedSource { schema, table, column, .. }
            | SchemaProblem::UnreadableShape { schema, table, column, .. }
            | SchemaProblem::ForeignRows { schema, table, column, .. } => Some((schema, table, column)),
        }
    }

    pub(crate) fn unreadable(schema: &str, table: &str, column: &str) -> Self {
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
            SchemaProblem::KeySourceInvalid { schema, table, template, why } => write!(
                f,
                "key source {schema}.{table} {template:?}: {why}; fix the declaration in \
                 asset_sweeper.asset_key_sources (or delete it)"
            ),
            SchemaProblem::DeclaredSourceMissing { schema, table, column } => {
                write!(f, "declared source {schema}.{table}.{column} does not exist")
            }
            SchemaProblem::DeclaredSourceWrongType { schema, table, column, found } => {
                write!(f, "declared source {schema}.{table}.{column} is {found}, not jsonb")
            }
            SchemaProblem::SourceUnreadable { schema, table, column } => {
                write!(f, "{schema}.{table}.{column} cannot be read by this database role")
            }
            SchemaProblem::DestructiveForeignKey { schema, table, column, on_delete, fix } => {
                write!(f, "foreign key {schema}.{table}.{column} -> assets is ON DELETE {on_delete}")?;
                if !fix.is_empty() {
                    write!(
                        f,
                        ": removing an asset row would change the record that names it; make the key NO ACTION \
                         (the sweeper removes a row only when nothing refers to it, so the key never acts): {fix}"
                    )?;
                }
                Ok(())
            }
            SchemaProblem::UnexplainedAssetIds { schema, table, column, data_type } => write!(
                f,
                "{schema}.{table}.{column} ({data_type}) holds asset ids or storage keys but is neither a \
                 reference source nor listed in asset_reference_exclusions: declare it as a source, or, if its \
                 ids are no references, exclude it for ids (the key scan still reads it, so a file it names by key \
                 keeps its bytes): {}",
                exclusion(schema, table, column, "ids")
            ),
            SchemaProblem::FoundByCensus { schema, table, column, asset_id } => write!(
                f,
                "{schema}.{table}.{column} holds asset {asset_id} (found by the census's full scan) but is neither a \
                 reference source nor listed in asset_reference_exclusions: declare it as a source, or, if its \
                 ids are no references, exclude it for ids (the key scan still reads it): {}",
                exclusion(schema, table, column, "ids")
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
            SchemaProblem::UnreadableShape { schema, table, column, data_type, exclude } => write!(
                f,
                "{schema}.{table}.{column} ({data_type}) could hold asset ids the census cannot read as written: \
                 make it a reference source, or, if it holds none, exclude it: {exclude}"
            ),
            SchemaProblem::ForeignRows { schema, table, column, exclude } => write!(
                f,
                "{schema}.{table}.{column} could hold asset ids in rows on another server (a foreign table or \
                 partition), which the census does not read: if it holds none, exclude it: {exclude}"
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

/// How the check is run: from the settings the functions and the CLI share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckOptions {
    /// Values sampled from each uuid, text or JSON column that is not a source.
    pub sample_rows: u32,
    /// What an unindexed source does to the check.
    pub unindexed: UnindexedSources,
    /// The managed prefixes reconciliation reads (`RECONCILE_PREFIXES`; `""` is the whole bucket), when configured:
    /// a key source whose root lies outside all of them can name no key of ours, and is refused as a mistake.
    pub managed_prefixes: Option<Vec<String>>,
    /// What bounds a census cycle, when set ([`CensusPace`]).
    pub census_pace: Option<CensusPace>,
}

/// How long a census cycle may take: half of the shortest time a retired asset waits for its purge, less the rest
/// between cycles. A reference written just behind the scan is read by the next cycle, after the rest; while the
/// cycle under way (or the rest, overdue), or the last whole one, has taken longer, an asset could be purged before
/// its reference is read, and no column counts as proven.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CensusPace {
    /// `RETENTION` now; an asset retired under a shorter one keeps its purge time, and the shorter counts.
    pub retention: std::time::Duration,
    /// `CENSUS_CYCLE_INTERVAL`: the rest between cycles.
    pub rest: std::time::Duration,
}

/// What the schema check does with a reference source that has no index able to serve the recheck.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnindexedSources {
    /// Refuse the map (the default): an unindexed foreign key turns every recheck into a table scan.
    Refuse,
    /// Record it as a warning in the verdict and the run record, and go on.
    Warn,
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

/// A column whose values could spell an asset id (docs/integrating.md, "Shapes") that is neither a source, excluded
/// for both ids and keys, nor the project's own.
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
    /// `uuid`, `text`, `json`, `bytea` or `value` (any other type read by its output function: composites,
    /// `hstore`, `xml`, an extension's types).
    pub family: String,
    /// What is read in it: `ids`, `keys` or `both`, what its exclusion (`asset_reference_exclusions.excludes`)
    /// leaves.
    pub reads: String,
    /// The column's type (its oid) when its reading was chosen: the census reads it only while it still has it.
    pub type_oid: u32,
}

/// The statement that lists `schema.table.column` in `asset_reference_exclusions` for `excludes` (`ids`, `keys`
/// or `both`): what a refusal offers once a person has decided what the column does not hold.
pub(crate) fn exclusion(schema: &str, table: &str, column: &str, excludes: &str) -> String {
    format!(
        "INSERT INTO asset_sweeper.asset_reference_exclusions (table_schema, table_name, column_name, excludes, \
         reason) VALUES ({}, {}, {}, {}, 'holds no {}');",
        quote_literal(schema),
        quote_literal(table),
        quote_literal(column),
        quote_literal(excludes),
        if excludes == "both" { "asset ids and names no stored file".to_owned() } else { format!("asset {excludes}") },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
                    fix: String::new(),
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
