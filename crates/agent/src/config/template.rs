//! How to run one replica of a revision: the command and environment templates (`{{version}}`
//! and `{{port}}` substituted), the readiness probe, the grace and drain periods and the restart
//! backoff.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How to run one replica of a revision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkloadTemplate {
    /// The program and its arguments; `{{version}}` and `{{port}}` are substituted.
    pub command: Vec<String>,
    /// Variables added to the inherited environment (values are templates too).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The readiness probe.
    #[serde(default)]
    pub readiness: Readiness,
    /// How long a replica has between SIGTERM and SIGKILL.
    #[serde(default = "default_grace")]
    pub termination_grace_period_seconds: u64,
    /// How long a replica keeps serving after it leaves routing and before it gets SIGTERM.
    #[serde(default = "default_drain")]
    pub drain_delay_ms: u64,
    /// The first delay before restarting a crashed replica; it doubles up to `maxMs`.
    #[serde(default)]
    pub restart_backoff: Backoff,
}

fn default_grace() -> u64 {
    10
}

fn default_drain() -> u64 {
    300
}

/// The HTTP readiness probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Readiness {
    /// The path probed with GET; any 2xx or 3xx is ready.
    #[serde(default = "default_probe_path")]
    pub path: String,
    /// Time between probes.
    #[serde(default = "default_period")]
    pub period_ms: u64,
    /// Time a probe may take.
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
    /// Consecutive failures that take a ready replica out of routing.
    #[serde(default = "default_failures")]
    pub failure_threshold: u32,
}

fn default_probe_path() -> String {
    "/healthz".into()
}
fn default_period() -> u64 {
    250
}
fn default_timeout() -> u64 {
    1000
}
fn default_failures() -> u32 {
    2
}

impl Default for Readiness {
    fn default() -> Self {
        Readiness {
            path: default_probe_path(),
            period_ms: default_period(),
            timeout_ms: default_timeout(),
            failure_threshold: default_failures(),
        }
    }
}

/// Restart backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Backoff {
    /// The first delay.
    #[serde(default = "default_backoff_initial")]
    pub initial_ms: u64,
    /// The largest delay.
    #[serde(default = "default_backoff_max")]
    pub max_ms: u64,
}

fn default_backoff_initial() -> u64 {
    200
}
fn default_backoff_max() -> u64 {
    10_000
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial_ms: default_backoff_initial(),
            max_ms: default_backoff_max(),
        }
    }
}

impl WorkloadTemplate {
    /// The grace period between SIGTERM and SIGKILL.
    pub fn grace(&self) -> Duration {
        Duration::from_secs(self.termination_grace_period_seconds)
    }

    /// The command line for one replica.
    pub fn argv(&self, version: &str, port: u16) -> Vec<String> {
        self.command
            .iter()
            .map(|a| substitute(a, version, port))
            .collect()
    }

    /// The environment added for one replica.
    pub fn env_for(&self, version: &str, port: u16) -> Vec<(String, String)> {
        self.env
            .iter()
            .map(|(k, v)| (k.clone(), substitute(v, version, port)))
            .collect()
    }
}

fn substitute(template: &str, version: &str, port: u16) -> String {
    template
        .replace("{{version}}", version)
        .replace("{{port}}", &port.to_string())
}
