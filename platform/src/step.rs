//! The shape every step of a sweep pass has: records, census, discovery, reconciliation and adoption each advance
//! within their share of the pass, in bounded batches of their own transactions, resume next pass from what they
//! persisted, and say where they stand. The sweep runs them all through one helper; `status` reads their standing.

use std::fmt::Display;
use std::future::Future;
use std::time::Instant;

use serde::Serialize;
use sqlx::{PgConnection, PgPool};

/// A step's share of a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    /// It starts no batch it could not finish by then.
    pub until: Instant,
    /// The pass's own end: a step whose statements may run long bounds them by it (reconciliation's do).
    pub deadline: Instant,
}

/// A step as it runs in one pass: its own terms (the step's struct) and its share of the pass, handed down to the
/// functions that do its work.
#[derive(Debug)]
pub struct Paced<'a, S> {
    /// The step, with its terms.
    pub step: &'a S,
    /// Its share of the pass.
    pub share: Share,
}

// Derived `Clone`/`Copy` would ask the same of `S`, which a reference does not need.
impl<S> Clone for Paced<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for Paced<'_, S> {}

impl Share {
    /// `percent` of what is left, from now, of a pass that ends at `deadline`.
    pub fn of(percent: u32, deadline: Instant) -> Share {
        let now = Instant::now();
        Share { until: now + deadline.saturating_duration_since(now) * percent / 100, deadline }
    }
}

/// One step of a sweep pass. None destroys a file: the records step deletes the application's expired records as
/// its rules say; the others make assets due, or record what they found.
pub trait Step {
    /// What one pass of it did: kept in the pass's run record.
    type Progress: Serialize + Send;
    /// Where it stands across passes: what `status` shows.
    type Standing: Serialize + Send;
    /// Why it stopped; the pass goes on without it, and the run record keeps the sentence.
    type Error: Display + Send;

    /// Its name in the logs.
    const NAME: &'static str;
    /// What a failure leaves, for the log line: who waits, and for what.
    const ON_FAILURE: &'static str;

    /// Advances within `share`, each batch in a transaction of its own from `pool`.
    fn advance(&self, pool: &PgPool, share: Share) -> impl Future<Output = Result<Self::Progress, Self::Error>> + Send;

    /// Where it stands, as its persisted state says.
    fn standing(conn: &mut PgConnection) -> impl Future<Output = Result<Self::Standing, sqlx::Error>> + Send;

    /// The log line of a pass's progress.
    fn log(progress: &Self::Progress);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_share_is_its_percent_of_what_is_left_and_keeps_the_pass_deadline() {
        let deadline = Instant::now() + Duration::from_secs(100);
        let share = Share::of(20, deadline);
        assert_eq!(share.deadline, deadline);
        let left = share.until.saturating_duration_since(Instant::now());
        assert!(left <= Duration::from_secs(20) && left > Duration::from_secs(19), "{left:?}");
        let past = Instant::now() - Duration::from_secs(1);
        assert!(Share::of(50, past).until <= Instant::now(), "a pass past its end leaves no share");
    }
}
