//! `migrate`: the same embedded migrations the functions were built with.

use serde_json::json;

use crate::{Output, connect};

pub(crate) async fn run() -> anyhow::Result<Output> {
    let pool = connect::database().await?;
    let applied = || async {
        // Not a checked query: the table is named by `MIGRATIONS_TABLE`, and it does not exist before the first run.
        let sql = format!("SELECT count(*) FROM {} WHERE success", shared::db::MIGRATIONS_TABLE);
        sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql)).fetch_one(&pool).await.unwrap_or(0)
    };
    let before = applied().await;
    shared::db::migrate(&pool).await?;
    let after = applied().await;
    let version = shared::db::migrator().iter().map(|m| m.version).max().unwrap_or(0);
    Ok(Output {
        text: format!("applied {} migration(s); the schema is at version {version}", after - before),
        json: json!({ "applied": after - before, "version": version }),
        attention: Vec::new(),
    })
}
