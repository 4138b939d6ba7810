//! The consuming half of the pair: settles each claimed asset inside one transaction.
//!
//! Its handler arrives with the consumer issue; until then this crate holds no function binary, so nothing can
//! be deployed that pretends to settle.
