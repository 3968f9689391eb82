//! A new desired spec: the supersede rule (a new fleet revision starts from wave 1), settling on
//! the previous spec when Git agrees with a rollback, a cluster adopted on what it already runs
//! at first start, and the specs the machine remembers as baselines.

use std::sync::Arc;

use super::FleetMachine;
use crate::fleet::event::Decision;
use crate::fleet::plan::fleet_revision;
use crate::fleet::specs::FleetSpecs;
use crate::fleet::state::{ClusterStatus, FleetPhase};
use crate::fleet::tick::Revisions;
use crate::rollout::{self, Command, RolloutState};
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
        specs.next = next;
        self.keep_spec(specs, old_previous);
        self.remember(&specs.next);
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
        specs.previous = spec;
        self.keep_spec(specs, old_next);
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

    /// A new fleet revision arrives mid-rollout: in-flight canaries of the old one return to
    /// their stable, promoted clusters keep it as their stable, and the new revision starts at
    /// wave 1. Rejections of the old revision stay recorded; none applies to the new one.
    ///
    /// `old` are the specs of the revision being superseded: every cluster keeps running what its
    /// rollout has as stable (the old previous or the old next spec) until its wave starts.
    pub fn supersede(&mut self, old: &Revisions<'_>, revisions: &Revisions<'_>) {
        let revision = fleet_revision(revisions.next);
        if revision == self.state.revision {
            return;
        }
        self.remember(old.previous);
        self.remember(old.next);
        for cluster in self.state.clusters.values_mut() {
            let stable_hash = cluster
                .rollout
                .stable
                .and_then(|s| cluster.rollout.revision(s))
                .map(|r| r.hash.clone());
            cluster.baseline = stable_hash.filter(|h| self.known.contains_key(h.as_str()));
        }
        let old_revision = self.state.revision.clone();
        for (name, cluster) in self.state.clusters.iter_mut() {
            if cluster.status != ClusterStatus::NotStarted {
                self.events.push(
                    None,
                    Some(name),
                    Decision::Reset,
                    format!("{name}: waits for its wave"),
                );
            }
            if cluster.status == ClusterStatus::Progressing
                || cluster.status == ClusterStatus::Paused
            {
                cluster.pending.push(Command::Abort);
            }
            // A cluster the halt paused is not left paused for the new revision.
            if cluster.status == ClusterStatus::Paused {
                cluster.pending.push(Command::Resume);
            }
            cluster.status = ClusterStatus::NotStarted;
            cluster.abort_requested = false;
            cluster.on_new_spec = false;
            cluster.started_at = None;
            cluster.decided_at = None;
            cluster.reason.clear();
            cluster.failure = None;
            cluster.aborted_on_error = false;
            cluster.paused_for = None;
            cluster.accepted = false;
            cluster.runs.clear();
        }
        self.hashes = (
            rollout::template_hash(revisions.previous).into(),
            rollout::template_hash(revisions.next).into(),
        );
        self.run_plans.iter_mut().for_each(Vec::clear);
        self.plan_pool.clear();
        self.wave_plan = None;
        self.overlaid_for = None;
        // A wave run of the old revision stops; the new revision's runs take later attempts.
        if let Some(wave_run) = &mut self.state.wave_run {
            wave_run.run.terminate();
            wave_run.settled = true;
        }
        self.events.push(
            None,
            None,
            Decision::Superseded {
                previous: old_revision.clone(),
            },
            format!(
                "new fleet revision {revision} ({}) supersedes {old_revision}",
                revisions.next.first_image().unwrap_or_default()
            ),
        );
        self.state.revision = revision;
        let old_phase = self.state.phase;
        self.state.phase = FleetPhase::Progressing;
        self.state.message = "superseded: a new revision starts from wave 1".into();
        if old_phase != FleetPhase::Progressing {
            self.phase_event();
        }
        self.state.wave = 0;
        self.state.wave_started_at = vec![None; self.plan.waves.len()];
        self.state.wave_completed_at = vec![None; self.plan.waves.len()];
        self.state.bake_started_at = None;
    }

    /// First start: `cluster` was observed running `running` (its spec as the manifests say it,
    /// at the version the cluster serves) before the machine ever reconciled it. That spec
    /// becomes the cluster's baseline: its engine takes it as the stable it already runs
    /// (nothing is deployed), and the fleet revision reaches it through its wave and analysis,
    /// unless `running` is the revision itself (adopted as it is: already on it). Only a cluster
    /// never reconciled can be adopted; a later call changes nothing and returns false.
    /// `message` says what was found (an [`Decision::Adopted`] event).
    pub fn adopt(&mut self, cluster: &str, running: &Rollout, message: String) -> bool {
        let Some(state) = self.state.clusters.get(cluster) else {
            return false;
        };
        if state.rollout.stable.is_some() || !state.rollout.revisions.is_empty() {
            return false;
        }
        self.remember(running);
        let state = self.state.clusters.get_mut(cluster).expect("known cluster");
        state.baseline = Some(rollout::template_hash(running));
        self.events
            .push(None, Some(cluster), Decision::Adopted, message);
        true
    }

    /// Adds `spec` to the fleet's history and trims the history to the desired Rollout's
    /// `revisionHistoryLimit` (default 10, as many old ReplicaSets as Argo keeps), never dropping
    /// a spec a cluster runs as its baseline: the persisted record (a hub object under the API
    /// server's size limit) stays bounded over any number of releases.
    pub fn keep_spec(&self, specs: &mut FleetSpecs, spec: Rollout) {
        specs.keep(spec);
        let limit = specs.next.spec.revision_history_limit.unwrap_or(10).max(0) as usize;
        specs.trim(limit, |hash| {
            self.state
                .clusters
                .values()
                .any(|c| c.baseline.as_deref() == Some(hash))
        });
    }

    /// Makes a spec available as a baseline (a restored machine is told the specs its clusters'
    /// baselines name).
    pub fn remember(&mut self, rollout: &Rollout) {
        let hash = rollout::template_hash(rollout);
        self.known
            .insert(hash.clone(), (hash.into(), Arc::new(rollout.clone())));
    }
}
