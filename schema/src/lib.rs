//! What the application's schema says about references: the reference map's model ([`map`]) and its derivation
//! from the catalog ([`derive`]), the schema check ([`check`]) and its first look at the rows ([`sample`]), the
//! census that proves the columns that are no source ([`census`]), the reference guards ([`guards`]), the recorded
//! verdicts ([`verdict`]), and the SQL a map compiles to: the recheck of one asset ([`recheck`]) and discovery's
//! batch question ([`batch`]), each run only while the columns it reads have the types it was planned for
//! ([`typed`]).
//!
//! Nothing here writes an asset row or calls S3: it reads the catalog and the application's rows, and keeps its
//! own bookkeeping (census state, named keys, verdicts, guards).

#![warn(missing_docs)]

pub mod batch;
pub mod census;
pub mod check;
pub mod derive;
pub mod guards;
pub mod key_sources;
pub mod map;
pub mod naming;
pub mod recheck;
pub mod sample;
pub mod typed;
pub mod verdict;

pub use check::check;
pub use derive::derive;
pub use map::{
    Candidate, CensusPace, CheckOptions, Derived, ReferenceMap, ReferenceSource, SchemaCheckError, SchemaProblem,
    SchemaRefusal, SourceKind, UnindexedSources,
};
pub use migrator::{OWN_TABLES, UUID_IN_TEXT, UUID_WHOLE};
