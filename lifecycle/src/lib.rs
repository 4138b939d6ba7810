//! The asset's lifecycle: its states and the rules that decide what settlement does ([`rules`]), the holds that make
//! a destruction wait ([`holds`]), what the access logs saw of a file ([`reads`]: a read keeps), the judgement of one asset that the settle acts on and the operator's `plan` and
//! `explain` print ([`judgement`]), the settle itself ([`settle`]), discovery, the blast-radius brake, the cleanup
//! message, the run outcomes, restore, and every write to the `assets` table ([`assets`]): nothing outside this
//! crate writes an asset row.

#![warn(missing_docs)]

pub mod adopted;
pub mod assets;
pub mod brake;
pub mod discovery;
pub mod facts;
pub mod holds;
pub mod judgement;
pub mod message;
pub mod reads;
pub mod restore;
pub mod rules;
pub mod runs;
pub mod settle;
pub mod standing;

pub use message::CleanupMessage;
pub use rules::*;
