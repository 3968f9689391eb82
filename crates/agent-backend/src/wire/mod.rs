//! The control API's wire types: every body the agent's control API reads or answers, shared by
//! the agent that serves it and the client that calls it. Their JSON is the contract between
//! the two (docs/agent.md is its reference).
//!
//! - routing: the weights, header and cookie routes, mirror routes;
//! - subsets: the `stable` and `canary` subsets, replicas and their phases, scaling;
//! - traffic: statistics windows and what they hold.

mod routing;
mod subsets;
mod traffic;

use serde::{Deserialize, Serialize};

pub use routing::{
    CookieMatch, HeaderMatch, MirrorBody, MirrorSpec, RouteBody, RouteSpec, SetWeights, Weights,
};
pub use subsets::{CANARY, Phase, ReplicaStatus, STABLE, Scale, SubsetStatus};
pub use traffic::{BUCKET_SECONDS, Latency, QuantileValue, Window, WindowQuery};

/// `GET /v1/status`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentStatus {
    /// The cluster.
    pub cluster: String,
    /// The weights in effect.
    pub weights: Weights,
    /// The routes in effect, in the order they are tried.
    pub routes: Vec<RouteSpec>,
    /// The mirror routes in effect.
    pub mirrors: Vec<MirrorSpec>,
    /// Every subset's workload.
    pub subsets: Vec<SubsetStatus>,
}
