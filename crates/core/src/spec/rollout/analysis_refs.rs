//! A Rollout's references to analysis: the templates a step or the background run uses, their
//! arguments (and where their values come from), dry-run and retention rules.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub enum PodTemplateHashValue {
    /// The stable ReplicaSet's hash.
    Stable,
    /// The newest ReplicaSet's hash.
    Latest,
}

/// A path to a field of the Rollout (`metadata.labels['x']`, `spec.replicas`, …).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
