//! What the machine decides about a new desired spec: the supersede rule, or settling on the
//! previous spec when Git agrees with a rollback.

use super::FleetMachine;
use crate::fleet::event::Decision;
use crate::fleet::specs::FleetSpecs;
use crate::fleet::state::{ClusterStatus, FleetPhase};
use crate::fleet::tick::Revisions;
use crate::rollout::{self, RolloutState};
use crate::spec::rollout::Rollout;

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
}
