//! The fleet machine: waves, evidence-keyed validation, targeted rollback, durable rejections,
//! supersede, and the fleet-level commands.

mod durable;
mod operator;
mod specs;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::commands::FleetCommand;
use super::event::{Decision, FleetEvent, Pending};
use super::overlay::ClusterOverlay;
use super::plan::{FleetPlan, fleet_revision, plan_key};
use super::specs::FleetSpecs;
use super::state::{
    ClusterState, ClusterStatus, Failure, FleetPhase, FleetState, PausedFor, RunMap, WaveRun,
};
use super::tick::{
    ClusterMeasurement, ClusterObservation, ClusterOutcome, FleetOutput, Revisions, wave_of_key,
};
use crate::analysis::Outcome;
use crate::analysis::plan::{RunPlan, resolve};
use crate::analysis::run::Run;
use crate::rollout::{self, Action, Command, PauseReason, Phase, RunKey, RunReport};
use crate::spec::analysis::{AnalysisPhase, OnInconclusive};
use crate::spec::fleet::{RollbackScope, UnreachableAction};
use crate::spec::rollout::Rollout;
use crate::time::Millis;

/// The fleet machine: state plus the plans it derives (which are not serialized).
pub struct FleetMachine {
    /// The plan.
    pub(crate) plan: FleetPlan,
    /// The state.
    pub(crate) state: FleetState,
    /// Decisions made since the last tick's output.
    pub(crate) events: Pending,
    /// Each cluster's run plans, by run.
    run_plans: BTreeMap<String, Vec<(RunKey, Arc<RunPlan>)>>,
    /// Plans by content ([`plan_key`]): clusters whose templates read none of their own
    /// arguments share one plan.
    plan_pool: BTreeMap<String, Arc<RunPlan>>,
    /// The previous and the new revision's pod-template hashes.
    hashes: (Arc<str>, Arc<str>),
    /// Baseline specs by pod-template hash.
    known: BTreeMap<String, (Arc<str>, Arc<Rollout>)>,
    /// The clusters' names, in order (one list for every tick).
    names: Arc<[String]>,
    /// The wave-level analysis plan of one wave (derived again after a restore).
    wave_plan: Option<(usize, Result<Arc<RunPlan>, String>)>,
    /// Per-cluster overlays (from the desired state's source).
    overlays: BTreeMap<String, ClusterOverlay>,
    /// The overlaid clusters' specs, derived for `overlaid_for` (the revisions' hashes).
    overlaid: BTreeMap<String, Overlaid>,
    overlaid_for: Option<(Arc<str>, Arc<str>)>,
}

/// One overlaid cluster's specs (each with its pod-template hash).
struct Overlaid {
    previous: (Arc<str>, Arc<Rollout>),
    next: (Arc<str>, Arc<Rollout>),
    /// The spec it is held to (its overlay's image, or an active pin's).
    pinned: Option<(Arc<str>, Arc<Rollout>)>,
}

fn shared(rollout: Rollout) -> (Arc<str>, Arc<Rollout>) {
    (rollout::template_hash(&rollout).into(), Arc::new(rollout))
}

impl FleetMachine {
    /// A machine for a fresh fleet revision (or restored from `state`).
    pub fn new(
        plan: FleetPlan,
        revisions: &Revisions<'_>,
        state: Option<FleetState>,
    ) -> FleetMachine {
        let revision = fleet_revision(revisions.next);
        let state = state.unwrap_or_else(|| FleetState {
            revision: revision.clone(),
            wave_started_at: vec![None; plan.waves.len()],
            wave_completed_at: vec![None; plan.waves.len()],
            clusters: plan
                .clusters
                .keys()
                .map(|c| (c.clone(), ClusterState::default()))
                .collect(),
            ..FleetState::default()
        });
        let mut machine = FleetMachine {
            hashes: (
                rollout::template_hash(revisions.previous).into(),
                rollout::template_hash(revisions.next).into(),
            ),
            names: state.clusters.keys().cloned().collect(),
            plan: plan.clone(),
            state,
            events: Pending::default(),
            run_plans: BTreeMap::new(),
            plan_pool: BTreeMap::new(),
            known: BTreeMap::new(),
            wave_plan: None,
            overlays: BTreeMap::new(),
            overlaid: BTreeMap::new(),
            overlaid_for: None,
        };
        // A restored state may be of an earlier plan (the Fleet changed while the controller
        // was down): its clusters and waves are fitted to this one.
        machine.fit(&plan);
        machine
    }

    /// A machine resumed from a persisted `state` after a restart: fitted to `plan` (clusters
    /// that left the Fleet are trimmed, joiners added NotStarted), told every spec `specs` knows,
    /// and with the measurements that were in flight when the previous process died abandoned,
    /// so they are taken again.
    pub fn resume(plan: FleetPlan, specs: &FleetSpecs, state: FleetState) -> FleetMachine {
        let mut machine = FleetMachine::new(plan, &specs.revisions(), Some(state));
        for spec in specs.history.iter().chain([&specs.previous, &specs.next]) {
            machine.remember(spec);
        }
        for cluster in machine.state.clusters.values_mut() {
            for run in cluster.runs.values_mut() {
                run.abandon_in_flight();
            }
        }
        if let Some(wave_run) = machine.state.wave_run.as_mut() {
            wave_run.run.abandon_in_flight();
        }
        machine
    }

    /// The plan.
    pub fn plan(&self) -> &FleetPlan {
        &self.plan
    }

    /// The state (persisted as is).
    pub fn state(&self) -> &FleetState {
        &self.state
    }

    /// The Fleet changed (a cluster joined or left): `plan` replaces the machine's plan.
    ///
    /// A cluster that left is forgotten (its rejections stay recorded); one that joined is
    /// NotStarted (the driver adopts it from what it runs, as at a first start, with
    /// [`Self::adopt`]). A wave keeps its start and completion times, except that a wave with a
    /// member that has not started is not complete: a cluster joining a wave the fleet already
    /// passed takes the fleet back to that wave (clusters of later waves in flight go on), and
    /// the waves after it, still complete, are passed again without a second bake. A completed
    /// fleet that gains a cluster progresses again. A wave analysis in flight whose wave
    /// changed starts again.
    pub fn replan(&mut self, plan: FleetPlan) {
        let old = std::mem::replace(&mut self.plan, plan);
        if old.waves != self.plan.waves
            && let Some(wave_run) = self.state.wave_run.as_mut()
            && !wave_run.settled
        {
            wave_run.run.terminate();
            wave_run.settled = true;
        }
        if old.waves != self.plan.waves {
            self.wave_plan = None;
        }
        self.fit(&old);
    }

    /// Fits the state's clusters and per-wave times to the plan; `old` is the plan the state
    /// was of (its wave index maps the times).
    fn fit(&mut self, old: &FleetPlan) {
        let plan = &self.plan;
        self.state
            .clusters
            .retain(|name, _| plan.clusters.contains_key(name));
        for name in plan.clusters.keys() {
            self.state.clusters.entry(name.clone()).or_default();
        }
        self.names = self.state.clusters.keys().cloned().collect();
        self.run_plans
            .retain(|name, _| plan.clusters.contains_key(name));
        self.overlaid_for = None;
        let count = plan.waves.len();
        let (mut started, mut completed) = (vec![None; count], vec![None; count]);
        for (i, members) in plan.waves.iter().enumerate() {
            if let Some(j) = members.iter().find_map(|m| old.wave_index.get(m)).copied() {
                started[i] = self.state.wave_started_at.get(j).copied().flatten();
                completed[i] = self.state.wave_completed_at.get(j).copied().flatten();
            }
        }
        self.state.wave_started_at = started;
        self.state.wave_completed_at = completed;
        self.reopen_waves();
    }

    /// A wave with a member that has not started is not complete: the fleet's wave is the first
    /// wave not complete (a cluster that joined or was retried in a wave the fleet passed takes
    /// it back there), and a completed fleet with such a wave progresses again.
    pub(super) fn reopen_waves(&mut self) {
        let count = self.plan.waves.len();
        let mut completed = std::mem::take(&mut self.state.wave_completed_at);
        completed.resize(count, None);
        for (i, members) in self.plan.waves.iter().enumerate() {
            if members.iter().any(|m| {
                self.state
                    .clusters
                    .get(m)
                    .is_some_and(|c| c.status == ClusterStatus::NotStarted)
            }) {
                completed[i] = None;
            }
        }
        let first_open = completed.iter().position(Option::is_none).unwrap_or(count);
        if first_open != self.state.wave {
            self.state.bake_started_at = None;
        }
        self.state.wave = first_open;
        self.state.wave_completed_at = completed;
        self.state.wave_started_at.resize(count, None);
        if self.state.phase == FleetPhase::Completed && first_open < count {
            self.set_phase(
                FleetPhase::Progressing,
                format!("wave {} has a cluster to roll out", first_open + 1),
            );
        }
    }

    /// Sets the per-cluster overlays (clusters not in the plan are ignored). A cluster whose
    /// overlay holds it to an image (its own `image`, or a pin of the current revision) is
    /// `Pinned` from the next tick and runs that image; args and env apply to both the previous
    /// and the new spec of the cluster.
    pub fn set_overlays(&mut self, overlays: BTreeMap<String, ClusterOverlay>) {
        if overlays != self.overlays {
            self.overlays = overlays;
            self.overlaid_for = None;
        }
    }

    /// The overlays in effect.
    pub fn overlays(&self) -> &BTreeMap<String, ClusterOverlay> {
        &self.overlays
    }

    /// Derives the overlaid clusters' specs for these revisions (once per revision pair).
    fn prepare_overlays(&mut self, revisions: &Revisions<'_>) {
        if self
            .overlaid_for
            .as_ref()
            .is_some_and(|(p, n)| *p == self.hashes.0 && *n == self.hashes.1)
        {
            return;
        }
        self.overlaid.clear();
        for (name, overlay) in &self.overlays {
            if !self.state.clusters.contains_key(name) {
                continue;
            }
            let previous = shared(overlay.apply(revisions.previous, None));
            let next = shared(overlay.apply(revisions.next, None));
            // A pinned cluster stays on what it ran before the revision its pin rejects: the
            // previous spec (with the pin's image), never the rejected spec with an old image,
            // which would carry the rest of the rejected change (env, args, resources) along.
            let pinned = overlay
                .pinned_image(&self.state.revision)
                .map(|image| shared(overlay.apply(revisions.previous, Some(image))));
            for (hash, spec) in [Some(&previous), Some(&next), pinned.as_ref()]
                .into_iter()
                .flatten()
            {
                self.known
                    .insert(hash.to_string(), (hash.clone(), spec.clone()));
            }
            self.overlaid.insert(
                name.clone(),
                Overlaid {
                    previous,
                    next,
                    pinned,
                },
            );
        }
        self.overlaid_for = Some((self.hashes.0.clone(), self.hashes.1.clone()));
    }

    /// Clusters held to an image become `Pinned` (unless mid-update); a lifted pin returns a
    /// cluster to the fleet (`Held` while the fleet is halted or aborted).
    fn apply_pins(&mut self, now: Millis) {
        let halted = matches!(self.state.phase, FleetPhase::Halted | FleetPhase::Aborted);
        for (name, cluster) in self.state.clusters.iter_mut() {
            let pinned = self.overlaid.get(name).and_then(|o| o.pinned.as_ref());
            match (pinned, cluster.status) {
                (Some(_), ClusterStatus::NotStarted | ClusterStatus::Held) => {
                    let overlay = &self.overlays[name];
                    cluster.status = ClusterStatus::Pinned;
                    cluster.on_new_spec = false;
                    cluster.decided_at = Some(now);
                    cluster.reason = match (&overlay.image, &overlay.pin) {
                        (Some(image), _) => format!("pinned to {image} by its overlay"),
                        (None, Some(pin)) => format!(
                            "pinned to {} by the controller: revision {} is rejected here",
                            pin.image, pin.rejects
                        ),
                        (None, None) => "pinned".into(),
                    };
                    self.events.push(
                        Some(now),
                        Some(name),
                        Decision::Pinned,
                        format!("{name}: {}", cluster.reason),
                    );
                }
                (None, ClusterStatus::Pinned) => {
                    cluster.decided_at = None;
                    if halted {
                        cluster.status = ClusterStatus::Held;
                        cluster.reason =
                            "held: its pin was lifted while the fleet is halted".into();
                        self.events.push(
                            Some(now),
                            Some(name),
                            Decision::Held,
                            format!("{name}: {}", cluster.reason),
                        );
                    } else {
                        cluster.status = ClusterStatus::NotStarted;
                        cluster.reason = "its pin was lifted".into();
                        self.events.push(
                            Some(now),
                            Some(name),
                            Decision::Reset,
                            format!("{name}: its pin was lifted; waits for its wave"),
                        );
                    }
                }
                _ => {}
            }
        }
    }

    /// The spec a cluster runs now (its overlay, pin or baseline applied).
    pub fn cluster_spec(&self, name: &str, revisions: &Revisions<'_>) -> Option<Rollout> {
        self.state.clusters.get(name)?;
        Some(self.spec_for(name, revisions).0.clone())
    }

    /// Every spec the machine may run on some cluster (baselines and overlaid specs), by
    /// pod-template hash.
    pub fn known_specs(&self) -> impl Iterator<Item = (&str, &Rollout)> {
        self.known
            .iter()
            .map(|(h, (_, spec))| (h.as_str(), &**spec))
    }

    /// The new revision's pod-template hash for a cluster (its overlay applied).
    fn next_hash_of(&self, name: &str) -> Arc<str> {
        self.overlaid
            .get(name)
            .map_or_else(|| self.hashes.1.clone(), |o| o.next.0.clone())
    }

    /// The previous revision's pod-template hash for a cluster (its overlay applied).
    fn previous_hash_of(&self, name: &str) -> Arc<str> {
        self.overlaid
            .get(name)
            .map_or_else(|| self.hashes.0.clone(), |o| o.previous.0.clone())
    }

    /// The plan of wave `wave`'s wave-level analysis (Err: why it cannot run).
    fn wave_run_plan(
        &mut self,
        next: &Rollout,
        wave: usize,
    ) -> Option<Result<Arc<RunPlan>, String>> {
        if let Some((w, plan)) = &self.wave_plan
            && *w == wave
        {
            return Some(plan.clone());
        }
        let plan = self
            .plan
            .wave_run_plan(next, wave)?
            .map(Arc::new)
            .map_err(|e| e.to_string());
        self.wave_plan = Some((wave, plan.clone()));
        Some(plan)
    }

    fn run_plan(&mut self, rollout: &Rollout, cluster: &str, run: RunKey) -> Option<Arc<RunPlan>> {
        if let Some((_, plan)) = self
            .run_plans
            .get(cluster)
            .and_then(|plans| plans.iter().find(|(key, _)| *key == run))
        {
            return Some(plan.clone());
        }
        let (spec, values) = self.plan.run_plan_inputs(rollout, cluster, run).ok()?;
        let key = plan_key(&spec, &values);
        let plan = match self.plan_pool.get(&key) {
            Some(plan) => plan.clone(),
            None => {
                let plan = Arc::new(resolve(&spec, &values).ok()?);
                self.plan_pool.insert(key, plan.clone());
                plan
            }
        };
        self.run_plans
            .entry(cluster.to_owned())
            .or_default()
            .push((run, plan.clone()));
        Some(plan)
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
        self.run_plans.clear();
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

    /// Makes a spec available as a baseline (a restored machine is told the specs its clusters'
    /// baselines name).
    pub fn remember(&mut self, rollout: &Rollout) {
        let hash = rollout::template_hash(rollout);
        self.known
            .insert(hash.clone(), (hash.into(), Arc::new(rollout.clone())));
    }

    /// The spec a cluster runs now, and its template hash.
    fn spec_for<'r>(&self, name: &str, revisions: &Revisions<'r>) -> (SpecRef<'r>, Arc<str>) {
        let cluster = &self.state.clusters[name];
        if let Some(overlaid) = self.overlaid.get(name) {
            if let Some((hash, spec)) = &overlaid.pinned {
                return (SpecRef::Shared(spec.clone()), hash.clone());
            }
            if cluster.on_new_spec {
                return (
                    SpecRef::Shared(overlaid.next.1.clone()),
                    overlaid.next.0.clone(),
                );
            }
            if cluster.baseline.is_none() {
                return (
                    SpecRef::Shared(overlaid.previous.1.clone()),
                    overlaid.previous.0.clone(),
                );
            }
        }
        if cluster.on_new_spec {
            return (SpecRef::Borrowed(revisions.next), self.hashes.1.clone());
        }
        if let Some((hash, spec)) = cluster
            .baseline
            .as_ref()
            .and_then(|h| self.known.get(h.as_str()))
        {
            return (SpecRef::Shared(spec.clone()), hash.clone());
        }
        (SpecRef::Borrowed(revisions.previous), self.hashes.0.clone())
    }

    /// Says why clusters aborted on an analysis error: clusters whose metrics come from one
    /// provider address and erred together are one `MetricsProviderDown` condition naming the
    /// provider, not one failure each.
    fn errored_message(&self, errored: &[&str]) -> String {
        let mut by_provider: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        let mut alone = Vec::new();
        for name in errored {
            match self
                .plan
                .clusters
                .get(*name)
                .and_then(|c| c.metrics_address.as_deref())
            {
                Some(address) => by_provider.entry(address).or_default().push(name),
                None => alone.push(*name),
            }
        }
        let mut parts = Vec::new();
        for (address, mut clusters) in by_provider {
            clusters.sort_unstable();
            if clusters.len() > 1 {
                parts.push(format!(
                    "MetricsProviderDown: the metrics provider {address} failed for {}",
                    clusters.join(", ")
                ));
            } else {
                alone.extend(clusters);
            }
        }
        if !alone.is_empty() {
            alone.sort_unstable();
            parts.push(format!("{} aborted on an analysis error", alone.join(", ")));
        }
        format!(
            "{}; an error is no verdict on the version: retry starts {} again",
            parts.join("; "),
            if errored.len() == 1 { "it" } else { "them" }
        )
    }

    fn halt(&mut self, message: String) {
        if matches!(self.state.phase, FleetPhase::Halted | FleetPhase::Aborted) {
            return;
        }
        for (name, cluster) in self.state.clusters.iter_mut() {
            match cluster.status {
                ClusterStatus::NotStarted => {
                    cluster.status = ClusterStatus::Held;
                    cluster.reason = "held: the fleet halted before its wave".into();
                    self.events.push(
                        None,
                        Some(name),
                        Decision::Held,
                        format!("{name}: {}", cluster.reason),
                    );
                }
                ClusterStatus::Progressing => {
                    cluster.status = ClusterStatus::Paused;
                    cluster.reason =
                        format!("paused: the fleet halted ({name} keeps running its analysis)");
                    cluster.pending.push(Command::Pause);
                    cluster.paused_for = Some(PausedFor::Halt);
                    self.events.push(
                        None,
                        Some(name),
                        Decision::Paused {
                            paused_for: Some(PausedFor::Halt),
                            needs_human: false,
                            condition: None,
                        },
                        format!("{name}: {}", cluster.reason),
                    );
                }
                _ => {}
            }
        }
        self.set_phase(FleetPhase::Halted, message);
    }

    /// Sets the fleet's phase and message; a change of phase is a [`Decision::Phase`].
    pub(super) fn set_phase(&mut self, phase: FleetPhase, message: String) {
        let changed = self.state.phase != phase;
        self.state.phase = phase;
        self.state.message = message;
        if changed {
            self.phase_event();
        }
    }

    /// The fleet's phase changed: says so, with the failure that decided it, if one did.
    pub(super) fn phase_event(&mut self) {
        let phase = self.state.phase;
        let failed = matches!(
            phase,
            FleetPhase::Halted | FleetPhase::Aborted | FleetPhase::Completed
        )
        .then(|| {
            self.state
                .clusters
                .iter()
                .find(|(_, c)| c.failure.is_some() && c.status == ClusterStatus::RolledBack)
        })
        .flatten();
        let (failed_cluster, failure) = match failed {
            Some((name, c)) => (Some(name.clone()), c.failure.clone()),
            None => (None, None),
        };
        let message = format!(
            "{}: fleet {phase:?}: {}",
            self.plan.name, self.state.message
        );
        self.events.push(
            None,
            None,
            Decision::Phase {
                phase,
                failed_cluster,
                failure,
            },
            message,
        );
    }

    /// One tick: commands, then every cluster's rollout engine and analysis runs, then the wave
    /// gate. Returns the actions and measurements for the driver.
    pub fn tick(
        &mut self,
        revisions: &Revisions<'_>,
        observations: &BTreeMap<String, ClusterObservation>,
        outcomes: Vec<ClusterOutcome>,
        commands: &[FleetCommand],
        now: Millis,
    ) -> FleetOutput {
        let mut output = FleetOutput::default();
        self.handle_commands(commands);
        self.prepare_overlays(revisions);
        self.apply_pins(now);
        // Measurement outcomes into their runs.
        for outcome in outcomes {
            if let Some(wave) = wave_of_key(outcome.run) {
                self.wave_outcome(wave, outcome, revisions.next, now);
                continue;
            }
            // The plan is derived again when the machine was restored from persisted state.
            if !self.state.clusters.contains_key(&outcome.cluster) {
                continue;
            }
            let (spec_ref, _) = self.spec_for(&outcome.cluster, revisions);
            let spec: &Rollout = &spec_ref;
            let Some(plan) = self.run_plan(spec, &outcome.cluster, outcome.run) else {
                continue;
            };
            if let Some(run) = self
                .state
                .clusters
                .get_mut(&outcome.cluster)
                .and_then(|c| c.runs.get_mut(&outcome.run))
            {
                let calibrated = |run: &Run| {
                    run.metrics
                        .get(outcome.metric_index)
                        .is_some_and(|m| !m.calibration.is_empty())
                };
                let before = calibrated(run);
                run.handle_outcome(&plan, outcome.metric_index, now, outcome.outcome);
                if !before && calibrated(run) {
                    let metric = &run.metrics[outcome.metric_index];
                    self.events.push(
                        Some(now),
                        Some(&outcome.cluster),
                        Decision::Calibrated {
                            metric: metric.name.clone(),
                        },
                        format!(
                            "{}: {} calibrated against its own reference: {}",
                            outcome.cluster,
                            metric.name,
                            crate::analysis::compare::baseline_summary(&metric.calibration)
                        ),
                    );
                }
                // Assessed at once: the engine decides this tick on the run's verdict with this
                // measurement in it (a failure arriving as the last step ends aborts the
                // canary; it must not be promoted first and judged after).
                run.assess(&plan, now);
            }
        }
        // Both in name order: one merge pass instead of a lookup per cluster.
        let names = self.names.clone();
        let mut reported = observations.iter().peekable();
        for name in names.iter() {
            static UNREPORTED: std::sync::OnceLock<ClusterObservation> = std::sync::OnceLock::new();
            while reported
                .next_if(|(k, _)| k.as_str() < name.as_str())
                .is_some()
            {}
            let observation = match reported.peek() {
                Some((k, observation)) if *k == name => observation,
                _ => UNREPORTED.get_or_init(ClusterObservation::default),
            };
            self.tick_cluster(name, revisions, observation, now, &mut output);
        }
        self.gate(revisions.next, now, &mut output);
        // Start the clusters the wave gate allows; they take the new spec from the next tick.
        self.start_clusters(now, revisions.next);
        output.events = self.take_events(now);
        output
    }

    /// Starts clusters of the current wave, within maxUpdate (clusters in flight: progressing or
    /// paused), unless the fleet is paused or halted or the cluster rejected.
    fn start_clusters(&mut self, now: Millis, next: &Rollout) {
        if self.state.phase != FleetPhase::Progressing || self.state.paused {
            return;
        }
        let Some(members) = self.plan.waves.get(self.state.wave) else {
            return;
        };
        let limit = self.plan.max_update[self.state.wave];
        let state = &mut self.state;
        // A paused cluster is still mid-update: it holds its maxUpdate slot.
        let mut progressing = members
            .iter()
            .filter(|n| {
                state.clusters.get(*n).is_some_and(|c| {
                    matches!(c.status, ClusterStatus::Progressing | ClusterStatus::Paused)
                })
            })
            .count();
        for name in members {
            if progressing >= limit {
                break;
            }
            let Some(cluster) = state.clusters.get_mut(name) else {
                continue;
            };
            // A cluster starts from its settled previous revision (reconciled at least once),
            // unless it rejected this revision.
            if cluster.status != ClusterStatus::NotStarted
                || cluster.rollout.stable.is_none()
                || state
                    .rejections
                    .contains(&(name.clone(), state.revision.clone()))
            {
                continue;
            }
            cluster.status = ClusterStatus::Progressing;
            cluster.on_new_spec = true;
            cluster.started_at = Some(now);
            cluster.reason = "updating".into();
            cluster.accepted = false;
            cluster.paused_for = None;
            progressing += 1;
            if state.wave_started_at[state.wave].is_none() {
                state.wave_started_at[state.wave] = Some(now);
                self.events.push(
                    Some(now),
                    None,
                    Decision::WaveStarted {
                        wave: state.wave + 1,
                    },
                    format!(
                        "{}: wave {} started ({})",
                        self.plan.name,
                        state.wave + 1,
                        members.join(", ")
                    ),
                );
            }
            self.events.push(
                Some(now),
                Some(name),
                Decision::ClusterStarted,
                format!(
                    "{name} starts revision {}",
                    next.first_image().unwrap_or_default()
                ),
            );
        }
    }

    fn tick_cluster(
        &mut self,
        name: &str,
        revisions: &Revisions<'_>,
        observation: &ClusterObservation,
        now: Millis,
        output: &mut FleetOutput,
    ) {
        let (spec_ref, hash) = self.spec_for(name, revisions);
        let spec: &Rollout = &spec_ref;
        // Reachability: an unreachable cluster is retried, never validated, and past its
        // timeout halts the fleet or is skipped.
        if !observation.reachable {
            let timeout = self.plan.policy.unreachable_timeout as Millis;
            let action = self.plan.policy.unreachable_action;
            let in_current_wave = self.plan.wave_of(name) == Some(self.state.wave)
                && self.state.phase == FleetPhase::Progressing;
            let cluster = self.state.clusters.get_mut(name).expect("known cluster");
            let since = *cluster.unreachable_since.get_or_insert(now);
            let in_play = matches!(
                cluster.status,
                ClusterStatus::Progressing | ClusterStatus::Paused
            ) || (cluster.status == ClusterStatus::NotStarted && in_current_wave);
            if in_play && now - since >= timeout {
                match action {
                    UnreachableAction::Skip => {
                        cluster.status = ClusterStatus::Skipped;
                        cluster.decided_at = Some(now);
                        cluster.paused_for = None;
                        cluster.reason = format!(
                            "skipped: unreachable for {} s; when it answers again its traffic returns to its stable, and retry rolls it forward",
                            (now - since) / 1000
                        );
                        // Whatever it was doing does not go on unjudged when it answers again:
                        // its canary is aborted then (Skipped is final, and no success).
                        if cluster.on_new_spec {
                            cluster.pending.push(Command::Abort);
                        }
                        self.events.push(
                            Some(now),
                            Some(name),
                            Decision::Skipped,
                            format!("{name}: {}", cluster.reason),
                        );
                    }
                    UnreachableAction::Halt => {
                        let message =
                            format!("cluster {name} unreachable for {} s", (now - since) / 1000);
                        cluster.reason = message.clone();
                        self.halt(message);
                    }
                }
            }
            return;
        }
        if observation.diverged {
            // Reachable, but not running what was decided: nothing advances on it until the
            // driver's repair took effect.
            let cluster = self.state.clusters.get_mut(name).expect("known cluster");
            cluster.unreachable_since = None;
            return;
        }
        // Feed the runs' phases to the engine, take its decisions.
        let mut observed = Cow::Borrowed(&observation.observed);
        let cluster_runs: Vec<RunKey> = self.state.clusters[name].runs.keys().copied().collect();
        for key in cluster_runs {
            // A run whose plan cannot be derived (a missing template, an argument that does not
            // resolve) is still reported: it is in Error, and the engine must see it, or the
            // canary would go on with nothing judging it.
            let plan = self.run_plan(spec, name, key);
            let run = &self.state.clusters[name].runs[&key];
            observed.to_mut().analysis.insert(
                key,
                RunReport {
                    phase: run.phase,
                    message: run.message.clone(),
                    abort_on_inconclusive: plan
                        .as_ref()
                        .is_some_and(|plan| run.inconclusive_action(plan) == OnInconclusive::Abort),
                    stale: plan.as_ref().and_then(|plan| run.stale(plan, now)),
                },
            );
        }
        let cluster = self.state.clusters.get_mut(name).expect("known cluster");
        cluster.unreachable_since = None;
        let commands = std::mem::take(&mut cluster.pending);
        let (step_before, deadline_before) = (
            cluster.rollout.step_index,
            cluster.rollout.deadline_exceeded,
        );
        let actions = rollout::reconcile_with_hash(
            spec,
            &hash,
            &mut cluster.rollout,
            &observed,
            &commands,
            now,
        );
        // What the engine decided: a step reached, a weight set without one, its own events.
        let engine = &cluster.rollout;
        let stepped = cluster.status == ClusterStatus::Progressing
            && step_before.is_some()
            && engine.step_index > step_before;
        if stepped {
            let steps = spec.canary().map_or(0, |c| c.steps.len()) as u32;
            let (step, weight) = (
                engine.step_index.unwrap_or(0),
                engine.desired_weight.unwrap_or(0),
            );
            self.events.push_with_evidence(
                now,
                name,
                cluster,
                Decision::StepReached {
                    step,
                    steps,
                    weight,
                },
                format!("{name}: step {step}/{steps} (canary weight {weight})"),
            );
        }
        for action in &actions {
            match action {
                Action::SetWeight { canary, .. } if !stepped => self.events.push(
                    Some(now),
                    Some(name),
                    Decision::WeightSet { weight: *canary },
                    format!("{name}: canary weight {canary}"),
                ),
                Action::Event { reason, message } => self.events.push(
                    Some(now),
                    Some(name),
                    Decision::RolloutEvent {
                        reason: reason.clone(),
                    },
                    format!("{name}: {message}"),
                ),
                _ => {}
            }
        }
        let mut starts = Vec::new();
        for action in &actions {
            match action {
                Action::StartAnalysis { run } => starts.push(*run),
                Action::TerminateAnalysis { run } => {
                    let plan = self.run_plan(spec, name, *run);
                    if let (Some(plan), Some(state)) = (
                        plan,
                        self.state
                            .clusters
                            .get_mut(name)
                            .and_then(|c| c.runs.get_mut(run)),
                    ) {
                        state.terminate();
                        for index in state.to_cancel() {
                            state.handle_outcome(&plan, index, now, Outcome::Terminated);
                        }
                        state.assess(&plan, now);
                    }
                }
                _ => {}
            }
            output.actions.push((name.to_owned(), action.clone()));
        }
        for run in starts {
            let plan = self.run_plan(spec, name, run);
            let state = match &plan {
                Some(plan) => Run::new(plan, now),
                None => {
                    Run::failed_to_start("Unable to resolve metric arguments for this cluster", now)
                }
            };
            self.state
                .clusters
                .get_mut(name)
                .expect("known cluster")
                .runs
                .insert(run, state);
        }
        // Advance the runs: due measurements become requests.
        let keys: Vec<RunKey> = self.state.clusters[name].runs.keys().copied().collect();
        for key in keys {
            let Some(plan) = self.run_plan(spec, name, key) else {
                continue;
            };
            let run = self
                .state
                .clusters
                .get_mut(name)
                .expect("known cluster")
                .runs
                .get_mut(&key)
                .expect("known run");
            run.assess(&plan, now);
            for request in run.poll_due(&plan, now) {
                output.measurements.push(ClusterMeasurement {
                    cluster: name.to_owned(),
                    run: key,
                    request,
                });
            }
        }
        self.judge_cluster(name, spec, now, deadline_before);
    }

    /// Decides a cluster's status from its engine and runs: validated (with evidence), failed,
    /// or paused without evidence.
    fn judge_cluster(&mut self, name: &str, spec: &Rollout, now: Millis, deadline_before: bool) {
        let new_hash = self.next_hash_of(name);
        let previous_hash = self.previous_hash_of(name);
        let cluster = self.state.clusters.get_mut(name).expect("known cluster");
        match cluster.status {
            ClusterStatus::Progressing | ClusterStatus::Paused => {}
            ClusterStatus::RolledBack | ClusterStatus::Skipped => {
                // Keep returning it to the previous spec once its abort has taken effect.
                if cluster.on_new_spec && cluster.rollout.abort {
                    cluster.on_new_spec = false;
                }
                return;
            }
            _ => return,
        }
        let engine = &cluster.rollout;
        if engine.abort {
            let failure = cluster.runs.values().find_map(run_failure);
            // An analysis that errored (and none that failed) is no verdict on the version: the
            // canary is aborted, but nothing is rejected and the failure budget is untouched.
            let failed = cluster
                .runs
                .values()
                .any(|r| r.phase == AnalysisPhase::Failed);
            let errored = !failed
                && cluster
                    .runs
                    .values()
                    .any(|r| r.phase == AnalysisPhase::Error);
            // Aborted past its progress deadline (`progressDeadlineAbort`), held for evidence
            // that never came: no verdict on the version either.
            if !failed && !errored && engine.deadline_exceeded {
                cluster.status = ClusterStatus::RolledBack;
                cluster.aborted_on_error = true;
                cluster.decided_at = Some(now);
                cluster.paused_for = None;
                cluster.reason = format!(
                    "aborted without rejection: {} (progressDeadlineAbort; no verdict on the version): retry starts the cluster again",
                    engine.message
                );
                self.events.push_with_evidence(
                    now,
                    name,
                    cluster,
                    Decision::AbortedWithoutRejection { failure: None },
                    format!("{name}: {}", cluster.reason),
                );
                return;
            }
            if errored {
                cluster.status = ClusterStatus::RolledBack;
                cluster.aborted_on_error = true;
                cluster.paused_for = None;
                cluster.decided_at = Some(now);
                cluster.failure = failure.clone();
                let why = match &failure {
                    Some(f) => format!("metric {} errored: {}", f.metric, f.message),
                    None => engine.message.clone(),
                };
                cluster.reason = format!(
                    "aborted without rejection: the analysis errored ({why}); an error is not a verdict on the version: retry starts the cluster again"
                );
                self.events.push_with_evidence(
                    now,
                    name,
                    cluster,
                    Decision::AbortedWithoutRejection { failure },
                    format!("{name}: {}", cluster.reason),
                );
                return;
            }
            // Failed: record why, reject the revision for this cluster, roll it back alone.
            let revision = self.state.revision.clone();
            let scope = self.plan.policy.rollback_scope;
            let wave = self.plan.wave_of(name);
            cluster.status = ClusterStatus::RolledBack;
            cluster.decided_at = Some(now);
            cluster.reason = engine.message.clone();
            cluster.failure = failure.clone();
            self.events.push_with_evidence(
                now,
                name,
                cluster,
                Decision::Failed {
                    failure: failure.clone(),
                    condition: "RolloutAborted".into(),
                },
                format!("{name}: {}", cluster.reason),
            );
            self.state.rejections.insert((name.to_owned(), revision));
            let cause = match &failure {
                Some(f) => format!(
                    "cluster {name} failed: metric {} = {} ({})",
                    f.metric, f.value, f.message
                ),
                None => format!("cluster {name} failed: {}", engine.message),
            };
            self.on_failure(name, wave, scope, cause);
            return;
        }
        // Held before its promotion for want of current evidence: Paused, saying why; back to
        // Progressing when the evidence arrives.
        if let Some(hold) = &engine.evidence_hold {
            // Past the progress deadline the hold is an EvidenceTimeout (a canary that gets no
            // traffic never waits silently forever).
            let reason = if engine.deadline_exceeded {
                format!(
                    "EvidenceTimeout: {hold} (past progressDeadlineSeconds; promote to accept, abort to roll back)"
                )
            } else {
                hold.clone()
            };
            // Said when it begins, and again when it needs a human (past the deadline).
            let timed_out = engine.deadline_exceeded && !deadline_before;
            let begins = cluster.status != ClusterStatus::Paused
                || cluster.paused_for != Some(PausedFor::Evidence);
            if cluster.status != ClusterStatus::Paused || cluster.reason != reason {
                cluster.status = ClusterStatus::Paused;
                cluster.reason = reason;
                cluster.paused_for = Some(PausedFor::Evidence);
            }
            if begins || timed_out {
                self.events.push_with_evidence(
                    now,
                    name,
                    cluster,
                    Decision::Paused {
                        paused_for: Some(PausedFor::Evidence),
                        needs_human: cluster.rollout.deadline_exceeded,
                        condition: None,
                    },
                    format!("{name}: {}", cluster.reason),
                );
            }
            return;
        }
        // Stopped by an Inconclusive run: Paused for a human, saying what and how to go on.
        if engine
            .pause_conditions
            .iter()
            .any(|p| p.reason == PauseReason::InconclusiveAnalysisRun)
        {
            let reason = inconclusive_reason(&cluster.runs);
            if cluster.status != ClusterStatus::Paused
                || cluster.paused_for != Some(PausedFor::Inconclusive)
            {
                cluster.status = ClusterStatus::Paused;
                cluster.reason = reason;
                cluster.paused_for = Some(PausedFor::Inconclusive);
                self.events.push_with_evidence(
                    now,
                    name,
                    cluster,
                    Decision::Paused {
                        paused_for: Some(PausedFor::Inconclusive),
                        needs_human: true,
                        condition: Some("InconclusiveAnalysisRun".into()),
                    },
                    format!("{name}: {}", cluster.reason),
                );
            } else if cluster.reason != reason {
                cluster.reason = reason;
            }
            return;
        }
        // The hold or the pause is over (fresh evidence came, or a human promoted).
        let waited = matches!(
            cluster.paused_for,
            Some(PausedFor::Evidence | PausedFor::Inconclusive)
        ) || cluster.reason.starts_with("waiting for evidence")
            || cluster.reason.starts_with("EvidenceTimeout");
        if cluster.status == ClusterStatus::Paused && waited {
            cluster.status = ClusterStatus::Progressing;
            cluster.reason = "updating".into();
            cluster.paused_for = None;
            self.events.push_with_evidence(
                now,
                name,
                cluster,
                Decision::Resumed,
                format!("{name}: goes on (its evidence came, or an operator promoted it)"),
            );
        }
        let engine = &cluster.rollout;
        let healthy = engine.phase == Phase::Healthy
            && engine.stable == engine.current
            && engine
                .current
                .and_then(|c| engine.revision(c))
                .is_some_and(|r| *r.hash == *new_hash);
        if !healthy {
            return;
        }
        // Already on this revision before the fleet rollout began (the whole fleet, or this
        // cluster: a supersede back to what it runs, as an `undo` mid-rollout is, or a cluster
        // adopted at first start): nothing to prove, and nothing was deployed.
        let ran_before = cluster
            .baseline
            .as_deref()
            .map_or(previous_hash == new_hash, |b| *b == *new_hash);
        if ran_before {
            cluster.status = ClusterStatus::Validated;
            cluster.decided_at = Some(now);
            cluster.reason = "already on this revision".into();
            self.events.push(
                Some(now),
                Some(name),
                Decision::Validated { accepted: false },
                format!("{name}: {}", cluster.reason),
            );
            return;
        }
        // Healthy on this revision: validated only on evidence.
        let mut evidence = !cluster.runs.is_empty();
        let mut missing = String::new();
        let keys: Vec<RunKey> = cluster.runs.keys().copied().collect();
        for key in keys {
            let plan = self.run_plan(spec, name, key);
            let cluster = &self.state.clusters[name];
            let run = &cluster.runs[&key];
            let ok = run.phase == AnalysisPhase::Successful
                && plan.as_ref().is_some_and(|p| run.has_evidence(p));
            if !ok {
                evidence = false;
                missing = match run.without_evidence() {
                    Some(metric) => format!(
                        "metric {:?} passed without evidence (no data or NaN; last value {})",
                        metric.name,
                        last_value(metric)
                    ),
                    None => format!("its {:?} analysis run ended {:?}", key.slot, run.phase),
                };
            }
        }
        let cluster = self.state.clusters.get_mut(name).expect("known cluster");
        let was = (cluster.status, cluster.paused_for);
        if evidence {
            cluster.status = ClusterStatus::Validated;
            cluster.decided_at = Some(now);
            cluster.paused_for = None;
            cluster.reason =
                "validated: healthy on the new revision, every gating metric with evidence".into();
        } else if cluster.accepted {
            cluster.status = ClusterStatus::Validated;
            cluster.decided_at = Some(now);
            cluster.paused_for = None;
            cluster.reason = format!(
                "validated by an operator's promote, without a verdict: {}",
                if missing.is_empty() {
                    "no evidence"
                } else {
                    missing.as_str()
                }
            );
        } else if cluster.status != ClusterStatus::Paused
            || cluster.paused_for != Some(PausedFor::NoEvidence)
        {
            cluster.status = ClusterStatus::Paused;
            cluster.paused_for = Some(PausedFor::NoEvidence);
            cluster.reason = if cluster.runs.is_empty() {
                format!(
                    "inconclusive: the Rollout has no analysis, so nothing proves this cluster healthy; {CONTINUE}"
                )
            } else {
                format!("inconclusive: {missing}; {CONTINUE}")
            };
        }
        if (cluster.status, cluster.paused_for) != was {
            let decision = match cluster.status {
                ClusterStatus::Validated => Decision::Validated {
                    accepted: !evidence,
                },
                _ => Decision::Paused {
                    paused_for: Some(PausedFor::NoEvidence),
                    needs_human: true,
                    condition: None,
                },
            };
            self.events.push_with_evidence(
                now,
                name,
                cluster,
                decision,
                format!("{name}: {}", cluster.reason),
            );
        }
    }

    fn on_failure(&mut self, name: &str, wave: Option<usize>, scope: RollbackScope, cause: String) {
        self.widen_rollback(Some(name), wave, scope, name);
        // Within the wave's failure budget, the wave goes on.
        let revision = self.state.revision.clone();
        let failed_in_wave = wave.map_or(0, |w| {
            self.plan.waves[w]
                .iter()
                .filter(|c| {
                    self.state
                        .rejections
                        .contains(&((*c).clone(), revision.clone()))
                })
                .count()
        });
        if scope == RollbackScope::Failed && failed_in_wave <= self.plan.policy.max_failed_clusters
        {
            return;
        }
        self.halt(format!("Halted: {cause}"));
    }

    /// Widened scopes (`wave`, `fleet`) roll the clusters running the new revision back fast
    /// (no steps) to their previous stable; `failed` rolls back nothing more. `because` names
    /// what failed (a cluster, or a wave's analysis).
    fn widen_rollback(
        &mut self,
        failed: Option<&str>,
        wave: Option<usize>,
        scope: RollbackScope,
        because: &str,
    ) {
        let widen: Vec<String> = match scope {
            RollbackScope::Failed => Vec::new(),
            RollbackScope::Wave => wave.map(|w| self.plan.waves[w].clone()).unwrap_or_default(),
            RollbackScope::Fleet => self.plan.clusters.keys().cloned().collect(),
        };
        for other in widen {
            if Some(other.as_str()) == failed {
                continue;
            }
            if let Some(cluster) = self.state.clusters.get_mut(&other)
                && matches!(
                    cluster.status,
                    ClusterStatus::Validated | ClusterStatus::Progressing | ClusterStatus::Paused
                )
            {
                cluster.status = ClusterStatus::RolledBack;
                cluster.reason = format!("rolled back with {because} (rollbackScope {scope:?})");
                cluster.on_new_spec = false;
                cluster.pending.push(Command::Promote { full: true });
                self.events.push(
                    None,
                    Some(&other),
                    Decision::RolledBack,
                    format!("{other}: {}", cluster.reason),
                );
            }
        }
    }

    /// A measurement outcome of a wave-level analysis: into the wave's current run, unless it
    /// belongs to an earlier attempt or another wave (a late answer).
    fn wave_outcome(&mut self, wave: usize, outcome: ClusterOutcome, next: &Rollout, now: Millis) {
        let current = self
            .state
            .wave_run
            .as_ref()
            .is_some_and(|w| w.wave == wave && w.key() == outcome.run);
        if !current {
            return;
        }
        let Some(Ok(plan)) = self.wave_run_plan(next, wave) else {
            return;
        };
        if let Some(wave_run) = &mut self.state.wave_run {
            wave_run
                .run
                .handle_outcome(&plan, outcome.metric_index, now, outcome.outcome);
        }
    }

    /// The wave-level analysis of the current wave, once it is validated and baked: starts it
    /// (again, after a settled verdict that did not pass), advances it, and acts on its verdict.
    /// Returns whether it passed: Successful with evidence.
    fn wave_analysis(&mut self, next: &Rollout, now: Millis, output: &mut FleetOutput) -> bool {
        let wave = self.state.wave;
        let Some(plan) = self.wave_run_plan(next, wave) else {
            return true;
        };
        let fresh = match &self.state.wave_run {
            Some(w) if w.wave == wave => w.settled.then_some(w.attempt + 1),
            _ => Some(0),
        };
        if let Some(attempt) = fresh {
            let run = match &plan {
                Ok(plan) => Run::new(plan, now),
                Err(message) => Run::failed_to_start(message.clone(), now),
            };
            self.state.wave_run = Some(WaveRun {
                wave,
                attempt,
                run,
                settled: false,
            });
        }
        let Some(wave_run) = self.state.wave_run.as_mut() else {
            return false;
        };
        let key = wave_run.key();
        let phase = match &plan {
            Ok(plan) => {
                wave_run.run.assess(plan, now);
                for request in wave_run.run.poll_due(plan, now) {
                    output.measurements.push(ClusterMeasurement {
                        cluster: String::new(),
                        run: key,
                        request,
                    });
                }
                wave_run.run.phase
            }
            Err(_) => wave_run.run.phase,
        };
        let evidence = plan.as_ref().is_ok_and(|p| wave_run.run.has_evidence(p));
        // A run with no wet metric proves nothing (and, with no metric at all, never completes).
        let no_metric = plan
            .as_ref()
            .is_ok_and(|p| p.metrics.iter().all(|m| m.dry_run));
        let number = wave + 1;
        match phase {
            _ if no_metric && !wave_run.settled => {
                wave_run.settled = true;
                self.state.paused = true;
                self.wave_verdict(number, phase);
                self.set_phase(FleetPhase::Paused, format!(
                    "paused: wave {number} analysis has no metric that is not a dry run, so nothing proves the wave healthy"
                ));
                false
            }
            AnalysisPhase::Successful if evidence => {
                self.wave_verdict(number, phase);
                true
            }
            AnalysisPhase::Successful | AnalysisPhase::Inconclusive => {
                // No verdict to act on: the fleet pauses for a human (resume runs it again).
                wave_run.settled = true;
                let why = if phase == AnalysisPhase::Inconclusive {
                    format!("inconclusive ({})", wave_run.run.message)
                } else {
                    let missing = wave_run
                        .run
                        .without_evidence()
                        .map(|m| m.name.clone())
                        .unwrap_or_default();
                    format!("metric {missing:?} passed without evidence (no data or NaN)")
                };
                self.state.paused = true;
                self.wave_verdict(number, phase);
                self.set_phase(
                    FleetPhase::Paused,
                    format!("paused: wave {number} analysis {why}; resume runs it again"),
                );
                false
            }
            AnalysisPhase::Failed | AnalysisPhase::Error => {
                wave_run.settled = true;
                let cause = match run_failure(&wave_run.run) {
                    Some(f) => format!(
                        "wave {number} analysis failed: metric {} = {} ({})",
                        f.metric, f.value, f.message
                    ),
                    None => format!("wave {number} analysis failed: {}", wave_run.run.message),
                };
                let scope = self.plan.policy.rollback_scope;
                self.wave_verdict(number, phase);
                self.widen_rollback(
                    None,
                    Some(wave),
                    scope,
                    &format!("wave {number}'s analysis"),
                );
                self.halt(format!("Halted: {cause}"));
                false
            }
            _ => false,
        }
    }

    /// Wave `number`'s analysis reached a verdict the fleet acts on.
    fn wave_verdict(&mut self, number: usize, phase: AnalysisPhase) {
        let message = match &self.state.wave_run {
            Some(w) if !w.run.message.is_empty() => {
                format!("wave {number} analysis {phase:?}: {}", w.run.message)
            }
            _ => format!("wave {number} analysis {phase:?}"),
        };
        self.events.push(
            None,
            None,
            Decision::WaveAnalysis {
                wave: number,
                phase,
            },
            format!("{}: {message}", self.plan.name),
        );
    }

    /// The wave gate: complete when every cluster is decided (validated, skipped, or failed
    /// within budget); then the bake; then the wave-level analysis, if any, must pass; then the
    /// next wave.
    fn gate(&mut self, next: &Rollout, now: Millis, output: &mut FleetOutput) {
        if self.state.phase != FleetPhase::Progressing {
            return;
        }
        let Some(members) = self.plan.waves.get(self.state.wave) else {
            self.set_phase(FleetPhase::Completed, "every wave validated".into());
            return;
        };
        let decided = members.iter().all(|n| {
            let cluster = &self.state.clusters[n];
            matches!(
                cluster.status,
                ClusterStatus::Validated
                    | ClusterStatus::Skipped
                    | ClusterStatus::RolledBack
                    | ClusterStatus::Pinned
            ) && !cluster.aborted_on_error
        });
        if !decided {
            let errored: Vec<&str> = members
                .iter()
                .filter(|n| self.state.clusters[*n].aborted_on_error)
                .map(String::as_str)
                .collect();
            if !errored.is_empty() {
                self.state.message = format!(
                    "wave {} waits: {}",
                    self.state.wave + 1,
                    self.errored_message(&errored)
                );
            }
            if self.state.bake_started_at.take().is_some() {
                self.bake_ended(now, "a cluster is undecided again");
            }
            // A wave undecided again (a retry) runs its wave analysis anew once decided.
            if let Some(wave_run) = &mut self.state.wave_run
                && wave_run.wave == self.state.wave
                && !wave_run.settled
            {
                wave_run.run.terminate();
                wave_run.settled = true;
            }
            return;
        }
        // A wave passed before, still decided (the fleet came back to an earlier wave a
        // cluster joined): baked and analysed already.
        let passed = self.state.wave_completed_at[self.state.wave].is_some();
        if !passed {
            if self.state.bake_started_at.is_none() && self.plan.bake > 0 {
                let wave = self.state.wave + 1;
                self.events.push(
                    Some(now),
                    None,
                    Decision::BakeStarted {
                        wave,
                        bake_ms: self.plan.bake,
                    },
                    format!(
                        "{}: wave {wave} decided; baking for {} s",
                        self.plan.name,
                        self.plan.bake / 1000
                    ),
                );
            }
            let started = *self.state.bake_started_at.get_or_insert(now);
            if now - started < self.plan.bake as Millis {
                return;
            }
            if !self.wave_analysis(next, now, output) {
                return;
            }
            self.state.wave_completed_at[self.state.wave] = Some(now);
            let wave = self.state.wave + 1;
            if self.plan.bake > 0 {
                self.bake_ended(now, "baked");
            }
            let members = self.plan.waves[self.state.wave].clone();
            let message = format!(
                "{}: wave {wave} completed ({})",
                self.plan.name,
                members.join(", ")
            );
            self.events.push(
                Some(now),
                None,
                Decision::WaveCompleted {
                    wave,
                    clusters: members,
                },
                message,
            );
        }
        self.state.bake_started_at = None;
        self.state.wave += 1;
        if self.state.wave >= self.plan.waves.len() {
            self.set_phase(FleetPhase::Completed, "every wave validated".into());
        } else {
            self.start_clusters(now, next);
        }
    }
}

impl FleetMachine {
    /// The current wave's bake ended (`how`: baked, skipped, undecided again).
    fn bake_ended(&mut self, now: Millis, how: &str) {
        let wave = self.state.wave + 1;
        self.events.push(
            Some(now),
            None,
            Decision::BakeEnded { wave },
            format!("{}: wave {wave}'s bake ended: {how}", self.plan.name),
        );
    }

    /// The decisions made since the last tick's output (by a supersede, an adoption, a
    /// durable change recorded), numbered; a driver that stops takes them with this.
    pub fn flush_events(&mut self, now: Millis) -> Vec<FleetEvent> {
        self.take_events(now)
    }

    /// The decisions since the last output, numbered.
    fn take_events(&mut self, now: Millis) -> Vec<FleetEvent> {
        self.events.take(
            &self.plan.name,
            &self.state.revision,
            &mut self.state.event_seq,
            now,
        )
    }
}

/// What continues a cluster a human must decide on.
const CONTINUE: &str = "promote to accept, abort to roll back";

/// The last finished measurement's value of a metric, or `none`.
fn last_value(metric: &crate::analysis::run::MetricState) -> String {
    metric
        .measurements
        .iter()
        .rev()
        .find(|m| m.finished_at.is_some())
        .map_or_else(
            || "none".to_owned(),
            |m| {
                if m.value.is_empty() {
                    "empty".to_owned()
                } else {
                    m.value.clone()
                }
            },
        )
}

/// Why a cluster stopped on an Inconclusive run: the metric, its last value and message, and
/// the commands that continue it.
fn inconclusive_reason(runs: &RunMap) -> String {
    let metric = runs
        .values()
        .filter(|r| r.phase == AnalysisPhase::Inconclusive)
        .flat_map(|r| r.metrics.iter())
        .find(|m| !m.dry_run && m.phase == AnalysisPhase::Inconclusive);
    match metric {
        Some(m) => {
            let message = m
                .measurements
                .iter()
                .rev()
                .find(|x| x.finished_at.is_some())
                .map_or("", |x| x.message.as_str());
            format!(
                "inconclusive: metric {:?} = {}{}; {CONTINUE}",
                m.name,
                last_value(m),
                if message.is_empty() {
                    String::new()
                } else {
                    format!(" ({message})")
                }
            )
        }
        None => format!("inconclusive: an analysis run was inconclusive; {CONTINUE}"),
    }
}

/// The failure that decided a run: its first wet metric that failed, errored or went
/// inconclusive, with its last value and the messages.
fn run_failure(run: &Run) -> Option<Failure> {
    if !matches!(
        run.phase,
        AnalysisPhase::Failed | AnalysisPhase::Error | AnalysisPhase::Inconclusive
    ) {
        return None;
    }
    let (metric, last) = run
        .metrics
        .iter()
        .find(|m| {
            !m.dry_run
                && matches!(
                    m.phase,
                    AnalysisPhase::Failed | AnalysisPhase::Error | AnalysisPhase::Inconclusive
                )
        })
        .map(|m| {
            (
                m,
                m.measurements
                    .iter()
                    .rev()
                    .find(|x| x.finished_at.is_some()),
            )
        })?;
    let message = [
        run.message.as_str(),
        last.map_or("", |x| x.message.as_str()),
    ]
    .iter()
    .filter(|t| !t.is_empty())
    .copied()
    .collect::<Vec<_>>()
    .join(": ");
    Some(Failure {
        metric: metric.name.clone(),
        value: last.map(|x| x.value.clone()).unwrap_or_default(),
        message,
    })
}

/// A spec borrowed from the caller or shared from the machine's baselines.
enum SpecRef<'r> {
    Borrowed(&'r Rollout),
    Shared(Arc<Rollout>),
}

impl std::ops::Deref for SpecRef<'_> {
    type Target = Rollout;

    fn deref(&self) -> &Rollout {
        match self {
            SpecRef::Borrowed(r) => r,
            SpecRef::Shared(r) => r,
        }
    }
}
