//! Flotilla's `Scenario` kind (flotilla.dev/v1alpha1): the synthetic traffic, the truth about a
//! new version and the faults that `flotilla simulate` runs a fleet rollout against.

use serde::{Deserialize, Serialize};

use super::common::Duration;
use super::kube::ObjectMeta;

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
    /// What happens during the run, at given virtual times: a new revision, an operator's
    /// command, a cluster joining or leaving the Fleet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<ScenarioEvent>,
}

/// One event of a scenario's timeline: exactly one of `revision`, `command`, `join` or `leave`,
/// applied at virtual time `at` (before that tick's reconcile).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScenarioEvent {
    /// When (since the simulation started).
    pub at: Duration,
    /// A new fleet revision: the Rollout with this image (and args or env) in its first
    /// container, superseding the one in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<RevisionEvent>,
    /// An operator command, as `flotilla promote | abort | retry | pause | resume | undo` sends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<EventCommand>,
    /// The command's cluster (`promote`, `abort`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The command's 1-based wave (`promote`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave: Option<usize>,
    /// `promote` skips every remaining step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full: Option<bool>,
    /// A cluster of the file's Fleet that joins it now (absent from the Fleet until then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join: Option<String>,
    /// A cluster that leaves the Fleet now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leave: Option<String>,
}

impl ScenarioEvent {
    /// What kind of event this is (`revision`, `command`, `join`, `leave`), or every kind it
    /// sets when it sets none or several.
    pub fn kinds(&self) -> Vec<&'static str> {
        let mut kinds = Vec::new();
        if self.revision.is_some() {
            kinds.push("revision");
        }
        if self.command.is_some() {
            kinds.push("command");
        }
        if self.join.is_some() {
            kinds.push("join");
        }
        if self.leave.is_some() {
            kinds.push("leave");
        }
        kinds
    }
}

/// A new revision: what changes in the Rollout's first container.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RevisionEvent {
    /// The image.
    pub image: String,
    /// Replaces the container's args.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    /// Set in the container's env.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
}

/// An operator command of a scenario event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum EventCommand {
    /// Skip the current bake, or promote a wave's (or one cluster's) paused clusters.
    Promote,
    /// Abort the fleet, or one cluster.
    Abort,
    /// Retry the failed and held clusters.
    Retry,
    /// Start no new cluster or wave.
    Pause,
    /// Resume.
    Resume,
    /// Roll the fleet back to the revision before the current one (a new fleet revision).
    Undo,
}

impl EventCommand {
    /// The verb.
    pub fn verb(self) -> &'static str {
        match self {
            EventCommand::Promote => "promote",
            EventCommand::Abort => "abort",
            EventCommand::Retry => "retry",
            EventCommand::Pause => "pause",
            EventCommand::Resume => "resume",
            EventCommand::Undo => "undo",
        }
    }
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
    /// How other images behave here (the revisions of `spec.events`), by image; an image not
    /// listed behaves as `canary`, and `previousImage` as `stable`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub images: std::collections::BTreeMap<String, VersionProfile>,
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

/// A version's behaviour in one cluster, and (for a subset) the traffic it receives.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VersionProfile {
    /// Fraction of requests that fail.
    pub error_rate: f64,
    /// Latency distribution (log-normal from p50 and p95, seconds).
    pub latency: LatencyProfile,
    /// On `canary`: the fraction of the router's canary weight that reaches the canary (default
    /// 1; 0 models a broken route). The rest is served by the stable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_share: Option<f64>,
    /// On `stable` or `canary`: the subset serves this many requests per second whenever the
    /// router gives it weight, whatever the weight (synthetic or header-routed traffic),
    /// instead of its share of the cluster's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_second: Option<f64>,
}

impl VersionProfile {
    /// A profile with no traffic settings.
    pub fn new(error_rate: f64, latency: LatencyProfile) -> VersionProfile {
        VersionProfile {
            error_rate,
            latency,
            traffic_share: None,
            requests_per_second: None,
        }
    }
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

/// A fault over a period of virtual time: from `from` until `to`, or for `for` (neither: until
/// the end).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Fault {
    /// What fails.
    pub kind: FaultKind,
    /// From.
    pub from: FaultTime,
    /// Until (exclusive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<FaultTime>,
    /// How long, from `from` (instead of `to`).
    #[serde(default, rename = "for", skip_serializing_if = "Option::is_none")]
    pub length: Option<Duration>,
}

/// A moment of a fault window: a time since the simulation started, or a time after the
/// cluster started the current revision, or after its wave started. A relative moment does not
/// come while its anchor has not happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    untagged,
    expecting = "expected a duration since the start (20m), {afterClusterStart: 5m} or {afterWaveStart: 2m}"
)]
pub enum FaultTime {
    /// Since the simulation started.
    At(Duration),
    /// Relative to an anchor.
    Relative(RelativeTime),
}

/// A moment relative to a cluster's start or its wave's start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum RelativeTime {
    /// After the cluster started the current revision (its canary).
    AfterClusterStart(Duration),
    /// After the cluster's wave started.
    AfterWaveStart(Duration),
}

impl FaultTime {
    /// The moment (ms of virtual time), given when the cluster and its wave started the
    /// current revision; None while its anchor has not happened.
    pub fn resolve(&self, cluster_start: Option<i64>, wave_start: Option<i64>) -> Option<i64> {
        let ms = |d: &Duration| d.as_millis().unwrap_or(0) as i64;
        match self {
            FaultTime::At(d) => Some(ms(d)),
            FaultTime::Relative(RelativeTime::AfterClusterStart(d)) => {
                cluster_start.map(|s| s + ms(d))
            }
            FaultTime::Relative(RelativeTime::AfterWaveStart(d)) => wave_start.map(|s| s + ms(d)),
        }
    }
}

impl Fault {
    /// Whether the fault is on at `now` (ms), given the cluster's and its wave's start.
    pub fn active(&self, now: i64, cluster_start: Option<i64>, wave_start: Option<i64>) -> bool {
        let Some(from) = self.from.resolve(cluster_start, wave_start) else {
            return false;
        };
        let to = match (&self.to, &self.length) {
            (Some(to), _) => match to.resolve(cluster_start, wave_start) {
                Some(to) => Some(to),
                // Its end's anchor has not happened: no window yet.
                None => return false,
            },
            (None, Some(length)) => Some(from + length.as_millis().unwrap_or(0) as i64),
            (None, None) => None,
        };
        now >= from && to.is_none_or(|to| now < to)
    }
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
