//! Flotilla's `Scenario` kind (flotilla.dev/v1alpha1): the synthetic traffic, the truth about a
//! new version and the faults that `flotilla simulate` runs a fleet rollout against.

use serde::{Deserialize, Serialize};

use super::{Duration, ObjectMeta};

/// A simulation scenario (`kind: Scenario`, flotilla.dev/v1alpha1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scenario {
    /// `flotilla.dev/v1alpha1`.
    pub api_version: String,
    /// `Scenario`.
    pub kind: String,
    /// Object metadata.
    #[serde(default, deserialize_with = "crate::spec::common::null_as_default")]
    pub metadata: ObjectMeta,
    /// The scenario.
    pub spec: ScenarioSpec,
}

/// What is simulated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScenarioSpec {
    /// The FleetRollout to run (default: the only one in the file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet_rollout: Option<String>,
    /// The image every cluster runs before the rollout (the stable version).
    pub previous_image: String,
    /// Virtual time simulated at most (default 12h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<Duration>,
    /// The time bucket, and the reconcile interval (default 10s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tick: Option<Duration>,
    /// A request slower than this (seconds) is a bad request (default: only errors are bad).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_objective: Option<f64>,
    /// Traffic per cluster.
    pub clusters: Vec<ScenarioCluster>,
}

/// One cluster's traffic, and the truth about the new version there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScenarioCluster {
    /// The cluster's name in the Fleet.
    pub name: String,
    /// Requests per second the cluster serves.
    pub requests_per_second: f64,
    /// How the stable version behaves here.
    pub stable: VersionProfile,
    /// How the new version behaves here (default: as the stable — no regression).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<VersionProfile>,
    /// Relative noise per bucket on error rate and latency (default 0.05).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise: Option<f64>,
    /// This cluster's latency objective (seconds), overriding the scenario's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_objective: Option<f64>,
    /// Faults over time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<Fault>,
}

/// A version's behaviour in one cluster.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VersionProfile {
    /// Fraction of requests that fail.
    pub error_rate: f64,
    /// Latency distribution (log-normal from p50 and p95, seconds).
    pub latency: LatencyProfile,
}

/// A log-normal latency distribution given by two quantiles.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LatencyProfile {
    /// Median, seconds.
    pub p50: f64,
    /// 95th percentile, seconds.
    pub p95: f64,
}

/// A fault over a period of virtual time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Fault {
    /// What fails.
    pub kind: FaultKind,
    /// From (since the simulation started).
    pub from: Duration,
    /// Until.
    pub to: Duration,
}

/// What fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FaultKind {
    /// The cluster does not answer the controller.
    Unreachable,
    /// The cluster's metrics provider is down.
    MetricsOutage,
}
