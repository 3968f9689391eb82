//! The controller's side of a Flotilla agent: the cluster backend ([`backend::AgentBackend`],
//! the core's [`flotilla_core::backend::ClusterBackend`] port over the agent's control API) and
//! the `builtin` metric provider reading the agent's traffic statistics.

pub mod backend;
pub mod builtin;

pub use backend::{AgentBackend, image_version};
