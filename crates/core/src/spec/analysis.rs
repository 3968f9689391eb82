//! Argo Rollouts' analysis kinds: `AnalysisTemplate`, `ClusterAnalysisTemplate`, `AnalysisRun`
//! and `Experiment` (argoproj.io/v1alpha1), complete as of Argo Rollouts v1.9.
//!
//! This module holds the top-level kinds; their parts are child modules, re-exported here:
//! `template`, `metric` (with the provider block), `providers` (Argo's providers' settings),
//! `run` (a run's spec, status and phases) and `experiment`.

mod experiment;
mod metric;
mod providers;
mod run;
mod template;

use serde::{Deserialize, Serialize};

use super::kube::ObjectMeta;

pub use experiment::*;
pub use metric::*;
pub use providers::*;
pub use run::*;
pub use template::*;

/// An AnalysisTemplate or ClusterAnalysisTemplate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnalysisTemplate {
    /// `argoproj.io/v1alpha1`.
    pub api_version: String,
    /// `AnalysisTemplate` or `ClusterAnalysisTemplate`.
    pub kind: String,
    /// Object metadata.
    #[serde(default, deserialize_with = "crate::spec::common::null_as_default")]
    pub metadata: ObjectMeta,
    /// The template.
    pub spec: AnalysisTemplateSpec,
}

/// An AnalysisRun.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnalysisRun {
    /// `argoproj.io/v1alpha1`.
    pub api_version: String,
    /// `AnalysisRun`.
    pub kind: String,
    /// Object metadata.
    #[serde(default, deserialize_with = "crate::spec::common::null_as_default")]
    pub metadata: ObjectMeta,
    /// The run's spec.
    pub spec: AnalysisRunSpec,
    /// The run's observed state, as the controller records it; absent on a fresh run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<AnalysisRunStatus>,
}

/// An Experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Experiment {
    /// `argoproj.io/v1alpha1`.
    pub api_version: String,
    /// `Experiment`.
    pub kind: String,
    /// Object metadata.
    #[serde(default, deserialize_with = "crate::spec::common::null_as_default")]
    pub metadata: ObjectMeta,
    /// The experiment's spec.
    pub spec: ExperimentSpec,
    /// The experiment's observed state, as the controller records it; absent on a fresh one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ExperimentStatus>,
}

#[cfg(test)]
#[path = "analysis_tests.rs"]
mod tests;
