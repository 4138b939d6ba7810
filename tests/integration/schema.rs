//! The migrations: what they create, that they apply twice, and the guarantees the schema itself enforces.

use integration_tests::TestDatabase;
use migrator::{MIGRATIONS_TABLE, migrate};
use sqlx::PgPool;
use sqlx::migrate::Migrate;

/// The migration that moved the tables into a schema of their own.
const PRIVATE_TABLES: i64 = 20261210000001;
use uuid::Uuid;

/// The tables of the sweeper's own schema.
async fn tables(pool: &PgPool) -> Vec<String> {
    tables_in(pool, migrator::PRIVATE_SCHEMA).await
}

async fn tables_in(pool: &PgPool, schema: &str) -> Vec<String> {
    sqlx::query_scalar("SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1")
        .bind(schema)
        .fetch_all(pool)
        .await
        .expect("list tables")
}

/// (table, column, referenced table, referenced column, on-delete action) for every foreign key.
async fn foreign_keys(pool: &PgPool) -> Vec<(String, String, String, String, String)> {
    sqlx::query_as(
        "SELECT c.conrelid::regclass::text, a.attname::text, c.confrelid::regclass::text, fa.attname::text,
                c.confdeltype::text
           FROM pg_constraint c
           JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
           JOIN pg_attribute fa ON fa.attrelid = c.confrelid AND fa.attnum = ANY (c.confkey)
          WHERE c.contype = 'f'
          ORDER BY 1, 2",
    )
    .fetch_all(pool)
    .await
    .expect("list foreign keys")
}

#[tokio::test]
async fn migrations_create_the_tables_keys_domain_and_indexes_and_apply_twice() {
    let db = TestDatabase::unmigrated().await;
    assert!(tables(&db.pool).await.is_empty(), "a fresh database has no tables");

    migrate(&db.pool).await.expect("first run");
    let first = tables(&db.pool).await;
    // Exactly the tables the schema check treats as the project's own, so none is mistaken for an owner table.
    let mut own: Vec<String> = schema::OWN_TABLES.iter().map(|t| t.to_string()).collect();
    own.sort();
    assert_eq!(first, own);
    let mut refused: Vec<String> =
        sqlx::query_scalar("SELECT unnest(asset_sweeper_own_tables())").fetch_all(&db.pool).await.expect("own tables");
    refused.sort();
    assert_eq!(refused, own, "a retention rule may name none of the project's tables");
    assert!(first.contains(&MIGRATIONS_TABLE.to_owned()));
    // 'r' is ON DELETE RESTRICT: a stored object cannot vanish from under its asset rows. A log source forgotten
    // takes the record of the log objects read with it ('c').
    assert_eq!(
        foreign_keys(&db.pool).await,
        [
            ("assets".into(), "storage_key".into(), "stored_objects".into(), "storage_key".into(), "r".into()),
            ("log_objects".into(), "source".into(), "log_sources".into(), "source".into(), "c".into())
        ]
    );

    let domain: Option<String> = sqlx::query_scalar(
        "SELECT format_type(typbasetype, typtypmod) FROM pg_type WHERE typname = 'asset_id' AND typtype = 'd'",
    )
    .fetch_optional(&db.pool)
    .await
    .expect("domain query");
    assert_eq!(domain.as_deref(), Some("uuid"));

    let indexes: Vec<String> =
        sqlx::query_scalar("SELECT indexname::text FROM pg_indexes WHERE tablename = 'assets' ORDER BY 1")
            .fetch_all(&db.pool)
            .await
            .expect("index query");
    for wanted in ["assets_due", "assets_due_by_workspace", "assets_storage_key", "assets_workspace_state"] {
        assert!(indexes.iter().any(|i| i == wanted), "missing index {wanted}: {indexes:?}");
    }

    migrate(&db.pool).await.expect("second run is a no-op");
    assert_eq!(tables(&db.pool).await, first);
    let applied: i64 =
        sqlx::query_scalar("SELECT count(*) FROM asset_sweeper_migrations").fetch_one(&db.pool).await.expect("count");
    assert_eq!(applied as usize, migrator::migrator().iter().count());
}

#[tokio::test]
async fn definition_files_apply_once_again_only_when_changed_and_the_audit_check_is_replaced_only_for_a_new_list() {
    let db = TestDatabase::unmigrated().await;
    let first = migrate(&db.pool).await.expect("first run");
    assert_eq!(first.migrations, migrator::migrator().iter().count());
    assert_eq!(first.definitions.len(), 11, "every definition file applies on a fresh database: {first:?}");
    let again = migrate(&db.pool).await.expect("second run");
    assert_eq!((again.migrations, again.definitions.len()), (0, 0), "nothing changed: {again:?}");

    let check = || async {
        sqlx::query_as::<_, (bool, String)>(
            "SELECT convalidated, pg_get_constraintdef(oid) FROM pg_constraint
              WHERE conname = 'settlement_events_action_check'",
        )
        .fetch_one(&db.pool)
        .await
        .expect("the audit check")
    };
    let (validated, written) = check().await;
    assert!(validated && written.contains("'adopted'::text"), "{written}");

    // A file whose recorded digest differs is applied again, alone; the audit check it spells is the live one, so
    // it stays as it is (validated, not re-checked over every audit row).
    sqlx::query("UPDATE asset_sweeper_definitions SET digest = 'stale' WHERE name = 'platform/sql/audit.sql'")
        .execute(&db.pool)
        .await
        .expect("a stale digest");
    let reapplied = migrate(&db.pool).await.expect("third run");
    assert_eq!(reapplied.definitions, ["platform/sql/audit.sql"]);
    assert_eq!(check().await, (true, written.clone()));

    // An older list (a database an older release migrated) is replaced by the build's, NOT VALID: the rows there
    // passed the older list, which the new one extends.
    sqlx::query(
        "ALTER TABLE settlement_events DROP CONSTRAINT settlement_events_action_check,
             ADD CONSTRAINT settlement_events_action_check CHECK (action IN ('keep', 'retire'))",
    )
    .execute(&db.pool)
    .await
    .expect("an older list");
    sqlx::query("DELETE FROM asset_sweeper_definitions WHERE name = 'platform/sql/audit.sql'")
        .execute(&db.pool)
        .await
        .expect("forget the file");
    migrate(&db.pool).await.expect("fourth run");
    assert_eq!(check().await, (false, written.replace(")))", "))) NOT VALID")));
}

#[tokio::test]
async fn migrations_applied_concurrently_from_two_pools_both_succeed() {
    let db = TestDatabase::unmigrated().await;
    let other = sqlx::postgres::PgPoolOptions::new().connect(&db.url).await.expect("second pool");
    // A timeout, not a timing assertion: a migrator that leaked its lock would otherwise hang the suite.
    let both = async { tokio::join!(migrate(&db.pool), migrate(&other)) };
    let (a, b) = tokio::time::timeout(std::time::Duration::from_secs(60), both).await.expect("a migrator hung");
    a.expect("first migrator");
    b.expect("second migrator");
    other.close().await;
}

async fn insert_object(pool: &PgPool, key: &str) {
    sqlx::query("INSERT INTO stored_objects (storage_key, content_hash, byte_size) VALUES ($1, 'sha256:x', 10)")
        .bind(key)
        .execute(pool)
        .await
        .expect("insert stored object");
}

async fn insert_asset(pool: &PgPool, key: &str) -> Result<Uuid, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO assets (workspace_id, storage_key, content_hash, byte_size) VALUES ($1, $2, 'sha256:x', 10)
         RETURNING id",
    )
    .bind(Uuid::new_v4())
    .bind(key)
    .fetch_one(pool)
    .await
}

#[tokio::test]
async fn an_asset_needs_its_stored_object_and_the_object_cannot_go_while_an_asset_uses_it() {
    let db = TestDatabase::new().await;
    let err = insert_asset(&db.pool, "nowhere").await.expect_err("no such stored object");
    assert_eq!(err.as_database_error().and_then(|e| e.code()).as_deref(), Some("23503"));

    insert_object(&db.pool, "a/b.png").await;
    insert_asset(&db.pool, "a/b.png").await.expect("asset on an existing object");
    let err = sqlx::query("DELETE FROM stored_objects WHERE storage_key = 'a/b.png'")
        .execute(&db.pool)
        .await
        .expect_err("object still used");
    // PostgreSQL 18 reports an ON DELETE RESTRICT key as restrict_violation; earlier versions as the key's.
    let code = err.as_database_error().and_then(|e| e.code()).map(|c| c.into_owned());
    assert!(matches!(code.as_deref(), Some("23503" | "23001")), "{code:?}");
}

/// The newest write times the grace floor counts from, for one asset and its object.
async fn write_times(pool: &PgPool, id: Uuid) -> (f64, f64) {
    sqlx::query_as(
        "SELECT extract(epoch FROM a.updated_at)::float8, extract(epoch FROM o.updated_at)::float8
           FROM assets a JOIN stored_objects o USING (storage_key)
          WHERE a.id = $1",
    )
    .bind(id)
    .fetch_one(pool)
    .await
    .expect("write times")
}

#[tokio::test]
async fn application_writes_move_the_grace_floor_and_sweeper_bookkeeping_does_not() {
    let db = TestDatabase::new().await;
    insert_object(&db.pool, "shared.png").await;
    let id = insert_asset(&db.pool, "shared.png").await.expect("asset");
    // Every statement below runs in its own transaction, so now() moves between them.
    let before = write_times(&db.pool, id).await;

    sqlx::query("UPDATE assets SET lease_token = gen_random_uuid(), leased_until = now(), attempts = 1 WHERE id = $1")
        .bind(id)
        .execute(&db.pool)
        .await
        .expect("lease");
    assert_eq!(write_times(&db.pool, id).await, before, "a lease is not a write about the asset");
    sqlx::query("UPDATE assets SET state = state, attempts = attempts + 1, last_error = 'x' WHERE id = $1")
        .bind(id)
        .execute(&db.pool)
        .await
        .expect("bookkeeping that names an application column");
    assert_eq!(write_times(&db.pool, id).await, before, "naming a column without changing it is no write");

    sqlx::query("UPDATE assets SET state = 'released', due_at = now() WHERE id = $1")
        .bind(id)
        .execute(&db.pool)
        .await
        .expect("release");
    let released = write_times(&db.pool, id).await;
    assert!(released.0 > before.0, "a release restarts the asset's grace floor");

    insert_asset(&db.pool, "shared.png").await.expect("a second upload reusing the bytes");
    let reused = write_times(&db.pool, id).await;
    assert!(reused.1 > released.1, "reusing the bytes restarts the object's grace floor");
}

#[tokio::test]
async fn an_unreadable_json_path_is_rejected_when_declared() {
    let db = TestDatabase::new().await;
    let err = sqlx::query(
        "INSERT INTO asset_reference_sources (table_name, column_name, json_path) VALUES ('pages', 'body', '$.[')",
    )
    .execute(&db.pool)
    .await
    .expect_err("malformed jsonpath");
    assert_eq!(err.as_database_error().and_then(|e| e.code()).as_deref(), Some("42601"), "{err}");
}

/// What the final receive records as retryable: a lock timeout passes; an application's own exception does not.
#[tokio::test]
async fn a_lock_timeout_is_transient_and_an_application_exception_is_not() {
    let db = TestDatabase::new().await;
    let mut holder = db.pool.begin().await.expect("tx");
    sqlx::query("LOCK TABLE stored_objects IN ACCESS EXCLUSIVE MODE").execute(&mut *holder).await.expect("lock");
    let mut waiter = db.pool.acquire().await.expect("connection");
    sqlx::query("SET lock_timeout = '100ms'").execute(&mut *waiter).await.expect("timeout");
    let timed_out = sqlx::query("SELECT 1 FROM stored_objects").execute(&mut *waiter).await.expect_err("lock timeout");
    assert!(platform::db::is_transient(&timed_out), "{timed_out}");
    holder.rollback().await.expect("rollback");

    let raised = sqlx::query("DO $$ BEGIN RAISE EXCEPTION 'asset is under legal hold'; END $$")
        .execute(&mut *waiter)
        .await
        .expect_err("exception");
    assert!(!platform::db::is_transient(&raised), "{raised}");
}

/// The values a `CHECK (column IN (...))` constraint of `table` allows.
async fn allowed_values(pool: &PgPool, table: &str, column: &str) -> std::collections::BTreeSet<String> {
    let definition: String = sqlx::query_scalar(
        "SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
          WHERE c.conrelid = $1::regclass AND c.contype = 'c' AND pg_get_constraintdef(c.oid) LIKE '%' || $2 || ' = ANY%'",
    )
    .bind(table)
    .bind(format!("({column}"))
    .fetch_one(pool)
    .await
    .unwrap_or_else(|e| panic!("the check constraint on {table}.{column}: {e}"));
    definition.split('\'').skip(1).step_by(2).map(str::to_owned).collect()
}

#[tokio::test]
async fn the_typed_states_are_exactly_the_values_the_database_allows() {
    use lifecycle::AssetState;
    use lifecycle::runs::RunOutcome;
    use platform::audit::AuditAction;

    let db = TestDatabase::unmigrated().await;
    migrate(&db.pool).await.expect("migrate");
    let names = |all: &[&str]| all.iter().map(|s| (*s).to_owned()).collect::<std::collections::BTreeSet<_>>();
    let states: Vec<&str> = AssetState::ALL.iter().map(|s| s.as_str()).collect();
    let actions: Vec<&str> = AuditAction::ALL.iter().map(|a| a.as_str()).collect();
    let outcomes: Vec<&str> = RunOutcome::ALL.iter().map(|o| o.as_str()).collect();
    assert_eq!(allowed_values(&db.pool, "assets", "state").await, names(&states));
    assert_eq!(allowed_values(&db.pool, "settlement_events", "action").await, names(&actions));
    assert_eq!(allowed_values(&db.pool, "sweep_runs", "outcome").await, names(&outcomes));
}

/// The plan of `query` as JSON text, with sequential scans priced out so any usable index is taken.
async fn plan(pool: &PgPool, query: &str) -> String {
    let mut tx = pool.begin().await.expect("begin");
    sqlx::query("SET LOCAL enable_seqscan = off").execute(&mut *tx).await.expect("planner setting");
    let plan: serde_json::Value = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("EXPLAIN (FORMAT JSON) {query}")))
        .fetch_one(&mut *tx)
        .await
        .expect("explain");
    plan.to_string()
}

#[tokio::test]
async fn the_lifecycle_formulas_inline_so_the_partial_indexes_still_serve_them() {
    let db = TestDatabase::unmigrated().await;
    migrate(&db.pool).await.expect("migrate");
    // Were a formula not inlined (a SET clause, a volatility mismatch), the planner could not see the partial
    // index's predicate in it, and every claim would read the whole table.
    let claim = plan(
        &db.pool,
        "SELECT a.id FROM assets a
          WHERE a.workspace_id = '6e1c3a52-0000-4000-8000-000000000000' AND asset_sweeper_claimable(a)
          ORDER BY a.due_at LIMIT 10",
    )
    .await;
    assert!(
        claim.contains("\"Index Name\":\"assets_due_by_workspace\"") && !claim.contains("asset_sweeper_"),
        "{claim}"
    );
    let due = plan(&db.pool, "SELECT min(a.due_at) FROM assets a WHERE asset_sweeper_due(a)").await;
    assert!(due.contains("\"Index Name\":\"assets_due") && !due.contains("asset_sweeper_due"), "{due}");
}

#[tokio::test]
async fn a_partitioned_source_is_guarded_through_its_partitions_and_installing_twice_changes_nothing() {
    let db = TestDatabase::new().await;
    sqlx::raw_sql(
        "CREATE TABLE events (id bigint, day date NOT NULL, image asset_id) PARTITION BY RANGE (day);
         CREATE TABLE events_2026 PARTITION OF events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
         CREATE INDEX ON events (image);",
    )
    .execute(&db.pool)
    .await
    .expect("a partitioned owner table");
    integration_tests::install_guards(&db.pool).await;
    integration_tests::install_guards(&db.pool).await;
    let guards: Vec<(String, String)> = sqlx::query_as(
        "SELECT tgrelid::regclass::text, tgname::text FROM pg_trigger
          WHERE tgname LIKE 'asset_sweeper_guard_%' ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .expect("guards");
    assert_eq!(
        guards.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(),
        ["events", "events", "events_2026", "events_2026"],
        "{guards:?}"
    );
    // Row triggers, which Postgres carries to every partition (a statement's trigger it would not): an update
    // naming the partition alone is guarded too. (docs/developing.md, "The reference guards' cost", says why a
    // statement's trigger was tried and not kept for a plain table either.)
    let per_row: bool = sqlx::query_scalar(
        "SELECT bool_and((tgtype & 1) = 1) FROM pg_trigger WHERE tgname LIKE 'asset_sweeper_guard_%'",
    )
    .fetch_one(&db.pool)
    .await
    .expect("trigger types");
    assert!(per_row, "a partitioned table's guard runs per row");

    // An asset the sweeper removed: a row naming it fails, whichever partition it lands in.
    let removed = integration_tests::fixtures::removed_asset(&db.pool).await;
    refused_as_removed(&db.pool, "INSERT INTO events (id, day, image) VALUES (1, '2026-06-01', $1)", removed).await;
    sqlx::query("INSERT INTO events (id, day) VALUES (2, '2026-06-02')").execute(&db.pool).await.expect("a row");
    // An update of the partition itself.
    refused_as_removed(&db.pool, "UPDATE events_2026 SET image = $1", removed).await;
}

/// `sql`, binding `removed` (an asset the sweeper removed), is refused by the reference guard, naming it.
async fn refused_as_removed(pool: &PgPool, sql: &'static str, removed: Uuid) {
    let refused = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(removed)
        .execute(pool)
        .await
        .expect_err("the guard refuses a reference to a removed asset");
    assert!(refused.to_string().contains("which asset-sweeper has removed"), "{sql}: {refused}");
}

/// An install from before the sweeper's own schema: its migrations ran into `public` (as they did then), an
/// application column is of its `asset_id` domain. Migrating moves every table, the domain and the functions into
/// `asset_sweeper`, leaves nothing of the sweeper in `public`, and the application's column follows the domain.
#[tokio::test]
async fn an_install_from_before_the_schema_is_moved_into_it_whole() {
    let db = TestDatabase::unmigrated().await;
    let mut conn = db.pool.acquire().await.expect("a connection");
    sqlx::raw_sql("SET search_path TO public").execute(&mut *conn).await.expect("the old path");
    // The migrations of that time: those from before the schema of the tables, which a release that knew no
    // schema of its own never had.
    conn.ensure_migrations_table(MIGRATIONS_TABLE).await.expect("the migrations table, in public");
    for migration in migrator::migrator().iter().filter(|m| m.version < PRIVATE_TABLES) {
        conn.apply(MIGRATIONS_TABLE, migration).await.expect("the versioned migrations, into public");
    }
    sqlx::raw_sql(
        "CREATE TABLE public.banners (id serial PRIMARY KEY, image asset_id);
         RESET search_path;",
    )
    .execute(&mut *conn)
    .await
    .expect("an application table");
    drop(conn);
    assert!(tables_in(&db.pool, "public").await.contains(&"assets".to_owned()), "the old layout");

    migrate(&db.pool).await.expect("the move and the definitions");
    assert_eq!(tables_in(&db.pool, "public").await, ["banners"], "nothing of the sweeper is left in public");
    let mut moved = tables(&db.pool).await;
    let mut own: Vec<String> = migrator::OWN_TABLES.iter().map(|t| (*t).to_owned()).collect();
    moved.sort();
    own.sort();
    assert_eq!(moved, own);
    let (left_in_public, follows): (i64, bool) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM pg_proc WHERE pronamespace = 'public'::regnamespace AND proname LIKE 'asset\\_sweeper\\_%'),
                (SELECT atttypid = 'asset_sweeper.asset_id'::regtype FROM pg_attribute
                  WHERE attrelid = 'public.banners'::regclass AND attname = 'image')",
    )
    .fetch_one(&db.pool)
    .await
    .expect("what is left");
    assert_eq!((left_in_public, follows), (0, true), "no function left behind; the column follows the domain");
    // A second migrate finds nothing to move or apply.
    let again = migrate(&db.pool).await.expect("again");
    assert_eq!((again.migrations, again.definitions.len()), (0, 0));
}

/// A guard's function names its column, and Postgres lets a column be renamed under the triggers that read it: the
/// application's writes after such a rename go through unguarded (never fail for a name the application changed),
/// and `guards install` finds the guard not the one the source needs, and puts the right one in place.
#[tokio::test]
async fn a_guarded_column_renamed_under_its_guard_fails_no_write_and_is_installed_again() {
    let db = TestDatabase::new().await;
    sqlx::raw_sql("CREATE TABLE banners (id serial PRIMARY KEY, image asset_id); CREATE INDEX ON banners (image);")
        .execute(&db.pool)
        .await
        .expect("an owner table");
    let install = || async {
        let mut conn = db.pool.acquire().await.expect("a connection");
        let (report, _) = schema::check::install_guards(&mut conn, schema::guards::Patience::default())
            .await
            .expect("guards install");
        (report.installed.len(), report.in_place.len())
    };
    assert_eq!(install().await, (1, 0));
    assert_eq!(install().await, (0, 1), "in place");
    let removed = integration_tests::fixtures::removed_asset(&db.pool).await;
    let write = |column: &'static str| {
        let pool = db.pool.clone();
        async move {
            sqlx::query(sqlx::AssertSqlSafe(format!("INSERT INTO banners ({column}) VALUES ($1)")))
                .bind(removed)
                .execute(&pool)
                .await
        }
    };
    let refused = write("image").await.expect_err("the guard refuses a removed asset");
    assert!(refused.to_string().contains("which asset-sweeper has removed"), "{refused}");
    sqlx::raw_sql("INSERT INTO banners (image) VALUES (NULL)").execute(&db.pool).await.expect("a row naming nothing");
    refused_as_removed(&db.pool, "UPDATE banners SET image = $1", removed).await;
    sqlx::raw_sql("ALTER TABLE banners RENAME COLUMN image TO picture").execute(&db.pool).await.expect("renamed");
    write("picture").await.expect("a write after the rename goes through, unguarded");
    sqlx::query("UPDATE banners SET picture = $1")
        .bind(removed)
        .execute(&db.pool)
        .await
        .expect("an update after the rename goes through, unguarded");
    assert_eq!(install().await, (1, 0), "the guard is named not in place, and installed again");
    let refused = write("picture").await.expect_err("guarded again");
    assert!(refused.to_string().contains("banners.picture refers to asset"), "{refused}");
}
