//! The scheduled half of the pair: claims due assets and enqueues one message each.
//!
//! Its handler arrives with the sweep issue; until then this crate holds no function binary, so nothing can be
//! deployed that pretends to sweep.
