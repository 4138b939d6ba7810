//! One retention rule as the catalog resolves it now, and the statements it becomes: the batch `DELETE` and the
//! count its brake and `plan` read. The condition is the rule's, so no application code runs.

use std::time::Duration;

use chrono::{NaiveDate, NaiveDateTime};
use serde::{Deserialize, Serialize};
use sqlx::{AssertSqlSafe, PgConnection};

/// Records one batch deletes at most: the application's writer waits for no more than this between batches.
pub const BATCH_SIZE: i64 = 1_000;

/// A declared rule, resolved against the catalog for one pass's day.
#[derive(Debug, Clone)]
pub struct Rule {
    /// `retention_rules.id`.
    pub id: i64,
    /// The table as declared (schema-qualified when it was written).
    pub table: String,
    /// The timestamp column as declared.
    pub column: String,
    /// The period, as Postgres prints it.
    pub keep: String,
    /// The narrowing condition, if any.
    pub filter: Option<String>,
    /// Records older than this, in the application's time zone, are expired.
    pub cutoff: NaiveDateTime,
    /// Whether an operator's release from the rule brake is in force, and whose.
    pub approved_by: Option<String>,
    /// The expired records the operator read when releasing it (with `approved_by`): it covers no more, within the
    /// approval tolerance.
    pub approved_rows: Option<i64>,
    /// When a new or changed rule may first delete, while that is still ahead.
    pub waits_until: Option<chrono::DateTime<chrono::Utc>>,
    resolved: Result<Resolved, String>,
}

/// What the catalog says of the rule's table, column and filter now.
#[derive(Debug, Clone)]
struct Resolved {
    qualified: String,
    column: String,
    zoned: bool,
    estimated_rows: f64,
    /// The function the filter was written into when the rule was (the filter is its whole body): called on each
    /// row, beside the cutoff, where no filter can reach it.
    filter_function: Option<String>,
}

/// What a rule would delete at a cutoff, against the size of its table: what the brake and `plan` read.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Weight {
    /// Expired records (counted up to the brake's threshold plus one when `exact` is false).
    pub expired: u64,
    /// The table's records: counted when it is small, the planner's estimate otherwise.
    pub table_rows: u64,
    /// Records past which the brake holds the rule.
    pub threshold: u64,
}

impl Weight {
    /// Whether the brake holds the rule (more than its share of the table would go).
    pub fn braked(&self) -> bool {
        self.expired > self.threshold
    }
}

/// Tables with fewer rows than this (by the planner's estimate) are counted exactly.
const EXACT_COUNT_BELOW: f64 = 100_000.0;

impl Rule {
    /// Every declared rule resolved for `day`, the one that waited longest for its turn first; a rule declared or
    /// changed less than `delay` ago waits.
    pub async fn all(conn: &mut PgConnection, day: NaiveDate, delay: Duration) -> Result<Vec<Rule>, sqlx::Error> {
        let rows = sqlx::query!(
            r#"SELECT r.id, r.table_name, r.timestamp_column, r.keep::text AS "keep!", r.filter,
                      ($1::date - r.keep) AS "cutoff!",
                      CASE WHEN r.approved_until > now() THEN r.approved_by END AS approved_by,
                      CASE WHEN r.approved_until > now() THEN r.approved_rows END AS approved_rows,
                      format('%I.%I', n.nspname, c.relname) AS qualified, c.relkind AS "relkind?",
                      quote_ident(a.attname) AS column_sql, a.atttypid::regtype::text AS column_type,
                      c.reltuples::float8 AS "reltuples?",
                      (SELECT format('%I.%I', p.pronamespace::regnamespace, p.proname) FROM pg_proc p
                        WHERE p.oid = to_regprocedure(r.filter_function)) AS filter_function,
                      ($1::date - r.keep) > $1::date::timestamp AS "future!",
                      CASE WHEN r.changed_at + $2 * interval '1 second' > now()
                           THEN r.changed_at + $2 * interval '1 second' END AS waits_until
                 FROM retention_rules r
                 LEFT JOIN pg_class c ON c.oid = to_regclass(r.table_name)
                 LEFT JOIN pg_namespace n ON n.oid = c.relnamespace
                 LEFT JOIN pg_attribute a
                        ON a.attrelid = c.oid AND a.attname = r.timestamp_column AND a.attnum > 0 AND NOT a.attisdropped
                ORDER BY r.last_turn_at NULLS FIRST, r.id"#,
            day,
            delay.as_secs_f64(),
        )
        .fetch_all(&mut *conn)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let resolved = match (r.qualified, r.relkind, r.column_sql, r.column_type.as_deref()) {
                    _ if r.future => Err(format!("its period {} puts the cutoff after the pass's day", r.keep)),
                    _ if r.filter.is_some() && r.filter_function.is_none() => {
                        Err("its filter's function is gone: write the rule's filter again".to_owned())
                    }
                    (None, ..) | (_, None, ..) => Err(format!("table {} no longer exists", r.table_name)),
                    (Some(q), Some(kind), ..) if kind != b'r' as i8 => {
                        Err(format!("{q} is no longer an ordinary table"))
                    }
                    (Some(q), _, None, _) => Err(format!("{q} no longer has column {}", r.timestamp_column)),
                    (
                        Some(q),
                        _,
                        Some(column),
                        Some(t @ ("timestamp with time zone" | "timestamp without time zone" | "date")),
                    ) => Ok(Resolved {
                        qualified: q,
                        column,
                        zoned: t == "timestamp with time zone",
                        estimated_rows: r.reltuples.unwrap_or(-1.0),
                        filter_function: r.filter_function.clone(),
                    }),
                    (Some(q), _, Some(_), t) => Err(format!(
                        "{q}.{} is now {}, not a timestamptz, timestamp or date",
                        r.timestamp_column,
                        t.unwrap_or("unknown")
                    )),
                };
                Rule {
                    id: r.id,
                    table: r.table_name,
                    column: r.timestamp_column,
                    keep: r.keep,
                    filter: r.filter,
                    cutoff: r.cutoff,
                    approved_by: r.approved_by,
                    approved_rows: r.approved_rows,
                    waits_until: r.waits_until,
                    resolved,
                }
            })
            .collect())
    }

    /// Why the rule cannot run as declared (its table or column changed since), if it cannot.
    pub fn unusable(&self) -> Option<&str> {
        self.resolved.as_ref().err().map(String::as_str)
    }

    /// One batch's `DELETE` (`$1` the cutoff, `$2` the time zone of a `timestamptz` column): by `ctid` within one
    /// statement, the rows locked by the inner select, so none moves in between. A pure function of the rule, so its
    /// text can be read in a test.
    fn delete_statement(&self, resolved: &Resolved) -> String {
        format!(
            "DELETE FROM ONLY {} WHERE ctid = ANY (ARRAY(SELECT t.ctid {} LIMIT {BATCH_SIZE} FOR UPDATE SKIP LOCKED))",
            resolved.qualified,
            self.expired(resolved)
        )
    }

    /// `FROM … WHERE` of the expired records, the table aliased `t`: `$1` is the cutoff, `$2` the time zone it is
    /// local to. `ONLY`: an inheritance parent's rule deletes none of its children's rows.
    fn expired(&self, resolved: &Resolved) -> String {
        let cutoff = if resolved.zoned { "($1::timestamp AT TIME ZONE $2)" } else { "$1::timestamp" };
        let (table, column) = (&resolved.qualified, &resolved.column);
        // The rule's standing is checked in the statement itself, once (it names no row): a filter function
        // replaced or a writer's privilege revoked since the pass began stops this very batch.
        let verified = format!("asset_sweeper.asset_sweeper_retention_rule_verified({})", self.id);
        match &resolved.filter_function {
            Some(filter) => {
                format!("FROM ONLY {table} AS t WHERE {verified} AND t.{column} < {cutoff} AND {filter}(t)")
            }
            None => format!("FROM ONLY {table} AS t WHERE {verified} AND t.{column} < {cutoff}"),
        }
    }

    fn resolved(&self) -> Result<&Resolved, sqlx::Error> {
        self.resolved.as_ref().map_err(|e| sqlx::Error::Protocol(e.clone()))
    }

    /// Deletes one batch of expired records, skipping rows another transaction holds; returns how many went.
    pub async fn delete_batch(&self, conn: &mut PgConnection, time_zone: &str) -> Result<u64, sqlx::Error> {
        let resolved = self.resolved()?;
        // Postgres refuses a statement its role may not run before anything in it runs, with a bare "permission
        // denied": asked first, the rule stops naming the privilege the sweep lacks and the GRANT that gives it.
        sqlx::query_scalar!(r#"SELECT asset_sweeper_retention_rule_deletable($1) AS "deletable!""#, self.id)
            .fetch_one(&mut *conn)
            .await?;
        let query = sqlx::query(AssertSqlSafe(self.delete_statement(resolved))).bind(self.cutoff);
        let query = if resolved.zoned { query.bind(time_zone) } else { query };
        Ok(query.execute(conn).await?.rows_affected())
    }

    /// What the rule would delete now against its table's size. With `Some(at_least)` counting stops past the
    /// brake's threshold or `at_least` (what its approval covers), whichever is more; `None` counts them all (the
    /// operator's `plan` and `approve`).
    pub async fn weigh(
        &self,
        conn: &mut PgConnection,
        time_zone: &str,
        share_percent: u32,
        at_least: Option<u64>,
    ) -> Result<Weight, sqlx::Error> {
        let resolved = self.resolved()?;
        let table = &resolved.qualified;
        let table_rows = if resolved.estimated_rows < EXACT_COUNT_BELOW {
            let counted: i64 = sqlx::query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM ONLY {table}")))
                .fetch_one(&mut *conn)
                .await?;
            u64::try_from(counted).unwrap_or(0)
        } else {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // a row estimate: finite, >= 100 000
            let estimate = resolved.estimated_rows as u64;
            estimate
        };
        let threshold = table_rows.saturating_mul(u64::from(share_percent)) / 100;
        let limit = match at_least {
            None => String::new(),
            Some(at_least) => format!(" LIMIT {}", threshold.max(at_least).saturating_add(1)),
        };
        let statement = format!("SELECT count(*) FROM (SELECT {}{limit}) expired", self.expired(resolved));
        let query = sqlx::query_scalar(AssertSqlSafe(statement)).bind(self.cutoff);
        let query = if resolved.zoned { query.bind(time_zone) } else { query };
        let expired: i64 = query.fetch_one(&mut *conn).await?;
        Ok(Weight { expired: u64::try_from(expired).unwrap_or(0), table_rows, threshold })
    }
}

/// The pass's own day in `time_zone`: the day the run `run_id` started, or today without one. Every batch of
/// the pass cuts off from it, even after midnight.
pub async fn pass_day(
    conn: &mut PgConnection,
    time_zone: &str,
    run_id: Option<uuid::Uuid>,
) -> Result<NaiveDate, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT (coalesce((SELECT started_at FROM sweep_runs WHERE id = $1), now()) AT TIME ZONE $2)::date AS "day!""#,
        run_id,
        time_zone,
    )
    .fetch_one(conn)
    .await
}
/// An operator's release of one retention rule from its brake, with what they read when they granted it.
pub struct RuleGrant<'a> {
    /// The rule (`retention_rules.id`).
    pub id: i64,
    /// Who, why, for how long.
    pub signed: platform::approval::Signed<'a>,
    /// The records the rule would delete now, as counted for them: a pass that finds more holds it again.
    pub rows: i64,
    /// The rows of the rule's table then.
    pub table_rows: i64,
}

/// Records `grant` on its rule (the one writer of a rule's approval): when it expires (RFC 3339, UTC). In the
/// caller's transaction, which counted what the grant says was counted.
pub async fn approve(conn: &mut PgConnection, grant: RuleGrant<'_>) -> Result<String, sqlx::Error> {
    let until = sqlx::query_scalar!(
        r#"UPDATE retention_rules
              SET approved_until = now() + $2 * interval '1 hour', approved_by = $3, approval_reason = $4,
                  approved_rows = $5, approved_table_rows = $6
            WHERE id = $1
        RETURNING approved_until AS "until!""#,
        grant.id,
        grant.signed.hours(),
        grant.signed.by,
        grant.signed.reason,
        grant.rows,
        grant.table_rows,
    )
    .fetch_one(conn)
    .await?;
    Ok(platform::approval::stamp(until))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rule 7 on `"public"."events"."created_at"`, resolved: a `timestamptz` column (`zoned`) or not, with the
    /// declared filter written into a function of its own or without one.
    fn resolved(zoned: bool, filter_function: Option<&str>) -> (Rule, Resolved) {
        let resolved = Resolved {
            qualified: r#""public"."events""#.into(),
            column: r#""created_at""#.into(),
            zoned,
            estimated_rows: 1_000.0,
            filter_function: filter_function.map(str::to_owned),
        };
        let rule = Rule {
            id: 7,
            table: "events".into(),
            column: "created_at".into(),
            keep: "90 days".into(),
            filter: filter_function.map(|_| "kind = 'click'".into()),
            cutoff: NaiveDate::from_ymd_opt(2026, 9, 7).and_then(|d| d.and_hms_opt(0, 0, 0)).expect("a date"),
            approved_by: None,
            approved_rows: None,
            waits_until: None,
            resolved: Ok(resolved.clone()),
        };
        (rule, resolved)
    }

    #[test]
    fn a_batch_deletes_by_ctid_what_the_rule_verified_in_the_statement_selects_and_locks() {
        let (rule, resolved) = resolved(true, None);
        insta::assert_snapshot!(rule.delete_statement(&resolved));
    }

    #[test]
    fn a_filter_is_called_as_the_function_it_was_written_into_and_a_local_time_needs_no_zone() {
        let (rule, resolved) = resolved(false, Some(r#""asset_sweeper_private"."retention_filter_7""#));
        insta::assert_snapshot!(rule.delete_statement(&resolved));
    }
}
