//! The rollout engine's vocabulary: what it observes, what operators command, what it decides
//! (actions), and the state it keeps between reconciles.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::spec::analysis::AnalysisPhase;
use crate::spec::rollout::{HeaderRoutingMatch, RouteMatch};
use crate::time::Millis;

/// Argo's integer revision: one per distinct pod template.
pub type RevisionNumber = u32;

/// A revision: its number and the hash of its pod template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revision {
    /// Argo's revision number.
    pub number: RevisionNumber,
    /// The pod-template hash (what Argo labels pods with).
    pub hash: String,
}

/// Which analysis of a rollout a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AnalysisSlot {
    /// An inline analysis step (its index).
    Step(u32),
    /// The canary's background analysis.
    Background,
    /// Blue-green pre-promotion analysis.
    PrePromotion,
    /// Blue-green post-promotion analysis.
    PostPromotion,
    /// A fleet's wave-level analysis (`waveAnalysis`) of wave N (1-based): run by the fleet
    /// machine once the wave is validated and baked, never started by the rollout engine.
    Wave(u32),
}

/// Identifies one analysis run: which analysis, for which revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RunKey {
    /// The revision under analysis.
    pub revision: RevisionNumber,
    /// Which attempt at updating to that revision (a `retry` starts a new one).
    pub attempt: u32,
    /// Which analysis.
    pub slot: AnalysisSlot,
}

/// Replica counts of one revision, as the workload driver reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ReplicaCounts {
    /// Replicas that exist.
    pub replicas: i32,
    /// Replicas that pass readiness.
    pub ready: i32,
    /// Replicas ready for at least minReadySeconds.
    pub available: i32,
}

/// The weights the traffic router reports in effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Weights {
    /// The canary's share.
    pub canary: i32,
    /// The stable's share.
    pub stable: i32,
}

/// What an analysis run reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunReport {
    /// The run's phase.
    pub phase: AnalysisPhase,
    /// The run's message (Argo's form).
    pub message: String,
    /// Whether an Inconclusive verdict should abort rather than pause (`onInconclusive`).
    pub abort_on_inconclusive: bool,
    /// Why a run still measuring has no current evidence (a wet metric without a fresh
    /// measurement with evidence), if it has none: the engine then holds a promotion to full
    /// weight rather than promote on stale or missing measurements. None when the driver does
    /// not judge freshness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale: Option<String>,
}

/// The world as observed at one reconcile.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Observed {
    /// Replica counts per revision.
    pub replicas: BTreeMap<RevisionNumber, ReplicaCounts>,
    /// Weights in effect (None: no router, or not reported).
    pub weights: Option<Weights>,
    /// Analysis runs' phases.
    pub analysis: BTreeMap<RunKey, RunReport>,
    /// The replicas the cluster's own Rollout asks for, when the cluster owns that number (an
    /// HorizontalPodAutoscaler scaling the Rollout, or the cluster's spec owner): revisions are
    /// sized by it instead of the spec's `replicas`, as Argo's controller sizes them by the
    /// live `spec.replicas`. None: the spec's.
    pub spec_replicas: Option<i32>,
}

impl Observed {
    /// Available replicas of a revision (0 when unknown).
    pub fn available(&self, revision: RevisionNumber) -> i32 {
        self.replicas.get(&revision).map_or(0, |c| c.available)
    }
}

/// Operator commands, with Argo's verbs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Command {
    /// Leave a pause or the current gate (`promote`), or skip every remaining step (`--full`).
    Promote {
        /// Skip all remaining steps, analysis and pauses.
        full: bool,
    },
    /// Return all traffic to the stable revision.
    Abort,
    /// After an abort, start the update again from the first step.
    Retry,
    /// Pause the rollout (`spec.paused`).
    Pause,
    /// Resume a paused rollout.
    Resume,
    /// Roll back to a revision's pod template (default: the previous revision).
    Undo {
        /// The revision to return to.
        to_revision: Option<RevisionNumber>,
    },
    /// Restart the pods of the running revisions.
    Restart,
    /// Set a container's image (a new pod template, hence a new revision).
    SetImage {
        /// The container's name.
        container: String,
        /// The new image.
        image: String,
    },
}

/// What the engine decides; the runtime executes these through the adapters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "action")]
pub enum Action {
    /// Ensure a revision runs this many replicas.
    Scale {
        /// The revision.
        revision: RevisionNumber,
        /// Its pod-template hash.
        hash: String,
        /// Desired replicas.
        replicas: i32,
    },
    /// Route this share of traffic to the canary and the rest to the stable.
    SetWeight {
        /// The canary's share.
        canary: i32,
        /// The stable's share (`maxTrafficWeight - canary`).
        stable: i32,
    },
    /// Send requests matching these headers to the canary.
    SetHeaderRoute {
        /// The managed route's name.
        name: String,
        /// The matches.
        matches: Vec<HeaderRoutingMatch>,
    },
    /// Remove a header route.
    RemoveHeaderRoute {
        /// The managed route's name.
        name: String,
    },
    /// Mirror a percentage of matching requests to the canary.
    SetMirrorRoute {
        /// The managed route's name.
        name: String,
        /// The matches.
        matches: Vec<RouteMatch>,
        /// The percentage mirrored.
        percentage: i32,
    },
    /// Remove a mirror route.
    RemoveMirrorRoute {
        /// The managed route's name.
        name: String,
    },
    /// Point the stable subset (canary) or the active service (blue-green) at a revision.
    MarkStable {
        /// The new stable revision.
        revision: RevisionNumber,
    },
    /// Point the blue-green active service at a revision.
    SwitchActive {
        /// The revision.
        revision: RevisionNumber,
    },
    /// Point the blue-green preview service at a revision.
    SwitchPreview {
        /// The revision.
        revision: RevisionNumber,
    },
    /// Start an analysis run.
    StartAnalysis {
        /// Which run.
        run: RunKey,
    },
    /// Terminate an analysis run (it completes with what it has).
    TerminateAnalysis {
        /// Which run.
        run: RunKey,
    },
    /// Write a revision's pod template back into the spec (`undo`).
    RestoreRevision {
        /// The revision whose template to restore.
        revision: RevisionNumber,
    },
    /// Change a container's image in the spec (`set image`).
    UpdateImage {
        /// The container.
        container: String,
        /// The image.
        image: String,
    },
    /// Restart the pods of a revision.
    RestartPods {
        /// The revision.
        revision: RevisionNumber,
    },
    /// Tell humans.
    Event {
        /// A short reason, as Kubernetes events have.
        reason: String,
        /// The message.
        message: String,
    },
}

/// The rollout's phase, computed as Argo computes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Phase {
    /// Moving toward the desired state.
    #[default]
    Progressing,
    /// Paused by an operator or a pause condition.
    Paused,
    /// Fully promoted and settled.
    Healthy,
    /// Aborted, invalid, or past its progress deadline.
    Degraded,
}

/// Why a rollout is paused (Argo's reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PauseReason {
    /// A canary pause step.
    CanaryPauseStep,
    /// A blue-green rollout waits for promotion.
    BlueGreenPause,
    /// An analysis run was Inconclusive.
    InconclusiveAnalysisRun,
    /// Flotilla's own: the step is complete, and the cluster waits at its lockstep wave's
    /// barrier for the rest of the wave before it enters the next step.
    LockstepBarrier,
}

/// A pause condition and when it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseCondition {
    /// Why.
    pub reason: PauseReason,
    /// Since when.
    pub start_time: Millis,
}

/// Everything the engine remembers between reconciles. Small (no pod templates: those live in
/// the shared spec and the runtime's template store), serializable, and restored as is.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutState {
    /// Known revisions, oldest first (bounded by revisionHistoryLimit + the live ones).
    pub revisions: Vec<Revision>,
    /// A fingerprint of the current revision's pod-template hash: the common "template
    /// unchanged" check compares this number instead of walking the revision history.
    #[serde(default)]
    pub current_fingerprint: u64,
    /// The stable revision.
    pub stable: Option<RevisionNumber>,
    /// The revision of the current pod template.
    pub current: Option<RevisionNumber>,
    /// The canary step being executed (== steps.len() once all are done).
    pub step_index: Option<u32>,
    /// When the current step started.
    pub step_started_at: Option<Millis>,
    /// Whether the update is aborted.
    pub abort: bool,
    /// When it was aborted.
    pub aborted_at: Option<Millis>,
    /// Why it was aborted (the cause in `RolloutAborted: …: <cause>`).
    pub abort_cause: String,
    /// Whether `promote --full` was requested.
    pub promote_full: bool,
    /// Whether an operator paused the rollout (`spec.paused`).
    pub paused: bool,
    /// Pause conditions in effect.
    pub pause_conditions: Vec<PauseCondition>,
    /// Whether the controller itself paused (inconclusive analysis).
    pub controller_pause: bool,
    /// The phase.
    pub phase: Phase,
    /// The phase's message.
    pub message: String,
    /// Replicas the engine last asked for, per revision.
    pub desired_replicas: BTreeMap<RevisionNumber, i32>,
    /// The canary weight the engine last asked for (routed canaries).
    pub desired_weight: Option<i32>,
    /// When that weight was asked for (to re-ask a router that did not apply it).
    pub weight_requested_at: Option<Millis>,
    /// The highest canary weight reached by a completed step (or the end of the steps).
    pub weight_ceiling: i32,
    /// Header routes in effect.
    pub header_routes: BTreeSet<String>,
    /// Mirror routes in effect.
    pub mirror_routes: BTreeSet<String>,
    /// A setCanaryScale in effect: (weight, replicas, matchTrafficWeight).
    pub canary_scale: Option<(Option<i32>, Option<i32>, bool)>,
    /// Analysis runs started and not yet terminated.
    pub runs: BTreeSet<RunKey>,
    /// Inconclusive runs an operator promoted past: they count as passed.
    pub overridden_runs: BTreeSet<RunKey>,
    /// The attempt number of the current update (incremented by `retry`).
    pub attempt: u32,
    /// Whether the background analysis was started for the current revision.
    pub background_started: bool,
    /// Revisions to scale to zero at a time.
    pub scale_down_at: BTreeMap<RevisionNumber, Millis>,
    /// Since when the engine has been waiting on replicas or the router (progress deadline).
    pub waiting_since: Option<Millis>,
    /// Whether the progress deadline was exceeded.
    pub deadline_exceeded: bool,
    /// Why the promotion to full weight is held for want of current evidence, while it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_hold: Option<String>,
    /// Blue-green: the revision behind the active service.
    pub active: Option<RevisionNumber>,
    /// Blue-green: the revision behind the preview service.
    pub preview: Option<RevisionNumber>,
    /// Blue-green: when the preview became fully available.
    pub preview_ready_at: Option<Millis>,
    /// Blue-green: whether the operator (or auto-promotion) allowed the switch.
    pub promotion_allowed: bool,
    /// Blue-green: whether traffic was switched to the new revision.
    pub switched: bool,
    /// A lockstep barrier, set by the fleet before each reconcile: the highest canary step
    /// index the rollout may enter (blue-green: 1 lets it switch). A step completed at the
    /// barrier holds the rollout with a `LockstepBarrier` pause condition. None: no barrier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub barrier: Option<u32>,
}

impl RolloutState {
    /// The revision record of a number.
    pub fn revision(&self, number: RevisionNumber) -> Option<&Revision> {
        self.revisions.iter().find(|r| r.number == number)
    }

    /// The hash of a revision ("" when unknown).
    pub fn hash(&self, number: RevisionNumber) -> String {
        self.revision(number)
            .map(|r| r.hash.clone())
            .unwrap_or_default()
    }

    /// Whether a pause condition with this reason is in effect.
    pub fn has_pause(&self, reason: PauseReason) -> bool {
        self.pause_conditions.iter().any(|p| p.reason == reason)
    }

    /// Steps completed, one held at a lockstep barrier included (blue-green: 1 once ready to
    /// switch, or switched): what a lockstep barrier compares.
    pub fn lockstep_progress(&self) -> u32 {
        let held = u32::from(self.has_pause(PauseReason::LockstepBarrier));
        let done = if self.switched {
            1
        } else {
            self.step_index.unwrap_or(0)
        };
        done + held
    }

    /// Since when the rollout has waited at a lockstep barrier, while it does.
    pub fn at_barrier_since(&self) -> Option<Millis> {
        self.pause_conditions
            .iter()
            .find(|p| p.reason == PauseReason::LockstepBarrier)
            .map(|p| p.start_time)
    }

    /// Whether the lockstep barrier lets the rollout enter step index `index`; when it does
    /// not, the rollout waits at it (a `LockstepBarrier` pause condition, once).
    pub(crate) fn pass_barrier(&mut self, index: u32, now: Millis) -> bool {
        if self.barrier.is_none_or(|cap| index <= cap) {
            self.pause_conditions
                .retain(|p| p.reason != PauseReason::LockstepBarrier);
            return true;
        }
        if !self.has_pause(PauseReason::LockstepBarrier) {
            self.pause_conditions.push(PauseCondition {
                reason: PauseReason::LockstepBarrier,
                start_time: now,
            });
        }
        self.waiting_since = None;
        false
    }
}
