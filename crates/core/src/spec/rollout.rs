//! Argo Rollouts' `Rollout` kind (argoproj.io/v1alpha1), complete as of Argo Rollouts v1.9.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ObjectMeta;
use super::common::{Duration, IntOrPercent};
use super::kube::{LabelSelector, PodTemplateSpec};

// ---------------------------------------------------------------------------------------------
// Top level
// ---------------------------------------------------------------------------------------------

/// An Argo Rollout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rollout {
    /// `argoproj.io/v1alpha1`.
    pub api_version: String,
    /// `Rollout`.
    pub kind: String,
    /// Object metadata.
    #[serde(default, deserialize_with = "super::common::null_as_default")]
    pub metadata: ObjectMeta,
    /// The desired state. A missing `spec` reads as an empty one (as upstream decodes it), so lint
    /// can report the fields it lacks (e.g. `spec.selector`) instead of a bare parse error.
    #[serde(default)]
    pub spec: RolloutSpec,
    /// The observed state, as the controller last wrote it (absent in hand-written manifests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<RolloutStatus>,
}

impl Rollout {
    /// The image of the pod template's first container (what Flotilla calls the Rollout's
    /// version), if it has one.
    pub fn first_image(&self) -> Option<&str> {
        self.spec
            .template
            .as_ref()
            .and_then(|t| t.spec.as_ref())
            .and_then(|s| s.containers.first())
            .and_then(|c| c.image.as_deref())
    }

    /// Every analysis template the Rollout references (steps, background, experiments'
    /// analyses, blue-green's pre- and post-promotion analyses).
    pub fn analysis_template_refs(&self) -> Vec<AnalysisTemplateRef> {
        let mut refs = Vec::new();
        if let Some(canary) = self.canary() {
            if let Some(background) = &canary.analysis {
                refs.extend(background.templates.iter().cloned());
            }
            for step in &canary.steps {
                if let Some(analysis) = &step.analysis {
                    refs.extend(analysis.templates.iter().cloned());
                }
                if let Some(experiment) = &step.experiment {
                    refs.extend(experiment.analyses.iter().map(|a| a.as_template_ref()));
                }
            }
        }
        if let Some(blue_green) = self.blue_green() {
            for analysis in [
                &blue_green.pre_promotion_analysis,
                &blue_green.post_promotion_analysis,
            ]
            .into_iter()
            .flatten()
            {
                refs.extend(analysis.templates.iter().cloned());
            }
        }
        refs
    }

    /// The canary strategy, when `spec.strategy.canary` is set.
    pub fn canary(&self) -> Option<&CanaryStrategy> {
        self.spec.strategy.as_ref()?.canary.as_ref()
    }

    /// The blue-green strategy, when `spec.strategy.blueGreen` is set.
    pub fn blue_green(&self) -> Option<&BlueGreenStrategy> {
        self.spec.strategy.as_ref()?.blue_green.as_ref()
    }

    /// The canary steps (empty for a blue-green Rollout or a canary without steps).
    pub fn steps(&self) -> &[CanaryStep] {
        self.canary().map_or(&[], |canary| canary.steps.as_slice())
    }
}

/// The desired state of a Rollout.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutSpec {
    /// Desired number of pods; the controller assumes 1 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Selects the pods this Rollout owns; must match the template's labels. Required unless
    /// `workloadRef` supplies it (lint checks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// The pod template. Required unless `workloadRef` supplies it (lint checks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<PodTemplateSpec>,
    /// Takes the pod template from another workload (Deployment, ReplicaSet or PodTemplate)
    /// instead of `template`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_ref: Option<WorkloadRef>,
    /// Seconds a new pod must be ready, without crashing, before it counts as available (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ready_seconds: Option<i32>,
    /// Returning to one of this many recent revisions is fast-tracked (no steps, no analysis).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_window: Option<RollbackWindow>,
    /// How to replace old pods with new ones: canary or blue-green (exactly one; lint checks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<RolloutStrategy>,
    /// How many old ReplicaSets to keep (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history_limit: Option<i32>,
    /// Whether the Rollout is manually paused at its current step (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// Seconds an update may go without progress before it is reported as
    /// `ProgressDeadlineExceeded` (default 600). Time spent paused does not count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline_seconds: Option<i32>,
    /// Whether exceeding the progress deadline also aborts the update (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline_abort: Option<bool>,
    /// An RFC 3339 timestamp: pods created before it are restarted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_at: Option<String>,
    /// How many finished AnalysisRuns and Experiments to keep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<AnalysisRunStrategy>,
}

/// A reference to the workload that supplies a Rollout's pod template (upstream `ObjectRef`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkloadRef {
    /// API version of the referenced object, e.g. `apps/v1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind of the referenced object: `Deployment`, `ReplicaSet` or `PodTemplate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name of the referenced object, in the Rollout's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What to do with the referenced Deployment: `never` (the default), `onsuccess` or
    /// `progressively`. Upstream keeps any other text and treats it as `never`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down: Option<String>,
}

/// The window of recent revisions to which a rollback is fast-tracked.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RollbackWindow {
    /// How many recent revisions count as "recent".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revisions: Option<i32>,
}

/// Retention of finished AnalysisRuns and Experiments.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnalysisRunStrategy {
    /// Successful runs and experiments to keep (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub successful_run_history_limit: Option<i32>,
    /// Unsuccessful (Failed, Error, Inconclusive) runs and experiments to keep (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsuccessful_run_history_limit: Option<i32>,
}

/// The update strategy: exactly one of `canary` and `blueGreen` (checked by lint, not by serde).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutStrategy {
    /// Blue-green: a full preview stack, then a service selector switch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blue_green: Option<BlueGreenStrategy>,
    /// Canary: a sequence of steps shifting replicas and/or traffic to the new version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryStrategy>,
}

// ---------------------------------------------------------------------------------------------
// Blue-green
// ---------------------------------------------------------------------------------------------

/// Settings of a blue-green update.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BlueGreenStrategy {
    /// Service whose selector is switched to the new ReplicaSet on promotion (required).
    pub active_service: String,
    /// Service that points at the new ReplicaSet before promotion; must differ from the active one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview_service: Option<String>,
    /// Replicas of the preview stack before promotion (default: the full replica count); the
    /// stack is scaled to full size before the switch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview_replica_count: Option<i32>,
    /// Whether to promote automatically (default true); false pauses with `BlueGreenPause`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_promotion_enabled: Option<bool>,
    /// Seconds to wait, once the preview is fully available, before auto-promoting (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_promotion_seconds: Option<i32>,
    /// Pods that may be unavailable during an update, as a count or a percentage (default 25%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrPercent>,
    /// Seconds to wait after the switch before scaling the old ReplicaSet down (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down_delay_seconds: Option<i32>,
    /// How many old ReplicaSets may wait for their scale-down delay at once (default: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down_delay_revision_limit: Option<i32>,
    /// Analysis that must pass before the active service is switched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_promotion_analysis: Option<RolloutAnalysis>,
    /// Pod anti-affinity injected against the other version's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anti_affinity: Option<AntiAffinity>,
    /// Analysis run after the switch, before the new ReplicaSet is marked stable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_promotion_analysis: Option<RolloutAnalysis>,
    /// Labels and annotations put on pods while they serve as the preview.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview_metadata: Option<PodTemplateMetadata>,
    /// Labels and annotations put on pods while they serve as the active version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_metadata: Option<PodTemplateMetadata>,
    /// Seconds to wait after an abort before scaling the preview down (default 30; 0 = never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort_scale_down_delay_seconds: Option<i32>,
}

/// Which inter-pod anti-affinity rule to inject: exactly one of the two (lint checks).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AntiAffinity {
    /// A soft rule with a weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_during_scheduling_ignored_during_execution: Option<PreferredAntiAffinity>,
    /// A hard rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_during_scheduling_ignored_during_execution: Option<RequiredAntiAffinity>,
}

/// A soft anti-affinity rule (upstream `PreferredDuringSchedulingIgnoredDuringExecution`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreferredAntiAffinity {
    /// Weight of the rule, 1 to 100.
    pub weight: i32,
}

/// A hard anti-affinity rule (upstream `RequiredDuringSchedulingIgnoredDuringExecution`); it
/// has no settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequiredAntiAffinity {}

/// Labels and annotations added to pods (or an experiment's ReplicaSet) while they play a role.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodTemplateMetadata {
    /// Extra labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Extra annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

// ---------------------------------------------------------------------------------------------
// Canary
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Analysis references
// ---------------------------------------------------------------------------------------------

/// An AnalysisRun to create from templates (a canary analysis step, or blue-green pre/post
/// promotion analysis).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutAnalysis {
    /// Templates whose metrics are merged into one run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub templates: Vec<AnalysisTemplateRef>,
    /// Argument values passed to the templates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<AnalysisRunArgument>,
    /// Metrics to run in dry-run mode (their results never fail the run).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dry_run: Vec<DryRun>,
    /// Per-metric limits on how many measurements the run keeps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measurement_retention: Vec<MeasurementRetention>,
    /// Labels and annotations put on the created AnalysisRun.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis_run_metadata: Option<AnalysisRunMetadata>,
}

/// A background analysis: [`RolloutAnalysis`]'s fields plus the step at which it starts.
///
/// Upstream embeds `RolloutAnalysis` inline; the fields are repeated here because
/// `#[serde(flatten)]` cannot be combined with `deny_unknown_fields`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutAnalysisBackground {
    /// Templates whose metrics are merged into one run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub templates: Vec<AnalysisTemplateRef>,
    /// Argument values passed to the templates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<AnalysisRunArgument>,
    /// Metrics to run in dry-run mode (their results never fail the run).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dry_run: Vec<DryRun>,
    /// Per-metric limits on how many measurements the run keeps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measurement_retention: Vec<MeasurementRetention>,
    /// Labels and annotations put on the created AnalysisRun.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis_run_metadata: Option<AnalysisRunMetadata>,
    /// Index of the step at which the background run starts (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starting_step: Option<i32>,
}

impl RolloutAnalysisBackground {
    /// The analysis part, without `startingStep`.
    pub fn analysis(&self) -> RolloutAnalysis {
        RolloutAnalysis {
            templates: self.templates.clone(),
            args: self.args.clone(),
            dry_run: self.dry_run.clone(),
            measurement_retention: self.measurement_retention.clone(),
            analysis_run_metadata: self.analysis_run_metadata.clone(),
        }
    }
}

/// A reference to an AnalysisTemplate or ClusterAnalysisTemplate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnalysisTemplateRef {
    /// Name of the template.
    pub template_name: String,
    /// Whether it is a ClusterAnalysisTemplate (default false: namespaced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_scope: Option<bool>,
}

impl AnalysisTemplateRef {
    /// Whether the template is looked up at cluster scope.
    pub fn is_cluster_scope(&self) -> bool {
        self.cluster_scope == Some(true)
    }
}

/// An argument value passed from a Rollout to an AnalysisRun: `value` or `valueFrom` (lint checks).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnalysisRunArgument {
    /// Argument name, as the template declares it.
    pub name: String,
    /// A literal value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Where to read the value from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<ArgumentValueFrom>,
}

/// The source of a Rollout-side argument value: exactly one field (lint checks).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ArgumentValueFrom {
    /// The pod-template hash of the stable or latest ReplicaSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_hash_value: Option<PodTemplateHashValue>,
    /// A field of the Rollout itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_ref: Option<FieldRef>,
}

/// Which ReplicaSet's pod-template hash an argument takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PodTemplateHashValue {
    /// The stable ReplicaSet's hash.
    Stable,
    /// The newest ReplicaSet's hash.
    Latest,
}

/// A path to a field of the Rollout (`metadata.labels['x']`, `spec.replicas`, …).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FieldRef {
    /// The field path.
    pub field_path: String,
}

/// A dry-run rule: metrics whose name matches run without affecting the verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DryRun {
    /// Metric name pattern (an unanchored regular expression; `.*` matches all).
    pub metric_name: String,
}

/// A measurement-retention rule: how many measurements to keep for matching metrics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MeasurementRetention {
    /// Metric name pattern (an unanchored regular expression; `.*` matches all).
    pub metric_name: String,
    /// Number of measurements to keep.
    pub limit: i32,
}

/// Labels and annotations put on a created AnalysisRun.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnalysisRunMetadata {
    /// Extra labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Extra annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

// ---------------------------------------------------------------------------------------------
// Experiment step
// ---------------------------------------------------------------------------------------------

/// An `experiment` step: the Experiment the Rollout creates and waits for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutExperimentStep {
    /// ReplicaSets the experiment runs (at least one; lint checks).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub templates: Vec<RolloutExperimentTemplate>,
    /// How long the experiment runs (a Go duration string); absent = until its analyses finish.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<Duration>,
    /// Analyses run as part of the experiment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub analyses: Vec<ExperimentAnalysisTemplateRef>,
    /// Metrics to run in dry-run mode in the experiment's analyses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dry_run: Vec<DryRun>,
    /// Labels and annotations put on the experiment's AnalysisRuns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis_run_metadata: Option<AnalysisRunMetadata>,
    /// Seconds to wait before scaling the experiment's ReplicaSets down once it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down_delay_seconds: Option<i32>,
}

/// One ReplicaSet of an experiment step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutExperimentTemplate {
    /// Template name, unique in the step.
    pub name: String,
    /// Whose pod template to use: the canary's or the stable's.
    pub spec_ref: ReplicaSetSpecRef,
    /// Replica count (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Labels and annotations for the ReplicaSet's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<PodTemplateMetadata>,
    /// Selector for the ReplicaSet (default: the Rollout's selector).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Traffic percentage for this ReplicaSet; needs SMI, ALB, Istio or a plugin router.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    /// Create a Service for the ReplicaSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<TemplateService>,
}

/// Which pod template an experiment ReplicaSet copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplicaSetSpecRef {
    /// The new (canary) ReplicaSet's template.
    Canary,
    /// The stable ReplicaSet's template.
    Stable,
}

/// The Service created for an experiment ReplicaSet.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TemplateService {
    /// Service name (default: generated from the experiment and template names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// An analysis of an experiment step (upstream `RolloutExperimentStepAnalysisTemplateRef`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExperimentAnalysisTemplateRef {
    /// Name of this analysis within the experiment.
    pub name: String,
    /// Name of the template to run.
    pub template_name: String,
    /// Whether it is a ClusterAnalysisTemplate (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_scope: Option<bool>,
    /// Argument values passed to the template.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<AnalysisRunArgument>,
    /// Whether the experiment waits for this analysis before completing (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_for_completion: Option<bool>,
}

impl ExperimentAnalysisTemplateRef {
    /// The template reference this analysis makes.
    pub fn as_template_ref(&self) -> AnalysisTemplateRef {
        AnalysisTemplateRef {
            template_name: self.template_name.clone(),
            cluster_scope: self.cluster_scope,
        }
    }

    /// Whether the template is looked up at cluster scope.
    pub fn is_cluster_scope(&self) -> bool {
        self.cluster_scope == Some(true)
    }
}

// ---------------------------------------------------------------------------------------------
// Traffic routing
// ---------------------------------------------------------------------------------------------

/// Traffic routing for a canary (upstream `RolloutTrafficRouting`): one or more provider blocks,
/// plus routes and the total weight.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrafficRouting {
    /// Istio VirtualService/DestinationRule routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub istio: Option<IstioTrafficRouting>,
    /// NGINX Ingress controller routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nginx: Option<NginxTrafficRouting>,
    /// AWS Load Balancer Controller routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alb: Option<AlbTrafficRouting>,
    /// SMI TrafficSplit routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smi: Option<SmiTrafficRouting>,
    /// Ambassador (Emissary) Mapping routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ambassador: Option<AmbassadorTrafficRouting>,
    /// AWS App Mesh routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_mesh: Option<AppMeshTrafficRouting>,
    /// Traefik weighted TraefikService routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traefik: Option<TraefikTrafficRouting>,
    /// Routes the Rollout owns (header and mirror routes), highest precedence first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub managed_routes: Vec<ManagedRoute>,
    /// Apache APISIX routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apisix: Option<ApisixTrafficRouting>,
    /// Traffic-router plugins (Gateway API, Contour, …): plugin name → free-form configuration.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub plugins: BTreeMap<String, serde_json::Value>,
    /// The weight that means "all traffic" (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_traffic_weight: Option<i32>,
}

impl TrafficRouting {
    /// Default of `maxTrafficWeight`.
    pub const DEFAULT_MAX_TRAFFIC_WEIGHT: i32 = 100;

    /// JSON names of the configured provider blocks, in declaration order (`"istio"`, `"nginx"`,
    /// `"alb"`, `"smi"`, `"ambassador"`, `"appMesh"`, `"traefik"`, `"apisix"`), followed by
    /// `"plugins"` when at least one plugin is configured (see [`TrafficRouting::plugin_names`]).
    pub fn providers(&self) -> Vec<&'static str> {
        let configured = [
            ("istio", self.istio.is_some()),
            ("nginx", self.nginx.is_some()),
            ("alb", self.alb.is_some()),
            ("smi", self.smi.is_some()),
            ("ambassador", self.ambassador.is_some()),
            ("appMesh", self.app_mesh.is_some()),
            ("traefik", self.traefik.is_some()),
            ("apisix", self.apisix.is_some()),
            ("plugins", !self.plugins.is_empty()),
        ];
        configured
            .into_iter()
            .filter_map(|(name, is_set)| is_set.then_some(name))
            .collect()
    }

    /// Names of the configured traffic-router plugins, sorted.
    pub fn plugin_names(&self) -> impl Iterator<Item = &str> {
        self.plugins.keys().map(String::as_str)
    }

    /// The weight that means "all traffic": `maxTrafficWeight`, or 100 when absent.
    pub fn max_traffic_weight(&self) -> i32 {
        self.max_traffic_weight
            .unwrap_or(Self::DEFAULT_MAX_TRAFFIC_WEIGHT)
    }
}

/// A route the Rollout manages (upstream spells the type `MangedRoutes`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ManagedRoute {
    /// Route name, referenced by `setHeaderRoute`/`setMirrorRoute` steps.
    pub name: String,
}

/// Istio routing: VirtualService(s) whose weights are edited, and optionally a DestinationRule
/// whose subsets are pointed at the canary and stable pods.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IstioTrafficRouting {
    /// A single VirtualService (use this or `virtualServices`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_service: Option<IstioVirtualService>,
    /// Subset-level routing through a DestinationRule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_rule: Option<IstioDestinationRule>,
    /// Several VirtualServices (use this or `virtualService`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub virtual_services: Vec<IstioVirtualService>,
}

/// An Istio VirtualService and the routes in it to edit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IstioVirtualService {
    /// VirtualService name (`name` or `name.namespace`).
    pub name: String,
    /// Named HTTP routes to edit; absent = the VirtualService's only HTTP route.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<String>,
    /// TLS routes to edit, matched by port and SNI hosts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tls_routes: Vec<IstioTlsRoute>,
    /// TCP routes to edit, matched by port.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tcp_routes: Vec<IstioTcpRoute>,
}

/// Selects a TLS route of a VirtualService (upstream `TLSRoute`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IstioTlsRoute {
    /// Port the route matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i64>,
    /// SNI hosts the route matches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sni_hosts: Vec<String>,
}

/// Selects a TCP route of a VirtualService (upstream `TCPRoute`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IstioTcpRoute {
    /// Port the route matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i64>,
}

/// An Istio DestinationRule whose subsets track the canary and stable pod-template hashes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IstioDestinationRule {
    /// DestinationRule name.
    pub name: String,
    /// Subset pointed at the canary pods.
    pub canary_subset_name: String,
    /// Subset pointed at the stable pods.
    pub stable_subset_name: String,
    /// Other subsets of the rule, left untouched.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_subset_names: Vec<String>,
}

/// NGINX Ingress routing: a canary Ingress is generated next to the stable one(s).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NginxTrafficRouting {
    /// Annotation prefix the controller is configured with (default `nginx.ingress.kubernetes.io`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_prefix: Option<String>,
    /// The stable Ingress (use this or `stableIngresses`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_ingress: Option<String>,
    /// Extra canary annotations, keyed without the prefix (e.g. `canary-by-header`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub additional_ingress_annotations: BTreeMap<String, String>,
    /// Several stable Ingresses (use this or `stableIngress`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stable_ingresses: Vec<String>,
    /// Annotations copied verbatim onto the generated canary Ingress.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub canary_ingress_annotations: BTreeMap<String, String>,
}

/// AWS Load Balancer Controller routing: weighted forward actions on the Ingress(es).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AlbTrafficRouting {
    /// The Ingress (use this or `ingresses`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<String>,
    /// Service port the action forwards to (required).
    pub service_port: i32,
    /// Service named in the Ingress rule the action is attached to (default: the stable service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_service: Option<String>,
    /// Annotation prefix the controller is configured with (default `alb.ingress.kubernetes.io`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_prefix: Option<String>,
    /// Target-group stickiness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stickiness_config: Option<StickinessConfig>,
    /// Several Ingresses (use this or `ingress`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingresses: Vec<String>,
}

/// Duration-based stickiness of ALB target groups.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StickinessConfig {
    /// Whether stickiness is on.
    pub enabled: bool,
    /// How long a client sticks to a target group, in seconds.
    pub duration_seconds: i64,
}

/// SMI routing through a TrafficSplit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SmiTrafficRouting {
    /// Service clients address (default: the stable service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_service: Option<String>,
    /// TrafficSplit name (default: the Rollout's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_split_name: Option<String>,
}

/// Ambassador routing: canary Mappings are generated next to the listed ones.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AmbassadorTrafficRouting {
    /// Names of the stable Mappings (at least one; lint checks).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mappings: Vec<String>,
}

/// AWS App Mesh routing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppMeshTrafficRouting {
    /// The VirtualService (and its VirtualRouter) whose routes are weighted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_service: Option<AppMeshVirtualService>,
    /// The canary and stable VirtualNodes the routes target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_node_group: Option<AppMeshVirtualNodeGroup>,
}

/// An App Mesh VirtualService and the routes of its router to edit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppMeshVirtualService {
    /// VirtualService name.
    pub name: String,
    /// HTTP routes to edit; absent = the router's only route.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<String>,
}

/// The pair of App Mesh VirtualNodes a weighted route targets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppMeshVirtualNodeGroup {
    /// VirtualNode pointed at the canary pods.
    pub canary_virtual_node_ref: AppMeshVirtualNodeReference,
    /// VirtualNode pointed at the stable pods.
    pub stable_virtual_node_ref: AppMeshVirtualNodeReference,
}

/// A reference to an App Mesh VirtualNode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppMeshVirtualNodeReference {
    /// VirtualNode name.
    pub name: String,
}

/// Traefik routing through a weighted TraefikService.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TraefikTrafficRouting {
    /// Name of the weighted TraefikService.
    pub weighted_traefik_service_name: String,
}

/// Apache APISIX routing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApisixTrafficRouting {
    /// The ApisixRoute to edit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<ApisixRoute>,
}

/// An ApisixRoute and the HTTP rules in it to edit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApisixRoute {
    /// ApisixRoute name.
    pub name: String,
    /// Names of the HTTP rules to edit; absent = the route's only rule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<String>,
}

// ---------------------------------------------------------------------------------------------
// Status
// ---------------------------------------------------------------------------------------------

/// The observed state of a Rollout, written by the controller (and by the CLI for
/// `abort`/`promoteFull`). Timestamps are kept as RFC 3339 strings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutStatus {
    /// Whether the current update is aborted (set by `abort`, cleared by `retry`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort: Option<bool>,
    /// Why the controller paused the Rollout; cleared to resume.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pause_conditions: Vec<PauseCondition>,
    /// Whether the controller (not the user) paused the Rollout; stays true after a manual resume
    /// until the controller reconciles it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_pause: Option<bool>,
    /// When the controller reconciled the abort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aborted_at: Option<String>,
    /// Hash of the current pod template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_pod_hash: Option<String>,
    /// Hash of the current step list, to notice when the steps change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_step_hash: Option<String>,
    /// Non-terminated pods selected by the Rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Non-terminated pods with the desired template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,
    /// Ready pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Pods ready for at least `minReadySeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// Index of the canary step being executed (equal to the step count once all are done).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_step_index: Option<i32>,
    /// Hash collisions seen when naming ReplicaSets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_count: Option<i32>,
    /// The `metadata.generation` the controller last observed — a string upstream, not an integer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<String>,
    /// Conditions (Available, Progressing, Paused, Completed, Healthy, ReplicaFailure, InvalidSpec).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<RolloutCondition>,
    /// Canary-only state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryStatus>,
    /// Blue-green-only state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blue_green: Option<BlueGreenStatus>,
    /// Non-terminated pods receiving active traffic (the scale subresource's status; JSON name
    /// `HPAReplicas`).
    #[serde(
        rename = "HPAReplicas",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub hpa_replicas: Option<i32>,
    /// Label selector, in string form, of the pods receiving active traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Pod-template hash of the stable ReplicaSet (JSON name `stableRS`).
    #[serde(rename = "stableRS", default, skip_serializing_if = "Option::is_none")]
    pub stable_rs: Option<String>,
    /// When the pods were last restarted through `restartAt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarted_at: Option<String>,
    /// Whether to promote fully, skipping the remaining steps, analyses and pauses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promote_full: Option<bool>,
    /// The phase; meaningful only when `observedGeneration` equals `metadata.generation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RolloutPhase>,
    /// Why the Rollout is in its phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The `metadata.generation` of the referenced workload the controller last observed (a string).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_observed_generation: Option<String>,
    /// Load balancer and target groups of the ALB router (single Ingress).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alb: Option<AlbStatus>,
    /// Load balancers and target groups of the ALB router, one per Ingress.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub albs: Vec<AlbStatus>,
}

/// Why and since when the controller paused a Rollout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PauseCondition {
    /// The reason.
    pub reason: PauseReason,
    /// When the pause started.
    pub start_time: String,
}

/// Why the controller paused a Rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PauseReason {
    /// An AnalysisRun ended Inconclusive.
    InconclusiveAnalysisRun,
    /// An Experiment ended Inconclusive.
    InconclusiveExperiment,
    /// A canary `pause` step.
    CanaryPauseStep,
    /// Blue-green waiting for promotion.
    BlueGreenPause,
}

/// The phase of a Rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RolloutPhase {
    /// Fully rolled out and available.
    Healthy,
    /// Aborted, past its progress deadline, or invalid.
    Degraded,
    /// Moving towards Healthy.
    Progressing,
    /// Paused by the user or by a step/analysis.
    Paused,
}

/// A condition of a Rollout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutCondition {
    /// Which condition.
    #[serde(rename = "type")]
    pub type_: RolloutConditionType,
    /// `True`, `False` or `Unknown`.
    pub status: ConditionStatus,
    /// When the condition was last updated.
    pub last_update_time: String,
    /// When the status last changed.
    pub last_transition_time: String,
    /// Machine-readable reason for the last change (e.g. `ProgressDeadlineExceeded`).
    pub reason: String,
    /// Human-readable details.
    pub message: String,
}

/// The kinds of Rollout condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RolloutConditionType {
    /// The spec is invalid; the Rollout will not progress until it is fixed.
    InvalidSpec,
    /// Enough pods are available behind the active/stable service.
    Available,
    /// The update is making progress (or, with reason `ProgressDeadlineExceeded`, is not).
    Progressing,
    /// Pods failed to be created or deleted.
    ReplicaFailure,
    /// The Rollout is paused.
    Paused,
    /// The update to the desired revision has completed.
    Completed,
    /// Completed and every pod passes its health checks.
    Healthy,
}

/// A Kubernetes condition status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// Unknown.
    Unknown,
}

/// Canary-only status.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CanaryStatus {
    /// The current step's AnalysisRun.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_step_analysis_run_status: Option<RolloutAnalysisRunStatus>,
    /// The background AnalysisRun.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_background_analysis_run_status: Option<RolloutAnalysisRunStatus>,
    /// Name of the running Experiment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_experiment: Option<String>,
    /// Weights last set on the traffic router (traffic-routed canaries only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<TrafficWeights>,
    /// Which ping-pong service is currently the stable one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_ping_pong: Option<PingPongType>,
    /// Status of each step-plugin operation executed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step_plugin_statuses: Vec<StepPluginStatus>,
}

/// Which service of a ping-pong pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PingPongType {
    /// The ping service.
    Ping,
    /// The pong service.
    Pong,
}

/// How traffic is currently split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrafficWeights {
    /// The canary's share.
    pub canary: WeightDestination,
    /// The stable's share.
    pub stable: WeightDestination,
    /// Shares of other ReplicaSets (experiment templates).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional: Vec<WeightDestination>,
    /// Whether the weights were verified to be in effect (ALB only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified: Option<bool>,
}

/// One destination of a traffic split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WeightDestination {
    /// Traffic weight sent to it.
    pub weight: i32,
    /// Its Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// Its pod-template hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_hash: Option<String>,
}

/// A reference to an AnalysisRun the Rollout created, with its phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutAnalysisRunStatus {
    /// AnalysisRun name.
    pub name: String,
    /// Its phase.
    pub status: AnalysisPhase,
    /// Its message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

pub use super::analysis::AnalysisPhase;

/// The status of one operation of a step plugin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StepPluginStatus {
    /// Index of the plugin step.
    pub index: i32,
    /// Name of the plugin.
    pub name: String,
    /// The operation this status is about.
    pub operation: StepPluginOperation,
    /// The operation's phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<StepPluginPhase>,
    /// Why the operation is in its phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the plugin was first called for the operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When the plugin was last called for the operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
    /// When the operation completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// How long to wait before calling the plugin again (a Go duration string).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<Duration>,
    /// How many times the operation was executed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executions: Option<i32>,
    /// Whether the plugin is disabled controller-wide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
    /// The plugin's own free-form state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

/// An operation of a step plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StepPluginOperation {
    /// Execute the step.
    Run,
    /// Stop the step early (e.g. on promotion).
    Terminate,
    /// Undo the step because the Rollout was aborted.
    Abort,
}

/// The phase of a step-plugin operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StepPluginPhase {
    /// Not finished.
    Running,
    /// Finished successfully.
    Successful,
    /// Finished unsuccessfully.
    Failed,
    /// Could not complete because of an unexpected error.
    Error,
}

/// Blue-green-only status.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BlueGreenStatus {
    /// Pod-template hash the preview service selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview_selector: Option<String>,
    /// Pod-template hash the active service selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_selector: Option<String>,
    /// Whether the preview ReplicaSet may be scaled to full size once the Rollout is resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_up_preview_check_point: Option<bool>,
    /// The pre-promotion AnalysisRun.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_promotion_analysis_run_status: Option<RolloutAnalysisRunStatus>,
    /// The post-promotion AnalysisRun.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_promotion_analysis_run_status: Option<RolloutAnalysisRunStatus>,
}

/// AWS resources of the ALB router.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AlbStatus {
    /// The load balancer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<AwsResourceRef>,
    /// The canary target group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_target_group: Option<AwsResourceRef>,
    /// The stable target group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_target_group: Option<AwsResourceRef>,
    /// The Ingress these belong to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<String>,
}

/// An AWS resource, by name and ARN.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AwsResourceRef {
    /// Resource name.
    pub name: String,
    /// Resource ARN.
    pub arn: String,
    /// Full name (e.g. `app/my-alb/1234`); absent in status written by older controllers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_name: Option<String>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn canary_steps() -> serde_json::Value {
        json!([
            {"setWeight": 10},
            {"pause": {"duration": "5m"}},
            {"setHeaderRoute": {
                "name": "beta-users",
                "match": [{"headerName": "x-beta", "headerValue": {"exact": "1"}}]
            }},
            {"setMirrorRoute": {
                "name": "mirror",
                "percentage": 50,
                "match": [{"method": {"exact": "GET"}, "path": {"prefix": "/api"},
                           "headers": {"x-debug": {"regex": "on|yes"}}}]
            }},
            {"analysis": {
                "templates": [{"templateName": "success-rate"}],
                "args": [
                    {"name": "canary-hash", "valueFrom": {"podTemplateHashValue": "Latest"}},
                    {"name": "region", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['region']"}}}
                ],
                "dryRun": [{"metricName": "latency"}],
                "measurementRetention": [{"metricName": ".*", "limit": 20}],
                "analysisRunMetadata": {"labels": {"team": "shop"}}
            }},
            {"experiment": {
                "duration": "10m",
                "templates": [
                    {"name": "baseline", "specRef": "stable", "replicas": 1, "weight": 5,
                     "service": {"name": "baseline-svc"}},
                    {"name": "candidate", "specRef": "canary", "replicas": 1, "weight": 5,
                     "metadata": {"labels": {"exp": "candidate"}}}
                ],
                "analyses": [{"name": "compare", "templateName": "mann-whitney",
                              "requiredForCompletion": true,
                              "args": [{"name": "baseline-hash",
                                        "value": "{{templates.baseline.podTemplateHash}}"}]}]
            }},
            {"setCanaryScale": {"replicas": 2}},
            {"setWeight": 50},
            {"pause": {"duration": 30}},
            {"setCanaryScale": {"matchTrafficWeight": true}},
            {"plugin": {"name": "argoproj-labs/sample", "config": {"message": "hi"}}},
            {"pause": {}}
        ])
    }

    fn canary_rollout() -> serde_json::Value {
        let steps = canary_steps();
        json!({
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Rollout",
            "metadata": {"name": "checkout", "namespace": "shop"},
            "spec": {
                "replicas": 5,
                "revisionHistoryLimit": 3,
                "progressDeadlineSeconds": 900,
                "progressDeadlineAbort": true,
                "rollbackWindow": {"revisions": 2},
                "analysis": {"successfulRunHistoryLimit": 2, "unsuccessfulRunHistoryLimit": 4},
                "selector": {"matchLabels": {"app": "checkout"}},
                "template": {
                    "metadata": {"labels": {"app": "checkout"}},
                    "spec": {"containers": [{"name": "checkout", "image": "shop/checkout:1.2.3"}]}
                },
                "strategy": {
                    "canary": {
                        "canaryService": "checkout-canary",
                        "stableService": "checkout-stable",
                        "maxSurge": "25%",
                        "maxUnavailable": 0,
                        "abortScaleDownDelaySeconds": 60,
                        "dynamicStableScale": true,
                        "canaryMetadata": {"labels": {"role": "canary"}},
                        "analysis": {
                            "templates": [{"templateName": "success-rate", "clusterScope": true}],
                            "startingStep": 2,
                            "args": [{"name": "service", "value": "checkout"}]
                        },
                        "trafficRouting": {
                            "istio": {
                                "virtualService": {"name": "checkout-vs", "routes": ["primary"]},
                                "destinationRule": {
                                    "name": "checkout-dr",
                                    "canarySubsetName": "canary",
                                    "stableSubsetName": "stable"
                                }
                            },
                            "managedRoutes": [{"name": "beta-users"}, {"name": "mirror"}]
                        },
                        "steps": steps
                    }
                }
            }
        })
    }

    fn blue_green_rollout() -> serde_json::Value {
        json!({
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Rollout",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "web:2"}]}
                },
                "strategy": {
                    "blueGreen": {
                        "activeService": "web-active",
                        "previewService": "web-preview",
                        "previewReplicaCount": 1,
                        "autoPromotionEnabled": false,
                        "scaleDownDelaySeconds": 60,
                        "maxUnavailable": "10%",
                        "antiAffinity": {
                            "preferredDuringSchedulingIgnoredDuringExecution": {"weight": 50}
                        },
                        "prePromotionAnalysis": {
                            "templates": [{"templateName": "smoke"}],
                            "args": [{"name": "host", "value": "web-preview"}]
                        },
                        "postPromotionAnalysis": {"templates": [{"templateName": "success-rate"}]},
                        "previewMetadata": {"labels": {"role": "preview"}},
                        "activeMetadata": {"annotations": {"role": "active"}}
                    }
                }
            },
            "status": {
                "phase": "Paused",
                "message": "BlueGreenPause",
                "pauseConditions": [{"reason": "BlueGreenPause", "startTime": "2024-05-01T10:00:00Z"}],
                "controllerPause": true,
                "currentPodHash": "6b7f9c",
                "stableRS": "5d4c8a",
                "observedGeneration": "4",
                "replicas": 4,
                "updatedReplicas": 1,
                "readyReplicas": 4,
                "availableReplicas": 4,
                "HPAReplicas": 3,
                "selector": "app=web,rollouts-pod-template-hash=5d4c8a",
                "conditions": [{
                    "type": "Paused", "status": "True",
                    "lastUpdateTime": "2024-05-01T10:00:00Z",
                    "lastTransitionTime": "2024-05-01T10:00:00Z",
                    "reason": "RolloutPaused", "message": "Rollout is paused"
                }],
                "canary": {},
                "blueGreen": {
                    "activeSelector": "5d4c8a",
                    "previewSelector": "6b7f9c",
                    "prePromotionAnalysisRunStatus": {"name": "web-6b7f9c-4-pre", "status": "Successful"}
                }
            }
        })
    }

    #[test]
    fn parses_a_canary_rollout_with_istio_routing() {
        let rollout: Rollout = serde_json::from_value(canary_rollout()).unwrap();
        assert_eq!(rollout.spec.replicas, Some(5));
        assert!(rollout.blue_green().is_none());
        let canary = rollout.canary().unwrap();
        assert_eq!(canary.max_surge, Some(IntOrPercent::Percent(25)));
        assert_eq!(canary.max_unavailable, Some(IntOrPercent::Int(0)));
        assert_eq!(canary.analysis.as_ref().unwrap().starting_step, Some(2));
        assert!(canary.analysis.as_ref().unwrap().analysis().templates[0].is_cluster_scope());

        let routing = canary.traffic_routing.as_ref().unwrap();
        assert_eq!(routing.providers(), vec!["istio"]);
        assert_eq!(routing.max_traffic_weight(), 100);
        assert_eq!(
            routing
                .istio
                .as_ref()
                .unwrap()
                .destination_rule
                .as_ref()
                .unwrap()
                .canary_subset_name,
            "canary"
        );

        let kinds: Vec<_> = rollout
            .steps()
            .iter()
            .map(|s| s.kind_name().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "setWeight",
                "pause",
                "setHeaderRoute",
                "setMirrorRoute",
                "analysis",
                "experiment",
                "setCanaryScale",
                "setWeight",
                "pause",
                "setCanaryScale",
                "plugin",
                "pause"
            ]
        );
        let steps = rollout.steps();
        assert_eq!(
            steps[1].pause.as_ref().unwrap().duration,
            Some(Duration::from_secs(300))
        );
        assert_eq!(
            steps[8].pause.as_ref().unwrap().duration,
            Some(Duration::from_secs(30))
        );
        assert_eq!(steps[11].pause.as_ref().unwrap().duration, None);
        let analysis = steps[4].analysis.as_ref().unwrap();
        assert_eq!(
            analysis.args[0]
                .value_from
                .as_ref()
                .unwrap()
                .pod_template_hash_value,
            Some(PodTemplateHashValue::Latest)
        );
        assert_eq!(analysis.measurement_retention[0].limit, 20);
        let experiment = steps[5].experiment.as_ref().unwrap();
        assert_eq!(experiment.duration, Some(Duration::from_secs(600)));
        assert_eq!(experiment.templates[0].spec_ref, ReplicaSetSpecRef::Stable);
        assert_eq!(experiment.analyses[0].required_for_completion, Some(true));
        let mirror = steps[3].set_mirror_route.as_ref().unwrap();
        assert_eq!(
            mirror.r#match[0].headers["x-debug"].regex.as_deref(),
            Some("on|yes")
        );
        assert_eq!(
            steps[10].plugin.as_ref().unwrap().config,
            Some(json!({"message": "hi"}))
        );
        assert!(rollout.status.is_none());
    }

    #[test]
    fn parses_a_blue_green_rollout_with_status() {
        let rollout: Rollout = serde_json::from_value(blue_green_rollout()).unwrap();
        assert!(rollout.canary().is_none());
        assert!(rollout.steps().is_empty());
        let bg = rollout.blue_green().unwrap();
        assert_eq!(bg.active_service, "web-active");
        assert_eq!(bg.auto_promotion_enabled, Some(false));
        assert_eq!(bg.max_unavailable, Some(IntOrPercent::Percent(10)));
        assert_eq!(
            bg.anti_affinity
                .as_ref()
                .unwrap()
                .preferred_during_scheduling_ignored_during_execution,
            Some(PreferredAntiAffinity { weight: 50 })
        );
        let status = rollout.status.as_ref().unwrap();
        assert_eq!(status.phase, Some(RolloutPhase::Paused));
        assert_eq!(
            status.pause_conditions[0].reason,
            PauseReason::BlueGreenPause
        );
        assert_eq!(status.hpa_replicas, Some(3));
        assert_eq!(status.conditions[0].type_, RolloutConditionType::Paused);
        assert_eq!(status.conditions[0].status, ConditionStatus::True);
        assert_eq!(status.canary, Some(CanaryStatus::default()));
        assert_eq!(
            status
                .blue_green
                .as_ref()
                .unwrap()
                .pre_promotion_analysis_run_status
                .as_ref()
                .unwrap()
                .status,
            AnalysisPhase::Successful
        );
    }

    #[test]
    fn parses_canary_status() {
        let status: RolloutStatus = serde_json::from_value(json!({
            "currentStepIndex": 3,
            "currentStepHash": "abc",
            "abort": true,
            "abortedAt": "2024-05-01T10:00:00Z",
            "promoteFull": false,
            "canary": {
                "currentStepAnalysisRunStatus": {"name": "r-1", "status": "Failed", "message": "boom"},
                "currentExperiment": "exp-1",
                "stablePingPong": "pong",
                "weights": {
                    "canary": {"weight": 20, "serviceName": "c", "podTemplateHash": "h1"},
                    "stable": {"weight": 80, "serviceName": "s", "podTemplateHash": "h0"},
                    "additional": [{"weight": 0}],
                    "verified": true
                },
                "stepPluginStatuses": [{
                    "index": 2, "name": "sample", "operation": "Run", "phase": "Running",
                    "backoff": "30s", "executions": 3, "status": {"anything": [1, 2]}
                }]
            },
            "alb": {"loadBalancer": {"name": "lb", "arn": "arn:aws:x", "fullName": "app/lb/1"},
                    "ingress": "web"}
        }))
        .unwrap();
        let canary = status.canary.as_ref().unwrap();
        assert_eq!(canary.stable_ping_pong, Some(PingPongType::Pong));
        assert_eq!(canary.weights.as_ref().unwrap().stable.weight, 80);
        assert_eq!(
            canary.step_plugin_statuses[0].operation,
            StepPluginOperation::Run
        );
        assert_eq!(
            canary.step_plugin_statuses[0].backoff,
            Some(Duration::from_secs(30))
        );
        let back: RolloutStatus =
            serde_json::from_value(serde_json::to_value(&status).unwrap()).unwrap();
        assert_eq!(back, status);
    }

    #[test]
    fn rejects_an_unknown_field_under_the_canary_strategy() {
        let mut value = canary_rollout();
        value["spec"]["strategy"]["canary"]["stableServices"] = json!("typo");
        let err = serde_json::from_value::<Rollout>(value)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `stableServices`"), "{err}");
    }

    #[test]
    fn rejects_an_unknown_strategy_and_unknown_step_fields() {
        let mut value = canary_rollout();
        value["spec"]["strategy"]["unknown-strategy"] = json!({});
        let err = serde_json::from_value::<Rollout>(value)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `unknown-strategy`"), "{err}");

        let mut value = canary_rollout();
        value["spec"]["strategy"]["canary"]["steps"][0] = json!({"setWeigth": 10});
        assert!(serde_json::from_value::<Rollout>(value).is_err());

        let mut value = canary_rollout();
        value["spec"]["strategy"]["canary"]["trafficRouting"]["linkerd"] = json!({});
        assert!(serde_json::from_value::<Rollout>(value).is_err());
    }

    #[test]
    fn a_missing_spec_reads_as_empty_so_lint_can_name_what_is_missing() {
        let rollout: Rollout = serde_json::from_value(json!({
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Rollout"
        }))
        .unwrap();
        assert_eq!(rollout.spec, RolloutSpec::default());
        assert!(rollout.spec.selector.is_none());
        assert!(rollout.canary().is_none() && rollout.blue_green().is_none());
    }

    #[test]
    fn round_trips_through_json() {
        for value in [canary_rollout(), blue_green_rollout()] {
            let parsed: Rollout = serde_json::from_value(value).unwrap();
            let written = serde_json::to_value(&parsed).unwrap();
            let reparsed: Rollout = serde_json::from_value(written).unwrap();
            assert_eq!(reparsed, parsed);
        }
    }

    #[test]
    fn step_and_routing_helpers() {
        let empty = CanaryStep::default();
        assert_eq!(empty.kind_name(), None);
        assert!(empty.set_fields().is_empty());
        let double = CanaryStep {
            set_weight: Some(10),
            pause: Some(RolloutPause::default()),
            ..CanaryStep::default()
        };
        assert_eq!(double.kind_name(), Some("setWeight"));
        assert_eq!(double.set_fields(), vec!["setWeight", "pause"]);

        let routing: TrafficRouting = serde_json::from_value(json!({
            "nginx": {"stableIngress": "web", "additionalIngressAnnotations": {"canary-by-header": "x"}},
            "smi": {},
            "plugins": {"argoproj-labs/gatewayAPI": {"httpRoute": "web", "namespace": "default"}},
            "maxTrafficWeight": 1000
        }))
        .unwrap();
        assert_eq!(routing.providers(), vec!["nginx", "smi", "plugins"]);
        assert_eq!(
            routing.plugin_names().collect::<Vec<_>>(),
            vec!["argoproj-labs/gatewayAPI"]
        );
        assert_eq!(routing.max_traffic_weight(), 1000);
    }
}
