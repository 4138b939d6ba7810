//! Asking every reference source whether it still refers to one asset (invariant 1). Runs on whatever
//! connection it is given: the consumer calls it inside its settle transaction, with the asset row locked.

use serde::Serialize;
use sqlx::{AssertSqlSafe, PgConnection};

use crate::ids::AssetId;
use crate::references::{ReferenceMap, SourceKind, quote_ident};

/// One source's answer, kept as evidence in the audit record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SourceAnswer {
    pub source: String,
    pub referenced: bool,
}

/// What the recheck found: every source of the map, in order, with its answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Recheck {
    pub answers: Vec<SourceAnswer>,
}

impl Recheck {
    /// The first source that keeps the asset, if any.
    pub fn referenced_by(&self) -> Option<&str> {
        self.answers.iter().find(|a| a.referenced).map(|a| a.source.as_str())
    }
}

/// Asks every source of `map` whether it refers to `asset`, in one statement, so all answers come from one
/// snapshot: a reference moving from one source to another while the check runs cannot fall between them.
///
/// Each test is one the usual index answers: a btree for `=`, a GIN index for `@>` on arrays and for `@?` on
/// JSON documents (`jsonb_ops` for `$.**` paths). The statement is not kept prepared: a cached generic plan
/// cannot see the values, and for `EXISTS (… @? $n)` Postgres then prefers a sequential scan it expects to stop
/// early — which reads every row when nothing refers. An unnamed statement is planned with the values.
pub async fn recheck(conn: &mut PgConnection, map: &ReferenceMap, asset: AssetId) -> Result<Recheck, sqlx::Error> {
    if map.sources.is_empty() {
        return Ok(Recheck { answers: Vec::new() });
    }
    let id = asset.0;
    let mut tests = Vec::with_capacity(map.sources.len());
    let mut paths = Vec::new();
    for source in &map.sources {
        let table = source.quoted_table();
        let column = quote_ident(&source.column);
        tests.push(match &source.kind {
            SourceKind::ForeignKey | SourceKind::Domain => {
                format!("EXISTS (SELECT 1 FROM {table} WHERE {column} = $1)")
            }
            // The catalog's own spelling of the column type, so `@>` compares like with like.
            SourceKind::DomainArray => {
                format!("EXISTS (SELECT 1 FROM {table} WHERE {column} @> ARRAY[$1::uuid]::{})", source.column_type)
            }
            SourceKind::Json { json_path } => {
                // The id is a uuid, so splicing it into the path cannot inject; both spellings an application
                // might have stored are matched.
                let lower = id.hyphenated().to_string();
                let upper = lower.to_uppercase();
                paths.push(format!("{json_path} ? (@ == \"{lower}\" || @ == \"{upper}\")"));
                format!("EXISTS (SELECT 1 FROM {table} WHERE {column} @? ${}::jsonpath)", paths.len() + 1)
            }
        });
    }
    let sql = format!("SELECT ARRAY[{}]::bool[]", tests.join(", "));
    let mut query = sqlx::query_scalar::<_, Vec<bool>>(AssertSqlSafe(sql)).bind(id);
    for path in paths {
        query = query.bind(path);
    }
    let found = query.persistent(false).fetch_one(conn).await?;
    let answers = map
        .sources
        .iter()
        .zip(found)
        .map(|(source, referenced)| SourceAnswer { source: source.to_string(), referenced })
        .collect();
    Ok(Recheck { answers })
}
