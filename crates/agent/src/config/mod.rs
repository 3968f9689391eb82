//! The agent's configuration file: YAML (or JSON) read with the core's loader, so that every
//! error names the file, line, column and field path.
//!
//! ```yaml
//! cluster: eu-west
//! router: {listen: "127.0.0.1:8080", threads: 2}
//! control: {listen: "127.0.0.1:9090", tokenFile: agent.token}  # default: <this file>.token
//! seed: 42
//! maxReplicas: 32
//! weights: {canary: 0}
//! workload:
//!   command: [flotilla, demo-app, --version, "{{version}}", --port, "{{port}}"]
//!   readiness: {path: /healthz}
//! subsets:
//!   stable: {version: "1.8.3", replicas: 2}
//!   canary: {version: "1.9.0", replicas: 0}
//! ```
//!
//! Its parts: the schema (fields and defaults), the workload template, the validation, and the
//! loading that ties them.

mod load;
mod schema;
mod template;
mod validate;

pub use schema::{
    AgentConfig, ControlListener, DEFAULT_MAX_REPLICAS, DEFAULT_ROUTER_THREADS, InitialWeights,
    Listener, MAX_REPLICAS_LIMIT, MAX_ROUTER_THREADS, RouterListener, SubsetConfig,
};
pub use template::{Backoff, Readiness, WorkloadTemplate};
pub use validate::{MAX_VERSION_LEN, check_version, valid_name};

#[cfg(test)]
mod tests;
