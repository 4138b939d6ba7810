//! Sweep passes as their run rows record them (`sweep_runs`), read by the sweep that writes them and by the
//! operator's `status`. What anything reads back of a row's JSON is a type here ([`Reason`], [`BucketCheck`], [`Effect`]; the money is
//! the ledger's `Money`): the
//! sweep writes it through the type, and the costs and the CLI read it through the same one.

mod bucket;
pub mod effect;
mod reason;
pub mod standing;

pub use bucket::{BucketCheck, Destruction};
pub use effect::{Effect, Lapsed, Overdue};
pub use reason::{Held, Reason};
pub use standing::{Claims, Pass};

use platform::text_enum;

text_enum! {
    /// How a pass ended: the column `sweep_runs.outcome`.
    pub enum RunOutcome {
        /// Still going, or died without finishing its row (the next pass marks it `failed`).
        Running = "running",
        /// Everything claimed was enqueued.
        Ok = "ok",
        /// Some claims could not be sent and were released for the next pass.
        Partial = "partial",
        /// The schema check failed: nothing was claimed.
        Refused = "refused",
        /// At least one workspace was held back by the brake.
        Braked = "braked",
        /// Another sweep held the lock.
        Skipped = "skipped",
        /// An error ended the pass.
        Failed = "failed",
        /// Work was waiting and the pass advanced none of it: a statement outlived its share, or no time was left to
        /// claim (`reason.stalled` names the step and what held it).
        Stalled = "stalled",
    }
}

impl RunOutcome {
    /// Passes that finished well: `status` warns when none did within the expected interval.
    pub const GOOD: &'static [RunOutcome] = &[RunOutcome::Ok, RunOutcome::Partial];

    /// A pass that checked the schema and claimed: what the heartbeat alarm and `status` call a good pass.
    pub fn completed(self) -> bool {
        matches!(self, RunOutcome::Ok | RunOutcome::Partial | RunOutcome::Braked)
    }

    /// A finished pass that a person should look at.
    pub fn needs_attention(self) -> bool {
        matches!(self, RunOutcome::Refused | RunOutcome::Braked | RunOutcome::Failed | RunOutcome::Stalled)
    }
}
