//! Record retention with the real sweep (and the real consumer where assets follow): rules are validated when
//! declared, delete exactly the expired records in batches of a thousand, go before discovery so the assets their
//! records last referred to retire in the same pass, keep to their share of the pass in whole batches, cut off
//! from the pass's own day across midnight, fail alone and on the record, and wait for a person when they would
//! empty a table.

use std::time::{Duration, Instant};

use crate::pipeline::{actions, owner_tables, pass, settle_queue};
use integration_tests::fixtures::{object_exists, seed, state};
use integration_tests::{FAILPOINTS, TestContext, TestLogin};
use records::{RuleRun, RuleStop};
use serde_json::Value;
use sweep_lambda::Sweeper;
use uuid::Uuid;

/// `n` records of `table` (`id`, `at timestamptz`, `kind text`) dated `age` before now.
async fn records(ctx: &TestContext, table: &str, n: i64, age: &str, kind: &str) {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {table} (at, kind) SELECT now() - $1::interval, $2 FROM generate_series(1, $3)"
    )))
    .bind(age)
    .bind(kind)
    .bind(n)
    .execute(ctx.pool())
    .await
    .expect("records");
}

async fn count(ctx: &TestContext, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned())).fetch_one(ctx.pool()).await.expect(sql)
}

async fn declare(ctx: &TestContext, table: &str, column: &str, keep: &str, filter: Option<&str>) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO retention_rules (table_name, timestamp_column, keep, filter) VALUES ($1, $2, $3::interval, $4)
         RETURNING id",
    )
    .bind(table)
    .bind(column)
    .bind(keep)
    .bind(filter)
    .fetch_one(ctx.pool())
    .await
    .unwrap_or_else(|e| panic!("declare a rule on {table}: {e}"))
}

/// What the run row says of rule `id`: the record, not the handler's reply.
async fn recorded(ctx: &TestContext, run_id: Uuid, id: i64) -> Value {
    let records: Value = sqlx::query_scalar("SELECT records FROM sweep_runs WHERE id = $1")
        .bind(run_id)
        .fetch_one(ctx.pool())
        .await
        .expect("run row");
    records["rules"].as_array().into_iter().flatten().find(|r| r["rule_id"] == id).cloned().unwrap_or(Value::Null)
}

fn rule(report: &sweep_lambda::record::SweepReport, id: i64) -> RuleRun {
    let records = report.records.as_ref().unwrap_or_else(|| panic!("the records step ran: {:?}", report.records_error));
    records.rules.iter().find(|r| r.rule_id == id).cloned().unwrap_or_else(|| panic!("rule {id} in {records:?}"))
}

const SESSIONS: &str = "CREATE TABLE sessions (id serial PRIMARY KEY, at timestamptz NOT NULL, kind text NOT NULL)";

async fn sessions_and_audit_log(ctx: &TestContext) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "{SESSIONS}; CREATE TABLE audit_log (id serial PRIMARY KEY, at timestamptz NOT NULL, kind text NOT NULL)"
    )))
    .execute(ctx.pool())
    .await
    .expect("tables");
}

#[tokio::test]
async fn a_rule_deletes_exactly_the_expired_records_in_batches_of_a_thousand_a_filter_narrows_it_and_a_malformed_one_is_refused()
 {
    let ctx = TestContext::new().await;
    sessions_and_audit_log(&ctx).await;
    // Declared wrongly, each is refused at once, naming what is wrong; nothing is written.
    for (table, column, filter, says) in [
        ("nowhere", "at", None, "table nowhere does not exist"),
        ("sessions", "born", None, "public.sessions has no column born"),
        ("sessions", "kind", None, "public.sessions.kind is text, not a timestamptz, timestamp or date"),
        ("sessions", "at", Some("id + 1"), "filter id + 1 is not a boolean condition over the table"),
        ("sessions", "at", Some("true), (false"), "is not a boolean condition over the table"),
        ("sessions", "at", Some("colour = 'red'"), "column \"colour\" does not exist"),
        ("sessions", "at", Some("true; DROP TABLE audit_log"), "may not contain a semicolon or a comment"),
        ("sessions", "at", Some("kind = 'x' -- and more"), "may not contain a semicolon or a comment"),
        ("sessions", "at", Some("kind = "), "is not a boolean condition over the table"),
        ("assets", "created_at", None, "is not a table of the application"),
        ("pg_catalog.pg_authid", "rolvaliduntil", None, "is not a table of the application"),
        ("sessions", "at", Some("set_config('search_path', 'elsewhere', false) IS NOT NULL"), "calls set_config"),
        ("sessions", "at", Some("nextval('public.sessions_id_seq') > 0"), "calls nextval"),
    ] {
        let refused = sqlx::query(
            "INSERT INTO retention_rules (table_name, timestamp_column, keep, filter) VALUES ($1, $2, '1 day', $3)",
        )
        .bind(table)
        .bind(column)
        .bind(filter)
        .execute(ctx.pool())
        .await
        .expect_err("a malformed rule is refused");
        assert!(refused.to_string().contains(says), "{table}.{column} {filter:?}: {refused}");
    }
    let refused = sqlx::query(
        "INSERT INTO retention_rules (table_name, timestamp_column, keep) VALUES ('sessions', 'at', '-1 day')",
    )
    .execute(ctx.pool())
    .await
    .expect_err("a negative period is refused");
    assert!(refused.to_string().contains("retention_rules_keep_check"), "{refused}");
    // More than nothing to Postgres, yet on some days a cutoff after the day itself.
    let refused = sqlx::query(
        "INSERT INTO retention_rules (table_name, timestamp_column, keep) VALUES ('sessions', 'at', '1 month -29 days')",
    )
    .execute(ctx.pool())
    .await
    .expect_err("a period of mixed signs is refused");
    assert!(refused.to_string().contains("retention_rules_keep_check"), "{refused}");
    assert_eq!(count(&ctx, "SELECT count(*) FROM retention_rules").await, 0);
    assert_eq!(count(&ctx, "SELECT count(*) FROM audit_log").await, 0, "the table is still there");

    records(&ctx, "sessions", 2_500, "40 days", "guest").await;
    records(&ctx, "sessions", 300, "29 days", "guest").await;
    records(&ctx, "sessions", 200, "10 days", "guest").await;
    // Beside them, more than half the table stays, so the rule brake has no say here.
    records(&ctx, "sessions", 3_100, "1 hour", "guest").await;
    records(&ctx, "audit_log", 700, "40 days", "login").await;
    records(&ctx, "audit_log", 400, "40 days", "payment").await;
    records(&ctx, "audit_log", 900, "1 day", "login").await;
    let sessions = declare(&ctx, "sessions", "at", "30 days", None).await;
    let logins = declare(&ctx, "audit_log", "at", "7 days", Some("kind = 'login'")).await;
    let stored: String = sqlx::query_scalar("SELECT table_name FROM retention_rules WHERE id = $1")
        .bind(sessions)
        .fetch_one(ctx.pool())
        .await
        .expect("rule");
    assert_eq!(stored, "public.sessions", "written schema-qualified");

    let report = pass(&ctx, &[]).await;
    let ran = rule(&report, sessions);
    assert_eq!((ran.deleted, ran.batches, ran.finished, ran.stopped), (2_500, 3, true, RuleStop::Finished), "{ran:?}");
    assert_eq!(count(&ctx, "SELECT count(*) FROM sessions WHERE at < now() - interval '31 days'").await, 0);
    assert_eq!(count(&ctx, "SELECT count(*) FROM sessions").await, 3_600, "the 29- and 10-day-old and new ones stay");
    let ran = rule(&report, logins);
    assert_eq!((ran.deleted, ran.finished), (700, true), "{ran:?}");
    assert_eq!(
        count(&ctx, "SELECT count(*) FROM audit_log WHERE kind = 'payment'").await,
        400,
        "the filter narrows it"
    );
    assert_eq!(count(&ctx, "SELECT count(*) FROM audit_log WHERE kind = 'login'").await, 900);
    assert_eq!(report.records.as_ref().map(|r| r.deleted), Some(3_200));
    let row = recorded(&ctx, report.run_id, sessions).await;
    assert_eq!(
        (row["deleted"].as_u64(), row["finished"].as_bool(), row["error"].is_null()),
        (Some(2_500), Some(true), true)
    );

    // The next pass finds nothing more to do: "it did nothing" is a run of its own.
    let again = pass(&ctx, &[]).await;
    let ran = rule(&again, sessions);
    assert_eq!((ran.deleted, ran.batches, ran.finished), (0, 0, true), "{ran:?}");
}

#[tokio::test]
async fn records_go_first_so_an_asset_whose_last_record_a_rule_deleted_is_retired_in_the_same_pass() {
    let ctx = TestContext::new().await;
    owner_tables(&ctx).await;
    sqlx::raw_sql(
        "CREATE TABLE orders (id serial PRIMARY KEY, placed_at timestamptz NOT NULL, receipt uuid REFERENCES assets (id));
         CREATE INDEX orders_receipt ON orders (receipt)",
    )
    .execute(ctx.pool())
    .await
    .expect("orders");
    let ws = Uuid::new_v4();
    let (old_key, kept_key, shared_key) = (format!("{ws}/old.pdf"), format!("{ws}/kept.pdf"), format!("{ws}/both.pdf"));
    let old = seed(&ctx, ws, "attached", "3 days", &old_key).await;
    let kept = seed(&ctx, ws, "attached", "3 days", &kept_key).await;
    let both = seed(&ctx, ws, "attached", "3 days", &shared_key).await;
    // Nobody scheduled them: only discovery can make one due. (A due time is scheduling: the grace floor stays.)
    sqlx::query("UPDATE assets SET due_at = NULL").execute(ctx.pool()).await.expect("unscheduled");
    for (receipt, age) in [(old, "2 years"), (kept, "2 days"), (both, "2 years"), (both, "3 months")] {
        sqlx::query("INSERT INTO orders (placed_at, receipt) VALUES (now() - $1::interval, $2)")
            .bind(age)
            .bind(receipt)
            .execute(ctx.pool())
            .await
            .expect("order");
    }
    // A year: the 2-year-old orders go (half the table: not more than the brake's share). `both` keeps a
    // 3-month-old order.
    let orders = declare(&ctx, "orders", "placed_at", "1 year", None).await;

    let report = pass(&ctx, &[]).await;
    assert_eq!(rule(&report, orders).deleted, 2);
    let discovery = report.discovery.as_ref().expect("discovery ran after the records step");
    assert_eq!(discovery.found, 1, "{discovery:?}");
    assert_eq!(report.enqueued, 1, "made due and claimed by the same pass");
    settle_queue(&ctx).await;
    assert_eq!(state(&ctx, old).await.as_deref(), Some("retired"));
    assert_eq!(actions(&ctx, old).await, ["discovered", "retire"]);
    assert!(object_exists(&ctx.s3, &ctx.bucket, &old_key).await, "retiring keeps the bytes");
    for id in [kept, both] {
        assert_eq!(state(&ctx, id).await.as_deref(), Some("attached"), "{id} is still referred to");
        assert!(actions(&ctx, id).await.is_empty());
    }
}

#[tokio::test]
async fn a_budget_that_runs_out_mid_rule_leaves_whole_batches_recorded_as_unfinished_and_the_next_pass_resumes() {
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    sessions_and_audit_log(&ctx).await;
    records(&ctx, "sessions", 4_500, "40 days", "guest").await;
    records(&ctx, "sessions", 5_000, "1 day", "guest").await;
    records(&ctx, "audit_log", 10, "40 days", "login").await;
    records(&ctx, "audit_log", 30, "1 day", "login").await;
    let sessions = declare(&ctx, "sessions", "at", "30 days", None).await;
    let audit = declare(&ctx, "audit_log", "at", "30 days", None).await;

    // Each batch takes a second; the step may use 30% of a ten-second pass: it starts no batch it could not end.
    fail::cfg("records::batch", "sleep(1000)").expect("failpoint");
    let sweeper =
        Sweeper::new(ctx.pool().clone(), ctx.sqs.clone(), ctx.settings(&[("RECORDS_TIME_SHARE_PERCENT", "30")]));
    let cut = sweeper.run_pass(Instant::now() + Duration::from_secs(10)).await.expect("pass");
    fail::remove("records::batch");
    let ran = rule(&cut, sessions);
    assert_eq!((ran.finished, ran.stopped, ran.error.as_deref()), (false, RuleStop::TimeShare, None), "{ran:?}");
    assert!(ran.deleted > 0 && ran.deleted < 4_500, "{ran:?}");
    assert_eq!(ran.deleted % 1_000, 0, "whole batches only: {ran:?}");
    assert_eq!(ran.deleted, ran.batches * 1_000);
    let left = count(&ctx, "SELECT count(*) FROM sessions").await;
    assert_eq!(left, 9_500 - ran.deleted as i64, "the record and the table agree");
    let row = recorded(&ctx, cut.run_id, sessions).await;
    assert_eq!((row["deleted"].as_u64(), row["finished"].as_bool()), (Some(ran.deleted), Some(false)));
    assert_eq!(row["stopped"], "time_share");
    let waiting = rule(&cut, audit);
    assert_eq!((waiting.deleted, waiting.stopped), (0, RuleStop::NotReached), "the share ran out before its turn");
    assert_eq!(count(&ctx, "SELECT count(*) FROM audit_log").await, 40);

    // The next pass gives the rule that waited its turn first, and both finish.
    let next = pass(&ctx, &[]).await;
    let ran2 = rule(&next, sessions);
    assert_eq!((ran2.deleted, ran2.finished), (4_500 - ran.deleted, true), "{ran2:?}");
    assert_eq!(count(&ctx, "SELECT count(*) FROM sessions").await, 5_000);
    assert_eq!((rule(&next, audit).deleted, rule(&next, audit).finished), (10, true));
    let turns: Vec<i64> = sqlx::query_scalar("SELECT id FROM retention_rules ORDER BY last_turn_at")
        .fetch_all(ctx.pool())
        .await
        .expect("turns");
    assert_eq!(turns, [audit, sessions], "the rule that waited went first");
}

#[tokio::test]
async fn every_batch_of_a_pass_cuts_off_from_the_pass_own_day_in_the_application_time_zone_across_midnight() {
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    sqlx::raw_sql(SESSIONS).execute(ctx.pool()).await.expect("sessions");
    // A zone whose midnight comes six seconds from now (a POSIX zone may be offset to the second; Postgres
    // writes UTC+h as "-h").
    let offset: i64 =
        count(&ctx, "SELECT ((86400 - 6 - extract(epoch FROM now())::bigint % 86400) + 86400) % 86400").await;
    let offset = if offset > 43_200 { offset - 86_400 } else { offset };
    let zone = format!(
        "XXX{}{:02}:{:02}:{:02}",
        if offset >= 0 { '-' } else { '+' },
        offset.abs() / 3600,
        offset.abs() / 60 % 60,
        offset.abs() % 60
    );
    let day: String = sqlx::query_scalar("SELECT (now() AT TIME ZONE $1)::date::text")
        .bind(&zone)
        .fetch_one(ctx.pool())
        .await
        .expect("the zone's day");
    // Kept one day: on `day`, records of the day before yesterday expire; on the next day, yesterday's would too.
    for (n, days_back) in [(1_500, 2), (500, 1)] {
        sqlx::query(
            "INSERT INTO sessions (at, kind)
             SELECT (($1::date - $2::int) + time '12:00') AT TIME ZONE $3, 'guest' FROM generate_series(1, $4)",
        )
        .bind(&day)
        .bind(days_back)
        .bind(&zone)
        .bind(n)
        .execute(ctx.pool())
        .await
        .expect("records");
    }
    records(&ctx, "sessions", 5_000, "1 minute", "guest").await;
    let sessions = declare(&ctx, "sessions", "at", "1 day", None).await;

    // The first batch ends after the zone's midnight; the second starts on the next day.
    fail::cfg("records::batch", "sleep(7000)").expect("failpoint");
    let report = pass(&ctx, &[("RECORDS_TIME_ZONE", &zone)]).await;
    fail::remove("records::batch");
    let ran = rule(&report, sessions);
    assert_eq!((ran.deleted, ran.batches, ran.finished), (1_500, 2, true), "{ran:?}");
    let records = report.records.as_ref().expect("records");
    assert_eq!(records.day.to_string(), day, "the pass's day is the day it started");
    let (started, finished): (String, String) = sqlx::query_as(
        "SELECT (started_at AT TIME ZONE $2)::date::text, (finished_at AT TIME ZONE $2)::date::text
           FROM sweep_runs WHERE id = $1",
    )
    .bind(report.run_id)
    .bind(&zone)
    .fetch_one(ctx.pool())
    .await
    .expect("run row");
    assert!(started == day && finished > day, "the pass crossed midnight: {started} → {finished}");
    assert_eq!(
        count(&ctx, "SELECT count(*) FROM sessions WHERE at < now() - interval '1 hour'").await,
        500,
        "yesterday's records wait for a pass of the new day"
    );

    let next = pass(&ctx, &[("RECORDS_TIME_ZONE", &zone)]).await;
    assert_eq!(rule(&next, sessions).deleted, 500, "a pass of the new day takes them");
}

#[tokio::test]
async fn a_restricting_foreign_key_stops_one_rule_with_its_error_and_count_and_the_other_rules_finish() {
    let ctx = TestContext::new().await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "{SESSIONS};
         CREATE TABLE invoices (id serial PRIMARY KEY, at timestamptz NOT NULL, kind text NOT NULL);
         CREATE TABLE invoice_lines (id serial PRIMARY KEY, invoice int NOT NULL REFERENCES invoices ON DELETE RESTRICT)"
    )))
    .execute(ctx.pool())
    .await
    .expect("tables");
    records(&ctx, "invoices", 2_500, "10 years", "paid").await;
    records(&ctx, "invoices", 2_600, "1 day", "paid").await;
    // The last of the expired invoices still has a line: the batch that reaches it is refused whole.
    sqlx::raw_sql("INSERT INTO invoice_lines (invoice) VALUES (2500)").execute(ctx.pool()).await.expect("line");
    records(&ctx, "sessions", 1_200, "40 days", "guest").await;
    records(&ctx, "sessions", 1_300, "1 hour", "guest").await;
    let invoices = declare(&ctx, "invoices", "at", "7 years", None).await;
    let sessions = declare(&ctx, "sessions", "at", "30 days", None).await;

    let report = pass(&ctx, &[]).await;
    let failed = rule(&report, invoices);
    assert_eq!((failed.deleted, failed.finished, failed.stopped), (2_000, false, RuleStop::Failed), "{failed:?}");
    let error = failed.error.as_deref().unwrap_or_default();
    assert!(error.contains("invoice_lines"), "names the refusal: {error}");
    assert_eq!(count(&ctx, "SELECT count(*) FROM invoices").await, 3_100, "two whole batches went, the third none");
    let finished = rule(&report, sessions);
    assert_eq!((finished.deleted, finished.finished), (1_200, true), "{finished:?}");
    assert!(report.discovery.is_some(), "the asset steps went on");
    let row = recorded(&ctx, report.run_id, invoices).await;
    assert_eq!((row["deleted"].as_u64(), row["finished"].as_bool()), (Some(2_000), Some(false)));
    assert!(row["error"].as_str().is_some_and(|e| e.contains("invoice_lines")), "{row}");
    let line: Value = serde_json::from_str(&sweep_lambda::record::metrics_line(&report)).expect("metrics line");
    assert_eq!((line["RetentionRulesFailed"].as_u64(), line["RecordsDeleted"].as_u64()), (Some(1), Some(3_200)));
}

#[tokio::test]
async fn the_rule_brake_holds_a_rule_until_an_operator_approves_what_it_would_delete_and_again_once_that_outgrew_it() {
    let ctx = TestContext::new().await;
    sqlx::raw_sql(SESSIONS).execute(ctx.pool()).await.expect("sessions");
    records(&ctx, "sessions", 40, "3 days", "guest").await;
    // Meant: 30 days. Typed: 1 day. Every record would go.
    let mistyped = declare(&ctx, "sessions", "at", "1 day", None).await;

    let held = pass(&ctx, &[]).await;
    let ran = rule(&held, mistyped);
    assert_eq!((ran.deleted, ran.stopped, ran.finished), (0, RuleStop::Held, false), "{ran:?}");
    let weight = ran.weight.expect("weighed");
    assert_eq!((weight.expired, weight.table_rows, weight.threshold), (21, 40, 20), "counted just past the share");
    assert_eq!(count(&ctx, "SELECT count(*) FROM sessions").await, 40, "nothing deleted");
    assert!(held.discovery.is_some(), "the rest of the pass went on");

    // The operator reads what it would do, then lets it through.
    let url = ctx.db.url.as_str();
    let plan = crate::cli::run(url, Some(&ctx), &["plan", "--json"]);
    let plan: Value = serde_json::from_slice(&plan.stdout).expect("plan prints JSON");
    let planned = &plan["records"]["rules"][0];
    assert_eq!((planned["would_delete"].as_u64(), planned["held"].as_bool()), (Some(40), Some(true)), "{plan}");
    let status = crate::cli::run(url, Some(&ctx), &["status"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains(&format!("retention rule {mistyped} on public.sessions is held by the brake")), "{text}");
    assert_eq!(status.status.code(), Some(1), "a held rule needs a person");
    let rule_id = mistyped.to_string();
    let approve = |by: &'static str, dry: bool| {
        let mut args = vec!["--json", "approve", "--rule", rule_id.as_str(), "--by", by, "--reason", "old guests go"];
        if dry {
            args.push("--dry-run");
        }
        let output = crate::cli::run(url, Some(&ctx), &args);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        serde_json::from_slice::<Value>(&output.stdout).expect("approve prints JSON")
    };
    let approved = approve("ops@example.com", false);
    assert_eq!((approved["would_delete"].as_u64(), approved["covers_up_to"].as_u64()), (Some(40), Some(44)));
    let unknown = crate::cli::run(url, Some(&ctx), &["approve", "--rule", "999", "--by", "ops", "--reason", "typo"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no retention rule 999"));

    // Within the tolerance of what was read (40, and 10% more): it goes through.
    records(&ctx, "sessions", 4, "3 days", "guest").await;
    let released = pass(&ctx, &[]).await;
    let ran = rule(&released, mistyped);
    assert_eq!((ran.deleted, ran.finished, ran.approved_by.as_deref()), (44, true, Some("ops@example.com")), "{ran:?}");
    assert_eq!(count(&ctx, "SELECT count(*) FROM sessions").await, 0);

    // The same approval, still unexpired, against a plan that grew beyond it: held again with both figures.
    records(&ctx, "sessions", 100, "3 days", "guest").await;
    let grown = pass(&ctx, &[]).await;
    let ran = rule(&grown, mistyped);
    assert_eq!((ran.deleted, ran.stopped, ran.approved_by.as_deref()), (0, RuleStop::Held, None), "{ran:?}");
    let outgrown = ran.outgrown.as_ref().expect("what outgrew the approval");
    assert_eq!((outgrown.what, outgrown.approved, outgrown.now), ("records", 40, 51), "counted past what it covers");
    assert_eq!(recorded(&ctx, grown.run_id, mistyped).await["outgrown"]["approved"], 40);
    let status = crate::cli::run(url, Some(&ctx), &["status"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("is held by the brake again: its approval was granted on 40 record(s)"), "{text}");
    assert_eq!(status.status.code(), Some(1), "a plan that outgrew its approval needs a person");

    // A dry run shows the plan now and records nothing; the approval that follows is bound to it.
    let dry = approve("ana@example.com", true);
    assert_eq!((dry["would_delete"].as_u64(), dry["dry_run"].as_bool()), (Some(100), Some(true)), "{dry}");
    let on_record: (String, i64) =
        sqlx::query_as("SELECT approved_by, approved_rows FROM retention_rules WHERE id = $1")
            .bind(mistyped)
            .fetch_one(ctx.pool())
            .await
            .expect("the rule's approval");
    assert_eq!(on_record, ("ops@example.com".to_owned(), 40), "a dry run records nothing");
    approve("ana@example.com", false);
    let ran = rule(&pass(&ctx, &[]).await, mistyped);
    assert_eq!((ran.deleted, ran.approved_by.as_deref()), (100, Some("ana@example.com")), "{ran:?}");

    // Changing the rule drops its approval: the brake weighs the new one afresh.
    records(&ctx, "sessions", 10, "3 days", "guest").await;
    sqlx::query("UPDATE retention_rules SET keep = '2 days' WHERE id = $1")
        .bind(mistyped)
        .execute(ctx.pool())
        .await
        .expect("changed");
    let again = pass(&ctx, &[]).await;
    assert_eq!(rule(&again, mistyped).stopped, RuleStop::Held);
}

#[tokio::test]
async fn a_filter_cannot_reach_past_the_cutoff_an_inheritance_child_keeps_its_rows_and_local_times_are_cut_as_local() {
    let ctx = TestContext::new().await;
    sqlx::raw_sql(
        "CREATE TABLE notes (id serial PRIMARY KEY, written date NOT NULL, kind text NOT NULL);
         CREATE TABLE archived_notes () INHERITS (notes);
         CREATE TABLE visits (id serial PRIMARY KEY, at timestamp NOT NULL, kind text NOT NULL);
         INSERT INTO notes (written, kind) SELECT current_date - 400, 'x' FROM generate_series(1, 10);
         INSERT INTO notes (written, kind) SELECT current_date - 30, 'x' FROM generate_series(1, 30);
         INSERT INTO archived_notes (written, kind) SELECT current_date - 400, 'x' FROM generate_series(1, 10);
         INSERT INTO archived_notes (written, kind) SELECT current_date - 30, 'x' FROM generate_series(1, 5);
         INSERT INTO visits (at, kind) SELECT localtimestamp - interval '40 days', 'page' FROM generate_series(1, 5);
         INSERT INTO visits (at, kind) SELECT localtimestamp - interval '20 days', 'page' FROM generate_series(1, 15);",
    )
    .execute(ctx.pool())
    .await
    .expect("tables");
    // A filter that closes the parenthesis it would be written into, were it written into the DELETE: it is the
    // whole body of its own function, so it answers for one row and never reaches the cutoff beside it.
    let escaping = declare(&ctx, "notes", "written", "1 year", Some("kind = 'y') OR (true")).await;
    let visits = declare(&ctx, "visits", "at", "30 days", Some("kind = 'page'")).await;

    let report = pass(&ctx, &[]).await;
    let ran = rule(&report, escaping);
    assert_eq!((ran.deleted, ran.finished), (10, true), "{ran:?}");
    assert_eq!(count(&ctx, "SELECT count(*) FROM ONLY notes").await, 30, "no record younger than a year went");
    assert_eq!(count(&ctx, "SELECT count(*) FROM archived_notes").await, 15, "the child table's rows are its own");
    assert_eq!(rule(&report, visits).deleted, 5, "a timestamp without zone is cut as local time");
    assert_eq!(count(&ctx, "SELECT count(*) FROM visits").await, 15);

    // A deleted rule takes its filter's function with it.
    sqlx::query("DELETE FROM retention_rules").execute(ctx.pool()).await.expect("rules deleted");
    let functions =
        count(&ctx, "SELECT count(*) FROM pg_proc WHERE proname ~ '^asset_sweeper_retention_filter_[0-9]+$'").await;
    assert_eq!(functions, 0);
}

#[tokio::test]
async fn a_rule_the_sweep_may_not_carry_out_stops_naming_the_privilege_it_lacks_and_the_grant_that_fixes_it() {
    let ctx = TestContext::new().await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("{SESSIONS}; GRANT SELECT ON sessions TO asset_sweeper_sweep")))
        .execute(ctx.pool())
        .await
        .expect("a table the sweep may read, not delete from");
    records(&ctx, "sessions", 10, "40 days", "guest").await;
    records(&ctx, "sessions", 30, "1 hour", "guest").await;
    let rule_id = declare(&ctx, "sessions", "at", "30 days", None).await;
    // The sweep as deployed: its own login, a member of its group role and nothing more.
    let sweep = TestLogin::new(&ctx.db, "GRANT asset_sweeper_sweep TO {login}").await;
    let pass_as_sweep = async || {
        let settings = ctx.settings(&[("DATABASE_URL", &sweep.url)]);
        let sweeper = Sweeper::new(platform::db::pool(&settings.database), ctx.sqs.clone(), settings)
            .with_storage(ctx.s3.clone());
        let report = sweeper.run_pass(Instant::now() + Duration::from_secs(600)).await.expect("sweep pass");
        rule(&report, rule_id)
    };

    let stopped = pass_as_sweep().await;
    assert_eq!((stopped.deleted, stopped.stopped), (0, RuleStop::Failed), "{stopped:?}");
    let error = stopped.error.unwrap_or_default();
    assert!(
        error.contains(&format!("the sweep's role {} lacks DELETE and UPDATE of a column", sweep.name))
            && error
                .ends_with("on public.sessions: GRANT DELETE, UPDATE (at) ON public.sessions TO asset_sweeper_sweep"),
        "names the role, what it lacks, the table and the fix: {error}"
    );

    sqlx::raw_sql("GRANT DELETE ON sessions TO asset_sweeper_sweep").execute(ctx.pool()).await.expect("DELETE");
    let error = pass_as_sweep().await.error.unwrap_or_default();
    assert!(
        error.contains("lacks UPDATE of a column")
            && error.ends_with("GRANT UPDATE (at) ON public.sessions TO asset_sweeper_sweep"),
        "only what is still missing: {error}"
    );

    // The GRANT it names is the whole fix.
    let fix = error.rsplit_once(": ").map(|(_, grant)| grant.to_owned()).unwrap_or_default();
    sqlx::raw_sql(sqlx::AssertSqlSafe(fix)).execute(ctx.pool()).await.expect("the named GRANT");
    let finished = pass_as_sweep().await;
    assert_eq!((finished.deleted, finished.stopped), (10, RuleStop::Finished), "{finished:?}");
}

#[tokio::test]
async fn a_new_or_changed_rule_deletes_nothing_until_its_delay_ends_and_plan_and_status_show_what_it_will() {
    let ctx = TestContext::new().await;
    sqlx::raw_sql(SESSIONS).execute(ctx.pool()).await.expect("sessions");
    records(&ctx, "sessions", 10, "40 days", "guest").await;
    records(&ctx, "sessions", 30, "1 day", "member").await;
    let delay = [("RECORDS_NEW_RULE_DELAY", "1d")];
    let id = declare(&ctx, "sessions", "at", "30 days", None).await;

    let waiting = pass(&ctx, &delay).await;
    let ran = rule(&waiting, id);
    assert_eq!((ran.deleted, ran.stopped), (0, RuleStop::Waiting), "{ran:?}");
    assert_eq!(ran.weight.map(|w| w.expired), Some(10), "weighed: what it will delete");
    let until = ran.waits_until.expect("when it may first delete");
    assert!(until > chrono::Utc::now() + chrono::Duration::hours(23), "{until}");
    assert_eq!(count(&ctx, "SELECT count(*) FROM sessions").await, 40, "nothing deleted");
    let url = ctx.db.url.as_str();
    let plan = crate::cli::run_with(url, Some(&ctx), &delay, &["plan"]);
    let text = String::from_utf8_lossy(&plan.stdout);
    assert!(text.contains("new or changed, deletes nothing until") && text.contains("would then delete 10"), "{text}");
    let status = crate::cli::run(url, Some(&ctx), &["status"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("WAITING, new or changed, until") && text.contains("it will then delete 10 of 40"), "{text}");

    // The delay over, it applies; a change to its period makes it wait again, a description does not.
    sqlx::query(
        "UPDATE retention_rules SET changed_at = now() - interval '2 days', description = 'guests' WHERE id = $1",
    )
    .bind(id)
    .execute(ctx.pool())
    .await
    .expect("the delay over");
    let applied = pass(&ctx, &delay).await;
    assert_eq!((rule(&applied, id).deleted, rule(&applied, id).stopped), (10, RuleStop::Finished));
    records(&ctx, "sessions", 5, "20 days", "guest").await;
    sqlx::query("UPDATE retention_rules SET keep = '10 days' WHERE id = $1")
        .bind(id)
        .execute(ctx.pool())
        .await
        .expect("changed");
    let changed = pass(&ctx, &delay).await;
    assert_eq!((rule(&changed, id).deleted, rule(&changed, id).stopped), (0, RuleStop::Waiting));
    assert_eq!(count(&ctx, "SELECT count(*) FROM sessions").await, 35);
}
