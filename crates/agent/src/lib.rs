//! Flotilla's embedded data plane.
//!
//! One [`agent`] is one local cluster: a weighted HTTP/1.1 and HTTP/2 (h2c) reverse proxy
//! ([`router`]), the revisions it routes to run as local processes ([`workload`]), per-subset
//! traffic statistics kept in 10-second buckets ([`stats`]), and a control API on loopback
//! ([`control`], its changes behind a bearer token: [`auth`]; its statistics queries planned
//! in [`query`]), configured from a file ([`config`]). The control API's wire types, and the
//! client the controller drives it through, are [`flotilla_agent_backend`]'s: the controller
//! links them without this crate. The agent keeps serving with its last configuration when the
//! controller goes away.
//!
//! The crate also holds the [`demo_app`] service (whose latency, errors and dependency calls come
//! from its flags) and the open-loop [`loadgen`] that only ever targets loopback.

pub mod agent;
pub mod auth;
pub mod config;
pub mod control;
pub mod demo_app;
pub mod loadgen;
pub mod query;
pub mod router;
pub mod stats;
pub mod workload;

mod error;
mod serve;
mod shared;

pub use agent::Agent;
pub use config::AgentConfig;
pub use error::AgentError;

/// The tokio runtime the agent and the demo service run on: multi-threaded, two workers
/// (enough for loopback traffic, and friendly to small machines).
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}
