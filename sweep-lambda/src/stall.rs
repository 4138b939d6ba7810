//! Whether a pass stalled: work was waiting and the pass advanced none of it. The first wave's passes recorded `ok`
//! while a census statement outlived its share and the claim found no time left, so the heartbeat alarm, which
//! counts good passes, never fired. A stalled pass names each step that held it and what held it.

use lifecycle::runs::Held;

use crate::record::{Stop, SweepReport};

/// The steps that held a pass which advanced nothing, or `None` when the pass advanced some step or had nothing
/// waiting.
pub fn stalled(report: &SweepReport) -> Option<Vec<Held>> {
    let advanced = report.claimed > 0
        || report.adopted_due > 0
        || report.census.as_ref().is_some_and(|c| c.blocks > 0 || c.columns_finished > 0)
        || report.discovery.as_ref().is_some_and(|d| d.scanned > 0)
        || report.records.as_ref().is_some_and(|r| r.deleted > 0)
        || report
            .reconcile
            .as_ref()
            .is_some_and(|r| r.keys_read > 0 || r.engine.as_ref().is_some_and(|e| e.written_now > 0));
    if advanced {
        return None;
    }
    let mut held = Vec::new();
    let mut step = |step: &str, by: String| held.push(Held { step: step.to_owned(), by });
    match (&report.census, &report.census_error) {
        (_, Some(error)) => step("census", error.clone()),
        (Some(census), None) => {
            if let Some(by) = &census.held_by {
                step("census", by.clone());
            }
        }
        (None, None) => {}
    }
    if let Some(error) = &report.discovery_error {
        step("discovery", error.clone());
    }
    if let Some(error) = &report.records_error {
        step("records", error.clone());
    }
    if let Some(error) = &report.reconcile_error {
        step("reconcile", error.clone());
    }
    let due: i64 = report.per_workspace.values().filter_map(|w| w.due.as_ref()).map(|d| d.due_assets).sum();
    if report.stopped == Some(Stop::TimeBudget) && due > 0 {
        step("claim", format!("{due} asset(s) due and no time left to claim: the steps before it used the pass"));
    }
    (!held.is_empty()).then_some(held)
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    #[test]
    fn a_pass_that_had_nothing_waiting_or_advanced_a_step_did_not_stall() {
        let mut report = SweepReport::new(Uuid::nil());
        assert_eq!(stalled(&report), None, "nothing waited");
        report.stopped = Some(Stop::TimeBudget);
        report.census_error = Some("the census failed".into());
        assert_eq!(stalled(&report).map(|h| h.len()), Some(1), "the census had work and did none");
        report.claimed = 1;
        assert_eq!(stalled(&report), None, "the claim advanced");
    }
}
