//! A canary's experiment step: the ReplicaSets it runs for a while, and the analyses beside them.

use serde::{Deserialize, Serialize};

use super::analysis_refs::{AnalysisRunArgument, AnalysisRunMetadata, AnalysisTemplateRef, DryRun};
use super::pods::PodTemplateMetadata;
use crate::spec::common::Duration;
use crate::spec::kube::LabelSelector;

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
