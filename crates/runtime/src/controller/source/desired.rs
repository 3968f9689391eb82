//! The desired state read from the manifests, fleet by fleet (one fleet's broken input never
//! holds another back), with the secrets its analysis reads.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_core::diagnostic::{Diagnostic, Severity};
use flotilla_core::lint::{self, Options};
use flotilla_core::manifest::LoadedManifest;
use flotilla_core::spec::Manifest;
use flotilla_core::spec::analysis::AnalysisTemplate;
use flotilla_core::spec::fleet::FleetRollout;
use flotilla_core::spec::rollout::Rollout;

use crate::controller::record::Desired;

use crate::overlays::{OverlaySource, check_overlays};

/// The desired state as read from the source, fleet by fleet: one fleet's broken input never
/// stops another (per-fleet isolation).
#[derive(Debug, Clone, Default)]
pub struct DesiredSet {
    /// The FleetRollouts whose every input is present and valid.
    pub desired: Vec<Desired>,
    /// The FleetRollouts whose inputs have errors (file:line:column: field: message), by name.
    pub invalid: BTreeMap<String, Vec<String>>,
    /// Errors in files no FleetRollout's input came from (a document too broken to tell what it
    /// was): reported, and they keep every fleet that is not in `desired` on its last valid
    /// state, since such a fleet's inputs may be in them.
    pub unattributed: Vec<String>,
    /// The source's ConfigMaps, as read (the daemon reads its Argo Rollouts notification
    /// configuration from them: `controller::argo_notifications`).
    pub config_maps: Vec<flotilla_core::manifest::ConfigMapDocument>,
    /// The hub's spoke Secrets (a hub source only): `namespace/name`, resourceVersion, and the
    /// spoke or why it cannot be used; the Kubernetes backends reach the spokes through them.
    pub spokes: Option<Vec<Spoke>>,
}

/// A spoke Secret as the backends take it.
pub type Spoke = (
    String,
    String,
    Result<flotilla_kube::spokes::Spoke, flotilla_kube::spokes::SpokeError>,
);

impl DesiredSet {
    /// Whether nothing was refused.
    pub fn is_clean(&self) -> bool {
        self.invalid.is_empty() && self.unattributed.is_empty()
    }

    /// Every error, one a line (fleet errors prefixed with the fleet).
    pub fn errors(&self) -> Vec<String> {
        let mut out = self.unattributed.clone();
        for (fleet, errors) in &self.invalid {
            out.extend(
                errors
                    .iter()
                    .map(|e| format!("FleetRollout {fleet:?}: {e}")),
            );
        }
        out
    }

    /// The errors that concern fleet `name`: its own, then those no fleet could be blamed for.
    pub fn errors_of(&self, name: &str) -> Vec<String> {
        let mut out = self.invalid.get(name).cloned().unwrap_or_default();
        out.extend(self.unattributed.iter().cloned());
        out
    }
}

/// Reads the secrets each desired state's templates name (`valueFrom.secretKeyRef`); a fleet
/// with a secret that cannot be read becomes invalid (the error names the environment variable
/// and the file it was looked for in), since its analysis could not run.
pub fn read_secrets(set: &mut DesiredSet, secrets: &crate::secrets::Secrets) {
    let mut valid = Vec::new();
    for mut desired in std::mem::take(&mut set.desired) {
        match read_secrets_of(&mut desired, secrets) {
            Ok(()) => valid.push(desired),
            Err(errors) => {
                let name = desired.fleet_rollout.metadata.name.clone();
                set.invalid
                    .entry(name.unwrap_or_default())
                    .or_default()
                    .extend(errors);
            }
        }
    }
    set.desired = valid;
}

/// [`read_secrets`] for one fleet's desired state: fills its `secrets`, or says which could not
/// be read.
pub fn read_secrets_of(
    desired: &mut Desired,
    secrets: &crate::secrets::Secrets,
) -> Result<(), Vec<String>> {
    let mut errors = Vec::new();
    // Kubernetes clusters hold their own Secrets, read there by their backend: a fleet of
    // only such clusters needs none here.
    let in_clusters = !desired.fleet.spec.clusters.is_empty()
        && desired
            .fleet
            .spec
            .clusters
            .iter()
            .all(|c| c.endpoint.as_ref().is_some_and(|e| e.kubernetes.is_some()));
    let used = templates_run(
        Some(&desired.rollout),
        &desired.fleet_rollout,
        desired.templates.iter(),
    );
    for template in desired
        .templates
        .iter()
        .filter(|t| used.contains(t.metadata.name.as_deref().unwrap_or_default()))
    {
        for (i, arg) in template.spec.args.iter().enumerate() {
            let Some(secret) = arg.secret_key_ref() else {
                continue;
            };
            match secrets.read(&secret.name, &secret.key) {
                Ok(value) => {
                    desired
                        .secrets
                        .insert((secret.name.clone(), secret.key.clone()), value);
                }
                Err(_) if in_clusters => {}
                Err(e) => errors.push(format!(
                    "AnalysisTemplate {:?} spec.args[{i}].valueFrom.secretKeyRef: {e}",
                    template.metadata.name.clone().unwrap_or_default()
                )),
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// The names of the templates a FleetRollout runs: those its Rollout and its `waveAnalysis`
/// name, and those they include (among `templates`).
pub(crate) fn templates_run<'a>(
    rollout: Option<&Rollout>,
    fleet_rollout: &FleetRollout,
    templates: impl Iterator<Item = &'a AnalysisTemplate> + Clone,
) -> BTreeSet<String> {
    let mut wanted: Vec<String> = rollout
        .map(Rollout::analysis_template_refs)
        .unwrap_or_default()
        .into_iter()
        .map(|t| t.template_name)
        .chain(
            fleet_rollout
                .spec
                .wave_analysis
                .iter()
                .flat_map(|w| w.templates.iter().map(|t| t.template_name.clone())),
        )
        .collect();
    let mut used = BTreeSet::new();
    while let Some(name) = wanted.pop() {
        if used.insert(name.clone()) {
            for t in templates
                .clone()
                .filter(|t| t.metadata.name.as_deref() == Some(name.as_str()))
            {
                wanted.extend(t.spec.templates.iter().map(|r| r.template_name.clone()));
            }
        }
    }
    used
}

/// The manifests (kind, name) and files one FleetRollout's desired state is made of.
pub(crate) struct Inputs {
    names: BTreeSet<(&'static str, String)>,
    files: BTreeSet<String>,
    clusters: BTreeSet<String>,
}

/// Turns loaded manifests into the desired state of each FleetRollout. Every error (lint, an
/// overlay, a template the Rollout names that is not there, a cluster without an agent) is
/// attributed to the FleetRollouts whose inputs it concerns: by manifest (kind and name) when the
/// error names one, else by file; an overlay's error by the cluster it is for. `serve` needs
/// every template it runs, so a missing one is an error here, not lint's warning.
pub fn desired_from(
    manifests: &[LoadedManifest],
    mut diagnostics: Vec<Diagnostic>,
    overlay_files: &[OverlaySource],
    origin: &str,
) -> DesiredSet {
    diagnostics.extend(lint::lint(manifests, Options::default()));
    for d in &mut diagnostics {
        if d.rule == "ref/template-not-found" {
            d.severity = Severity::Error;
            d.message = format!(
                "{} (`flotilla serve` runs only templates it has: an analysis that cannot be planned would let the canary go on unjudged)",
                d.message
                    .split(" (it may exist")
                    .next()
                    .unwrap_or(&d.message)
            );
        }
    }
    let mut fleets = Vec::new();
    let mut fleet_rollouts = Vec::new();
    let mut rollouts = Vec::new();
    let mut templates = Vec::new();
    for loaded in manifests {
        match &loaded.manifest {
            Manifest::Fleet(f) => {
                for (i, cluster) in f.spec.clusters.iter().enumerate() {
                    if cluster
                        .endpoint
                        .as_ref()
                        .is_none_or(|e| e.agent.is_none() && e.kubernetes.is_none())
                    {
                        diagnostics.push(loaded.diagnostic(
                            Severity::Error,
                            "serve/no-agent",
                            format!("spec.clusters[{i}].endpoint"),
                            format!(
                                "cluster {:?} has no endpoint; `flotilla serve` drives a cluster through its agent or its Kubernetes API server",
                                cluster.name
                            ),
                        ));
                    }
                }
                if f.spec.spokes.is_some() {
                    diagnostics.push(loaded.diagnostic(
                        Severity::Error,
                        "serve/spokes-need-hub",
                        "spec.spokes",
                        "spokes are the spoke Secrets of a hub cluster: only `flotilla serve` with a `hub` source reads them",
                    ));
                }
                fleets.push((loaded, f.as_ref().clone()));
            }
            Manifest::FleetRollout(f) => fleet_rollouts.push((loaded, f.as_ref().clone())),
            Manifest::Rollout(r) => rollouts.push((loaded, r.as_ref().clone())),
            Manifest::AnalysisTemplate(t) | Manifest::ClusterAnalysisTemplate(t) => {
                templates.push((loaded, t.as_ref().clone()))
            }
            _ => {}
        }
    }
    let (overlays, overlay_errors) = check_overlays(manifests, overlay_files);
    let name = |m: &Option<String>| m.clone().unwrap_or_default();
    // Each FleetRollout's inputs.
    let mut inputs: BTreeMap<String, Inputs> = BTreeMap::new();
    for (loaded, fleet_rollout) in &fleet_rollouts {
        let mut input = Inputs {
            names: BTreeSet::new(),
            files: BTreeSet::new(),
            clusters: BTreeSet::new(),
        };
        let fr_name = name(&fleet_rollout.metadata.name);
        input.names.insert(("FleetRollout", fr_name.clone()));
        input.files.insert(loaded.file.clone());
        input
            .names
            .insert(("Fleet", fleet_rollout.spec.fleet.clone()));
        input
            .names
            .insert(("Rollout", fleet_rollout.spec.rollout.clone()));
        for (l, f) in &fleets {
            if name(&f.metadata.name) == fleet_rollout.spec.fleet {
                input.files.insert(l.file.clone());
                input
                    .clusters
                    .extend(f.spec.clusters.iter().map(|c| c.name.clone()));
            }
        }
        let rollout = rollouts
            .iter()
            .find(|(_, r)| name(&r.metadata.name) == fleet_rollout.spec.rollout);
        if let Some((l, _)) = rollout {
            input.files.insert(l.file.clone());
        }
        let used = templates_run(
            rollout.map(|(_, r)| r),
            fleet_rollout,
            templates.iter().map(|(_, t)| t),
        );
        for t in used {
            for (l, template) in &templates {
                if name(&template.metadata.name) == t {
                    input.files.insert(l.file.clone());
                }
            }
            input.names.insert(("AnalysisTemplate", t.clone()));
            input.names.insert(("ClusterAnalysisTemplate", t));
        }
        inputs.insert(fr_name, input);
    }
    let mut set = DesiredSet::default();
    for d in diagnostics.iter().filter(|d| d.severity == Severity::Error) {
        let by_name: Vec<&String> = inputs
            .iter()
            .filter(|(_, i)| {
                !d.kind.is_empty()
                    && !d.name.is_empty()
                    && i.names.iter().any(|(k, n)| *k == d.kind && *n == d.name)
            })
            .map(|(f, _)| f)
            .collect();
        let own = (d.kind == "FleetRollout" && !d.name.is_empty()).then(|| d.name.clone());
        let concerned: Vec<&String> = if !by_name.is_empty() {
            by_name
        } else if let Some(name) = &own {
            // A FleetRollout too broken to load: refused under its own name.
            vec![name]
        } else if d.kind.is_empty() || d.name.is_empty() {
            inputs
                .iter()
                .filter(|(_, i)| i.files.contains(&d.file))
                .map(|(f, _)| f)
                .collect()
        } else {
            // A manifest no FleetRollout uses: reported, but it holds no fleet back.
            Vec::new()
        };
        if concerned.is_empty() {
            set.unattributed.push(d.to_string());
        }
        for fleet in concerned {
            set.invalid
                .entry(fleet.clone())
                .or_default()
                .push(d.to_string());
        }
    }
    for error in &overlay_errors {
        let cluster = overlay_files
            .iter()
            .find(|(path, ..)| *path == error.file)
            .map(|(_, cluster, ..)| cluster.clone());
        let concerned: Vec<&String> = inputs
            .iter()
            .filter(|(_, i)| cluster.as_ref().is_none_or(|c| i.clusters.contains(c)))
            .map(|(f, _)| f)
            .collect();
        if concerned.is_empty() {
            set.unattributed.push(error.to_string());
        }
        for fleet in concerned {
            set.invalid
                .entry(fleet.clone())
                .or_default()
                .push(error.to_string());
        }
    }
    if fleet_rollouts.is_empty() && set.unattributed.is_empty() {
        set.unattributed
            .push(format!("{origin}: no FleetRollout to drive"));
    }
    let all_templates: Vec<AnalysisTemplate> = templates.iter().map(|(_, t)| t.clone()).collect();
    for (_, fleet_rollout) in fleet_rollouts {
        let fr_name = name(&fleet_rollout.metadata.name);
        if set.invalid.contains_key(&fr_name) {
            continue;
        }
        let fleet = fleets
            .iter()
            .find(|(_, f)| name(&f.metadata.name) == fleet_rollout.spec.fleet)
            .map(|(_, f)| f.clone());
        let rollout = rollouts
            .iter()
            .find(|(_, r)| name(&r.metadata.name) == fleet_rollout.spec.rollout)
            .map(|(_, r)| r.clone());
        // Lint has already reported missing references as errors of this FleetRollout.
        if let (Some(fleet), Some(rollout)) = (fleet, rollout) {
            let overlays = overlays
                .iter()
                .filter(|(_, _, r, _)| *r == fleet_rollout.spec.rollout)
                .map(|(_, c, _, o)| (c.clone(), o.clone()))
                .collect();
            set.desired.push(Desired {
                fleet,
                fleet_rollout,
                rollout,
                templates: all_templates.clone(),
                overlays,
                secrets: BTreeMap::new(),
            });
        }
    }
    set
}
