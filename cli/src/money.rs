//! Money beside bytes, as `plan`, `status`, `usage`, `explain` and `report` show it: per workspace, what its bytes
//! cost a month by what the sweeper knows of them; and, for `status`, the bucket as S3 reports it against the rows,
//! and the effect the alarms watch.

use std::fmt::Write as _;

use ledger::holdings::{self, Holdings, Ledger};
use ledger::prices::{Prices, gb};
use serde_json::{Value, json};
use sqlx::PgConnection;
use uuid::Uuid;

/// The price table the commands show money with (`STORAGE_PRICES`, `STORAGE_CLASS`).
pub(crate) fn prices() -> anyhow::Result<Prices> {
    Ok(settings::Settings::prices_from_env()?)
}

/// The ledger of `workspace`, or of every workspace, with the window the newest pass read.
pub(crate) async fn ledger(conn: &mut PgConnection, workspace: Option<Uuid>) -> anyhow::Result<Ledger> {
    let window = ledger::window::window(&mut *conn).await?;
    Ok(holdings::ledger(conn, workspace, window).await?)
}

/// Workspaces a person is shown, most wasteful first; `--json` has every one.
const SHOWN: usize = 10;

/// The ledger for a person: a line per workspace (most waste first, the first [`SHOWN`]), then the total, and how
/// versions were counted.
pub(crate) fn describe(ledger: &Ledger, prices: &Prices) -> String {
    let mut text = String::new();
    let price = prices.per_gb_month(&prices.class).unwrap_or_default();
    let _ = writeln!(
        text,
        "money a month, at {} (${}.{:06} per GB-month; STORAGE_PRICES, STORAGE_CLASS), noncurrent versions kept {}:",
        prices.class,
        price / 1_000_000,
        price % 1_000_000,
        ledger.window.describe()
    );
    let mut rows: Vec<(&Uuid, &Holdings)> = ledger.workspaces.iter().collect();
    rows.sort_by_key(|(ws, h)| (std::cmp::Reverse(h.waste_bytes()), **ws));
    for (ws, h) in rows.iter().take(SHOWN) {
        let _ = writeln!(text, "  workspace {ws}: {}", h.describe(prices));
    }
    if rows.len() > SHOWN {
        let _ =
            writeln!(text, "  … and {} more workspace(s), less wasteful (--json lists every one)", rows.len() - SHOWN);
    }
    let total = ledger.total();
    let _ = writeln!(
        text,
        "  all workspaces: waste {} ({}) of {} in all",
        total.costs(prices).waste,
        gb(total.waste_bytes()),
        prices.monthly(total.waste_bytes().saturating_add(total.held.bytes))
    );
    text
}

/// The newest comparison of S3's figures with the rows, and the newest pass's effect, for `status`: the text, the
/// JSON and what needs a person.
pub(crate) async fn effect(
    conn: &mut PgConnection,
    bucket: &str,
    prices: &Prices,
) -> anyhow::Result<(String, Value, Vec<String>)> {
    let mut text = String::new();
    let mut attention = Vec::new();
    let newest = ledger::drift::newest(&mut *conn, bucket).await?;
    match &newest {
        None => {
            let _ = writeln!(
                text,
                "freed against billed: no comparison yet (the sweep compares S3's daily storage metrics of bucket \
                 {bucket} once they are published)"
            );
        }
        Some(m) => {
            let by_type: std::collections::BTreeMap<String, u64> =
                serde_json::from_value(m.reported_by_type.clone()).unwrap_or_default();
            let reported = ledger::drift::Reported {
                metric_day: m.metric_day,
                bytes: m.reported_bytes.max(0).unsigned_abs(),
                objects: m.reported_objects.map(|o| o.max(0).unsigned_abs()),
                by_type,
            };
            let (billed, unpriced) = reported.billed(prices);
            let _ = writeln!(
                text,
                "freed against billed ({}): S3 reports {} B ({}), billed about {billed}; the rows account for {} B \
                 ({}); {:.1}% apart (alarm beyond {}%)",
                m.metric_day,
                m.reported_bytes,
                gb(reported.bytes),
                m.believed_bytes,
                prices.monthly(m.believed_bytes.max(0).unsigned_abs()),
                m.drift_percent,
                m.alarm_percent,
            );
            for (storage_type, bytes) in &reported.by_type {
                let _ = writeln!(text, "  {storage_type}: {bytes} B");
            }
            if !unpriced.is_empty() {
                let _ = writeln!(text, "  not priced (no class known for them): {}", unpriced.join(", "));
            }
            let today = chrono::Utc::now().date_naive();
            let age = (today - m.metric_day).num_days();
            if !ledger::drift::recent(m.metric_day, today) {
                let line = format!(
                    "the newest comparison of S3's figures with the rows is for {}, {age} days ago: the sweep has \
                     not compared since (S3's storage metrics not published, or its CloudWatch permission gone)",
                    m.metric_day
                );
                let _ = writeln!(text, "  ! {line}");
                attention.push(line);
            } else if let Some(cause) = &m.cause {
                let _ = writeln!(text, "  ! {cause}");
                attention.push(format!("the bucket's size drifted from the rows: {cause}"));
            }
        }
    }
    // The newest pass that read its effect; and whether a newer one failed to.
    let (last, failed) = ledger::freed::newest(&mut *conn).await?;
    if let Some((id, error)) = &failed {
        let line = format!("pass {id} could not read its effect, so its alarms saw no figure: {error}");
        let _ = writeln!(text, "  ! {line}");
        attention.push(line);
    }
    let effect = last.as_ref().map(|l| l.stored.clone()).unwrap_or(Value::Null);
    if let Some(last) = last.as_ref().filter(|l| l.effect.is_none()) {
        // Written otherwise (another version): said, so lapsed claims are not passed over.
        let line =
            format!("the effect pass {} recorded cannot be read by this build: read it with `status --json`", last.id);
        let _ = writeln!(text, "  ! {line}");
        attention.push(line);
    }
    if let Some(last) = &last {
        if let Some(e) = &last.effect {
            let oldest = e
                .oldest_overdue
                .as_ref()
                .map_or("none".to_owned(), |o| format!("{:.1} h ({})", o.seconds as f64 / 3600.0, o.asset_id));
            let _ = writeln!(
                text,
                "effect (pass {}): {} asset(s) due, {} B; oldest overdue {oldest}; {} settlement(s) since the pass \
                 before; due bytes grew with nothing settled over {} pass(es)",
                last.id, e.due_assets, e.due_bytes, e.settled_since_previous, e.growing_unsettled_passes,
            );
            if e.lapsed.assets > 0 {
                let line = format!(
                    "{} claim(s) lapsed with no settlement: their messages went out and in the whole lease the \
                     consumer recorded nothing (oldest lease end {}, for example asset {})",
                    e.lapsed.assets,
                    e.lapsed.oldest_lease_end.map_or("-".to_owned(), |t| t.to_rfc3339()),
                    e.lapsed.example.map_or("-".to_owned(), |id| id.to_string()),
                );
                let _ = writeln!(text, "  ! {line}");
                attention.push(format!(
                    "{line}: is the consumer running? (its errors, the queue's age, the dead-letter queue)"
                ));
            }
        }
        if let Some(money) = &last.money {
            let _ = writeln!(
                text,
                "money: freed this pass {} B, {} once their versions expire; still waiting {} B, {}",
                money.freed.total.bytes, money.freed.total.money, money.waiting.bytes, money.waiting.money,
            );
        }
    }
    Ok((text, json!({ "drift": newest, "effect": effect }), attention))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ledger::Window;
    use ledger::figure::Figure;
    use ledger::prices::GB;

    #[test]
    fn the_ledger_lists_the_most_wasteful_workspace_first_and_adds_them_up() {
        let figure = |bytes| Figure { objects: 1, bytes };
        let small = Holdings { waiting: figure(GB), ..Holdings::default() };
        let large = Holdings { held: figure(GB), unknown: figure(100 * GB), ..Holdings::default() };
        let ledger = Ledger {
            window: Window::Days(30),
            workspaces: [(Uuid::from_u128(1), small), (Uuid::from_u128(2), large)].into_iter().collect(),
        };
        let text = describe(&ledger, &Prices::default());
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("STANDARD ($0.023000 per GB-month") && lines[0].contains("kept 30 days"), "{text}");
        assert!(lines[1].contains("00000000-0000-0000-0000-000000000002: waste $2.30/month"), "{text}");
        assert!(lines[2].contains("00000000-0000-0000-0000-000000000001: waste $0.02/month"), "{text}");
        assert_eq!(lines[3], "  all workspaces: waste $2.32/month (101.00 GB) of $2.35/month in all");
    }
}
