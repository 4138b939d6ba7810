//! Reference guards: the trigger `asset-sweeper guards install` puts on every reference source that is not a
//! foreign key, so a write committing a reference either waits for a settle holding the asset and fails when the
//! settle removed it, or is seen by the settle's recheck — what a foreign key guarantees, for every source kind.
//! The trigger runs `asset_sweeper_guard()` (defined in `schema/sql/guards.sql`); the schema check refuses while a source
//! lacks its guard, and the change detector treats a guard's DDL as a schema change.

use std::time::Duration;

use platform::sql::{quote_ident, quote_literal};
use sqlx::{AssertSqlSafe, PgConnection};

use crate::map::{ReferenceSource, SchemaProblem, SourceKind};

/// Every guard trigger's name starts with this; the rest is a hash of the column's name (trigger names are per
/// table, and a column's name may be too long to carry whole in 63 bytes).
pub const TRIGGER_PREFIX: &str = "asset_sweeper_guard_";

/// The command that installs the guards, named in the schema check's refusal.
pub const INSTALL: &str = "asset-sweeper guards install";

/// The guard a source needs: its two triggers' names, conditions and arguments. `None` for a foreign key, which
/// guards itself.
///
/// Two triggers, because an insert's condition may not name `OLD`: one after each insert whose value can name an
/// asset, one after each update that changed the value. Postgres evaluates a trigger's `WHEN` on the row as written
/// (after every `BEFORE` trigger, the application's included) without calling the function, so an update that
/// leaves the reference alone costs a comparison, not a call. The conditions name the guarded columns, so Postgres
/// refuses to retype or drop one while its guard is in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    /// The insert trigger's name on the source's table.
    pub trigger: String,
    /// The update trigger's name.
    pub update_trigger: String,
    /// The insert trigger's condition.
    pub on_insert: String,
    /// The update trigger's condition.
    pub on_update: String,
    /// The trigger function's arguments: the column, the source kind, the JSON path (empty but for JSON). A fourth,
    /// the column's type as `install` validated it, is read off the catalog when the guard is installed.
    pub args: [String; 3],
    /// The trigger function, in the sweeper's schema: `asset_sweeper_guard` for a key source, else one made for
    /// this column and kind ([`Guard::function_body`]).
    pub function: String,
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
            SourceKind::Key(template) => ("key", template.template.as_str()),
        };
        // A key source's trigger is named for its template: a column may be a reference source and a key source's.
        let named_for = match &source.kind {
            SourceKind::Key(template) => format!("key:{}", template.template),
            _ => source.column.clone(),
        };
        let trigger = format!("{TRIGGER_PREFIX}{:016x}", fnv1a(named_for.as_bytes()));
        let (on_insert, on_update) = conditions(source);
        let function = match &source.kind {
            SourceKind::Key(_) => GENERIC_FUNCTION.to_owned(),
            _ => format!("{FUNCTION_PREFIX}{:016x}", fnv1a(format!("{kind}\0{}", source.column).as_bytes())),
        };
        Some(Guard {
            update_trigger: format!("{trigger}{UPDATE_SUFFIX}"),
            trigger,
            on_insert,
            on_update,
            args: [source.column.clone(), kind.to_owned(), path.to_owned()],
            function,
        })
    }

    /// The text of the trigger function made for this guard's column and kind, or `None` for the shared one (a key
    /// source's, which reads the row through its template). The column is named in the text, so the function reads
    /// it as a plain field of `NEW`: the shared function must build a statement to read a column it learns from its
    /// arguments, and Postgres parses and plans that statement on every write (docs/developing.md, "The reference
    /// guards' cost"). It runs as the writer and hands plain uuids and spellings to the privileged half, as the
    /// shared one does (`schema/sql/guards.sql`). The JSON path is read from the trigger's arguments, never
    /// written into the text.
    pub fn function_body(&self) -> Option<String> {
        let column = format!("NEW.{}", quote_ident(&self.args[0]));
        let read = match self.args[1].as_str() {
            "domain" => {
                format!("IF {column} IS NULL THEN RETURN NULL; END IF;\n            ids := ARRAY[{column}::uuid];")
            }
            "domain_array" => format!(
                "IF {column} IS NULL THEN RETURN NULL; END IF;\n            \
                 ids := ARRAY(SELECT e FROM unnest({column}::uuid[]) AS e WHERE e IS NOT NULL);"
            ),
            "nested" => format!(
                "IF {column} IS NULL THEN RETURN NULL; END IF;\n            \
                 ids := asset_sweeper.asset_sweeper_nested_ids({column});"
            ),
            // As JSON whatever the column's type (a source declared on a `text` column is the schema check's to
            // refuse, never a reason to fail the application's write).
            "json" => format!(
                "value := to_jsonb({column});\n            \
                 IF value IS NULL OR value = 'null'::jsonb THEN RETURN NULL; END IF;\n            \
                 spelled := ARRAY(SELECT v #>> '{{}}' FROM jsonb_path_query(value, \
                 (TG_ARGV[2] || ' ? (@.type() == \"string\")')::jsonpath, '{{}}', true) AS v \
                 WHERE (v #>> '{{}}') ~* '{}');\n            \
                 ids := ARRAY(SELECT s::uuid FROM unnest(spelled) AS s);",
                migrator::UUID_WHOLE
            ),
            _ => return None,
        };
        Some(format!(
            "
    DECLARE
        value jsonb;
        spelled text[];
        ids uuid[];
    BEGIN
        -- A column renamed since `guards install` made this function is not read: the write goes through, and the
        -- schema check names the guard until `guards install` runs again.
        BEGIN
            {read}
        EXCEPTION WHEN undefined_column THEN
            RETURN NULL;
        END;
        IF cardinality(ids) > 0 THEN
            PERFORM asset_sweeper.asset_sweeper_guard_refers(TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[0], ids, spelled,
                                                             NULL);
        END IF;
        RETURN NULL;
    END
"
        ))
    }

    /// A fingerprint of what the guard is beyond its arguments (its conditions and its function's text), its
    /// triggers' last argument: a release that changes either makes the schema check name the guard until
    /// `guards install` puts the new one in place.
    fn digest(&self) -> String {
        let body = self.function_body().unwrap_or_default();
        format!("{:016x}", fnv1a([self.on_insert.as_str(), &self.on_update, &body].join("\0").as_bytes()))
    }

    /// `pg_trigger.tgargs` as Postgres stores them: each argument followed by a NUL byte.
    fn stored_args(&self) -> Vec<u8> {
        self.args.iter().flat_map(|a| a.bytes().chain([0])).collect()
    }
}

/// The shared trigger function (`schema/sql/guards.sql`), and the prefix of those made for one column and kind.
const GENERIC_FUNCTION: &str = "asset_sweeper_guard";
const FUNCTION_PREFIX: &str = "asset_sweeper_guard_of_";

/// The update trigger's name is the insert trigger's with this after it.
const UPDATE_SUFFIX: &str = "_update";

/// When a write can commit a new reference: on insert, a value that is there; on update, a value that changed. A
/// composite's nulls are read as its ids (`row IS NOT NULL` is false while any field is null), and a key source's
/// columns as text, which every type has and equality alone would not. The operators are resolved once, on the
/// sweeper's pinned path, when the trigger is created.
fn conditions(source: &ReferenceSource) -> (String, String) {
    let columns: Vec<String> = match &source.kind {
        SourceKind::Key(template) => template.columns.iter().map(|(c, _)| quote_ident(c)).collect(),
        _ => vec![quote_ident(&source.column)],
    };
    let present = columns.iter().map(|c| format!("NOT (NEW.{c} IS NULL)")).collect::<Vec<_>>().join(" AND ");
    let changed = |c: &String| match &source.kind {
        SourceKind::Key(_) => format!("OLD.{c}::text IS DISTINCT FROM NEW.{c}::text"),
        SourceKind::Nested => format!(
            "asset_sweeper.asset_sweeper_nested_ids(OLD.{c}) IS DISTINCT FROM asset_sweeper.asset_sweeper_nested_ids(NEW.{c})"
        ),
        // `json` and other types without equality, and a source declared on a text column, compared as JSON.
        SourceKind::Json { .. } => format!("to_jsonb(OLD.{c}) IS DISTINCT FROM to_jsonb(NEW.{c})"),
        _ => format!("OLD.{c} IS DISTINCT FROM NEW.{c}"),
    };
    let changed = columns.iter().map(changed).collect::<Vec<_>>().join(" OR ");
    (present, changed)
}

/// `text` as a dollar-quoted literal whose tag it does not contain.
fn dollar_quoted(text: &str) -> String {
    let mut tag = String::from("$guard$");
    while text.contains(&tag) {
        tag.insert(tag.len() - 1, '_');
    }
    format!("{tag}{text}{tag}")
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
    let needed = needed(sources);
    let guarded = in_place(conn, &needed).await?;
    Ok(needed
        .iter()
        .zip(guarded)
        .filter(|(_, (guarded, _))| !guarded)
        .map(|((source, _), _)| SchemaProblem::UnguardedSource {
            schema: source.schema.clone(),
            table: source.table.clone(),
            column: source.column.clone(),
            install: INSTALL.to_owned(),
        })
        .collect())
}

/// The sources that need a guard, with it. A declared source whose column the catalog does not have is the schema
/// check's to report; it gets no guard.
fn needed(sources: &[ReferenceSource]) -> Vec<(&ReferenceSource, Guard)> {
    sources.iter().filter(|s| !s.column_type.is_empty()).filter_map(|s| Guard::of(s).map(|g| (s, g))).collect()
}

/// Whether each of `needed` has its guard in place, as it needs it, and the type its column has now (the oid the
/// guard is installed with: a guard installed for another type no longer reads the column).
async fn in_place(
    conn: &mut PgConnection,
    needed: &[(&ReferenceSource, Guard)],
) -> Result<Vec<(bool, String)>, sqlx::Error> {
    if needed.is_empty() {
        return Ok(Vec::new());
    }
    let schemas: Vec<&str> = needed.iter().map(|(s, _)| s.schema.as_str()).collect();
    let tables: Vec<&str> = needed.iter().map(|(s, _)| s.table.as_str()).collect();
    let columns: Vec<&str> = needed.iter().map(|(s, _)| s.column.as_str()).collect();
    let inserts: Vec<&str> = needed.iter().map(|(_, g)| g.trigger.as_str()).collect();
    let updates: Vec<&str> = needed.iter().map(|(_, g)| g.update_trigger.as_str()).collect();
    let args: Vec<Vec<u8>> = needed.iter().map(|(_, g)| g.stored_args()).collect();
    let functions: Vec<&str> = needed.iter().map(|(_, g)| g.function.as_str()).collect();
    let digests: Vec<String> = needed.iter().map(|(_, g)| g.digest()).collect();
    // The text a function made for its column must have ('' for the shared one, whose text the migrator keeps).
    let bodies: Vec<String> = needed.iter().map(|(_, g)| g.function_body().unwrap_or_default()).collect();
    // Two row triggers, after (not 2), one on insert (4) alone and one on update (16) alone, on any update rather
    // than on updates of listed columns (an application's trigger may change the value in a statement that does
    // not name it); enabled always, so a replica-mode session (a bulk loader, logical replication) is guarded too;
    // each with a condition on the column (so the column cannot be retyped under it); its last argument the
    // column's type now.
    let rows = sqlx::query!(
        r#"SELECT count(t.oid) = 2 AS "guarded!", coalesce(a.typ, '') AS "type_oid!"
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[], $7::text[],
                         $8::text[], $9::text[])
                  WITH ORDINALITY AS s(schema, tbl, col, on_insert, on_update, args, function, body, digest)
             LEFT JOIN LATERAL (
                  SELECT c.oid AS rel, a.attnum, a.atttypid::text AS typ
                    FROM pg_attribute a
                    JOIN pg_class c ON c.oid = a.attrelid
                    JOIN pg_namespace n ON n.oid = c.relnamespace
                   WHERE n.nspname = s.schema AND c.relname = s.tbl AND a.attname = s.col AND NOT a.attisdropped
             ) a ON true
             LEFT JOIN pg_trigger t
               ON t.tgrelid = a.rel
              AND ((t.tgname = s.on_insert AND (t.tgtype & 23) = 5) OR (t.tgname = s.on_update AND (t.tgtype & 23) = 17))
              AND t.tgenabled = 'A'
              AND EXISTS (SELECT 1 FROM pg_proc p
                           WHERE p.oid = t.tgfoid AND p.proname = s.function AND NOT p.prosecdef
                             AND p.pronamespace = 'asset_sweeper'::regnamespace
                             AND (s.body = '' OR p.prosrc = s.body))
              AND t.tgargs = s.args || convert_to(a.typ, 'UTF8') || '\x00'::bytea || convert_to(s.digest, 'UTF8')
                             || '\x00'::bytea
              AND cardinality(t.tgattr::int2[]) = 0 AND t.tgqual IS NOT NULL
              AND EXISTS (SELECT 1 FROM pg_depend d
                           WHERE d.classid = 'pg_trigger'::regclass AND d.objid = t.oid
                             AND d.refclassid = 'pg_class'::regclass AND d.refobjid = a.rel
                             AND d.refobjsubid = a.attnum)
            GROUP BY s.ordinality, a.typ
            ORDER BY s.ordinality"#,
        &schemas as &[&str],
        &tables as &[&str],
        &columns as &[&str],
        &inserts as &[&str],
        &updates as &[&str],
        &args,
        &functions as &[&str],
        &bodies,
        &digests,
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.guarded, r.type_oid)).collect())
}

/// What `install` did to one source.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Installed {
    /// `schema.table.column`.
    pub source: String,
    /// The trigger.
    pub trigger: String,
}

/// A table `install` could not change: its lock was held past every try, or the statement failed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Blocked {
    /// `schema.table`.
    pub table: String,
    /// What stopped it.
    pub reason: String,
}

/// What `install` changed, and what it left.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    /// Guards created or corrected now.
    pub installed: Vec<Installed>,
    /// Guards that were already as their source needs them: left alone (no DDL, no schema change).
    pub in_place: Vec<Installed>,
    /// Guards of columns that are no longer sources, dropped (`schema.table`, trigger).
    pub removed: Vec<(String, String)>,
    /// Tables whose guards could not be installed or dropped; the rest were.
    pub blocked: Vec<Blocked>,
}

/// How long `install` waits for one table's lock, and how often it tries. Creating a trigger takes a lock that
/// conflicts with every write to the table, and while it waits the writes queued behind it wait too: a short wait,
/// tried again after a pause, holds the application's writes for at most that long at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Patience {
    /// The longest one try waits for the table's lock.
    pub lock_timeout: Duration,
    /// Tries per table before it is reported as blocked.
    pub attempts: u32,
}

impl Default for Patience {
    fn default() -> Self {
        Patience { lock_timeout: Duration::from_secs(2), attempts: 5 }
    }
}

/// Puts the guard each of `sources` needs in place and drops guards no source needs any more, one table at a time in
/// a transaction of its own, each waiting for its lock no longer than `patience` allows: a busy table holds up
/// neither the application's writes to the others nor their guards, and is named in [`Report::blocked`]. A guard
/// already in place is not touched, so a run that changes nothing changes no schema. Idempotent; needs the right to
/// create triggers on the application's tables.
pub async fn install(
    conn: &mut PgConnection,
    sources: &[ReferenceSource],
    patience: Patience,
) -> Result<Report, sqlx::Error> {
    let function_schema = migrator::SCHEMA.to_owned();
    let needed = needed(sources);
    let guarded = in_place(&mut *conn, &needed).await?;
    let mut report = Report::default();
    // Per table, in the order the sources come: the statements its missing guards need, and what they install.
    let mut tables: Vec<(String, Vec<String>, Vec<Installed>)> = Vec::new();
    for ((source, guard), (guarded, type_oid)) in needed.iter().zip(guarded) {
        let installed = Installed { source: source.to_string(), trigger: guard.trigger.clone() };
        if guarded {
            report.in_place.push(installed);
            continue;
        }
        let table = source.quoted_table();
        let digest = guard.digest();
        let args: Vec<String> = guard.args.iter().chain([&type_oid, &digest]).map(|a| quote_literal(a)).collect();
        // Built here: the table, column and path are the application's.
        let mut statements = Vec::new();
        let function = format!("{}.{}", quote_ident(&function_schema), quote_ident(&guard.function));
        if let Some(body) = guard.function_body() {
            // Pinned like every trigger function of the sweeper's, and nobody's to call: a trigger runs it.
            statements.push(format!(
                "CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql \
                 SET search_path = pg_catalog, pg_temp AS {}",
                dollar_quoted(&body)
            ));
            statements.push(format!("REVOKE ALL ON FUNCTION {function}() FROM PUBLIC"));
        }
        for (trigger, event, condition) in
            [(&guard.trigger, "INSERT", &guard.on_insert), (&guard.update_trigger, "UPDATE", &guard.on_update)]
        {
            // Every update, not only those naming the column: an application's trigger may change it in a
            // statement that does not. The condition sees the row as written.
            statements.push(format!(
                "CREATE OR REPLACE TRIGGER {trigger} AFTER {event} ON {table} FOR EACH ROW WHEN ({condition}) \
                 EXECUTE FUNCTION {function}({args})",
                trigger = quote_ident(trigger),
                args = args.join(", "),
            ));
            statements.push(format!("ALTER TABLE {table} ENABLE ALWAYS TRIGGER {}", quote_ident(trigger)));
        }
        let name = format!("{}.{}", source.schema, source.table);
        match tables.iter_mut().find(|(t, _, _)| *t == name) {
            Some((_, all, installs)) => {
                all.extend(statements);
                installs.push(installed);
            }
            None => tables.push((name, statements, vec![installed])),
        }
    }
    // A partition's copy of its parent's guard (tgparentid) comes and goes with the parent's.
    let existing = sqlx::query!(
        r#"SELECT n.nspname::text AS "schema!", c.relname::text AS "table!", t.tgname::text AS "trigger!"
             FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE t.tgname LIKE 'asset\_sweeper\_guard\_%' AND NOT t.tgisinternal AND t.tgparentid = 0
            ORDER BY 1, 2, 3"#
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut drops: Vec<(String, String, String)> = Vec::new();
    for old in existing {
        let wanted = needed.iter().any(|(s, g)| {
            s.schema == old.schema
                && s.table == old.table
                && (g.trigger == old.trigger || g.update_trigger == old.trigger)
        });
        if !wanted {
            let table = format!("{}.{}", quote_ident(&old.schema), quote_ident(&old.table));
            let drop = format!("DROP TRIGGER IF EXISTS {} ON {table}", quote_ident(&old.trigger));
            drops.push((format!("{}.{}", old.schema, old.table), old.trigger, drop));
        }
    }
    for (table, statements, installs) in tables {
        match locked(&mut *conn, &statements, patience).await? {
            None => report.installed.extend(installs),
            Some(reason) => report.blocked.push(Blocked { table, reason }),
        }
    }
    for (table, trigger, drop) in drops {
        match locked(&mut *conn, std::slice::from_ref(&drop), patience).await? {
            None => report.removed.push((table, trigger)),
            Some(reason) => report.blocked.push(Blocked { table, reason }),
        }
    }
    // A function made for a column no guard runs any more.
    let unused = sqlx::query_scalar!(
        r#"SELECT p.oid::regprocedure::text AS "function!" FROM pg_proc p
            WHERE p.pronamespace = 'asset_sweeper'::regnamespace
              AND p.proname LIKE 'asset\_sweeper\_guard\_of\_%'
              AND NOT EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgfoid = p.oid)"#
    )
    .fetch_all(&mut *conn)
    .await?;
    for function in unused {
        // Another install may have put it back to use meanwhile: left for the next run.
        if let Err(e) =
            sqlx::raw_sql(AssertSqlSafe(format!("DROP FUNCTION IF EXISTS {function}"))).execute(&mut *conn).await
        {
            tracing::warn!(%function, error = %e, "an unused guard function was not dropped");
        }
    }
    Ok(report)
}

/// Runs `statements` (one table's DDL) in a transaction of their own under `patience`'s lock timeout, trying again
/// after a pause while the lock is held elsewhere. `None` when they committed; otherwise why not: the lock never
/// came, or the database refused them (a missing right, a table gone). A lost connection is the caller's error.
async fn locked(
    conn: &mut PgConnection,
    statements: &[String],
    patience: Patience,
) -> Result<Option<String>, sqlx::Error> {
    let timeout = format!("SET LOCAL lock_timeout = '{}ms'", patience.lock_timeout.as_millis().max(1));
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        let mut outcome = sqlx::raw_sql(AssertSqlSafe(timeout.clone())).execute(&mut *tx).await.map(|_| ());
        for statement in statements {
            if outcome.is_err() {
                break;
            }
            outcome = sqlx::raw_sql(AssertSqlSafe(statement.clone())).execute(&mut *tx).await.map(|_| ());
        }
        let error = match outcome {
            Ok(()) => match tx.commit().await {
                Ok(()) => return Ok(None),
                Err(e) => e,
            },
            Err(e) => {
                tx.rollback().await?;
                e
            }
        };
        let sqlx::Error::Database(db) = &error else { return Err(error) };
        let busy = matches!(db.code().as_deref(), Some("55P03" | "40P01"));
        if !busy {
            return Ok(Some(db.message().to_owned()));
        }
        if attempt >= patience.attempts.max(1) {
            return Ok(Some(format!(
                "its lock was held elsewhere through {attempt} tries of {} each: run `{INSTALL}` again when the \
                 table is quieter",
                humantime::format_duration(patience.lock_timeout)
            )));
        }
        // A pause as long as a try, so writers queued behind the last try get through before the next.
        tokio::time::sleep(patience.lock_timeout).await;
    }
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
    fn a_guard_made_for_its_column_names_it_and_a_key_sources_is_the_shared_one() {
        let banner = Guard::of(&source("hero \"image\"", SourceKind::Domain)).expect("a guard");
        let body = banner.function_body().expect("its own function");
        assert!(body.contains("NEW.\"hero \"\"image\"\"\"::uuid"), "{body}");
        assert!(banner.function.starts_with(FUNCTION_PREFIX) && banner.function.len() <= 63, "{}", banner.function);
        let json = Guard::of(&source("hero \"image\"", SourceKind::Json { json_path: "$.a".into() })).expect("a guard");
        assert_ne!(json.function, banner.function, "one function a column and kind");
        assert!(!json.function_body().expect("its own function").contains("$.a"), "the path is an argument");
        let template =
            crate::key_sources::KeyTemplate { template: "m/{f}".into(), columns: vec![("f".into(), "text".into())] };
        let key = Guard::of(&source("f", SourceKind::Key(template))).expect("a guard");
        assert_eq!((key.function.as_str(), key.function_body()), (GENERIC_FUNCTION, None));
        assert_eq!(dollar_quoted("a $guard$ b"), "$guard_$a $guard$ b$guard_$");
    }

    #[test]
    fn a_literal_cannot_end_early() {
        assert_eq!(quote_literal("$.a ? (@ == \"it's\")"), "'$.a ? (@ == \"it''s\")'");
    }
}
