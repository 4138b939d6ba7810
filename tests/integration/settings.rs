//! Settings as the functions load them in AWS: the database connection from a Secrets Manager secret.

use std::collections::HashMap;

use integration_tests::{TestContext, admin_database_url};
use settings::LoadError;
use settings::Settings;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

async fn put_secret(name: &str, value: &str) -> String {
    let config = platform::aws::sdk_config().await;
    let client = aws_sdk_secretsmanager::Client::new(&config);
    let created = client.create_secret().name(name).secret_string(value).send().await.expect("create secret");
    created.arn().expect("secret ARN").to_owned()
}

fn environment(ctx: &TestContext, arn: &str) -> HashMap<&'static str, String> {
    HashMap::from([
        ("DATABASE_SECRET_ARN", arn.to_owned()),
        ("CLEANUP_QUEUE_URL", ctx.queue.url.clone()),
        ("ASSET_BUCKET", ctx.bucket.clone()),
    ])
}

#[tokio::test]
async fn the_database_connection_comes_from_an_rds_style_secret() {
    let ctx = TestContext::new().await;
    let admin_url = admin_database_url();
    let admin: PgConnectOptions = admin_url.parse().expect("admin url");
    // The server's password where it has one (the embedded PostgreSQL); trust authentication ignores it. Either
    // way it must never be shown.
    let password = admin_url
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'))
        .and_then(|(credentials, _)| credentials.split_once(':'))
        .map_or_else(|| "hunter2-in-the-secret".to_owned(), |(_, p)| p.to_owned());
    let secret = serde_json::json!({
        "engine": "postgres",
        "host": admin.get_host(),
        "port": admin.get_port(),
        "username": admin.get_username(),
        "password": password,
        "dbname": ctx.db.name,
    });
    let arn = put_secret(&format!("sweeper-db-{}", integration_tests::short_id()), &secret.to_string()).await;
    let env = environment(&ctx, &arn);

    let config = platform::aws::sdk_config().await;
    let settings = Settings::load_from(&config, |name| env.get(name).cloned()).await.expect("settings from the secret");

    let pool = PgPoolOptions::new().max_connections(1).connect_lazy_with(settings.database.connect_options());
    let database: String = sqlx::query_scalar("SELECT current_database()::text").fetch_one(&pool).await.expect("query");
    assert_eq!(database, ctx.db.name);
    let debug = format!("{settings:?}");
    assert!(!debug.contains(&password), "the password stays out of Debug: {debug}");
    pool.close().await;
}

#[tokio::test]
async fn a_missing_secret_is_named_and_no_database_at_all_is_a_settings_error() {
    let ctx = TestContext::new().await;
    let config = platform::aws::sdk_config().await;
    let arn = "arn:aws:secretsmanager:us-east-1:000000000000:secret:nowhere-AbCdEf";
    let env = environment(&ctx, arn);
    let error = Settings::load_from(&config, |name| env.get(name).cloned()).await.expect_err("no such secret");
    assert!(matches!(error, LoadError::Secret(_)));
    assert!(error.to_string().starts_with(&format!("cannot read database secret {arn}")), "{error}");

    let mut env = environment(&ctx, "");
    env.remove("DATABASE_SECRET_ARN");
    let error = Settings::load_from(&config, |name| env.get(name).cloned()).await.expect_err("no database");
    assert_eq!(
        error.to_string(),
        "invalid configuration (1 problem): DATABASE_URL is not set (nor DATABASE_SECRET_ARN)"
    );
}
