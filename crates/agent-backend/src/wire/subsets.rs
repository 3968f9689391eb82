//! The subsets on the wire: the two every agent has, what one runs (its replicas and their
//! phases), and the body that scales it.

use serde::{Deserialize, Serialize};

/// The subset that receives `maxWeight - canary` of the weighted traffic.
pub const STABLE: &str = "stable";
/// The subset that receives `canary` of the weighted traffic.
pub const CANARY: &str = "canary";

/// `PUT /v1/subsets/{subset}/scale`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scale {
    /// The version to run.
    pub version: String,
    /// How many replicas.
    pub replicas: u32,
}

/// The phase of one replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Started, readiness not yet passed.
    Starting,
    /// Passing its readiness probe and in routing (unless stopping).
    Ready,
    /// Was ready, now failing its probe.
    NotReady,
    /// Exited or failed to start; waiting to restart.
    Crashed,
    /// Being stopped.
    Stopping,
}

/// One replica's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaStatus {
    /// The replica's number within the agent.
    pub id: u64,
    /// The version it runs.
    pub version: String,
    /// Its phase.
    pub phase: Phase,
    /// Its port (of the current process).
    pub port: Option<u16>,
    /// Its process id (of the current process).
    pub pid: Option<u32>,
    /// How many times it was restarted.
    pub restarts: u32,
    /// How the last process ended, if one did.
    pub last_exit: Option<String>,
}

/// One subset's workload state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubsetStatus {
    /// The subset.
    pub subset: String,
    /// The desired version.
    pub version: String,
    /// The desired number of replicas.
    pub desired_replicas: u32,
    /// Replicas in routing (any version).
    pub ready_replicas: u32,
    /// Ready replicas of the desired version.
    pub available_replicas: u32,
    /// Replicas of the desired version that are not being stopped.
    pub updated_replicas: u32,
    /// The endpoints in routing.
    pub endpoints: Vec<String>,
    /// Whether the subset routes to fixed endpoints instead of processes.
    pub fixed_endpoints: bool,
    /// Every replica.
    pub replicas: Vec<ReplicaStatus>,
}
