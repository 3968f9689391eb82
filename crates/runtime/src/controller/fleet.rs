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
    ClusterMeasurement, ClusterObservation, ClusterOutcome, ClusterStatus, FleetCommand,
    FleetMachine, FleetPhase, FleetPlan, FleetState, PausedFor, Revisions,
};
use flotilla_core::rollout::ports::{TrafficRouter, WorkloadDriver};
use flotilla_core::rollout::{Action, AnalysisSlot, Observed, RolloutState, template_hash};
use flotilla_core::spec::rollout::Rollout;
use flotilla_providers::Providers;
use tokio::sync::{Semaphore, mpsc};

use super::record::{
    AuditEntry, ClusterView, Evidence, FailureView, FleetRecord, FleetSummary, FleetView,
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

/// Whether a Paused cluster waits for a human's `promote` or `abort` (an inconclusive run, a
/// pass without evidence, evidence past the progress deadline), not for evidence on its way.
fn needs_a_human(cluster: &flotilla_core::fleet::ClusterState) -> bool {
    match cluster.paused_for {
        Some(PausedFor::Inconclusive | PausedFor::NoEvidence) => true,
        Some(PausedFor::Evidence) => cluster.rollout.deadline_exceeded,
        Some(PausedFor::Halt) | None => false,
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
                    previous: desired.rollout.clone(),
                    next: desired.rollout.clone(),
                    history: Vec::new(),
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
        let mut machine = {
            let revisions = Revisions {
                previous: &record.previous,
                next: &record.next,
            };
            let state = resumed.then(|| record.state.clone());
            FleetMachine::new(plan.clone(), &revisions, state)
        };
        machine.set_overlays(desired.overlays.clone());
        // Every spec the record knows: a baseline the machine may name, a version an agent runs.
        let mut versions = BTreeMap::new();
        for spec in record
            .history
            .iter()
            .chain([&record.previous, &record.next])
        {
            machine.remember(spec);
            versions.insert(template_hash(spec), image_version(&first_image(spec)));
        }
        // Measurements in flight when the previous process died are taken again.
        for cluster in machine.state.clusters.values_mut() {
            for run in cluster.runs.values_mut() {
                run.abandon_in_flight();
            }
        }
        if let Some(wave_run) = machine.state.wave_run.as_mut() {
            wave_run.run.abandon_in_flight();
        }
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
        record.state = machine.state.clone();
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
            controller.record.state = controller.machine.state.clone();
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
                first_image(&self.record.next),
                errors.join("\n")
            )
        };
        if errors.is_empty() {
            tracing::info!(fleet = %self.record.name, "{message}");
        } else {
            tracing::error!(fleet = %self.record.name, "{message}");
        }
        self.invalid = errors;
        let revision = self.machine.state.revision.clone();
        self.pending.0.push(AuditEntry {
            seq: 0,
            time: now,
            fleet: self.record.name.clone(),
            revision: revision.clone(),
            kind: if self.invalid.is_empty() {
                "sync"
            } else {
                "invalid"
            }
            .into(),
            cluster: None,
            message: message.clone(),
            evidence: Vec::new(),
            operator: None,
        });
        if !self.invalid.is_empty() {
            self.pending.1.push(Notification {
                event: "desired-state-invalid".into(),
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
        if template_hash(&next) == template_hash(&self.record.next) {
            return;
        }
        let old_previous = self.record.previous.clone();
        let old_next = self.record.next.clone();
        self.machine.supersede(
            &Revisions {
                previous: &old_previous,
                next: &old_next,
            },
            &Revisions {
                previous: &old_next,
                next: &next,
            },
        );
        self.keep_in_history(old_previous);
        self.versions
            .insert(template_hash(&next), image_version(&first_image(&next)));
        self.machine.remember(&next);
        self.record.previous = old_next;
        self.record.next = next;
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
                        let state = if pin.rejects == self.machine.state.revision {
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
            audit.push(AuditEntry {
                seq: 0,
                time: now,
                fleet: self.record.name.clone(),
                revision: self.machine.state.revision.clone(),
                kind: "sync".into(),
                cluster: None,
                message: format!(
                    "commit {short}: overlays {}",
                    if described.is_empty() {
                        "none".to_owned()
                    } else {
                        described.join("; ")
                    }
                ),
                evidence: Vec::new(),
                operator: None,
            });
        }
        if hash == self.record.source_hash {
            self.record.state = self.machine.state.clone();
            return audit;
        }
        self.record.source_hash = hash.clone();
        let state = &self.machine.state;
        let agrees = hash == template_hash(&self.record.previous)
            && matches!(state.phase, FleetPhase::Halted | FleetPhase::Aborted)
            && !state
                .clusters
                .values()
                .any(|c| c.status == ClusterStatus::Validated);
        let message = if agrees {
            let spec = desired.rollout.clone();
            let rejections = state.rejections.clone();
            let engines: Vec<(String, RolloutState)> = state
                .clusters
                .iter()
                .map(|(name, c)| (name.clone(), c.rollout.clone()))
                .collect();
            let old_next = std::mem::replace(&mut self.record.next, spec.clone());
            self.keep_in_history(old_next);
            let plan = self.machine.plan.clone();
            self.machine = FleetMachine::new(
                plan,
                &Revisions {
                    previous: &spec,
                    next: &spec,
                },
                None,
            );
            for known in &self.record.history {
                self.machine.remember(known);
            }
            self.machine.set_overlays(desired.overlays.clone());
            self.machine.state.rejections = rejections;
            // Each cluster keeps its rollout engine's state, so that the engine sees the spec
            // return to its stable template: a canary still in flight (a cluster paused by the
            // halt) or aborted with its scale-down pending gets weight 0 and no replicas, as an
            // Argo rollback to the stable revision does; a fresh state would take the cluster
            // for a first deployment and leave the rejected canary where it stood.
            for (name, engine) in engines {
                if let Some(cluster) = self.machine.state.clusters.get_mut(&name) {
                    cluster.rollout = engine;
                }
            }
            self.record.previous = spec;
            format!(
                "commit {short}: Git agrees with the rollback ({}); nothing to roll out",
                first_image(&self.record.next)
            )
        } else {
            let (old_revision, old_phase) = (state.revision.clone(), state.phase);
            self.change_spec(desired.rollout.clone());
            let mut message = format!(
                "commit {short}: new desired revision {}",
                first_image(&self.record.next)
            );
            let revision = &self.machine.state.revision;
            if !old_revision.is_empty() && &old_revision != revision {
                message.push_str(&format!(
                    " (fleet revision {revision} supersedes {old_revision}, {})",
                    format!("{old_phase:?}").to_lowercase()
                ));
            }
            message
        };
        self.record.state = self.machine.state.clone();
        audit.push(AuditEntry {
            seq: 0,
            time: now,
            fleet: self.record.name.clone(),
            revision: self.machine.state.revision.clone(),
            kind: "sync".into(),
            cluster: None,
            message,
            evidence: Vec::new(),
            operator: None,
        });
        audit
    }

    /// The durable change Git needs, once per fleet revision (until [`Self::committed`]):
    /// - the fleet halted and no cluster was validated on the new revision: the Rollout's image
    ///   returns to the previous one for the whole fleet (seed 004's `git revert`);
    /// - some clusters were validated and others failed (the fleet halted or completed within
    ///   its failure budget): a pin of exactly the failed clusters in their overlays, naming the
    ///   revision it rejects.
    pub fn change_needed(&self) -> Option<super::source::GitChange> {
        use super::source::{Edit, GitChange};
        let state = &self.machine.state;
        if !matches!(state.phase, FleetPhase::Halted | FleetPhase::Completed) {
            return None;
        }
        // Committed for this revision already: only clusters that failed since (after a retry)
        // still need a pin; a revert is never made twice.
        let already = self.record.reverted.as_deref() == Some(state.revision.as_str());
        let validated: Vec<&String> = state
            .clusters
            .iter()
            .filter(|(_, c)| c.status == ClusterStatus::Validated)
            .map(|(n, _)| n)
            .collect();
        let failed: Vec<(&String, &flotilla_core::fleet::ClusterState)> = state
            .clusters
            .iter()
            .filter(|(n, c)| {
                c.status == ClusterStatus::RolledBack
                    && state
                        .rejections
                        .contains(&((*n).clone(), state.revision.clone()))
                    && !(already && self.record.pinned.contains(*n))
            })
            .collect();
        if already && (validated.is_empty() || failed.is_empty()) {
            return None;
        }
        let bad_image = first_image(&self.record.next);
        let good_image = first_image(&self.record.previous);
        if bad_image == good_image || bad_image.is_empty() || good_image.is_empty() {
            return None;
        }
        let rollout = self.record.next.metadata.name.clone().unwrap_or_default();
        let mut trailers = String::new();
        for (cluster, _) in &failed {
            trailers.push_str(&format!("Flotilla-Cluster: {cluster}\n"));
        }
        for (_, c) in &failed {
            if let Some(f) = &c.failure {
                trailers.push_str(&format!("Flotilla-Metric: {}={}\n", f.metric, f.value));
            }
        }
        trailers.push_str(&format!("Flotilla-Revision: {}\n", state.revision));
        let phase = format!("{:?}", state.phase).to_lowercase();
        if validated.is_empty() {
            if state.phase != FleetPhase::Halted {
                return None;
            }
            return Some(GitChange {
                rollout: rollout.clone(),
                revision: state.revision.clone(),
                edit: Edit::Revert {
                    bad_image: bad_image.clone(),
                    good_image: good_image.clone(),
                },
                body: format!(
                    "flotilla: roll {rollout} back to {good_image}\n\nFleet rollout {} halted on revision {} ({bad_image}): {}\nNo cluster was validated on it, so the whole fleet returns to {good_image}.",
                    self.record.name, state.revision, state.message
                ),
                trailers,
                proposal_branch: format!(
                    "flotilla/rollback-{}-{}",
                    self.record.name, state.revision
                ),
            });
        }
        if failed.is_empty() {
            return None;
        }
        let revisions = Revisions {
            previous: &self.record.previous,
            next: &self.record.next,
        };
        // Each failed cluster stays on what it runs now: its previous (or baseline) image.
        let clusters: Vec<(String, String)> = failed
            .iter()
            .map(|(name, _)| {
                let mut machine_spec = self
                    .machine
                    .cluster_spec(name, &revisions)
                    .map(|s| first_image(&s))
                    .unwrap_or_default();
                if machine_spec.is_empty() || machine_spec == bad_image {
                    machine_spec = good_image.clone();
                }
                ((*name).clone(), machine_spec)
            })
            .collect();
        let names: Vec<&str> = clusters.iter().map(|(c, _)| c.as_str()).collect();
        let reasons: Vec<String> = failed
            .iter()
            .map(|(name, c)| match &c.failure {
                Some(f) => format!("{name}: metric {} = {} ({})", f.metric, f.value, f.message),
                None => format!("{name}: {}", c.reason),
            })
            .collect();
        Some(GitChange {
            rollout: rollout.clone(),
            revision: state.revision.clone(),
            edit: Edit::Pin {
                clusters: clusters.clone(),
            },
            body: format!(
                "flotilla: pin {} of {rollout} to {}\n\nFleet rollout {} {phase} on revision {} ({bad_image}).\nFailed: {}.\nValidated and kept on {bad_image}: {}.\nThe pin rejects revision {} for the failed clusters only; it lapses when Git's desired revision changes (a fix-forward).",
                names.join(", "),
                clusters
                    .iter()
                    .map(|(_, i)| i.as_str())
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect::<Vec<_>>()
                    .join(", "),
                self.record.name,
                state.revision,
                reasons.join("; "),
                validated
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                state.revision
            ),
            trailers,
            proposal_branch: format!("flotilla/pin-{}-{}", self.record.name, state.revision),
        })
    }

    /// The durable change of `revision` reached Git (or Git already said it): never again.
    pub fn committed(&mut self, revision: &str, status: String, pinned: Vec<String>) {
        if self.record.reverted.as_deref() != Some(revision) {
            self.record.pinned.clear();
        }
        self.record.reverted = Some(revision.to_owned());
        self.record.pinned.extend(pinned);
        self.record.git_status = Some(status);
    }

    /// The durable change could not be committed yet (it is retried).
    pub fn git_failed(&mut self, status: String) {
        self.record.git_status = Some(status);
    }

    /// Adds a spec to the revision history (what `undo` returns to), once per pod template.
    fn keep_in_history(&mut self, spec: Rollout) {
        let hash = template_hash(&spec);
        if !self.record.history.iter().any(|h| template_hash(h) == hash) {
            self.record.history.push(spec);
        }
    }

    /// After a restart: every cluster's last intent again (all idempotent), since the process
    /// cannot know which of its last actions took effect.
    fn reassert(&mut self) {
        let names: Vec<String> = self.machine.state.clusters.keys().cloned().collect();
        for name in names {
            self.reassert_cluster(&name);
        }
    }

    /// One cluster's last intent again, with the spec it runs (overlay, pin or baseline).
    fn reassert_cluster(&mut self, name: &str) {
        self.learn_versions();
        let revisions = Revisions {
            previous: &self.record.previous,
            next: &self.record.next,
        };
        let Some(spec) = self.machine.cluster_spec(name, &revisions) else {
            return;
        };
        let cluster = &self.machine.state.clusters[name];
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
        let before = self.machine.state.clone();
        let mut fleet_commands = Vec::new();
        for queued in commands {
            out.consumed.push(queued.id);
            let mut entry = AuditEntry {
                seq: 0,
                time: now,
                fleet: self.record.name.clone(),
                revision: self.machine.state.revision.clone(),
                kind: "command".into(),
                cluster: None,
                message: describe_command(&queued.command),
                evidence: Vec::new(),
                operator: Some(queued.operator.clone()),
            };
            match &queued.command {
                OperatorCommand::Pause => fleet_commands.push(FleetCommand::Pause),
                OperatorCommand::Resume => fleet_commands.push(FleetCommand::Resume),
                OperatorCommand::Retry => fleet_commands.push(FleetCommand::Retry),
                OperatorCommand::Abort { cluster } => {
                    entry.cluster = cluster.clone();
                    fleet_commands.push(FleetCommand::Abort {
                        cluster: cluster.clone(),
                    });
                }
                OperatorCommand::Promote { wave, full } => {
                    fleet_commands.push(FleetCommand::Promote {
                        wave: *wave,
                        full: *full,
                        cluster: None,
                    });
                }
                OperatorCommand::SetImage { container, image } => {
                    match with_image(&self.record.next, container.as_deref(), image) {
                        Ok(next) => self.change_spec(next),
                        Err(e) => entry.message = format!("{}: refused: {e}", entry.message),
                    }
                }
                OperatorCommand::Undo { to_revision } => {
                    let mut specs = self.record.history.clone();
                    specs.push(self.record.previous.clone());
                    let target = match to_revision {
                        Some(n) => specs.get(n.saturating_sub(1)).cloned(),
                        None => Some(self.record.previous.clone()),
                    };
                    match target {
                        Some(spec) => self.change_spec(spec),
                        None => {
                            entry.message = format!("{}: refused: no such revision", entry.message)
                        }
                    }
                }
            }
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
                self.adopt(&name, stable, now, &mut out);
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
        let revisions = Revisions {
            previous: &self.record.previous,
            next: &self.record.next,
        };
        let output = self
            .machine
            .tick(&revisions, &observations, outcomes, &fleet_commands, now);
        for (cluster, action) in output.actions {
            out.actions.entry(cluster).or_default().push(action);
        }
        out.measurements = output.measurements;
        self.learn_versions();
        self.decisions(&before, now, &mut out);
        self.check_drift(&stable_versions, now, &mut out);
        self.record.state = self.machine.state.clone();
        out
    }

    /// First start: `name` was observed running `running` (its stable subset's version, or
    /// nothing) before the machine ever reconciled it. A cluster already on the manifest's
    /// version is adopted as it is; one on another version keeps it as its baseline and gets the
    /// manifest's revision through its wave, on evidence; only a cluster that runs nothing gets
    /// it directly (Argo's first deployment).
    fn adopt(&mut self, name: &str, running: Option<String>, now: Millis, out: &mut TickOutput) {
        let revisions = Revisions {
            previous: &self.record.previous,
            next: &self.record.next,
        };
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
        if !self.machine.adopt(name, &baseline) {
            // Reconciled already (a record of an earlier release): nothing to adopt.
            self.record.adopting.remove(name);
            return;
        }
        let hash = template_hash(&baseline);
        self.versions
            .insert(hash, image_version(&first_image(&baseline)));
        self.keep_in_history(baseline);
        self.record.adopting.remove(name);
        tracing::info!(fleet = %self.record.name, cluster = %name, "{message}");
        out.audit.push(AuditEntry {
            seq: 0,
            time: now,
            fleet: self.record.name.clone(),
            revision: self.machine.state.revision.clone(),
            kind: "adopt".into(),
            cluster: Some(name.to_owned()),
            message,
            evidence: Vec::new(),
            operator: None,
        });
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
            let Some(cluster) = self.machine.state.clusters.get(name) else {
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
            let status = self.machine.state.clusters[&name].status;
            let message = format!(
                "{name} ({status:?}): {why}; re-applying what was decided (held until it matches)"
            );
            tracing::warn!(fleet = %self.record.name, cluster = %name, "{message}");
            out.audit.push(AuditEntry {
                seq: 0,
                time: now,
                fleet: self.record.name.clone(),
                revision: self.machine.state.revision.clone(),
                kind: "repair".into(),
                cluster: Some(name.clone()),
                message,
                evidence: Vec::new(),
                operator: None,
            });
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
        let state = &self.machine.state;
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
        let entry = |cluster: &str, message: String| AuditEntry {
            seq: 0,
            time: now,
            fleet: fleet.clone(),
            revision: revision.clone(),
            kind: "drift".into(),
            cluster: Some(cluster.to_owned()),
            message,
            evidence: Vec::new(),
            operator: None,
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
            let Some(cluster) = self.machine.state.clusters.get(&name) else {
                continue;
            };
            let placement = self.placement(&cluster.rollout);
            if let Some(handle) = self.clusters.get(&name) {
                handle.send(placement, actions);
            }
        }
        // Placement for the observers, also where nothing acted.
        for (name, handle) in &self.clusters {
            if let Some(cluster) = self.machine.state.clusters.get(name) {
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

    /// Turns the difference between two states into audit entries and notifications.
    fn decisions(&self, before: &FleetState, now: Millis, out: &mut TickOutput) {
        let after = &self.machine.state;
        let fleet = self.record.name.clone();
        let revision = after.revision.clone();
        let entry =
            |kind: &str, cluster: Option<&str>, message: String, evidence: Vec<Evidence>| {
                AuditEntry {
                    seq: 0,
                    time: now,
                    fleet: fleet.clone(),
                    revision: revision.clone(),
                    kind: kind.into(),
                    cluster: cluster.map(str::to_owned),
                    message,
                    evidence,
                    operator: None,
                }
            };
        let notification = |event: &str, cluster: Option<&str>, message: String| Notification {
            event: event.into(),
            fleet: fleet.clone(),
            revision: revision.clone(),
            cluster: cluster.map(str::to_owned),
            metric: None,
            value: None,
            message,
            time: now,
        };
        if before.revision != after.revision && !before.revision.is_empty() {
            out.audit.push(entry(
                "fleet",
                None,
                format!(
                    "new fleet revision {} ({}) supersedes {}",
                    after.revision,
                    first_image(&self.record.next),
                    before.revision
                ),
                Vec::new(),
            ));
        }
        for (name, cluster) in &after.clusters {
            let old = before.clusters.get(name);
            let evidence = evidence_of(name, cluster);
            let old_status = old.map(|c| c.status);
            if old_status != Some(cluster.status) {
                let (kind, message) = match cluster.status {
                    ClusterStatus::Progressing => (
                        "advance",
                        format!("{name} starts revision {}", first_image(&self.record.next)),
                    ),
                    ClusterStatus::Validated => ("validate", format!("{name}: {}", cluster.reason)),
                    ClusterStatus::Paused => ("pause", format!("{name}: {}", cluster.reason)),
                    ClusterStatus::RolledBack => {
                        ("rollback", format!("{name}: {}", cluster.reason))
                    }
                    ClusterStatus::Held => ("hold", format!("{name}: {}", cluster.reason)),
                    ClusterStatus::Skipped => ("skip", format!("{name}: {}", cluster.reason)),
                    ClusterStatus::NotStarted => ("reset", format!("{name}: waits for its wave")),
                    ClusterStatus::Pinned => ("pin", format!("{name}: {}", cluster.reason)),
                };
                out.audit
                    .push(entry(kind, Some(name), message, evidence.clone()));
                if cluster.status == ClusterStatus::Paused && needs_a_human(cluster) {
                    out.notifications.push(notification(
                        "cluster-paused",
                        Some(name),
                        format!("{fleet}: cluster {name} paused: {}", cluster.reason),
                    ));
                }
                if cluster.status == ClusterStatus::RolledBack {
                    let (metric, value, why) = match &cluster.failure {
                        Some(f) => (
                            Some(f.metric.clone()),
                            Some(f.value.clone()),
                            format!("metric {} = {} ({})", f.metric, f.value, f.message),
                        ),
                        None => (None, None, cluster.reason.clone()),
                    };
                    let message = format!(
                        "{fleet}: cluster {name} rolled back from {}: {why}",
                        first_image(&self.record.next)
                    );
                    for event in ["rollout-aborted", "analysis-failed"] {
                        if event == "analysis-failed" && metric.is_none() {
                            continue;
                        }
                        let mut n = notification(event, Some(name), message.clone());
                        n.metric = metric.clone();
                        n.value = value.clone();
                        out.notifications.push(n);
                    }
                }
            }
            // A hold for evidence that runs past the progress deadline: the same Paused, now
            // for a human.
            if old_status == Some(ClusterStatus::Paused)
                && cluster.status == ClusterStatus::Paused
                && cluster.paused_for == Some(PausedFor::Evidence)
                && cluster.rollout.deadline_exceeded
                && !old.is_some_and(|o| o.rollout.deadline_exceeded)
            {
                out.audit.push(entry(
                    "pause",
                    Some(name),
                    format!("{name}: {}", cluster.reason),
                    evidence.clone(),
                ));
                out.notifications.push(notification(
                    "cluster-paused",
                    Some(name),
                    format!("{fleet}: cluster {name} paused: {}", cluster.reason),
                ));
            }
            for message in calibrations(name, old, cluster) {
                out.audit
                    .push(entry("calibrate", Some(name), message, Vec::new()));
            }
            let old_step = old.and_then(|c| c.rollout.step_index);
            if cluster.status == ClusterStatus::Progressing
                && old_step.is_some()
                && cluster.rollout.step_index > old_step
            {
                let steps = self.record.next.canary().map_or(0, |c| c.steps.len());
                out.audit.push(entry(
                    "advance",
                    Some(name),
                    format!(
                        "{name}: step {}/{steps} (canary weight {})",
                        cluster.rollout.step_index.unwrap_or(0),
                        cluster.rollout.desired_weight.unwrap_or(0)
                    ),
                    evidence,
                ));
            }
        }
        for (i, completed) in after.wave_completed_at.iter().enumerate() {
            let was = before.wave_completed_at.get(i).copied().flatten();
            if completed.is_some() && was.is_none() {
                let members = self.machine.plan.waves.get(i).cloned().unwrap_or_default();
                let message = format!("{fleet}: wave {} completed ({})", i + 1, members.join(", "));
                out.audit
                    .push(entry("wave", None, message.clone(), Vec::new()));
                out.notifications
                    .push(notification("wave-completed", None, message));
            }
        }
        if before.phase != after.phase {
            let message = format!("{fleet}: fleet {:?}: {}", after.phase, after.message);
            out.audit
                .push(entry("fleet", None, message.clone(), Vec::new()));
            let event = match after.phase {
                FleetPhase::Completed => Some("fleet-completed"),
                FleetPhase::Halted => Some("fleet-halted"),
                FleetPhase::Aborted => Some("fleet-aborted"),
                _ => None,
            };
            if let Some(event) = event {
                let mut n = notification(event, None, message);
                if let Some((name, c)) = after
                    .clusters
                    .iter()
                    .find(|(_, c)| c.failure.is_some() && c.status == ClusterStatus::RolledBack)
                {
                    n.cluster = Some(name.clone());
                    n.metric = c.failure.as_ref().map(|f| f.metric.clone());
                    n.value = c.failure.as_ref().map(|f| f.value.clone());
                }
                out.notifications.push(n);
            }
        }
    }

    /// The summary line of the list answer.
    pub fn summary(&self) -> FleetSummary {
        let state = &self.machine.state;
        FleetSummary {
            name: self.record.name.clone(),
            revision: state.revision.clone(),
            image: first_image(&self.record.next),
            phase: state.outcome(),
            wave: (state.wave + 1).min(self.machine.plan.waves.len()),
            waves: self.machine.plan.waves.len(),
            message: state.message.clone(),
            errors: self.invalid.clone(),
        }
    }

    /// The whole view: waves → clusters → step, weights, analysis.
    pub fn view(&self) -> FleetView {
        let state = &self.machine.state;
        let plan = &self.machine.plan;
        FleetView {
            name: self.record.name.clone(),
            revision: state.revision.clone(),
            image: first_image(&self.record.next),
            previous_image: first_image(&self.record.previous),
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
        let cluster = &self.machine.state.clusters[name];
        let engine = &cluster.rollout;
        let spec = if cluster.on_new_spec {
            &self.record.next
        } else {
            &self.record.previous
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
        let state = self.machine.state.clusters.get(cluster)?;
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
        &self.machine.plan
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

/// The calibrations a cluster's runs took since `old`: a calibrated metric's reference, read once
/// per run, is recorded in the audit log when it is taken, with the values and their source.
fn calibrations(
    name: &str,
    old: Option<&flotilla_core::fleet::ClusterState>,
    cluster: &flotilla_core::fleet::ClusterState,
) -> Vec<String> {
    let mut out = Vec::new();
    for (key, run) in cluster.runs.iter() {
        let old_run = old.and_then(|c| c.runs.get(key));
        for (i, metric) in run.metrics.iter().enumerate() {
            let known = old_run
                .and_then(|r| r.metrics.get(i))
                .is_some_and(|m| !m.calibration.is_empty());
            if !metric.calibration.is_empty() && !known {
                out.push(format!(
                    "{name}: {} calibrated against its own reference: {}",
                    metric.name,
                    flotilla_core::analysis::compare::baseline_summary(&metric.calibration)
                ));
            }
        }
    }
    out
}

/// The latest finished measurement of each metric of a cluster's runs.
fn evidence_of(name: &str, cluster: &flotilla_core::fleet::ClusterState) -> Vec<Evidence> {
    cluster
        .runs
        .values()
        .flat_map(|run| run.metrics.iter())
        .filter_map(|m| {
            let last = m
                .measurements
                .iter()
                .rev()
                .find(|x| x.finished_at.is_some())?;
            Some(Evidence {
                cluster: name.to_owned(),
                metric: m.name.clone(),
                phase: format!("{:?}", last.phase),
                value: last.value.clone(),
                message: last.message.clone(),
            })
        })
        .collect()
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
    use std::collections::BTreeMap;

    use flotilla_core::analysis::plan::resolve;
    use flotilla_core::analysis::run::Run;
    use flotilla_core::fleet::{ClusterState, FleetState};
    use flotilla_core::rollout::{AnalysisSlot, RunKey};
    use flotilla_core::spec::analysis::AnalysisTemplateSpec;

    use super::calibrations;

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

    /// A cluster that fails on a revision after its first pin was committed (a `retry`, then a
    /// failure elsewhere) gets a pin of its own; the clusters already pinned are not pinned again.
    /// The agents are never reached (nothing listens on their ports).
    /// The wiring of a controller the tests drive by hand (no cluster is reached).
    fn wiring() -> super::Wiring {
        super::Wiring {
            providers: flotilla_providers::Providers::new().unwrap(),
            tick: std::time::Duration::from_secs(1),
            correct_drift: false,
            agent_tokens: Default::default(),
        }
    }

    #[tokio::test]
    async fn a_later_failure_on_a_pinned_revision_is_pinned_too() {
        use flotilla_core::fleet::{ClusterStatus, FleetPhase};
        let wiring = wiring();
        let mut controller =
            super::FleetController::new(&desired("payment-api:1.8.3"), None, &wiring).unwrap();
        controller.sync(&desired("payment-api:1.9.0"), "c0ffee", 0);
        let revision = controller.machine.state.revision.clone();
        let fail = |controller: &mut super::FleetController, name: &str| {
            let state = &mut controller.machine.state;
            state.phase = FleetPhase::Halted;
            state.clusters.get_mut(name).unwrap().status = ClusterStatus::RolledBack;
            state.rejections.insert((name.to_owned(), revision.clone()));
        };
        for name in ["canary-eu-west", "prod-eu-west"] {
            controller
                .machine
                .state
                .clusters
                .get_mut(name)
                .unwrap()
                .status = ClusterStatus::Validated;
        }
        fail(&mut controller, "prod-us-east");
        let pinned =
            |change: Option<crate::controller::source::GitChange>| match change.map(|c| c.edit) {
                Some(crate::controller::source::Edit::Pin { clusters }) => {
                    clusters.into_iter().map(|(c, _)| c).collect::<Vec<_>>()
                }
                other => panic!("expected a pin, got {other:?}"),
            };
        assert_eq!(pinned(controller.change_needed()), ["prod-us-east"]);
        controller.committed(&revision, "pinned".into(), vec!["prod-us-east".into()]);
        assert!(controller.change_needed().is_none(), "committed once");
        fail(&mut controller, "prod-ap-south");
        assert_eq!(pinned(controller.change_needed()), ["prod-ap-south"]);
        controller.committed(&revision, "pinned".into(), vec!["prod-ap-south".into()]);
        assert!(controller.change_needed().is_none());
        assert_eq!(controller.record.pinned.len(), 2);
    }

    /// A cluster that waits for a human (an inconclusive run; later an EvidenceTimeout) is a
    /// `pause` audit entry and a `cluster-paused` notification naming what continues it; a
    /// cluster waiting for evidence on its way notifies nobody.
    #[tokio::test]
    async fn a_cluster_waiting_for_a_human_is_audited_and_notified() {
        use flotilla_core::fleet::{ClusterStatus, PausedFor};
        let mut controller =
            super::FleetController::new(&desired("payment-api:1.8.3"), None, &wiring()).unwrap();
        controller.sync(&desired("payment-api:1.9.0"), "c0ffee", 0);
        let set = |controller: &mut super::FleetController, paused_for, reason: &str| {
            let c = controller
                .machine
                .state
                .clusters
                .get_mut("prod-eu-west")
                .unwrap();
            c.status = ClusterStatus::Paused;
            c.paused_for = Some(paused_for);
            c.reason = reason.to_owned();
        };
        let decide = |controller: &mut super::FleetController, before: &FleetState| {
            let mut out = super::TickOutput::default();
            controller.decisions(before, 0, &mut out);
            out
        };
        // Waiting for evidence: audited, no notification.
        let before = controller.machine.state.clone();
        set(
            &mut controller,
            PausedFor::Evidence,
            "waiting for evidence: metric \"error-rate\": it errored at 14:02:10: refused",
        );
        let out = decide(&mut controller, &before);
        assert!(
            out.audit.iter().any(|e| e.kind == "pause"),
            "{:?}",
            out.audit
        );
        assert!(out.notifications.is_empty(), "{:?}", out.notifications);
        // Past the deadline: still Paused, now an EvidenceTimeout: audited and notified.
        let before = controller.machine.state.clone();
        set(
            &mut controller,
            PausedFor::Evidence,
            "EvidenceTimeout: waiting for evidence: … (past progressDeadlineSeconds; promote to accept, abort to roll back)",
        );
        controller
            .machine
            .state
            .clusters
            .get_mut("prod-eu-west")
            .unwrap()
            .rollout
            .deadline_exceeded = true;
        let out = decide(&mut controller, &before);
        assert!(
            out.audit
                .iter()
                .any(|e| e.kind == "pause" && e.message.contains("EvidenceTimeout"))
        );
        assert_eq!(out.notifications.len(), 1, "{:?}", out.notifications);
        assert_eq!(out.notifications[0].event, "cluster-paused");
        // An inconclusive run, from Progressing.
        controller
            .machine
            .state
            .clusters
            .get_mut("prod-eu-west")
            .unwrap()
            .status = ClusterStatus::Progressing;
        let before = controller.machine.state.clone();
        set(
            &mut controller,
            PausedFor::Inconclusive,
            "inconclusive: metric \"error-rate\" = [0.004]; promote to accept, abort to roll back",
        );
        let out = decide(&mut controller, &before);
        let n = &out.notifications[0];
        assert_eq!(n.event, "cluster-paused");
        assert_eq!(n.cluster.as_deref(), Some("prod-eu-west"));
        assert!(
            n.message.contains("promote to accept, abort to roll back"),
            "{}",
            n.message
        );
    }

    /// An outage is no verdict: a cluster aborted on an analysis error (no rejection) is never
    /// reverted or pinned in Git, alone or beside a cluster that failed.
    #[tokio::test]
    async fn a_cluster_aborted_on_an_error_changes_nothing_in_git() {
        use flotilla_core::fleet::{ClusterStatus, FleetPhase};
        let wiring = wiring();
        let mut controller =
            super::FleetController::new(&desired("payment-api:1.8.3"), None, &wiring).unwrap();
        controller.sync(&desired("payment-api:1.9.0"), "c0ffee", 0);
        let revision = controller.machine.state.revision.clone();
        let state = &mut controller.machine.state;
        state.clusters.get_mut("canary-eu-west").unwrap().status = ClusterStatus::Validated;
        let errored = state.clusters.get_mut("prod-eu-west").unwrap();
        errored.status = ClusterStatus::RolledBack;
        errored.aborted_on_error = true;
        // The fleet goes on (an error does not halt it), and even once it halts or completes for
        // another reason, the errored cluster is not Git's business.
        for phase in [
            FleetPhase::Progressing,
            FleetPhase::Halted,
            FleetPhase::Completed,
        ] {
            controller.machine.state.phase = phase;
            assert!(controller.change_needed().is_none(), "{phase:?}");
        }
        // Beside a cluster that failed, only the failed one is pinned.
        let state = &mut controller.machine.state;
        state.phase = FleetPhase::Halted;
        state.clusters.get_mut("prod-us-east").unwrap().status = ClusterStatus::RolledBack;
        state
            .rejections
            .insert(("prod-us-east".to_owned(), revision.clone()));
        match controller.change_needed().map(|c| c.edit) {
            Some(crate::controller::source::Edit::Pin { clusters }) => assert_eq!(
                clusters.into_iter().map(|(c, _)| c).collect::<Vec<_>>(),
                ["prod-us-east"]
            ),
            other => panic!("expected a pin of prod-us-east, got {other:?}"),
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
        let state = &resumed.machine.state;
        assert!(!state.clusters.contains_key("gone-cluster"));
        assert!(state.clusters.contains_key("prod-ap-south"));
        let waves = resumed.machine.plan.waves.len();
        assert_eq!(state.wave_started_at.len(), waves);
        assert_eq!(state.wave_completed_at.len(), waves);
    }

    #[test]
    fn a_calibration_is_recorded_once_when_a_run_takes_it() {
        let key = RunKey {
            revision: 2,
            attempt: 0,
            slot: AnalysisSlot::Background,
        };
        let template: AnalysisTemplateSpec = serde_json::from_value(serde_json::json!({
            "metrics": [{"name": "p95", "baseline": {"window": "30m"},
                "successCondition": "result[0] <= baseline.p95 * 1.2",
                "provider": {"builtin": {"metric": "latency", "quantile": 0.95}}}]
        }))
        .unwrap();
        let run = Run::new(&resolve(&template, &BTreeMap::new()).unwrap(), 0);
        let mut before = ClusterState::default();
        before.runs.insert(key, run.clone());
        let mut after = before.clone();
        after.runs.get_mut(&key).unwrap().metrics[0].calibration = BTreeMap::from([
            ("baseline.p95".to_owned(), "0.21200000000000002".to_owned()),
            (
                "baseline.source".to_owned(),
                "the stable subset in the 30m before the run started".to_owned(),
            ),
        ]);
        assert_eq!(
            calibrations("prod-us-east", Some(&before), &after),
            [
                "prod-us-east: p95 calibrated against its own reference: baseline from the stable subset in the 30m before the run started: p95=0.212"
            ]
        );
        assert!(calibrations("prod-us-east", Some(&after), &after).is_empty());
        assert!(calibrations("prod-us-east", Some(&before), &before).is_empty());
    }
}
