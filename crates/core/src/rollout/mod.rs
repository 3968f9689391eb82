//! The Rollout engine: canary and blue-green state machines with Argo Rollouts' semantics. What
//! a cluster must run follows from its state ([`crate::backend::ClusterDesired::of`]).

pub mod engine;
pub mod model;
pub mod pod_template_hash;

pub use engine::{reconcile, reconcile_with_hash, template_hash};
pub use model::*;

#[cfg(test)]
mod tests;
