//! What the controller persists and serves: a fleet's durable record, operator commands, audit
//! entries, notifications, and the JSON views the API answers and the CLI draws.

use std::collections::BTreeMap;

use flotilla_core::analysis::Millis;
use flotilla_core::fleet::BarrierStatus;
use flotilla_core::fleet::{ClusterOverlay, FleetSpecs, FleetState};
use flotilla_core::spec::analysis::AnalysisTemplate;
use flotilla_core::spec::fleet::{Fleet, FleetRollout};
use flotilla_core::spec::rollout::Rollout;
use serde::{Deserialize, Serialize};

/// What the manifests say a fleet rollout should be. The last valid one is kept in the fleet's
/// record, so that a fleet whose manifests turn invalid keeps running it (per-fleet isolation),
/// also across a restart.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Desired {
    /// The Fleet.
    pub fleet: Fleet,
    /// The FleetRollout.
    pub fleet_rollout: FleetRollout,
    /// The Rollout.
    pub rollout: Rollout,
    /// The analysis templates.
    pub templates: Vec<AnalysisTemplate>,
    /// Per-cluster overlays (`clusters/<cluster>.yaml`), by cluster.
    #[serde(default)]
    pub overlays: BTreeMap<String, ClusterOverlay>,
    /// The values of the secrets the templates' arguments name, by (secret, key): read at load
    /// from the environment or the secrets directory, never persisted.
    #[serde(skip)]
    pub secrets: BTreeMap<(String, String), String>,
}

/// One fleet rollout's durable record: the specs it runs and the fleet machine's state.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetRecord {
    /// The FleetRollout's name.
    pub name: String,
    /// The specs: `previous`, `next` and `history` (what `undo` returns to; what baselines
    /// name), as fields of the record.
    #[serde(flatten)]
    pub specs: FleetSpecs,
    /// The pod-template hash of the Rollout as last read from the manifests: a change there
    /// is a new desired revision; an unchanged file keeps what `set image` or `undo` set.
    pub source_hash: String,
    /// The fleet machine's state.
    pub state: FleetState,
    /// The fleet revision whose durable rollback or pin was committed to Git (a revert at most
    /// once each).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverted: Option<String>,
    /// The clusters pinned in Git for the `reverted` revision (a cluster that fails on it later,
    /// after a retry, gets a pin of its own).
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub pinned: std::collections::BTreeSet<String>,
    /// The durable change's state in Git: where it was committed, or why it is not yet
    /// (retried with backoff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_status: Option<String>,
    /// The last valid desired state (absent in records of the release before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired: Option<Box<Desired>>,
    /// First start: the clusters not yet observed, whose running version decides their
    /// baseline before the machine ever reconciles them (empty in records of earlier
    /// releases, whose clusters were all taken as running the manifests).
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub adopting: std::collections::BTreeSet<String>,
    /// The ids of the latest commands issued in clusters (`<cluster>/<id>`, at most
    /// [`HEARD_KEPT`]) that a tick applied, persisted with it: a command heard again after a
    /// restart (the cluster still shows the patch) is not applied twice.
    #[serde(default, skip_serializing_if = "std::collections::VecDeque::is_empty")]
    pub heard: std::collections::VecDeque<String>,
}

/// How many applied cluster-command ids a record keeps.
pub const HEARD_KEPT: usize = 256;

/// An operator command, as accepted by the API and queued durably until a tick applies it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
///
/// Field names are camelCase like the variants (`{"command": "undo", "toRevision": 2}`); an
/// unknown field is an error that names it, never silently dropped.
#[serde(
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    tag = "command",
    deny_unknown_fields
)]
pub enum OperatorCommand {
    /// Skip the current bake or pause; `full` skips the remaining steps of the wave's clusters.
    Promote {
        /// A 1-based wave, or the current one.
        #[serde(default)]
        wave: Option<usize>,
        /// Skip every remaining step.
        #[serde(default)]
        full: bool,
    },
    /// Abort the fleet, or one cluster.
    Abort {
        /// One cluster, or the whole fleet.
        #[serde(default)]
        cluster: Option<String>,
    },
    /// Retry the failed clusters.
    Retry,
    /// Start no new cluster or wave.
    Pause,
    /// Resume.
    Resume,
    /// Roll the fleet to an earlier revision's spec (default: the one before the current).
    Undo {
        /// A 1-based revision number as `history` lists it (`to_revision` is what the release
        /// before 0.2 queued, read from stores it left).
        #[serde(default, alias = "to_revision")]
        to_revision: Option<usize>,
    },
    /// Set a container's image: a new fleet revision.
    SetImage {
        /// The container (default: the first).
        #[serde(default)]
        container: Option<String>,
        /// The image.
        image: String,
    },
}

impl OperatorCommand {
    /// Decodes a command strictly: an unknown field is refused by name, also for the commands
    /// without fields (serde's `deny_unknown_fields` does not reach an internally tagged enum's
    /// unit variants), so that nothing is ever run as a plainer command than it says.
    pub fn strict(given: &serde_json::Value) -> Result<OperatorCommand, String> {
        let command: OperatorCommand =
            serde_json::from_value(given.clone()).map_err(|e| e.to_string())?;
        // Every field of the command, serialized (none is skipped), plus undo's older spelling.
        let known = serde_json::to_value(&command).map_err(|e| e.to_string())?;
        if let (Some(given), Some(known)) = (given.as_object(), known.as_object()) {
            for field in given.keys() {
                let older = field == "to_revision" && known.contains_key("toRevision");
                if !known.contains_key(field) && !older {
                    let mut expected: Vec<&str> = known
                        .keys()
                        .map(String::as_str)
                        .filter(|k| *k != "command")
                        .collect();
                    expected.sort_unstable();
                    return Err(format!(
                        "unknown field `{field}` for {:?}; {}",
                        command.verb(),
                        if expected.is_empty() {
                            "it takes no field".to_owned()
                        } else {
                            format!("its fields are {}", expected.join(", "))
                        }
                    ));
                }
            }
        }
        Ok(command)
    }

    /// The verb, as the CLI names it.
    pub fn verb(&self) -> &'static str {
        match self {
            OperatorCommand::Promote { .. } => "promote",
            OperatorCommand::Abort { .. } => "abort",
            OperatorCommand::Retry => "retry",
            OperatorCommand::Pause => "pause",
            OperatorCommand::Resume => "resume",
            OperatorCommand::Undo { .. } => "undo",
            OperatorCommand::SetImage { .. } => "set image",
        }
    }
}

/// A queued command with who sent it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueuedCommand {
    /// Its id (store sequence).
    pub id: u64,
    /// The fleet.
    pub fleet: String,
    /// The command.
    pub command: OperatorCommand,
    /// Who sent it (the API's `x-flotilla-operator` header, or `operator`).
    pub operator: String,
    /// When it was accepted.
    pub accepted_at: Millis,
    /// The uid of its `FleetCommand` object, when it came from a hub (`hub.state: hub`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

pub use flotilla_core::fleet::Evidence;

/// What kind of decision an audit entry records (its JSON is the lowercase name, as the free
/// strings of earlier releases were). The fleet machine's decisions map to these one to one
/// (`fleet::decisions::audit_kind`); the daemon adds its own (commands it handles itself, the
/// source, repairs, drift, Git).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuditKind {
    /// An operator's command, accepted or refused.
    Command,
    /// A cluster started the revision or reached a step.
    Advance,
    /// A cluster's canary weight changed without a step.
    Weight,
    /// A rollout engine's own event (Argo's reason).
    Event,
    /// A cluster paused.
    Pause,
    /// A paused cluster goes on.
    Resume,
    /// A cluster was validated.
    Validate,
    /// A cluster was rolled back (failed, aborted without rejection, or with another).
    Rollback,
    /// A cluster was held.
    Hold,
    /// A cluster was skipped.
    Skip,
    /// A cluster waits for its wave again.
    Reset,
    /// A cluster was pinned.
    Pin,
    /// A wave started or completed.
    Wave,
    /// A wave's bake began or ended.
    Bake,
    /// A lockstep wave passed a barrier (the step, the cluster that arrived last and when).
    Barrier,
    /// A wave-level analysis verdict.
    Analysis,
    /// The fleet: a phase, a supersede, a settle.
    Fleet,
    /// A calibrated metric read its reference.
    Calibrate,
    /// A cluster adopted at first start.
    Adopt,
    /// A new desired state from the source.
    Sync,
    /// The desired state was refused.
    Invalid,
    /// A cluster repaired to what was decided.
    Repair,
    /// A cluster drifted from Git.
    Drift,
    /// A durable change decided, committed or not yet in Git.
    Gitops,
    /// A notification sent to a webhook sink or an Argo notification service, or given up.
    Notification,
    /// A kind this release does not know (written by a newer one).
    #[serde(other)]
    Unknown,
}

impl AuditKind {
    /// The kind's name, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditKind::Command => "command",
            AuditKind::Advance => "advance",
            AuditKind::Weight => "weight",
            AuditKind::Event => "event",
            AuditKind::Pause => "pause",
            AuditKind::Resume => "resume",
            AuditKind::Validate => "validate",
            AuditKind::Rollback => "rollback",
            AuditKind::Hold => "hold",
            AuditKind::Skip => "skip",
            AuditKind::Reset => "reset",
            AuditKind::Pin => "pin",
            AuditKind::Wave => "wave",
            AuditKind::Bake => "bake",
            AuditKind::Barrier => "barrier",
            AuditKind::Analysis => "analysis",
            AuditKind::Fleet => "fleet",
            AuditKind::Calibrate => "calibrate",
            AuditKind::Adopt => "adopt",
            AuditKind::Sync => "sync",
            AuditKind::Invalid => "invalid",
            AuditKind::Repair => "repair",
            AuditKind::Drift => "drift",
            AuditKind::Gitops => "gitops",
            AuditKind::Notification => "notification",
            AuditKind::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for AuditKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for AuditKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// One decision in the audit log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// Sequence number (store order).
    #[serde(default)]
    pub seq: u64,
    /// When, in Unix milliseconds.
    pub time: Millis,
    /// The fleet.
    pub fleet: String,
    /// The fleet revision.
    pub revision: String,
    /// What kind of decision.
    pub kind: AuditKind,
    /// The cluster, when one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// What happened.
    pub message: String,
    /// The measurements behind it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<Evidence>,
    /// The operator and command, when one caused it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    /// The fleet machine's decision this entry records (its event id), when one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
}

impl AuditEntry {
    /// An entry (no evidence, operator or decision: set them on the value).
    pub fn new(
        time: Millis,
        fleet: &str,
        revision: &str,
        kind: AuditKind,
        cluster: Option<&str>,
        message: String,
    ) -> AuditEntry {
        AuditEntry {
            seq: 0,
            time,
            fleet: fleet.to_owned(),
            revision: revision.to_owned(),
            kind,
            cluster: cluster.map(str::to_owned),
            message,
            evidence: Vec::new(),
            operator: None,
            decision: None,
        }
    }
}

/// A notification to deliver (at least once).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Notification {
    /// `rollout-aborted`, `analysis-failed`, `wave-completed`, `barrier-passed`, `fleet-completed`,
    /// `fleet-halted`, `fleet-aborted`, `desired-state-invalid`, `cluster-paused`.
    pub event: String,
    /// Stable across restarts, one per (decision, event): the idempotency key a receiver
    /// de-duplicates on (`{fleet}/{revision}/{n}/{event}`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// The fleet.
    pub fleet: String,
    /// The fleet revision.
    pub revision: String,
    /// The cluster, when one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The failing metric, when one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    /// Its value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// The human sentence.
    pub message: String,
    /// When, Unix milliseconds.
    pub time: Millis,
}

/// The API's answer for one fleet: waves → clusters → step, weights, analysis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetView {
    /// The FleetRollout.
    pub name: String,
    /// The fleet revision.
    pub revision: String,
    /// Its image.
    pub image: String,
    /// The image clusters ran before.
    pub previous_image: String,
    /// `Progressing`, `Paused`, `Completed`, `Halted`, `Aborted`.
    pub phase: String,
    /// Why.
    pub message: String,
    /// The wave in progress, 1-based.
    pub wave: usize,
    /// Whether an operator paused it.
    pub paused: bool,
    /// The durable rollback's state in Git (committed where, or the error it is retried on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<String>,
    /// The waves.
    pub waves: Vec<WaveView>,
    /// Errors in the fleet's latest desired state: it keeps running its last valid one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// One wave of a [`FleetView`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WaveView {
    /// 1-based.
    pub index: usize,
    /// Unix ms, or null.
    pub started_at: Option<Millis>,
    /// Unix ms, or null.
    pub completed_at: Option<Millis>,
    /// Its clusters.
    pub clusters: Vec<ClusterView>,
    /// Whether its clusters move in lockstep.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lockstep: bool,
    /// Its lockstep barrier, while the wave is in progress with clusters in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub barrier: Option<BarrierStatus>,
}

/// One cluster of a [`FleetView`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterView {
    /// The cluster.
    pub name: String,
    /// The fleet status: `NotStarted`, `Progressing`, `Validated`, `Paused`, `RolledBack`,
    /// `Held`, `Skipped`, `Pinned`.
    pub status: String,
    /// Why.
    pub reason: String,
    /// Whether it answered at the last tick.
    pub reachable: bool,
    /// The rollout's phase (`Progressing`, `Paused`, `Healthy`, `Degraded`).
    pub rollout_phase: String,
    /// The rollout's message.
    pub rollout_message: String,
    /// The canary step, `current/total`, when a canary.
    pub step: Option<String>,
    /// The weights in effect (canary, stable), as last observed.
    pub weights: Option<(i32, i32)>,
    /// The canary weight the engine asked for.
    pub desired_weight: Option<i32>,
    /// The stable revision's image version.
    pub stable_version: Option<String>,
    /// The current revision's image version.
    pub current_version: Option<String>,
    /// The failure that rolled it back.
    pub failure: Option<FailureView>,
    /// Unix ms.
    pub started_at: Option<Millis>,
    /// Unix ms.
    pub decided_at: Option<Millis>,
    /// Its analysis runs.
    pub analysis: Vec<RunView>,
    /// A version the cluster runs that Git does not say (outside a rollout), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<String>,
    /// Why the cluster refused its desired state (`Forbidden: cannot patch …`), or why it cannot
    /// be read (`Unreachable: …`, `Invalid endpoint.kubernetes.kubeconfig: …`), while it does:
    /// the cluster is held meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
}

/// A failure of a [`ClusterView`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailureView {
    /// The metric.
    pub metric: String,
    /// Its value.
    pub value: String,
    /// The verdict's message.
    pub message: String,
}

/// One analysis run of a [`ClusterView`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunView {
    /// Which run (`background`, `step-3`, …) and revision.
    pub name: String,
    /// Its phase.
    pub phase: String,
    /// Its message.
    pub message: String,
    /// Its metrics.
    pub metrics: Vec<MetricView>,
}

/// One metric of a [`RunView`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetricView {
    /// The metric.
    pub name: String,
    /// Its phase.
    pub phase: String,
    /// Measurements taken.
    pub count: u32,
    /// Failed measurements.
    pub failed: u32,
    /// The latest value.
    pub value: Option<String>,
    /// The latest verdict's message.
    pub message: Option<String>,
}

/// A fleet in the list answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetSummary {
    /// The FleetRollout.
    pub name: String,
    /// The fleet revision.
    pub revision: String,
    /// Its image.
    pub image: String,
    /// The phase.
    pub phase: String,
    /// The wave in progress, 1-based.
    pub wave: usize,
    /// Of how many.
    pub waves: usize,
    /// Why.
    pub message: String,
    /// Errors in the fleet's latest desired state (file:line:column: field: message): the fleet
    /// keeps running its last valid one. Empty when the manifests are valid.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// One cluster rollout in detail (`get rollout NAME --cluster C`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutView {
    /// The fleet's view of the cluster.
    pub cluster: ClusterView,
    /// Revisions the engine knows: (number, hash, version).
    pub revisions: Vec<(u32, String, String)>,
    /// The engine's pause conditions.
    pub pause_conditions: Vec<String>,
    /// Whether aborted.
    pub abort: bool,
    /// Replicas the engine asked for, per revision.
    pub desired_replicas: BTreeMap<u32, i32>,
    /// The canary steps the cluster runs, each as written (`{"setWeight":20}`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<String>,
}
