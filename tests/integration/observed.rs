//! Observed use: the bucket's access logs, written into LocalStack S3 as AWS writes them (LocalStack delivers none),
//! read by the real sweep, and what the real consumer makes of a read: a retired file somebody reads is kept, a read
//! by the product's own role or an ignored requester is not use, a removal waits until the delivered logs reach
//! past its decision, and a log location that cannot be read holds every removal while retiring goes on.

use std::io::Write as _;

use chrono::{DateTime, Utc};
use integration_tests::TestContext;
use integration_tests::access_logs::{OWNER, deliver_s3_log, logged, s3_line};
use integration_tests::fixtures::{due_again, object_exists, seed, state};
use serde_json::Value;
use uuid::Uuid;

use crate::pipeline::{last_event, pass, settle_queue};

/// The bucket for the logs, beside the test's asset bucket.
fn logs_bucket(ctx: &TestContext) -> String {
    format!("{}-logs", ctx.bucket)
}

/// Logging turned on as docs/operating.md has an operator do it: the logs' bucket made, its policy letting only
/// AWS's log delivery write below `prefix`, and a first pass with `settings` that reads nothing yet. Only an object
/// delivered after a pass saw that policy tells how far the logs reach (S3 stamps a delivery to the second: the
/// next one is a second on).
async fn logs_turned_on(ctx: &TestContext, prefix: &str, settings: &[(&str, &str)]) -> String {
    let bucket = logs_bucket(ctx);
    ctx.s3.create_bucket().bucket(&bucket).send().await.expect("the logs bucket");
    integration_tests::fixtures::protect_logs(&ctx.s3, &bucket, prefix).await;
    let report = pass(ctx, settings).await;
    let observed = serde_json::to_value(&report.observed).expect("the report");
    assert_eq!(observed["sources"][0]["error"], Value::Null, "{observed}");
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    bucket
}

fn ago(days: i64) -> DateTime<Utc> {
    Utc::now() - chrono::Duration::days(days)
}

/// The source's row: what `status` shows.
async fn source(ctx: &TestContext, name: &str) -> (i64, i64, i64, Value, Option<String>) {
    sqlx::query_as(
        "SELECT reads_recorded, requests_ignored, lines_skipped, skipped, error FROM log_sources WHERE source = $1",
    )
    .bind(name)
    .fetch_one(ctx.pool())
    .await
    .expect("the log source")
}

/// Issue: retired files keep being served until their purge, so a retirement is a trial: a file somebody fetches
/// after it was retired must be kept. A page's image is read by a browser (referred by the shop) after its
/// retirement; another retired file is read only by the product's own role and by a backup job the operator named;
/// the log also holds a line cut short, one that is no log line at all, and another bucket's read of the second
/// file's name. The pass reads the log, counting and
/// skipping the two bad lines with their numbers; the settle keeps the first (back to `attached`, the read in its
/// evidence) and purges the second.
#[tokio::test]
async fn a_retired_file_read_since_is_kept_and_one_read_only_by_the_products_own_role_is_purged() {
    let ctx = TestContext::new().await;
    let location = format!("s3://{}/access/", logs_bucket(&ctx));
    let own_role = "arn:aws:sts::111122223333:assumed-role/asset-sweeper-consumer/1733380000";
    let backup = "arn:aws:iam::111122223333:user/nightly-backup";
    let ignored = format!("arn:aws:iam::111122223333:role/asset-sweeper-consumer, {backup}");
    let settings =
        [("ACCESS_LOGS", location.as_str()), ("LOGS_DELIVERY_LAG", "0s"), ("LOGS_IGNORE_REQUESTERS", ignored.as_str())];
    let logs = logs_turned_on(&ctx, "access/", &settings).await;
    let ws = Uuid::new_v4();
    let (read_key, unread_key) = (format!("{ws}/hero image.png"), format!("{ws}/old.png"));
    let read = seed(&ctx, ws, "retired", "40 days", &read_key).await;
    let unread = seed(&ctx, ws, "retired", "40 days", &unread_key).await;
    let bucket = ctx.bucket.clone();
    let lines = [
        s3_line(&bucket, &logged(&read_key), ago(2), "-", "REST.GET.OBJECT", 200, "https://shop.example.com/p/1"),
        s3_line(&bucket, &logged(&unread_key), ago(1), own_role, "REST.GET.OBJECT", 200, "-"),
        s3_line(&bucket, &logged(&unread_key), ago(1), backup, "REST.HEAD.OBJECT", 200, "-"),
        // Before the retirement: no evidence of use since.
        s3_line(&bucket, &logged(&unread_key), ago(50), "-", "REST.GET.OBJECT", 200, "-"),
        // A failed read is none.
        s3_line(&bucket, &logged(&unread_key), ago(1), "-", "REST.GET.OBJECT", 403, "-"),
        format!("{OWNER} {bucket} [06/Feb/2019:00:00:38"),
        "this is not an access log line".to_owned(),
        // Another bucket that logs to the same location, holding a file of the same name: not a read of ours.
        s3_line("staging-assets", &logged(&unread_key), ago(1), "-", "REST.GET.OBJECT", 200, "-"),
    ];
    deliver_s3_log(&ctx.s3, &logs, "access/", &lines).await;

    let report = pass(&ctx, &settings).await;
    let observed = serde_json::to_value(&report.observed).expect("the report");
    assert_eq!(report.outcome.to_string(), "ok", "{observed}");
    assert_eq!(observed["sources"][0]["objects_read"], 1, "{observed}");
    assert_eq!(observed["sources"][0]["lines_skipped"], 2, "{observed}");
    let metrics: Value = serde_json::from_str(&sweep_lambda::record::metrics_line(&report)).expect("the metrics line");
    assert_eq!(metrics["LogsStopped"], 0, "logs delivered a moment ago have not stopped");
    settle_queue(&ctx).await;

    assert_eq!(state(&ctx, read).await.as_deref(), Some("attached"), "read since its retirement: kept");
    assert!(object_exists(&ctx.s3, &ctx.bucket, &read_key).await);
    let (action, evidence) = last_event(&ctx, read).await;
    assert_eq!(action, "keep");
    assert_eq!(evidence["read"]["referrer_host"], "shop.example.com", "{evidence}");
    assert_eq!(evidence["read"]["client"], "browser", "{evidence}");
    assert_eq!(evidence["read"]["source"], "s3", "{evidence}");

    assert_eq!(state(&ctx, unread).await, None, "read only by the product and an ignored job: purged");
    assert!(!object_exists(&ctx.s3, &ctx.bucket, &unread_key).await);
    let (recorded, ignored, skipped, lines, error) = source(&ctx, "s3").await;
    assert_eq!((recorded, ignored, skipped, error), (2, 2, 2, None), "{lines}");
    assert_eq!(observed["sources"][0]["other_bucket_lines"], 1, "{observed}");
    let numbers: Vec<&Value> = lines.as_array().expect("skipped lines").iter().map(|l| &l["line"]).collect();
    assert_eq!(numbers, [&Value::from(6), &Value::from(7)], "{lines}");
    assert!(lines[0]["object"].as_str().is_some_and(|o| o.starts_with("access/")), "{lines}");

    // `explain` says what the logs saw; `status` what the source holds.
    let explain = crate::cli::run(&ctx.db.url, Some(&ctx), &["explain", &read.to_string()]);
    let text = String::from_utf8_lossy(&explain.stdout);
    assert!(text.contains("last read ") && text.contains("referred by shop.example.com"), "{text}");
    let status = crate::cli::run(&ctx.db.url, Some(&ctx), &["status"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("access logs (s3)") && text.contains("2 line(s) skipped"), "{text}");
    assert!(text.contains("1 line(s) of other buckets' logs in the same location passed over"), "{text}");
    // The report counts, per workspace, the retired files kept because they were read.
    let report = crate::cli::run(&ctx.db.url, Some(&ctx), &["report", "--json"]);
    let report: Value = serde_json::from_slice(&report.stdout).expect("the report as JSON");
    assert_eq!(report["workspaces"][ws.to_string()]["kept_because_read"], 1, "{report}");
}

/// Issue: a purge, and every delete, waits until the logs cover the decision: a read made just before it may be
/// delivered hours later. A retired file's purge comes due after the newest log delivered so far: it waits, saying
/// so, and still once only another bucket logging to the same location delivered since; once a log of ours delivered
/// after its purge time is read, it goes.
#[tokio::test]
async fn a_purge_whose_logs_have_not_caught_up_waits_and_goes_once_they_have() {
    let ctx = TestContext::new().await;
    let location = format!("s3://{}/access/", logs_bucket(&ctx));
    let settings = [("ACCESS_LOGS", location.as_str()), ("LOGS_DELIVERY_LAG", "0s")];
    let logs = logs_turned_on(&ctx, "access/", &settings).await;
    let ws = Uuid::new_v4();
    let key = format!("{ws}/banner.png");
    let bucket = ctx.bucket.clone();
    let other = format!("{ws}/other.png");
    deliver_s3_log(
        &ctx.s3,
        &logs,
        "access/",
        &[s3_line(&bucket, &logged(&other), ago(1), "-", "REST.GET.OBJECT", 200, "-")],
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let asset = seed(&ctx, ws, "retired", "40 days", &key).await;
    // Its purge time comes after the log delivered so far.
    sqlx::query("UPDATE assets SET purge_after = now(), due_at = now() WHERE id = $1")
        .bind(asset)
        .execute(ctx.pool())
        .await
        .expect("its purge time");

    pass(&ctx, &settings).await;
    settle_queue(&ctx).await;
    let (action, evidence) = last_event(&ctx, asset).await;
    assert_eq!((action.as_str(), &evidence["deferred"]["why"]), ("defer", &Value::from("logs")), "{evidence}");
    assert!(evidence["because"].as_str().is_some_and(|b| b.contains("the s3 logs read so far reach")), "{evidence}");
    assert!(object_exists(&ctx.s3, &ctx.bucket, &key).await);

    // Another bucket logging to the same location delivers since: its logs say nothing of ours, which may have
    // stopped.
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let line = s3_line("staging-assets", &logged(&key), ago(0), "-", "REST.GET.OBJECT", 200, "-");
    deliver_s3_log(&ctx.s3, &logs, "access/", &[line]).await;
    due_again(ctx.pool(), &[asset]).await;
    pass(&ctx, &settings).await;
    settle_queue(&ctx).await;
    let (action, evidence) = last_event(&ctx, asset).await;
    assert_eq!((action.as_str(), &evidence["deferred"]["why"]), ("defer", &Value::from("logs")), "{evidence}");
    assert_eq!(state(&ctx, asset).await.as_deref(), Some("retired"), "neither kept by its read nor purged");

    // An hour on (its deferral ends), with a log delivered since its purge time (S3 stamps a delivery to the second).
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    deliver_s3_log(
        &ctx.s3,
        &logs,
        "access/",
        &[s3_line(&bucket, &logged(&other), ago(0), "-", "REST.GET.OBJECT", 200, "-")],
    )
    .await;
    due_again(ctx.pool(), &[asset]).await;
    pass(&ctx, &settings).await;
    settle_queue(&ctx).await;
    assert_eq!(state(&ctx, asset).await, None, "the logs reach past its purge time: purged");
    assert!(!object_exists(&ctx.s3, &ctx.bucket, &key).await);
}

/// Issue: a log location that cannot be read fails closed for purges and deletes; retiring goes on. The logs' bucket
/// does not exist: the pass records why, `status` asks for a person, a purge waits and a release is retired.
#[tokio::test]
async fn a_log_location_that_cannot_be_read_holds_every_removal_and_retiring_goes_on() {
    let ctx = TestContext::new().await;
    let ws = Uuid::new_v4();
    let (expired_key, released_key) = (format!("{ws}/expired.png"), format!("{ws}/released.png"));
    let expired = seed(&ctx, ws, "retired", "40 days", &expired_key).await;
    let released = seed(&ctx, ws, "released", "3 days", &released_key).await;
    let missing = format!("s3://{}-no-such-logs/access/", ctx.bucket);
    let report = pass(&ctx, &[("ACCESS_LOGS", missing.as_str())]).await;
    let observed = serde_json::to_value(&report.observed).expect("the report");
    assert!(observed["sources"][0]["error"].as_str().is_some_and(|e| e.contains("ListObjectsV2")), "{observed}");
    let metrics: Value = serde_json::from_str(&sweep_lambda::record::metrics_line(&report)).expect("the metrics line");
    assert_eq!(metrics["LogsStopped"], 1, "the alarm's metric");
    settle_queue(&ctx).await;

    assert_eq!(state(&ctx, expired).await.as_deref(), Some("retired"), "the purge waits");
    assert!(object_exists(&ctx.s3, &ctx.bucket, &expired_key).await);
    let (_, evidence) = last_event(&ctx, expired).await;
    assert_eq!(evidence["logs"]["kind"], "unreadable", "{evidence}");
    assert_eq!(state(&ctx, released).await.as_deref(), Some("retired"), "retiring goes on");
    let status = crate::cli::run(&ctx.db.url, Some(&ctx), &["status"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("NEEDS A PERSON") && text.contains("the s3 logs cannot be read"), "{text}");
}

/// Issue: a CloudFront request names a path under the distribution's origin path, and its log writes the path
/// URL-encoded (a `%` the viewer's own encoding put there encoded again). Files whose keys hold a space, a `+`, a
/// `%` and a letter outside ASCII, under the origin path `/production`, each fetched through the distribution
/// after their retirement (a gzipped log file, as CloudFront delivers it, with its two header lines), are kept.
#[tokio::test]
async fn cloudfront_reads_under_an_origin_path_name_the_right_files_whatever_their_spelling() {
    let ctx = TestContext::new().await;
    let location = format!("s3://{}/cf/E2EXAMPLE", logs_bucket(&ctx));
    let settings = [
        ("CLOUDFRONT_LOGS", location.as_str()),
        ("CLOUDFRONT_ORIGIN_PATH", "/production"),
        ("LOGS_DELIVERY_LAG", "0s"),
    ];
    let logs = logs_turned_on(&ctx, "cf/E2EXAMPLE", &settings).await;
    let ws = Uuid::new_v4();
    // As the viewer's request path has them, and as CloudFront then logs them.
    let files = [
        ("a b.png", "a%2520b.png"),
        ("c+d.png", "c+d.png"),
        ("100%.png", "100%2525.png"),
        ("café.png", "caf%25C3%25A9.png"),
    ];
    let mut assets = Vec::new();
    let mut lines = vec![
        "#Version: 1.0".to_owned(),
        "#Fields: date time x-edge-location sc-bytes c-ip cs-method cs(Host) cs-uri-stem sc-status cs(Referer) \
         cs(User-Agent) cs-uri-query cs(Cookie) x-edge-result-type x-edge-request-id x-host-header cs-protocol \
         cs-bytes time-taken x-forwarded-for ssl-protocol ssl-cipher x-edge-response-result-type \
         cs-protocol-version fle-status fle-encrypted-fields c-port time-to-first-byte x-edge-detailed-result-type \
         sc-content-type sc-content-len sc-range-start sc-range-end"
            .to_owned(),
    ];
    let at = ago(1);
    for (name, stem) in files {
        let key = format!("production/{ws}/{name}");
        assets.push((seed(&ctx, ws, "retired", "40 days", &key).await, key));
        lines.push(
            [
                &at.format("%Y-%m-%d").to_string(),
                &at.format("%H:%M:%S").to_string(),
                "LAX1",
                "392",
                "192.0.2.100",
                "GET",
                "d111111abcdef8.cloudfront.net",
                &format!("/{ws}/{stem}"),
                "200",
                "https://blog.example.org/post",
                "Mozilla/5.0%20(Windows%20NT%2010.0;%20Win64;%20x64)",
                "-",
                "-",
                "Hit",
                "SOX4xwn4XV6Q4rgb7XiVGOHms_BGlTAC4KyHmureZmBNrjGdRLiNIQ==",
                "d111111abcdef8.cloudfront.net",
                "https",
                "23",
                "0.001",
                "-",
                "TLSv1.2",
                "ECDHE-RSA-AES128-GCM-SHA256",
                "Hit",
                "HTTP/2.0",
                "-",
                "-",
                "11040",
                "0.001",
                "Hit",
                "image/png",
                "1104",
                "-",
                "-",
            ]
            .join("\t"),
        );
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all((lines.join("\n") + "\n").as_bytes()).expect("gzip");
    let body = gz.finish().expect("gzip");
    let file = format!("cf/E2EXAMPLE.{}.a1b2c3d4.gz", at.format("%Y-%m-%d-%H"));
    ctx.s3.put_object().bucket(&logs).key(&file).body(body.into()).send().await.expect("the CloudFront log file");

    let report = pass(&ctx, &settings).await;
    let observed = serde_json::to_value(&report.observed).expect("the report");
    assert_eq!(observed["sources"][0]["lines_skipped"], 0, "{observed}");
    settle_queue(&ctx).await;
    for (asset, key) in assets {
        assert_eq!(state(&ctx, asset).await.as_deref(), Some("attached"), "{key}: read through the distribution");
        let (_, evidence) = last_event(&ctx, asset).await;
        assert_eq!(evidence["read"]["source"], "cloudfront", "{key}: {evidence}");
        assert_eq!(evidence["read"]["referrer_host"], "blog.example.org", "{key}: {evidence}");
    }
}

/// Issue (hostile): forged log lines in a location the application can write are not trusted. The logs' bucket
/// carries only the policy AWS's documentation gives for S3's delivery (an allow), so any role of the account with
/// `s3:PutObject` (the application's, in most accounts) can write there; the application writes a log saying a
/// retired file was read last night. The sweep reads nothing from the location: it says which writes its policy
/// leaves open, `status` asks for a person, and every purge waits (the forged read keeps nothing; the forged
/// object's delivery covers nothing). A deny that exempts a role by its ARN is refused too, naming the condition:
/// the product cannot tell an operator's role from the application's. Once the operator denies every principal but
/// AWS's services, the objects already there are read (a read only keeps a file: the forged one keeps its file,
/// the safe way to be wrong), but none delivered before the policy was seen tells how far the logs reach: the other
/// file's purge waits for a log delivered since. The policy opened and mended again, neither what the logs reached
/// before nor what was written meanwhile counts: the purge waits for a delivery since the mending, then goes.
/// (LocalStack does not enforce bucket policies: what is tested is that the product reads and judges them.)
#[tokio::test]
async fn forged_logs_in_a_location_the_application_can_write_are_not_believed() {
    let ctx = TestContext::new().await;
    let logs = logs_bucket(&ctx);
    ctx.s3.create_bucket().bucket(&logs).send().await.expect("the logs bucket");
    let below = format!("arn:aws:s3:::{logs}/access/*");
    let allow = serde_json::json!({"Effect": "Allow", "Principal": {"Service": "logging.s3.amazonaws.com"},
                                   "Action": "s3:PutObject", "Resource": below});
    let put_policy = |statements: Vec<Value>| {
        let policy = serde_json::json!({"Version": "2012-10-17", "Statement": statements}).to_string();
        ctx.s3.put_bucket_policy().bucket(&logs).policy(policy).send()
    };
    put_policy(vec![allow.clone()]).await.expect("S3's documented delivery policy alone");
    let ws = Uuid::new_v4();
    let (forged_key, other_key) = (format!("{ws}/forged.png"), format!("{ws}/other.png"));
    let forged = seed(&ctx, ws, "retired", "40 days", &forged_key).await;
    let other = seed(&ctx, ws, "retired", "40 days", &other_key).await;
    let bucket = ctx.bucket.clone();
    deliver_s3_log(
        &ctx.s3,
        &logs,
        "access/",
        &[s3_line(&bucket, &logged(&forged_key), ago(1), "-", "REST.GET.OBJECT", 200, "-")],
    )
    .await;
    let location = format!("s3://{logs}/access/");
    let settings = [("ACCESS_LOGS", location.as_str()), ("LOGS_DELIVERY_LAG", "0s")];

    let report = pass(&ctx, &settings).await;
    let observed = serde_json::to_value(&report.observed).expect("the report");
    let error = observed["sources"][0]["error"].as_str().unwrap_or_default().to_owned();
    assert!(error.contains("is not trusted") && error.contains("s3:PutObject, s3:DeleteObject"), "{observed}");
    assert_eq!(observed["sources"][0]["objects_read"], 0, "{observed}");
    let metrics: Value = serde_json::from_str(&sweep_lambda::record::metrics_line(&report)).expect("the metrics line");
    assert_eq!(metrics["LogsStopped"], 1, "the alarm's metric");
    settle_queue(&ctx).await;
    for asset in [forged, other] {
        assert_eq!(state(&ctx, asset).await.as_deref(), Some("retired"), "neither kept nor purged");
        let (action, evidence) = last_event(&ctx, asset).await;
        assert_eq!((action.as_str(), &evidence["logs"]["kind"]), ("defer", &Value::from("unreadable")), "{evidence}");
    }
    let reads: i64 =
        sqlx::query_scalar("SELECT count(*) FROM observed_reads").fetch_one(ctx.pool()).await.expect("reads");
    assert_eq!(reads, 0, "no line of the location was believed");
    let status = crate::cli::run(&ctx.db.url, Some(&ctx), &["status"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("NEEDS A PERSON") && text.contains("is not trusted"), "{text}");

    // An operator's break-glass role exempted by its ARN: the application's role could be named the same way.
    let mut exempting = serde_json::json!({"Sid": "OpsOnly", "Effect": "Deny", "Principal": "*",
        "Action": ["s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion", "s3:ReplicateObject", "s3:ReplicateDelete"], "Resource": below,
        "Condition": {"BoolIfExists": {"aws:PrincipalIsAWSService": "false"},
                      "ArnNotLike": {"aws:PrincipalArn": "arn:aws:iam::111122223333:role/ops-*"}}});
    put_policy(vec![allow.clone(), exempting.clone()]).await.expect("a deny with an exemption");
    let report = pass(&ctx, &settings).await;
    let observed = serde_json::to_value(&report.observed).expect("the report");
    let error = observed["sources"][0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("OpsOnly is conditional on ArnNotLike aws:PrincipalArn"), "{observed}");

    // The policy docs/operating.md gives: every principal but AWS's services denied.
    exempting["Condition"].as_object_mut().map(|c| c.remove("ArnNotLike"));
    put_policy(vec![allow.clone(), exempting.clone()]).await.expect("the documented policy");
    due_again(ctx.pool(), &[forged, other]).await;
    let report = pass(&ctx, &settings).await;
    let observed = serde_json::to_value(&report.observed).expect("the report");
    assert_eq!((&observed["sources"][0]["error"], &observed["sources"][0]["objects_read"]), (&Value::Null, &1.into()));
    settle_queue(&ctx).await;
    let (action, evidence) = last_event(&ctx, other).await;
    assert_eq!((action.as_str(), &evidence["deferred"]["why"]), ("defer", &Value::from("logs")), "{evidence}");
    assert!(evidence["because"].as_str().is_some_and(|b| b.contains("no s3 log has been read yet")), "{evidence}");
    assert!(object_exists(&ctx.s3, &ctx.bucket, &other_key).await);
    assert_eq!(state(&ctx, forged).await.as_deref(), Some("attached"), "a read, whoever wrote it, only keeps");

    // AWS delivers a log since, read while the policy holds; then somebody opens the policy and the application
    // writes a log meanwhile; then it is mended. What the logs reached before the break counts for nothing, nor
    // does the object written during it: the purge still waits.
    let delivered = || async {
        tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
        let line = s3_line(&bucket, &logged("elsewhere.png"), ago(0), "-", "REST.GET.OBJECT", 200, "-");
        deliver_s3_log(&ctx.s3, &logs, "access/", &[line]).await;
    };
    delivered().await;
    pass(&ctx, &settings).await;
    put_policy(vec![allow.clone()]).await.expect("the deny removed");
    let report = pass(&ctx, &settings).await;
    let observed = serde_json::to_value(&report.observed).expect("the report");
    assert!(observed["sources"][0]["error"].as_str().is_some_and(|e| e.contains("is not trusted")), "{observed}");
    delivered().await;
    put_policy(vec![allow, exempting]).await.expect("the documented policy again");
    due_again(ctx.pool(), &[forged, other]).await;
    let report = pass(&ctx, &settings).await;
    let observed = serde_json::to_value(&report.observed).expect("the report");
    assert_eq!((&observed["sources"][0]["error"], &observed["sources"][0]["objects_read"]), (&Value::Null, &1.into()));
    settle_queue(&ctx).await;
    let (action, evidence) = last_event(&ctx, other).await;
    assert!(evidence["because"].as_str().is_some_and(|b| b.contains("no s3 log has been read yet")), "{evidence}");
    assert_eq!((action.as_str(), state(&ctx, other).await.as_deref()), ("defer", Some("retired")), "{evidence}");

    // AWS delivers a log since: the logs now reach past the purge.
    delivered().await;
    due_again(ctx.pool(), &[forged, other]).await;
    pass(&ctx, &settings).await;
    settle_queue(&ctx).await;
    assert_eq!(state(&ctx, other).await, None, "purged once a trusted delivery covers it");
    assert!(!object_exists(&ctx.s3, &ctx.bucket, &other_key).await);
}
