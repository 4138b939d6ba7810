//! The census (invariant 13) with the real sweep and consumer: a column the sample missed holds destruction back
//! until the census has read it, and is then refused by name; a declared document holding ids where its path does
//! not look is refused naming the path; the census resumes, wraps, and proves a changed column afresh.

use crate::pipeline::{key, last_event, pass, settle_queue};
use integration_tests::fixtures::{object_exists, seed, state};
use integration_tests::{FAILPOINTS, TestContext};
use lifecycle::runs::RunOutcome;
use schema::census::Stop;
use serde_json::Value;
use sqlx::Connection;
use sweep_lambda::record::SweepReport;
use uuid::Uuid;

/// `id` with its first letter in uppercase and the rest in lowercase: neither spelling the recheck matches.
fn mixed_case(id: Uuid) -> String {
    let text = id.to_string();
    match text.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => format!("{}{}{}", &text[..i], text[i..=i].to_uppercase(), &text[i + 1..]),
        None => text,
    }
}

/// The refusal's problems, as the run row records them.
fn problems(report: &SweepReport) -> Vec<Value> {
    report.reason.as_ref().and_then(|r| r["schema_check"]["problems"].as_array().cloned()).unwrap_or_default()
}

/// `rows` rows of `table (ref, note)`: random uuids and a 300-byte note (about twenty rows to a block), with
/// `asset` as the ref of row `at`.
async fn fill(ctx: &TestContext, table: &str, rows: i32, at: i32, asset: Uuid) {
    let sql = format!(
        "INSERT INTO {table} (ref, note)
         SELECT CASE WHEN g = $2 THEN $1 ELSE gen_random_uuid() END, repeat('x', 300)
           FROM generate_series(1, $3) g ORDER BY g"
    );
    sqlx::query(sqlx::AssertSqlSafe(sql)).bind(asset).bind(at).bind(rows).execute(ctx.pool()).await.expect("fill");
}

#[tokio::test]
async fn an_undeclared_column_past_the_sample_holds_deletes_until_the_census_reads_it_then_holds_what_it_names() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let (upload_key, released_key) = (key(ws), key(ws));
    let upload = seed(&ctx, ws, "abandoned", "8 days", &upload_key).await;
    let released = seed(&ctx, ws, "released", "3 days", &released_key).await;
    // An id past any sample: the schema check reads the first 100 values; this is the 151st, blocks in.
    sqlx::raw_sql("CREATE TABLE legacy_links (id serial PRIMARY KEY, ref uuid, note text)")
        .execute(ctx.pool())
        .await
        .expect("table");
    fill(&ctx, "legacy_links", 400, 151, upload).await;

    // One block read: the census has begun and not covered the table.
    let first = pass(&ctx, &[("CENSUS_MAX_BATCHES", "1"), ("CENSUS_BATCH_BLOCKS", "1")]).await;
    assert_eq!(first.outcome, RunOutcome::Ok, "the sample saw nothing: {:?}", first.reason);
    let census = first.census.as_ref().expect("the run records the census");
    assert_eq!((census.batches, census.stopped, census.columns_unproven), (1, Stop::BatchCap, 2));
    assert_eq!(first.enqueued, 2);
    settle_queue(&ctx).await;

    // Retiring (reversible) went on; the delete waits for the census, bytes and rows intact.
    assert_eq!(state(&ctx, released).await.as_deref(), Some("retired"));
    assert_eq!(state(&ctx, upload).await.as_deref(), Some("retired"));
    assert!(object_exists(&ctx.s3, &ctx.bucket, &upload_key).await);
    let (action, evidence) = last_event(&ctx, upload).await;
    assert_eq!((action.as_str(), &evidence["deferred"]["why"]), ("defer", &Value::from("census")));
    let unproven = evidence["deferred"]["unproven"].to_string();
    assert!(unproven.contains("public.legacy_links.ref"), "{unproven}");

    // The census reads on and finds the id: one stray value holds its asset, naming the column and the row, and
    // stops nothing else.
    let second = pass(&ctx, &[]).await;
    assert_eq!(second.outcome, RunOutcome::Ok, "{:?}", second.reason);
    let census = second.census.as_ref().expect("census");
    assert_eq!((census.findings, census.stopped, census.columns_unproven), (1, Stop::CycleComplete, 0));
    sqlx::query("UPDATE assets SET due_at = now() - interval '1 minute' WHERE id = $1")
        .bind(upload)
        .execute(ctx.pool())
        .await
        .expect("due again");
    let third = pass(&ctx, &[]).await;
    assert_eq!((third.outcome, third.enqueued), (RunOutcome::Ok, 1), "{:?}", third.reason);
    settle_queue(&ctx).await;
    assert_eq!(state(&ctx, upload).await.as_deref(), Some("retired"));
    assert!(object_exists(&ctx.s3, &ctx.bucket, &upload_key).await);
    let (action, evidence) = last_event(&ctx, upload).await;
    assert_eq!((action.as_str(), &evidence["deferred"]["why"]), ("defer", &Value::from("found")), "{evidence}");
    assert_eq!(evidence["deferred"]["found_in"], "public.legacy_links.ref");
    assert!(evidence["deferred"]["record"]["ctid"].is_string(), "{evidence}");

    // A column where many rows hold asset ids looks like an undeclared source: the pass refuses naming it.
    sqlx::query("UPDATE legacy_links SET ref = $1 WHERE id <= 120")
        .bind(released)
        .execute(ctx.pool())
        .await
        .expect("refs");
    let refused = pass(&ctx, &[("CENSUS_CYCLE_INTERVAL", "0s")]).await;
    assert_eq!(refused.outcome, RunOutcome::Refused);
    let found = problems(&refused);
    assert!(
        found.iter().any(|p| (p["problem"] == "found_by_census" || p["problem"] == "unexplained_asset_ids")
            && p["column"] == "ref"
            && p["table"] == "legacy_links"),
        "{found:?}"
    );
    assert_eq!(state(&ctx, upload).await.as_deref(), Some("retired"));
    assert!(object_exists(&ctx.s3, &ctx.bucket, &upload_key).await);

    // The operator's exclusion says the column holds no references: the next pass proceeds, and the column's
    // findings go with it.
    sqlx::query(
        "INSERT INTO asset_reference_exclusions (table_name, column_name, reason) VALUES ('legacy_links', 'ref', 'copies')",
    )
    .execute(ctx.pool())
    .await
    .expect("exclusion");
    let fourth = pass(&ctx, &[]).await;
    assert_eq!(fourth.outcome, RunOutcome::Ok, "{:?}", fourth.reason);
    let findings: i64 =
        sqlx::query_scalar("SELECT count(*) FROM census_findings").fetch_one(ctx.pool()).await.expect("n");
    assert_eq!(findings, 0);
}

#[tokio::test]
async fn ids_in_mixed_case_keep_their_assets_and_ids_outside_a_declared_path_are_found() {
    // A failpoint of another test (`census::advance`) would fail this one's census.
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let hero = seed(&ctx, ws, "attached", "3 days", &key(ws)).await;
    let (early, late, moved) = (
        seed(&ctx, ws, "released", "3 days", &key(ws)).await,
        seed(&ctx, ws, "released", "3 days", &key(ws)).await,
        seed(&ctx, ws, "released", "3 days", &key(ws)).await,
    );
    // `early` is written in mixed case before the guards exist (the census must note it), `late` after (the
    // guard notes it as the write commits).
    sqlx::raw_sql(
        "CREATE TABLE pages (id serial PRIMARY KEY, body jsonb);
         CREATE INDEX pages_body ON pages USING gin (body);
         INSERT INTO asset_reference_sources (table_name, column_name, json_path) VALUES ('pages', 'body', '$.hero');",
    )
    .execute(ctx.pool())
    .await
    .expect("declared source");
    sqlx::query(
        "INSERT INTO pages (body)
         SELECT jsonb_build_object('hero', CASE WHEN g = 300 THEN $2 ELSE $1::text END) FROM generate_series(1, 400) g",
    )
    .bind(hero)
    .bind(mixed_case(early))
    .execute(ctx.pool())
    .await
    .expect("pages");
    integration_tests::install_guards(ctx.pool()).await;
    sqlx::query("INSERT INTO pages (body) VALUES (jsonb_build_object('hero', $1::text))")
        .bind(mixed_case(late))
        .execute(ctx.pool())
        .await
        .expect("a page written in mixed case");

    let clean = pass(&ctx, &[]).await;
    assert_eq!(clean.outcome, RunOutcome::Ok, "ids at the declared path are references: {:?}", clean.reason);
    settle_queue(&ctx).await;
    for asset in [early, late] {
        assert_eq!(state(&ctx, asset).await.as_deref(), Some("attached"), "a mixed-case id keeps its asset");
        let (action, evidence) = last_event(&ctx, asset).await;
        assert_eq!(
            (action.as_str(), &evidence["referenced_by"]),
            ("keep", &Value::from("public.pages.body (jsonb $.\"hero\")"))
        );
    }
    assert_eq!(state(&ctx, moved).await.as_deref(), Some("retired"), "nothing refers to it yet");

    // A document format that moved ids to a new field: the path still looks at the old one.
    sqlx::query(
        "INSERT INTO pages (body) VALUES (jsonb_build_object('hero', $1::text, 'gallery', jsonb_build_array($2::text)))",
    )
    .bind(hero)
    .bind(moved)
    .execute(ctx.pool())
    .await
    .expect("a page in the new format");
    // A new cycle reads it at once when the cycle interval allows (a day by default). The id outside the path is a
    // finding that holds its asset (retired, not purged), naming the document.
    let held = pass(&ctx, &[("CENSUS_CYCLE_INTERVAL", "0s")]).await;
    assert_eq!(held.outcome, RunOutcome::Ok, "{:?}", held.reason);
    assert_eq!(finding(&ctx, moved).await.as_deref(), Some("public.pages.body"));

    // In an undeclared text column, inside a URL, in mixed case, past the sample: found by the census, and the
    // asset it names is held.
    let ctx = TestContext::new().await;
    let asset = seed(&ctx, ws, "released", "3 days", &key(ws)).await;
    let spelled = mixed_case(asset);
    sqlx::raw_sql("CREATE TABLE articles (id serial PRIMARY KEY, html text)").execute(ctx.pool()).await.expect("table");
    sqlx::query(
        "INSERT INTO articles (html)
         SELECT CASE WHEN g = 500 THEN '<img src=\"https://cdn.example.com/i/' || $1 || '.png\">' ELSE 'no image' END
           FROM generate_series(1, 600) g ORDER BY g",
    )
    .bind(&spelled)
    .execute(ctx.pool())
    .await
    .expect("articles");
    let found = pass(&ctx, &[]).await;
    assert_eq!(found.outcome, RunOutcome::Ok, "{:?}", found.reason);
    settle_queue(&ctx).await;
    assert_eq!(state(&ctx, asset).await.as_deref(), Some("released"));
    let (action, evidence) = last_event(&ctx, asset).await;
    assert_eq!((action.as_str(), &evidence["deferred"]["found_in"]), ("defer", &Value::from("public.articles.html")));
}

/// The column a census finding of `asset` names, if any.
async fn finding(ctx: &TestContext, asset: Uuid) -> Option<String> {
    sqlx::query_scalar(
        "SELECT asset_sweeper_column_name(c) FROM census_findings f
           JOIN census_columns c ON c.relid = f.relid AND c.attnum = f.attnum WHERE f.asset_id = $1",
    )
    .bind(asset)
    .fetch_optional(ctx.pool())
    .await
    .expect("finding")
}

/// (done_cycle, proven) of the census rows of `table`'s column `column`.
async fn census_row(ctx: &TestContext, table: &str, column: &str) -> Vec<(i64, bool)> {
    sqlx::query_as(
        "SELECT done_cycle, proven_at IS NOT NULL FROM census_columns WHERE table_name = $1 AND column_name = $2
          ORDER BY relid",
    )
    .bind(table)
    .bind(column)
    .fetch_all(ctx.pool())
    .await
    .expect("census row")
}

#[tokio::test]
async fn the_census_resumes_across_passes_wraps_and_proves_a_new_or_changed_column_afresh() {
    // A failpoint of another test (`census::advance`) would fail this one's census.
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    sqlx::raw_sql(
        "CREATE TABLE links (id serial PRIMARY KEY, ref uuid, note text);
         CREATE TABLE events (at date NOT NULL, payload jsonb) PARTITION BY RANGE (at);
         CREATE TABLE events_2025 PARTITION OF events FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
         CREATE TABLE events_2026 PARTITION OF events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
         INSERT INTO events SELECT date '2025-06-01' + g % 400, jsonb_build_object('n', g) FROM generate_series(1, 2000) g;",
    )
    .execute(ctx.pool())
    .await
    .expect("tables");
    fill(&ctx, "links", 400, 0, Uuid::new_v4()).await;
    let small = [("CENSUS_MAX_BATCHES", "3"), ("CENSUS_BATCH_BLOCKS", "2"), ("CENSUS_CYCLE_INTERVAL", "0s")];

    // Resumes: each pass reads three batches of two blocks and the cursor moves on.
    let mut passes = Vec::new();
    loop {
        let report = pass(&ctx, &small).await;
        let census = report.census.clone().expect("census");
        passes.push(census.clone());
        if census.stopped == Stop::CycleComplete || passes.len() > 40 {
            break;
        }
        assert_eq!((census.batches, census.stopped), (3, Stop::BatchCap));
    }
    assert!(passes.len() > 3, "the census took several passes: {passes:?}");
    let done: Vec<i64> = passes.iter().map(|p| p.columns_done).collect();
    assert!(done.windows(2).all(|w| w[0] <= w[1]), "progress only grows: {done:?}");
    let last = passes.last().expect("a pass");
    assert_eq!((last.stopped, last.columns_unproven), (Stop::CycleComplete, 0), "{last:?}");
    assert!(last.last_cycle_seconds.is_some());
    // A partitioned table is read on each partition.
    assert_eq!(census_row(&ctx, "events", "payload").await, [(1, true), (1, true)]);

    assert_eq!(last.columns_done, last.columns);

    // Rests: within the cycle interval (a day by default) nothing is read again.
    let resting = pass(&ctx, &[]).await.census.expect("census");
    assert_eq!((resting.stopped, resting.batches, resting.cycle), (Stop::Resting, 0, 2), "{resting:?}");

    // Wraps: past the interval the next pass starts cycle 2, and proofs from cycle 1 stand while it reads.
    let wrapped = pass(&ctx, &small).await.census.expect("census");
    assert_eq!((wrapped.cycle, wrapped.columns_unproven), (2, 0));
    assert!(wrapped.columns_done < wrapped.columns, "{wrapped:?}");

    // A changed type is a new column to the census; so is one added. Both are read before anything else.
    sqlx::raw_sql("ALTER TABLE links ALTER COLUMN note TYPE varchar(400); ALTER TABLE links ADD COLUMN extra uuid")
        .execute(ctx.pool())
        .await
        .expect("alter");
    let changed = pass(&ctx, &[("CENSUS_MAX_BATCHES", "1"), ("CENSUS_BATCH_BLOCKS", "1")]).await;
    assert_eq!(census_row(&ctx, "links", "note").await, [(0, false)]);
    let verdict: Value = sqlx::query_scalar("SELECT unproven FROM schema_verdicts ORDER BY id DESC LIMIT 1")
        .fetch_one(ctx.pool())
        .await
        .expect("verdict");
    let unproven = verdict.to_string();
    assert!(unproven.contains("links.note") && unproven.contains("links.extra"), "{unproven}");
    assert_eq!(changed.outcome, RunOutcome::Ok);
    let proven = pass(&ctx, &[]).await.census.expect("census");
    assert_eq!(proven.columns_unproven, 0, "{proven:?}");
    assert!(census_row(&ctx, "links", "note").await[0].1);
}

#[tokio::test]
async fn a_batch_that_times_out_is_read_in_halves_and_a_failed_census_holds_deletes_without_stopping_the_pass() {
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    sqlx::raw_sql("CREATE TABLE links (id serial PRIMARY KEY, ref uuid, note text)")
        .execute(ctx.pool())
        .await
        .expect("table");
    fill(&ctx, "links", 400, 0, Uuid::new_v4()).await;

    // Every batch of more than four blocks is cancelled by the server's statement timeout: the census halves its
    // batches and still reads the whole table in the pass.
    fail::cfg("census::block_limit", "return(4)").expect("failpoint");
    let halved = pass(&ctx, &[("CENSUS_BATCH_BLOCKS", "64")]).await;
    fail::remove("census::block_limit");
    assert!(halved.census_error.is_none(), "{:?}", halved.census_error);
    let census = halved.census.expect("census");
    assert_eq!((census.stopped, census.columns_unproven), (Stop::CycleComplete, 0), "{census:?}");

    // A census that fails is recorded; the pass still checks, brakes and claims, and the delete waits.
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let upload_key = key(ws);
    let upload = seed(&ctx, ws, "abandoned", "8 days", &upload_key).await;
    sqlx::raw_sql("CREATE TABLE links (id serial PRIMARY KEY, ref uuid)").execute(ctx.pool()).await.expect("table");
    fail::cfg("census::advance", "return").expect("failpoint");
    let failed = pass(&ctx, &[]).await;
    fail::remove("census::advance");
    assert_eq!((failed.outcome, failed.enqueued), (RunOutcome::Ok, 1));
    let recorded: Value = sqlx::query_scalar("SELECT census FROM sweep_runs WHERE id = $1")
        .bind(failed.run_id)
        .fetch_one(ctx.pool())
        .await
        .expect("run row");
    assert!(recorded["error"].as_str().is_some_and(|e| e.contains("injected")), "{recorded}");
    settle_queue(&ctx).await;
    assert_eq!(state(&ctx, upload).await.as_deref(), Some("retired"));
    assert!(object_exists(&ctx.s3, &ctx.bucket, &upload_key).await);
    assert_eq!(last_event(&ctx, upload).await.1["deferred"]["why"], "census");
}

#[tokio::test]
async fn a_verdict_recorded_before_the_census_existed_proves_nothing() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let upload_key = key(ws);
    let upload = seed(&ctx, ws, "abandoned", "8 days", &upload_key).await;
    let report = pass(&ctx, &[]).await;
    assert_eq!((report.outcome, report.enqueued), (RunOutcome::Ok, 1));
    // As an earlier build recorded it: no word on the census.
    sqlx::query("UPDATE schema_verdicts SET unproven = NULL").execute(ctx.pool()).await.expect("an older verdict");
    settle_queue(&ctx).await;
    assert_eq!(state(&ctx, upload).await.as_deref(), Some("retired"));
    assert!(object_exists(&ctx.s3, &ctx.bucket, &upload_key).await);
    assert_eq!(last_event(&ctx, upload).await.1["deferred"]["why"], "census");
}

#[tokio::test]
async fn an_id_in_a_composite_with_a_null_field_is_found_by_the_census() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let asset = seed(&ctx, ws, "attached", "3 days", &key(ws)).await;
    // A composite with one NULL field is neither NULL nor NOT NULL: its other field is read all the same. Past the
    // sample's first values, in a row where nothing else is set.
    sqlx::raw_sql("CREATE TYPE caption AS (label text, credit text); CREATE TABLE slides (id serial, c caption)")
        .execute(ctx.pool())
        .await
        .expect("table");
    sqlx::query(
        "INSERT INTO slides (c) SELECT CASE WHEN g = 151 THEN ROW('see ' || $1::text, NULL)::caption
                                           ELSE ROW('slide ' || g, 'studio')::caption END
           FROM generate_series(1, 400) g ORDER BY g",
    )
    .bind(asset)
    .execute(ctx.pool())
    .await
    .expect("rows");
    let report = pass(&ctx, &[]).await;
    assert_eq!(report.census.expect("census").stopped, Stop::CycleComplete);
    assert_eq!(finding(&ctx, asset).await.as_deref(), Some("public.slides.c"));
}

/// The unproven names of the newest verdict.
async fn newest_unproven(ctx: &TestContext) -> Value {
    sqlx::query_scalar("SELECT unproven FROM schema_verdicts ORDER BY id DESC LIMIT 1")
        .fetch_one(ctx.pool())
        .await
        .expect("the newest verdict")
}

#[tokio::test]
async fn a_census_cycle_slower_than_half_of_retention_holds_deletes_until_one_ends_within_it() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let upload_key = key(ws);
    sqlx::raw_sql("CREATE TABLE links (id serial PRIMARY KEY, ref uuid)").execute(ctx.pool()).await.expect("table");
    let first = pass(&ctx, &[]).await;
    assert_eq!(first.census.expect("census").columns_unproven, 0);
    assert_eq!(newest_unproven(&ctx).await, serde_json::json!([]));

    // The last full cycle took 16 days, and the census rests a day before the next: two such cycles and the rest
    // outlast RETENTION (30 days), so a reference written behind that scan could have waited past a purge, and no
    // column counts as proven.
    let upload = seed(&ctx, ws, "abandoned", "8 days", &upload_key).await;
    let released = seed(&ctx, ws, "released", "3 days", &key(ws)).await;
    sqlx::query("UPDATE census_state SET last_cycle_seconds = 16 * 86400").execute(ctx.pool()).await.expect("slow");
    let slow = pass(&ctx, &[("CENSUS_CYCLE_INTERVAL", "1d")]).await;
    assert_eq!((slow.outcome, slow.enqueued), (RunOutcome::Ok, 2), "{:?}", slow.reason);
    let unproven = newest_unproven(&ctx).await.to_string();
    assert!(
        unproven.contains("last full cycle took 16days, longer than the 14days 12h a cycle may take (half of 30days"),
        "{unproven}"
    );
    settle_queue(&ctx).await;
    assert_eq!(state(&ctx, upload).await.as_deref(), Some("retired"));
    assert_eq!(state(&ctx, released).await.as_deref(), Some("retired"), "retiring goes on");
    assert!(object_exists(&ctx.s3, &ctx.bucket, &upload_key).await);
    let (action, evidence) = last_event(&ctx, upload).await;
    assert_eq!((action.as_str(), &evidence["deferred"]["why"]), ("defer", &Value::from("census")), "{evidence}");
    assert!(evidence["deferred"]["unproven"].to_string().contains("a cycle may take"), "{evidence}");
    // And the health page asks for a person, saying why.
    let env = [("CENSUS_CYCLE_INTERVAL", "1d")];
    let status = crate::cli::run_with(&ctx.db.url, Some(&ctx), &env, &["status"]);
    let page = String::from_utf8_lossy(&status.stdout);
    assert_eq!(status.status.code(), Some(1), "{page}");
    assert!(
        page.contains("! deletes and purges wait in every workspace: the census's last full cycle took 16days"),
        "{page}"
    );

    // A longer RETENTION does not cover it: the released asset was retired under 30 days, and its purge stays
    // where it was. A cycle that ends in time (this pass's, in seconds) does.
    pass(&ctx, &[("CENSUS_CYCLE_INTERVAL", "1d"), ("RETENTION", "40d")]).await;
    let unproven = newest_unproven(&ctx).await.to_string();
    assert!(unproven.contains("14days 12h a cycle may take (half of 30days"), "{unproven}");
    sqlx::query("UPDATE census_state SET last_cycle_seconds = 16 * 86400").execute(ctx.pool()).await.expect("slow");
    let quick = pass(&ctx, &[("CENSUS_CYCLE_INTERVAL", "0s")]).await;
    assert_eq!(quick.census.expect("census").stopped, Stop::CycleComplete);
    assert_eq!(newest_unproven(&ctx).await, serde_json::json!([]));
}

#[tokio::test]
async fn the_guard_reads_a_path_that_selects_an_array_and_notes_a_mixed_case_spelling_as_the_write_commits() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let asset = seed(&ctx, ws, "released", "3 days", &key(ws)).await;
    sqlx::raw_sql(
        "CREATE TABLE albums (id serial PRIMARY KEY, body jsonb);
         CREATE INDEX albums_body ON albums USING gin (body);
         INSERT INTO asset_reference_sources (table_name, column_name, json_path) VALUES ('albums', 'body', '$.gallery');",
    )
    .execute(ctx.pool())
    .await
    .expect("declared source");
    integration_tests::install_guards(ctx.pool()).await;
    sqlx::query("INSERT INTO albums (body) VALUES (jsonb_build_object('gallery', jsonb_build_array($1::text)))")
        .bind(mixed_case(asset))
        .execute(ctx.pool())
        .await
        .expect("an album");
    // Before any pass: only the guard can have noted it, and only by reading the array's elements.
    let noted: Vec<String> = sqlx::query_scalar("SELECT spelling FROM asset_id_spellings WHERE asset_id = $1")
        .bind(asset)
        .fetch_all(ctx.pool())
        .await
        .expect("spellings");
    assert_eq!(noted, [mixed_case(asset)]);
    // A statement rewriting every album: the new spelling is noted as well.
    let braced = format!("{{{}}}", mixed_case(asset).to_uppercase().replacen('-', "", 1));
    sqlx::raw_sql("INSERT INTO albums (body) SELECT '{}' FROM generate_series(1, 50)")
        .execute(ctx.pool())
        .await
        .expect("albums naming nothing");
    sqlx::query("UPDATE albums SET body = jsonb_build_object('gallery', jsonb_build_array($1::text, id::text))")
        .bind(&braced)
        .execute(ctx.pool())
        .await
        .expect("every album rewritten");
    let noted: Vec<String> =
        sqlx::query_scalar("SELECT spelling FROM asset_id_spellings WHERE asset_id = $1 ORDER BY spelling")
            .bind(asset)
            .fetch_all(ctx.pool())
            .await
            .expect("spellings");
    let mut spellings = vec![mixed_case(asset), braced];
    spellings.sort();
    assert_eq!(noted, spellings);
    pass(&ctx, &[]).await;
    settle_queue(&ctx).await;
    assert_eq!(state(&ctx, asset).await.as_deref(), Some("attached"));
}

#[tokio::test]
async fn a_table_rewritten_under_a_scan_is_read_again_from_its_first_block() {
    // Its first pass reads one batch of five blocks: `census::block_limit`, set by another test, would cancel it.
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let asset = seed(&ctx, ws, "released", "3 days", &key(ws)).await;
    sqlx::raw_sql("CREATE TABLE legacy_links (id serial PRIMARY KEY, ref uuid, note text)")
        .execute(ctx.pool())
        .await
        .expect("table");
    fill(&ctx, "legacy_links", 400, 390, asset).await;
    // Five blocks read: the scan's cursor stands at block 5, far from the asset's row.
    let first = pass(&ctx, &[("CENSUS_MAX_BATCHES", "1"), ("CENSUS_BATCH_BLOCKS", "5")]).await;
    assert_eq!(first.census.expect("census").blocks, 5);
    // Most rows go and the table is rewritten: the rest, the asset's row among them, now sit below the cursor.
    for step in ["DELETE FROM legacy_links WHERE id < 381", "VACUUM FULL legacy_links"] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(step)).execute(ctx.pool()).await.expect("rewrite");
    }
    let second = pass(&ctx, &[]).await;
    assert_eq!(second.outcome, RunOutcome::Ok, "{:?}", second.reason);
    assert_eq!(
        finding(&ctx, asset).await.as_deref(),
        Some("public.legacy_links.ref"),
        "a cursor into the old file would have proven the column without finding the asset"
    );
}

/// One value of a megabyte, dense with keys of ours and ids (anyone who may write free text can write one), is
/// read within its batch: the column is proven in the pass, every adopted key it names is noted, and the asset it names is
/// held. Before, the key scan's cost grew far faster than the text and the batch outlasted its statement timeout:
/// the column was never proven and every delete waited for ever.
#[tokio::test]
async fn a_megabyte_of_keys_and_ids_in_one_value_is_scanned_within_its_batch() {
    const KEY_PATTERN: &str = r"(?P<workspace>[0-9a-f-]{36})/[0-9a-f-]{36}\.png";
    // A failpoint of another test (`census::advance`) would fail this one's census.
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let asset = seed(&ctx, ws, "released", "3 days", &key(ws)).await;
    sqlx::raw_sql("CREATE TABLE comments (id serial PRIMARY KEY, body text)").execute(ctx.pool()).await.expect("table");
    // 13 000 links to keys of ours, and the asset's id among them; one key in 26 is an adopted file's (bytes no row
    // knew, which only a record naming its key keeps).
    let keys: Vec<String> = (0..13_000).map(|_| format!("{ws}/{}.png", Uuid::new_v4())).collect();
    let body: String = keys.iter().map(|k| format!("see https://cdn.example.com/{k}, ")).collect();
    sqlx::query("INSERT INTO comments (body) VALUES ($1 || ' and ' || $2::text)")
        .bind(body)
        .bind(asset)
        .execute(ctx.pool())
        .await
        .expect("the comment");
    let layout = platform::keys::KeyLayout::new(&format!("{ws}/"), KEY_PATTERN).expect("the layout");
    let adopted: Vec<String> = keys.iter().step_by(26).cloned().collect();
    crate::adoption::adopt_keys(&ctx, &adopted, ws, &layout).await;
    let size: i32 =
        sqlx::query_scalar("SELECT octet_length(body) FROM comments").fetch_one(ctx.pool()).await.expect("size");
    assert!(size > 1_000_000, "{size}");

    let prefix = format!("{ws}/");
    let report = pass(&ctx, &[("RECONCILE_PREFIXES", prefix.as_str()), ("RECONCILE_KEY_PATTERN", KEY_PATTERN)]).await;
    assert!(report.census_error.is_none(), "{:?}", report.census_error);
    let census = report.census.as_ref().expect("census");
    assert_eq!((census.stopped, census.columns_unproven), (Stop::CycleComplete, 0), "{census:?}");
    // Each adopted key the comment names is noted; the others name nothing a record could keep.
    let named: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM adopted_assets d
          WHERE EXISTS (SELECT 1 FROM named_keys n WHERE asset_sweeper_names_key(n.storage_key, d.storage_key))",
    )
    .fetch_one(ctx.pool())
    .await
    .expect("named");
    assert_eq!(named, 500, "every adopted key the comment names is noted");
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM named_keys").fetch_one(ctx.pool()).await.expect("kept");
    assert_eq!(kept, 500, "and nothing else");
    assert_eq!(finding(&ctx, asset).await.as_deref(), Some("public.comments.body"));
}

/// A batch over a table of 200 text and JSON columns stays within its statement limit, whatever the database's own
/// JIT settings: Postgres JIT-compiles a statement that wide for minutes (174 columns: three to six), and its
/// statement timeout does not interrupt compilation, so the census never advanced and a pass outlived its
/// Lambda. The sweeper's sessions run without JIT; here the database asks for it on every statement.
#[tokio::test]
async fn a_batch_over_two_hundred_columns_stays_within_its_limit_whatever_the_databases_jit_settings() {
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    let jit: bool = sqlx::query_scalar("SELECT pg_jit_available()").fetch_one(ctx.pool()).await.expect("jit");
    if !jit {
        eprintln!("note: this server has no JIT; the batch limit is tested without it");
    }
    let database: String = sqlx::query_scalar("SELECT current_database()").fetch_one(ctx.pool()).await.expect("db");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE \"{database}\" SET jit = on; ALTER DATABASE \"{database}\" SET jit_above_cost = 0;
         ALTER DATABASE \"{database}\" SET jit_inline_above_cost = 0;
         ALTER DATABASE \"{database}\" SET jit_optimize_above_cost = 0;"
    )))
    .execute(ctx.pool())
    .await
    .expect("JIT on every statement");
    integration_tests::fixtures::grow_wide_table(ctx.pool(), "settings_wide", 200, 2_000).await;
    let ws = Uuid::new_v4();
    let asset = seed(&ctx, ws, "released", "3 days", &key(ws)).await;
    sqlx::query("UPDATE settings_wide SET c151 = c151 || ' was ' || $1::text WHERE id = 1000")
        .bind(asset)
        .execute(ctx.pool())
        .await
        .expect("an id in the 151st column");

    // New sessions, which take the database's settings, and a batch limit of five seconds (minutes short of what compiling would take).
    let settings = ctx.settings(&[("CENSUS_BATCH_TIMEOUT", "5s")]);
    let fresh = platform::db::pool(&settings.database);
    let report = sweep_lambda::Sweeper::new(fresh, ctx.sqs.clone(), settings)
        .with_storage(ctx.s3.clone())
        .run_pass(std::time::Instant::now() + std::time::Duration::from_secs(600))
        .await
        .expect("sweep pass");
    assert!(report.census_error.is_none(), "{:?}", report.census_error);
    let census = report.census.as_ref().expect("census");
    assert_eq!((census.stopped, census.columns_unproven, census.unread), (Stop::CycleComplete, 0, 0), "{census:?}");
    // A batch is its statement (done or cancelled within the 5 s limit) and the sweep's own search of the texts it
    // fetched; one compiled by JIT ran for minutes, past any limit.
    assert!(census.longest_batch_ms < 15_000, "{census:?}");
    eprintln!("200 columns, 2 000 rows: longest batch {} ms, {} batches", census.longest_batch_ms, census.batches);
    assert_eq!(finding(&ctx, asset).await.as_deref(), Some("public.settings_wide.c151"));
}

/// A pass whose census statement outlives its share (as one Postgres JIT-compiled for minutes did, past a statement
/// timeout that cannot interrupt compilation) and then has no time left to claim what is due advanced none of its
/// work: it is recorded `stalled`, not `ok`, naming the census statement and the claim; it is no good pass for the
/// heartbeat (`SweepCompleted` 0) and `status` names what held it. The next pass, unheld, claims.
#[tokio::test]
async fn a_pass_held_by_a_statement_past_its_share_is_recorded_stalled_naming_the_statement() {
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    seed(&ctx, ws, "released", "3 days", &key(ws)).await;
    sqlx::raw_sql("CREATE TABLE wide_notes (id serial PRIMARY KEY, ref uuid, note text)")
        .execute(ctx.pool())
        .await
        .expect("table");
    fill(&ctx, "wide_notes", 400, 0, Uuid::new_v4()).await;
    fail::cfg("census::stall", "return(4)").expect("failpoint");
    let settings = ctx.settings(&[("CENSUS_BATCH_TIMEOUT", "1s")]);
    let report = sweep_lambda::Sweeper::new(ctx.pool().clone(), ctx.sqs.clone(), settings)
        .with_storage(ctx.s3.clone())
        .run_pass(std::time::Instant::now() + std::time::Duration::from_secs(3))
        .await;
    fail::remove("census::stall");
    let report = report.expect("the pass ends");
    assert_eq!((report.outcome, report.claimed), (RunOutcome::Stalled, 0), "{:?}", report.reason);
    let (outcome, reason): (String, Value) = sqlx::query_as("SELECT outcome, reason FROM sweep_runs WHERE id = $1")
        .bind(report.run_id)
        .fetch_one(ctx.pool())
        .await
        .expect("run row");
    assert_eq!(outcome, "stalled");
    let held = &reason["stalled"];
    assert_eq!((&held[0]["step"], &held[1]["step"]), (&Value::from("census"), &Value::from("claim")), "{reason}");
    let by = held[0]["by"].as_str().unwrap_or_default();
    assert!(by.contains("statement over public.wide_notes") && by.contains("1s limit"), "{by}");
    assert!(held[1]["by"].as_str().is_some_and(|b| b.starts_with("1 asset(s) due")), "{reason}");
    let metrics: Value = serde_json::from_str(&sweep_lambda::record::metrics_line(&report)).expect("metrics");
    assert_eq!((&metrics["SweepCompleted"], &metrics["SweepStalled"]), (&Value::from(0), &Value::from(1)), "{metrics}");
    let status = crate::cli::run(&ctx.db.url, Some(&ctx), &["status"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert_eq!(status.status.code(), Some(1), "{text}");
    assert!(text.contains("the last pass was stalled") && text.contains("census: the census statement over"), "{text}");

    let next = pass(&ctx, &[]).await;
    assert_eq!((next.outcome, next.claimed), (RunOutcome::Ok, 1), "{:?}", next.reason);
}

/// A batch size a statement timeout halved is remembered for that table: the next pass starts from it (and doubles it
/// while its batches are quick), instead of timing out again at the configured size. Before, every pass forgot it.
#[tokio::test]
async fn a_batch_size_a_timeout_halved_is_remembered_for_that_table() {
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    sqlx::raw_sql("CREATE TABLE heavy_docs (id serial PRIMARY KEY, ref uuid, note text)")
        .execute(ctx.pool())
        .await
        .expect("table");
    fill(&ctx, "heavy_docs", 2_000, 0, Uuid::new_v4()).await;
    let mut conn = ctx.pool().acquire().await.expect("connection");
    let derived = schema::derive(&mut conn).await.expect("derive");
    let targets: Vec<schema::census::Target> =
        schema::census::targets(&derived.sources, &derived.problems, &derived.candidates)
            .into_iter()
            .filter(|t| t.table == "heavy_docs")
            .collect();
    let budget = |max_batches| schema::census::Budget {
        until: std::time::Instant::now() + std::time::Duration::from_secs(600),
        max_batches,
        batch_blocks: 64,
        batch_timeout: std::time::Duration::from_secs(30),
        cycle_interval: std::time::Duration::ZERO,
    };
    // Batches of more than one block are cancelled: 64, 32, 16, 8, 4 and 2 time out, then one block is read.
    fail::cfg("census::block_limit", "return(1)").expect("failpoint");
    let first =
        schema::census::advance(&mut conn, &mut schema::census::Readers::default(), &targets, budget(7), None).await;
    fail::remove("census::block_limit");
    let first = first.expect("census");
    assert_eq!((first.stopped, first.blocks, first.batches), (Stop::BatchCap, 1, 7), "{first:?}");
    let remembered: Option<i32> =
        sqlx::query_scalar("SELECT min(batch_blocks) FROM census_columns WHERE table_name = 'heavy_docs'")
            .fetch_one(&mut *conn)
            .await
            .expect("batch size");
    assert_eq!(remembered, Some(2), "halved to one block, doubled after its one quick batch, and kept for the table");
    let total: i64 =
        sqlx::query_scalar("SELECT pg_relation_size('heavy_docs') / 8192").fetch_one(&mut *conn).await.expect("size");
    assert!(total > 64, "a table larger than one configured batch: {total} blocks");
    // The next pass starts at two blocks and doubles while its batches are quick: 2, 4, … 64. A pass that forgot
    // would read the rest in two batches of 64.
    let next =
        schema::census::advance(&mut conn, &mut schema::census::Readers::default(), &targets, budget(u32::MAX), None)
            .await
            .expect("census");
    assert_eq!(next.stopped, Stop::CycleComplete, "{next:?}");
    assert!(next.batches >= 5, "{next:?}: {total} blocks");
    let after: Option<i32> =
        sqlx::query_scalar("SELECT min(batch_blocks) FROM census_columns WHERE table_name = 'heavy_docs'")
            .fetch_one(&mut *conn)
            .await
            .expect("batch size");
    assert_eq!(after, None, "quick batches grew it back to the configured size");
}

/// Runs the census over `table` alone to the end of its cycle, its batches of two blocks read in rounds by its own
/// connection and one lent reader.
async fn census_with_a_reader(ctx: &TestContext, table: &str) -> schema::census::Progress {
    let mut conn = ctx.pool().acquire().await.expect("connection");
    let mut readers = schema::census::Readers::lent(vec![ctx.pool().acquire().await.expect("a reader")]);
    let derived = schema::derive(&mut conn).await.expect("derive");
    let targets: Vec<schema::census::Target> =
        schema::census::targets(&derived.sources, &derived.problems, &derived.candidates)
            .into_iter()
            .filter(|t| t.table == table)
            .collect();
    let budget = schema::census::Budget {
        until: std::time::Instant::now() + std::time::Duration::from_secs(600),
        max_batches: u32::MAX,
        batch_blocks: 2,
        batch_timeout: std::time::Duration::from_secs(30),
        cycle_interval: std::time::Duration::ZERO,
    };
    schema::census::advance(&mut conn, &mut readers, &targets, budget, None).await.expect("census")
}

#[tokio::test]
async fn two_readers_find_what_every_range_holds_and_a_range_a_reader_failed_is_read_again() {
    // Its own failpoint, and another test's (`census::advance`) would fail this one's census.
    let _turn = FAILPOINTS.lock().await;
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    // About twenty rows to a block: an asset every 30 rows puts one in every range of two blocks, the ranges the
    // lent reader reads among them.
    let mut assets = Vec::new();
    for _ in 0..12 {
        assets.push(seed(&ctx, ws, "released", "3 days", &key(ws)).await);
    }
    for table in ["spread_links", "unlucky_links"] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "CREATE TABLE {table} (id serial PRIMARY KEY, ref uuid, note text)"
        )))
        .execute(ctx.pool())
        .await
        .expect("table");
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {table} (ref, note)
             SELECT CASE WHEN g % 30 = 0 THEN ($1::uuid[])[g / 30] ELSE gen_random_uuid() END, repeat('x', 300)
               FROM generate_series(1, 360) g ORDER BY g"
        )))
        .bind(&assets)
        .execute(ctx.pool())
        .await
        .expect("rows");
    }
    let blocks: i64 =
        sqlx::query_scalar("SELECT pg_relation_size('spread_links') / 8192").fetch_one(ctx.pool()).await.expect("size");
    assert!(blocks >= 16, "ranges enough for several rounds: {blocks} blocks");
    let found_in = |table: &'static str| {
        let ctx = &ctx;
        async move {
            let found: i64 = sqlx::query_scalar(
                "SELECT count(DISTINCT f.asset_id) FROM census_findings f
                   JOIN census_columns c ON c.relid = f.relid AND c.attnum = f.attnum WHERE c.table_name = $1",
            )
            .bind(table)
            .fetch_one(ctx.pool())
            .await
            .expect("findings");
            found
        }
    };

    let read = census_with_a_reader(&ctx, "spread_links").await;
    assert_eq!((read.stopped, read.readers, read.blocks), (Stop::CycleComplete, 2, blocks as u64), "{read:?}");
    assert_eq!(read.batches, (blocks as u64).div_ceil(2), "one statement per range of two blocks: {read:?}");
    assert_eq!(found_in("spread_links").await, 12, "every range's asset, the lent reader's among them");
    assert_eq!(census_row(&ctx, "spread_links", "ref").await, vec![(1, true)]);

    // Every batch a lent reader runs fails: each round moves past its first range alone, which the census's own
    // connection read, and the range after it is the next round's first. Nothing is skipped.
    fail::cfg("census::lent_reader", "return").expect("failpoint");
    let read = census_with_a_reader(&ctx, "unlucky_links").await;
    fail::remove("census::lent_reader");
    assert_eq!((read.stopped, read.blocks), (Stop::CycleComplete, blocks as u64), "{read:?}");
    assert_eq!(found_in("unlucky_links").await, 12, "each range read again after its reader failed");
    assert_eq!((read.columns_unproven, census_row(&ctx, "unlucky_links", "ref").await.len()), (0, 1), "{read:?}");
}

/// `url` answers once the standby has replayed the test's database (created on the primary moments ago).
async fn standby_has(url: &str) {
    for _ in 0..200 {
        if sqlx::PgConnection::connect(url).await.is_ok() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the standby never had the test's database");
}

/// The census reads a physical standby when `CENSUS_DATABASE_URL` names one, and writes what it found on the
/// primary. What a standby answers is as old as what it replayed: with its replay paused after the primary wrote an
/// asset's id, the census reads nothing there (its lag is part of when it read) rather than prove the column empty;
/// once it has replayed, the id is found. Reading the paused standby as if it were current, the second pass would
/// have completed a cycle that never saw the id.
#[tokio::test]
async fn the_census_reads_a_standby_only_once_it_has_replayed_what_the_primary_wrote_before_the_pass() {
    // Every range on a standby is a reader's: another test's `census::lent_reader` failpoint would fail them all.
    let _turn = FAILPOINTS.lock().await;
    let pair = integration_tests::Standby::get().await;
    let ctx = TestContext::on_server(pair.primary.clone()).await;
    let standby_url = ctx.db.on_server(&pair.standby);
    standby_has(&standby_url).await;
    let ws = Uuid::new_v4();
    let asset = seed(&ctx, ws, "released", "3 days", &key(ws)).await;
    sqlx::raw_sql("CREATE TABLE standby_links (id serial PRIMARY KEY, ref uuid, note text)")
        .execute(ctx.pool())
        .await
        .expect("table");
    // No row holds the asset yet.
    fill(&ctx, "standby_links", 400, 0, asset).await;
    let replica = [
        ("CENSUS_DATABASE_URL", standby_url.as_str()),
        ("CENSUS_CYCLE_INTERVAL", "0s"),
        ("CENSUS_BATCH_TIMEOUT", "2s"),
    ];

    let first = pass(&ctx, &replica).await;
    assert_eq!(first.census_error, None);
    let census = first.census.as_ref().expect("the run records the census");
    assert_eq!((census.stopped, census.columns_unproven, census.findings), (Stop::CycleComplete, 0, 0), "{census:?}");
    assert!(census.replica_wait_ms.is_some(), "the run record says the census read its standby: {census:?}");

    let mut standby = sqlx::PgConnection::connect(&pair.standby).await.expect("the standby's admin");
    sqlx::raw_sql("SELECT pg_wal_replay_pause()").execute(&mut standby).await.expect("pause");
    // Past the schema check's sample: only the census can find it.
    sqlx::query("UPDATE standby_links SET ref = $1 WHERE id = 151").bind(asset).execute(ctx.pool()).await.expect("id");
    let paused = pass(&ctx, &replica).await;
    sqlx::raw_sql("SELECT pg_wal_replay_resume()").execute(&mut standby).await.expect("resume");
    let error = paused.census_error.clone().unwrap_or_default();
    assert!(error.contains("behind the primary") && error.contains("read nothing this pass"), "{paused:?}");
    assert!(paused.census.is_none(), "{paused:?}");

    let resumed = pass(&ctx, &replica).await;
    assert_eq!(resumed.census_error, None);
    let census = resumed.census.as_ref().expect("census");
    assert_eq!((census.stopped, census.findings), (Stop::CycleComplete, 1), "{census:?}");
    let found: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM census_findings f JOIN pg_class c ON c.oid = f.relid WHERE f.asset_id = $1",
    )
    .bind(asset)
    .fetch_all(ctx.pool())
    .await
    .expect("findings");
    assert_eq!(found, ["standby_links"], "written on the primary");
}

/// A `CENSUS_DATABASE_URL` that names no standby of the application's database is refused by name, and the census
/// reads nothing: the primary itself (not replaying), or the standby's other database.
#[tokio::test]
async fn a_census_database_url_naming_no_standby_of_this_database_reads_nothing_and_says_why() {
    // Another test's `census::advance` failpoint would fail the census with another error than the one said here.
    let _turn = FAILPOINTS.lock().await;
    let pair = integration_tests::Standby::get().await;
    let ctx = TestContext::on_server(pair.primary.clone()).await;
    sqlx::raw_sql("CREATE TABLE elsewhere_links (id serial PRIMARY KEY, ref uuid, note text)")
        .execute(ctx.pool())
        .await
        .expect("table");
    let primary = pass(&ctx, &[("CENSUS_DATABASE_URL", ctx.db.on_server(&pair.primary).as_str())]).await;
    let error = primary.census_error.clone().unwrap_or_default();
    assert!(error.contains("CENSUS_DATABASE_URL names a server that is not a standby"), "{primary:?}");
    let other = pass(&ctx, &[("CENSUS_DATABASE_URL", pair.standby.as_str())]).await;
    let error = other.census_error.clone().unwrap_or_default();
    let expected = format!("CENSUS_DATABASE_URL names database \"postgres\"; the census reads {:?}", ctx.db.name);
    assert!(error.contains(&expected), "{other:?}");
    let proven: i64 = sqlx::query_scalar("SELECT count(*) FROM census_columns WHERE proven_at IS NOT NULL")
        .fetch_one(ctx.pool())
        .await
        .expect("proven");
    assert_eq!(proven, 0, "nothing was read, so nothing is proven");
}
