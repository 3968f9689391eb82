//! The fleet machine's state, serializable and restored as is: where each cluster stands (its
//! status, rollout engine and analysis runs), the fleet's phase and waves, and the durable
//! rejections.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::sorted::{AsPairs, NameMap, SortedMap};
use crate::analysis::run::Run;
use crate::rollout::{AnalysisSlot, Command, RolloutState, RunKey};
use crate::time::Millis;

/// Where one cluster stands in the fleet rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ClusterStatus {
    /// Its wave has not started.
    #[default]
    NotStarted,
    /// Updating to the new revision.
    Progressing,
    /// Healthy on the new revision, every gating metric with evidence.
    Validated,
    /// Stopped: inconclusive analysis, a pass without evidence, or the fleet halted around it.
    Paused,
    /// Its analysis failed; it was (or is being) returned to its previous stable.
    RolledBack,
    /// Never started because the fleet halted (durable: not a candidate until a new revision).
    Held,
    /// Unreachable past its timeout and skipped by policy; never counted validated.
    Skipped,
    /// Held to an image by its overlay (its own `image`, or the controller's pin of a rejected
    /// revision): outside the fleet rollout, decided for the wave gate, never validated.
    Pinned,
}

/// The fleet rollout's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum FleetPhase {
    /// Waves in progress.
    #[default]
    Progressing,
    /// Paused by an operator.
    Paused,
    /// Every wave validated.
    Completed,
    /// Stopped by the failure policy.
    Halted,
    /// Stopped by an operator's abort.
    Aborted,
}

/// The failure that decided a cluster's rollback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// The failing metric.
    pub metric: String,
    /// Its last value.
    pub value: String,
    /// The verdict's message.
    pub message: String,
}

/// One cluster's state in the fleet machine.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterState {
    /// Where it stands.
    pub status: ClusterStatus,
    /// Its rollout engine's state.
    pub rollout: RolloutState,
    /// Its analysis runs.
    pub runs: RunMap,
    /// Whether the cluster runs the new revision's spec (else the previous one).
    pub on_new_spec: bool,
    /// When it started the new revision.
    pub started_at: Option<Millis>,
    /// When it was decided (validated, rolled back, skipped).
    pub decided_at: Option<Millis>,
    /// Why it is where it is.
    pub reason: String,
    /// The failure that rolled it back.
    pub failure: Option<Failure>,
    /// Since when it has been unreachable.
    pub unreachable_since: Option<Millis>,
    /// Commands queued for its rollout engine.
    pub pending: Vec<Command>,
    /// An operator aborted it: the abort is given to its engine again until the engine holds
    /// it (one that came before the engine made the new revision found nothing to abort).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub abort_requested: bool,
    /// The pod-template hash the cluster runs while not on the new spec, when a supersede left
    /// it on something other than the revision's `previous` spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    /// Its canary was aborted because an analysis run ended in Error (a provider outage, a
    /// run that could not be planned): no verdict on the version, so no rejection and no
    /// durable change; the wave waits for `retry` instead of counting it decided.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub aborted_on_error: bool,
    /// Why it is Paused, when it is: what a human decides, and what continues it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_for: Option<PausedFor>,
    /// An operator promoted it while it was Paused for want of a verdict (inconclusive, no
    /// evidence, evidence that never came): accepted without one on this attempt.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub accepted: bool,
}

/// Why a cluster is Paused (its `reason` says it in words, with the commands that continue it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PausedFor {
    /// It was progressing when the fleet halted; its analysis goes on; `retry` resumes it.
    Halt,
    /// Its promotion waits for current evidence (`EvidenceTimeout` past the progress deadline);
    /// it goes on when a fresh measurement arrives.
    Evidence,
    /// An analysis run was Inconclusive: `promote` accepts, `abort` rolls back.
    Inconclusive,
    /// Healthy on the new revision, but a run passed without evidence (or there is no
    /// analysis): `promote` accepts, `abort` rolls back.
    NoEvidence,
    /// Its step is complete and it waits at its lockstep wave's barrier for the clusters not
    /// there yet (its analysis goes on); `promote --wave N` releases the barrier.
    Barrier,
}

/// The fleet machine's state: serializable, restored as is.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetState {
    /// The fleet revision being rolled out.
    pub revision: String,
    /// The phase.
    pub phase: FleetPhase,
    /// Why (names the failing cluster, metric and value when Halted).
    pub message: String,
    /// The wave in progress (0-based).
    pub wave: usize,
    /// When each wave started.
    pub wave_started_at: Vec<Option<Millis>>,
    /// When each wave was complete (validated and baked).
    pub wave_completed_at: Vec<Option<Millis>>,
    /// When the current wave's bake began.
    pub bake_started_at: Option<Millis>,
    /// Per cluster.
    pub clusters: NameMap<ClusterState>,
    /// Durable rejections: (cluster, fleet revision) never deployed again.
    pub rejections: BTreeSet<(String, String)>,
    /// Operator pause.
    pub paused: bool,
    /// The wave-level analysis (`waveAnalysis`) of the latest wave that ran one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave_run: Option<WaveRun>,
    /// Decisions numbered so far (each fleet event's id counts from it).
    #[serde(default)]
    pub event_seq: u64,
    /// The barrier of the wave in progress, when it moves in lockstep and has clusters in
    /// flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub barrier: Option<Barrier>,
}

/// A lockstep wave's barrier: the steps its clusters passed together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Barrier {
    /// The wave (0-based).
    pub wave: usize,
    /// The fleet revision it is of.
    pub revision: String,
    /// Barriers passed: the highest canary step index the wave's clusters may enter (a
    /// blue-green wave: 1 once it may switch).
    pub released: u32,
}

impl FleetState {
    /// The phase as reported (`get fleet`, the API, `flotilla simulate`): the phase's name,
    /// except that a fleet Completed with skipped clusters is `CompletedWithSkips` (a skip is
    /// final and no success).
    pub fn outcome(&self) -> String {
        if self.phase == FleetPhase::Completed
            && self
                .clusters
                .values()
                .any(|c| c.status == ClusterStatus::Skipped)
        {
            return "CompletedWithSkips".into();
        }
        format!("{:?}", self.phase)
    }
}

/// A wave-level analysis run: one per wave, started once every cluster of the wave is decided
/// and the bake time has elapsed. Its measurements are keyed by
/// `RunKey { revision: 0, attempt, slot: AnalysisSlot::Wave(wave + 1) }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WaveRun {
    /// The wave (0-based).
    pub wave: usize,
    /// Which attempt (a resume after Inconclusive, or a retry after Failed, starts another).
    pub attempt: u32,
    /// The run.
    pub run: Run,
    /// Whether its verdict was acted on (the fleet paused or halted on it): a fleet that
    /// progresses again past a settled run that did not pass starts a new attempt.
    pub settled: bool,
}

impl WaveRun {
    /// The key its measurements carry.
    pub fn key(&self) -> RunKey {
        RunKey {
            revision: 0,
            attempt: self.attempt,
            slot: AnalysisSlot::Wave(self.wave as u32 + 1),
        }
    }
}

/// A cluster's analysis runs by key: a short list kept sorted by key (a cluster has a handful
/// of runs, and in a large fleet a map's node would cost more than the runs it holds).
/// Serialized as a list of (key, run) pairs (JSON maps need string keys).
pub type RunMap = SortedMap<RunKey, Run, AsPairs>;
