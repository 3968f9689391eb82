//! The canary strategy's settings and its steps: weights, pauses, analysis, experiments,
//! canary scale, header and mirror routes, and plugin steps.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::analysis_refs::{RolloutAnalysis, RolloutAnalysisBackground};
use super::experiment::RolloutExperimentStep;
use super::pods::{AntiAffinity, PodTemplateMetadata};
use super::traffic::TrafficRouting;
use crate::spec::common::{Duration, IntOrPercent};

/// Settings of a canary update.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CanaryStrategy {
    /// Service that selects only canary pods (required with traffic routing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_service: Option<String>,
    /// Service that selects only stable pods (required with traffic routing; differs from the
    /// canary service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_service: Option<String>,
    /// The steps, run in order; none means a plain rolling update.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<CanaryStep>,
    /// Fine-grained traffic shifting through a mesh, ingress controller or plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_routing: Option<TrafficRouting>,
    /// Pods that may be unavailable during an update (default 25%; rounded down). Not 0 when
    /// `maxSurge` is 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrPercent>,
    /// Pods that may exist above the desired count during an update (default 25%; rounded up).
    /// Not 0 when `maxUnavailable` is 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrPercent>,
    /// Background analysis running alongside the steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<RolloutAnalysisBackground>,
    /// Pod anti-affinity injected against the other version's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anti_affinity: Option<AntiAffinity>,
    /// Labels and annotations put on pods while they are the canary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_metadata: Option<PodTemplateMetadata>,
    /// Labels and annotations put on pods while they are the stable version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_metadata: Option<PodTemplateMetadata>,
    /// Seconds to wait, after the stable service moves to the new ReplicaSet, before scaling the
    /// old one down (default 30; traffic-routed canaries only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down_delay_seconds: Option<i32>,
    /// How many old ReplicaSets may wait for their scale-down delay at once (default: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down_delay_revision_limit: Option<i32>,
    /// Seconds to wait after an abort before scaling the canary down (default 30; 0 = never;
    /// traffic-routed canaries only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort_scale_down_delay_seconds: Option<i32>,
    /// Shrink the stable ReplicaSet as the canary's traffic weight grows (default false;
    /// traffic-routed canaries only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic_stable_scale: Option<bool>,
    /// Alternate between two services instead of a fixed canary/stable pair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ping_pong: Option<PingPong>,
    /// Floor on the pods of a non-empty canary or stable ReplicaSet (traffic-routed canaries only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_pods_per_replica_set: Option<i32>,
    /// How much of a step's canary must be available before moving on (default 100%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_progress_threshold: Option<ReplicaProgressThreshold>,
}

/// The two services of a ping-pong canary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PingPong {
    /// Name of the "ping" service.
    pub ping_service: String,
    /// Name of the "pong" service.
    pub pong_service: String,
}

/// The share of a step's canary pods that must be available before the step counts as done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReplicaProgressThreshold {
    /// Whether `value` is a percentage or a pod count.
    #[serde(rename = "type")]
    pub type_: ProgressType,
    /// The threshold; must be greater than 0.
    pub value: i32,
}

/// Unit of a [`ReplicaProgressThreshold`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ProgressType {
    /// `value` is a percentage of the step's desired canary replicas.
    Percent,
    /// `value` is a number of pods.
    Pods,
}

/// One canary step. Exactly one field is meant to be set (checked by lint, not by serde).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CanaryStep {
    /// Percentage of traffic (or, without traffic routing, of replicas) for the canary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_weight: Option<i32>,
    /// Pause, for a duration or until promoted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<RolloutPause>,
    /// Run an Experiment and wait for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experiment: Option<RolloutExperimentStep>,
    /// Run an AnalysisRun and wait for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<RolloutAnalysis>,
    /// Scale the canary ReplicaSet independently of its traffic weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_canary_scale: Option<SetCanaryScale>,
    /// Send requests matching headers entirely to the canary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_header_route: Option<SetHeaderRoute>,
    /// Mirror matching requests to the canary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_mirror_route: Option<SetMirrorRoute>,
    /// Run a step plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<PluginStep>,
}

impl CanaryStep {
    /// Every step kind, by its JSON field name, in declaration order.
    pub const KINDS: [&'static str; 8] = [
        "setWeight",
        "pause",
        "experiment",
        "analysis",
        "setCanaryScale",
        "setHeaderRoute",
        "setMirrorRoute",
        "plugin",
    ];

    /// The JSON names of every step field that is set, in declaration order.
    pub fn set_fields(&self) -> Vec<&'static str> {
        let set = [
            self.set_weight.is_some(),
            self.pause.is_some(),
            self.experiment.is_some(),
            self.analysis.is_some(),
            self.set_canary_scale.is_some(),
            self.set_header_route.is_some(),
            self.set_mirror_route.is_some(),
            self.plugin.is_some(),
        ];
        Self::KINDS
            .iter()
            .zip(set)
            .filter_map(|(name, is_set)| is_set.then_some(*name))
            .collect()
    }

    /// The step's kind (`"setWeight"`, `"pause"`, …): the first set field, or `None` when no field
    /// is set. Use [`CanaryStep::set_fields`] to detect steps with more than one.
    pub fn kind_name(&self) -> Option<&'static str> {
        self.set_fields().first().copied()
    }
}

/// A pause step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutPause {
    /// How long to pause (integer seconds or a Go duration string); absent = until promoted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<Duration>,
}

/// A `setCanaryScale` step: exactly one of its fields is meant to be set (lint checks).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetCanaryScale {
    /// Canary replicas as a percentage of `spec.replicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    /// Canary replicas as an absolute count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Drop an earlier explicit scale and follow the traffic weight again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_traffic_weight: Option<bool>,
}

/// A `setHeaderRoute` step: route requests with matching headers to the canary; no `match`
/// removes the route.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetHeaderRoute {
    /// Route name; must be listed in `trafficRouting.managedRoutes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Header conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub r#match: Vec<HeaderRoutingMatch>,
}

/// One header condition of a `setHeaderRoute` step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeaderRoutingMatch {
    /// Request header name.
    pub header_name: String,
    /// How the header's value must match.
    pub header_value: StringMatch,
}

/// A string condition: exactly one of exact, prefix or regular-expression match (lint checks).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StringMatch {
    /// The whole string must equal this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact: Option<String>,
    /// The string must start with this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// The string must match this regular expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
}

/// A `setMirrorRoute` step: copy matching requests to the canary; no `match` removes the route.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetMirrorRoute {
    /// Route name; must be listed in `trafficRouting.managedRoutes`.
    pub name: String,
    /// Request conditions; a request matching any one of them is mirrored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub r#match: Vec<RouteMatch>,
    /// Percentage of matching requests to mirror.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage: Option<i32>,
}

/// One request condition of a `setMirrorRoute` step; all set parts must match.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteMatch {
    /// HTTP method condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<StringMatch>,
    /// URL path condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<StringMatch>,
    /// Header conditions, by header name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, StringMatch>,
}

/// A step run by a step plugin (alpha upstream).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginStep {
    /// The plugin's registered name, e.g. `argoproj-labs/sample`.
    pub name: String,
    /// Free-form configuration passed to the plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<serde_json::Value>,
}
