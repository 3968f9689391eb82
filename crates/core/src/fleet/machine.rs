//! The fleet machine: its state and derived plans, and the tick that drives every cluster's
//! rollout engine and analysis runs, then the wave gate. Each job of the machine is a child
//! module with its own `impl FleetMachine` block:
//!
//! - `cluster`: one cluster's tick; `validation`: its verdict (validated on evidence,
//!   failed, paused for a human);
//! - `waves`: starting clusters, the wave gate, bakes, wave-level analysis, widened rollbacks;
//! - `lockstep`: the barrier of a lockstep wave before each step, and its release;
//! - `overlays`: per-cluster overlays and pins; `revisions`: a new desired spec (supersede,
//!   settle, adoption); `durable`: the durable change Git needs after a failure;
//! - `operator`: operator commands, accepted or refused.

mod cluster;
mod durable;
mod lockstep;
mod operator;
mod overlays;
mod revisions;
mod validation;
mod waves;

use std::collections::BTreeMap;
use std::sync::Arc;

use super::commands::FleetCommand;
use super::event::{Decision, FleetEvent, Pending};
use super::overlay::ClusterOverlay;
use super::plan::{FleetPlan, fleet_revision, plan_key};
use super::specs::FleetSpecs;
use super::state::{ClusterState, ClusterStatus, FleetPhase, FleetState, PausedFor};
use super::tick::{ClusterObservation, ClusterOutcome, FleetOutput, Revisions, wave_of_key};
use crate::analysis::plan::{RunPlan, resolve};
use crate::analysis::run::Run;
use crate::rollout::{self, Command, RunKey};
use crate::spec::rollout::Rollout;
use crate::time::Millis;

pub use lockstep::{BarrierStatus, barrier_steps};

/// The fleet machine: state plus the plans it derives (which are not serialized).
pub struct FleetMachine {
    /// The plan.
    pub(crate) plan: FleetPlan,
    /// The state.
    pub(crate) state: FleetState,
    /// Decisions made since the last tick's output.
    pub(crate) events: Pending,
    /// Each cluster's run plans, by run: at the cluster's place in `names` (a tick reaches a
    /// cluster's plans by its place, not by a lookup of its name).
    run_plans: Vec<Vec<(RunKey, Arc<RunPlan>)>>,
    /// Plans by content ([`plan_key`]): clusters whose templates read none of their own
    /// arguments share one plan.
    plan_pool: BTreeMap<String, Arc<RunPlan>>,
    /// The previous and the new revision's pod-template hashes.
    hashes: (Arc<str>, Arc<str>),
    /// Baseline specs by pod-template hash.
    known: BTreeMap<String, (Arc<str>, Arc<Rollout>)>,
    /// The clusters' names, in order (one list for every tick).
    names: Arc<[String]>,
    /// Each wave's members by their places in the state's clusters (and in `names`).
    wave_places: Vec<Vec<usize>>,
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
            wave_places: Vec::new(),
            plan: plan.clone(),
            state,
            events: Pending::default(),
            run_plans: Vec::new(),
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

    /// The Secrets `cluster`'s analysis arguments read, as read in that cluster (Kubernetes):
    /// its runs resolve them first. A change drops the cluster's derived run plans, so its next
    /// runs (and measurements) take the new values; the same values change nothing.
    pub fn set_cluster_secrets(
        &mut self,
        cluster: &str,
        secrets: BTreeMap<(String, String), String>,
    ) {
        if self.plan.cluster_secrets.get(cluster) == Some(&secrets) {
            return;
        }
        self.plan
            .cluster_secrets
            .insert(cluster.to_owned(), secrets);
        if let Ok(place) = self.state.clusters.place(cluster) {
            self.run_plans[place].clear();
        }
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
        // The plan's clusters, each with its state (NotStarted for a joiner) and its run plans
        // (which are at the same places as the states): one merge pass.
        let plans = std::mem::take(&mut self.run_plans)
            .into_iter()
            .chain(std::iter::repeat_with(Vec::new));
        let mut before = std::mem::take(&mut self.state.clusters)
            .into_iter()
            .zip(plans)
            .peekable();
        let (clusters, run_plans): (Vec<_>, Vec<_>) = plan
            .clusters
            .keys()
            .map(|name| {
                while before.next_if(|((old, _), _)| old < name).is_some() {}
                let (state, plans) = before
                    .next_if(|((old, _), _)| old == name)
                    .map(|((_, state), plans)| (state, plans))
                    .unwrap_or_default();
                ((name.clone(), state), plans)
            })
            .unzip();
        drop(before);
        self.state.clusters = clusters.into_iter().collect();
        self.run_plans = run_plans;
        self.names = self.state.clusters.keys().cloned().collect();
        self.wave_places = plan
            .waves
            .iter()
            .map(|members| {
                members
                    .iter()
                    .filter_map(|name| self.state.clusters.place(name).ok())
                    .collect()
            })
            .collect();
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
    fn reopen_waves(&mut self) {
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

    /// The plan of the run `run` of the cluster at `place` (in `names`, as in the state's
    /// clusters): derived once, then kept until the cluster's inputs change.
    fn run_plan_at(
        &mut self,
        place: usize,
        rollout: &Rollout,
        cluster: &str,
        run: RunKey,
    ) -> Option<Arc<RunPlan>> {
        if let Some((_, plan)) = self
            .run_plans
            .get(place)
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
        if let Some(plans) = self.run_plans.get_mut(place) {
            plans.push((run, plan.clone()));
        }
        Some(plan)
    }

    /// The spec a cluster runs now, and its template hash.
    fn spec_for<'r>(&self, name: &str, revisions: &Revisions<'r>) -> (SpecRef<'r>, Arc<str>) {
        self.spec_of(name, &self.state.clusters[name], revisions)
    }

    /// [`Self::spec_for`] of a cluster's state at hand.
    fn spec_of<'r>(
        &self,
        name: &str,
        cluster: &ClusterState,
        revisions: &Revisions<'r>,
    ) -> (SpecRef<'r>, Arc<str>) {
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
                // Waiting at a lockstep barrier is being mid-update too.
                ClusterStatus::Progressing | ClusterStatus::Paused
                    if cluster.status == ClusterStatus::Progressing
                        || cluster.paused_for == Some(PausedFor::Barrier) =>
                {
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
    fn set_phase(&mut self, phase: FleetPhase, message: String) {
        let changed = self.state.phase != phase;
        self.state.phase = phase;
        self.state.message = message;
        if changed {
            self.phase_event();
        }
    }

    /// The fleet's phase changed: says so, with the failure that decided it, if one did.
    fn phase_event(&mut self) {
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
        self.handle_commands(commands, revisions.next, now);
        self.prepare_overlays(revisions);
        self.apply_pins(now);
        // Measurement outcomes into their runs.
        for outcome in outcomes {
            if let Some(wave) = wave_of_key(outcome.run) {
                self.wave_outcome(wave, outcome, revisions.next, now);
                continue;
            }
            // The plan is derived again when the machine was restored from persisted state.
            let Ok(place) = self.state.clusters.place(&outcome.cluster) else {
                continue;
            };
            let (spec_ref, _) = self.spec_of(
                &outcome.cluster,
                self.state.clusters.at(place).expect("known cluster").1,
                revisions,
            );
            let spec: &Rollout = &spec_ref;
            let Some(plan) = self.run_plan_at(place, spec, &outcome.cluster, outcome.run) else {
                continue;
            };
            if let Some(run) = self
                .state
                .clusters
                .at_mut(place)
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
        // A cluster's place in `names` is its place in the state's clusters (both in name order,
        // both set by `fit`).
        debug_assert_eq!(self.names.len(), self.state.clusters.len());
        let names = self.names.clone();
        let mut reported = observations.iter().peekable();
        for (place, name) in names.iter().enumerate() {
            static UNREPORTED: std::sync::OnceLock<ClusterObservation> = std::sync::OnceLock::new();
            while reported
                .next_if(|(k, _)| k.as_str() < name.as_str())
                .is_some()
            {}
            let observation = match reported.peek() {
                Some((k, observation)) if *k == name => observation,
                _ => UNREPORTED.get_or_init(ClusterObservation::default),
            };
            self.tick_cluster(place, name, revisions, observation, now, &mut output);
        }
        self.lockstep(revisions.next, now);
        self.gate(revisions.next, now, &mut output);
        // Start the clusters the wave gate allows; they take the new spec from the next tick.
        self.start_clusters(now, revisions.next);
        output.events = self.take_events(now);
        output
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
