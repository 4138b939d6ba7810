//! The report as one HTML page that needs nothing else: inline styles, charts drawn as inline SVG, no script and
//! nothing fetched, so it can be mailed, archived or opened offline, and reads the same in any browser.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use ledger::prices::gb;
use uuid::Uuid;

use ledger::report::Report;

const COLOURS: &[&str] = &["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];
const ACTIONS: &[(&str, &str)] = &[
    ("keep", "#7f7f7f"),
    ("retire", "#ff7f0e"),
    ("delete", "#d62728"),
    ("purge", "#9467bd"),
    ("restore", "#2ca02c"),
    ("defer", "#bcbd22"),
];

/// `<`, `>`, `&` and quotes escaped, for text and attributes.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The page.
pub(super) fn render(r: &Report) -> String {
    let mut page = String::new();
    let title = format!(
        "asset-sweeper report, {} to {}",
        r.since.format("%Y-%m-%d %H:%M UTC"),
        r.until.format("%Y-%m-%d %H:%M UTC")
    );
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>\
         body{{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}}\
         table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}\
         th{{background:#f3f3f3}}td.id{{text-align:left;font-family:monospace}}\
         .cards{{display:flex;gap:1em}}.card{{border:1px solid #ccc;border-radius:6px;padding:1em;min-width:14em}}\
         .card b{{font-size:1.6em;display:block}}svg text{{font-size:11px;font-family:system-ui,sans-serif}}\
         </style></head><body>\n<h1>{}</h1>\n",
        escape(&title),
        escape(&title)
    );
    let _ = write!(
        page,
        "<p>Money a month at the price of {} (STORAGE_PRICES, STORAGE_CLASS); deleted and purged bytes stay billed as \
         noncurrent versions, kept {}.</p>\n<div class=\"cards\">\
         <div class=\"card\" id=\"freed\">Money freed<b>{}</b>{} deleted or purged, billed no more once their versions \
         expire</div>\
         <div class=\"card\" id=\"waiting\">Money still waiting<b>{}</b>{} released, retired, kept as versions, or \
         known to no row</div></div>\n",
        escape(&r.class),
        escape(&r.noncurrent_window.describe()),
        r.freed.money,
        gb(r.freed.bytes),
        r.waiting.money,
        gb(r.waiting.bytes)
    );
    page.push_str(&table(r));
    page.push_str("<h2>Waiting bytes and their cost over time, per workspace</h2>\n");
    page.push_str(&waiting_chart(r));
    page.push_str("<h2>Settlements per day, by action</h2>\n");
    page.push_str(&settlements_chart(r));
    page.push_str("</body></html>\n");
    page
}

fn table(r: &Report) -> String {
    let mut t = String::from(
        "<h2>Per workspace</h2>\n<table id=\"workspaces\"><tr><th>workspace</th><th>sent for settlement</th>\
         <th>adopted</th><th>freed</th><th>money freed</th><th>retired</th><th>restored</th><th>held, and why</th>\
         <th>waiting now</th><th>money waiting</th></tr>\n",
    );
    for (id, ws) in &r.workspaces {
        let count = |action: &str| ws.settled.get(action).copied().unwrap_or_default();
        let mut held: Vec<String> = ws.deferred.iter().map(|(why, n)| format!("{n} deferred ({why})")).collect();
        if let Some(why) = &ws.braked_because {
            held.push(format!("braked in {} pass(es): {why}", ws.braked_passes));
        }
        let _ = writeln!(
            t,
            "<tr><td class=\"id\">{id}</td><td>{}</td><td>{} keys, {}</td><td>{}</td><td>{}</td><td>{} ({})</td>\
             <td>{} ({})</td><td style=\"text-align:left\">{}</td><td>{}</td><td>{}</td></tr>",
            ws.claimed,
            ws.adopted.count,
            gb(ws.adopted.bytes),
            gb(ws.freed.bytes),
            ws.freed.money,
            count("retire").count,
            gb(count("retire").bytes),
            count("restore").count,
            gb(count("restore").bytes),
            escape(&if held.is_empty() { "nothing".to_owned() } else { held.join("; ") }),
            gb(ws.waiting.bytes),
            ws.waiting.money
        );
    }
    let _ = writeln!(
        t,
        "<tr><th>all</th><th></th><th></th><th>{}</th><th>{}</th><th></th><th></th><th></th><th>{}</th><th>{}</th></tr>",
        gb(r.freed.bytes),
        r.freed.money,
        gb(r.waiting.bytes),
        r.waiting.money
    );
    t.push_str("</table>\n");
    t
}

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 260.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 90.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 30.0;

#[allow(clippy::cast_precision_loss)] // chart coordinates
fn waiting_chart(r: &Report) -> String {
    if r.points.is_empty() {
        return "<p>No pass in the period recorded its money.</p>\n".to_owned();
    }
    let workspaces: Vec<Uuid> = {
        let mut all: Vec<Uuid> = r.points.iter().flat_map(|p| p.waiting.keys().copied()).collect();
        all.sort();
        all.dedup();
        all
    };
    let max_bytes = r.points.iter().flat_map(|p| p.waiting.values().map(|v| v.bytes)).max().unwrap_or(0).max(1);
    let (t0, t1) = (r.points[0].at.timestamp() as f64, r.points[r.points.len() - 1].at.timestamp() as f64);
    let span = (t1 - t0).max(1.0);
    let x = |t: f64| LEFT + (t - t0) / span * (WIDTH - LEFT - RIGHT);
    let y = |bytes: u64| TOP + (1.0 - bytes as f64 / max_bytes as f64) * (HEIGHT - TOP - BOTTOM);
    let mut svg = format!(
        "<svg id=\"waiting-chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{}\" \
         role=\"img\" aria-label=\"waiting bytes per workspace over time\">\n",
        HEIGHT + 20.0 * workspaces.len() as f64
    );
    axes(&mut svg);
    // Left axis bytes, right axis their cost: one price, so one line reads on both.
    let top_cost = r.points.iter().flat_map(|p| p.waiting.values()).max_by_key(|v| v.bytes).map(|v| v.money);
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">0</text>\
         <text x=\"{}\" y=\"{}\">{}</text>",
        LEFT - 4.0,
        TOP + 10.0,
        gb(max_bytes),
        LEFT - 4.0,
        HEIGHT - BOTTOM,
        WIDTH - RIGHT + 4.0,
        TOP + 10.0,
        top_cost.unwrap_or_default()
    );
    let _ = writeln!(
        svg,
        "<text x=\"{LEFT}\" y=\"{}\">{}</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
        HEIGHT - 10.0,
        r.points[0].at.format("%Y-%m-%d %H:%M"),
        WIDTH - RIGHT,
        HEIGHT - 10.0,
        r.points[r.points.len() - 1].at.format("%Y-%m-%d %H:%M")
    );
    for (i, ws) in workspaces.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let points: Vec<String> = r
            .points
            .iter()
            .map(|p| {
                let bytes = p.waiting.get(ws).map_or(0, |v| v.bytes);
                format!("{:.1},{:.1}", x(p.at.timestamp() as f64), y(bytes))
            })
            .collect();
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>",
            points.join(" ")
        );
        let last = r.points[r.points.len() - 1].waiting.get(ws).copied().unwrap_or_default();
        let _ = writeln!(
            svg,
            "<rect x=\"{LEFT}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{colour}\"/><text x=\"{}\" y=\"{}\">\
             workspace {ws}: {} waiting, {}</text>",
            HEIGHT + 20.0 * i as f64,
            LEFT + 14.0,
            HEIGHT + 9.0 + 20.0 * i as f64,
            gb(last.bytes),
            last.money
        );
    }
    svg.push_str("</svg>\n");
    svg
}

#[allow(clippy::cast_precision_loss)] // chart coordinates
fn settlements_chart(r: &Report) -> String {
    if r.days.is_empty() {
        return "<p>Nothing was settled in the period.</p>\n".to_owned();
    }
    let max = r.days.iter().map(|d| d.actions.values().sum::<u64>()).max().unwrap_or(0).max(1);
    let slot = (WIDTH - LEFT - RIGHT) / r.days.len() as f64;
    let bar = (slot * 0.7).max(2.0);
    let mut svg = format!(
        "<svg id=\"settlements-chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{}\" \
         role=\"img\" aria-label=\"settlements per day by action\">\n",
        HEIGHT + 20.0
    );
    axes(&mut svg);
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{max}</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">0</text>",
        LEFT - 4.0,
        TOP + 10.0,
        LEFT - 4.0,
        HEIGHT - BOTTOM
    );
    let scale = (HEIGHT - TOP - BOTTOM) / max as f64;
    for (i, day) in r.days.iter().enumerate() {
        let x = LEFT + slot * i as f64 + (slot - bar) / 2.0;
        let mut base = HEIGHT - BOTTOM;
        for (action, colour) in ACTIONS {
            let n = day.actions.get(*action).copied().unwrap_or(0);
            if n == 0 {
                continue;
            }
            let h = n as f64 * scale;
            base -= h;
            let _ = writeln!(
                svg,
                "<rect x=\"{x:.1}\" y=\"{base:.1}\" width=\"{bar:.1}\" height=\"{h:.1}\" fill=\"{colour}\">\
                 <title>{} {action}: {n}</title></rect>",
                day.day
            );
        }
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            x + bar / 2.0,
            HEIGHT - 14.0,
            day.day.format("%m-%d")
        );
    }
    let totals: BTreeMap<&str, u64> = ACTIONS
        .iter()
        .map(|(a, _)| (*a, r.days.iter().map(|d| d.actions.get(*a).copied().unwrap_or(0)).sum()))
        .collect();
    for (i, (action, colour)) in ACTIONS.iter().enumerate() {
        let _ = writeln!(
            svg,
            "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{colour}\"/><text x=\"{}\" y=\"{}\">{action} {}</text>",
            LEFT + 110.0 * i as f64,
            HEIGHT + 4.0,
            LEFT + 110.0 * i as f64 + 14.0,
            HEIGHT + 13.0,
            totals[action]
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn axes(svg: &mut String) {
    let _ = writeln!(
        svg,
        "<line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{}\" stroke=\"#444\"/>\
         <line x1=\"{LEFT}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#444\"/>",
        HEIGHT - BOTTOM,
        HEIGHT - BOTTOM,
        WIDTH - RIGHT,
        HEIGHT - BOTTOM
    );
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};
    use ledger::Window;
    use ledger::prices::{GB, Prices};

    use super::*;
    use ledger::Priced;
    use ledger::report::{Day, Point, Tally, Workspace};

    #[test]
    fn the_page_holds_its_figures_escapes_what_it_quotes_and_fetches_nothing() {
        let prices = Prices::default();
        let priced = |bytes| Priced { bytes, money: prices.monthly(bytes) };
        let ws = Uuid::from_u128(7);
        let at = |h| Utc.with_ymd_and_hms(2026, 12, 3, h, 0, 0).single().expect("time");
        let mut workspace = Workspace {
            freed: priced(10 * GB),
            waiting: priced(100 * GB),
            braked_because: Some("<script>alert(1)</script>".to_owned()),
            braked_passes: 2,
            ..Workspace::default()
        };
        workspace.settled.insert("retire".to_owned(), Tally { count: 3, bytes: GB });
        let report = Report {
            since: at(0),
            until: at(12),
            class: "STANDARD".to_owned(),
            noncurrent_window: Window::Days(30),
            workspaces: [(ws, workspace)].into_iter().collect(),
            freed: priced(10 * GB),
            waiting: priced(100 * GB),
            days: vec![Day {
                day: at(0).date_naive(),
                actions: [("retire".to_owned(), 3), ("delete".to_owned(), 2)].into_iter().collect(),
            }],
            points: vec![
                Point { at: at(1), waiting: [(ws, priced(50 * GB))].into_iter().collect() },
                Point { at: at(2), waiting: [(ws, priced(100 * GB))].into_iter().collect() },
            ],
        };
        let page = render(&report);
        assert!(page.contains(&prices.monthly(10 * GB).to_string()) && page.contains("$0.23/month"), "freed");
        assert!(page.contains("$2.30/month"), "waiting");
        assert!(page.contains("&lt;script&gt;") && !page.contains("<script>"), "escaped");
        let without_namespace = page.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
        assert!(!without_namespace.contains("http") && !page.contains("src=") && !page.contains("href="), "fetches");
        assert_eq!(page.matches("<polyline").count(), 1);
        assert_eq!(page.matches("<rect").count(), 1 + 2 + ACTIONS.len(), "legend, two bars, action legend");
    }
}
