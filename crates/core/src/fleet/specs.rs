//! The specs a fleet has run and what the machine decides about them: a new desired spec (the
//! supersede rule), settling on the previous one when Git agrees with a rollback, and the
//! durable change Git needs after a failure (a revert or per-cluster pins).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::event::{Decision, DurableChange, DurableEdit, FailedCluster};
use super::machine::{ClusterState, ClusterStatus, FleetMachine, FleetPhase, Revisions};
use crate::rollout::{self, RolloutState};
use crate::spec::rollout::Rollout;

/// The specs a fleet has run: the fleet revision's Rollout, the one it replaces, and earlier
/// ones (what `undo` returns to, what baselines name). The daemon persists them; the simulator
/// keeps them in memory; both change them only through [`FleetMachine::change_spec`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetSpecs {
    /// The Rollout clusters ran before this fleet revision.
    pub previous: Rollout,
    /// The Rollout of this fleet revision (the desired state).
    pub next: Rollout,
    /// Earlier revisions' specs, oldest first, once per pod template.
    pub history: Vec<Rollout>,
}

impl FleetSpecs {
    /// A fleet whose clusters run `spec` (nothing to roll out).
    pub fn new(spec: Rollout) -> FleetSpecs {
        FleetSpecs {
            previous: spec.clone(),
            next: spec,
            history: Vec::new(),
        }
    }

    /// The revisions the machine runs.
    pub fn revisions(&self) -> Revisions<'_> {
        Revisions {
            previous: &self.previous,
            next: &self.next,
        }
    }

    /// What `undo` returns to: revision `n` (1-based, oldest first, the previous spec last), or
    /// the previous spec.
    pub fn undo_target(&self, n: Option<usize>) -> Option<Rollout> {
        match n {
            None => Some(self.previous.clone()),
            Some(n) => self
                .history
                .iter()
                .chain([&self.previous])
                .nth(n.checked_sub(1)?)
                .cloned(),
        }
    }

    /// Adds a spec to the history, once per pod template.
    pub fn keep(&mut self, spec: Rollout) {
        let hash = rollout::template_hash(&spec);
        if !self
            .history
            .iter()
            .any(|h| rollout::template_hash(h) == hash)
        {
            self.history.push(spec);
        }
    }
}

impl FleetMachine {
    /// A new desired Rollout `next`: the supersede rule. The fleet revision in flight is
    /// superseded (its spec becomes the previous one, the old previous goes to the history) and
    /// `next` starts from wave 1. False, and nothing changes, when `next` has the pod template
    /// in flight already.
    pub fn change_spec(&mut self, specs: &mut FleetSpecs, next: Rollout) -> bool {
        if rollout::template_hash(&next) == rollout::template_hash(&specs.next) {
            return false;
        }
        let old_previous = std::mem::replace(&mut specs.previous, specs.next.clone());
        self.supersede(
            &Revisions {
                previous: &old_previous,
                next: &specs.previous,
            },
            &Revisions {
                previous: &specs.previous,
                next: &next,
            },
        );
        specs.keep(old_previous);
        self.remember(&next);
        specs.next = next;
        true
    }

    /// Git agrees with a rollback: the desired spec is the previous one while the fleet is
    /// halted or aborted with no cluster validated. The fleet settles on it without rolling
    /// anything out: no new revision, durable rejections kept, and each cluster keeps its
    /// rollout engine's state so that the engine sees the spec return to its stable template (a
    /// canary still in flight, or aborted with its scale-down pending, gets weight 0 and no
    /// replicas, as an Argo rollback to the stable revision does). Returns false, changing
    /// nothing, when Git does not agree with a rollback (then it is [`Self::change_spec`]).
    pub fn settle(&mut self, specs: &mut FleetSpecs, spec: Rollout) -> bool {
        let hash = rollout::template_hash(&spec);
        let agrees = hash == rollout::template_hash(&specs.previous)
            && hash != rollout::template_hash(&specs.next)
            && matches!(self.state.phase, FleetPhase::Halted | FleetPhase::Aborted)
            && !self
                .state
                .clusters
                .values()
                .any(|c| c.status == ClusterStatus::Validated);
        if !agrees {
            return false;
        }
        let rejections = std::mem::take(&mut self.state.rejections);
        let event_seq = self.state.event_seq;
        let engines: Vec<(String, RolloutState)> = self
            .state
            .clusters
            .iter()
            .map(|(name, c)| (name.clone(), c.rollout.clone()))
            .collect();
        let old_next = std::mem::replace(&mut specs.next, spec.clone());
        specs.keep(old_next);
        specs.previous = spec;
        let mut settled = FleetMachine::new(self.plan.clone(), &specs.revisions(), None);
        for known in &specs.history {
            settled.remember(known);
        }
        settled.set_overlays(self.overlays().clone());
        settled.state.rejections = rejections;
        settled.state.event_seq = event_seq;
        for (name, engine) in engines {
            if let Some(cluster) = settled.state.clusters.get_mut(&name) {
                cluster.rollout = engine;
            }
        }
        settled.events = std::mem::take(&mut self.events);
        settled.events.push(
            None,
            None,
            Decision::Settled,
            format!(
                "Git agrees with the rollback ({}); nothing to roll out",
                specs.next.first_image().unwrap_or_default()
            ),
        );
        *self = settled;
        true
    }

    /// The durable change Git needs for the fleet revision in flight, if one:
    /// - the fleet halted and no cluster was validated on it: the whole fleet's image returns to
    ///   the previous one (a revert);
    /// - some clusters were validated and others failed (the fleet halted, or completed within
    ///   its failure budget): a pin of exactly the failed clusters, naming the revision.
    ///
    /// `committed` is the revision a change was committed for, and `pinned` the clusters pinned
    /// then: a revert is never made twice, and after a commit only clusters that failed since (a
    /// retry) still need a pin.
    pub fn durable_change(
        &self,
        specs: &FleetSpecs,
        committed: Option<&str>,
        pinned: &BTreeSet<String>,
    ) -> Option<DurableChange> {
        let state = &self.state;
        if !matches!(state.phase, FleetPhase::Halted | FleetPhase::Completed) {
            return None;
        }
        let already = committed == Some(state.revision.as_str());
        let validated: Vec<String> = state
            .clusters
            .iter()
            .filter(|(_, c)| c.status == ClusterStatus::Validated)
            .map(|(n, _)| n.clone())
            .collect();
        let failed: Vec<(&String, &ClusterState)> = state
            .clusters
            .iter()
            .filter(|(n, c)| {
                c.status == ClusterStatus::RolledBack
                    && state
                        .rejections
                        .contains(&((*n).clone(), state.revision.clone()))
                    && !(already && pinned.contains(*n))
            })
            .collect();
        if already && (validated.is_empty() || failed.is_empty()) {
            return None;
        }
        let bad_image = specs.next.first_image().unwrap_or_default().to_owned();
        let good_image = specs.previous.first_image().unwrap_or_default().to_owned();
        if bad_image == good_image || bad_image.is_empty() || good_image.is_empty() {
            return None;
        }
        let edit = if validated.is_empty() {
            if state.phase != FleetPhase::Halted {
                return None;
            }
            DurableEdit::Revert
        } else {
            if failed.is_empty() {
                return None;
            }
            DurableEdit::Pin
        };
        let revisions = specs.revisions();
        let failed = failed
            .into_iter()
            .map(|(name, c)| {
                // Each failed cluster stays on what it runs now: its previous (or baseline)
                // image.
                let mut image = self
                    .cluster_spec(name, &revisions)
                    .and_then(|s| s.first_image().map(str::to_owned))
                    .unwrap_or_default();
                if image.is_empty() || image == bad_image {
                    image = good_image.clone();
                }
                FailedCluster {
                    name: name.clone(),
                    image,
                    failure: c.failure.clone(),
                    reason: match &c.failure {
                        Some(f) => {
                            format!("{name}: metric {} = {} ({})", f.metric, f.value, f.message)
                        }
                        None => format!("{name}: {}", c.reason),
                    },
                }
            })
            .collect();
        Some(DurableChange {
            revision: state.revision.clone(),
            edit,
            bad_image,
            good_image,
            failed,
            validated,
        })
    }

    /// A durable change reached Git (the daemon committed it; the simulator takes it as
    /// committed): a [`Decision::DurableChange`].
    pub fn record_durable(&mut self, change: &DurableChange) {
        let names: Vec<&str> = change.failed.iter().map(|f| f.name.as_str()).collect();
        let message = match change.edit {
            DurableEdit::Revert => format!(
                "durable rollback: the fleet returns to {} in Git (revision {} rejected)",
                change.good_image, change.revision
            ),
            DurableEdit::Pin => format!(
                "durable rollback: {} pinned in Git (revision {} rejected there only)",
                names.join(", "),
                change.revision
            ),
        };
        self.events.push(
            None,
            None,
            Decision::DurableChange {
                change: change.clone(),
            },
            message,
        );
    }
}
