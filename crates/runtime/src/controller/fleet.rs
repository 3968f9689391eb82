//! One fleet rollout under the daemon: the core's fleet machine fed with observations from the
//! agents and with measurement outcomes, its decisions turned into audit entries and
//! notifications, and its actions executed per cluster.
//!
//! # Isolation
//! Each cluster has its own observation poller and its own action worker; the tick never awaits
//! either. A slow or dead agent only makes its own observation stale (the machine then sees it
//! unreachable) and its own actions wait, retried with backoff, in order.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flotilla_agent::AgentClient;
use flotilla_agent::adapter::{AgentCluster, BuiltinProvider, Placement, image_version};
use flotilla_core::analysis::{MeasureRequest, Measurer, Millis, Outcome};
use flotilla_core::fleet::{
    ClusterMeasurement, ClusterObservation, ClusterOutcome, ClusterStatus, Decision, DurableChange,
    DurableEdit, Failure, FleetCommand, FleetEvent, FleetMachine, FleetPhase, FleetPlan,
    FleetSpecs, FleetState,
};
use flotilla_core::rollout::ports::{TrafficRouter, WorkloadDriver};
use flotilla_core::rollout::{Action, AnalysisSlot, Observed, RolloutState, template_hash};
use flotilla_core::spec::rollout::Rollout;
use flotilla_providers::Providers;
use tokio::sync::{Semaphore, mpsc};

use super::record::{
    AuditEntry, AuditKind, ClusterView, FailureView, FleetRecord, FleetSummary, FleetView,
    MetricView, Notification, OperatorCommand, QueuedCommand, RolloutView, RunView, WaveView,
};

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
    /// Actions per cluster, in order.
    actions: BTreeMap<String, Vec<Action>>,
    /// Measurements to take.
    measurements: Vec<ClusterMeasurement>,
}

type Latest = Arc<Mutex<Option<(Instant, Result<(Observed, Option<String>), String>)>>>;

/// How long a cluster must run a version Git does not say before it is reported as drift
/// (a promotion's observations lag its actions by a tick or two).
const DRIFT_AFTER: Duration = Duration::from_secs(3);
/// How often a drifted cluster is corrected again while it stays drifted.
const DRIFT_RETRY: Duration = Duration::from_secs(10);

/// A cluster running a version Git does not say.
#[derive(Debug, Clone)]
struct Drift {
    version: String,
    expected: String,
    since: Instant,
    reported: bool,
    corrected_at: Option<Instant>,
}

struct ClusterHandle {
    adapter: Arc<AgentCluster>,
    builtin: BuiltinProvider,
    actions: mpsc::UnboundedSender<(Placement, Vec<Action>)>,
    latest: Latest,
    /// Since when no action has been sent, finished or re-placed: an observation taken after
    /// it shows the effect of every decision so far (compared with them only then).
    quiet: Arc<Quiet>,
    /// The placement last given to the adapter.
    placed: Mutex<Placement>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Whether a cluster's actions have all been carried out, and since when.
#[derive(Debug)]
struct Quiet {
    /// Batches of actions sent and not yet carried out.
    outstanding: std::sync::atomic::AtomicUsize,
    /// The last time a batch was sent or finished.
    since: Mutex<Instant>,
}

impl Quiet {
    fn touch(&self) {
        *self.since.lock().expect("quiet lock") = Instant::now();
    }

    /// Whether an observation taken at `at` reflects every action sent so far.
    fn settled_before(&self, at: Instant) -> bool {
        self.outstanding.load(std::sync::atomic::Ordering::SeqCst) == 0
            && at > *self.since.lock().expect("quiet lock")
    }
}

impl ClusterHandle {
    /// Hands a batch of actions to the cluster's worker (in order, retried until done).
    fn send(&self, placement: Placement, actions: Vec<Action>) {
        self.place(placement.clone());
        self.quiet
            .outstanding
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.quiet.touch();
        if self.actions.send((placement, actions)).is_err() {
            self.quiet
                .outstanding
                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Sets the revision → version map the observer and the worker use; a change makes earlier
    /// observations stale for comparing.
    fn place(&self, placement: Placement) {
        let mut placed = self.placed.lock().expect("placement lock");
        if *placed != placement {
            *placed = placement.clone();
            self.quiet.touch();
            self.adapter.set_placement(placement);
        }
    }
}

impl Drop for ClusterHandle {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// One fleet rollout under the daemon.
pub struct FleetController {
    /// The durable record (kept in step with the machine at every tick).
    pub record: FleetRecord,
    machine: FleetMachine,
    clusters: BTreeMap<String, ClusterHandle>,
    providers: Providers,
    versions: BTreeMap<String, String>,
    outcomes_tx: mpsc::UnboundedSender<ClusterOutcome>,
    outcomes_rx: mpsc::UnboundedReceiver<ClusterOutcome>,
    measure_limit: Arc<Semaphore>,
    stale_after: Duration,
    observed: BTreeMap<String, (bool, Option<(i32, i32)>)>,
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
}

/// How a cluster's observation differs from what its engine decided, if it does: the stable
/// subset's version, the canary's weight, the canary revision's replicas. Old revisions kept for
/// their scale-down delay are not compared (the agent's surge already replaced them).
fn divergence(
    engine: &RolloutState,
    versions: &BTreeMap<String, String>,
    observed: &Observed,
    stable_version: Option<&str>,
) -> Option<String> {
    let version = |revision| {
        engine
            .revision(revision)
            .and_then(|r| versions.get(&r.hash))
            .map(String::as_str)
    };
    let stable = engine.stable?;
    let want = version(stable)?;
    if stable_version != Some(want) {
        return Some(format!(
            "its stable subset runs {}, not {want}",
            stable_version.unwrap_or("nothing")
        ));
    }
    if let (Some(want), Some(weights)) = (engine.desired_weight, observed.weights)
        && weights.canary != want
    {
        return Some(format!(
            "its canary weight is {}, not {want}",
            weights.canary
        ));
    }
    if let Some(current) = engine.current
        && current != stable
        && version(current).is_some_and(|v| v != want)
    {
        let desired = engine.desired_replicas.get(&current).copied().unwrap_or(0);
        let running = observed.replicas.get(&current).map_or(0, |c| c.replicas);
        if (desired > 0 && running < desired) || (desired == 0 && running > 0) {
            return Some(format!(
                "its canary ({}) has {running} replicas, not {desired}",
                version(current).unwrap_or_default()
            ));
        }
    }
    None
}

/// `image` with its tag (or digest) replaced by `version`.
fn with_tag(image: &str, version: &str) -> String {
    let repository = match image.split_once('@') {
        Some((repository, _)) => repository,
        None => {
            let slash = image.rfind('/').map_or(0, |i| i + 1);
            match image[slash..].rfind(':') {
                Some(colon) => &image[..slash + colon],
                None => image,
            }
        }
    };
    if version.contains(':') {
        format!("{repository}@{version}")
    } else {
        format!("{repository}:{version}")
    }
}

fn first_image(rollout: &Rollout) -> String {
    rollout.first_image().unwrap_or_default().to_owned()
}

fn with_image(rollout: &Rollout, container: Option<&str>, image: &str) -> Result<Rollout, String> {
    let mut next = rollout.clone();
    let containers = next
        .spec
        .template
        .as_mut()
        .and_then(|t| t.spec.as_mut())
        .map(|s| &mut s.containers)
        .ok_or("the Rollout has no pod template")?;
    let target = match container {
        Some(name) => containers
            .iter_mut()
            .find(|c| c.name == name)
            .ok_or_else(|| format!("the Rollout has no container {name:?}"))?,
        None => containers
            .first_mut()
            .ok_or("the Rollout has no container")?,
    };
    target.image = Some(image.to_owned());
    Ok(next)
}

/// What every fleet's controller is wired to: the metric providers, the tick, the drift policy
/// and the agents' tokens.
#[derive(Clone)]
pub struct Wiring {
    /// The metric providers.
    pub providers: Providers,
    /// How often the engines run.
    pub tick: Duration,
    /// Re-assert lingering drift every 10 s (`git.correctDrift`).
    pub correct_drift: bool,
    /// The bearer token each cluster's agent gets on every change (`agentTokenFile`, or the
    /// cluster's own in `agentTokenFiles`).
    pub agent_tokens: super::config::AgentTokens,
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
        let (tick, correct_drift, agent_tokens) =
            (wiring.tick, wiring.correct_drift, &wiring.agent_tokens);
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
        // Every spec the record knows: a version an agent runs.
        let specs = &record.specs;
        let versions = specs
            .history
            .iter()
            .chain([&specs.previous, &specs.next])
            .map(|spec| (template_hash(spec), image_version(&first_image(spec))))
            .collect();
        let mut controller_clusters = BTreeMap::new();
        let (outcomes_tx, outcomes_rx) = mpsc::unbounded_channel();
        for cluster in &desired.fleet.spec.clusters {
            if !plan.clusters.contains_key(&cluster.name) {
                continue;
            }
            let Some(agent) = cluster.endpoint.as_ref().and_then(|e| e.agent.clone()) else {
                return Err(FleetError(format!(
                    "cluster {:?} has no agent endpoint; this version drives only agents",
                    cluster.name
                )));
            };
            let mut client = AgentClient::with_timeout(agent.clone(), Duration::from_secs(5))
                .map_err(|e| FleetError(e.to_string()))?;
            if let Some(token) = agent_tokens.for_cluster(&cluster.name) {
                client = client.with_token(token);
            }
            let adapter = Arc::new(AgentCluster::new(client.clone()));
            controller_clusters.insert(
                cluster.name.clone(),
                spawn_cluster(cluster.name.clone(), adapter, client, tick),
            );
        }
        let changed = source_hash != record.source_hash;
        record.source_hash = source_hash;
        record.state = machine.state().clone();
        let mut controller = FleetController {
            record,
            machine,
            clusters: controller_clusters,
            providers,
            versions,
            outcomes_tx,
            outcomes_rx,
            measure_limit: Arc::new(Semaphore::new(64)),
            stale_after: (tick * 3).max(Duration::from_secs(3)),
            observed: BTreeMap::new(),
            invalid: Vec::new(),
            repairing: Default::default(),
            pending: Default::default(),
            correct_drift,
            drift: BTreeMap::new(),
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

    /// The source's latest desired state for this fleet has errors (`errors` non-empty): the
    /// fleet keeps running its last valid one, and says so in its status, the audit log and a
    /// notification; an empty list means it is valid again.
    pub fn set_invalid(&mut self, errors: Vec<String>, now: Millis) {
        if errors == self.invalid {
            return;
        }
        let message = if errors.is_empty() {
            "the desired state is valid again".to_owned()
        } else {
            format!(
                "the desired state was refused; the fleet keeps running its last valid one ({}):\n{}",
                first_image(&self.record.specs.next),
                errors.join("\n")
            )
        };
        if errors.is_empty() {
            tracing::info!(fleet = %self.record.name, "{message}");
        } else {
            tracing::error!(fleet = %self.record.name, "{message}");
        }
        self.invalid = errors;
        let revision = self.machine.state().revision.clone();
        let kind = if self.invalid.is_empty() {
            AuditKind::Sync
        } else {
            AuditKind::Invalid
        };
        self.pending.0.push(AuditEntry::new(
            now,
            &self.record.name,
            &revision,
            kind,
            None,
            message.clone(),
        ));
        if !self.invalid.is_empty() {
            self.pending.1.push(Notification {
                event: "desired-state-invalid".into(),
                id: format!("{}/{revision}/invalid/{now}", self.record.name),
                fleet: self.record.name.clone(),
                revision,
                cluster: None,
                metric: None,
                value: None,
                message: format!("{}: {message}", self.record.name),
                time: now,
            });
        }
    }

    /// A new desired Rollout: the supersede rule.
    fn change_spec(&mut self, next: Rollout) {
        let hash = template_hash(&next);
        let version = image_version(&first_image(&next));
        if self.machine.change_spec(&mut self.record.specs, next) {
            self.versions.insert(hash, version);
        }
    }

    /// A new desired state from the source (a Git commit). A changed Rollout is a new fleet
    /// revision (the supersede rule), except when it is the previous spec while the fleet is
    /// halted or aborted with no cluster validated: Git then agrees with the rollback, and the
    /// fleet settles on it without rolling anything out (durable rejections are kept).
    pub fn sync(&mut self, desired: &Desired, commit: &str, now: Millis) -> Vec<AuditEntry> {
        self.record.desired = Some(Box::new(desired.clone()));
        let hash = template_hash(&desired.rollout);
        let short = &commit[..commit.len().min(12)];
        let mut audit = Vec::new();
        if &desired.overlays != self.machine.overlays() {
            self.machine.set_overlays(desired.overlays.clone());
            let described: Vec<String> = desired
                .overlays
                .iter()
                .map(|(cluster, o)| {
                    let mut parts = Vec::new();
                    if let Some(image) = &o.image {
                        parts.push(format!("image {image}"));
                    }
                    if o.args.is_some() {
                        parts.push("args".into());
                    }
                    if !o.env.is_empty() {
                        parts.push("env".into());
                    }
                    if let Some(pin) = &o.pin {
                        let state = if pin.rejects == self.machine.state().revision {
                            "active"
                        } else {
                            "lapsed"
                        };
                        parts.push(format!(
                            "pin {} rejecting {} ({state})",
                            pin.image, pin.rejects
                        ));
                    }
                    format!("{cluster}: {}", parts.join(", "))
                })
                .collect();
            audit.push(AuditEntry::new(
                now,
                &self.record.name,
                &self.machine.state().revision,
                AuditKind::Sync,
                None,
                format!(
                    "commit {short}: overlays {}",
                    if described.is_empty() {
                        "none".to_owned()
                    } else {
                        described.join("; ")
                    }
                ),
            ));
        }
        if hash == self.record.source_hash {
            self.record.state = self.machine.state().clone();
            return audit;
        }
        self.record.source_hash = hash;
        let (old_revision, old_phase) = (
            self.machine.state().revision.clone(),
            self.machine.state().phase,
        );
        let message = if self
            .machine
            .settle(&mut self.record.specs, desired.rollout.clone())
        {
            format!(
                "commit {short}: Git agrees with the rollback ({}); nothing to roll out",
                first_image(&self.record.specs.next)
            )
        } else {
            self.change_spec(desired.rollout.clone());
            let mut message = format!(
                "commit {short}: new desired revision {}",
                first_image(&self.record.specs.next)
            );
            let revision = &self.machine.state().revision;
            if !old_revision.is_empty() && &old_revision != revision {
                message.push_str(&format!(
                    " (fleet revision {revision} supersedes {old_revision}, {})",
                    format!("{old_phase:?}").to_lowercase()
                ));
            }
            message
        };
        self.record.state = self.machine.state().clone();
        audit.push(AuditEntry::new(
            now,
            &self.record.name,
            &self.machine.state().revision,
            AuditKind::Sync,
            None,
            message,
        ));
        audit
    }

    /// The durable change Git needs, once per fleet revision (until [`Self::committed`]): the
    /// core's decision ([`FleetMachine::durable_change`]) in Git's words.
    pub fn change_needed(&self) -> Option<super::source::GitChange> {
        use super::source::{Edit, GitChange};
        let change = self.machine.durable_change(
            &self.record.specs,
            self.record.reverted.as_deref(),
            &self.record.pinned,
        )?;
        let rollout = self
            .record
            .specs
            .next
            .metadata
            .name
            .clone()
            .unwrap_or_default();
        let state = self.machine.state();
        let mut trailers = String::new();
        for failed in &change.failed {
            trailers.push_str(&format!("Flotilla-Cluster: {}\n", failed.name));
        }
        for failed in &change.failed {
            if let Some(f) = &failed.failure {
                trailers.push_str(&format!("Flotilla-Metric: {}={}\n", f.metric, f.value));
            }
        }
        trailers.push_str(&format!("Flotilla-Revision: {}\n", change.revision));
        let (bad_image, good_image) = (&change.bad_image, &change.good_image);
        let fleet = &self.record.name;
        let revision = &change.revision;
        Some(match change.edit {
            DurableEdit::Revert => GitChange {
                rollout: rollout.clone(),
                revision: revision.clone(),
                edit: Edit::Revert {
                    bad_image: bad_image.clone(),
                    good_image: good_image.clone(),
                },
                body: format!(
                    "flotilla: roll {rollout} back to {good_image}\n\nFleet rollout {fleet} halted on revision {revision} ({bad_image}): {}\nNo cluster was validated on it, so the whole fleet returns to {good_image}.",
                    state.message
                ),
                trailers,
                proposal_branch: format!("flotilla/rollback-{fleet}-{revision}"),
                decision: change.clone(),
            },
            DurableEdit::Pin => {
                let clusters: Vec<(String, String)> = change
                    .failed
                    .iter()
                    .map(|f| (f.name.clone(), f.image.clone()))
                    .collect();
                let names: Vec<&str> = clusters.iter().map(|(c, _)| c.as_str()).collect();
                let images: std::collections::BTreeSet<&str> =
                    clusters.iter().map(|(_, i)| i.as_str()).collect();
                let reasons: Vec<&str> = change.failed.iter().map(|f| f.reason.as_str()).collect();
                GitChange {
                    rollout: rollout.clone(),
                    revision: revision.clone(),
                    edit: Edit::Pin {
                        clusters: clusters.clone(),
                    },
                    body: format!(
                        "flotilla: pin {} of {rollout} to {}\n\nFleet rollout {fleet} {} on revision {revision} ({bad_image}).\nFailed: {}.\nValidated and kept on {bad_image}: {}.\nThe pin rejects revision {revision} for the failed clusters only; it lapses when Git's desired revision changes (a fix-forward).",
                        names.join(", "),
                        images.into_iter().collect::<Vec<_>>().join(", "),
                        format!("{:?}", state.phase).to_lowercase(),
                        reasons.join("; "),
                        change.validated.join(", "),
                    ),
                    trailers,
                    proposal_branch: format!("flotilla/pin-{fleet}-{revision}"),
                    decision: change.clone(),
                }
            }
        })
    }

    /// The durable change `decision` reached Git (or Git already said it): never again for its
    /// revision, and the decision is recorded as the core made it.
    pub fn committed(&mut self, decision: &DurableChange, status: String) {
        self.machine.record_durable(decision);
        let revision = decision.revision.as_str();
        if self.record.reverted.as_deref() != Some(revision) {
            self.record.pinned.clear();
        }
        self.record.reverted = Some(revision.to_owned());
        if decision.edit == DurableEdit::Pin {
            self.record
                .pinned
                .extend(decision.failed.iter().map(|f| f.name.clone()));
        }
        self.record.git_status = Some(status);
    }

    /// The durable change could not be committed yet (it is retried).
    pub fn git_failed(&mut self, status: String) {
        self.record.git_status = Some(status);
    }

    /// After a restart: every cluster's last intent again (all idempotent), since the process
    /// cannot know which of its last actions took effect.
    fn reassert(&mut self) {
        let names: Vec<String> = self.machine.state().clusters.keys().cloned().collect();
        for name in names {
            self.reassert_cluster(&name);
        }
    }

    /// One cluster's last intent again, with the spec it runs (overlay, pin or baseline).
    fn reassert_cluster(&mut self, name: &str) {
        self.learn_versions();
        let revisions = self.record.specs.revisions();
        let Some(spec) = self.machine.cluster_spec(name, &revisions) else {
            return;
        };
        let cluster = &self.machine.state().clusters[name];
        let actions = flotilla_core::rollout::desired_actions(&cluster.rollout, &spec);
        let placement = self.placement(&cluster.rollout);
        if let Some(handle) = self.clusters.get(name) {
            handle.send(placement, actions);
        }
    }

    /// The version of every spec the machine may run (overlaid specs included).
    fn learn_versions(&mut self) {
        for (hash, spec) in self.machine.known_specs() {
            if !self.versions.contains_key(hash) {
                self.versions
                    .insert(hash.to_owned(), image_version(&first_image(spec)));
            }
        }
    }

    fn placement(&self, rollout: &RolloutState) -> Placement {
        Placement {
            versions: rollout
                .revisions
                .iter()
                .filter_map(|r| self.versions.get(&r.hash).map(|v| (r.number, v.clone())))
                .collect(),
            stable: rollout.stable,
            current: rollout.current,
        }
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
                operators.push_back((queued.operator.clone(), describe_command(&queued.command)));
                continue;
            }
            let mut message = describe_command(&queued.command);
            let spec = match &queued.command {
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
        let mut fresh: BTreeMap<String, (Instant, Observed, Option<String>)> = BTreeMap::new();
        let mut stable_versions = BTreeMap::new();
        for (name, handle) in &self.clusters {
            let latest = handle.latest.lock().expect("observation lock").clone();
            match latest {
                Some((at, Ok((observed, stable)))) if at.elapsed() < self.stale_after => {
                    let weights = observed.weights.map(|w| (w.canary, w.stable));
                    self.observed.insert(name.clone(), (true, weights));
                    if let Some(version) = &stable {
                        stable_versions.insert(name.clone(), version.clone());
                    }
                    fresh.insert(name.clone(), (at, observed, stable));
                }
                _ => {
                    let weights = self.observed.get(name).and_then(|o| o.1);
                    self.observed.insert(name.clone(), (false, weights));
                }
            }
        }
        // First start: each cluster is adopted from what it runs, before its first reconcile.
        let adopting: Vec<String> = self.record.adopting.iter().cloned().collect();
        for name in adopting {
            if let Some((_, _, stable)) = fresh.get(&name) {
                let stable = stable.clone();
                self.adopt(&name, stable);
            }
        }
        // Level-triggered: a cluster that does not run what was decided for it is repaired, and
        // held meanwhile.
        self.repair(&fresh, now, &mut out);
        let mut observations = BTreeMap::new();
        for name in self.clusters.keys() {
            let observation = match fresh.remove(name) {
                Some((_, observed, _)) if !self.record.adopting.contains(name) => {
                    ClusterObservation {
                        reachable: true,
                        observed,
                        diverged: self.repairing.contains(name),
                    }
                }
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
        for (cluster, action) in output.actions {
            out.actions.entry(cluster).or_default().push(action);
        }
        out.measurements = output.measurements;
        self.learn_versions();
        for event in &output.events {
            let mut entry = audit_entry(&self.record.name, event);
            // A command's entry says it as the operator gave it, with who gave it.
            match &event.decision {
                Decision::CommandAccepted { .. } | Decision::CommandRefused { .. } => {
                    if let Some((operator, said)) = operators.pop_front() {
                        entry.operator = Some(operator);
                        entry.message = match &event.decision {
                            Decision::CommandRefused { why, .. } => {
                                format!("{said}: refused: {why}")
                            }
                            _ => said,
                        };
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
        self.versions
            .insert(hash, image_version(&first_image(&baseline)));
        self.record.specs.keep(baseline);
        self.record.adopting.remove(name);
    }

    /// Compares each cluster's fresh observation, taken after every action sent to it was
    /// carried out, with what its engine last decided; a difference is repaired by re-applying
    /// the decision (every action idempotent) and recorded, and the cluster is held until an
    /// observation matches again.
    fn repair(
        &mut self,
        fresh: &BTreeMap<String, (Instant, Observed, Option<String>)>,
        now: Millis,
        out: &mut TickOutput,
    ) {
        let mut repairs = Vec::new();
        for (name, (at, observed, stable)) in fresh {
            let Some(handle) = self.clusters.get(name) else {
                continue;
            };
            if self.record.adopting.contains(name) || !handle.quiet.settled_before(*at) {
                continue;
            }
            let Some(cluster) = self.machine.state().clusters.get(name) else {
                continue;
            };
            match divergence(
                &cluster.rollout,
                &self.versions,
                observed,
                stable.as_deref(),
            ) {
                Some(why) => repairs.push((name.clone(), why)),
                None => {
                    if self.repairing.remove(name) {
                        tracing::info!(fleet = %self.record.name, cluster = %name, "repaired");
                    }
                }
            }
        }
        for (name, why) in repairs {
            let state = self.machine.state();
            let status = state.clusters[&name].status;
            let message = format!(
                "{name} ({status:?}): {why}; re-applying what was decided (held until it matches)"
            );
            tracing::warn!(fleet = %self.record.name, cluster = %name, "{message}");
            out.audit.push(AuditEntry::new(
                now,
                &self.record.name,
                &state.revision,
                AuditKind::Repair,
                Some(&name),
                message,
            ));
            self.repairing.insert(name.clone());
            self.reassert_cluster(&name);
        }
    }

    /// Drift: outside a rollout, a cluster (not Held) whose stable subset runs a version other
    /// than the one its spec (Git's, its overlay's or its pin's) says. Reported once it lasts
    /// [`DRIFT_AFTER`]; corrected (its last intent re-asserted) when configured to. A Held
    /// cluster is never touched, and a correction only ever asserts the cluster's own spec, which
    /// for a rolled-back, held or pinned cluster is never the rejected revision.
    fn check_drift(
        &mut self,
        stable: &BTreeMap<String, String>,
        now: Millis,
        out: &mut TickOutput,
    ) {
        let state = self.machine.state();
        let settled = matches!(
            state.phase,
            FleetPhase::Completed | FleetPhase::Halted | FleetPhase::Aborted
        );
        let mut seen = Vec::new();
        for (name, cluster) in &state.clusters {
            let eligible = settled
                && matches!(
                    cluster.status,
                    ClusterStatus::Validated
                        | ClusterStatus::RolledBack
                        | ClusterStatus::Pinned
                        | ClusterStatus::NotStarted
                );
            let expected = cluster
                .rollout
                .stable
                .and_then(|s| cluster.rollout.revision(s))
                .and_then(|r| self.versions.get(&r.hash));
            match (eligible, expected, stable.get(name)) {
                (true, Some(expected), Some(running)) if running != expected => {
                    seen.push((name.clone(), running.clone(), expected.clone()));
                }
                _ => {}
            }
        }
        let fleet = self.record.name.clone();
        let revision = state.revision.clone();
        let entry = |cluster: &str, message: String| {
            AuditEntry::new(
                now,
                &fleet,
                &revision,
                AuditKind::Drift,
                Some(cluster),
                message,
            )
        };
        let drifting: Vec<String> = seen.iter().map(|(n, _, _)| n.clone()).collect();
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.drift)
            .into_iter()
            .partition(|(n, _)| !drifting.contains(n));
        self.drift = kept.into_iter().collect();
        for (name, gone) in gone {
            if gone.reported {
                out.audit.push(entry(
                    &name,
                    format!("{name}: runs {} again, as Git says", gone.expected),
                ));
            }
        }
        let mut correct = Vec::new();
        for (name, running, expected) in seen {
            let drift = self.drift.entry(name.clone()).or_insert_with(|| Drift {
                version: running.clone(),
                expected: expected.clone(),
                since: Instant::now(),
                reported: false,
                corrected_at: None,
            });
            if drift.version != running || drift.expected != expected {
                *drift = Drift {
                    version: running.clone(),
                    expected: expected.clone(),
                    since: Instant::now(),
                    reported: false,
                    corrected_at: None,
                };
            }
            if drift.since.elapsed() < DRIFT_AFTER {
                continue;
            }
            if !drift.reported {
                drift.reported = true;
                let what = if self.correct_drift {
                    "correcting it"
                } else {
                    "reported only (set git.correctDrift: true to correct it)"
                };
                let message = format!("{name}: drift: runs {running}, Git says {expected}; {what}");
                tracing::warn!(fleet = %fleet, cluster = %name, "{message}");
                out.audit.push(entry(&name, message));
            }
            if self.correct_drift
                && drift
                    .corrected_at
                    .is_none_or(|at| at.elapsed() >= DRIFT_RETRY)
            {
                drift.corrected_at = Some(Instant::now());
                correct.push(name);
            }
        }
        for name in correct {
            self.reassert_cluster(&name);
        }
    }

    /// Executes a tick's actions (per cluster, in order) and starts its measurements. Call only
    /// after the tick was persisted.
    pub fn dispatch(&mut self, out: TickOutput) {
        for (name, actions) in out.actions {
            let Some(cluster) = self.machine.state().clusters.get(&name) else {
                continue;
            };
            let placement = self.placement(&cluster.rollout);
            if let Some(handle) = self.clusters.get(&name) {
                handle.send(placement, actions);
            }
        }
        // Placement for the observers, also where nothing acted.
        for (name, handle) in &self.clusters {
            if let Some(cluster) = self.machine.state().clusters.get(name) {
                handle.place(self.placement(&cluster.rollout));
            }
        }
        for measurement in out.measurements {
            // A wave analysis measures the wave, not one cluster: only non-builtin providers.
            let wave = measurement.wave().is_some();
            let handle = self.clusters.get(&measurement.cluster);
            if handle.is_none() && !wave {
                continue;
            }
            let builtin = handle.map(|h| h.builtin.clone());
            let providers = self.providers.clone();
            let tx = self.outcomes_tx.clone();
            let limit = self.measure_limit.clone();
            tokio::spawn(async move {
                let _permit = limit.acquire_owned().await;
                let request = &measurement.request;
                let routed = Routed {
                    builtin: builtin.as_ref(),
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
                let _ = tx.send(ClusterOutcome {
                    cluster: measurement.cluster,
                    run: measurement.run,
                    metric_index: measurement.request.metric_index,
                    outcome,
                });
            });
        }
    }

    /// The summary line of the list answer.
    pub fn summary(&self) -> FleetSummary {
        let state = self.machine.state();
        FleetSummary {
            name: self.record.name.clone(),
            revision: state.revision.clone(),
            image: first_image(&self.record.specs.next),
            phase: state.outcome(),
            wave: (state.wave + 1).min(self.machine.plan().waves.len()),
            waves: self.machine.plan().waves.len(),
            message: state.message.clone(),
            errors: self.invalid.clone(),
        }
    }

    /// The whole view: waves → clusters → step, weights, analysis.
    pub fn view(&self) -> FleetView {
        let state = self.machine.state();
        let plan = self.machine.plan();
        FleetView {
            name: self.record.name.clone(),
            revision: state.revision.clone(),
            image: first_image(&self.record.specs.next),
            previous_image: first_image(&self.record.specs.previous),
            phase: state.outcome(),
            message: state.message.clone(),
            wave: (state.wave + 1).min(plan.waves.len()),
            paused: state.paused,
            git: self.record.git_status.clone(),
            waves: plan
                .waves
                .iter()
                .enumerate()
                .map(|(i, members)| WaveView {
                    index: i + 1,
                    started_at: state.wave_started_at.get(i).copied().flatten(),
                    completed_at: state.wave_completed_at.get(i).copied().flatten(),
                    clusters: members.iter().map(|m| self.cluster_view(m)).collect(),
                })
                .collect(),
            errors: self.invalid.clone(),
        }
    }

    fn cluster_view(&self, name: &str) -> ClusterView {
        let cluster = &self.machine.state().clusters[name];
        let engine = &cluster.rollout;
        let spec = if cluster.on_new_spec {
            &self.record.specs.next
        } else {
            &self.record.specs.previous
        };
        let version = |r: Option<u32>| {
            r.and_then(|n| engine.revision(n))
                .and_then(|r| self.versions.get(&r.hash).cloned())
        };
        let (reachable, weights) = self.observed.get(name).copied().unwrap_or((false, None));
        ClusterView {
            name: name.to_owned(),
            status: format!("{:?}", cluster.status),
            reason: cluster.reason.clone(),
            reachable,
            rollout_phase: format!("{:?}", engine.phase),
            rollout_message: engine.message.clone(),
            step: spec
                .canary()
                .map(|c| format!("{}/{}", engine.step_index.unwrap_or(0), c.steps.len())),
            weights,
            desired_weight: engine.desired_weight,
            stable_version: version(engine.stable),
            current_version: version(engine.current),
            failure: cluster.failure.as_ref().map(|f| FailureView {
                metric: f.metric.clone(),
                value: f.value.clone(),
                message: f.message.clone(),
            }),
            started_at: cluster.started_at,
            decided_at: cluster.decided_at,
            analysis: cluster
                .runs
                .iter()
                .map(|(key, run)| RunView {
                    name: format!(
                        "{}-rev{}",
                        match key.slot {
                            AnalysisSlot::Step(i) => format!("step-{i}"),
                            AnalysisSlot::Background => "background".into(),
                            AnalysisSlot::PrePromotion => "pre-promotion".into(),
                            AnalysisSlot::PostPromotion => "post-promotion".into(),
                            AnalysisSlot::Wave(n) => format!("wave-{n}"),
                        },
                        key.revision
                    ),
                    phase: format!("{:?}", run.phase),
                    message: run.message.clone(),
                    metrics: run
                        .metrics
                        .iter()
                        .map(|m| {
                            let last = m
                                .measurements
                                .iter()
                                .rev()
                                .find(|x| x.finished_at.is_some());
                            MetricView {
                                name: m.name.clone(),
                                phase: format!("{:?}", m.phase),
                                count: m.count,
                                failed: m.failed,
                                value: last.map(|x| x.value.clone()),
                                // Still waiting for enough evidence: say why.
                                message: if m.waiting.is_empty() {
                                    last.map(|x| x.message.clone()).filter(|t| !t.is_empty())
                                } else {
                                    Some(format!("waiting: {}", m.waiting))
                                },
                            }
                        })
                        .collect(),
                })
                .collect(),
            drift: self
                .drift
                .get(name)
                .filter(|d| d.reported)
                .map(|d| format!("runs {}, Git says {}", d.version, d.expected)),
        }
    }

    /// One cluster's rollout in detail.
    pub fn rollout_view(&self, cluster: &str) -> Option<RolloutView> {
        let state = self.machine.state().clusters.get(cluster)?;
        let engine = &state.rollout;
        Some(RolloutView {
            cluster: self.cluster_view(cluster),
            revisions: engine
                .revisions
                .iter()
                .map(|r| {
                    (
                        r.number,
                        r.hash.clone(),
                        self.versions.get(&r.hash).cloned().unwrap_or_default(),
                    )
                })
                .collect(),
            pause_conditions: engine
                .pause_conditions
                .iter()
                .map(|p| format!("{:?}", p.reason))
                .collect(),
            abort: engine.abort,
            desired_replicas: engine.desired_replicas.clone(),
        })
    }

    /// The plan's clusters and wave count (to validate commands).
    pub fn plan(&self) -> &FleetPlan {
        self.machine.plan()
    }
}

fn describe_command(command: &OperatorCommand) -> String {
    match command {
        OperatorCommand::Promote { wave, full } => format!(
            "promote{}{}",
            wave.map(|w| format!(" --wave {w}")).unwrap_or_default(),
            if *full { " --full" } else { "" }
        ),
        OperatorCommand::Abort { cluster } => format!(
            "abort{}",
            cluster
                .as_ref()
                .map(|c| format!(" --cluster {c}"))
                .unwrap_or_default()
        ),
        OperatorCommand::Undo { to_revision } => format!(
            "undo{}",
            to_revision
                .map(|r| format!(" --to-revision {r}"))
                .unwrap_or_default()
        ),
        OperatorCommand::SetImage { container, image } => {
            format!("set image {}={image}", container.as_deref().unwrap_or("*"))
        }
        other => other.verb().to_owned(),
    }
}

/// The audit entry of one of the fleet machine's decisions.
fn audit_entry(fleet: &str, event: &FleetEvent) -> AuditEntry {
    let mut entry = AuditEntry::new(
        event.at,
        fleet,
        &event.revision,
        audit_kind(&event.decision),
        event.cluster.as_deref(),
        event.message.clone(),
    );
    entry.evidence = event.evidence.clone();
    entry.decision = Some(event.id.clone());
    entry
}

/// The audit kind of each of the fleet machine's decisions (exhaustive: a new decision must be
/// given one).
pub(crate) fn audit_kind(decision: &Decision) -> AuditKind {
    match decision {
        Decision::Adopted => AuditKind::Adopt,
        Decision::ClusterStarted | Decision::StepReached { .. } => AuditKind::Advance,
        Decision::WeightSet { .. } => AuditKind::Weight,
        Decision::RolloutEvent { .. } => AuditKind::Event,
        Decision::Paused { .. } => AuditKind::Pause,
        Decision::Resumed => AuditKind::Resume,
        Decision::Validated { .. } => AuditKind::Validate,
        Decision::Failed { .. }
        | Decision::AbortedWithoutRejection { .. }
        | Decision::RolledBack => AuditKind::Rollback,
        Decision::Held => AuditKind::Hold,
        Decision::Skipped => AuditKind::Skip,
        Decision::Reset => AuditKind::Reset,
        Decision::Pinned => AuditKind::Pin,
        Decision::WaveStarted { .. } | Decision::WaveCompleted { .. } => AuditKind::Wave,
        Decision::BakeStarted { .. } | Decision::BakeEnded { .. } => AuditKind::Bake,
        Decision::WaveAnalysis { .. } => AuditKind::Analysis,
        Decision::Superseded { .. } | Decision::Settled | Decision::Phase { .. } => {
            AuditKind::Fleet
        }
        Decision::Calibrated { .. } => AuditKind::Calibrate,
        Decision::DurableChange { .. } => AuditKind::Gitops,
        Decision::CommandAccepted { .. } | Decision::CommandRefused { .. } => AuditKind::Command,
    }
}

/// The notifications of one of the fleet machine's decisions (none for most), each with the
/// decision's id and its event as the idempotency key.
fn notifications_of(fleet: &str, specs: &FleetSpecs, event: &FleetEvent) -> Vec<Notification> {
    let notification = |kind: &str, message: String, failure: Option<&Failure>| Notification {
        event: kind.into(),
        id: format!("{}/{kind}", event.id),
        fleet: fleet.to_owned(),
        revision: event.revision.clone(),
        cluster: event.cluster.clone(),
        metric: failure.map(|f| f.metric.clone()),
        value: failure.map(|f| f.value.clone()),
        message,
        time: event.at,
    };
    let name = event.cluster.as_deref().unwrap_or_default();
    // The cluster's reason, as its event says it after the cluster's name.
    let reason = event
        .message
        .strip_prefix(&format!("{name}: "))
        .unwrap_or(&event.message);
    let rolled_back = |failure: Option<&Failure>, with_metric: bool| {
        let why = match failure {
            Some(f) => format!("metric {} = {} ({})", f.metric, f.value, f.message),
            None => reason.to_owned(),
        };
        let message = format!(
            "{fleet}: cluster {name} rolled back from {}: {why}",
            first_image(&specs.next)
        );
        let mut out = vec![notification("rollout-aborted", message.clone(), failure)];
        if with_metric && failure.is_some() {
            out.push(notification("analysis-failed", message, failure));
        }
        out
    };
    match &event.decision {
        Decision::Paused {
            needs_human: true, ..
        } => vec![notification(
            "cluster-paused",
            format!("{fleet}: cluster {name} paused: {reason}"),
            None,
        )],
        Decision::Failed { failure, .. } | Decision::AbortedWithoutRejection { failure } => {
            rolled_back(failure.as_ref(), true)
        }
        Decision::RolledBack => rolled_back(None, false),
        Decision::WaveCompleted { .. } => {
            vec![notification("wave-completed", event.message.clone(), None)]
        }
        Decision::Phase {
            phase,
            failure,
            failed_cluster,
            ..
        } => {
            let kind = match phase {
                FleetPhase::Completed => "fleet-completed",
                FleetPhase::Halted => "fleet-halted",
                FleetPhase::Aborted => "fleet-aborted",
                _ => return Vec::new(),
            };
            let mut n = notification(kind, event.message.clone(), failure.as_ref());
            n.cluster = failed_cluster.clone();
            vec![n]
        }
        _ => Vec::new(),
    }
}

/// Starts a cluster's observation poller and action worker.
fn spawn_cluster(
    name: String,
    adapter: Arc<AgentCluster>,
    client: AgentClient,
    tick: Duration,
) -> ClusterHandle {
    let latest: Latest = Arc::new(Mutex::new(None));
    let poller = {
        let adapter = adapter.clone();
        let latest = latest.clone();
        tokio::spawn(async move {
            loop {
                let result = adapter
                    .observe_with_stable()
                    .await
                    .map_err(|e| e.to_string());
                *latest.lock().expect("observation lock") = Some((Instant::now(), result));
                tokio::time::sleep(tick.min(Duration::from_secs(1))).await;
            }
        })
    };
    let (tx, mut rx) = mpsc::unbounded_channel::<(Placement, Vec<Action>)>();
    let quiet = Arc::new(Quiet {
        outstanding: std::sync::atomic::AtomicUsize::new(0),
        since: Mutex::new(Instant::now()),
    });
    let worker = {
        let adapter = adapter.clone();
        let quiet = quiet.clone();
        tokio::spawn(async move {
            while let Some((placement, actions)) = rx.recv().await {
                adapter.set_placement(placement);
                for action in actions {
                    let mut delay = Duration::from_millis(200);
                    loop {
                        match execute(&adapter, &action).await {
                            Ok(()) => break,
                            Err(e) => {
                                tracing::warn!(cluster = %name, ?action, error = %e, "action failed; retrying");
                                tokio::time::sleep(delay).await;
                                delay = (delay * 2).min(Duration::from_secs(5));
                            }
                        }
                    }
                }
                if let Err(e) = adapter.settle().await {
                    tracing::debug!(cluster = %name, error = %e, "settle failed");
                }
                quiet.touch();
                quiet
                    .outstanding
                    .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            }
        })
    };
    ClusterHandle {
        adapter,
        builtin: BuiltinProvider::new(client),
        actions: tx,
        latest,
        quiet,
        placed: Mutex::new(Placement::default()),
        tasks: vec![poller, worker],
    }
}

async fn execute(
    adapter: &AgentCluster,
    action: &Action,
) -> Result<(), flotilla_core::rollout::ports::PortError> {
    match action {
        Action::Scale {
            revision,
            hash,
            replicas,
        } => adapter.ensure(*revision, hash, *replicas).await,
        Action::SetWeight { canary, stable } => adapter.set_weight(*canary, *stable).await,
        Action::MarkStable { revision } | Action::SwitchActive { revision } => {
            adapter.set_stable(*revision).await
        }
        Action::SetHeaderRoute { name, matches } => adapter.set_header_route(name, matches).await,
        Action::RemoveHeaderRoute { name } => adapter.remove_header_route(name).await,
        Action::SetMirrorRoute {
            name,
            matches,
            percentage,
        } => adapter.set_mirror_route(name, matches, *percentage).await,
        Action::RemoveMirrorRoute { name } => adapter.remove_mirror_route(name).await,
        // Analysis runs live in the fleet machine; events become audit entries; the spec
        // changes (undo, set image) are fleet commands here; preview has no agent subset.
        Action::StartAnalysis { .. }
        | Action::TerminateAnalysis { .. }
        | Action::Event { .. }
        | Action::RestoreRevision { .. }
        | Action::UpdateImage { .. }
        | Action::RestartPods { .. }
        | Action::SwitchPreview { .. } => Ok(()),
    }
}

/// Sends each plain read to the cluster's agent (`builtin`) or to the metric providers; a
/// composite metric's reads come through here one by one.
struct Routed<'a> {
    builtin: Option<&'a BuiltinProvider>,
    providers: &'a Providers,
}

impl Measurer for Routed<'_> {
    async fn measure(&self, request: &MeasureRequest) -> Outcome {
        if request.provider.builtin.is_some() {
            match self.builtin {
                Some(builtin) => builtin.measure(request).await,
                None => Outcome::Error(
                    "a wave analysis cannot use builtin metrics in `flotilla serve` (they read one cluster's agent); use a prometheus or web metric".into(),
                ),
            }
        } else {
            self.providers.measure(request).await
        }
    }
}

#[cfg(test)]
mod tests {
    use flotilla_core::fleet::{ClusterState, FleetSpecs};

    fn desired(image: &str) -> super::Desired {
        let controls: Vec<String> = (0..4)
            .map(|i| format!("http://127.0.0.1:{}", 1 + i))
            .collect();
        let text = crate::demo::manifests(&controls, 1.0).replace("payment-api:1.8.3", image);
        let load = flotilla_core::manifest::load_bytes("fleet.yaml", text.as_bytes());
        crate::controller::source::desired_from(&load.manifests, load.diagnostics, &[], "test")
            .desired
            .remove(0)
    }

    /// The wiring of a controller the tests drive by hand (no cluster is reached).
    fn wiring() -> super::Wiring {
        super::Wiring {
            providers: flotilla_providers::Providers::new().unwrap(),
            tick: std::time::Duration::from_secs(1),
            correct_drift: false,
            agent_tokens: Default::default(),
        }
    }

    /// Every decision of a simulated release (healthy, regressions, an abort, a supersede, an
    /// outage) maps to a typed audit entry carrying its id; a cluster waiting for a human is a
    /// `cluster-paused` notification naming what continues it, evidence on its way notifies no
    /// one; a failure notifies with its metric; every notification's id is its decision's.
    #[test]
    fn every_decision_is_an_audit_entry_and_the_right_notifications() {
        use flotilla_core::fleet::{Decision, PausedFor};
        let scenarios = [
            include_str!("../../../../examples/simulate/healthy.yaml"),
            include_str!("../../../../examples/simulate/regional-regression.yaml"),
            include_str!("../../../../examples/simulate/operator-abort.yaml"),
            include_str!("../../../../examples/simulate/superseded-release.yaml"),
            include_str!("../../../../examples/simulate/metrics-outage.yaml"),
            include_str!("../../../../examples/simulate/no-canary-traffic.yaml"),
        ];
        let mut kinds = std::collections::BTreeSet::new();
        let mut notified = std::collections::BTreeSet::new();
        for text in scenarios {
            let load = flotilla_core::manifest::load_bytes("s.yaml", text.as_bytes());
            let inputs = flotilla_core::simulate::Inputs::from_manifests(&load.manifests).unwrap();
            let report = flotilla_core::simulate::run(&inputs, 1).unwrap();
            let specs = FleetSpecs::new(inputs.rollout.clone());
            for event in &report.decisions {
                let entry = super::audit_entry("payment-api", event);
                assert_ne!(entry.kind, super::AuditKind::Unknown);
                assert_eq!(entry.decision.as_deref(), Some(event.id.as_str()));
                kinds.insert(entry.kind);
                for n in super::notifications_of("payment-api", &specs, event) {
                    assert!(n.id.starts_with(&event.id), "{n:?}");
                    notified.insert(n.event.clone());
                    if n.event == "analysis-failed" {
                        assert!(n.metric.is_some() && n.value.is_some(), "{n:?}");
                    }
                    if n.event == "cluster-paused" {
                        assert!(n.message.contains("paused: "), "{n:?}");
                    }
                }
                if let Decision::Paused {
                    paused_for: Some(PausedFor::Evidence),
                    needs_human: false,
                    ..
                } = event.decision
                {
                    assert!(super::notifications_of("payment-api", &specs, event).is_empty());
                }
            }
        }
        for kind in [
            "advance", "validate", "rollback", "wave", "fleet", "command",
        ] {
            assert!(kinds.iter().any(|k| *k == kind), "{kind}: {kinds:?}");
        }
        for event in [
            "rollout-aborted",
            "analysis-failed",
            "wave-completed",
            "fleet-completed",
        ] {
            assert!(notified.contains(event), "{event}: {notified:?}");
        }
    }

    /// A cluster added to the Fleet of a fleet that already has a record is adopted from what
    /// it runs before its first reconcile, as at a first start; one removed is forgotten.
    #[tokio::test]
    async fn a_cluster_new_to_a_resumed_fleet_is_adopted_not_deployed_to() {
        let wiring = wiring();
        let desired = desired("payment-api:1.8.3");
        let first = super::FleetController::new(&desired, None, &wiring).unwrap();
        assert_eq!(
            first.record.adopting.len(),
            4,
            "a first start adopts every cluster"
        );
        let mut stored = first.record.clone();
        stored.adopting.clear();
        stored.state.clusters.remove("prod-ap-south");
        stored.adopting.insert("gone-cluster".into());
        // The stored state is of another plan: a cluster the Fleet no longer has, fewer waves.
        stored
            .state
            .clusters
            .insert("gone-cluster".into(), ClusterState::default());
        stored.state.wave_started_at.truncate(1);
        stored.state.wave_completed_at.truncate(1);
        let resumed = super::FleetController::new(&desired, Some(stored), &wiring).unwrap();
        assert_eq!(
            resumed.record.adopting.iter().collect::<Vec<_>>(),
            ["prod-ap-south"]
        );
        // The machine is fitted to the plan: a tick would not index a missing wave or cluster.
        let state = resumed.machine.state();
        assert!(!state.clusters.contains_key("gone-cluster"));
        assert!(state.clusters.contains_key("prod-ap-south"));
        let waves = resumed.machine.plan().waves.len();
        assert_eq!(state.wave_started_at.len(), waves);
        assert_eq!(state.wave_completed_at.len(), waves);
    }
}
