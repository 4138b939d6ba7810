//! Money in one room: what stored bytes cost ([`prices`]: S3's price table, [`Monthly`], [`Priced`]), how long the
//! bucket keeps and bills what a delete leaves ([`window`]: S3's expiry rule, once in Rust and once in SQL), what the
//! bucket's bytes cost by what the sweeper knows of them ([`holdings`], in [`figure`]s, with what reconciliation
//! found: [`found`]), what one pass freed and what still waits ([`freed`]: the run row's `money`), what happened over
//! a period ([`report`]), what a comparison on Athena costs
//! ([`scan`]), and S3's own figures against the rows ([`drift`]; the sweep reads them from CloudWatch, so
//! that the consumer, which links this crate through the settings, links no CloudWatch client).
//!
//! Everything here reads; the only rows it writes are the drift's measurements. The sweep writes a pass's money and
//! drift through these types; `status`, `report`, `plan` and `explain` read them back through the same ones.

#![warn(missing_docs)]

pub mod drift;
pub mod figure;
pub mod found;
pub mod freed;
pub mod holdings;
pub mod prices;
pub mod report;
pub mod scan;
pub mod window;

pub use prices::{GB, Monthly, Priced, Prices, gb};
pub use window::Window;
