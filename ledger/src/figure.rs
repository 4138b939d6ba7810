//! Objects and their bytes: every count the ledger prices.

use serde::Serialize;

/// Objects and their bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Figure {
    /// How many objects (or versions).
    pub objects: u64,
    /// Their bytes.
    pub bytes: u64,
}

impl std::iter::Sum for Figure {
    fn sum<I: Iterator<Item = Figure>>(iter: I) -> Figure {
        iter.fold(Figure::default(), |sum, f| sum.plus(f))
    }
}

impl Figure {
    pub(crate) fn plus(self, other: Figure) -> Figure {
        Figure { objects: self.objects.saturating_add(other.objects), bytes: self.bytes.saturating_add(other.bytes) }
    }

    pub(crate) fn add(&mut self, objects: i64, bytes: i64) {
        self.objects = self.objects.saturating_add(objects.max(0).unsigned_abs());
        self.bytes = self.bytes.saturating_add(bytes.max(0).unsigned_abs());
    }
}

/// A figure from a statement's counts (a negative one, which no statement should give, counts as none).
pub(crate) fn figure(objects: i64, bytes: i64) -> Figure {
    let mut f = Figure::default();
    f.add(objects, bytes);
    f
}
