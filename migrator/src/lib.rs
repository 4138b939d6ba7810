//! The product's database definition, applied by its own migrator: the versioned migrations (tables, columns,
//! constraints, indexes), then every subsystem's SQL functions and triggers, and the lists the Rust code and the
//! SQL share, each written once here.
//!
//! The definition files live with their subsystems (`platform/sql`, `schema/sql`, `lifecycle/sql`, `records/sql`)
//! and hold the live text of every function and trigger; each is applied, with the shared lists written in, whenever
//! that text changed. The migrations' own copies of those definitions are history: applied databases hold their
//! checksums, so they stay as they were.
//!
//! It holds no checked query (`sqlx::query!`), so `scripts/sqlx-prepare` can build it, and migrate the database the
//! query data is prepared against, before any checked query of the other crates compiles.

use sqlx::migrate::{Migrate, MigrateError, Migrator};
use sqlx::{AssertSqlSafe, Connection, PgConnection, PgPool};

/// The schema that holds the sweeper's functions and types and the views the application writes through. Only its
/// owner, the role that migrates, may create in it (docs/security.md); the application names what it uses of it by
/// this schema.
pub const SCHEMA: &str = "asset_sweeper";

/// The schema that holds every table of the sweeper, which no role of the application may use: a relation a role
/// cannot name is one it cannot queue a lock on (docs/security.md, "Nobody stalls the sweeper").
pub const PRIVATE_SCHEMA: &str = "asset_sweeper_private";

/// The search path of every session of the functions and the CLI: the built-ins first, then the sweeper's tables
/// (so a plain `assets` is the table, never the application's view of it), then its functions, and no schema an
/// application role may create in (never `"$user"`, never `public`), so no function an application plants can stand
/// in for a built-in or for one of the sweeper's.
pub const SESSION_SEARCH_PATH: &str = "pg_catalog, asset_sweeper_private, asset_sweeper, pg_temp";

/// The migrations' path: the sweeper's tables, then its functions. Objects created without a schema go into the
/// first that exists: the sweeper's own schema until the migration that made the private one, which holds every
/// table since (the migrator's own records among them).
const MIGRATION_SEARCH_PATH: &str = "asset_sweeper_private, asset_sweeper, pg_catalog, pg_temp";

/// Tables the project owns: their columns are bookkeeping, not owner records. Written into retention.sql's
/// `asset_sweeper_own_tables()`, which refuses a retention rule on one of them, as `{{own_tables}}`.
pub const OWN_TABLES: &[&str] = &[
    "assets",
    "stored_objects",
    "asset_reference_sources",
    "asset_reference_exclusions",
    "asset_key_sources",
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
    "named_sightings",
    "retention_rules",
    "workspace_quotas",
    "workspace_objects",
    "workspace_usage",
    "workspace_object_changes",
    "asset_sweeper_definitions",
    "asset_sweeper_schema_changes",
    "census_findings",
    "census_unread",
    "destruction_holds",
    "asset_pins",
    "bucket_measurements",
    "log_sources",
    "log_objects",
    "observed_reads",
    "sample_witnesses",
];

/// A hyphenated uuid's shape as a POSIX regular expression, over the hex digit class `$hex`.
macro_rules! uuid_shape {
    ($hex:literal) => {
        concat!($hex, "{8}-", $hex, "{4}-", $hex, "{4}-", $hex, "{4}-", $hex, "{12}")
    };
}

/// Every spelling of a uuid Postgres's `uuid` input accepts, without the braces it also accepts around one: 32
/// hex digits, a hyphen allowed after any group of four but the last (the usual 8-4-4-4-12 is one of them).
macro_rules! uuid_spelled {
    ($hex:literal) => {
        concat!($hex, "{4}(?:-?", $hex, "{4}){7}")
    };
}

/// A POSIX regular expression whose first group is a hyphenated uuid in any letter case, wherever it stands: how
/// `asset_sweeper_nested_ids` reads a composite value (written into guards.sql as `{{uuid_in_text}}`), and, with
/// [`UUID_SPELLED_IN_TEXT`], how the census finds ids off a declared document's paths. (Other values the census and
/// the sample read are searched outside the database, the same spellings in one pass: `schema::census::ids`.)
pub const UUID_IN_TEXT: &str = concat!("(", uuid_shape!("[0-9a-fA-F]"), ")");

/// A POSIX regular expression whose first group is a uuid in any spelling Postgres accepts (no hyphens, hyphens
/// after any group of four, braces, any letter case), where it does not continue a run of hex digits: a search
/// from the left could not tell where an id glued to other hex digits begins. The hyphenated spelling is found
/// wherever it stands by [`UUID_IN_TEXT`], so a search uses both.
pub const UUID_SPELLED_IN_TEXT: &str = concat!("(?:^|[^0-9a-fA-F])\\{?(", uuid_spelled!("[0-9a-fA-F]"), ")");

/// A POSIX regular expression for a string that is one uuid, in any spelling Postgres accepts, and nothing else,
/// for the case-insensitive `~*` (so lowercase digits only): how the reference guard and the census tell the asset
/// ids at a declared path. Written into guards.sql as `{{uuid_pattern}}`.
pub const UUID_WHOLE: &str = concat!("^(?:\\{", uuid_spelled!("[0-9a-f]"), "\\}|", uuid_spelled!("[0-9a-f]"), ")$");

/// Every value of `settlement_events.action`, in the order of `platform::audit::AuditAction` (which is checked
/// against this list when it compiles). Written into audit.sql's CHECK constraint as `{{audit_actions}}`.
pub const AUDIT_ACTIONS: &[&str] = &[
    "keep",
    "retire",
    "delete",
    "purge",
    "defer",
    "noop",
    "reject",
    "failed",
    "restore",
    "integrity",
    "lost",
    "redrive",
    "undelete",
    "discovered",
    "adopted",
];

/// The project's own migrations table, so it can live beside an application that also migrates with sqlx.
pub const MIGRATIONS_TABLE: &str = "asset_sweeper_migrations";

/// What one migrate applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// How many versioned migrations it applied.
    pub migrations: usize,
    /// The definition files it applied because their text had changed, as `schema/sql/guards.sql`.
    pub definitions: Vec<String>,
    /// Whether the schema change detector's event triggers are in place. They need a superuser (`rds_superuser`
    /// on RDS): without one the migration succeeds and the consumer verifies the whole catalog's fingerprint instead.
    pub detector: bool,
    /// The role it ran as: the one [`no_detector`] names.
    pub role: String,
}

/// What a migration says when it could not install the schema change detector as `role`.
pub fn no_detector(role: &str) -> String {
    format!(
        "no schema change detector: {role} is not a superuser, and event triggers need one (rds_superuser on RDS). \
         Each settle verifies the whole catalog's fingerprint instead: exact, but slower as the schema grows. Run \
         `asset-sweeper migrate` once as a superuser to install it"
    )
}

/// Why the schema could not be brought up to date.
#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    /// The database could not be reached.
    #[error("cannot connect to Postgres to apply the asset-sweeper migrations: {0}")]
    Connect(#[source] sqlx::Error),
    /// A migration failed, or the database holds one this build does not know.
    #[error("cannot apply the asset-sweeper migrations: {0}")]
    Apply(#[from] MigrateError),
    /// A definition file failed to apply; none of the files' changes was kept.
    #[error("cannot apply the asset-sweeper SQL definitions in {file}: {source}")]
    Definition {
        /// The file, as `schema/sql/guards.sql`.
        file: &'static str,
        /// What Postgres said.
        #[source]
        source: sqlx::Error,
    },
    /// The sweeper's schema, or something in it, belongs to another role.
    #[error(
        "refusing to migrate: {0} — only the role that migrates may own the schema asset_sweeper and what is in \
         it (another role's object there would be that role's code in the sweeper's place); drop it or make this \
         role its owner, after reading what it is"
    )]
    NotOwned(String),
    /// The record of the definitions applied could not be read or written.
    #[error("cannot record the asset-sweeper SQL definitions applied: {0}")]
    Record(#[source] sqlx::Error),
}

/// The migrations embedded in this build.
pub fn migrator() -> Migrator {
    let mut migrator = sqlx::migrate!("./migrations");
    migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
    migrator
}

/// A definition file: its path from the workspace root, and its text.
macro_rules! definition {
    ($path:literal) => {
        ($path, include_str!(concat!("../../", $path)))
    };
}

/// Every subsystem's SQL functions, triggers and generated constraints, each written once, in an order in which
/// what a file's functions call already exists (SQL-language bodies are checked when they are created).
const DEFINITIONS: &[(&str, &str)] = &[
    definition!("platform/sql/audit.sql"),
    definition!("schema/sql/detector.sql"),
    definition!("schema/sql/guards.sql"),
    definition!("schema/sql/census.sql"),
    definition!("schema/sql/key_sources.sql"),
    definition!("lifecycle/sql/lifecycle.sql"),
    definition!("ledger/sql/money.sql"),
    definition!("records/sql/retention.sql"),
    definition!("records/sql/quota.sql"),
    definition!("platform/sql/contract.sql"),
    definition!("platform/sql/roles.sql"),
];

/// A definition file's text with the lists it shares with the Rust code written in.
fn render(sql: &str) -> String {
    let quoted = |items: &[&str]| items.iter().map(|item| quoted(item)).collect::<Vec<_>>().join(", ");
    sql.replace("{{audit_actions}}", &quoted(AUDIT_ACTIONS))
        .replace("{{own_tables}}", &format!("ARRAY[{}]", quoted(OWN_TABLES)))
        .replace("{{uuid_pattern}}", UUID_WHOLE)
        .replace("{{uuid_in_text}}", UUID_IN_TEXT)
        .replace("{{newest_migration}}", &migrator().iter().map(|m| m.version).max().unwrap_or(0).to_string())
}

/// `text` as an SQL string literal.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// Applies every versioned migration not yet applied, then every definition file whose text changed since it was
/// last applied. Safe to run again, and from two processes at once.
pub async fn migrate(pool: &PgPool) -> Result<Applied, MigrationError> {
    let mut conn = pool.acquire().await.map_err(MigrationError::Connect)?;
    let result = migrate_locked(&mut conn).await;
    if result.is_err() {
        // A failure returns before the advisory lock is released: retire the connection rather than hand a
        // lock-holding session back to the pool, where the next migrator would wait forever.
        let _ = conn.detach().close().await;
    }
    result
}

async fn migrate_locked(conn: &mut PgConnection) -> Result<Applied, MigrationError> {
    // sqlx's own lock, held over both halves: a second migrator waits, then finds nothing left to do.
    conn.lock().await?;
    own_schema(conn).await?;
    let before = applied_migrations(conn).await?;
    let mut migrator = migrator();
    migrator.set_locking(false);
    migrator.run(&mut *conn).await?;
    let migrations = applied_migrations(conn).await?.saturating_sub(before);
    let definitions = apply_definitions(conn).await?;
    let detector = detector_installed(conn).await.map_err(MigrationError::Record)?;
    let role: String =
        sqlx::query_scalar("SELECT current_user::text").fetch_one(&mut *conn).await.map_err(MigrationError::Record)?;
    sqlx::raw_sql("RESET search_path").execute(&mut *conn).await.map_err(MigrationError::Record)?;
    conn.unlock().await?;
    Ok(Applied { migrations, definitions, detector, role })
}

/// Creates the sweeper's schema (owned by this role, so no other may create in it), moves an older install's
/// objects into it from the schema they were migrated into, and puts it first on this session's path for the
/// migrations. The caller holds the migrations' lock.
async fn own_schema(conn: &mut PgConnection) -> Result<(), MigrationError> {
    let exists: bool = sqlx::query_scalar("SELECT to_regnamespace($1) IS NOT NULL")
        .bind(SCHEMA)
        .fetch_one(&mut *conn)
        .await
        .map_err(MigrationError::Record)?;
    if !exists {
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE SCHEMA {SCHEMA}")))
            .execute(&mut *conn)
            .await
            .map_err(MigrationError::Record)?;
    }
    // The schemas, and everything in them, must be this role's (or the filter functions' owner's): a schema or an
    // object another role made there first (an application that may create schemas, before the first migrate)
    // would be that role's code in the sweeper's place.
    let strangers: Vec<String> = sqlx::query_scalar(
        "WITH me AS (SELECT oid FROM pg_roles WHERE rolname = current_user),
              allowed AS (SELECT oid FROM me UNION ALL SELECT oid FROM pg_roles WHERE rolname = 'asset_sweeper_filter_owner'),
              ns AS (SELECT oid, nspname, nspowner FROM pg_namespace
                      WHERE nspname IN ($1, $2, 'asset_sweeper_filters'))
         SELECT format('the schema %s (owned by %s)', ns.nspname, pg_get_userbyid(ns.nspowner)) FROM ns
          WHERE ns.nspowner NOT IN (SELECT oid FROM me)
            AND (ns.nspname IN ($1, $2) OR ns.nspowner NOT IN (SELECT oid FROM allowed))
         UNION ALL
         -- The application's views of the tables are owned by a role of their own (roles.sql).
         SELECT format('%s (owned by %s)', c.oid::regclass, pg_get_userbyid(c.relowner)) FROM pg_class c, ns
          WHERE c.relnamespace = ns.oid AND c.relowner NOT IN (SELECT oid FROM allowed)
            AND NOT (ns.nspname = $1 AND c.relkind = 'v' AND pg_get_userbyid(c.relowner) = 'asset_sweeper_contract')
         UNION ALL
         SELECT format('%s (owned by %s)', p.oid::regprocedure, pg_get_userbyid(p.proowner)) FROM pg_proc p, ns
          WHERE p.pronamespace = ns.oid AND p.proowner NOT IN (SELECT oid FROM allowed)
         UNION ALL
         SELECT format('type %s (owned by %s)', t.oid::regtype, pg_get_userbyid(t.typowner)) FROM pg_type t, ns
          WHERE t.typnamespace = ns.oid AND t.typowner NOT IN (SELECT oid FROM allowed)
            -- A view's row type, and its array, are its owner's.
            AND NOT (ns.nspname = $1 AND pg_get_userbyid(t.typowner) = 'asset_sweeper_contract'
                     AND EXISTS (SELECT 1 FROM pg_class v
                                  WHERE v.relkind = 'v' AND v.relowner = t.typowner
                                    AND v.oid IN (t.typrelid, (SELECT e.typrelid FROM pg_type e WHERE e.oid = t.typelem))))
         UNION ALL
         SELECT format('operator %s (owned by %s)', o.oid::regoperator, pg_get_userbyid(o.oprowner)) FROM pg_operator o, ns
          WHERE o.oprnamespace = ns.oid AND o.oprowner NOT IN (SELECT oid FROM allowed)",
    )
    .bind(SCHEMA)
    .bind(PRIVATE_SCHEMA)
    .fetch_all(&mut *conn)
    .await
    .map_err(MigrationError::Record)?;
    if !strangers.is_empty() {
        return Err(MigrationError::NotOwned(strangers.join(", ")));
    }
    // An install from before the schema: its migrations table sits in another schema (the one it migrated into),
    // owned by this role. One another role owns is not the sweeper's, whatever its name: it stays where it is.
    let older: Option<String> = sqlx::query_scalar(
        "SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE c.relname = $1 AND c.relkind = 'r' AND n.nspname NOT IN ($2, $3)
            AND c.relowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)
            AND to_regclass(format('%I.%I', $2, $1)) IS NULL
            AND to_regclass(format('%I.%I', $3, $1)) IS NULL",
    )
    .bind(MIGRATIONS_TABLE)
    .bind(SCHEMA)
    .bind(PRIVATE_SCHEMA)
    .fetch_optional(&mut *conn)
    .await
    .map_err(MigrationError::Record)?;
    if let Some(older) = older {
        let sql = render(MOVE_INTO_SCHEMA).replace("{{from}}", &quoted(&older));
        sqlx::raw_sql(AssertSqlSafe(sql)).execute(&mut *conn).await.map_err(MigrationError::Record)?;
    }
    sqlx::raw_sql(AssertSqlSafe(format!("SET search_path TO {MIGRATION_SEARCH_PATH}")))
        .execute(&mut *conn)
        .await
        .map_err(MigrationError::Record)?;
    Ok(())
}

/// Moves an older install's objects (its tables with their sequences and indexes, the `asset_id` domain, its
/// functions) from the schema `{{from}}` into the sweeper's own, in one transaction.
/// Columns of the application typed `asset_id` follow the domain (they refer to it by oid). Its functions are
/// replaced when the definitions apply next, since their text changed with the schema.
const MOVE_INTO_SCHEMA: &str = r#"
BEGIN;
DO $move$
DECLARE
    src text := {{from}};
    own text[] := {{own_tables}};
    item record;
BEGIN
    -- The older detector's functions name the old schema: they go, and detector.sql puts the new ones in place.
    DROP EVENT TRIGGER IF EXISTS asset_sweeper_schema_changes;
    DROP EVENT TRIGGER IF EXISTS asset_sweeper_schema_drops;
    -- Only what this role owns: an object another role named like one of the sweeper's is not moved.
    FOR item IN SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = src AND c.relkind IN ('r', 'p') AND c.relname = ANY (own)
                   AND c.relowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)
    LOOP
        EXECUTE format('ALTER TABLE %I.%I SET SCHEMA asset_sweeper', src, item.relname);
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_type t WHERE t.oid = to_regtype(format('%I.asset_id', src))
                  AND t.typowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)) THEN
        EXECUTE format('ALTER DOMAIN %I.asset_id SET SCHEMA asset_sweeper', src);
    END IF;
    FOR item IN SELECT p.oid::regprocedure AS signature FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                 WHERE n.nspname = src AND p.proname LIKE 'asset\_sweeper\_%'
                   AND p.proowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)
    LOOP
        EXECUTE format('ALTER ROUTINE %s SET SCHEMA asset_sweeper', item.signature);
    END LOOP;
END
$move$;
COMMIT;
"#;

async fn applied_migrations(conn: &mut PgConnection) -> Result<usize, MigrateError> {
    // Not `ensure_migrations_table`: before the first run the table does not exist, and creating it here would be
    // one more DDL for the schema change detector to count.
    let exists: bool =
        sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL").bind(MIGRATIONS_TABLE).fetch_one(&mut *conn).await?;
    if !exists {
        return Ok(0);
    }
    Ok(conn.list_applied_migrations(MIGRATIONS_TABLE).await?.len())
}

/// Applies, in one transaction, each definition file whose text differs from the one last applied (by the digest
/// `asset_sweeper_definitions` keeps), and names them. The caller holds the migrations' lock.
/// The definition file that installs the schema change detector.
const DETECTOR: &str = "schema/sql/detector.sql";

/// Whether the schema change detector is fully in place (its event triggers among it).
async fn detector_installed(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    // Two statements: a function that does not exist yet fails the statement that names it as it is parsed.
    let defined: bool =
        sqlx::query_scalar("SELECT to_regproc('asset_sweeper.asset_sweeper_detector_state') IS NOT NULL")
            .fetch_one(&mut *conn)
            .await?;
    if !defined {
        return Ok(false);
    }
    sqlx::query_scalar("SELECT asset_sweeper.asset_sweeper_detector_state() IS NOT NULL").fetch_one(conn).await
}

async fn apply_definitions(conn: &mut PgConnection) -> Result<Vec<String>, MigrationError> {
    let mut tx = conn.begin().await.map_err(MigrationError::Record)?;
    let mut applied = Vec::new();
    for &(file, text) in DEFINITIONS {
        let sql = render(text);
        // Returns a row only when the file is new or its digest changed.
        let changed = sqlx::query_scalar::<_, String>(
            "INSERT INTO asset_sweeper_definitions AS d (name, digest)
             VALUES ($1, encode(sha256(convert_to($2, 'UTF8')), 'hex'))
             ON CONFLICT (name) DO UPDATE SET digest = EXCLUDED.digest, applied_at = now()
              WHERE d.digest <> EXCLUDED.digest
             RETURNING d.name",
        )
        .bind(file)
        .bind(&sql)
        .fetch_optional(&mut *tx)
        .await
        .map_err(MigrationError::Record)?;
        // Also the detector's file when its event triggers are missing though its text is unchanged: a superuser's
        // migration installs what an earlier one by a lesser role could not.
        let missing = file == DETECTOR
            && changed.is_none()
            && !detector_installed(&mut tx).await.map_err(MigrationError::Record)?;
        if changed.is_some() || missing {
            sqlx::raw_sql(AssertSqlSafe(sql))
                .execute(&mut *tx)
                .await
                .map_err(|source| MigrationError::Definition { file, source })?;
            applied.push(file.to_owned());
        }
    }
    tx.commit().await.map_err(MigrationError::Record)?;
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// The last migration whose definitions are kept as history: later ones hold tables, columns and data only.
    const LAST_WITH_DEFINITIONS: i64 = 20261201000010;

    /// `sql` lowercase, without `--` comments, every run of whitespace one space.
    fn normalized(sql: &str) -> String {
        let code: Vec<&str> = sql.lines().map(|line| line.find("--").map_or(line, |at| &line[..at])).collect();
        code.join(" ").to_lowercase().split_whitespace().collect::<Vec<_>>().join(" ")
    }

    /// What begins the definition of a function, a trigger or an event trigger, as `normalized` spells it.
    const DEFINING: &[&str] = &[
        "create function",
        "create or replace function",
        "create trigger",
        "create or replace trigger",
        "create event trigger",
        "create procedure",
        "create or replace procedure",
    ];

    /// The names of the functions, triggers and event triggers `sql` creates (a name built at run time, as a
    /// retention filter's `%I.%I`, is none).
    fn defined(sql: &str) -> Vec<String> {
        let sql = normalized(sql);
        let mut names = Vec::new();
        for opener in DEFINING {
            for (at, _) in sql.match_indices(&format!("{opener} ")) {
                let name: String = sql[at + opener.len() + 1..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
                    .collect();
                let name = name.rsplit('.').next().unwrap_or_default();
                if name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
                    names.push(name.to_owned());
                }
            }
        }
        names
    }

    #[test]
    fn migrations_after_the_definition_files_define_no_function_or_trigger() {
        for migration in migrator().iter().filter(|m| m.version > LAST_WITH_DEFINITIONS) {
            let sql = normalized(migration.sql.as_str());
            for opener in DEFINING {
                assert!(
                    !sql.contains(opener),
                    "migration {} has `{opener}`: functions and triggers belong in their subsystem's definition file",
                    migration.version
                );
            }
        }
    }

    #[test]
    fn every_function_and_trigger_of_the_migrations_is_defined_once_in_the_files() {
        let mut in_files: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        for &(file, text) in DEFINITIONS {
            for name in defined(text) {
                in_files.entry(name).or_default().push(file);
            }
        }
        let twice: Vec<_> = in_files.iter().filter(|(_, files)| files.len() > 1).collect();
        assert!(twice.is_empty(), "defined more than once: {twice:?}");
        // A function or trigger a file drops is retired there, on purpose (the old detector's callable bump).
        let retired = |name: &str| {
            DEFINITIONS.iter().any(|(_, text)| {
                let text = normalized(text);
                ["drop function if exists asset_sweeper.", "drop trigger if exists "]
                    .iter()
                    .any(|drop| text.contains(&format!("{drop}{name}")))
            })
        };
        let mut missing: Vec<String> = migrator()
            .iter()
            .flat_map(|m| defined(m.sql.as_str()))
            .filter(|n| !in_files.contains_key(n) && !retired(n))
            .collect();
        missing.sort();
        missing.dedup();
        assert!(missing.is_empty(), "defined by a migration, in no definition file: {missing:?}");
    }

    #[test]
    fn every_placeholder_is_filled_in() {
        for &(file, text) in DEFINITIONS {
            assert!(!render(text).contains("{{"), "{file} keeps a placeholder");
        }
    }

    #[test]
    fn own_tables_are_written_into_the_function_that_refuses_rules_on_them() {
        let retention = DEFINITIONS.iter().find(|(file, _)| file.ends_with("retention.sql")).expect("retention.sql");
        assert!(render(retention.1).contains("SELECT ARRAY['assets', 'stored_objects', "), "{}", render(retention.1));
        assert!(render(retention.1).contains(
            "'bucket_measurements', 'log_sources', 'log_objects', 'observed_reads', \
                 'sample_witnesses']\n"
        ));
    }

    #[test]
    fn uuid_patterns_are_spelled_as_written_here() {
        assert_eq!(UUID_IN_TEXT, "([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})");
        assert_eq!(UUID_SPELLED_IN_TEXT, r"(?:^|[^0-9a-fA-F])\{?([0-9a-fA-F]{4}(?:-?[0-9a-fA-F]{4}){7})");
        assert_eq!(UUID_WHOLE, r"^(?:\{[0-9a-f]{4}(?:-?[0-9a-f]{4}){7}\}|[0-9a-f]{4}(?:-?[0-9a-f]{4}){7})$");
        let guards = DEFINITIONS.iter().find(|(file, _)| file.ends_with("guards.sql")).expect("guards.sql");
        assert!(render(guards.1).contains(&format!("~* '{UUID_WHOLE}'")));
    }

    /// FNV-1a, 64 bits: enough to notice that a file's text changed (the database keeps its own sha256).
    fn fingerprint(text: &str) -> u64 {
        text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
    }

    /// `definitions.lock` as this build would write it.
    fn lock_file() -> String {
        let newest = migrator().iter().map(|m| m.version).max().unwrap_or(0);
        let mut lock = format!("since {newest}\n");
        for &(file, text) in DEFINITIONS {
            lock.push_str(&format!("{:016x} {file}\n", fingerprint(&render(text))));
        }
        lock
    }

    #[test]
    fn a_changed_definition_file_ships_with_a_versioned_migration() {
        let committed = include_str!("../definitions.lock");
        let committed: String = committed.lines().filter(|l| !l.starts_with('#')).map(|l| format!("{l}\n")).collect();
        assert_eq!(
            committed,
            lock_file(),
            "the definition files or the migrations changed since migrator/definitions.lock was written. A change \
             to a definition file needs a new versioned migration (empty when nothing else changes): an older build \
             then refuses the database, instead of putting its older functions back. Add it, then write the lock \
             above (after its comment lines) with the right-hand side"
        );
    }
}
