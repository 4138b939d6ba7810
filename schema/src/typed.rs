//! Reading an application's column only while its type is the one its reading was planned for.
//!
//! Postgres resolves a cast, an operator or a function when it parses a statement, by the types the catalog shows
//! at that moment. The census, the sample and discovery plan how to read a column (`::text` for a string, `::uuid`,
//! a JSON path, a range of uuids) from its type, then build that reading into a later statement. An application
//! owns its tables: it can retype a column to a type of its own with a cast of its own between the plan and the
//! statement, and the statement would then run that cast as the sweeper's login (docs/security.md, "The rule").
//! So each such statement's transaction first locks the tables it reads (`ACCESS SHARE`, which `ALTER TABLE ...
//! TYPE` must wait for) and confirms every column still has its planned type
//! (`asset_sweeper_read_as_planned`); a column retyped since ends the read with SQLSTATE `AS001` ([`retyped`]),
//! before anything was cast.

use sqlx::PgConnection;

/// The SQLSTATE `asset_sweeper_read_as_planned` fails with when a column's type is no longer the planned one.
pub const RETYPED: &str = "AS001";

/// The columns one statement reads, each with the type its reading was planned for.
#[derive(Debug, Clone, Default)]
pub struct Planned {
    relations: Vec<String>,
    columns: Vec<String>,
    types: Vec<String>,
}

impl Planned {
    /// One column, as [`Planned::add`] takes it.
    pub fn one(relation: &str, column: &str, type_name: impl ToString) -> Self {
        let mut planned = Planned::default();
        planned.add(relation, column, type_name);
        planned
    }

    /// The columns `source` is read by ([`Planned::add_source`]).
    pub fn source(source: &crate::map::ReferenceSource) -> Self {
        let mut planned = Planned::default();
        planned.add_source(source);
        planned
    }

    /// The columns `source` is read by: its own column, or each column a key source's template reads; each with the
    /// type the map was derived for.
    pub fn add_source(&mut self, source: &crate::map::ReferenceSource) {
        let table = source.quoted_table();
        match &source.kind {
            crate::map::SourceKind::Key(template) => {
                for (column, type_name) in &template.columns {
                    self.add(&table, column, type_name);
                }
            }
            _ => self.add(&table, &source.column, &source.column_type),
        }
    }

    /// Column `column` of `relation` (a quoted, qualified name), planned for `type_name`: the type's oid, or its
    /// name as `format_type` or `regtype` prints it in the sweeper's sessions.
    pub fn add(&mut self, relation: &str, column: &str, type_name: impl ToString) {
        self.relations.push(relation.to_owned());
        self.columns.push(column.to_owned());
        self.types.push(type_name.to_string());
    }
}

/// Inside the caller's transaction (a savepoint will do): locks the planned columns' tables until it ends, and
/// fails with [`RETYPED`] naming a column whose type changed since it was planned, or that is gone. Run before the
/// statement that reads them, in the same transaction.
pub async fn hold(conn: &mut PgConnection, planned: &Planned) -> Result<(), sqlx::Error> {
    if planned.relations.is_empty() {
        return Ok(());
    }
    sqlx::query!(
        "SELECT asset_sweeper_read_as_planned($1, $2, $3)",
        &planned.relations,
        &planned.columns,
        &planned.types
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Whether `error` is [`hold`]'s refusal: a column retyped since its reading was planned.
pub fn retyped(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db) if db.code().as_deref() == Some(RETYPED))
}
