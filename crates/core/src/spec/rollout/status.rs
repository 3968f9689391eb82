//! A Rollout's status as the controller records it: phase, conditions, pause conditions, and
//! the canary's and blue-green's observed state.

use serde::{Deserialize, Serialize};

use crate::spec::analysis::AnalysisPhase;
use crate::spec::common::Duration;

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
