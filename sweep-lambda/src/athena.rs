//! Amazon Athena as the engine of the bucket comparison (`RECONCILE_ENGINE`): `StartQueryExecution` in the
//! configured workgroup, `GetQueryExecution` to see how it stands, `GetQueryResults` a page of at most 1 000 rows at a
//! time. Athena's free edition of LocalStack has no Athena: this adapter is checked here by its parsing of Athena's
//! answers, and in a real account as docs/deploying.md describes; the comparison's text it runs is the one the tests
//! run on DataFusion.

use aws_sdk_athena::types::{QueryExecutionContext, QueryExecutionState, ResultConfiguration};
use chrono::{DateTime, NaiveDateTime, Utc};
use reconcile::engine::{Dialect, Engine, EngineError, Finding, Page, Row, Running};
use settings::AthenaSettings;

const NAME: &str = "athena";

/// The comparison's output columns, in the order the text selects them.
const COLUMNS: [&str; 6] = ["finding", "prefix", "key", "keys", "bytes", "modified"];

/// Athena, with the workgroup and tables the settings name.
#[derive(Debug, Clone)]
pub struct Athena {
    client: aws_sdk_athena::Client,
    workgroup: String,
    output: Option<String>,
    database: String,
    dialect: Dialect,
}

impl Athena {
    /// Athena as `settings` configure it.
    pub fn new(client: aws_sdk_athena::Client, settings: &AthenaSettings) -> Athena {
        Athena {
            client,
            workgroup: settings.workgroup.clone(),
            output: settings.output.clone(),
            database: settings.database.clone(),
            dialect: Dialect::Athena {
                database: settings.database.clone(),
                inventory: settings.inventory_table.clone(),
                known: settings.known_table.clone(),
            },
        }
    }
}

fn failed(operation: &str, e: impl std::fmt::Display) -> EngineError {
    EngineError::Failed { engine: NAME, reason: format!("{operation}: {e}") }
}

/// The idempotency token of `sql`'s start: a pass that started it and crashed before saving its id starts it again
/// with the same token, and Athena answers the same query instead of running (and billing) a second.
fn token(sql: &str) -> String {
    // FNV-1a, twice over, 128 bits: a stable digest with no crate for it; tokens need 32 to 128 characters.
    let digest =
        |seed: u64| sql.bytes().fold(seed, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3));
    format!("asset-sweeper-{:016x}{:016x}", digest(0xcbf2_9ce4_8422_2325), digest(0x6c62_272e_07bb_0142))
}

impl Engine for Athena {
    fn name(&self) -> &'static str {
        NAME
    }

    fn dialect(&self) -> &Dialect {
        &self.dialect
    }

    async fn attach(&self, _: &reconcile::engine::Datasets<'_>) -> Result<(), EngineError> {
        // Both tables find their files by partition: the report's `dt`, the export's `listing`.
        Ok(())
    }

    async fn start(&self, sql: &str) -> Result<String, EngineError> {
        let context = QueryExecutionContext::builder().database(&self.database).build();
        let output =
            self.output.as_ref().map(|location| ResultConfiguration::builder().output_location(location).build());
        let started = self
            .client
            .start_query_execution()
            .query_string(sql)
            .work_group(&self.workgroup)
            .query_execution_context(context)
            .set_result_configuration(output)
            .client_request_token(token(sql))
            .send()
            .await
            .map_err(|e| failed("StartQueryExecution", aws_sdk_athena::error::DisplayErrorContext(e)))?;
        started.query_execution_id.ok_or_else(|| failed("StartQueryExecution", "no query execution id"))
    }

    async fn poll(&self, id: &str) -> Result<Running, EngineError> {
        let got = self
            .client
            .get_query_execution()
            .query_execution_id(id)
            .send()
            .await
            .map_err(|e| failed("GetQueryExecution", aws_sdk_athena::error::DisplayErrorContext(e)))?;
        let execution = got.query_execution.ok_or_else(|| failed("GetQueryExecution", "no query execution"))?;
        let status = execution.status.ok_or_else(|| failed("GetQueryExecution", "no status"))?;
        Ok(match status.state {
            Some(QueryExecutionState::Succeeded) => Running::Succeeded {
                scanned: execution
                    .statistics
                    .and_then(|s| s.data_scanned_in_bytes)
                    .and_then(|b| u64::try_from(b).ok())
                    .unwrap_or(0),
            },
            Some(QueryExecutionState::Failed | QueryExecutionState::Cancelled) => Running::Failed(
                status
                    .athena_error
                    .and_then(|e| e.error_message)
                    .or(status.state_change_reason)
                    .unwrap_or_else(|| "no reason given".to_owned()),
            ),
            _ => Running::Running,
        })
    }

    async fn page(&self, id: &str, token: Option<&str>) -> Result<Page, EngineError> {
        let got = self
            .client
            .get_query_results()
            .query_execution_id(id)
            .max_results(1000)
            .set_next_token(token.map(str::to_owned))
            .send()
            .await
            .map_err(|e| failed("GetQueryResults", aws_sdk_athena::error::DisplayErrorContext(e)))?;
        let rows = got.result_set.map(|set| set.rows.unwrap_or_default()).unwrap_or_default();
        let texts: Vec<Vec<Option<String>>> = rows
            .into_iter()
            .map(|row| row.data.unwrap_or_default().into_iter().map(|d| d.var_char_value).collect())
            .collect();
        // The first page begins with the column names.
        let rows = parse(&texts, token.is_none())?;
        Ok(Page { rows, next: got.next_token })
    }
}

/// The comparison's rows from Athena's text values (every value a string, a null none); the first row the column
/// names when `header`.
fn parse(texts: &[Vec<Option<String>>], header: bool) -> Result<Vec<Row>, EngineError> {
    let bad = |reason: String| EngineError::Row { engine: NAME, reason };
    let mut texts = texts.iter();
    if header {
        let names: Vec<&str> =
            texts.next().map(|h| h.iter().map(|n| n.as_deref().unwrap_or("")).collect()).unwrap_or_default();
        if names != COLUMNS {
            return Err(bad(format!("its columns are {names:?}, not {COLUMNS:?}")));
        }
    }
    texts
        .map(|values| {
            let [finding, prefix, key, keys, bytes, modified] = values.as_slice() else {
                return Err(bad(format!("{} values, not {}", values.len(), COLUMNS.len())));
            };
            let number = |name: &str, v: &Option<String>| {
                v.as_deref().map_or(Ok(0), |t| t.parse::<i64>().map_err(|e| bad(format!("{name} {t:?}: {e}"))))
            };
            let finding: Finding = finding
                .as_deref()
                .unwrap_or("")
                .parse()
                .map_err(|e: platform::text_enum::UnknownValue| bad(e.to_string()))?;
            Ok(Row {
                finding,
                prefix: prefix.clone(),
                key: key.clone(),
                keys: number("keys", keys)?,
                bytes: number("bytes", bytes)?,
                modified: modified.as_deref().map(timestamp).transpose().map_err(bad)?,
            })
        })
        .collect()
}

/// Athena prints a `timestamp` as `2026-11-30 12:34:56.789`, in UTC for S3 Inventory's.
fn timestamp(text: &str) -> Result<DateTime<Utc>, String> {
    NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f")
        .map(|t| t.and_utc())
        .map_err(|e| format!("modified {text:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(rows: &[&[Option<&str>]]) -> Vec<Vec<Option<String>>> {
        rows.iter().map(|r| r.iter().map(|v| v.map(str::to_owned)).collect()).collect()
    }

    #[test]
    fn athenas_text_answers_are_read_into_the_comparisons_rows() {
        let header: &[Option<&str>] = &COLUMNS.map(Some);
        let page = texts(&[
            header,
            &[Some("unknown"), None, Some("ws/it's a key.png"), Some("1"), Some("42"), Some("2026-11-30 12:34:56.789")],
            &[Some("matched"), Some("ws/"), None, Some("1000000"), Some("123456789"), Some("2026-11-29 00:00:00.000")],
            &[Some("gone"), Some("ws/"), Some("ws/gone.png"), Some("1"), Some("7"), None],
        ]);
        let rows = parse(&page, true).expect("rows");
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].finding, Finding::Unknown);
        assert_eq!(rows[0].key.as_deref(), Some("ws/it's a key.png"));
        let at = DateTime::parse_from_rfc3339("2026-11-30T12:34:56.789Z").expect("a time");
        assert_eq!(rows[0].modified, Some(at.with_timezone(&Utc)), "UTC, to the millisecond");
        assert_eq!((rows[1].keys, rows[1].bytes, rows[1].prefix.as_deref()), (1_000_000, 123_456_789, Some("ws/")));
        assert_eq!((rows[2].finding, rows[2].modified), (Finding::Gone, None));
        // A later page has no header; a page of other columns or values is refused, naming what is wrong.
        assert_eq!(parse(&page[1..], false).expect("rows"), rows);
        let other = texts(&[&[Some("key"), Some("size")]]);
        let e = parse(&other, true).expect_err("other columns").to_string();
        assert!(e.contains("its columns are [\"key\", \"size\"]"), "{e}");
        let e =
            parse(&texts(&[&[Some("orphan"), None, None, Some("1"), Some("1"), None]]), false).expect_err("a finding");
        assert!(e.to_string().contains("\"orphan\""), "{e}");
    }

    #[test]
    fn the_same_text_starts_with_the_same_token() {
        let a = token("SELECT 1");
        assert_eq!(a, token("SELECT 1"));
        assert_ne!(a, token("SELECT 2"));
        assert!((32..=128).contains(&a.len()), "{a}");
    }
}
