//! The FleetRollout state machine: a new revision reaches a fleet in waves, a wave advances only
//! when every one of its clusters is validated on that revision with evidence, and a failure is
//! rolled back with the same granularity. It composes one rollout engine and its analysis runs
//! per cluster, and performs no I/O: `tick` takes observations, measurement outcomes, commands
//! and `now`, and returns per-cluster actions, measurement requests and the decisions made, as typed
//! events ([`FleetEvent`]).
//!
//! From the ground up: `sorted` (the sorted-list map the state keeps its clusters and each cluster's runs in),
//! `state` (the persisted state), `commands` (operator commands), `plan`
//! (the resolved waves and per-cluster arguments), `overlay` (per-cluster overlays and pins),
//! `event` (the decisions), `tick` (what a tick takes and hands back), `specs` (the specs a fleet
//! has run), and `machine`, which drives them. Every public item is re-exported here.

mod commands;
mod event;
mod machine;
mod overlay;
mod plan;
mod sorted;
mod specs;
mod state;
mod tick;

pub use commands::FleetCommand;
pub use event::*;
pub use machine::*;
pub use overlay::*;
pub use plan::*;
pub use sorted::{AsObject, AsPairs, NameMap, SortedMap};
pub use specs::FleetSpecs;
pub use state::*;
pub use tick::*;

#[cfg(test)]
mod tests;
