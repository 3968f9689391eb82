//! Argo Rollouts' `Rollout` kind (argoproj.io/v1alpha1), complete as of Argo Rollouts v1.9.
//!
//! This module holds the Rollout kind, its spec and the strategy choice; their parts are child
//! modules, re-exported here: `canary`, `blue_green`, `pods` (what both strategies set on pods),
//! `analysis_refs` (references to analysis templates), `experiment` (the experiment step), `traffic` (the
//! routers) and `status`.

mod analysis_refs;
mod blue_green;
mod canary;
mod experiment;
mod gateway_api;
mod pods;
mod status;
mod traffic;

use serde::{Deserialize, Serialize};

use super::kube::{LabelSelector, ObjectMeta, PodTemplateSpec};

pub use super::analysis::AnalysisPhase;
pub use analysis_refs::*;
pub use blue_green::*;
pub use canary::*;
pub use experiment::*;
pub use gateway_api::*;
pub use pods::*;
pub use status::*;
pub use traffic::*;

/// An Argo Rollout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rollout {
    /// `argoproj.io/v1alpha1`.
    pub api_version: String,
    /// `Rollout`.
    pub kind: String,
    /// Object metadata.
    #[serde(default, deserialize_with = "crate::spec::common::null_as_default")]
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

    /// Its steps as a lockstep barrier counts them: `5 canary steps`, `1 canary step`,
    /// `blue-green` or `no strategy`.
    pub fn steps_shape(&self) -> String {
        if let Some(canary) = self.canary() {
            match canary.steps.len() {
                1 => "1 canary step".to_owned(),
                n => format!("{n} canary steps"),
            }
        } else if self.blue_green().is_some() {
            "blue-green".to_owned()
        } else {
            "no strategy".to_owned()
        }
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

#[cfg(test)]
#[path = "rollout_tests.rs"]
mod tests;
