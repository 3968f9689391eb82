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
use crate::controller::record::{AuditEntry, AuditKind};

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
                self.held_specs.insert(name.clone(), held.clone());
            }
        }
        // Every such cluster must have said what it holds (an unreachable one is waited for).
        if self
            .spec_sources
            .iter()
            .any(|n| !self.held_specs.contains_key(n))
        {
            return;
        }
        let mut groups: BTreeMap<String, (Rollout, Vec<String>)> = BTreeMap::new();
        let mut unreadable = Vec::new();
        for (name, held) in &self.held_specs {
            match serde_json::from_value::<Rollout>(held.clone()) {
                Ok(rollout) => {
                    let key = serde_json::to_string(&rollout.spec).unwrap_or_default();
                    groups
                        .entry(key)
                        .or_insert_with(|| (rollout, Vec::new()))
                        .1
                        .push(name.clone());
                }
                Err(e) => unreadable.push(format!("{name}'s Rollout cannot be read: {e}")),
            }
        }
        let problem = if !unreadable.is_empty() {
            Some(unreadable.join("; "))
        } else if groups.len() > 1 {
            let held: Vec<String> = groups
                .values()
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
            None
        };
        if problem != self.disagreement {
            let message = problem
                .clone()
                .unwrap_or_else(|| "the clusters' Rollout specs agree again".to_owned());
            tracing::warn!(fleet = %self.record.name, "{message}");
            out.audit.push(AuditEntry::new(
                now,
                &self.record.name,
                &self.machine.state().revision,
                AuditKind::Sync,
                None,
                message,
            ));
            self.disagreement = problem;
        }
        if self.disagreement.is_some() {
            return;
        }
        let Some((rollout, names)) = groups.into_values().next() else {
            return;
        };
        let fleet_spec = serde_json::to_value(&self.record.specs.next.spec).ok();
        if serde_json::to_value(&rollout.spec).ok() == fleet_spec {
            return;
        }
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
        out.audit.push(AuditEntry::new(
            now,
            &self.record.name,
            &self.machine.state().revision,
            AuditKind::Sync,
            None,
            message,
        ));
    }
}
