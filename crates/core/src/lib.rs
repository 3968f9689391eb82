//! Flotilla's core: the typed model of every manifest, strict parsing with precise locations,
//! lint, and the analysis, rollout and fleet state machines with the simulator that drives them.
//!
//! Architecture invariant: nothing in this crate performs I/O. It never reads a file, opens a
//! socket, reads a clock or spawns a process; callers hand it text, observations and `now`, and it
//! hands back values and decisions.

pub mod analysis;
pub mod backend;
pub mod diagnostic;
pub mod fleet;
pub mod judge;
pub mod lint;
pub mod manifest;
pub mod rng;
pub mod rollout;
pub mod simulate;
pub mod spec;
pub mod time;
