//! The controller's side of a Flotilla agent, linking none of the agent's data plane:
//!
//! - [`wire`]: the control API's wire types, the contract the agent serves;
//! - [`client`]: [`AgentClient`], the control API called one method per endpoint;
//! - [`token`]: the control API's bearer token as a caller reads it from a file;
//! - [`loopback`]: the `Host` names a loopback listener with open reads answers;
//! - [`backend`]: [`AgentBackend`], the core's [`flotilla_core::backend::ClusterBackend`] port
//!   over the control API;
//! - [`builtin`]: the `builtin` metric provider reading the agent's traffic statistics.

pub mod backend;
pub mod builtin;
pub mod client;
pub mod loopback;
pub mod token;
pub mod wire;

pub use backend::AgentBackend;
pub use client::{AgentClient, ClientError};
