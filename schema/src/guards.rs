//! Reference guards: the trigger `asset-sweeper guards install` puts on every reference source that is not a
//! foreign key, so a write committing a reference either waits for a settle holding the asset and fails when the
//! settle removed it, or is seen by the settle's recheck — what a foreign key guarantees, for every source kind.
//! The trigger runs `asset_sweeper_guard()` (defined in `schema/sql/guards.sql`); the schema check refuses while a source
//! lacks its guard, and the change detector treats a guard's DDL as a schema change.

use platform::sql::{quote_ident, quote_literal};
use sqlx::{AssertSqlSafe, PgConnection};

use crate::map::{ReferenceSource, SchemaProblem, SourceKind};

/// Every guard trigger's name starts with this; the rest is a hash of the column's name (trigger names are per
/// table, and a column's name may be too long to carry whole in 63 bytes).
pub const TRIGGER_PREFIX: &str = "asset_sweeper_guard_";

/// The command that installs the guards, named in the schema check's refusal.
pub const INSTALL: &str = "asset-sweeper guards install";

/// The guard a source needs: its trigger's name and arguments. `None` for a foreign key, which guards itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    /// The trigger's name on the source's table.
    pub trigger: String,
    /// The trigger function's arguments: the column, the source kind, the JSON path (empty but for JSON).
    pub args: [String; 3],
}

impl Guard {
    /// The guard `source` needs.
    pub fn of(source: &ReferenceSource) -> Option<Guard> {
        let (kind, path) = match &source.kind {
            SourceKind::ForeignKey => return None,
            SourceKind::Domain => ("domain", ""),
            SourceKind::DomainArray => ("domain_array", ""),
            SourceKind::Nested => ("nested", ""),
            SourceKind::Json { json_path } => ("json", json_path.as_str()),
        };
        Some(Guard {
            trigger: format!("{TRIGGER_PREFIX}{:016x}", fnv1a(source.column.as_bytes())),
            args: [source.column.clone(), kind.to_owned(), path.to_owned()],
        })
    }

    /// `pg_trigger.tgargs` as Postgres stores them: each argument followed by a NUL byte.
    fn stored_args(&self) -> Vec<u8> {
        self.args.iter().flat_map(|a| a.bytes().chain([0])).collect()
    }
}

/// A stable 64-bit hash of a column's name (FNV-1a): the same name gives the same trigger in every database.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

/// The sources among `sources` whose guard is missing, disabled in some session mode, or not the one the source
/// needs (another function, other arguments, not on insert and update), as schema-check problems.
pub async fn unguarded(
    conn: &mut PgConnection,
    sources: &[ReferenceSource],
) -> Result<Vec<SchemaProblem>, sqlx::Error> {
    let needed: Vec<(&ReferenceSource, Guard)> =
        sources.iter().filter(|s| !s.column_type.is_empty()).filter_map(|s| Guard::of(s).map(|g| (s, g))).collect();
    if needed.is_empty() {
        return Ok(Vec::new());
    }
    let schemas: Vec<&str> = needed.iter().map(|(s, _)| s.schema.as_str()).collect();
    let tables: Vec<&str> = needed.iter().map(|(s, _)| s.table.as_str()).collect();
    let columns: Vec<&str> = needed.iter().map(|(s, _)| s.column.as_str()).collect();
    let triggers: Vec<&str> = needed.iter().map(|(_, g)| g.trigger.as_str()).collect();
    let args: Vec<Vec<u8>> = needed.iter().map(|(_, g)| g.stored_args()).collect();
    // Row trigger (1), after (not 2), on insert (4) and update (16); enabled always, so a replica-mode session
    // (a bulk loader, logical replication) is guarded too; on any update, or on updates of this column.
    let guarded = sqlx::query!(
        r#"SELECT s.ordinality AS "position!", EXISTS (
                  SELECT 1 FROM pg_trigger t
                    JOIN pg_class c ON c.oid = t.tgrelid
                    JOIN pg_namespace n ON n.oid = c.relnamespace
                    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = s.col
                   WHERE n.nspname = s.schema AND c.relname = s.tbl AND t.tgname = s.name
                     AND t.tgenabled = 'A' AND t.tgfoid = to_regproc('asset_sweeper_guard') AND t.tgargs = s.args
                     AND (t.tgtype & 23) = 21
                     AND (cardinality(t.tgattr::int2[]) = 0 OR a.attnum = ANY (t.tgattr::int2[]))
              ) AS "guarded!"
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[])
                  WITH ORDINALITY AS s(schema, tbl, col, name, args)"#,
        &schemas as &[&str],
        &tables as &[&str],
        &columns as &[&str],
        &triggers as &[&str],
        &args,
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut problems = Vec::new();
    for row in guarded.into_iter().filter(|r| !r.guarded) {
        let Some((source, _)) = usize::try_from(row.position - 1).ok().and_then(|i| needed.get(i)) else { continue };
        problems.push(SchemaProblem::UnguardedSource {
            schema: source.schema.clone(),
            table: source.table.clone(),
            column: source.column.clone(),
            install: INSTALL.to_owned(),
        });
    }
    Ok(problems)
}

/// What `install` did to one source.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Installed {
    /// `schema.table.column`.
    pub source: String,
    /// The trigger.
    pub trigger: String,
}

/// What `install` changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    /// The guard of every source that needs one, (re)created.
    pub installed: Vec<Installed>,
    /// Guards of columns that are no longer sources, dropped (`schema.table`, trigger).
    pub removed: Vec<(String, String)>,
}

/// Puts the guard each of `sources` needs in place and drops guards no source needs any more, in one transaction:
/// idempotent, and a failure changes nothing. Needs the right to create triggers on the application's tables.
pub async fn install(conn: &mut PgConnection, sources: &[ReferenceSource]) -> Result<Report, sqlx::Error> {
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    let function_schema = sqlx::query_scalar!(
        r#"SELECT n.nspname::text AS "schema!" FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.oid = 'assets'::regclass"#
    )
    .fetch_one(&mut *tx)
    .await?;
    let mut report = Report::default();
    let mut wanted = Vec::new();
    // A declared source whose column the catalog does not have is the schema check's to report; it gets no guard.
    for source in sources.iter().filter(|s| !s.column_type.is_empty()) {
        let Some(guard) = Guard::of(source) else { continue };
        let table = source.quoted_table();
        let args: Vec<String> = guard.args.iter().map(|a| quote_literal(a)).collect();
        // Built here: the table, column and path are the application's.
        let create = format!(
            // Every update, not only those naming the column: an application's trigger may change it in a
            // statement that does not.
            "CREATE OR REPLACE TRIGGER {trigger} AFTER INSERT OR UPDATE ON {table} FOR EACH ROW \
             EXECUTE FUNCTION {schema}.asset_sweeper_guard({args})",
            trigger = quote_ident(&guard.trigger),
            schema = quote_ident(&function_schema),
            args = args.join(", "),
        );
        sqlx::raw_sql(AssertSqlSafe(create)).execute(&mut *tx).await?;
        let always = format!("ALTER TABLE {table} ENABLE ALWAYS TRIGGER {}", quote_ident(&guard.trigger));
        sqlx::raw_sql(AssertSqlSafe(always)).execute(&mut *tx).await?;
        wanted.push((source.schema.clone(), source.table.clone(), guard.trigger.clone()));
        report.installed.push(Installed { source: source.to_string(), trigger: guard.trigger });
    }
    // A partition's copy of its parent's guard (tgparentid) comes and goes with the parent's.
    let existing = sqlx::query!(
        r#"SELECT n.nspname::text AS "schema!", c.relname::text AS "table!", t.tgname::text AS "trigger!"
             FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE t.tgname LIKE 'asset\_sweeper\_guard\_%' AND NOT t.tgisinternal AND t.tgparentid = 0
            ORDER BY 1, 2, 3"#
    )
    .fetch_all(&mut *tx)
    .await?;
    for old in existing {
        if wanted.iter().any(|(s, t, g)| *s == old.schema && *t == old.table && *g == old.trigger) {
            continue;
        }
        let table = format!("{}.{}", quote_ident(&old.schema), quote_ident(&old.table));
        let drop = format!("DROP TRIGGER {} ON {table}", quote_ident(&old.trigger));
        sqlx::raw_sql(AssertSqlSafe(drop)).execute(&mut *tx).await?;
        report.removed.push((format!("{}.{}", old.schema, old.table), old.trigger));
    }
    tx.commit().await?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(column: &str, kind: SourceKind) -> ReferenceSource {
        ReferenceSource {
            schema: "public".into(),
            table: "pages".into(),
            column: column.into(),
            kind,
            column_type: String::new(),
            key_columns: Vec::new(),
            value_indexed: false,
        }
    }

    #[test]
    fn every_source_but_a_foreign_key_needs_a_guard_named_for_its_column() {
        assert_eq!(Guard::of(&source("hero", SourceKind::ForeignKey)), None);
        let json = Guard::of(&source("body", SourceKind::Json { json_path: "$.**".into() })).expect("a guard");
        assert_eq!(json.args, ["body".to_owned(), "json".to_owned(), "$.**".to_owned()]);
        assert_eq!(json.stored_args(), b"body\0json\0$.**\0");
        let again = Guard::of(&source("body", SourceKind::Domain)).expect("a guard");
        assert_eq!(again.trigger, json.trigger, "the name depends on the column alone");
        assert!(json.trigger.starts_with(TRIGGER_PREFIX) && json.trigger.len() <= 63, "{}", json.trigger);
        let long = "c".repeat(63);
        assert_ne!(Guard::of(&source(&long, SourceKind::Domain)).expect("a guard").trigger, json.trigger);
    }

    #[test]
    fn a_literal_cannot_end_early() {
        assert_eq!(quote_literal("$.a ? (@ == \"it's\")"), "'$.a ? (@ == \"it''s\")'");
    }
}
