//! What it costs: money per workspace from the price table, in exact cents, through `usage`, `plan`, `status` and
//! `explain`; the GB-months a pass stopped paying for against a hand count; and freed against billed, with S3's
//! storage metrics fed into LocalStack's CloudWatch in the shape S3 publishes them.

use std::time::{Duration, Instant};

use aws_sdk_cloudwatch::types::{Dimension, MetricDatum, StandardUnit};
use aws_sdk_s3::types::{
    BucketLifecycleConfiguration, ExpirationStatus, LifecycleRule, LifecycleRuleFilter, NoncurrentVersionExpiration,
};
use integration_tests::TestContext;
use serde_json::{Value, json};
use sweep_lambda::Sweeper;
use sweep_lambda::record::{SweepReport, metrics_line};
use uuid::Uuid;

use crate::cli::{json_with_code, run_with};

const GIB: i64 = 1 << 30;
/// Not a round price, so that rounding to the cent is exercised: $0.0245 per GB-month.
const PRICES: (&str, &str) = ("STORAGE_PRICES", "STANDARD=0.0245");

/// `n` assets of `workspace` in `state`, each on its own object of `bytes`, written by the application (a retired one
/// as a settle leaves it: due at its purge, thirty days on).
async fn assets(ctx: &TestContext, workspace: Uuid, state: &str, n: i64, bytes: i64) {
    sqlx::query(
        "WITH objects AS (
             INSERT INTO stored_objects (storage_key, content_hash, byte_size)
             SELECT $1::text || '/' || $2 || '-' || i, 'sha256:' || i, $4 FROM generate_series(1, $3) AS i
             RETURNING storage_key)
         INSERT INTO assets (workspace_id, storage_key, content_hash, byte_size, state, retired_at, purge_after, due_at)
         SELECT $1, storage_key, 'sha256:x', $4, $2, CASE WHEN $2 = 'retired' THEN now() END, purge, purge
           FROM objects, LATERAL (SELECT CASE WHEN $2 = 'retired' THEN now() + interval '30 days' END AS purge) p",
    )
    .bind(workspace)
    .bind(state)
    .bind(n)
    .bind(bytes)
    .execute(ctx.pool())
    .await
    .expect("assets");
}

/// A settlement the consumer recorded `ago` (an SQL interval) that freed `bytes` of `workspace`.
async fn freed(ctx: &TestContext, workspace: Uuid, action: &str, bytes: i64, ago: &str) {
    sqlx::query(
        "INSERT INTO settlement_events (occurred_at, asset_id, workspace_id, storage_key, action, evidence, bytes_freed,
                                        code_version)
         VALUES (now() - $4::interval, gen_random_uuid(), $1, $1::text || '/gone', $2, '{}', $3, 'test')",
    )
    .bind(workspace)
    .bind(action)
    .bind(bytes)
    .bind(ago)
    .execute(ctx.pool())
    .await
    .expect("a settlement event");
}

/// A recorded reconciliation that found `bytes` in `keys` keys of `workspace` no row knows, as the comparison
/// records its findings.
async fn unknown(ctx: &TestContext, workspace: Uuid, keys: i64, bytes: i64) {
    let findings = json!({
        "keys": keys, "bytes": bytes, "off_pattern": [], "lost": [], "present_after_all": 0, "present": [],
        "unconfirmed": 0, "adopted": [], "awaiting_approval": [], "withdrawn": [],
        "unknown": [{ "prefix": "", "workspace_id": workspace, "keys": keys, "bytes": bytes, "young": 0,
                      "sample": [] }],
    });
    sqlx::query(
        "INSERT INTO reconcile_listings (source, location, taken_at, compared_at, findings)
         VALUES ('list', 'test', now(), now(), $1)",
    )
    .bind(findings)
    .execute(ctx.pool())
    .await
    .expect("a recorded reconciliation");
}

/// Gives the test's bucket the rule the template gives it: noncurrent versions expire after 30 days.
async fn expire_versions_after_30_days(ctx: &TestContext) {
    let rule = LifecycleRule::builder()
        .id("expire-deleted-bytes")
        .status(ExpirationStatus::Enabled)
        .filter(LifecycleRuleFilter::builder().prefix("").build())
        .noncurrent_version_expiration(NoncurrentVersionExpiration::builder().noncurrent_days(30).build())
        .build()
        .expect("a lifecycle rule");
    let lifecycle = BucketLifecycleConfiguration::builder().rules(rule).build().expect("a lifecycle configuration");
    ctx.s3
        .put_bucket_lifecycle_configuration()
        .bucket(&ctx.bucket)
        .lifecycle_configuration(lifecycle)
        .send()
        .await
        .expect("the lifecycle rule");
}

/// One pass of the real sweep with S3 and CloudWatch, as deployed.
pub(crate) async fn pass(ctx: &TestContext, overrides: &[(&str, &str)]) -> SweepReport {
    let config = platform::aws::sdk_config().await;
    let sweeper = Sweeper::new(ctx.pool().clone(), ctx.sqs.clone(), ctx.settings(overrides))
        .with_storage(ctx.s3.clone())
        .with_storage_metrics(aws_sdk_cloudwatch::Client::new(&config));
    sweeper.run_pass(Instant::now() + Duration::from_secs(600)).await.expect("sweep pass")
}

fn cents(money: &Value) -> u64 {
    money["cents_per_month"].as_u64().unwrap_or_else(|| panic!("no cents in {money}"))
}

#[tokio::test]
async fn each_workspaces_bytes_are_priced_to_the_cent_in_usage_plan_status_and_explain_and_a_pass_records_what_it_stopped_paying_for()
 {
    let ctx = TestContext::new().await;
    expire_versions_after_30_days(&ctx).await;
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    // Workspace a: 100 GiB in use, 10 released, 20 retired, 30 left as versions by a delete a day ago (and 50 by one
    // 40 days ago, expired since), 40 that no row knows. Workspace b: 1 GiB released.
    assets(&ctx, a, "attached", 4, 25 * GIB).await;
    assets(&ctx, a, "released", 2, 5 * GIB).await;
    assets(&ctx, a, "retired", 1, 20 * GIB).await;
    freed(&ctx, a, "delete", 30 * GIB, "1 day").await;
    freed(&ctx, a, "purge", 50 * GIB, "40 days").await;
    unknown(&ctx, a, 8, 40 * GIB).await;
    assets(&ctx, b, "released", 1, GIB).await;
    // And a retired row of a on one of its objects in use: the object counts once, as held.
    sqlx::query(
        "INSERT INTO assets (workspace_id, storage_key, content_hash, byte_size, state, retired_at, purge_after, due_at)
         SELECT workspace_id, storage_key, content_hash, byte_size, 'retired', now(), now() + interval '30 days',
                now() + interval '30 days'
           FROM assets WHERE workspace_id = $1 AND state = 'attached' LIMIT 1",
    )
    .bind(a)
    .execute(ctx.pool())
    .await
    .expect("a retired row on a held object");
    // A pass reads the bucket's window (30 days) and folds the usage.
    let first = pass(&ctx, &[PRICES]).await;
    assert!(first.money.is_some() && first.effect.is_some(), "{:?}", first.effect_error);

    // By hand, at $0.0245 per GiB-month: 100 GiB → $2.45; 10 → $0.245 → $0.25 (half up); 20 → $0.49; 30 → $0.735 →
    // $0.74; 40 → $0.98; waste 100 → $2.45. b: 1 GiB → $0.0245 → $0.02.
    let expected_a =
        [("held", 245), ("waiting", 25), ("retired", 49), ("noncurrent", 74), ("unknown", 98), ("waste", 245)];
    let check = |money: &Value, what: &str| {
        let ws = |id: Uuid| &money["workspaces"][id.to_string()]["money"];
        for (kind, cents_a) in expected_a {
            assert_eq!(cents(&ws(a)[kind]), cents_a, "{what}: workspace a, {kind}: {money}");
        }
        assert_eq!(cents(&ws(b)["waste"]), 2, "{what}: workspace b: {money}");
        assert_eq!(money["noncurrent_window"], json!({ "kept": "days", "days": 30 }), "{what}");
        assert_eq!(money["class"], "STANDARD", "{what}");
    };
    let env = [PRICES];
    let usage = run_with(&ctx.db.url, Some(&ctx), &env, &["usage", "--json"]);
    check(&json_with_code(&usage).1["money"], "usage");
    let plan = run_with(&ctx.db.url, Some(&ctx), &env, &["plan", "--json"]);
    check(&json_with_code(&plan).1["money"], "plan");
    let status = run_with(&ctx.db.url, Some(&ctx), &env, &["status", "--json"]);
    check(&json_with_code(&status).1["money"], "status");
    // And as a person reads it.
    let text = String::from_utf8(run_with(&ctx.db.url, Some(&ctx), &env, &["status"]).stdout).expect("utf-8");
    assert!(
        text.contains(&format!(
            "workspace {a}: waste $2.45/month (100.00 GB); held {} B $2.45/month; released and waiting {} B \
             $0.25/month; retired (restorable) {} B $0.49/month; versions kept for undelete {} B $0.74/month; bytes \
             no row knows {} B $0.98/month",
            100 * GIB,
            10 * GIB,
            20 * GIB,
            30 * GIB,
            40 * GIB
        )),
        "{text}"
    );
    assert!(text.contains("all workspaces: waste $2.47/month"), "2.45 + 0.0245 summed before rounding: {text}");
    // One workspace is counted from its own rows, and comes to the same cents.
    let usage_a = run_with(&ctx.db.url, Some(&ctx), &env, &["usage", &a.to_string(), "--json"]);
    let exact = &json_with_code(&usage_a).1["money"]["workspaces"][a.to_string()]["money"];
    for (kind, cents_a) in expected_a {
        assert_eq!(cents(&exact[kind]), cents_a, "usage {a}: {kind}: {exact}");
    }
    let usage_b = run_with(&ctx.db.url, Some(&ctx), &env, &["usage", &b.to_string()]);
    let usage_b = String::from_utf8(usage_b.stdout).expect("utf-8");
    assert!(usage_b.contains("waste $0.02/month (1.00 GB)"), "{usage_b}");

    // explain: a retired asset's cost while stored.
    let retired: Uuid = sqlx::query_scalar("SELECT id FROM assets WHERE workspace_id = $1 AND state = 'retired'")
        .bind(a)
        .fetch_one(ctx.pool())
        .await
        .expect("the retired asset");
    let explained = run_with(&ctx.db.url, Some(&ctx), &env, &["explain", &retired.to_string(), "--json"]);
    let explained = json_with_code(&explained).1;
    assert_eq!(cents(&explained["money"]["stored"]["money"]), 49, "{explained}");
    assert_eq!(explained["money"]["stored"]["kind"], "retired, restorable");

    // What the next pass stopped paying for: 3 GiB deleted and 2 GiB purged in a, 1.5 GiB deleted in b, since the
    // first pass. 6.5 GiB at $0.0245 = $0.15925 → $0.16 a month, from the day their versions expire: today + 31.
    freed(&ctx, a, "delete", 3 * GIB, "0 seconds").await;
    freed(&ctx, a, "purge", 2 * GIB, "0 seconds").await;
    freed(&ctx, b, "delete", 3 * GIB / 2, "0 seconds").await;
    let second = pass(&ctx, &[PRICES]).await;
    let money = serde_json::to_value(second.money.as_ref().expect("money")).expect("json");
    assert_eq!(money["freed"]["bytes"], json!(13 * GIB / 2), "{money}");
    assert_eq!(money["freed"]["gb_months"], json!(6.5));
    assert_eq!(cents(&money["freed"]["money"]), 16);
    let stops = (chrono::Utc::now().date_naive() + chrono::Days::new(31)).to_string();
    assert_eq!(money["freed"]["by_day"][&stops]["bytes"], json!(13 * GIB / 2), "{money}");
    assert_eq!(money["freed"]["per_workspace"][a.to_string()]["bytes"], json!(5 * GIB));
    assert_eq!(money["freed"]["per_workspace"][b.to_string()]["bytes"], json!(3 * GIB / 2));
    // The run row carries it, and the metrics line the dashboard draws.
    let recorded: Value = sqlx::query_scalar("SELECT money FROM sweep_runs WHERE id = $1")
        .bind(second.run_id)
        .fetch_one(ctx.pool())
        .await
        .expect("the run row");
    assert_eq!(recorded["freed"], money["freed"]);
    let line: Value = serde_json::from_str(&metrics_line(&second)).expect("metrics");
    assert_eq!((line["FreedBytes"].clone(), line["FreedCentsPerMonth"].clone()), (json!(13 * GIB / 2), json!(16)));
    // Waiting, from the totals the pass keeps: a's 30 GiB released and retired, 35 kept as versions, 40 no row knows;
    // b's 1 GiB released and 1.5 kept as versions: 107.5 GiB → $2.63375 → $2.63.
    assert_eq!(money["waiting"]["bytes"], json!(215 * GIB / 2), "{money}");
    assert_eq!(line["WaitingCentsPerMonth"], json!(263));
}

/// S3's daily storage metrics for `bucket`, as S3 publishes them to CloudWatch (`AWS/S3`, stamped at midnight UTC
/// of `day`): bytes per storage type and the objects of all types.
pub(crate) async fn publish_storage_metrics(
    bucket: &str,
    day: chrono::NaiveDate,
    by_type: &[(&str, i64)],
    objects: i64,
) {
    let config = platform::aws::sdk_config().await;
    let cloudwatch = aws_sdk_cloudwatch::Client::new(&config);
    let at = aws_sdk_cloudwatch::primitives::DateTime::from_secs(
        day.and_hms_opt(0, 0, 0).expect("midnight").and_utc().timestamp(),
    );
    let dimension = |name: &str, value: &str| Dimension::builder().name(name).value(value).build();
    let mut data: Vec<MetricDatum> = by_type
        .iter()
        .map(|(storage_type, bytes)| {
            MetricDatum::builder()
                .metric_name("BucketSizeBytes")
                .dimensions(dimension("BucketName", bucket))
                .dimensions(dimension("StorageType", storage_type))
                .timestamp(at)
                .value(*bytes as f64)
                .unit(StandardUnit::Bytes)
                .build()
        })
        .collect();
    data.push(
        MetricDatum::builder()
            .metric_name("NumberOfObjects")
            .dimensions(dimension("BucketName", bucket))
            .dimensions(dimension("StorageType", "AllStorageTypes"))
            .timestamp(at)
            .value(objects as f64)
            .unit(StandardUnit::Count)
            .build(),
    );
    cloudwatch.put_metric_data().namespace("AWS/S3").set_metric_data(Some(data)).send().await.expect("metrics");
}

/// What the rows account for as the sweep compares them, for the day `day`.
pub(crate) async fn believed(ctx: &TestContext, day: chrono::NaiveDate) -> u64 {
    let mut conn = ctx.pool().acquire().await.expect("a connection");
    let window = ledger::window::window(&mut conn).await.expect("the window");
    ledger::drift::believed(&mut conn, window, day).await.expect("believed").0.bytes()
}

#[tokio::test]
async fn a_bucket_s3_bills_at_its_known_size_raises_nothing_and_one_twenty_times_larger_in_versions_names_the_cause() {
    let yesterday = chrono::Utc::now().date_naive() - chrono::Days::new(1);
    // Equal: S3 reports what the rows account for (split over two storage types).
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    assets(&ctx, ws, "attached", 3, 2 * GIB).await;
    assets(&ctx, ws, "released", 1, GIB).await;
    pass(&ctx, &[]).await; // folds the usage the comparison reads
    let known = believed(&ctx, yesterday).await;
    assert_eq!(known, 7 * GIB as u64);
    publish_storage_metrics(&ctx.bucket, yesterday, &[("StandardStorage", 6 * GIB), ("StandardIAStorage", GIB)], 4)
        .await;
    let report = pass(&ctx, &[]).await;
    let newest = report.drift.as_ref().and_then(|d| d.newest.clone()).expect("a comparison");
    assert_eq!((newest.metric_day, newest.reported_bytes, newest.believed_bytes), (yesterday, 7 * GIB, 7 * GIB));
    assert_eq!((newest.drift_percent, newest.cause.as_deref()), (0.0, None));
    let line: Value = serde_json::from_str(&metrics_line(&report)).expect("metrics");
    assert_eq!((line["BucketDrifted"].clone(), line["BucketDriftPercent"].clone()), (json!(0), json!(0)));
    // S3's side priced per storage type: 6 GiB of STANDARD at $0.023 and 1 of STANDARD_IA at $0.0125: $0.1505.
    let status = String::from_utf8(crate::cli::run(&ctx.db.url, Some(&ctx), &["status"]).stdout).expect("utf-8");
    assert!(status.contains("billed about $0.15/month"), "{status}");
    assert!(status.contains(&format!("StandardIAStorage: {GIB} B")), "{status}");
    let (code, page) = json_with_code(&crate::cli::run(&ctx.db.url, Some(&ctx), &["status", "--json"]));
    assert!(
        !page["needs_attention"].as_array().expect("list").iter().any(|a| a.as_str().unwrap_or("").contains("drift")),
        "{code:?} {page}"
    );
    // The next pass does not ask S3 again for a day it has.
    let again = pass(&ctx, &[]).await;
    assert!(again.drift.as_ref().expect("drift").read.contains("compared already"), "{:?}", again.drift);

    // Twenty times more in noncurrent versions that never expire (the bucket has no rule that expires them).
    let ctx = TestContext::new().await;
    assets(&ctx, ws, "attached", 1, GIB).await;
    pass(&ctx, &[]).await;
    publish_storage_metrics(&ctx.bucket, yesterday, &[("StandardStorage", 21 * GIB)], 40).await;
    let report = pass(&ctx, &[]).await;
    let newest = report.drift.as_ref().and_then(|d| d.newest.clone()).expect("a comparison");
    assert!(newest.drifted() && newest.drift_percent > 95.0, "{newest:?}");
    let cause = newest.cause.clone().expect("a cause");
    assert!(cause.contains("21.0×") && cause.contains("no lifecycle rule expires noncurrent versions"), "{cause}");
    let line: Value = serde_json::from_str(&metrics_line(&report)).expect("metrics");
    assert_eq!((line["BucketDrifted"].clone(), line["BucketDriftPercent"].clone()), (json!(1), json!(95)));
    // status asks for a person, saying which side is larger and why.
    let output = crate::cli::run(&ctx.db.url, Some(&ctx), &["status"]);
    let text = String::from_utf8(output.stdout).expect("utf-8");
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(
        text.contains("the bucket's size drifted from the rows") && text.contains("the bucket is larger"),
        "{text}"
    );
    assert!(text.contains(&format!("S3 reports {} B", 21 * GIB)), "{text}");
}

/// Every workspace's ledger as `status` and `plan` read it, from the totals a pass folds (`workspace_usage`), and
/// each workspace's from its own rows: held, waiting and retired bytes, and retired objects.
async fn both_ledgers(pool: &sqlx::PgPool, workspaces: &[Uuid]) -> Vec<(Uuid, [(u64, u64); 2])> {
    use ledger::Window;
    use ledger::holdings::{Holdings, ledger};
    let mut conn = pool.acquire().await.expect("a connection");
    let seen = |h: &Holdings| [(0, h.held.bytes), (0, h.waiting.bytes), (h.retired.objects, h.retired.bytes)];
    let totals = ledger(&mut conn, None, Window::Days(30)).await.expect("the ledger from the totals");
    let mut pairs = Vec::new();
    for ws in workspaces {
        let rows = ledger(&mut conn, Some(*ws), Window::Days(30)).await.expect("the ledger from the rows");
        let from_totals = seen(&totals.workspaces.get(ws).copied().unwrap_or_default());
        let from_rows = seen(&rows.workspaces[ws]);
        for (kind, (t, r)) in ["held", "waiting", "retired"].iter().zip(from_totals.iter().zip(&from_rows)) {
            assert_eq!(t, r, "workspace {ws}, {kind}: from the totals {from_totals:?}, from the rows {from_rows:?}");
        }
        pairs.push((*ws, [from_totals[2], (from_totals[0].1, from_totals[1].1)]));
    }
    pairs
}

#[tokio::test]
async fn the_retired_objects_folded_into_the_totals_agree_with_the_rows_through_every_change() {
    let db = integration_tests::TestDatabase::new().await;
    let pool = &db.pool;
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let exec = |sql: &'static str| async move {
        sqlx::query(sql).bind(a).bind(b).execute(pool).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        sqlx::query("SELECT asset_sweeper_fold_usage()").execute(pool).await.expect("a pass's fold");
    };
    // Four objects of a (1, 2, 4 and 8 bytes), one shared with b; a row each, and a second row of a on the first.
    exec(
        "WITH o AS (INSERT INTO stored_objects (storage_key, content_hash, byte_size)
                    SELECT 'k' || n, 'sha256:' || n, 1 << n FROM generate_series(0, 3) n RETURNING storage_key)
         INSERT INTO assets (workspace_id, storage_key, content_hash, byte_size, state)
         SELECT $1, storage_key, 'sha256:x', 1, 'attached' FROM o
         UNION ALL SELECT $1, 'k0', 'sha256:x', 1, 'released'
         UNION ALL SELECT $2, 'k3', 'sha256:x', 1, 'attached'",
    )
    .await;
    let retired = |pairs: &[(Uuid, [(u64, u64); 2])]| pairs.iter().map(|(_, p)| p[0]).collect::<Vec<_>>();
    assert_eq!(retired(&both_ledgers(pool, &[a, b]).await), [(0, 0), (0, 0)]);
    // Retire every row of a: each of its objects is retired for a, the shared one still held by b.
    let retire = "UPDATE assets SET state = 'retired', retired_at = now(), purge_after = now() + interval '30 days',
                         due_at = now() + interval '30 days' WHERE workspace_id = $1 AND $2 IS NOT NULL";
    exec(retire).await;
    assert_eq!(retired(&both_ledgers(pool, &[a, b]).await), [(4, 15), (0, 0)]);
    // One of k0's two rows restored: k0 is no longer retired; k1 deleted: gone; a new retired row of b on k3.
    exec(
        "WITH restored AS (UPDATE assets SET state = 'attached', due_at = NULL, retired_at = NULL, purge_after = NULL
                            WHERE id = (SELECT id FROM assets WHERE workspace_id = $1 AND storage_key = 'k0' LIMIT 1)
                           RETURNING id),
              gone AS (DELETE FROM assets WHERE workspace_id = $1 AND storage_key = 'k1' RETURNING id)
         INSERT INTO assets (workspace_id, storage_key, content_hash, byte_size, state, retired_at, purge_after, due_at)
         SELECT $2, 'k3', 'sha256:x', 1, 'retired', now(), now() + interval '30 days', now() + interval '30 days'
           FROM (SELECT count(*) FROM restored, gone) done",
    )
    .await;
    assert_eq!(retired(&both_ledgers(pool, &[a, b]).await), [(2, 12), (0, 0)]);
    // b's attached row retired too: k3 is retired for b as well. Then a's k2 row moves to a new key, and b's rows go.
    exec(
        "UPDATE assets SET state = 'retired', retired_at = now(), purge_after = now() + interval '30 days',
                due_at = now() + interval '30 days'
          WHERE workspace_id = $2 AND state = 'attached' AND $1 IS NOT NULL",
    )
    .await;
    assert_eq!(retired(&both_ledgers(pool, &[a, b]).await), [(2, 12), (1, 8)]);
    exec(
        "WITH gone AS (DELETE FROM assets WHERE workspace_id = $2 RETURNING id)
         INSERT INTO stored_objects (storage_key, content_hash, byte_size)
         SELECT 'k9', 'sha256:9', 512 WHERE $1 IS NOT NULL AND (SELECT count(*) FROM gone) = 2",
    )
    .await;
    exec("UPDATE assets SET storage_key = 'k9' WHERE workspace_id = $1 AND storage_key = 'k2' AND $2 IS NOT NULL")
        .await;
    assert_eq!(retired(&both_ledgers(pool, &[a, b]).await), [(2, 520), (0, 0)]);
    // And a recount from the rows comes to what the folds kept.
    let before = both_ledgers(pool, &[a, b]).await;
    sqlx::query("SELECT asset_sweeper_recount_usage()").execute(pool).await.expect("a recount");
    assert_eq!(both_ledgers(pool, &[a, b]).await, before);
    // Totals from before the retired figures existed (as the upgrade leaves them, with a change not yet folded):
    // the sweep's next fold, with the sweep's grants alone, counts them from the rows.
    sqlx::query("UPDATE workspace_usage SET retired_objects = NULL, retired_bytes = NULL")
        .execute(pool)
        .await
        .expect("totals from before");
    sqlx::query("UPDATE assets SET state = 'attached', due_at = NULL WHERE storage_key = 'k3' AND workspace_id = $1")
        .bind(a)
        .execute(pool)
        .await
        .expect("a change not yet folded");
    let sweep = integration_tests::TestLogin::new(&db, "GRANT asset_sweeper_sweep TO {login}").await;
    let mut as_sweep = sweep.connect().await;
    sqlx::query("SELECT asset_sweeper.asset_sweeper_fold_usage()")
        .execute(&mut as_sweep)
        .await
        .expect("the sweep's fold");
    assert_eq!(retired(&both_ledgers(pool, &[a, b]).await), [(1, 512), (0, 0)]);
}

/// S3's expiry rule for a noncurrent version is written twice, once in SQL (`asset_sweeper_version_expires`, which
/// the costs and the drift count versions by) and once in Rust (`ledger::window::expiry_day`, which `explain` and a
/// pass's money say the day by): the two give the same day for every time of day, at and around midnight, at the
/// ends of months and years, for any window, in any session time zone.
#[tokio::test]
async fn the_version_expiry_rule_is_the_same_in_sql_and_in_rust() {
    use chrono::{Duration as Span, TimeZone, Utc};
    let db = integration_tests::TestDatabase::new().await;
    let mut conn = db.pool.acquire().await.expect("a connection");
    // A session far from UTC: the rule is UTC's whatever the session's zone.
    sqlx::query("SET TIME ZONE 'Pacific/Kiritimati'").execute(&mut *conn).await.expect("time zone");
    let mut times = Vec::new();
    for (y, m, d) in [(2026, 12, 3), (2026, 12, 31), (2027, 2, 28), (2028, 2, 29), (2026, 3, 29)] {
        let midnight = Utc.with_ymd_and_hms(y, m, d, 0, 0, 0).single().expect("a day");
        for offset in [Span::zero(), Span::microseconds(1), Span::hours(13), Span::days(1) - Span::microseconds(1)] {
            times.push(midnight + offset);
        }
    }
    for days in [0_i32, 1, 30, 365] {
        let (sql, rust): (Vec<_>, Vec<_>) = {
            let mut sql = Vec::new();
            for at in &times {
                let day: chrono::NaiveDate = sqlx::query_scalar("SELECT asset_sweeper_version_expires($1, $2)")
                    .bind(at)
                    .bind(days)
                    .fetch_one(&mut *conn)
                    .await
                    .expect("the SQL rule");
                sql.push(day);
            }
            (sql, times.iter().map(|at| ledger::window::expiry_day(days.unsigned_abs(), *at)).collect())
        };
        let rust: Vec<_> = rust.into_iter().map(|d: Option<chrono::NaiveDate>| d.expect("a day")).collect();
        assert_eq!(sql, rust, "{days} day(s), at {times:?}");
    }
    // A statement with no rule (kept for ever) gets no day.
    let never: Option<chrono::NaiveDate> = sqlx::query_scalar("SELECT asset_sweeper_version_expires(now(), NULL)")
        .fetch_one(&mut *conn)
        .await
        .expect("the SQL rule");
    assert_eq!(never, None);
}

/// The keys no row knows are priced from what a comparison recorded: reconciliation writes its findings through its
/// own type, the ledger reads the part it prices through `ledger::found`. A field renamed on either side fails here.
#[test]
fn the_ledger_reads_back_the_keys_a_comparison_found_and_adopted() {
    use ledger::found::{Findings, Found};
    let workspace = Uuid::from_u128(3);
    let written = reconcile::Findings {
        unknown: vec![reconcile::Unknown {
            prefix: "uploads/".to_owned(),
            workspace_id: workspace,
            keys: 5,
            bytes: 50,
            young: 1,
            sample: vec!["uploads/a".to_owned()],
        }],
        adopted: vec![reconcile::adopt::Adopted {
            prefix: "uploads/".to_owned(),
            workspace_id: workspace,
            keys: 2,
            bytes: 20,
        }],
        ..reconcile::Findings::default()
    };
    let read = Findings::of(&serde_json::to_value(&written).expect("json"));
    assert_eq!(
        (read.unknown, read.adopted),
        (
            vec![Found { workspace_id: workspace, keys: 5, bytes: 50 }],
            vec![Found { workspace_id: workspace, keys: 2, bytes: 20 }]
        )
    );
}
