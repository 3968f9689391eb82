//! The Rollout engine: canary and blue-green state machines with Argo Rollouts' semantics, and
//! the ports (traffic router, workload driver, analysis executor) the runtime plugs in.

pub mod engine;
pub mod model;
pub mod ports;

pub use engine::{desired_actions, reconcile, reconcile_with_hash, template_hash};
pub use model::*;

#[cfg(test)]
mod tests;
