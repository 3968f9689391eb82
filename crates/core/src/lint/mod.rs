//! Lint: Argo Rollouts' own validation rules, the cross-references between manifests, and the
//! multi-cluster anti-patterns from the seed articles, over a set of loaded manifests.
//!
//! Rules read the typed model and report [`Diagnostic`]s located through each manifest's source
//! map; they never change anything. Rule identifiers are stable and documented in
//! `docs/lint.md`.

mod analysis;
mod backend;
mod fleet;
mod held;
mod mesh;
pub use backend::CapabilitiesOf;
pub use fleet::waves_of;
pub use held::{HeldRollouts, lint_held};
mod rollout;
mod scenario;
mod secrets;

use std::collections::{BTreeMap, BTreeSet};

use crate::diagnostic::{Diagnostic, Severity};
use crate::manifest::LoadedManifest;
use crate::spec::Manifest;
use crate::spec::analysis::AnalysisTemplate;
use crate::spec::fleet::{Fleet, FleetRollout};
use crate::spec::kube::Service;
use crate::spec::rollout::Rollout;

/// Arguments Flotilla gives every cluster's analysis; templates may use them undeclared.
pub const INJECTED_ARGS: &[&str] = &["cluster", "region", "metrics-address"];

/// Metric providers this version of Flotilla can execute (the runtime's provider adapters;
/// a test there keeps the two lists equal). Templates using any other provider parse and lint,
/// and get a warning.
pub const EXECUTABLE_PROVIDERS: &[&str] = &[
    "prometheus",
    "web",
    "job",
    "datadog",
    "newRelic",
    "influxdb",
    "graphite",
    "cloudWatch",
];

/// Lint options.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Turn warnings into errors (and references to templates outside the linted files too).
    pub strict: bool,
    /// What each cluster's backend can do: a FleetRollout whose Rollout needs a capability a
    /// target cluster's backend lacks is an error (`backend/capability`). None: not checked.
    pub capabilities: Option<CapabilitiesOf>,
}

/// Everything the rules may look up across files, by name.
pub(crate) struct Index<'a> {
    pub templates: BTreeMap<&'a str, (&'a LoadedManifest, &'a AnalysisTemplate)>,
    pub cluster_templates: BTreeMap<&'a str, (&'a LoadedManifest, &'a AnalysisTemplate)>,
    pub services: BTreeMap<&'a str, &'a Service>,
    pub rollouts: BTreeMap<&'a str, (&'a LoadedManifest, &'a Rollout)>,
    pub fleets: BTreeMap<&'a str, (&'a LoadedManifest, &'a Fleet)>,
    pub fleet_rollouts: Vec<(&'a LoadedManifest, &'a FleetRollout)>,
}

impl<'a> Index<'a> {
    fn new(manifests: &'a [LoadedManifest]) -> Self {
        let mut index = Index {
            templates: BTreeMap::new(),
            cluster_templates: BTreeMap::new(),
            services: BTreeMap::new(),
            rollouts: BTreeMap::new(),
            fleets: BTreeMap::new(),
            fleet_rollouts: Vec::new(),
        };
        for loaded in manifests {
            let name = loaded.manifest.name();
            match &loaded.manifest {
                Manifest::AnalysisTemplate(t) => {
                    index.templates.insert(name, (loaded, t));
                }
                Manifest::ClusterAnalysisTemplate(t) => {
                    index.cluster_templates.insert(name, (loaded, t));
                }
                Manifest::Service(s) => {
                    index.services.insert(name, s);
                }
                Manifest::Rollout(r) => {
                    index.rollouts.insert(name, (loaded, r));
                }
                Manifest::Fleet(f) => {
                    index.fleets.insert(name, (loaded, f));
                }
                Manifest::FleetRollout(f) => index.fleet_rollouts.push((loaded, f)),
                _ => {}
            }
        }
        index
    }

    /// The template a reference names, if it is among the linted files.
    pub fn template(
        &self,
        name: &str,
        cluster_scope: bool,
    ) -> Option<(&'a LoadedManifest, &'a AnalysisTemplate)> {
        if cluster_scope {
            self.cluster_templates.get(name).copied()
        } else {
            self.templates.get(name).copied()
        }
    }

    /// Argument names that the per-cluster overrides of the FleetRollouts deploying `rollout`
    /// supply.
    pub fn overridden_args(&self, rollout: &str) -> BTreeSet<&'a str> {
        self.fleet_rollouts
            .iter()
            .filter(|(_, f)| f.spec.rollout == rollout)
            .flat_map(|(_, f)| f.spec.cluster_overrides.iter())
            .flat_map(|o| o.args.iter().map(|a| a.name.as_str()))
            .collect()
    }
}

/// Collects diagnostics for the rules.
pub(crate) struct Sink {
    pub diagnostics: Vec<Diagnostic>,
}

impl Sink {
    pub fn push(
        &mut self,
        loaded: &LoadedManifest,
        severity: Severity,
        rule: &'static str,
        path: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.diagnostics
            .push(loaded.diagnostic(severity, rule, path, message));
    }

    pub fn error(
        &mut self,
        loaded: &LoadedManifest,
        rule: &'static str,
        path: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.push(loaded, Severity::Error, rule, path, message);
    }

    pub fn warn(
        &mut self,
        loaded: &LoadedManifest,
        rule: &'static str,
        path: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.push(loaded, Severity::Warning, rule, path, message);
    }
}

/// Lints a set of manifests (typically every manifest of the files a user named) together, so
/// that cross-references resolve. Returns the findings sorted by file and position.
pub fn lint(manifests: &[LoadedManifest], options: Options) -> Vec<Diagnostic> {
    let index = Index::new(manifests);
    let mut sink = Sink {
        diagnostics: Vec::new(),
    };
    for loaded in manifests {
        match &loaded.manifest {
            Manifest::Rollout(r) => rollout::check_rollout(&index, &mut sink, loaded, r),
            Manifest::Experiment(e) => rollout::check_experiment(&index, &mut sink, loaded, e),
            Manifest::AnalysisTemplate(t) | Manifest::ClusterAnalysisTemplate(t) => {
                analysis::check_template(&index, &mut sink, loaded, &t.spec)
            }
            Manifest::AnalysisRun(run) => analysis::check_metrics(
                &mut sink,
                loaded,
                &run.spec.metrics,
                "spec.metrics",
                &run.spec.args,
                true,
            ),
            Manifest::Fleet(f) => fleet::check_fleet(&mut sink, loaded, f),
            Manifest::FleetRollout(f) => fleet::check_fleet_rollout(&index, &mut sink, loaded, f),
            Manifest::Scenario(s) => scenario::check_scenario(&index, &mut sink, loaded, s),
            Manifest::Service(_) | Manifest::Ingress(_) => {}
        }
        secrets::check(&mut sink, loaded);
    }
    mesh::check(&index, &mut sink);
    if let Some(capabilities_of) = options.capabilities {
        backend::check(&index, &mut sink, capabilities_of);
    }
    let mut diagnostics = sink.diagnostics;
    if options.strict {
        for d in &mut diagnostics {
            if d.severity == Severity::Warning {
                d.severity = Severity::Error;
            }
        }
    }
    sort(&mut diagnostics);
    diagnostics
}

/// Sorts diagnostics by file, line, column, then rule, and drops exact duplicates.
pub fn sort(diagnostics: &mut Vec<Diagnostic>) {
    diagnostics.sort_by(|a, b| {
        (&a.file, a.line, a.column, a.rule, &a.message)
            .cmp(&(&b.file, b.line, b.column, b.rule, &b.message))
    });
    diagnostics.dedup();
}

/// Every `{{args.NAME}}` placeholder in a text.
pub(crate) fn placeholders(text: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else { break };
        let inner = after[..end].trim();
        if let Some(name) = inner.strip_prefix("args.") {
            names.push(name.trim());
        }
        rest = &after[end + 2..];
    }
    names
}

#[cfg(test)]
mod tests;
