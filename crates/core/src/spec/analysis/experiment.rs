//! An Experiment's spec and status: the ReplicaSet templates it runs, the analyses beside them,
//! and the conditions the controller records.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::run::{AnalysisPhase, blank_phase_as_none};
use super::template::{Argument, DryRun, MeasurementRetention};
use crate::spec::common::Duration;
use crate::spec::kube::{LabelSelector, PodTemplateSpec};

/// The body of an Experiment: ReplicaSets to run side by side and analyses to run against them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExperimentSpec {
    /// The ReplicaSets to run (required).
    pub templates: Vec<ExperimentTemplate>,
    /// How long to run once every template is available (default: until terminated or failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<Duration>,
    /// Seconds a template may take to become available before the experiment fails (default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline_seconds: Option<i32>,
    /// Stop the experiment early (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminate: Option<bool>,
    /// Analyses to run during the experiment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub analyses: Vec<ExperimentAnalysisTemplateRef>,
    /// Seconds to wait before scaling the ReplicaSets down at the end (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down_delay_seconds: Option<i32>,
    /// Metrics of the analyses evaluated in dry-run mode.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dry_run: Vec<DryRun>,
    /// Per-metric caps on retained measurements in the analyses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measurement_retention: Vec<MeasurementRetention>,
    /// Labels and annotations added to the AnalysisRuns the experiment creates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis_run_metadata: Option<AnalysisRunMetadata>,
}

/// One ReplicaSet an Experiment runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExperimentTemplate {
    /// Template name, unique within the experiment.
    pub name: String,
    /// Desired pods (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Seconds a ready pod must stay up to count as available (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ready_seconds: Option<i32>,
    /// Pod selector; must match the template's labels and differ from other templates'.
    pub selector: LabelSelector,
    /// The pods to create.
    pub template: PodTemplateSpec,
    /// Create a Service for this template's pods (default: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ExperimentTemplateService>,
}

/// The Service an Experiment creates for one template.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExperimentTemplateService {
    /// Service name (default: generated from the experiment and template names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Extra metadata stamped on created AnalysisRuns.
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

/// An analysis an Experiment runs, from a named template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExperimentAnalysisTemplateRef {
    /// Analysis name within the experiment.
    pub name: String,
    /// The AnalysisTemplate (or ClusterAnalysisTemplate) to instantiate.
    pub template_name: String,
    /// Look the template up at cluster scope (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_scope: Option<bool>,
    /// Argument values for the created run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<Argument>,
    /// Keep the experiment running until this analysis completes (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_for_completion: Option<bool>,
}

/// The observed state of an Experiment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExperimentStatus {
    /// Overall phase, combining ReplicaSet health and analysis results.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "blank_phase_as_none"
    )]
    pub phase: Option<AnalysisPhase>,
    /// Why the experiment is in its phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Per-template ReplicaSet state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub template_statuses: Vec<ExperimentTemplateStatus>,
    /// When every template became available; the duration counts from here (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_at: Option<String>,
    /// Kubernetes-style conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ExperimentCondition>,
    /// State of the experiment's AnalysisRuns.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub analysis_runs: Vec<ExperimentAnalysisRunStatus>,
}

/// The state of one Experiment template's ReplicaSet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExperimentTemplateStatus {
    /// Template name.
    pub name: String,
    /// Pods matching the selector.
    pub replicas: i32,
    /// Pods running the current template.
    pub updated_replicas: i32,
    /// Ready pods.
    pub ready_replicas: i32,
    /// Pods ready for at least `minReadySeconds`.
    pub available_replicas: i32,
    /// Hash collisions met when naming the ReplicaSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_count: Option<i32>,
    /// The template's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TemplateStatusCode>,
    /// Why the template is in its state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Last state change; restarts the progress-deadline clock (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// Name of the Service created for the template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// The ReplicaSet's pod-template hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_hash: Option<String>,
}

/// The state of one Experiment template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TemplateStatusCode {
    /// Pods are being created or becoming available.
    Progressing,
    /// All pods available; the experiment is running.
    Running,
    /// Finished normally.
    Successful,
    /// Missed its progress deadline or otherwise failed.
    Failed,
    /// Could not be reconciled.
    Error,
}

/// A condition on an Experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExperimentCondition {
    /// Condition type.
    #[serde(rename = "type")]
    pub condition_type: ExperimentConditionType,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Last update (RFC 3339; Go writes `null` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<String>,
    /// Last change of `status` (RFC 3339; Go writes `null` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// Machine-readable reason for the last transition.
    pub reason: String,
    /// Human-readable detail.
    pub message: String,
}

/// The kinds of Experiment condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ExperimentConditionType {
    /// The spec is invalid; nothing progresses until it is fixed.
    InvalidSpec,
    /// The experiment finished.
    Completed,
    /// ReplicaSets are being created or scaled.
    Progressing,
    /// Every template is available and the duration clock runs.
    Running,
    /// A pod could not be created or deleted.
    ReplicaFailure,
}

/// The state of one AnalysisRun an Experiment created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExperimentAnalysisRunStatus {
    /// Analysis name from the spec.
    pub name: String,
    /// The AnalysisRun's object name.
    pub analysis_run: String,
    /// The AnalysisRun's phase.
    pub phase: AnalysisPhase,
    /// The AnalysisRun's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
