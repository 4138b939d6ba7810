//! Asking every reference source whether it still refers to one asset (invariant 1). Runs on whatever
//! connection it is given: the consumer calls it inside its settle transaction, with the asset row locked.

use serde::Serialize;
use sqlx::{AssertSqlSafe, PgConnection};

use crate::ids::AssetId;
use crate::references::{ReferenceMap, ReferenceSource, SourceKind, quote_ident};

/// One source's answer, kept as evidence in the audit record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SourceAnswer {
    pub source: String,
    pub referenced: bool,
}

/// What the recheck found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Recheck {
    /// Every source asked, in order, with its answer. A keep stops at the first source that refers.
    pub answers: Vec<SourceAnswer>,
}

impl Recheck {
    /// The source that keeps the asset, if any.
    pub fn referenced_by(&self) -> Option<&str> {
        self.answers.iter().find(|a| a.referenced).map(|a| a.source.as_str())
    }
}

/// Asks each source of `map` in turn whether it refers to `asset`; stops at the first that does.
pub async fn recheck(conn: &mut PgConnection, map: &ReferenceMap, asset: AssetId) -> Result<Recheck, sqlx::Error> {
    let mut answers = Vec::with_capacity(map.sources.len());
    for source in &map.sources {
        let referenced = refers(conn, source, asset).await?;
        answers.push(SourceAnswer { source: source.to_string(), referenced });
        if referenced {
            break;
        }
    }
    Ok(Recheck { answers })
}

/// Whether `source` holds a reference to `asset`. Each form is one the usual index answers: a btree for
/// `=`, a GIN index for `@>` on arrays and for `@?` on JSON documents (`jsonb_ops` for `$.**` paths).
///
/// The statements are not kept prepared: a cached generic plan cannot see the value, and for `EXISTS (… @? $1)`
/// Postgres then prefers a sequential scan it expects to stop early — which is every row when nothing refers.
/// An unnamed statement is planned with the value each time, and uses the index.
pub async fn refers(conn: &mut PgConnection, source: &ReferenceSource, asset: AssetId) -> Result<bool, sqlx::Error> {
    let table = source.quoted_table();
    let column = quote_ident(&source.column);
    let id = asset.0;
    match &source.kind {
        SourceKind::ForeignKey | SourceKind::Domain => {
            let sql = format!("SELECT EXISTS (SELECT 1 FROM {table} WHERE {column} = $1)");
            sqlx::query_scalar(AssertSqlSafe(sql)).bind(id).persistent(false).fetch_one(conn).await
        }
        SourceKind::DomainArray => {
            // The catalog's own spelling of the column type, so `@>` compares like with like.
            let sql = format!(
                "SELECT EXISTS (SELECT 1 FROM {table} WHERE {column} @> ARRAY[$1::uuid]::{})",
                source.column_type
            );
            sqlx::query_scalar(AssertSqlSafe(sql)).bind(id).persistent(false).fetch_one(conn).await
        }
        SourceKind::Json { json_path } => {
            // The id is a uuid, so splicing it into the path cannot inject; both spellings an application
            // might have stored are matched.
            let lower = id.hyphenated().to_string();
            let upper = lower.to_uppercase();
            let path = format!("{json_path} ? (@ == \"{lower}\" || @ == \"{upper}\")");
            let sql = format!("SELECT EXISTS (SELECT 1 FROM {table} WHERE {column} @? $1::jsonpath)");
            sqlx::query_scalar(AssertSqlSafe(sql)).bind(path).persistent(false).fetch_one(conn).await
        }
    }
}
