//! The fleet's revision read from its clusters (`rolloutSource: cluster`): Argo CD or Flux owns
//! each Kubernetes cluster's Rollout spec, so a new revision starts when every such cluster holds
//! the same new spec; clusters that disagree are named and nothing starts, never a spec averaged
//! or picked by majority. The manifests' copy of the Rollout is only the fleet's first revision.

use std::collections::BTreeMap;
use std::time::Instant;

use flotilla_core::analysis::Millis;
use flotilla_core::backend::ClusterObserved;
use flotilla_core::rollout::template_hash;
use flotilla_core::spec::rollout::Rollout;

use super::images::first_image;
use super::{FleetController, TickOutput};

impl FleetController {
    /// Reads the spec each cluster holds; when all agree on one other than the fleet's, it is
    /// the new fleet revision (the supersede rule), or the rollback Git agreed with.
    pub(super) fn follow_clusters(
        &mut self,
        fresh: &BTreeMap<String, (Instant, ClusterObserved)>,
        now: Millis,
        out: &mut TickOutput,
    ) {
        if self.spec_sources.is_empty() {
            return;
        }
        for name in &self.spec_sources {
            if let Some(held) = fresh.get(name).and_then(|(_, o)| o.rollout.as_ref()) {
                // Read (decoded, hashed) only when it changed.
                if self.held_specs.get(name).is_none_or(|h| h.value != *held) {
                    self.held_specs.insert(name.clone(), HeldSpec::read(held));
                }
            }
        }
        // Grouped by pod template (what makes a revision; a replica count an HPA sets or a
        // pause differs per cluster without being one).
        let mut groups: BTreeMap<&str, (&Rollout, Vec<String>)> = BTreeMap::new();
        let mut unreadable = Vec::new();
        for (name, held) in &self.held_specs {
            match &held.read {
                Ok((rollout, hash, _)) => {
                    groups
                        .entry(hash.as_str())
                        .or_insert_with(|| (rollout, Vec::new()))
                        .1
                        .push(name.clone());
                }
                Err(e) => unreadable.push(format!("{name}'s Rollout cannot be read: {e}")),
            }
        }
        let fleet_hash = template_hash(&self.record.specs.next);
        let news = groups.keys().any(|hash| *hash != fleet_hash);
        let groups: Vec<(Rollout, Vec<String>)> = groups
            .into_values()
            .map(|(rollout, names)| (rollout.clone(), names))
            .collect();
        // A revision starts only on every source read now: one that did not answer is waited
        // for (said when a new spec is in sight), never assumed to hold what it last held.
        let unread: Vec<&str> = self
            .spec_sources
            .iter()
            .filter(|n| fresh.get(*n).is_none_or(|(_, o)| o.rollout.is_none()))
            .map(String::as_str)
            .collect();
        let problem = if !unreadable.is_empty() {
            Some(unreadable.join("; "))
        } else if news && !unread.is_empty() {
            Some(format!(
                "a new Rollout spec is in sight, but no revision starts before every cluster's is read: waiting for {}",
                unread.join(", ")
            ))
        } else if groups.len() > 1 {
            let held: Vec<String> = groups
                .iter()
                .map(|(rollout, names)| {
                    format!(
                        "{} {} {} (template {})",
                        names.join(", "),
                        if names.len() == 1 { "holds" } else { "hold" },
                        first_image(rollout),
                        template_hash(rollout)
                    )
                })
                .collect();
            Some(format!(
                "the clusters' Rollout specs disagree, so no revision starts until they agree: {}",
                held.join("; ")
            ))
        } else {
            self.strategy_problem()
        };
        if problem != self.disagreement {
            let message = problem
                .clone()
                .unwrap_or_else(|| "the clusters' Rollout specs agree again".to_owned());
            tracing::warn!(fleet = %self.record.name, "{message}");
            out.audit.push(self.sync_entry(now, message));
            self.disagreement = problem;
        }
        if self.disagreement.is_some() || !news || !unread.is_empty() {
            return;
        }
        let Some((rollout, names)) = groups.into_iter().next() else {
            return;
        };
        let old_revision = self.machine.state().revision.clone();
        let message = if self.machine.settle(&mut self.record.specs, rollout.clone()) {
            format!(
                "the clusters' Rollout specs agree with the rollback ({}); nothing to roll out",
                first_image(&self.record.specs.next)
            )
        } else {
            self.change_spec(rollout);
            format!(
                "the clusters' Rollout specs agree on a new revision {} (read from {}); fleet revision {} supersedes {old_revision}",
                first_image(&self.record.specs.next),
                names.join(", "),
                self.machine.state().revision
            )
        };
        tracing::info!(fleet = %self.record.name, "{message}");
        self.record.state = self.machine.state().clone();
        out.audit.push(self.sync_entry(now, message));
    }
}

impl FleetController {
    /// Clusters that hold the same pod template but not the same strategy: the fleet runs one
    /// Rollout's steps everywhere, so it would run steps some cluster's owner did not write.
    /// A lockstep wave whose clusters' step counts differ is named as such (its barrier needs
    /// the same steps: the rule `flotilla lint --live` reports as `fleet/lockstep-steps`).
    fn strategy_problem(&self) -> Option<String> {
        let read: BTreeMap<String, &Rollout> = self
            .held_specs
            .iter()
            .filter_map(|(name, held)| Some((name.clone(), &held.read.as_ref().ok()?.0)))
            .collect();
        if let Some(desired) = &self.record.desired {
            let mismatches = desired
                .fleet_rollout
                .lockstep_mismatches(&desired.fleet.spec.clusters, &read);
            if !mismatches.is_empty() {
                let said: Vec<String> = mismatches
                    .into_iter()
                    .map(|m| format!("{}: {}", m.path, m.message))
                    .collect();
                return Some(format!(
                    "no revision starts until the clusters' steps agree: {}",
                    said.join("; ")
                ));
            }
        }
        let mut strategies: BTreeMap<&str, (&Rollout, Vec<&str>)> = BTreeMap::new();
        for (name, held) in &self.held_specs {
            if let Ok((rollout, _, strategy)) = &held.read {
                strategies
                    .entry(strategy.as_str())
                    .or_insert_with(|| (rollout, Vec::new()))
                    .1
                    .push(name.as_str());
            }
        }
        if strategies.len() < 2 {
            return None;
        }
        // In the order of their first cluster's name, so that the message is stable.
        let mut strategies: Vec<(&Rollout, Vec<&str>)> = strategies.into_values().collect();
        strategies.sort_by_key(|(_, names)| names[0]);
        let held: Vec<String> = strategies
            .iter()
            .enumerate()
            .map(|(i, (rollout, names))| {
                format!(
                    "{} {} strategy {} ({})",
                    names.join(", "),
                    if names.len() == 1 { "holds" } else { "hold" },
                    i + 1,
                    rollout.steps_shape()
                )
            })
            .collect();
        Some(format!(
            "the clusters' Rollouts hold the same pod template but different strategies, so no revision starts until they agree (the fleet runs one Rollout's steps in every cluster): {}",
            held.join("; ")
        ))
    }
}

/// The spec a cluster holds, as read and as decoded: the Rollout, its pod-template hash and its
/// strategy as JSON (compared between clusters).
pub(super) struct HeldSpec {
    value: serde_json::Value,
    read: Result<(Rollout, String, String), String>,
}

impl HeldSpec {
    fn read(value: &serde_json::Value) -> HeldSpec {
        HeldSpec {
            value: value.clone(),
            read: serde_json::from_value::<Rollout>(value.clone())
                .map(|rollout| {
                    let hash = template_hash(&rollout);
                    let strategy =
                        serde_json::to_string(&rollout.spec.strategy).unwrap_or_default();
                    (rollout, hash, strategy)
                })
                .map_err(|e| e.to_string()),
        }
    }
}
