//! The trust model (docs/security.md), tried as a hostile application would: a login with exactly the grants
//! docs/integrating.md gives the application (member of `asset_sweeper_application`, owner of its own schema, and
//! allowed to create schemas), beside a sweep, a consumer and an operator login, each a member of its group role
//! only, and a superuser that migrated (the owner).
//!
//! Before anything of the sweeper runs, the application plants what it can: overloads and same-name functions of
//! built-ins (and operators) in every schema it may create in — its own, a schema named after each sweeper login
//! (the old `"$user"` door), and `public` on PostgreSQL 14's defaults — and shadow tables of the sweeper's in the
//! schemas named after the logins. Each planted function trips a wire when anyone but the application runs it:
//! it advances a sequence (which no rollback undoes), records who ran it, tries to make the application a
//! superuser and to empty the audit trail. Then the real passes, settles, `plan`, `status`, `guards install` and
//! the application's own writes run; nothing may trip the wire, no role may change, nothing referenced may lose
//! its bytes, and the retention rules the application writes to turn the sweep against data are refused or
//! stopped by name.

use std::time::{Duration, Instant};

use consumer_lambda::Consumer;
use integration_tests::fixtures::{object_exists, put_bytes};
use integration_tests::{TestContext, acknowledge, admin_database_url, receive_event, short_id};
use serde_json::Value;
use sqlx::postgres::PgConnectOptions;
use sqlx::{AssertSqlSafe, Connection, PgConnection, PgPool};
use sweep_lambda::Sweeper;
use uuid::Uuid;

/// Built-ins the sweeper's SQL calls, planted with an argument list Postgres would prefer over the built-in's
/// (an exact type match wins even when the built-in's schema comes first), or with the built-in's own signature
/// (which wins where the planting schema comes before `pg_catalog`): name, arguments, result, the built-in call.
const PLANTED: &[(&str, &str, &str, &str)] = &[
    ("now", "", "timestamptz", "pg_catalog.now()"),
    ("lower", "text", "text", "pg_catalog.lower($1)"),
    ("lower", "varchar", "text", "pg_catalog.lower($1::text)"),
    ("upper", "varchar", "text", "pg_catalog.upper($1::text)"),
    ("length", "varchar", "integer", "pg_catalog.length($1::text)"),
    ("md5", "varchar", "text", "pg_catalog.md5($1::text)"),
    ("btrim", "varchar", "text", "pg_catalog.btrim($1::text)"),
    ("format", "varchar", "text", "pg_catalog.format($1::text)"),
    ("format", "varchar, varchar", "text", "pg_catalog.format($1::text, $2::text)"),
    ("to_regclass", "varchar", "regclass", "pg_catalog.to_regclass($1::text)"),
    ("to_regclass", "text", "regclass", "pg_catalog.to_regclass($1)"),
    ("current_setting", "varchar", "text", "pg_catalog.current_setting($1::text)"),
    ("current_setting", "varchar, boolean", "text", "pg_catalog.current_setting($1::text, $2)"),
    ("set_config", "varchar, varchar, boolean", "text", "pg_catalog.set_config($1::text, $2::text, $3)"),
    ("gen_random_uuid", "", "uuid", "pg_catalog.gen_random_uuid()"),
    ("to_jsonb", "uuid", "jsonb", "pg_catalog.to_jsonb($1)"),
    ("jsonb_typeof", "jsonb", "text", "pg_catalog.jsonb_typeof($1)"),
    ("array_length", "uuid[], integer", "integer", "pg_catalog.array_length($1, $2)"),
    ("cardinality", "uuid[]", "integer", "pg_catalog.cardinality($1)"),
    ("encode", "bytea, varchar", "text", "pg_catalog.encode($1, $2::text)"),
    ("date_trunc", "varchar, timestamptz", "timestamptz", "pg_catalog.date_trunc($1::text, $2)"),
    ("quote_ident", "varchar", "text", "pg_catalog.quote_ident($1::text)"),
    ("replace", "varchar, varchar, varchar", "text", "pg_catalog.replace($1::text, $2::text, $3::text)"),
    ("string_to_array", "varchar, varchar", "text[]", "pg_catalog.string_to_array($1::text, $2::text)"),
    ("pg_try_advisory_lock", "integer", "boolean", "pg_catalog.pg_try_advisory_lock($1::bigint)"),
    ("pg_try_advisory_xact_lock", "integer", "boolean", "pg_catalog.pg_try_advisory_xact_lock($1::bigint)"),
    ("pg_relation_size", "oid", "bigint", "pg_catalog.pg_relation_size($1::regclass)"),
    (
        "has_table_privilege",
        "varchar, regclass, varchar",
        "boolean",
        "pg_catalog.has_table_privilege($1::text, $2::oid, $3::text)",
    ),
    ("pg_has_role", "varchar, oid, varchar", "boolean", "pg_catalog.pg_has_role($1::name, $2, $3::text)"),
];

/// Operators planted over `varchar`, for which `pg_catalog` has no exact match.
const OPERATORS: &[(&str, &str)] =
    &[("=", "pg_catalog.texteq"), ("<>", "pg_catalog.textne"), ("~~", "pg_catalog.textlike")];

/// One hostile application and the sweeper's logins beside it.
struct Hostile {
    ctx: TestContext,
    /// The owner's pool, on the sweeper's own path (the harness's pool puts `public` first, which a test of planted
    /// functions must not use once they are planted).
    owner: PgPool,
    /// Login name → password.
    logins: Vec<(String, String)>,
    app: String,
    sweep: String,
    consumer: String,
    operator: String,
}

impl Hostile {
    async fn new(postgres_14_defaults: bool) -> Self {
        let ctx = TestContext::new().await;
        let suffix = short_id();
        let [app, sweep, consumer, operator] =
            ["app", "sweep", "consumer", "operator"].map(|role| format!("hostile_{role}_{suffix}"));
        let mut admin = PgConnection::connect(&ctx.db.url).await.expect("owner");
        let mut logins = Vec::new();
        for (login, group) in [
            (&app, "asset_sweeper_application"),
            (&sweep, "asset_sweeper_sweep"),
            (&consumer, "asset_sweeper_consumer"),
            (&operator, "asset_sweeper_operator"),
        ] {
            let password = Uuid::new_v4().simple().to_string();
            exec(&mut admin, &format!("CREATE ROLE {login} LOGIN PASSWORD '{password}'; GRANT {group} TO {login};"))
                .await;
            logins.push((login.clone(), password));
        }
        // What the application's DBA gives it: a schema of its own, and the right to create schemas (so it may
        // name one after a sweeper login). On PostgreSQL 14's defaults every role may also create in `public`.
        let db = &ctx.db.name;
        exec(
            &mut admin,
            &format!(
                r#"GRANT CREATE ON DATABASE "{db}" TO {app};
                   CREATE SCHEMA app AUTHORIZATION {app};
                   CREATE SCHEMA app_private;
                   CREATE TABLE app_private.audit (id serial PRIMARY KEY, at timestamptz NOT NULL, note text);
                   INSERT INTO app_private.audit (at, note) SELECT now() - interval '400 days', 'kept' FROM generate_series(1, 100);
                   GRANT USAGE ON SCHEMA app_private TO {app};
                   REVOKE CREATE ON SCHEMA public FROM PUBLIC;"#
            ),
        )
        .await;
        if postgres_14_defaults {
            exec(&mut admin, "GRANT CREATE ON SCHEMA public TO PUBLIC").await;
        }
        // Whatever the application creates in its schema, the sweeper's roles may read (docs/security.md).
        exec(
            &mut admin,
            &format!(
                "ALTER DEFAULT PRIVILEGES FOR ROLE {app} IN SCHEMA app
                    GRANT SELECT ON TABLES TO asset_sweeper_sweep, asset_sweeper_consumer, asset_sweeper_operator"
            ),
        )
        .await;
        let owner = platform::db::pool(&ctx.settings(&[]).database);
        let hostile = Hostile { ctx, owner, logins, app, sweep, consumer, operator };
        let mut app_conn = hostile.connect(&hostile.app).await;
        exec(
            &mut app_conn,
            "CREATE TABLE app.banners (id serial PRIMARY KEY, image asset_sweeper.asset_id);
             CREATE INDEX ON app.banners (image);
             CREATE TABLE app.sessions (id serial PRIMARY KEY, at timestamptz NOT NULL, kind text NOT NULL);
             INSERT INTO app.sessions (at, kind)
             SELECT now() - interval '100 days', CASE WHEN i % 2 = 0 THEN 'guest' ELSE 'member' END
               FROM generate_series(1, 40) i;",
        )
        .await;
        // The DBA's grants to the sweeper's roles on the application's tables (docs/security.md): they read
        // everything, and the sweep deletes from the tables that carry a retention rule, the private audit
        // table included, which the application itself may not touch.
        exec(
            &mut admin,
            "GRANT USAGE ON SCHEMA app, app_private
                TO asset_sweeper_sweep, asset_sweeper_consumer, asset_sweeper_operator, asset_sweeper_filter_owner;
             GRANT SELECT ON ALL TABLES IN SCHEMA app, app_private
                TO asset_sweeper_sweep, asset_sweeper_consumer, asset_sweeper_operator;
             GRANT DELETE, UPDATE (at) ON app.sessions, app_private.audit TO asset_sweeper_sweep;",
        )
        .await;
        let guards = crate::cli::run(&hostile.ctx.db.url, Some(&hostile.ctx), &["guards", "install"]);
        assert!(guards.status.success(), "guards install: {}", String::from_utf8_lossy(&guards.stderr));
        hostile.plant(postgres_14_defaults).await;
        hostile
    }

    /// A connection as `login`, on the role's own default search path (as its applications would connect).
    async fn connect(&self, login: &str) -> PgConnection {
        PgConnection::connect_with(&self.options(login)).await.unwrap_or_else(|e| panic!("connect as {login}: {e}"))
    }

    fn options(&self, login: &str) -> PgConnectOptions {
        let password = &self.logins.iter().find(|(l, _)| l == login).expect("a login of this test").1;
        let admin: PgConnectOptions = admin_database_url().parse().expect("admin url");
        admin.username(login).password(password).database(&self.ctx.db.name)
    }

    /// `login`'s URL, for settings and the CLI.
    fn url(&self, login: &str) -> String {
        let options = self.options(login);
        let password = &self.logins.iter().find(|(l, _)| l == login).expect("a login of this test").1;
        format!("postgres://{login}:{password}@{}:{}/{}", options.get_host(), options.get_port(), self.ctx.db.name)
    }

    /// The functions' pool for `login`, with the sessions the functions open (platform::db::session_options).
    fn pool(&self, login: &str) -> PgPool {
        let url = self.url(login);
        platform::db::pool(&self.ctx.settings(&[("DATABASE_URL", &url)]).database)
    }

    /// Everything the application plants, as the application.
    async fn plant(&self, postgres_14_defaults: bool) {
        let mut app = self.connect(&self.app).await;
        let app_role = &self.app;
        exec(
            &mut app,
            &format!(
                "CREATE SEQUENCE app.tripwire;
                 CREATE TABLE app.pwned (who text, what text, at timestamptz DEFAULT clock_timestamp());
                 GRANT USAGE ON SCHEMA app TO PUBLIC;
                 GRANT USAGE ON SEQUENCE app.tripwire TO PUBLIC;
                 GRANT INSERT ON app.pwned TO PUBLIC;
                 CREATE FUNCTION app.trip(what text) RETURNS void LANGUAGE plpgsql AS $f$
                 BEGIN
                     IF current_user::text OPERATOR(pg_catalog.<>) '{app_role}'
                        AND current_user::text OPERATOR(pg_catalog.<>) 'asset_sweeper_filter_owner' THEN
                         PERFORM pg_catalog.nextval('app.tripwire');
                         INSERT INTO app.pwned (who, what) VALUES (current_user, what);
                         BEGIN EXECUTE 'ALTER ROLE {app_role} SUPERUSER'; EXCEPTION WHEN OTHERS THEN NULL; END;
                         BEGIN DELETE FROM asset_sweeper_private.settlement_events; EXCEPTION WHEN OTHERS THEN NULL; END;
                         BEGIN INSERT INTO asset_sweeper_private.brake_approvals
                                   (workspace_id, approved_by, reason, due_assets, due_bytes)
                               VALUES (pg_catalog.gen_random_uuid(), 'forged', 'forged', 1000000000, 1000000000000);
                         EXCEPTION WHEN OTHERS THEN NULL; END;
                         BEGIN UPDATE asset_sweeper_private.retention_rules
                                  SET approved_until = pg_catalog.now() OPERATOR(pg_catalog.+) interval '7 days',
                                      approved_by = 'forged', approved_rows = 1000000000;
                         EXCEPTION WHEN OTHERS THEN NULL; END;
                     END IF;
                 END $f$;
                 GRANT EXECUTE ON FUNCTION app.trip(text) TO PUBLIC;"
            ),
        )
        .await;
        let mut schemas = vec!["app".to_owned()];
        for login in [&self.sweep, &self.consumer, &self.operator] {
            exec(&mut app, &format!("CREATE SCHEMA {login}; GRANT USAGE ON SCHEMA {login} TO PUBLIC;")).await;
            // Shadows of the sweeper's tables, where `"$user"` would find them first.
            for table in ["schema_verdicts", "assets", "settlement_events", "retention_rules", "sweep_runs"] {
                exec(
                    &mut app,
                    &format!(
                        "CREATE TABLE {login}.{table} (id bigint);
                         GRANT ALL ON {login}.{table} TO PUBLIC;"
                    ),
                )
                .await;
            }
            schemas.push(login.clone());
        }
        for group in ["asset_sweeper_sweep", "asset_sweeper_consumer", "asset_sweeper_operator"] {
            exec(&mut app, &format!("CREATE SCHEMA {group}; GRANT USAGE ON SCHEMA {group} TO PUBLIC;")).await;
            schemas.push(group.to_owned());
        }
        if postgres_14_defaults {
            schemas.push("public".to_owned());
        }
        for schema in &schemas {
            for (name, args, result, call) in PLANTED {
                let body =
                    if *result == "void" { format!("PERFORM {call}; RETURN;") } else { format!("RETURN {call};") };
                exec(
                    &mut app,
                    &format!(
                        "CREATE FUNCTION {schema}.{name}({args}) RETURNS {result} LANGUAGE plpgsql AS $f$
                         BEGIN PERFORM app.trip('{schema}.{name}({args})'); {body} END $f$;
                         GRANT EXECUTE ON FUNCTION {schema}.{name}({args}) TO PUBLIC;"
                    ),
                )
                .await;
            }
            for (i, (op, builtin)) in OPERATORS.iter().enumerate() {
                exec(
                    &mut app,
                    &format!(
                        "CREATE FUNCTION {schema}.planted_op_{i}(a varchar, b varchar) RETURNS boolean LANGUAGE plpgsql AS $f$
                         BEGIN PERFORM app.trip('{schema}.{op}'); RETURN {builtin}(a::text, b::text); END $f$;
                         CREATE OPERATOR {schema}.{op} (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = {schema}.planted_op_{i});"
                    ),
                )
                .await;
            }
        }
    }

    /// What the wire caught: who ran a planted function, and what. Read as the owner on the sweeper's own path.
    async fn tripped(&self) -> Vec<(String, String)> {
        let owner = &self.owner;
        let advanced: bool =
            sqlx::query_scalar("SELECT is_called FROM app.tripwire").fetch_one(owner).await.expect("tripwire");
        let caught: Vec<(String, String)> =
            sqlx::query_as("SELECT who, what FROM app.pwned ORDER BY at").fetch_all(owner).await.expect("pwned");
        assert!(!advanced || !caught.is_empty(), "a planted function ran in a transaction that was rolled back");
        caught
    }

    /// Every login's attributes, to compare before and after.
    async fn attributes(&self) -> Vec<(String, bool, bool, bool, bool, bool)> {
        let names: Vec<String> = self.logins.iter().map(|(l, _)| l.clone()).collect();
        sqlx::query_as(
            "SELECT rolname::text, rolsuper, rolcreaterole, rolcreatedb, rolbypassrls, rolreplication
               FROM pg_roles WHERE rolname = ANY ($1) ORDER BY rolname",
        )
        .bind(&names)
        .fetch_all(&self.owner)
        .await
        .expect("role attributes")
    }

    /// One pass of the real sweep, connected as the sweep's login.
    async fn pass(&self) -> Value {
        let url = self.url(&self.sweep);
        let settings = self.ctx.settings(&[("DATABASE_URL", &url)]);
        let sweeper =
            Sweeper::new(self.pool(&self.sweep), self.ctx.sqs.clone(), settings).with_storage(self.ctx.s3.clone());
        let report = sweeper.run_pass(Instant::now() + Duration::from_secs(600)).await.expect("sweep pass");
        serde_json::to_value(&report).expect("the report as JSON")
    }

    /// The real consumer, connected as the consumer's login, until the queue is empty; the failed items.
    async fn settle(&self) -> Vec<String> {
        let url = self.url(&self.consumer);
        let consumer =
            Consumer::new(self.pool(&self.consumer), self.ctx.s3.clone(), self.ctx.settings(&[("DATABASE_URL", &url)]));
        let mut failed = Vec::new();
        while self.ctx.queue_depth().await > 0 {
            let event = receive_event(&self.ctx.sqs, &self.ctx.queue.url).await;
            let response = consumer
                .handle(lambda_runtime::LambdaEvent::new(event.clone(), lambda_runtime::Context::default()))
                .await
                .expect("the handler answers");
            acknowledge(&self.ctx.sqs, &self.ctx.queue.url, &event, &response).await;
            failed.extend(response.batch_item_failures.into_iter().map(|f| f.item_identifier));
        }
        failed
    }

    /// An upload by the application: its bytes in the bucket and its rows, `days` old; returns the asset id.
    async fn upload(&self, app: &mut PgConnection, days: i32) -> (Uuid, String) {
        let workspace = Uuid::new_v4();
        let key = format!("{workspace}/{}.png", Uuid::new_v4());
        put_bytes(&self.ctx.s3, &self.ctx.bucket, &key, b"bytes").await;
        let id: Uuid = sqlx::query_scalar(
            "WITH o AS (INSERT INTO asset_sweeper.stored_objects (storage_key, content_hash, byte_size, created_at, updated_at)
                        VALUES ($2, 'h', 5, now() - make_interval(days => $3), now() - make_interval(days => $3))
                        RETURNING storage_key)
             INSERT INTO asset_sweeper.assets (workspace_id, storage_key, content_hash, byte_size, state, due_at, created_at, updated_at)
             SELECT $1, storage_key, 'h', 5, 'pending', now() - interval '1 hour', now() - make_interval(days => $3),
                    now() - make_interval(days => $3)
               FROM o RETURNING id",
        )
        .bind(workspace)
        .bind(&key)
        .bind(days)
        .fetch_one(&mut *app)
        .await
        .expect("the application's upload");
        // The asset row's insert touched its stored object (an upload restarts the grace floor): as old as the rest.
        sqlx::query("UPDATE stored_objects SET updated_at = now() - make_interval(days => $2) WHERE storage_key = $1")
            .bind(&key)
            .bind(days)
            .execute(&self.owner)
            .await
            .expect("backdated");
        (id, key)
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        let logins: Vec<String> = self.logins.iter().map(|(l, _)| l.clone()).collect();
        let url = self.ctx.db.url.clone();
        // The logins own objects in the test's database: those go with them, then the logins.
        std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
            runtime.block_on(async move {
                let Ok(mut conn) = PgConnection::connect(&url).await else { return };
                for login in &logins {
                    let _ =
                        sqlx::raw_sql(AssertSqlSafe(format!("DROP OWNED BY {login} CASCADE"))).execute(&mut conn).await;
                }
                let _ = conn.close().await;
                let Ok(mut admin) = PgConnection::connect(&admin_database_url()).await else { return };
                for login in &logins {
                    let _ =
                        sqlx::raw_sql(AssertSqlSafe(format!("DROP ROLE IF EXISTS {login}"))).execute(&mut admin).await;
                }
            });
        })
        .join()
        .ok();
    }
}

async fn exec(conn: &mut PgConnection, sql: &str) {
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned())).execute(&mut *conn).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// `sql` as `conn`'s role, expecting a refusal whose message contains `why`.
async fn refused(conn: &mut PgConnection, sql: &str, why: &str) {
    match sqlx::raw_sql(AssertSqlSafe(sql.to_owned())).execute(&mut *conn).await {
        Ok(_) => panic!("{sql}: accepted, expected a refusal naming {why:?}"),
        Err(e) => assert!(e.to_string().contains(why), "{sql}: refused with {e}, expected {why:?}"),
    }
}

async fn the_hostile_application_gains_nothing(postgres_14_defaults: bool) {
    let hostile = Hostile::new(postgres_14_defaults).await;
    let attributes = hostile.attributes().await;
    let mut app = hostile.connect(&hostile.app).await;

    // Door 1: the owner's functions. The application may call only the two the contract names, may create
    // nothing in the sweeper's schema, and its DDL, guarded inserts and quota calls run the owner's code on the
    // owner's path, never its planted functions.
    let callable: Vec<String> = sqlx::query_scalar(
        "SELECT p.proname::text FROM pg_proc p WHERE p.pronamespace = 'asset_sweeper'::regnamespace
            AND has_function_privilege(current_user, p.oid, 'EXECUTE') ORDER BY 1",
    )
    .fetch_all(&mut app)
    .await
    .expect("what the application may call");
    // And the one a composite source's index runs on every write, which reads nothing and is no definer; a
    // migration window's two, which only keep; the guard's privileged half, which every guarded write calls and
    // which takes only uuids and text; and the constant a quota's trigger compares with.
    assert_eq!(
        callable,
        [
            "asset_sweeper_check_upload",
            "asset_sweeper_guard_refers",
            "asset_sweeper_hold",
            "asset_sweeper_nested_ids",
            "asset_sweeper_quota_limit",
            "asset_sweeper_release_hold",
            "asset_sweeper_usage"
        ]
    );
    for login in [&hostile.app, &hostile.sweep, &hostile.consumer, &hostile.operator] {
        let creates: bool = sqlx::query_scalar("SELECT has_schema_privilege($1, 'asset_sweeper', 'CREATE')")
            .bind(login)
            .fetch_one(&hostile.owner)
            .await
            .expect("schema privilege");
        assert!(!creates, "{login} may create in the sweeper's schema");
    }
    refused(&mut app, "SELECT asset_sweeper.asset_sweeper_fold_schema_changes()", "permission denied").await;
    refused(&mut app, "SELECT * FROM asset_sweeper_private.asset_sweeper_schema_state FOR UPDATE", "permission denied")
        .await;
    refused(
        &mut app,
        "INSERT INTO asset_sweeper_private.settlement_events (asset_id) VALUES (gen_random_uuid())",
        "permission denied",
    )
    .await;
    refused(&mut app, "UPDATE asset_sweeper.assets SET lease_token = gen_random_uuid()", "permission denied").await;
    // An approval is an operator's, bound to the plan the operator read: the application may neither grant one nor
    // widen what one covers.
    refused(&mut app, "UPDATE asset_sweeper.retention_rules SET approved_rows = 1000000000", "permission denied").await;
    refused(
        &mut app,
        "UPDATE asset_sweeper_private.reconcile_prefixes SET approved_keys = 1000000000",
        "permission denied",
    )
    .await;
    refused(&mut app, "UPDATE asset_sweeper_private.brake_approvals SET due_assets = 1000000000", "permission denied")
        .await;
    refused(
        &mut app,
        "INSERT INTO asset_sweeper.assets (workspace_id, storage_key, content_hash, byte_size, state, purge_after)
         VALUES (gen_random_uuid(), 'k', 'h', 1, 'retired', now() - interval '1 day')",
        "permission denied",
    )
    .await;
    refused(
        &mut app,
        "CREATE FUNCTION asset_sweeper.now() RETURNS timestamptz LANGUAGE sql AS 'SELECT now()'",
        "permission denied",
    )
    .await;

    let (kept, kept_key) = hostile.upload(&mut app, 10).await;
    let (gone, gone_key) = hostile.upload(&mut app, 10).await;
    // A guarded insert (the reference guard is the owner's, SECURITY DEFINER) and a declared document.
    exec(&mut app, &format!("INSERT INTO app.banners (image) VALUES ('{kept}')")).await;
    // A foreign key to assets is checked as the owner of assets, with the referring type's casts: the application
    // may not make one (and so no cast of its own runs as the owner, nor in the consumer's deletes).
    refused(
        &mut app,
        "CREATE TABLE app.products (id serial PRIMARY KEY, hero uuid REFERENCES asset_sweeper_private.assets (id))",
        "permission denied",
    )
    .await;
    // The guard reads the guarded column alone: a cast to JSON of another column's type stays the application's.
    exec(
        &mut app,
        "CREATE TYPE app.tag AS ENUM ('a');
         CREATE FUNCTION app.tag_json(v app.tag) RETURNS json LANGUAGE plpgsql AS $f$
         BEGIN PERFORM app.trip('app.tag_json'); RETURN '\"a\"'; END $f$;
         CREATE CAST (app.tag AS json) WITH FUNCTION app.tag_json(app.tag);
         ALTER TABLE app.banners ADD COLUMN tag app.tag;",
    )
    .await;
    exec(&mut app, &format!("INSERT INTO app.banners (image, tag) VALUES ('{kept}', 'a')")).await;
    // The census and the schema check's sample write out a value of the application's own type by its output
    // function: a cast the application made, even an implicit one, to text, to a string or to JSON, never runs.
    exec(
        &mut app,
        "CREATE TYPE app.card AS (title text, image uuid);
         CREATE FUNCTION app.card_text(v app.card) RETURNS text LANGUAGE plpgsql AS $f$
         BEGIN PERFORM app.trip('app.card_text'); RETURN 'x'; END $f$;
         CREATE CAST (app.card AS text) WITH FUNCTION app.card_text(app.card) AS IMPLICIT;
         CREATE FUNCTION app.card_varchar(v app.card) RETURNS varchar LANGUAGE plpgsql AS $f$
         BEGIN PERFORM app.trip('app.card_varchar'); RETURN 'x'; END $f$;
         CREATE CAST (app.card AS varchar) WITH FUNCTION app.card_varchar(app.card) AS IMPLICIT;
         CREATE FUNCTION app.card_json(v app.card) RETURNS jsonb LANGUAGE plpgsql AS $f$
         BEGIN PERFORM app.trip('app.card_json'); RETURN '{}'; END $f$;
         CREATE CAST (app.card AS jsonb) WITH FUNCTION app.card_json(app.card) AS IMPLICIT;
         ALTER TABLE app.banners ADD COLUMN card app.card;",
    )
    .await;
    exec(&mut app, &format!("INSERT INTO app.banners (image, card) VALUES ('{kept}', ROW('hero', '{kept}'))")).await;
    // The census searches a uuid column as its text: a domain over uuid with the application's own cast to text (which
    // Postgres ignores, the source being a domain), alone and in an array, is written out by uuid's output function.
    exec(
        &mut app,
        "CREATE DOMAIN app.ref AS uuid;
         CREATE FUNCTION app.ref_text(v app.ref) RETURNS text LANGUAGE plpgsql AS $f$
         BEGIN PERFORM app.trip('app.ref_text'); RETURN 'x'; END $f$;
         CREATE CAST (app.ref AS text) WITH FUNCTION app.ref_text(app.ref) AS IMPLICIT;
         ALTER TABLE app.banners ADD COLUMN ref_one app.ref, ADD COLUMN refs app.ref[];",
    )
    .await;
    exec(
        &mut app,
        &format!(
            "INSERT INTO app.banners (image, ref_one, refs) VALUES ('{kept}', '{kept}', ARRAY['{kept}']::app.ref[])"
        ),
    )
    .await;
    // An update that does not name the guarded column still passes its guard (an application trigger may set it).
    exec(&mut app, "UPDATE app.banners SET tag = 'a'").await;
    // DDL of every kind the detector judges.
    exec(
        &mut app,
        "CREATE TABLE app.scratch (id int); ALTER TABLE app.scratch ADD COLUMN note varchar; DROP TABLE app.scratch;",
    )
    .await;
    exec(&mut app, "SELECT asset_sweeper.asset_sweeper_check_upload(gen_random_uuid(), 10)").await;
    exec(&mut app, "SELECT * FROM asset_sweeper.asset_sweeper_usage(gen_random_uuid())").await;
    // A migration window and a pin, the application's to write: the owner's code on the owner's path, and the
    // window's row and the pin's stamps are not the application's to change.
    exec(
        &mut app,
        "SELECT asset_sweeper.asset_sweeper_release_hold(
                    asset_sweeper.asset_sweeper_hold(now() + interval '1 hour', 'a hostile migration'))",
    )
    .await;
    exec(
        &mut app,
        &format!(
            "INSERT INTO asset_sweeper.asset_pins (asset_id, reason, ends_at) \
             VALUES ('{kept}', 'hostile', now() + interval '1 minute')"
        ),
    )
    .await;
    refused(&mut app, "UPDATE asset_sweeper.asset_pins SET pinned_by = 'alice'", "permission denied").await;
    refused(&mut app, "DELETE FROM asset_sweeper_private.destruction_holds", "permission denied").await;

    // Door 4: a held generation row. The application holds its DDL open; the owner's DDL in another session does
    // not wait for it (the detector only appends).
    let mut held = hostile.connect(&hostile.app).await;
    exec(&mut held, "BEGIN; CREATE TABLE app.held (id int);").await;
    let mut other = PgConnection::connect_with(&platform::db::session_options(
        hostile.ctx.db.url.parse::<PgConnectOptions>().expect("url"),
    ))
    .await
    .expect("another session");
    exec(
        &mut other,
        "SET lock_timeout = '2s'; CREATE TABLE app_private.unblocked (id int); DROP TABLE app_private.unblocked;",
    )
    .await;
    let mut second_app = hostile.connect(&hostile.app).await;
    exec(&mut second_app, "SET lock_timeout = '2s'; CREATE TABLE app.beside (id int); DROP TABLE app.beside;").await;
    exec(&mut held, "ROLLBACK").await;

    // Door 3: retention rules written to turn the sweep against data.
    exec(
        &mut app,
        "CREATE FUNCTION app.volatile_inside(t text) RETURNS boolean LANGUAGE sql VOLATILE AS $$ SELECT set_config('a.b', t, false) IS NOT NULL $$;
         CREATE FUNCTION app.stable_wrapper(t text) RETURNS boolean LANGUAGE sql STABLE AS $$ SELECT app.volatile_inside(t) $$;
         CREATE VIEW app.calls_volatile AS SELECT app.volatile_inside('x') AS yes;",
    )
    .await;
    let rule = |table: &str, filter: Option<&str>| {
        format!(
            "INSERT INTO asset_sweeper.retention_rules (table_name, timestamp_column, keep, filter) VALUES ('{table}', 'at', '30 days', {})",
            filter.map_or("NULL".to_owned(), |f| format!("$q${f}$q$"))
        )
    };
    refused(
        &mut app,
        &rule("app.sessions", Some("app.stable_wrapper(kind)")),
        "is not an immutable function of the system",
    )
    .await;
    refused(&mut app, &rule("app.sessions", Some("(SELECT yes FROM app.calls_volatile)")), "must be one condition")
        .await;
    // A view that calls a writing function, reached from EXISTS; a sequence advanced by the filter (issue: a
    // filter accepted at declaration that then fails, or writes, every night).
    refused(
        &mut app,
        &rule("app.sessions", Some("EXISTS (SELECT 1 FROM app.calls_volatile v WHERE v.yes)")),
        "must be one condition",
    )
    .await;
    exec(&mut app, "CREATE SEQUENCE app.filter_ticks").await;
    refused(&mut app, &rule("app.sessions", Some("nextval('app.filter_ticks') > 0")), "nextval").await;
    refused(&mut app, &rule("app.sessions", Some("set_config('search_path', 'app', false) IS NOT NULL")), "set_config")
        .await;
    refused(&mut app, &rule("app.sessions", Some("kind = 'guest' OR now() > at")), "now()").await;
    refused(&mut app, &rule("asset_sweeper_private.settlement_events", None), "permission denied for schema").await;
    refused(&mut app, &rule("app_private.audit", None), "may not delete from it").await;
    refused(
        &mut app,
        "INSERT INTO asset_sweeper.retention_rules (table_name, timestamp_column, keep, declared_by) VALUES ('app.sessions', 'at', '30 days', 'postgres')",
        "permission denied",
    )
    .await;
    exec(
        &mut app,
        "CREATE FUNCTION app.check_as_whoever(v text) RETURNS boolean LANGUAGE plpgsql AS $f$
         BEGIN PERFORM app.trip('app.check_as_whoever'); RETURN true; END $f$;
         CREATE DOMAIN app.checked AS text CHECK (app.check_as_whoever(VALUE));
         CREATE TABLE app.checked_rows (id int, at timestamptz NOT NULL DEFAULT now(), x app.checked);
         CREATE TABLE app.triggered (id int, at timestamptz NOT NULL);
         CREATE FUNCTION app.on_delete() RETURNS trigger LANGUAGE plpgsql AS $f$
         BEGIN PERFORM app.trip('app.on_delete'); RETURN OLD; END $f$;
         CREATE TRIGGER as_the_sweep BEFORE DELETE ON app.triggered FOR EACH ROW EXECUTE FUNCTION app.on_delete();",
    )
    .await;
    refused(
        &mut app,
        &rule("app.checked_rows", Some("checked_rows.id IS NULL OR '(1,2020-01-01,x)'::app.checked_rows IS NOT NULL")),
        "whose values it may not make",
    )
    .await;
    refused(&mut app, &rule("app.triggered", None), "has triggers or rules of its own").await;
    exec(&mut app, &rule("app.sessions", Some("kind = 'guest'"))).await;
    let function: String = sqlx::query_scalar("SELECT filter_function FROM asset_sweeper.retention_rules")
        .fetch_one(&mut app)
        .await
        .expect("the rule's function");
    refused(
        &mut app,
        &format!(
            "CREATE OR REPLACE FUNCTION {} (r app.sessions) RETURNS boolean LANGUAGE sql AS 'SELECT true'",
            function.split('(').next().unwrap_or_default()
        ),
        "permission denied",
    )
    .await;

    // Door 2: the sweeper's own sessions, as their own logins, with everything planted.
    let first = hostile.pass().await;
    assert_eq!(first["outcome"], "ok", "{first:#}");
    assert_eq!(first.get("superuser"), None, "the sweep's own login is no superuser: {first:#}");
    // The composite was read (its id found where no source is), through its output function.
    let card: Vec<Uuid> = sqlx::query_scalar(
        "SELECT f.asset_id FROM asset_sweeper_private.census_findings f
           JOIN pg_attribute a ON a.attrelid = f.relid AND a.attnum = f.attnum
          WHERE f.relid = 'app.banners'::regclass AND a.attname = 'card'",
    )
    .fetch_all(&hostile.owner)
    .await
    .expect("findings");
    assert_eq!(card, vec![kept], "the census read the composite: {first:#}");
    for column in ["ref_one", "refs"] {
        let found: Vec<Uuid> = sqlx::query_scalar(
            "SELECT f.asset_id FROM asset_sweeper_private.census_findings f
               JOIN pg_attribute a ON a.attrelid = f.relid AND a.attnum = f.attnum
              WHERE f.relid = 'app.banners'::regclass AND a.attname = $1",
        )
        .bind(column)
        .fetch_all(&hostile.owner)
        .await
        .expect("findings");
        assert_eq!(found, vec![kept], "the census read the domain over uuid in {column}: {first:#}");
    }
    assert_eq!(first["records"]["rules"][0]["deleted"], 20, "the legitimate rule ran as the sweep: {first:#}");
    let failed = hostile.settle().await;
    assert!(failed.is_empty(), "{failed:?}");
    // The abandoned upload was retired for its trial; a week on, the census having read everything since, it goes.
    integration_tests::fixtures::trial_over(&hostile.owner, gone).await;
    hostile.pass().await;
    let failed = hostile.settle().await;
    assert!(failed.is_empty(), "{failed:?}");
    // The operator's commands and the owner's guards install, on the sweeper's path.
    for (login, args) in [
        (&hostile.operator, &["plan"][..]),
        (&hostile.operator, &["status", "--json"][..]),
        (&hostile.operator, &["references"][..]),
        (&hostile.operator, &["hold", "list"][..]),
        (&hostile.operator, &["pin", "list"][..]),
    ] {
        let out = crate::cli::run(&hostile.url(login), Some(&hostile.ctx), args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("permission denied"), "{args:?} as the operator: {stderr}");
        assert!(!stderr.contains("does not exist"), "{args:?} as the operator: {stderr}");
    }
    let guards = crate::cli::run(&hostile.ctx.db.url, Some(&hostile.ctx), &["guards", "install"]);
    assert!(guards.status.success(), "guards install: {}", String::from_utf8_lossy(&guards.stderr));

    assert_eq!(hostile.tripped().await, Vec::<(String, String)>::new(), "a planted function ran as another role");
    assert_eq!(hostile.attributes().await, attributes, "a role's attributes changed");
    let owner = hostile.owner.clone();
    assert!(object_exists(&hostile.ctx.s3, &hostile.ctx.bucket, &kept_key).await, "a referenced upload lost its bytes");
    let kept_row: Option<String> = sqlx::query_scalar("SELECT state FROM assets WHERE id = $1")
        .bind(kept)
        .fetch_optional(&owner)
        .await
        .expect("kept");
    assert_eq!(kept_row.as_deref(), Some("attached"), "the referenced upload is kept");
    assert!(!object_exists(&hostile.ctx.s3, &hostile.ctx.bucket, &gone_key).await, "the abandoned upload is deleted");
    let gone_row: Option<String> = sqlx::query_scalar("SELECT state FROM assets WHERE id = $1")
        .bind(gone)
        .fetch_optional(&owner)
        .await
        .expect("gone");
    assert_eq!(gone_row, None);
    let (events, approvals): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM settlement_events),
                (SELECT count(*) FROM brake_approvals) + (SELECT count(*) FROM retention_rules WHERE approved_by IS NOT NULL)",
    )
    .fetch_one(&owner)
    .await
    .expect("records");
    assert!(events >= 2, "the audit trail holds the settles ({events})");
    assert_eq!(approvals, 0, "no approval was forged, of a workspace or of a rule");
    let (guests, members, audit): (i64, i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE kind = 'guest'), count(*) FILTER (WHERE kind = 'member'),
                (SELECT count(*) FROM app_private.audit) FROM app.sessions",
    )
    .fetch_one(&owner)
    .await
    .expect("the application's records");
    assert_eq!((guests, members, audit), (0, 20, 100), "the rule deleted its expired guests, nothing else");

    // A filter function altered behind the rule (by anyone who could: the owner) stops the rule by name; so does
    // a writer that lost its DELETE.
    exec(
        &mut app,
        "INSERT INTO app.sessions (at, kind) SELECT now() - interval '100 days', 'guest' FROM generate_series(1, 5)",
    )
    .await;
    let mut owner_conn = other;
    // The sweeper's own tables are refused by name, whoever writes the rule (here the owner, who may delete).
    refused(&mut owner_conn, &rule("asset_sweeper_private.settlement_events", None), "belongs to asset-sweeper").await;
    refused(&mut owner_conn, &rule("asset_sweeper.assets", None), "belongs to asset-sweeper").await;
    refused(&mut owner_conn, &rule("pg_catalog.pg_class", None), "belongs to the system").await;
    exec(&mut owner_conn, &format!("ALTER FUNCTION {function} SET work_mem = '64kB'")).await;
    let second = hostile.pass().await;
    let text = second.to_string();
    assert!(text.contains("was replaced, altered or dropped"), "{second:#}");
    let guests: i64 = sqlx::query_scalar("SELECT count(*) FROM app.sessions WHERE kind = 'guest'")
        .fetch_one(&owner)
        .await
        .expect("guests");
    assert_eq!(guests, 5, "a stopped rule deletes nothing");
    exec(&mut app, "UPDATE asset_sweeper.retention_rules SET filter = filter").await;
    exec(&mut owner_conn, &format!("REVOKE DELETE ON app.sessions FROM {}", hostile.app)).await;
    let third = hostile.pass().await;
    assert!(third.to_string().contains("may not delete from app.sessions"), "{third:#}");
    assert_eq!(hostile.tripped().await, Vec::<(String, String)>::new(), "a planted function ran as another role");
}

#[tokio::test]
async fn a_hostile_application_with_the_documented_grants_gains_nothing() {
    the_hostile_application_gains_nothing(false).await;
}

#[tokio::test]
async fn a_hostile_application_gains_nothing_on_postgres_14_defaults_where_anyone_may_create_in_public() {
    the_hostile_application_gains_nothing(true).await;
}

/// The rule (docs/security.md, "The rule") as far as the catalog shows it, which the suite above tries from outside:
/// every function that runs as the owner or in a trigger is pinned to `pg_catalog, pg_temp` (the writer's half of a
/// retention rule's check, which runs as the writer on purpose, aside); no function that runs as the owner takes or
/// returns a type the application could own or hand it (nothing polymorphic, no type but the system's and the
/// sweeper's), nor depends on a function, operator, cast or type outside `pg_catalog` and the sweeper's schema; no
/// trigger that fires on an application's table runs as the owner; and no function of the sweeper may be called by
/// `PUBLIC`. A function added later that breaks one fails here, whether or not a test reaches it.
#[tokio::test]
async fn every_definer_and_trigger_function_is_pinned_and_none_is_public() {
    let db = integration_tests::TestDatabase::new().await;
    // System types are those made before the first normal object id (16384); the sweeper's own live in its schema.
    let foreign_types: Vec<String> = sqlx::query_scalar(
        "SELECT p.oid::regprocedure::text || ': ' || t.oid::regtype::text FROM pg_proc p
           CROSS JOIN LATERAL unnest(p.proargtypes::oid[] || p.prorettype || coalesce(p.proallargtypes, '{}')) AS a(typ)
           JOIN pg_type t ON t.oid = a.typ
          WHERE p.pronamespace = 'asset_sweeper'::regnamespace AND p.prosecdef
            -- A result of none, a trigger's, or the rows of `RETURNS TABLE` (whose columns are among the arguments).
            AND (t.typtype = 'p' AND NOT (a.typ = p.prorettype AND t.oid IN ('void'::regtype, 'trigger'::regtype,
                                                                            'event_trigger'::regtype, 'record'::regtype)
                                          AND (t.oid <> 'record'::regtype OR p.proallargtypes IS NOT NULL))
                 OR (t.oid >= 16384 AND t.typnamespace <> 'asset_sweeper'::regnamespace))
          ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .expect("the definer functions' types");
    assert_eq!(foreign_types, Vec::<String>::new(), "definer functions taking a type the application could hand them");
    let reached: Vec<String> = sqlx::query_scalar(
        "SELECT p.oid::regprocedure::text || ' -> ' || pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid)
           FROM pg_proc p
           JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
          WHERE p.pronamespace = 'asset_sweeper'::regnamespace AND p.prosecdef
            AND d.refclassid IN ('pg_proc'::regclass, 'pg_operator'::regclass, 'pg_cast'::regclass, 'pg_type'::regclass)
            AND d.refobjid >= 16384
            AND NOT EXISTS (SELECT 1 FROM pg_proc f WHERE d.refclassid = 'pg_proc'::regclass AND f.oid = d.refobjid
                               AND f.pronamespace = 'asset_sweeper'::regnamespace)
            AND NOT EXISTS (SELECT 1 FROM pg_type t WHERE d.refclassid = 'pg_type'::regclass AND t.oid = d.refobjid
                               AND t.typnamespace = 'asset_sweeper'::regnamespace)
            AND NOT EXISTS (SELECT 1 FROM pg_operator o WHERE d.refclassid = 'pg_operator'::regclass
                               AND o.oid = d.refobjid AND o.oprnamespace = 'asset_sweeper'::regnamespace)
          ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .expect("what the definer functions depend on");
    assert_eq!(reached, Vec::<String>::new(), "definer functions reaching objects another role may own");
    let mut admin = PgConnection::connect(&db.url).await.expect("owner");
    exec(
        &mut admin,
        "CREATE TABLE public.pages (id serial PRIMARY KEY, hero asset_sweeper.asset_id);
         CREATE INDEX ON public.pages (hero);",
    )
    .await;
    let guards = crate::cli::run(&db.url, None, &["guards", "install"]);
    assert!(guards.status.success(), "guards install: {}", String::from_utf8_lossy(&guards.stderr));
    let owners_on_application_tables: Vec<String> = sqlx::query_scalar(
        "SELECT t.tgrelid::regclass::text || ' ' || t.tgname FROM pg_trigger t
           JOIN pg_class c ON c.oid = t.tgrelid
           JOIN pg_proc p ON p.oid = t.tgfoid
          WHERE c.relnamespace NOT IN ('asset_sweeper'::regnamespace, 'asset_sweeper_private'::regnamespace)
            AND p.prosecdef
          ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .expect("triggers");
    let guarded: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'public.pages'::regclass AND starts_with(tgname, 'asset_sweeper_guard_')",
    )
    .fetch_one(&db.pool)
    .await
    .expect("the guard");
    assert_eq!(guarded, 2, "the guard is in place (on insert and on update)");
    assert_eq!(
        owners_on_application_tables,
        Vec::<String>::new(),
        "triggers on the application's tables run as the owner"
    );
    let unpinned: Vec<String> = sqlx::query_scalar(
        "SELECT p.oid::regprocedure::text FROM pg_proc p
          WHERE p.pronamespace = 'asset_sweeper'::regnamespace
            AND (p.prosecdef OR p.prorettype IN ('trigger'::regtype, 'event_trigger'::regtype))
            AND p.proname <> 'asset_sweeper_retention_rule_writer'
            AND p.proconfig IS DISTINCT FROM ARRAY['search_path=pg_catalog, pg_temp']
          ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .expect("the functions");
    assert_eq!(unpinned, Vec::<String>::new(), "definer or trigger functions without the pinned path");
    let public: Vec<String> = sqlx::query_scalar(
        "SELECT p.oid::regprocedure::text FROM pg_proc p
          WHERE p.pronamespace = 'asset_sweeper'::regnamespace
            AND has_function_privilege('public', p.oid, 'EXECUTE')
          ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .expect("the functions");
    // Only the pure reader a composite source's index runs as any writer: no definer, it reads no table.
    assert_eq!(public, ["asset_sweeper_nested_ids(anyelement)"], "functions PUBLIC may call");
    let pure: bool = sqlx::query_scalar(
        "SELECT NOT prosecdef AND provolatile = 'i' FROM pg_proc
          WHERE oid = 'asset_sweeper.asset_sweeper_nested_ids(anyelement)'::regprocedure",
    )
    .fetch_one(&db.pool)
    .await
    .expect("the function");
    assert!(pure, "the function PUBLIC may call runs as its caller");
    let schema_public: bool = sqlx::query_scalar("SELECT has_schema_privilege('public', 'asset_sweeper', 'USAGE')")
        .fetch_one(&db.pool)
        .await
        .expect("schema privilege");
    assert!(!schema_public, "PUBLIC may use the sweeper's schema");
}

/// Each sweeper login, as an attacker holding it would: rewrite a definition file's digest (so the next release's
/// fix of that file is skipped as already applied), delete or forge a migration's row, delete the change detector's
/// rows or reset its count (so a settle takes a changed schema for the one its verdict saw). Each is refused; the
/// records stay readable, and the sweep's fold of the count, through its definer function, still works.
#[tokio::test]
async fn no_sweeper_login_can_rewrite_the_migrators_records_or_the_change_detectors_count() {
    let db = integration_tests::TestDatabase::new().await;
    let mut admin = PgConnection::connect(&db.url).await.expect("owner");
    exec(&mut admin, "CREATE TABLE app_table (id int); DROP TABLE app_table;").await;
    for group in ["asset_sweeper_sweep", "asset_sweeper_consumer", "asset_sweeper_operator"] {
        let login = format!("hostile_{}_{}", group.trim_start_matches("asset_sweeper_"), short_id());
        let password = Uuid::new_v4().simple().to_string();
        exec(&mut admin, &format!("CREATE ROLE {login} LOGIN PASSWORD '{password}'; GRANT {group} TO {login};")).await;
        let options: PgConnectOptions = admin_database_url().parse().expect("admin url");
        let mut conn = PgConnection::connect_with(&options.username(&login).password(&password).database(&db.name))
            .await
            .unwrap_or_else(|e| panic!("connect as {login}: {e}"));
        for attack in [
            "UPDATE asset_sweeper_private.asset_sweeper_definitions SET digest = 'stale' WHERE name = 'platform/sql/audit.sql'",
            "DELETE FROM asset_sweeper_private.asset_sweeper_definitions",
            "INSERT INTO asset_sweeper_private.asset_sweeper_definitions (name, digest) VALUES ('schema/sql/next.sql', 'x')",
            "DELETE FROM asset_sweeper_private.asset_sweeper_migrations
              WHERE version = (SELECT max(version) FROM asset_sweeper_private.asset_sweeper_migrations)",
            "INSERT INTO asset_sweeper_private.asset_sweeper_migrations (version, description, success, checksum, execution_time)
             VALUES (29991231000001, 'the next release', true, '\\x00', 0)",
            "DELETE FROM asset_sweeper_private.asset_sweeper_schema_changes",
            "UPDATE asset_sweeper_private.asset_sweeper_schema_state SET generation = 0",
        ] {
            refused(&mut conn, attack, "permission denied").await;
        }
        // No function reads them either: they are the migrator's alone.
        refused(&mut conn, "SELECT count(*) FROM asset_sweeper_private.asset_sweeper_definitions", "permission denied")
            .await;
        refused(&mut conn, "SELECT count(*) FROM asset_sweeper_private.asset_sweeper_migrations", "permission denied")
            .await;
        let before: i64 = sqlx::query_scalar("SELECT asset_sweeper.asset_sweeper_schema_generation()")
            .fetch_one(&mut conn)
            .await
            .expect("the generation");
        sqlx::query_scalar::<_, i64>("SELECT asset_sweeper.asset_sweeper_fold_schema_changes()")
            .fetch_one(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{login} folds the count: {e}"));
        let after: i64 = sqlx::query_scalar("SELECT asset_sweeper.asset_sweeper_schema_generation()")
            .fetch_one(&mut conn)
            .await
            .expect("the generation");
        assert_eq!(after, before, "{login}: a fold moves the count, never changes it");
        drop(conn);
        exec(&mut admin, &format!("DROP OWNED BY {login}; DROP ROLE {login};")).await;
    }
}

/// Before the first migrate, an application that may create schemas plants one of the sweeper's schemas (its
/// functions' or its tables'), or a migrations table of the sweeper's name with a trigger of its own. The migrate
/// refuses a schema another role owns, naming it,
/// and never takes the planted table for an older install of its own: nothing of the application's runs as the
/// migrating owner.
#[tokio::test]
async fn a_migrate_refuses_a_planted_schema_and_ignores_a_planted_migrations_table() {
    for plant in [Some("asset_sweeper"), Some("asset_sweeper_private"), None] {
        let db = integration_tests::TestDatabase::unmigrated().await;
        let login = format!("hostile_early_{}", short_id());
        let password = Uuid::new_v4().simple().to_string();
        let mut admin = PgConnection::connect(&db.url).await.expect("owner");
        exec(
            &mut admin,
            &format!(
                r#"CREATE ROLE {login} LOGIN PASSWORD '{password}'; GRANT CREATE ON DATABASE "{}" TO {login};"#,
                db.name
            ),
        )
        .await;
        let options: PgConnectOptions = admin_database_url().parse().expect("admin url");
        let mut app = PgConnection::connect_with(&options.username(&login).password(&password).database(&db.name))
            .await
            .expect("the application");
        if let Some(schema) = plant {
            exec(&mut app, &format!("CREATE SCHEMA {schema}")).await;
        } else {
            exec(
                &mut app,
                &format!(
                    "CREATE SCHEMA app;
                     CREATE FUNCTION app.promote() RETURNS trigger LANGUAGE plpgsql AS $f$
                     BEGIN
                         IF current_user::text OPERATOR(pg_catalog.<>) '{login}' THEN
                             EXECUTE 'ALTER ROLE {login} SUPERUSER';
                         END IF;
                         RETURN NEW;
                     END $f$;
                     CREATE TABLE app.asset_sweeper_migrations (version bigint PRIMARY KEY, description text NOT NULL,
                         installed_on timestamptz NOT NULL DEFAULT now(), success boolean NOT NULL,
                         checksum bytea NOT NULL, execution_time bigint NOT NULL);
                     CREATE TRIGGER promote BEFORE INSERT OR UPDATE ON app.asset_sweeper_migrations
                         FOR EACH ROW EXECUTE FUNCTION app.promote();"
                ),
            )
            .await;
        }
        let migrated = migrator::migrate(&db.pool).await;
        let superuser: bool = sqlx::query_scalar("SELECT rolsuper FROM pg_roles WHERE rolname = $1")
            .bind(&login)
            .fetch_one(&mut admin)
            .await
            .expect("the login");
        if let Some(schema) = plant {
            let refused = migrated.expect_err("a schema the application owns is refused");
            assert!(
                refused.to_string().contains(&format!("the schema {schema} (owned by hostile_early_")),
                "{refused}"
            );
        } else {
            migrated.expect("a fresh install beside the planted table");
            let owner: String = sqlx::query_scalar(
                "SELECT pg_get_userbyid(relowner)::text FROM pg_class WHERE oid = 'asset_sweeper_private.asset_sweeper_migrations'::regclass",
            )
            .fetch_one(&mut admin)
            .await
            .expect("the migrations table");
            assert_ne!(owner, login, "the planted table was taken for the sweeper's");
        }
        assert!(!superuser, "the application's trigger ran as the migrating owner");
        drop(app);
        exec(&mut admin, &format!("DROP OWNED BY {login} CASCADE")).await;
        drop(admin);
        drop(db);
        let mut cluster = PgConnection::connect(&admin_database_url()).await.expect("admin");
        let _ = sqlx::raw_sql(AssertSqlSafe(format!("DROP ROLE IF EXISTS {login}"))).execute(&mut cluster).await;
    }
}

/// No proof covers a value nobody read. An end user writes a comment too large to read within the census's batch
/// limit, and another writes, in the same block, a link to an upload they never attached. A pass's census share runs
/// out while that block is read value by value (here every time: a share of a fifth of a second against a limit of a
/// quarter). Before, every value of the block left untried was recorded unread with nothing read, the column was
/// proven anyway, and the upload was deleted: S3 answered 404 for a file a record names. Now the values left untried
/// are read before the column is proven, and the link holds the upload.
#[tokio::test]
async fn a_census_share_that_runs_out_inside_a_block_proves_nothing_over_the_values_it_left_untried() {
    use platform::step::{Share, Step};
    // A failpoint of another test (`census::advance`) would fail this one's census.
    let _turn = integration_tests::FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let upload_key = crate::pipeline::key(ws);
    let upload = integration_tests::fixtures::seed(&ctx, ws, "abandoned", "8 days", &upload_key).await;
    crate::findings::long_texts(&ctx, "comments", "body").await;
    // Past the rows the schema check samples: a comment of 96 MB, and right after it the link.
    sqlx::query(
        "INSERT INTO comments (body)
         SELECT CASE WHEN g = 1000 THEN repeat('and on and on and on. ', 4500000)
                     WHEN g = 1001 THEN 'my picture: https://cdn.example.com/i/' || $1::text || '.jpg'
                     ELSE 'a fine product, I would buy it again ' || g END
           FROM generate_series(1, 2000) g",
    )
    .bind(upload)
    .execute(ctx.pool())
    .await
    .expect("the comments");
    let same_block: bool =
        sqlx::query_scalar("SELECT count(DISTINCT (ctid::text::point)[0]) = 1 FROM comments WHERE id IN (1000, 1001)")
            .fetch_one(ctx.pool())
            .await
            .expect("blocks");
    assert!(same_block, "the link shares the large comment's block");

    let census = schema::census::Census {
        max_batches: u32::MAX,
        batch_blocks: 1,
        batch_timeout: Duration::from_millis(250),
        cycle_interval: Duration::ZERO,
        readers: 2,
        layout: None,
        replica: None,
    };
    let mut left_untried = 0i64;
    let mut proven = false;
    for _ in 0..300 {
        let share = Share::of(100, Instant::now() + Duration::from_millis(200));
        let progress = census.advance(ctx.pool(), share).await.expect("the census");
        let untried: i64 = sqlx::query_scalar("SELECT count(*) FROM census_unread WHERE untried")
            .fetch_one(ctx.pool())
            .await
            .expect("untried");
        if untried > 0 && left_untried == 0 {
            let status = crate::cli::run(&ctx.db.url, Some(&ctx), &["status"]);
            let status = String::from_utf8(status.stdout).expect("utf-8");
            assert!(status.contains("public.comments.body row (") && status.contains("not tried yet"), "{status}");
        }
        left_untried = left_untried.max(untried);
        if progress.columns_unproven == 0 {
            proven = true;
            break;
        }
    }
    assert!(proven, "each pass reads at least one value it left untried, so the column is proven in the end");
    let found: Option<String> = sqlx::query_scalar(
        "SELECT format('%s.%s', c.table_name, c.column_name) FROM census_findings f
           JOIN census_columns c ON c.relid = f.relid AND c.attnum = f.attnum WHERE f.asset_id = $1",
    )
    .bind(upload)
    .fetch_optional(ctx.pool())
    .await
    .expect("findings");
    assert_eq!(found.as_deref(), Some("comments.body"), "the link was read before the column was proven");
    assert!(left_untried > 1, "a share ran out inside the block, leaving values untried ({left_untried})");

    // A real pass and its settles: the upload the link names keeps its bytes.
    crate::pipeline::pass(&ctx, &[("CENSUS_BATCH_TIMEOUT", "250ms"), ("DISCOVERY_ENABLED", "false")]).await;
    crate::pipeline::settle_queue(&ctx).await;
    assert_eq!(integration_tests::fixtures::state(&ctx, upload).await.as_deref(), Some("retired"));
    assert!(object_exists(&ctx.s3, &ctx.bucket, &upload_key).await, "a file a record names keeps its bytes");
}

/// An application that keeps re-declaring its migration window holds every delete and purge for ever, each window
/// within its week, none ever released. It is shown, not silent: the window's line says since when deletes have
/// been held without a break and who declared it, each pass reports it as `DeletesHeldSeconds`, past the stack's
/// `DeletesHeldAlarm` threshold (`HeldAlarmSeconds`, 3 days), and the count is back to 0 once the window is
/// released.
#[tokio::test]
async fn an_application_that_redeclares_its_hold_for_ever_is_shown_and_alarmed() {
    let ctx = TestContext::new().await;
    let login = format!("hostile_app_{}", short_id());
    let password = Uuid::new_v4().simple().to_string();
    let mut admin = PgConnection::connect(&ctx.db.url).await.expect("owner");
    exec(
        &mut admin,
        &format!("CREATE ROLE {login} LOGIN PASSWORD '{password}'; GRANT asset_sweeper_application TO {login};"),
    )
    .await;
    // Its windows of the last four days, each declared a day after the one before and outliving it by an hour.
    sqlx::query(
        "INSERT INTO asset_sweeper_private.destruction_holds (reason, declared_by, declared_at, ends_at)
         SELECT 'nightly reindex', $1, now() - make_interval(days => d), now() - make_interval(days => d - 1)
                                                                          + interval '1 hour'
           FROM generate_series(4, 1, -1) d",
    )
    .bind(&login)
    .execute(&mut admin)
    .await
    .expect("the windows of the last days");
    let options: PgConnectOptions = admin_database_url().parse().expect("admin url");
    let mut app = PgConnection::connect_with(&options.username(&login).password(&password).database(&ctx.db.name))
        .await
        .expect("the application's login");
    // Today's, declared before yesterday's ends.
    let today: i64 =
        sqlx::query_scalar("SELECT asset_sweeper.asset_sweeper_hold(now() + interval '1 day', 'nightly reindex')")
            .fetch_one(&mut app)
            .await
            .expect("declared");

    let held = crate::pipeline::pass(&ctx, &[]).await;
    let Some(window @ lifecycle::holds::Window::Declared { declared_by, held_since, .. }) = &held.window else {
        panic!("a declared window holds: {:?}", held.window)
    };
    assert_eq!(declared_by, &login);
    let since = (chrono::Utc::now() - *held_since).num_minutes();
    assert!((4 * 24 * 60 - 5..=4 * 24 * 60 + 5).contains(&since), "held since {held_since}: {since} minutes ago");
    let line: Value = serde_json::from_str(&sweep_lambda::record::metrics_line(&held)).expect("the metrics line");
    let seconds = line["DeletesHeldSeconds"].as_f64().expect("DeletesHeldSeconds");
    assert!(seconds > 259_200.0, "past the alarm's default threshold: {seconds}");
    let status = crate::cli::run(&ctx.db.url, Some(&ctx), &["status"]);
    let status = String::from_utf8(status.stdout).expect("utf-8");
    assert!(
        status.contains(&format!("declared by {login} (nightly reindex)"))
            && status
                .contains(&format!("held since {}", held_since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)))
            && status.contains("4days"),
        "{status}"
    );
    assert!(window.describe().contains("without a break"), "{}", window.describe());

    // Its windows released (yesterday's is open an hour more), the next pass reports nothing held, and the alarm
    // clears.
    let open: Vec<i64> = sqlx::query_scalar(
        "SELECT id FROM asset_sweeper_private.destruction_holds WHERE released_at IS NULL AND ends_at > now() ORDER BY id",
    )
    .fetch_all(&mut admin)
    .await
    .expect("open windows");
    assert_eq!(open.len(), 2, "yesterday's and today's: {open:?}");
    assert!(open.contains(&today));
    for id in open {
        let released: bool = sqlx::query_scalar("SELECT asset_sweeper.asset_sweeper_release_hold($1)")
            .bind(id)
            .fetch_one(&mut app)
            .await
            .expect("released");
        assert!(released, "{id}");
    }
    let free = crate::pipeline::pass(&ctx, &[]).await;
    assert!(free.window.is_none(), "{:?}", free.window);
    let line: Value = serde_json::from_str(&sweep_lambda::record::metrics_line(&free)).expect("the metrics line");
    assert_eq!(line["DeletesHeldSeconds"].as_f64(), Some(0.0));
    drop(app);
    exec(&mut admin, &format!("DROP OWNED BY {login}; DROP ROLE {login};")).await;
}

/// Issue: an application's open transaction stalled every writer of `assets`. Postgres takes a relation's lock
/// before it checks whether the role may touch the relation at all (CREATE TRIGGER, CREATE RULE, a foreign key's
/// REFERENCES), so with one upload left open and a `CREATE TRIGGER … ON asset_sweeper.assets` queued behind it, the
/// sweeper's next write to `assets` queued behind that, and every workspace's uploads with it. The application tries
/// it again, by every name it has: the sweeper's tables are in a schema it cannot name, what it names are views, and
/// a view's lock reaches its table only in the modes the view's owner holds (a write's, never an exclusive one). A
/// pass and a settle run while its DDL waits; the settle deletes an abandoned upload (a write to both tables).
#[tokio::test]
async fn an_applications_queued_lock_stalls_no_write_of_the_sweeper() {
    let hostile = Hostile::new(false).await;
    let mut app = hostile.connect(&hostile.app).await;
    let (abandoned, key) = hostile.upload(&mut app, 40).await;

    // What it may hold: a write of its own, left open. An upload, as the contract has it.
    let mut open = hostile.connect(&hostile.app).await;
    exec(&mut open, "BEGIN").await;
    hostile.upload(&mut open, 0).await;

    // What it cannot even name: the tables. Each is refused at once, though the open upload holds a lock every one
    // of these statements would have to wait for.
    exec(&mut app, "CREATE FUNCTION app.nothing() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NULL; END'").await;
    for attack in [
        "CREATE TRIGGER stall AFTER INSERT ON asset_sweeper_private.assets FOR EACH ROW EXECUTE FUNCTION app.nothing()",
        "CREATE RULE stall AS ON INSERT TO asset_sweeper_private.stored_objects DO ALSO NOTHING",
        "ALTER TABLE app.banners ADD COLUMN hero uuid REFERENCES asset_sweeper_private.assets (id)",
    ] {
        refused(&mut app, attack, "permission denied for schema asset_sweeper_private").await;
    }
    for (attack, why) in [
        ("LOCK TABLE asset_sweeper_private.assets IN ACCESS EXCLUSIVE MODE", "permission denied for schema"),
        // A view's lock in a mode only a whole table's UPDATE or DELETE allows reaches its table as the view's
        // owner, which holds neither: refused, though the application may delete its declarations through it.
        (
            "LOCK TABLE asset_sweeper.asset_reference_sources IN ACCESS EXCLUSIVE MODE",
            "permission denied for table asset_reference_sources",
        ),
    ] {
        exec(&mut app, "BEGIN").await;
        refused(&mut app, attack, why).await;
        exec(&mut app, "ROLLBACK").await;
    }

    // What it can name: the views. Its DDL on them queues behind its own open upload, as on any table of its own.
    let mut queued = Vec::new();
    for (attack, why) in [
        (
            "CREATE TRIGGER stall INSTEAD OF INSERT ON asset_sweeper.assets FOR EACH ROW EXECUTE FUNCTION app.nothing()",
            "permission denied for view assets",
        ),
        (
            "CREATE RULE stall AS ON INSERT TO asset_sweeper.stored_objects DO INSTEAD NOTHING",
            "must be owner of view stored_objects",
        ),
    ] {
        let mut conn = hostile.connect(&hostile.app).await;
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut conn).await.expect("pid");
        let task = tokio::spawn(async move {
            let result = sqlx::raw_sql(AssertSqlSafe(attack)).execute(&mut conn).await.map(|_| ());
            (attack, why, result)
        });
        queued.push((pid, task));
    }
    let waiting = |pids: Vec<i32>| {
        let owner = hostile.owner.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM pg_locks WHERE pid = ANY ($1) AND NOT granted AND locktype = 'relation'",
            )
            .bind(pids)
            .fetch_one(&owner)
            .await
            .expect("pg_locks")
        }
    };
    let pids: Vec<i32> = queued.iter().map(|(pid, _)| *pid).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while waiting(pids.clone()).await < 2 {
        assert!(Instant::now() < deadline, "the application's DDL never queued behind its open upload");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The sweeper's writes while both wait: a pass claims the abandoned upload and a settle retires it; a week
    // on, the next deletes its row and bytes.
    let report = hostile.pass().await;
    assert_eq!(report["claimed"], 1, "{report:#}");
    assert_eq!(hostile.settle().await, Vec::<String>::new(), "no settle failed (a lock timeout would)");
    assert_eq!(integration_tests::fixtures::state(&hostile.ctx, abandoned).await.as_deref(), Some("retired"));
    integration_tests::fixtures::trial_over(&hostile.owner, abandoned).await;
    let report = hostile.pass().await;
    assert_eq!(report["claimed"], 1, "{report:#}");
    assert_eq!(hostile.settle().await, Vec::<String>::new(), "no settle failed (a lock timeout would)");
    let row: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM asset_sweeper_private.assets WHERE id = $1)")
        .bind(abandoned)
        .fetch_one(&hostile.owner)
        .await
        .expect("the row");
    assert!(!row, "the abandoned upload was settled");
    assert!(!object_exists(&hostile.ctx.s3, &hostile.ctx.bucket, &key).await, "and its bytes deleted");
    assert_eq!(waiting(pids).await, 2, "the application's DDL was queued all along");

    // Its upload ends; its DDL gets its lock, and is refused for what it is.
    exec(&mut open, "COMMIT").await;
    for (_, task) in queued {
        let (attack, why, result) = task.await.expect("the attack's task");
        let error = result.expect_err(attack).to_string();
        assert!(error.contains(why), "{attack}: {error}");
    }

    // What makes it so, from the catalog: the application's group and login can name no table of the sweeper's,
    // and hold nothing on one; the views' owner holds no privilege that lets a lock of a view reach its table in
    // an exclusive mode.
    let reach: Vec<String> = sqlx::query_scalar(
        "SELECT format('%s: %s %s', r.rolname, c.relname, p.p) FROM pg_roles r
           CROSS JOIN pg_class c
           CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) p(p)
          WHERE r.rolname IN ('asset_sweeper_application', $1) AND c.relnamespace = 'asset_sweeper_private'::regnamespace
            AND c.relkind IN ('r', 'p') AND has_table_privilege(r.oid, c.oid, p.p)
         UNION ALL
         SELECT format('%s: USAGE on asset_sweeper_private', r.rolname) FROM pg_roles r
          WHERE r.rolname IN ('asset_sweeper_application', $1)
            AND has_schema_privilege(r.oid, 'asset_sweeper_private', 'USAGE')
         UNION ALL
         SELECT format('asset_sweeper_contract: %s %s', c.relname, p.p) FROM pg_class c
           CROSS JOIN unnest(ARRAY['UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) p(p)
          WHERE c.relnamespace = 'asset_sweeper_private'::regnamespace AND c.relkind IN ('r', 'p')
            AND has_table_privilege('asset_sweeper_contract', c.oid, p.p)
         UNION ALL
         SELECT format('%s is owned by %s', c.oid::regclass, pg_get_userbyid(c.relowner)) FROM pg_class c
          WHERE c.relnamespace = 'asset_sweeper'::regnamespace AND c.relkind = 'v'
            AND pg_get_userbyid(c.relowner) <> 'asset_sweeper_contract'",
    )
    .bind(&hostile.app)
    .fetch_all(&hostile.owner)
    .await
    .expect("the catalog");
    assert_eq!(reach, Vec::<String>::new());
}

/// Issue: the reference guard ran as the owner and turned the guarded column into JSON without checking its type.
/// The application owns its table: it retypes the guarded column to an enum of its own with a cast to `json` that
/// trips the wire (and tries to make it a superuser), then writes a row. Postgres now refuses the retype while the
/// guard is in place (its conditions name the column); a guard an older release installed, which names none, lets
/// it through, and the guard then runs as the writer: the cast never runs as anyone but the application.
#[tokio::test]
async fn a_guarded_column_retyped_to_the_applications_type_with_its_own_cast_runs_nothing_as_the_owner() {
    let hostile = Hostile::new(false).await;
    let attributes = hostile.attributes().await;
    let mut app = hostile.connect(&hostile.app).await;
    let (kept, _) = hostile.upload(&mut app, 40).await;
    exec(&mut app, &format!("INSERT INTO app.banners (image) VALUES ('{kept}')")).await;
    exec(
        &mut app,
        "CREATE TYPE app.mood AS ENUM ('sunny');
         CREATE FUNCTION app.mood_json(app.mood) RETURNS json LANGUAGE plpgsql AS $f$
         BEGIN PERFORM app.trip('cast of app.mood to json'); RETURN to_json(gen_random_uuid()::text); END $f$;
         CREATE CAST (app.mood AS json) WITH FUNCTION app.mood_json(app.mood);
         CREATE FUNCTION app.mood_jsonb(app.mood) RETURNS jsonb LANGUAGE plpgsql AS $f$
         BEGIN PERFORM app.trip('cast of app.mood to jsonb'); RETURN to_jsonb(gen_random_uuid()::text); END $f$;
         CREATE CAST (app.mood AS jsonb) WITH FUNCTION app.mood_jsonb(app.mood);",
    )
    .await;
    let retype = "ALTER TABLE app.banners ALTER COLUMN image TYPE app.mood USING 'sunny'";
    refused(&mut app, retype, "cannot alter type of a column used in a trigger definition").await;
    // The guard as a release before the conditions installed it: one trigger on insert and update, no condition.
    let (trigger, args): (String, String) = sqlx::query_as(
        "SELECT tgname::text, pg_get_triggerdef(oid) FROM pg_trigger
          WHERE tgrelid = 'app.banners'::regclass AND tgname LIKE 'asset\\_sweeper\\_guard\\_%' AND (tgtype & 4) <> 0",
    )
    .fetch_one(&hostile.owner)
    .await
    .expect("the insert guard");
    let call = &args[args.find("EXECUTE FUNCTION ").expect("its function")..];
    let args = format!("asset_sweeper_guard{}", &call[call.find('(').expect("its arguments")..]);
    let mut owner = hostile.owner.acquire().await.expect("the owner");
    exec(
        &mut owner,
        &format!(
            "DROP TRIGGER {trigger}_update ON app.banners;
             CREATE OR REPLACE TRIGGER {trigger} AFTER INSERT OR UPDATE ON app.banners FOR EACH ROW
                 EXECUTE FUNCTION asset_sweeper.{args};"
        ),
    )
    .await;
    exec(&mut app, retype).await;
    // The application's next writes, each of which fires the guard still on the column.
    exec(&mut app, "INSERT INTO app.banners (image) VALUES ('sunny'); UPDATE app.banners SET image = 'sunny';").await;
    assert_eq!(hostile.tripped().await, Vec::<(String, String)>::new(), "the application's cast ran as another role");
    assert_eq!(hostile.attributes().await, attributes, "a role changed");
    // The guard's privileged half takes nothing of the application's: called directly, with an id of a removed
    // asset it fails naming it, and it writes nothing but what only keeps.
    let signature: String = sqlx::query_scalar(
        "SELECT pg_get_function_identity_arguments('asset_sweeper.asset_sweeper_guard_refers'::regproc)",
    )
    .fetch_one(&hostile.owner)
    .await
    .expect("the guard's privileged half");
    assert_eq!(signature, "table_schema text, table_name text, column_name text, ids uuid[], spelled text[], key text");
    let definer: bool =
        sqlx::query_scalar("SELECT prosecdef FROM pg_proc WHERE oid = 'asset_sweeper.asset_sweeper_guard'::regproc")
            .fetch_one(&hostile.owner)
            .await
            .expect("the guard");
    assert!(!definer, "the guard's trigger function runs as the writer");
}

/// Issue: the census chose a column's reading when it planned and built `col::text` into a later statement. The
/// application held its table's lock until the sweep's reading queued behind it, retyped the column to an enum of
/// its own with a cast to text that trips the wire, and committed: the statement resolved `::text` to the
/// application's cast, run as the sweep's login. Tried twice: on a whole pass (whose schema check's sample reads
/// first) and on the census alone (its batch reads first). Now every reading statement first locks the table and
/// confirms the type inside its transaction; the retyped column is not read, and the pass goes on.
#[tokio::test]
async fn a_column_retyped_while_the_sweeps_reading_waits_for_its_table_runs_nothing_of_the_applications() {
    use platform::step::{Share, Step};
    let hostile = Hostile::new(false).await;
    let attributes = hostile.attributes().await;
    let mut app = hostile.connect(&hostile.app).await;
    exec(
        &mut app,
        "CREATE TABLE app.notes (id serial PRIMARY KEY, body text);
         INSERT INTO app.notes (body) SELECT 'note ' || i FROM generate_series(1, 50) i;
         CREATE TABLE app.drafts (id serial PRIMARY KEY, body text);
         INSERT INTO app.drafts (body) SELECT 'draft ' || i FROM generate_series(1, 50) i;
         CREATE TYPE app.mood AS ENUM ('sunny');
         CREATE FUNCTION app.mood_text(app.mood) RETURNS text LANGUAGE plpgsql AS $f$
         BEGIN PERFORM app.trip('cast of app.mood to text'); RETURN 'sunny'; END $f$;
         CREATE CAST (app.mood AS text) WITH FUNCTION app.mood_text(app.mood);",
    )
    .await;
    let sweep = hostile.pool(&hostile.sweep);
    let retyped =
        |table: &str| format!("ALTER TABLE app.{table} ALTER COLUMN body TYPE app.mood USING 'sunny'; COMMIT");

    // A whole pass: the lock is taken before the pass begins (so nothing it does before reading the table waits),
    // the retype made once the pass's reading waits for it.
    let mut attacker = hostile.connect(&hostile.app).await;
    exec(&mut attacker, "BEGIN; LOCK TABLE app.notes IN ACCESS EXCLUSIVE MODE").await;
    let pass = {
        let url = hostile.url(&hostile.sweep);
        let settings = hostile.ctx.settings(&[("DATABASE_URL", &url)]);
        let sweeper =
            Sweeper::new(sweep.clone(), hostile.ctx.sqs.clone(), settings).with_storage(hostile.ctx.s3.clone());
        tokio::spawn(async move { sweeper.run_pass(Instant::now() + Duration::from_secs(600)).await })
    };
    crate::pipeline::until_a_session_waits(&hostile.owner, "Lock", "%", "the sweep reads app.notes").await;
    exec(&mut attacker, &retyped("notes")).await;
    pass.await.expect("the pass ran").expect("the pass ends well");
    assert_eq!(hostile.tripped().await, Vec::<(String, String)>::new(), "the application's cast ran as the sweep");

    // The census alone, its column planned as text.
    exec(&mut attacker, "BEGIN; LOCK TABLE app.drafts IN ACCESS EXCLUSIVE MODE").await;
    let census = tokio::spawn(async move {
        let census = schema::census::Census {
            max_batches: u32::MAX,
            batch_blocks: 1000,
            batch_timeout: Duration::from_secs(20),
            cycle_interval: Duration::ZERO,
            readers: 2,
            layout: None,
            replica: None,
        };
        census.advance(&sweep, Share::of(100, Instant::now() + Duration::from_secs(60))).await
    });
    crate::pipeline::until_a_session_waits(&hostile.owner, "Lock", "%", "the census reads app.drafts").await;
    exec(&mut attacker, &retyped("drafts")).await;
    census.await.expect("the census ran").expect("the census ends well");
    assert_eq!(hostile.tripped().await, Vec::<(String, String)>::new(), "the application's cast ran as the sweep");
    assert_eq!(hostile.attributes().await, attributes, "a role changed");
    // The batch read nothing and recorded nothing: the column is not counted as read in this cycle.
    let read_this_cycle: bool = sqlx::query_scalar(
        "SELECT c.done_cycle >= s.cycle FROM census_columns c CROSS JOIN census_state s
          WHERE c.table_name = 'drafts' AND c.column_name = 'body'",
    )
    .fetch_one(&hostile.owner)
    .await
    .expect("the census's record");
    assert!(!read_this_cycle, "a column nobody read was counted as read");
    // The next pass plans the column for its new type (an enum cannot spell an id: it is no longer read).
    hostile.pass().await;
    assert_eq!(hostile.tripped().await, Vec::<(String, String)>::new(), "the application's cast ran as the sweep");
}

/// Issue: every sweeper login could write every table of the sweeper's (the operator's rewrote a definition file's
/// digest, the sweep's deleted a row). Each role now has exactly the statements its function issues, table by table,
/// as docs/security.md lists them: this reads the grants from the catalog and compares them with that table, so a
/// grant added or a table created without its row there fails here. The sequences' grants are the one the prose
/// names, and the application's views grant these roles nothing (their statements name the tables).
#[tokio::test]
async fn every_sweeper_role_has_exactly_the_grants_security_md_lists() {
    const ROLES: [&str; 3] = ["asset_sweeper_sweep", "asset_sweeper_consumer", "asset_sweeper_operator"];
    let db = integration_tests::TestDatabase::new().await;
    let doc = include_str!("../../docs/security.md");
    let section = doc
        .split("### The sweeper's own roles, table by table")
        .nth(1)
        .expect("security.md's section on the sweeper's roles, table by table");
    let mut documented = std::collections::BTreeMap::new();
    for row in section.lines().skip_while(|l| !l.starts_with("| table |")).skip(2).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.trim_matches('|').split(" | ").map(str::trim).collect();
        assert_eq!(cells.len(), 4, "a row of a table and three roles: {row}");
        let grants: Vec<String> = cells[1..].iter().map(|c| canonical_grants(c)).collect();
        documented.insert(cells[0].trim_matches('`').to_owned(), grants);
    }
    let rows: Vec<(String, String, String, Option<String>)> = sqlx::query_as(
        "WITH t AS (SELECT c.oid, c.relname::text AS name, c.relacl FROM pg_class c
                     WHERE c.relnamespace = 'asset_sweeper_private'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f'))
         SELECT t.name, a.grantee::regrole::text, a.privilege_type, NULL::text
           FROM t CROSS JOIN LATERAL aclexplode(t.relacl) a
          WHERE a.grantee::regrole::text = ANY ($1)
         UNION ALL
         SELECT t.name, a.grantee::regrole::text, a.privilege_type, att.attname::text
           FROM t JOIN pg_attribute att ON att.attrelid = t.oid AND att.attnum > 0 AND NOT att.attisdropped
           CROSS JOIN LATERAL aclexplode(att.attacl) a
          WHERE a.grantee::regrole::text = ANY ($1)
         UNION ALL
         SELECT t.name, r, '', NULL FROM t CROSS JOIN unnest($1::text[]) r",
    )
    .bind(ROLES)
    .fetch_all(&db.pool)
    .await
    .expect("the grants");
    // Table → role → privilege → its columns (empty: the whole table).
    let mut granted: std::collections::BTreeMap<String, [std::collections::BTreeMap<String, Vec<String>>; 3]> =
        std::collections::BTreeMap::new();
    for (table, role, privilege, column) in rows {
        let at = ROLES.iter().position(|r| *r == role).expect("one of the roles");
        let privileges = &mut granted.entry(table).or_default()[at];
        if privilege.is_empty() {
            continue;
        }
        let columns = privileges.entry(privilege).or_default();
        columns.extend(column);
    }
    let catalog: std::collections::BTreeMap<String, Vec<String>> = granted
        .into_iter()
        .map(|(table, roles)| {
            let grants = roles
                .iter()
                .map(|privileges| {
                    let items: Vec<String> = privileges
                        .iter()
                        .map(
                            |(p, columns)| {
                                if columns.is_empty() { p.clone() } else { format!("{p} ({})", columns.join(", ")) }
                            },
                        )
                        .collect();
                    canonical_grants(&items.join(", "))
                })
                .collect();
            (table, grants)
        })
        .collect();
    assert_eq!(
        catalog, documented,
        "the grants (left) and docs/security.md's table (right), as [sweep, consumer, operator]"
    );

    let sequences: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT c.relname::text, a.grantee::regrole::text, a.privilege_type FROM pg_class c
           CROSS JOIN LATERAL aclexplode(c.relacl) a
          WHERE c.relnamespace IN ('asset_sweeper'::regnamespace, 'asset_sweeper_private'::regnamespace)
            AND c.relkind IN ('S', 'v') AND a.grantee::regrole::text = ANY ($1)
          ORDER BY 1, 2, 3",
    )
    .bind(ROLES)
    .fetch_all(&db.pool)
    .await
    .expect("the sequences' grants");
    let usage = |role: &str| ("reconcile_listings_id_seq".to_owned(), role.to_owned(), "USAGE".to_owned());
    assert_eq!(sequences, vec![usage("asset_sweeper_operator"), usage("asset_sweeper_sweep")]);
}

/// A cell of grants in one spelling: `–` for none, privileges in the order `GRANT` lists them, a privilege's columns
/// sorted.
fn canonical_grants(cell: &str) -> String {
    const ORDER: [&str; 7] = ["SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER"];
    if cell == "–" || cell.is_empty() {
        return "–".to_owned();
    }
    let mut items: Vec<(usize, String)> = Vec::new();
    let mut rest = cell;
    while !rest.is_empty() {
        let end = match (rest.find(','), rest.find('(')) {
            (Some(comma), Some(paren)) if paren < comma => rest.find(')').map_or(rest.len(), |close| close + 1),
            (Some(comma), _) => comma,
            (None, _) => rest.len(),
        };
        let item = rest[..end].trim();
        rest = rest[end..].trim_start_matches([',', ' ']);
        let (privilege, columns) = match item.split_once(" (") {
            Some((p, columns)) => {
                let mut columns: Vec<&str> = columns.trim_end_matches(')').split(", ").collect();
                columns.sort_unstable();
                (p, format!(" ({})", columns.join(", ")))
            }
            None => (item, String::new()),
        };
        let at = ORDER.iter().position(|p| *p == privilege).unwrap_or_else(|| panic!("a privilege: {item:?}"));
        items.push((at, format!("{privilege}{columns}")));
    }
    items.sort();
    items.into_iter().map(|(_, item)| item).collect::<Vec<_>>().join(", ")
}

/// An operator's login does an operator's work with exactly the grants security.md lists: it approves a retention
/// rule (which needs its approval's counts: a grant that once lacked them refused it), pins and releases, declares
/// and releases a window, and runs every command that only shows, each of which records nothing (the schema check
/// runs read-only, so the findings its sample sees are the sweep's to write).
#[tokio::test]
async fn an_operators_login_runs_the_operators_commands_with_exactly_its_grants() {
    let hostile = Hostile::new(false).await;
    let mut app = hostile.connect(&hostile.app).await;
    exec(
        &mut app,
        "INSERT INTO asset_sweeper.retention_rules (table_name, timestamp_column, keep, filter)
         VALUES ('app.sessions', 'at', '30 days', 'kind = ''guest''')",
    )
    .await;
    let (asset, _) = hostile.upload(&mut app, 40).await;
    // An id in a column no source declares, which the schema check's sample sees.
    exec(
        &mut app,
        &format!(
            "CREATE TABLE app.notes (id serial PRIMARY KEY, body text); INSERT INTO app.notes (body) VALUES ('{asset}')"
        ),
    )
    .await;
    let first = hostile.pass().await;
    assert_eq!(first["outcome"], "ok", "{first:#}");
    let rule: i64 =
        sqlx::query_scalar("SELECT id FROM retention_rules").fetch_one(&hostile.owner).await.expect("the rule");
    let findings = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM census_findings")
            .fetch_one(&hostile.owner)
            .await
            .expect("findings")
    };
    sqlx::query("DELETE FROM census_findings").execute(&hostile.owner).await.expect("no findings yet");

    let operator = hostile.url(&hostile.operator);
    let run = |args: &[&str]| {
        let out = crate::cli::run(&operator, Some(&hostile.ctx), args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!stderr.contains("permission denied"), "{args:?} as the operator: {stderr}");
        assert!(out.status.success(), "{args:?} as the operator: {stderr}");
        serde_json::from_slice::<Value>(&out.stdout).unwrap_or(Value::Null)
    };
    let rule = rule.to_string();
    let asset = asset.to_string();
    for args in [
        &["status", "--json"][..],
        &["references", "--json"],
        &["explain", &asset, "--json"],
        &["plan", "--json"],
        &["usage", "--json"],
        &["redrive", "--dry-run", "--json"],
    ] {
        run(args);
    }
    assert_eq!(findings().await, 0, "a command that only shows recorded a finding");
    run(&["approve", "--rule", &rule, "--by", "alice", "--reason", "the purge of guest sessions", "--json"]);
    let approved: Option<String> = sqlx::query_scalar("SELECT approved_by FROM retention_rules")
        .fetch_one(&hostile.owner)
        .await
        .expect("the approval");
    assert_eq!(approved.as_deref(), Some("alice"));
    let pinned = run(&["pin", "add", "--asset", &asset, "--for", "1d", "--reason", "a newsletter", "--json"]);
    let pin = pinned["pinned"]["id"].as_i64().expect("the pin's id").to_string();
    run(&["pin", "release", &pin, "--json"]);
    let declared = run(&["hold", "declare", "--for", "1h", "--reason", "a migration", "--json"]);
    let hold = declared["declared"].as_i64().expect("the window's id").to_string();
    run(&["hold", "release", &hold, "--json"]);
    let open: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM asset_pins WHERE released_at IS NULL)
              + (SELECT count(*) FROM destruction_holds WHERE released_at IS NULL)",
    )
    .fetch_one(&hostile.owner)
    .await
    .expect("pins and windows");
    assert_eq!(open, 0, "released by the operator");
}
