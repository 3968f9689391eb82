//! The typed model of every manifest kind Flotilla reads: Argo Rollouts' kinds, Flotilla's own
//! fleet kinds, and the few Kubernetes kinds lint cross-checks against a Rollout.
//!
//! Every struct of Argo's and Flotilla's kinds denies unknown fields, so a typo is an error
//! naming its field path, never a silently ignored setting; the Kubernetes kinds lint only reads
//! (Service, Ingress) are decoded leniently. Field names follow upstream's camelCase JSON names.

pub mod analysis;
pub mod common;
pub mod fleet;
pub mod judge;
pub mod kube;
pub mod rollout;
pub mod scenario;

pub use common::{Duration, IntOrPercent, IntOrString};
pub use kube::ObjectMeta;

/// Argo Rollouts' API group and version.
pub const ARGO_API_VERSION: &str = "argoproj.io/v1alpha1";
/// Flotilla's API group and version.
pub const FLOTILLA_API_VERSION: &str = "flotilla.dev/v1alpha1";

/// One parsed manifest document of a kind Flotilla understands.
#[derive(Debug, Clone, PartialEq)]
pub enum Manifest {
    /// An Argo Rollout.
    Rollout(Box<rollout::Rollout>),
    /// A namespaced AnalysisTemplate.
    AnalysisTemplate(Box<analysis::AnalysisTemplate>),
    /// A cluster-scoped AnalysisTemplate.
    ClusterAnalysisTemplate(Box<analysis::AnalysisTemplate>),
    /// An AnalysisRun (spec and status).
    AnalysisRun(Box<analysis::AnalysisRun>),
    /// An Experiment (parsed and validated; not executed).
    Experiment(Box<analysis::Experiment>),
    /// Flotilla's fleet of clusters.
    Fleet(Box<fleet::Fleet>),
    /// Flotilla's multi-cluster rollout.
    FleetRollout(Box<fleet::FleetRollout>),
    /// A simulation scenario.
    Scenario(Box<scenario::Scenario>),
    /// A Kubernetes Service (lint checks its selector against the Rollout that names it).
    Service(Box<kube::Service>),
    /// A Kubernetes Ingress (decoded so that it is understood, not reported as ignored).
    Ingress(Box<kube::Ingress>),
}

impl Manifest {
    /// The manifest's `kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            Manifest::Rollout(_) => "Rollout",
            Manifest::AnalysisTemplate(_) => "AnalysisTemplate",
            Manifest::ClusterAnalysisTemplate(_) => "ClusterAnalysisTemplate",
            Manifest::AnalysisRun(_) => "AnalysisRun",
            Manifest::Experiment(_) => "Experiment",
            Manifest::Fleet(_) => "Fleet",
            Manifest::FleetRollout(_) => "FleetRollout",
            Manifest::Scenario(_) => "Scenario",
            Manifest::Service(_) => "Service",
            Manifest::Ingress(_) => "Ingress",
        }
    }

    /// The manifest's `metadata.name` (empty when absent).
    pub fn name(&self) -> &str {
        let meta = match self {
            Manifest::Rollout(m) => &m.metadata,
            Manifest::AnalysisTemplate(m) | Manifest::ClusterAnalysisTemplate(m) => &m.metadata,
            Manifest::AnalysisRun(m) => &m.metadata,
            Manifest::Experiment(m) => &m.metadata,
            Manifest::Fleet(m) => &m.metadata,
            Manifest::FleetRollout(m) => &m.metadata,
            Manifest::Scenario(m) => &m.metadata,
            Manifest::Service(m) => &m.metadata,
            Manifest::Ingress(m) => &m.metadata,
        };
        meta.name.as_deref().unwrap_or("")
    }
}
