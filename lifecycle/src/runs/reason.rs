//! The parts of a run row's `reason` that anything reads back: the bucket as the pass found it, the superuser it
//! connected as, and what stalled it. The sweep writes them through [`Reason`] and `status` and the costs read them
//! through it, so a field renamed here is renamed for the writer and every reader at once; the names already
//! stored in rows are held by this module's test, which fails when one changes.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::BucketCheck;

/// A step that had work and did none of it in a pass, and why: `reason.stalled`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// `census`, `discovery`, `records`, `reconcile` or `claim`.
    pub step: String,
    /// What held it: the statement and table, the error, or the time that ran out.
    pub by: String,
}

/// What the readers of `sweep_runs.reason` read of it. The row holds more (the schema check's refusal, the queue's
/// backlog, the access logs' progress, the window), which only people read, in `status --json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reason {
    /// The asset bucket as the pass found it; `None` when the pass did not read it.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "part")]
    pub bucket: Option<BucketCheck>,
    /// The role the pass connected as, when it is a superuser: a function should have its own login.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "part")]
    pub superuser: Option<String>,
    /// When the pass stalled: each step that had work and did none, and what held it.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "part")]
    pub stalled: Option<Vec<Held>>,
}

impl Reason {
    /// What a row's `reason` says (`None`, or a value that is no object, says nothing).
    pub fn of(reason: Option<&Value>) -> Reason {
        reason.and_then(|r| Reason::deserialize(r).ok()).unwrap_or_default()
    }

    /// Adds these parts to `reason`, the row's other parts kept.
    pub fn write_into(&self, reason: &mut Value) {
        if let (Some(into), Ok(Value::Object(parts))) = (reason.as_object_mut(), serde_json::to_value(self)) {
            into.extend(parts);
        }
    }
}

/// One part of the reason: a part a build before this one wrote otherwise reads as absent, so one odd row costs its
/// own part, not the whole answer of `status`.
fn part<'de, D: Deserializer<'de>, T: DeserializeOwned>(deserializer: D) -> Result<Option<T>, D::Error> {
    Ok(serde_json::from_value(Value::deserialize(deserializer)?).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runs::Destruction;
    use platform::bucket::{NoncurrentExpiry, Versioning};
    use serde_json::json;

    fn every_part() -> Reason {
        Reason {
            bucket: Some(BucketCheck {
                bucket: "assets".into(),
                versioning: Some(Versioning::Suspended),
                noncurrent_expiry: Some(NoncurrentExpiry { days: 30, prefixes: vec!["uploads/".into()] }),
                destruction: Destruction::Held,
                held_because: Some("versioning of bucket assets is Suspended".into()),
                cost_warning: Some("kept for ever".into()),
            }),
            superuser: Some("postgres".into()),
            stalled: Some(vec![Held { step: "census".into(), by: "statement timeout on public.pages".into() }]),
        }
    }

    /// The names rows already hold: a renamed field would leave every stored row unread by the new build, so the
    /// rename must be a decision (a migration of the rows, or an alias), not an accident.
    #[test]
    fn the_names_stored_in_run_rows_are_the_ones_read_back() {
        let stored = json!({
            "bucket": {
                "bucket": "assets",
                "versioning": "Suspended",
                "noncurrent_expiry": { "days": 30, "prefixes": ["uploads/"] },
                "destruction": "held",
                "held_because": "versioning of bucket assets is Suspended",
                "cost_warning": "kept for ever",
            },
            "superuser": "postgres",
            "stalled": [{ "step": "census", "by": "statement timeout on public.pages" }],
        });
        assert_eq!(serde_json::to_value(every_part()).expect("json"), stored);
        assert_eq!(Reason::of(Some(&stored)), every_part());
    }

    #[test]
    fn the_parts_join_what_the_row_holds_and_an_odd_part_costs_only_itself() {
        let mut reason = json!({ "stopped": "drained", "superuser": "someone else" });
        every_part().write_into(&mut reason);
        assert_eq!(reason["stopped"], "drained", "the row's other parts are kept");
        assert_eq!(reason["superuser"], "postgres");
        assert_eq!(Reason::of(Some(&reason)), every_part());

        let odd = json!({ "bucket": { "bucket": 7 }, "superuser": "postgres" });
        assert_eq!(Reason::of(Some(&odd)), Reason { superuser: Some("postgres".into()), ..Reason::default() });
        assert_eq!(Reason::of(Some(&json!("refused"))), Reason::default());
        assert_eq!(Reason::of(None), Reason::default());
    }
}
