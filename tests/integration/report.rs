//! `asset-sweeper report`: after the real sweep and consumer have purged, deleted and retired, the report says per
//! workspace what was freed, retired and held, with the money; and its HTML page, opened in a headless Chromium as
//! a person would open it, shows those figures and its two charts.

use std::path::{Path, PathBuf};
use std::process::Command;

use integration_tests::TestContext;
use integration_tests::fixtures::seed;
use serde_json::Value;
use uuid::Uuid;

use crate::cli::{json, run_with};

/// The browser `scripts/test` made sure of (`CHROMIUM`), else one on the PATH.
fn chromium() -> String {
    if let Ok(path) = std::env::var("CHROMIUM") {
        return path;
    }
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        if Command::new(name).arg("--version").output().is_ok_and(|o| o.status.success()) {
            return name.to_owned();
        }
    }
    panic!("no headless browser: run the tests with scripts/test (scripts/ensure-chromium installs one)")
}

/// Chromium, headless, on a profile of its own, with nothing fetched from the network.
fn headless(profile: &Path) -> Command {
    let mut command = Command::new(chromium());
    command.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
    ]);
    command.arg(format!("--user-data-dir={}", profile.display()));
    command
}

fn money(figure: &Value) -> String {
    format!("${}/month", figure["money"]["usd_per_month"].as_str().expect("money"))
}

#[tokio::test]
async fn the_report_shows_per_workspace_what_was_freed_retired_and_held_with_the_money_and_its_page_opens_in_a_browser()
{
    let ctx = TestContext::new().await;
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    // a: a retired asset whose purge time passed, an upload abandoned eight days ago, a released asset; b: a
    // released asset. Their rows say 10, 3, 2 and 1 GiB.
    let purged = seed(&ctx, a, "retired", "40 days", &format!("{a}/old.png")).await;
    let abandoned = seed(&ctx, a, "abandoned", "8 days", &format!("{a}/upload.png")).await;
    let retired = seed(&ctx, a, "released", "2 days", &format!("{a}/replaced.png")).await;
    let retired_b = seed(&ctx, b, "released", "2 days", &format!("{b}/replaced.png")).await;
    for (id, gib) in [(purged, 10_i64), (abandoned, 3), (retired, 2), (retired_b, 1)] {
        sqlx::query(
            "WITH a AS (UPDATE assets SET byte_size = $2 WHERE id = $1 RETURNING storage_key)
             UPDATE stored_objects o SET byte_size = $2 FROM a WHERE o.storage_key = a.storage_key",
        )
        .bind(id)
        .bind(gib << 30)
        .execute(ctx.pool())
        .await
        .expect("sizes");
        // As if the sizes had always been so: the grace period counts from the seeded age, not from this fixture.
        sqlx::query(
            "WITH a AS (UPDATE assets SET updated_at = now() - interval '2 days' WHERE id = $1 RETURNING storage_key)
             UPDATE stored_objects o SET updated_at = now() - interval '2 days' FROM a
              WHERE o.storage_key = a.storage_key",
        )
        .bind(id)
        .execute(ctx.pool())
        .await
        .expect("ages");
    }
    // The sizes changed under the usage totals' feet: counted again, as docs/design.md asks of such a load.
    sqlx::query("SELECT asset_sweeper_recount_usage()").execute(ctx.pool()).await.expect("recount");
    crate::pipeline::pass(&ctx, &[]).await;
    crate::pipeline::settle_queue(&ctx).await;
    // A later pass records what waits now, for the chart.
    crate::pipeline::pass(&ctx, &[]).await;

    let dir = std::env::temp_dir().join(format!("asset-sweeper-report-{}", integration_tests::short_id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    let page = dir.join("report.html");
    let page_arg = page.display().to_string();
    let report =
        json(&run_with(&ctx.db.url, Some(&ctx), &[], &["report", "--since", "1d", "--html", &page_arg, "--json"]));
    // 10 GiB purged and 3 GiB deleted in a: $0.299 → $0.30 a month at STANDARD, once their versions expire.
    let ws_a = &report["workspaces"][a.to_string()];
    assert_eq!(ws_a["freed"]["bytes"], Value::from(13_i64 << 30), "{report}");
    assert_eq!(money(&ws_a["freed"]), "$0.30/month");
    assert_eq!(ws_a["settled"]["retire"]["count"], 1);
    assert_eq!(ws_a["settled"]["retire"]["bytes"], Value::from(2_i64 << 30));
    assert_eq!(ws_a["settled"]["purge"]["count"], 1);
    assert_eq!(ws_a["settled"]["delete"]["count"], 1);
    let ws_b = &report["workspaces"][b.to_string()];
    assert_eq!(ws_b["settled"]["retire"]["count"], 1);
    // Waiting: a's retired 2 GiB and the 13 GiB kept as versions (the test's bucket has no rule that expires them);
    // b's retired 1 GiB.
    assert_eq!(ws_a["waiting"]["bytes"], Value::from(15_i64 << 30), "{report}");
    assert_eq!(ws_b["waiting"]["bytes"], Value::from(1_i64 << 30));
    assert_eq!(money(&report["waiting"]), "$0.37/month", "16 GiB at $0.023");
    // The chart's newest point, from the later pass's run record, says what the table says.
    let newest = report["points"].as_array().and_then(|p| p.last()).expect("a point").clone();
    assert_eq!(newest["waiting"][a.to_string()]["bytes"], ws_a["waiting"]["bytes"], "{report}");
    assert_eq!(newest["waiting"][b.to_string()]["bytes"], ws_b["waiting"]["bytes"], "{report}");
    let text =
        String::from_utf8(run_with(&ctx.db.url, Some(&ctx), &[], &["report", "--since", "1d"]).stdout).expect("utf-8");
    assert!(text.contains("freed: $0.30/month (13.00 GB), billed no more once their versions expire"), "{text}");
    assert!(text.contains(&format!("workspace {a}:")) && text.contains("retired: 1 asset(s)"), "{text}");

    // The page, as a browser reads it.
    let profile = dir.join("profile");
    let dom =
        headless(&profile).arg("--dump-dom").arg(format!("file://{}", page.display())).output().expect("chromium");
    assert!(dom.status.success(), "chromium: {}", String::from_utf8_lossy(&dom.stderr));
    let dom = String::from_utf8_lossy(&dom.stdout).into_owned();
    let card = |id: &str| {
        let start = dom.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("no {id} card in {dom}"));
        dom[start..start + dom[start..].find("</div>").expect("the card's end")].to_owned()
    };
    assert!(card("freed").contains("$0.30/month"), "{}", card("freed"));
    assert!(card("waiting").contains("$0.37/month"), "{}", card("waiting"));
    for ws in [a, b] {
        assert!(dom.contains(&format!("<td class=\"id\">{ws}</td>")), "{ws} has no row");
    }
    assert!(dom.contains("id=\"waiting-chart\"") && dom.contains("<polyline"), "the chart of waiting bytes");
    assert!(dom.contains("id=\"settlements-chart\"") && dom.contains("purge: 1</title>"), "the settlements chart");
    // And what it looks like: kept beside the build for a person to look at.
    let shot: PathBuf = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("report-screenshot.png")))
        .expect("the target directory");
    let status = headless(&profile)
        .arg(format!("--screenshot={}", shot.display()))
        .arg("--window-size=1200,1400")
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium");
    assert!(status.status.success(), "chromium: {}", String::from_utf8_lossy(&status.stderr));
    let png = std::fs::read(&shot).expect("the screenshot");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 20_000, "a rendered page, not a blank one: {} bytes", png.len());
    let _ = std::fs::remove_dir_all(&dir);
}
