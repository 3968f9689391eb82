//! Lint over what the clusters hold (`flotilla lint --live`): with `rolloutSource: cluster` each
//! Kubernetes cluster's Rollout is read there, so the rules that compare clusters' Rollouts (a
//! lockstep wave needs the same steps in every cluster) need those Rollouts as an input.

use std::collections::BTreeMap;

use crate::diagnostic::Diagnostic;
use crate::manifest::LoadedManifest;
use crate::spec::Manifest;
use crate::spec::rollout::Rollout;

use super::Sink;

/// The Rollouts the clusters hold, by FleetRollout name, then cluster name; an error says why a
/// cluster's could not be read (unreachable, not found, not a Rollout).
pub type HeldRollouts = BTreeMap<String, BTreeMap<String, Result<Rollout, String>>>;

/// Checks each FleetRollout among `manifests` whose Fleet is among them too against the Rollouts
/// its clusters hold: `fleet/lockstep-steps` (error) for a lockstep wave whose clusters' Rollouts
/// have different steps, `fleet/held-unread` (warning) for a cluster whose Rollout could not be
/// read, so was not checked. Under `strict`, warnings are errors, as in [`super::lint`].
pub fn lint_held(
    manifests: &[LoadedManifest],
    held: &HeldRollouts,
    strict: bool,
) -> Vec<Diagnostic> {
    let mut sink = Sink {
        diagnostics: Vec::new(),
    };
    let fleets: BTreeMap<&str, _> = manifests
        .iter()
        .filter_map(|m| match &m.manifest {
            Manifest::Fleet(f) => Some((m.manifest.name(), f)),
            _ => None,
        })
        .collect();
    for loaded in manifests {
        let Manifest::FleetRollout(fleet_rollout) = &loaded.manifest else {
            continue;
        };
        let (Some(fleet), Some(held)) = (
            fleets.get(fleet_rollout.spec.fleet.as_str()),
            held.get(loaded.manifest.name()),
        ) else {
            continue;
        };
        let mut read = BTreeMap::new();
        for (cluster, rollout) in held {
            match rollout {
                Ok(rollout) => {
                    read.insert(cluster.clone(), rollout);
                }
                Err(error) => sink.warn(
                    loaded,
                    "fleet/held-unread",
                    "spec.rollout",
                    format!("cluster {cluster:?}: its Rollout {:?} could not be read, so it was not checked: {error}", fleet_rollout.spec.rollout),
                ),
            }
        }
        for mismatch in fleet_rollout.lockstep_mismatches(&fleet.spec.clusters, &read) {
            sink.error(
                loaded,
                "fleet/lockstep-steps",
                mismatch.path,
                mismatch.message,
            );
        }
    }
    let mut diagnostics = sink.diagnostics;
    if strict {
        for d in &mut diagnostics {
            if d.severity == crate::diagnostic::Severity::Warning {
                d.severity = crate::diagnostic::Severity::Error;
            }
        }
    }
    super::sort(&mut diagnostics);
    diagnostics
}
