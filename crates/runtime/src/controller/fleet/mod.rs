//! One fleet rollout under the daemon: the core's fleet machine fed with each cluster's
//! observations and commands and with measurement outcomes; its decisions turned into audit
//! entries and notifications ([`decisions`]), and each cluster's desired state handed to its
//! backend ([`cluster`]) through the core's cluster-backend port.
//!
//! # Isolation
//! Each cluster has its own poller and its own worker; the tick never awaits either. A slow or
//! dead cluster only makes its own observation stale (the machine then sees it unreachable), and
//! its own desired state waits, retried with backoff.

mod cluster;
mod decisions;
mod follow;
mod images;
mod intent;
mod membership;
pub use membership::Replan;
mod repair;
mod views;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_core::analysis::{Millis, Outcome};
use flotilla_core::backend::{
    BackendError, ClusterCommand, ClusterDesired, ClusterNotice, ClusterObserved, ClusterVerb,
    image_version, missing,
};
use flotilla_core::fleet::{
    ClusterMeasurement, ClusterObservation, ClusterOutcome, Decision, FleetCommand, FleetMachine,
    FleetPlan, FleetSpecs, FleetState,
};
use flotilla_core::rollout::template_hash;
use flotilla_providers::Providers;
use tokio::sync::{Notify, Semaphore, mpsc};

use super::backends::Backends;
use super::record::{
    AuditEntry, AuditKind, FleetRecord, Notification, OperatorCommand, QueuedCommand,
};
use cluster::{ClusterHandle, Routed};
use decisions::{audit_entry, describe_command, notifications_of};
use images::{first_image, with_image, with_tag};
use repair::Drift;

pub use super::record::Desired;

/// Why a fleet rollout cannot be driven.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct FleetError(pub String);

/// What one tick produced, to be persisted before [`FleetController::dispatch`].
#[derive(Debug, Default)]
pub struct TickOutput {
    /// Commands applied.
    pub consumed: Vec<u64>,
    /// Decisions.
    pub audit: Vec<AuditEntry>,
    /// Notifications.
    pub notifications: Vec<Notification>,
    /// Measurements to take.
    measurements: Vec<ClusterMeasurement>,
}

/// One fleet rollout under the daemon.
pub struct FleetController {
    /// The durable record (kept in step with the machine at every tick).
    pub record: FleetRecord,
    machine: FleetMachine,
    clusters: BTreeMap<String, ClusterHandle>,
    providers: Providers,
    /// Every known pod-template hash's first image.
    images: BTreeMap<String, String>,
    outcomes_tx: mpsc::UnboundedSender<ClusterOutcome>,
    outcomes_rx: mpsc::UnboundedReceiver<ClusterOutcome>,
    measure_limit: Arc<Semaphore>,
    /// Wakes the loop for an answer that may change a decision.
    urgent: Arc<Notify>,
    stale_after: Duration,
    observed: BTreeMap<String, (bool, Option<(i32, i32)>)>,
    /// Clusters whose backend refused their desired state (forbidden, invalid), with the
    /// condition said in the audit log once.
    refused: BTreeMap<String, String>,
    /// Errors of the latest desired state the source gave (the fleet runs its last valid one).
    invalid: Vec<String>,
    /// Clusters being repaired (held until an observation matches what was decided).
    repairing: std::collections::BTreeSet<String>,
    /// Decisions made between ticks (the desired state refused or valid again), committed with
    /// the next tick.
    pending: (Vec<AuditEntry>, Vec<Notification>),
    /// Correct drift (else report it only).
    correct_drift: bool,
    drift: BTreeMap<String, Drift>,
    /// Clusters whose Rollout spec is owned in the cluster (`rolloutSource: cluster`): the
    /// fleet's revision is read from them ([`follow`]).
    spec_sources: std::collections::BTreeSet<String>,
    /// The spec each of them last held.
    held_specs: BTreeMap<String, follow::HeldSpec>,
    /// Why their specs give no revision (they disagree, one cannot be read), while they do.
    disagreement: Option<String>,
    /// Why the fleet waits without ticking (its hub's API server does not answer), while it does.
    pub waiting: Option<String>,
    /// Each reported run's spec, by cluster and run (computed once).
    run_specs: BTreeMap<(String, flotilla_core::rollout::RunKey), serde_json::Value>,
}

/// What every fleet's controller is wired to: the metric providers, the tick, the drift policy
/// and the clusters' backends.
#[derive(Clone)]
pub struct Wiring {
    /// The metric providers.
    pub providers: Providers,
    /// How often the engines run.
    pub tick: Duration,
    /// Re-assert lingering drift every 10 s (`git.correctDrift`).
    pub correct_drift: bool,
    /// Each cluster's backend.
    pub backends: Backends,
    /// Notified when a measurement's answer may change a decision
    /// ([`ClusterMeasurement::is_urgent`]): the loop then ticks at once instead of at its next
    /// tick, so that a failing canary loses its traffic within milliseconds of the answer.
    pub urgent: Arc<Notify>,
}

impl FleetController {
    /// A controller for `desired`, resumed from `stored` when the store has its record.
    ///
    /// A Rollout changed in the manifests since the record was written is a new fleet revision
    /// (the supersede rule); an unchanged one keeps what `set image` or `undo` set.
    pub fn new(
        desired: &Desired,
        stored: Option<FleetRecord>,
        wiring: &Wiring,
    ) -> Result<FleetController, FleetError> {
        let (tick, correct_drift) = (wiring.tick, wiring.correct_drift);
        let providers = wiring.providers.clone();
        let mut plan =
            FleetPlan::resolve(&desired.fleet, &desired.fleet_rollout, &desired.templates)
                .map_err(|e| FleetError(e.0))?;
        plan.secrets = desired.secrets.clone();
        let name = plan.name.clone();
        let source_hash = template_hash(&desired.rollout);
        let (mut record, resumed) = match stored {
            Some(record) => (record, true),
            None => (
                FleetRecord {
                    name: name.clone(),
                    specs: FleetSpecs::new(desired.rollout.clone()),
                    source_hash: source_hash.clone(),
                    state: FleetState::default(),
                    reverted: None,
                    pinned: Default::default(),
                    git_status: None,
                    desired: None,
                    adopting: plan.clusters.keys().cloned().collect(),
                    heard: Default::default(),
                },
                false,
            ),
        };
        // The last valid desired state is kept: the fleet runs it while its manifests are
        // invalid (per-fleet isolation), also after a restart.
        record.desired = Some(Box::new(desired.clone()));
        // A cluster new to the plan since the record was written is adopted from what it
        // runs, as at a first start (the machine fits its state to the plan).
        if resumed {
            for cluster in plan.clusters.keys() {
                if !record.state.clusters.contains_key(cluster) {
                    record.adopting.insert(cluster.clone());
                }
            }
        }
        record.adopting.retain(|c| plan.clusters.contains_key(c));
        let mut machine = if resumed {
            FleetMachine::resume(plan.clone(), &record.specs, record.state.clone())
        } else {
            FleetMachine::new(plan.clone(), &record.specs.revisions(), None)
        };
        machine.set_overlays(desired.overlays.clone());
        // Every spec the record knows: an image a cluster runs.
        let specs = &record.specs;
        let images = specs
            .history
            .iter()
            .chain([&specs.previous, &specs.next])
            .map(|spec| (template_hash(spec), first_image(spec)))
            .collect();
        let mut controller_clusters = BTreeMap::new();
        let mut spec_sources = std::collections::BTreeSet::new();
        let (outcomes_tx, outcomes_rx) = mpsc::unbounded_channel();
        for cluster in &desired.fleet.spec.clusters {
            if !plan.clusters.contains_key(&cluster.name) {
                continue;
            }
            let target = super::backends::Target {
                rollout: desired.fleet_rollout.spec.rollout.clone(),
                rollout_source: desired.fleet_rollout.spec.rollout_source,
            };
            if super::backends::spec_in_cluster(cluster, &target) {
                spec_sources.insert(cluster.name.clone());
            }
            let backend = connect(wiring, cluster, &target, &desired.rollout)?;
            controller_clusters.insert(
                cluster.name.clone(),
                ClusterHandle::spawn(cluster.name.clone(), backend, tick),
            );
        }
        // With specs owned in the clusters, an edit of the manifests' copy is no revision.
        let changed = source_hash != record.source_hash && spec_sources.is_empty();
        record.source_hash = source_hash;
        record.state = machine.state().clone();
        let mut controller = FleetController {
            record,
            machine,
            clusters: controller_clusters,
            providers,
            images,
            outcomes_tx,
            outcomes_rx,
            measure_limit: Arc::new(Semaphore::new(64)),
            urgent: wiring.urgent.clone(),
            stale_after: (tick * 3).max(Duration::from_secs(3)),
            observed: BTreeMap::new(),
            refused: BTreeMap::new(),
            invalid: Vec::new(),
            repairing: Default::default(),
            pending: Default::default(),
            correct_drift,
            drift: BTreeMap::new(),
            spec_sources,
            held_specs: BTreeMap::new(),
            disagreement: None,
            waiting: None,
            run_specs: BTreeMap::new(),
        };
        if changed {
            controller.change_spec(desired.rollout.clone());
            controller.record.state = controller.machine.state().clone();
        }
        if resumed {
            controller.reassert();
        }
        Ok(controller)
    }

    /// The FleetRollout's name.
    pub fn name(&self) -> &str {
        &self.record.name
    }

    /// After a restart: every cluster's last intent again (all idempotent), since the process
    /// cannot know which of its last desired states took effect.
    fn reassert(&mut self) {
        let names: Vec<String> = self.machine.state().clusters.keys().cloned().collect();
        for name in names {
            self.reassert_cluster(&name);
        }
    }

    /// One cluster's last intent again, even if unchanged (another writer may have changed the
    /// cluster since).
    fn reassert_cluster(&mut self, name: &str) {
        if let (Some(desired), Some(handle)) = (self.desired_of(name), self.clusters.get(name)) {
            handle.force(desired);
        }
    }

    /// The image of every spec the machine may run (overlaid specs included).
    fn learn_images(&mut self) {
        for (hash, spec) in self.machine.known_specs() {
            if !self.images.contains_key(hash) {
                self.images.insert(hash.to_owned(), first_image(spec));
            }
        }
    }

    /// The version a pod-template hash runs, when known.
    fn version_of(&self, hash: &str) -> Option<String> {
        self.images.get(hash).map(|image| image_version(image))
    }

    /// The desired state of a cluster: its engine's state, with the spec it runs (overlay, pin
    /// or baseline).
    fn desired_of(&mut self, name: &str) -> Option<ClusterDesired> {
        self.learn_images();
        let revisions = self.record.specs.revisions();
        let spec = self.machine.cluster_spec(name, &revisions)?;
        let cluster = self.machine.state().clusters.get(name)?;
        let mut desired = ClusterDesired::of(&cluster.rollout, &spec, &self.images);
        if self
            .clusters
            .get(name)
            .is_some_and(|handle| handle.backend.capabilities().templates)
        {
            // A backend that makes workloads from pod templates (Kubernetes) gets each
            // revision's template and the Rollout it applies.
            for revision in desired.revisions.values_mut() {
                revision.template = self
                    .spec_of_hash(&revision.hash)
                    .and_then(|s| serde_json::to_value(&s.spec.template).ok());
            }
            // The Rollout applied is the one of the engine's current revision: an aborted
            // cluster keeps the spec it aborted (Argo's abort: Degraded on the new spec, the
            // stable serving) until it is retried or given another revision.
            let current = cluster
                .rollout
                .current
                .map(|c| cluster.rollout.hash(c))
                .and_then(|hash| self.spec_of_hash(&hash));
            desired.rollout = serde_json::to_value(current.unwrap_or(&spec)).ok();
            // Its clusters hold Secrets: the templates' `secretKeyRef`s are read there.
            desired.secret_refs = self.machine.plan().secret_refs();
        }
        Some(desired)
    }

    /// A spec the fleet knows by its pod-template hash (the machine's, or the record's).
    fn spec_of_hash(&self, hash: &str) -> Option<&flotilla_core::spec::rollout::Rollout> {
        if let Some((_, spec)) = self.machine.known_specs().find(|(h, _)| *h == hash) {
            return Some(spec);
        }
        let specs = &self.record.specs;
        specs
            .history
            .iter()
            .chain([&specs.previous, &specs.next])
            .find(|spec| template_hash(spec) == hash)
    }

    /// A cluster's rollout analysis runs (the fleet's wave analyses are not the Rollout's), each
    /// with its spec as an AnalysisRun's, for a backend that reports them in the cluster.
    fn runs_of(&mut self, name: &str) -> Vec<flotilla_core::backend::DesiredRun> {
        use flotilla_core::rollout::AnalysisSlot;
        let Some(cluster) = self.machine.state().clusters.get(name) else {
            return Vec::new();
        };
        let runs: Vec<_> = cluster
            .runs
            .iter()
            .filter(|(key, _)| !matches!(key.slot, AnalysisSlot::Wave(_)))
            .map(|(key, run)| (*key, run.clone(), cluster.rollout.hash(key.revision)))
            .collect();
        let mut out = Vec::with_capacity(runs.len());
        for (key, run, hash) in runs {
            let cache = (name.to_owned(), key);
            let spec = match self.run_specs.get(&cache) {
                Some(spec) => spec.clone(),
                None => {
                    let spec = self
                        .spec_of_hash(&hash)
                        .and_then(|rollout| {
                            self.machine.plan().run_plan_inputs(rollout, name, key).ok()
                        })
                        .map(|(template, values)| {
                            let args: Vec<serde_json::Value> = values
                                .iter()
                                .map(|(arg, value)| {
                                    if value.secret {
                                        serde_json::json!({"name": arg})
                                    } else {
                                        serde_json::json!({"name": arg, "value": value.value})
                                    }
                                })
                                .collect();
                            serde_json::json!({"metrics": template.metrics, "args": args})
                        });
                    // Kept once made; a spec not made yet (its revision's Rollout unknown) is
                    // tried again at the next tick.
                    match spec {
                        Some(spec) => {
                            self.run_specs.insert(cache, spec.clone());
                            spec
                        }
                        None => serde_json::json!({"metrics": []}),
                    }
                }
            };
            out.push(flotilla_core::backend::DesiredRun { key, spec, run });
        }
        // Runs the machine no longer keeps are forgotten here too.
        self.run_specs
            .retain(|(cluster, key), _| cluster != name || out.iter().any(|r| r.key == *key));
        out
    }

    /// One tick at `now` with the operator commands queued for this fleet.
    pub fn tick(&mut self, commands: &[QueuedCommand], now: Millis) -> TickOutput {
        let mut out = TickOutput::default();
        let (audit, notifications) = std::mem::take(&mut self.pending);
        out.audit = audit;
        out.notifications = notifications;
        // Fleet commands go to the machine, which accepts or refuses each (its events, in
        // order, carry the operator); the spec changes are the daemon's own.
        let mut fleet_commands = Vec::new();
        let mut operators = std::collections::VecDeque::new();
        // Commands issued in a cluster come first: they were given before this tick.
        self.cluster_commands(&mut fleet_commands, &mut operators);
        for queued in commands {
            out.consumed.push(queued.id);
            let fleet_command = match &queued.command {
                OperatorCommand::Pause => Some(FleetCommand::Pause),
                OperatorCommand::Resume => Some(FleetCommand::Resume),
                OperatorCommand::Retry => Some(FleetCommand::Retry),
                OperatorCommand::Abort { cluster } => Some(FleetCommand::Abort {
                    cluster: cluster.clone(),
                }),
                OperatorCommand::Promote { wave, full } => Some(FleetCommand::Promote {
                    wave: *wave,
                    full: *full,
                    cluster: None,
                }),
                OperatorCommand::SetImage { .. } | OperatorCommand::Undo { .. } => None,
            };
            if let Some(command) = fleet_command {
                fleet_commands.push(command);
                operators.push_back((
                    queued.operator.clone(),
                    describe_command(&queued.command),
                    None,
                ));
                continue;
            }
            let mut message = describe_command(&queued.command);
            let spec = match &queued.command {
                // rolloutSource: cluster: the spec is Argo CD's (Git's), not the daemon's.
                _ if !self.spec_sources.is_empty() => Err(
                    "the Rollout's spec is read from the clusters (rolloutSource: cluster): change it where Argo CD or Flux takes it from (Git)"
                        .to_owned(),
                ),
                OperatorCommand::SetImage { container, image } => {
                    with_image(&self.record.specs.next, container.as_deref(), image)
                }
                OperatorCommand::Undo { to_revision } => self
                    .record
                    .specs
                    .undo_target(*to_revision)
                    .ok_or_else(|| "no such revision".to_owned()),
                _ => unreachable!("a fleet command"),
            };
            match spec {
                Ok(spec) => self.change_spec(spec),
                Err(e) => message = format!("{message}: refused: {e}"),
            }
            let mut entry = AuditEntry::new(
                now,
                &self.record.name,
                &self.machine.state().revision,
                AuditKind::Command,
                None,
                message,
            );
            entry.operator = Some(queued.operator.clone());
            out.audit.push(entry);
        }
        // Observations: each cluster's latest, if fresh, and when it was taken.
        let mut fresh: BTreeMap<String, (Instant, ClusterObserved)> = BTreeMap::new();
        let mut stable_versions = BTreeMap::new();
        for (name, handle) in &self.clusters {
            let latest = handle.latest.lock().expect("observation lock").clone();
            match latest {
                Some((at, Ok(observed))) if at.elapsed() < self.stale_after => {
                    let weights = observed.weights.map(|w| (w.canary, w.stable));
                    self.observed.insert(name.clone(), (true, weights));
                    if let Some(version) = &observed.serving {
                        stable_versions.insert(name.clone(), version.clone());
                    }
                    fresh.insert(name.clone(), (at, observed));
                }
                _ => {
                    let weights = self.observed.get(name).and_then(|o| o.1);
                    self.observed.insert(name.clone(), (false, weights));
                }
            }
        }
        // Specs owned in the clusters: their agreement is the fleet's revision.
        self.follow_clusters(&fresh, now, &mut out);
        // Secrets read in the clusters that hold them, for those clusters' runs.
        for (name, (_, observed)) in &fresh {
            if !observed.secrets.is_empty() {
                self.machine
                    .set_cluster_secrets(name, observed.secrets.clone());
            }
        }
        // First start: each cluster is adopted from what it runs, before its first reconcile.
        let adopting: Vec<String> = self.record.adopting.iter().cloned().collect();
        for name in adopting {
            if let Some((_, observed)) = fresh.get(&name) {
                let serving = observed.serving.clone();
                self.adopt(&name, serving);
            }
        }
        // Level-triggered: a cluster that does not run what was decided for it is repaired, and
        // held meanwhile.
        self.repair(&fresh, now, &mut out);
        // A cluster whose backend refused its desired state is held, and says why once.
        self.refusals(now, &mut out);
        let mut observations = BTreeMap::new();
        for name in self.clusters.keys() {
            let observation = match fresh.remove(name) {
                Some((_, observed)) if !self.record.adopting.contains(name) => ClusterObservation {
                    reachable: true,
                    observed: observed.engine_view(),
                    diverged: self.repairing.contains(name) || self.refused.contains_key(name),
                },
                _ => ClusterObservation::default(),
            };
            observations.insert(name.clone(), observation);
        }
        let mut outcomes = Vec::new();
        while let Ok(outcome) = self.outcomes_rx.try_recv() {
            outcomes.push(outcome);
        }
        let output = self.machine.tick(
            &self.record.specs.revisions(),
            &observations,
            outcomes,
            &fleet_commands,
            now,
        );
        out.measurements = output.measurements;
        self.learn_images();
        for event in &output.events {
            let mut entry = audit_entry(&self.record.name, event);
            // A command's entry says it as the operator gave it, with who gave it.
            match &event.decision {
                Decision::CommandAccepted { .. } | Decision::CommandRefused { .. } => {
                    if let Some((operator, said, issued_in)) = operators.pop_front() {
                        entry.operator = Some(operator);
                        entry.message = match &event.decision {
                            Decision::CommandRefused { why, .. } => {
                                format!("{said}: refused: {why}")
                            }
                            _ => said,
                        };
                        // Refused where it was issued: said there too (an Event on the
                        // cluster's Rollout), since that is where its issuer looks.
                        if let (Decision::CommandRefused { .. }, Some(cluster)) =
                            (&event.decision, issued_in)
                            && let Some(handle) = self.clusters.get(&cluster)
                        {
                            handle.notify(ClusterNotice {
                                warning: true,
                                reason: "FleetCommandRefused".to_owned(),
                                message: format!(
                                    "fleet rollout {}: {}",
                                    self.record.name, entry.message
                                ),
                            });
                        }
                    }
                }
                _ => {}
            }
            out.audit.push(entry);
            out.notifications.extend(notifications_of(
                &self.record.name,
                &self.record.specs,
                event,
            ));
        }
        self.check_drift(&stable_versions, now, &mut out);
        self.record.state = self.machine.state().clone();
        out
    }

    /// First start: `name` was observed running `running` (its stable subset's version, or
    /// nothing) before the machine ever reconciled it. A cluster already on the manifest's
    /// version is adopted as it is; one on another version keeps it as its baseline and gets the
    /// manifest's revision through its wave, on evidence; only a cluster that runs nothing gets
    /// it directly (Argo's first deployment).
    fn adopt(&mut self, name: &str, running: Option<String>) {
        let revisions = self.record.specs.revisions();
        let Some(spec) = self.machine.cluster_spec(name, &revisions) else {
            return;
        };
        let image = first_image(&spec);
        let target = image_version(&image);
        let (baseline, message) = match running {
            None => (
                spec,
                format!("{name} runs nothing yet: it gets {target} directly (a first deployment)"),
            ),
            Some(version) if version == target => (
                spec,
                format!("{name} already runs {version}: adopted as it is"),
            ),
            Some(version) => {
                let old_image = with_tag(&image, &version);
                match with_image(&spec, None, &old_image) {
                    Ok(old) => (
                        old,
                        format!(
                            "{name} runs {version}: adopted on it; {target} reaches it in its wave, on evidence"
                        ),
                    ),
                    Err(e) => {
                        tracing::error!(fleet = %self.record.name, cluster = %name, "cannot adopt: {e}");
                        return;
                    }
                }
            }
        };
        tracing::info!(fleet = %self.record.name, cluster = %name, "{message}");
        if !self.machine.adopt(name, &baseline, message) {
            // Reconciled already (a record of an earlier release): nothing to adopt.
            self.record.adopting.remove(name);
            return;
        }
        let hash = template_hash(&baseline);
        self.images.insert(hash, first_image(&baseline));
        self.machine.keep_spec(&mut self.record.specs, baseline);
        self.record.adopting.remove(name);
    }

    /// Commands issued in the clusters since the last tick, as fleet commands for their
    /// cluster, with their origin as the operator (each applied once, by its id).
    fn cluster_commands(
        &mut self,
        fleet_commands: &mut Vec<FleetCommand>,
        operators: &mut std::collections::VecDeque<(String, String, Option<String>)>,
    ) {
        let mut heard: Vec<(String, ClusterCommand)> = Vec::new();
        for (name, handle) in &self.clusters {
            heard.extend(
                handle
                    .take_commands()
                    .into_iter()
                    .map(|c| (name.clone(), c)),
            );
        }
        for (cluster, command) in heard {
            // Applied once, also across a restart: the ids go into the record this tick
            // persists.
            let id = format!("{cluster}/{}", command.id);
            if self.record.heard.contains(&id) {
                continue;
            }
            self.record.heard.push_back(id);
            while self.record.heard.len() > super::record::HEARD_KEPT {
                self.record.heard.pop_front();
            }
            let (fleet_command, said) = match command.verb {
                ClusterVerb::Abort => (
                    FleetCommand::Abort {
                        cluster: Some(cluster.clone()),
                    },
                    format!("abort {cluster}"),
                ),
                ClusterVerb::Promote { full } => (
                    FleetCommand::Promote {
                        wave: None,
                        full,
                        cluster: Some(cluster.clone()),
                    },
                    format!("promote {cluster}{}", if full { " --full" } else { "" }),
                ),
                ClusterVerb::Retry => (FleetCommand::Retry, "retry".to_owned()),
                ClusterVerb::Pause => (
                    FleetCommand::PauseCluster {
                        cluster: cluster.clone(),
                    },
                    format!("pause {cluster}"),
                ),
                ClusterVerb::Resume => (
                    FleetCommand::ResumeCluster {
                        cluster: cluster.clone(),
                    },
                    format!("resume {cluster}"),
                ),
            };
            tracing::info!(fleet = %self.record.name, %cluster, origin = %command.origin, "{said}: issued in the cluster");
            fleet_commands.push(fleet_command);
            operators.push_back((
                format!("{cluster}: {}", command.origin),
                format!("{said} (issued in cluster {cluster})"),
                Some(cluster),
            ));
        }
    }

    /// Each cluster whose backend refused its desired state (forbidden, invalid) is recorded
    /// once with the condition naming what was refused; one accepted again is recorded too.
    fn refusals(&mut self, now: Millis, out: &mut TickOutput) {
        let revision = self.machine.state().revision.clone();
        for (name, handle) in &self.clusters {
            // Refused by `ensure`, or by `observe` for a reason no retry mends (a kubeconfig
            // that cannot be used, a permission lacking): held, said once.
            let refused: Option<BackendError> = handle
                .refused
                .lock()
                .expect("refused lock")
                .clone()
                .or_else(|| match &*handle.latest.lock().expect("observation lock") {
                    Some((_, Err(error))) if !error.is_transient() => Some(error.clone()),
                    _ => None,
                });
            let said = self.refused.get(name).cloned();
            let message = match (&refused, said) {
                (Some(error), said) if said.as_deref() != Some(&error.condition()) => {
                    self.refused.insert(name.clone(), error.condition());
                    format!(
                        "{name}: the cluster refused its desired state: {}; held until it accepts it",
                        error.condition()
                    )
                }
                (None, Some(_)) => {
                    self.refused.remove(name);
                    format!("{name}: the cluster accepts its desired state again")
                }
                _ => continue,
            };
            tracing::warn!(fleet = %self.record.name, cluster = %name, "{message}");
            out.audit.push(AuditEntry::new(
                now,
                &self.record.name,
                &revision,
                AuditKind::Repair,
                Some(name),
                message,
            ));
        }
    }

    /// Hands each cluster its desired state (level-triggered: only a changed one is sent) and
    /// starts the tick's measurements. Call only after the tick was persisted.
    pub fn dispatch(&mut self, out: TickOutput) {
        let names: Vec<String> = self.clusters.keys().cloned().collect();
        for name in names {
            if self.record.adopting.contains(&name) {
                continue;
            }
            if let (Some(desired), Some(handle)) =
                (self.desired_of(&name), self.clusters.get(&name))
            {
                handle.ensure(desired);
            }
            if self
                .clusters
                .get(&name)
                .is_some_and(|h| h.backend.capabilities().templates)
            {
                let runs = self.runs_of(&name);
                if let Some(handle) = self.clusters.get(&name) {
                    handle.report_runs(runs);
                }
            }
        }
        for measurement in out.measurements {
            // A wave analysis measures the wave, not one cluster: only non-builtin providers.
            let wave = measurement.wave().is_some();
            let handle = self.clusters.get(&measurement.cluster);
            if handle.is_none() && !wave {
                continue;
            }
            let backend = handle.map(|h| h.backend.clone());
            let providers = self.providers.clone();
            let tx = self.outcomes_tx.clone();
            let limit = self.measure_limit.clone();
            let urgent = self.urgent.clone();
            tokio::spawn(async move {
                let _permit = limit.acquire_owned().await;
                let request = &measurement.request;
                let routed = Routed {
                    backend: backend.as_deref(),
                    providers: &providers,
                };
                let measure = flotilla_core::analysis::compare::measure(&routed, request);
                let outcome = tokio::time::timeout(Duration::from_secs(60), measure)
                    .await
                    .unwrap_or_else(|_| {
                        Outcome::Error(format!(
                            "metric {:?} did not answer within 60s",
                            request.metric
                        ))
                    });
                let wake = measurement.is_urgent(&outcome);
                let _ = tx.send(ClusterOutcome {
                    cluster: measurement.cluster,
                    run: measurement.run,
                    metric_index: measurement.request.metric_index,
                    outcome,
                });
                if wake {
                    urgent.notify_one();
                }
            });
        }
    }

    /// The plan's clusters and wave count (to validate commands).
    pub fn plan(&self) -> &FleetPlan {
        self.machine.plan()
    }
}

impl FleetController {
    /// Why `rollout` cannot run on this fleet's clusters (None: it can): each cluster whose
    /// backend lacks a capability the Rollout needs, by name.
    pub(super) fn lacking(
        &self,
        rollout: &flotilla_core::spec::rollout::Rollout,
    ) -> Option<String> {
        let reasons: Vec<String> = self
            .clusters
            .iter()
            .filter_map(|(name, handle)| {
                let capabilities = handle.backend.capabilities();
                let lacks = missing(rollout, &capabilities);
                (!lacks.is_empty()).then(|| lacking(name, &capabilities.backend, &lacks))
            })
            .collect();
        (!reasons.is_empty()).then(|| reasons.join("\n"))
    }
}

/// The backend of `cluster` for `target`, refused when it lacks a capability `rollout` needs.
fn connect(
    wiring: &Wiring,
    cluster: &flotilla_core::spec::fleet::Cluster,
    target: &super::backends::Target,
    rollout: &flotilla_core::spec::rollout::Rollout,
) -> Result<std::sync::Arc<dyn flotilla_core::backend::ClusterBackend>, FleetError> {
    let backend = wiring
        .backends
        .connect(cluster, target)
        .map_err(FleetError)?;
    let lacks = missing(rollout, &backend.capabilities());
    if !lacks.is_empty() {
        return Err(FleetError(lacking(
            &cluster.name,
            &backend.capabilities().backend,
            &lacks,
        )));
    }
    Ok(backend)
}

/// Why a Rollout cannot run on a cluster: each capability it needs that the backend lacks.
fn lacking(cluster: &str, backend: &str, lacks: &[flotilla_core::backend::Missing]) -> String {
    let named: Vec<String> = lacks.iter().map(ToString::to_string).collect();
    format!(
        "cluster {cluster:?} ({backend}) cannot run this Rollout: it lacks {}",
        named.join("; ")
    )
}

#[cfg(test)]
mod tests;
