//! The agent's configuration as its file holds it: every field, its default and the bounds of
//! the numbers, and which workload template a subset runs.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use flotilla_agent_backend::wire::{MirrorSpec, RouteSpec};
use serde::{Deserialize, Serialize};

use super::template::WorkloadTemplate;

/// One agent's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentConfig {
    /// The cluster this agent is (the `cluster` label of its metrics).
    pub cluster: String,
    /// Where the router listens, and on how many threads it serves.
    pub router: RouterListener,
    /// Where the control API listens, and where its bearer token is.
    pub control: ControlListener,
    /// Seed of the router's random choices (weighted split, mirroring); random when absent.
    #[serde(default)]
    pub seed: Option<u64>,
    /// The total weight: the canary's weight is out of this (Argo's `maxTrafficWeight`).
    #[serde(default = "default_max_weight")]
    pub max_weight: u32,
    /// The most replicas one subset may run (default 32, at most 1000): the control API refuses
    /// to scale above it.
    #[serde(default = "default_max_replicas")]
    pub max_replicas: u32,
    /// The weights in effect when the agent starts.
    #[serde(default)]
    pub weights: InitialWeights,
    /// Routes in effect when the agent starts, tried in order before the weights.
    #[serde(default)]
    pub routes: Vec<RouteSpec>,
    /// Mirror routes in effect when the agent starts.
    #[serde(default)]
    pub mirrors: Vec<MirrorSpec>,
    /// The workload template of every subset that does not have its own.
    #[serde(default)]
    pub workload: Option<WorkloadTemplate>,
    /// The subsets (revisions) the router sends traffic to; `stable` and `canary` are required.
    pub subsets: BTreeMap<String, SubsetConfig>,
}

fn default_max_weight() -> u32 {
    100
}

/// The replicas a subset may run when the configuration does not say.
pub const DEFAULT_MAX_REPLICAS: u32 = 32;
/// The most a configuration's `maxReplicas` may be.
pub const MAX_REPLICAS_LIMIT: u32 = 1000;

fn default_max_replicas() -> u32 {
    DEFAULT_MAX_REPLICAS
}

impl AgentConfig {
    /// The names of the subsets, for messages.
    pub fn subset_names(&self) -> String {
        self.subsets.keys().cloned().collect::<Vec<_>>().join(", ")
    }

    /// The workload template of a subset (its own or the top-level one).
    pub fn template_of(&self, subset: &str) -> Option<&WorkloadTemplate> {
        self.subsets
            .get(subset)
            .and_then(|s| s.workload.as_ref())
            .or(self.workload.as_ref())
    }
}

/// The router's listen address and threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouterListener {
    /// A loopback address and port (port 0 picks a free one).
    pub listen: SocketAddr,
    /// Threads serving the router's connections, each with a single-threaded runtime of its
    /// own (like nginx's `worker_processes`); 1 to [`MAX_ROUTER_THREADS`].
    #[serde(default = "default_router_threads")]
    pub threads: usize,
}

/// The router's threads when the configuration does not say.
pub const DEFAULT_ROUTER_THREADS: usize = 2;
/// The most router threads a configuration may ask for.
pub const MAX_ROUTER_THREADS: usize = 64;

fn default_router_threads() -> usize {
    DEFAULT_ROUTER_THREADS
}

/// A listen address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Listener {
    /// A loopback address and port (port 0 picks a free one).
    pub listen: SocketAddr,
}

/// The control API's listen address and bearer token file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ControlListener {
    /// A loopback address and port (port 0 picks a free one).
    pub listen: SocketAddr,
    /// The file holding the token mutating calls need (relative to the configuration file);
    /// default `<configuration file>.token`, created with mode 0600 at first start.
    /// `FLOTILLA_AGENT_TOKEN` overrides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<std::path::PathBuf>,
}

/// The weights in effect at start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InitialWeights {
    /// The canary's weight, 0..=maxWeight.
    #[serde(default)]
    pub canary: u32,
}

/// One subset: a revision run as local processes, or fixed upstream endpoints.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubsetConfig {
    /// The version the replicas run (`{{version}}` in the command template).
    #[serde(default)]
    pub version: String,
    /// How many replicas to run.
    #[serde(default)]
    pub replicas: u32,
    /// This subset's own workload template (instead of the top-level one).
    #[serde(default)]
    pub workload: Option<WorkloadTemplate>,
    /// Fixed upstream endpoints instead of processes (loopback addresses).
    #[serde(default)]
    pub endpoints: Vec<SocketAddr>,
}
