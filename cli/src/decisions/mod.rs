//! A person's decisions, each shown first and then recorded through the library that owns it: approvals through the
//! brakes, windows in which nothing is destroyed, pins.

pub(crate) mod approve;
pub(crate) mod hold;
pub(crate) mod pin;
