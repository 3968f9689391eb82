//! The fleet machine's decisions as typed events, each emitted where the decision is made and
//! returned in the tick's output: what the daemon's audit log, its notifications and the
//! simulator's report are written from (no one reconstructs a decision by comparing states).

use serde::{Deserialize, Serialize};

use super::commands::FleetCommand;
use super::state::{ClusterState, Failure, FleetPhase, PausedFor};
use crate::spec::analysis::AnalysisPhase;
use crate::time::Millis;

/// One decision of the fleet machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetEvent {
    /// Stable: `{fleet}/{revision}/{n}`, `n` counted in the machine's persisted state, so the
    /// same decision has the same id after a restart (the notification's idempotency key).
    pub id: String,
    /// When it was decided (the tick's `now`).
    pub at: Millis,
    /// The fleet revision it concerns.
    pub revision: String,
    /// The cluster, when one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The sentence a human reads.
    pub message: String,
    /// The measurements behind it (each metric's latest finished one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<Evidence>,
    /// What was decided.
    pub decision: Decision,
}

/// One measurement that informed a decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Evidence {
    /// The cluster.
    pub cluster: String,
    /// The metric.
    pub metric: String,
    /// The measurement's phase.
    pub phase: String,
    /// The value.
    pub value: String,
    /// The verdict's message.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// The durable change Git needs after a fleet revision failed somewhere
/// ([`super::FleetMachine::durable_change`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DurableChange {
    /// The fleet revision it answers.
    pub revision: String,
    /// What it changes.
    pub edit: DurableEdit,
    /// The rejected image.
    pub bad_image: String,
    /// The image the fleet ran before.
    pub good_image: String,
    /// The clusters that failed on the revision, each with the image it stays on.
    pub failed: Vec<FailedCluster>,
    /// The clusters validated on it (kept there by a pin).
    pub validated: Vec<String>,
}

/// The edit of a [`DurableChange`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum DurableEdit {
    /// No cluster was validated and the fleet halted: the whole fleet's image returns to the
    /// previous one (seed 004's `git revert`).
    Revert,
    /// Some clusters were validated, others failed: exactly the failed clusters are pinned to
    /// what they run (their overlays), naming the revision the pin rejects.
    Pin,
}

/// A cluster that failed on a revision, in a [`DurableChange`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailedCluster {
    /// The cluster.
    pub name: String,
    /// The image it stays on (its previous or baseline image).
    pub image: String,
    /// The failing metric, when one decided it.
    pub failure: Option<Failure>,
    /// Why, in words.
    pub reason: String,
}

/// What the machine decided. Closed: a new kind of decision is a new variant, which the
/// daemon's exhaustive mapping to an audit kind then has to name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Decision {
    /// A cluster was adopted at the controller's first start from what it runs.
    Adopted,
    /// A cluster started the new revision (its wave allowed it).
    ClusterStarted,
    /// A cluster's rollout reached a step.
    StepReached {
        /// 1-based step reached (of `steps`).
        step: u32,
        /// The steps of its canary.
        steps: u32,
        /// The canary weight set there.
        weight: i32,
    },
    /// A cluster's canary weight changed without a step (an abort to 0, a full promotion).
    WeightSet {
        /// The canary weight.
        weight: i32,
    },
    /// A rollout engine's own event, with Argo's reason (`RolloutAborted`, `RolloutPaused`…).
    RolloutEvent {
        /// Argo's event reason.
        reason: String,
    },
    /// A cluster paused.
    Paused {
        /// Why, when a state says it.
        paused_for: Option<PausedFor>,
        /// Whether only a human continues it (a notification is sent).
        needs_human: bool,
        /// Argo's condition reason, where one exists (`InconclusiveAnalysisRun`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        condition: Option<String>,
    },
    /// A paused cluster goes on (its evidence came, the hold or the halt is over).
    Resumed,
    /// Validated on the new revision.
    Validated {
        /// By an operator's promote, without a verdict.
        accepted: bool,
    },
    /// Its analysis failed (or an operator aborted it): rolled back, the revision rejected for it.
    Failed {
        /// The failing metric, when a metric decided it.
        failure: Option<Failure>,
        /// Argo's condition reason (`RolloutAborted`).
        condition: String,
    },
    /// Its canary was aborted on no verdict (an analysis error, the progress deadline): nothing
    /// rejected, nothing counted, `retry` starts it again.
    AbortedWithoutRejection {
        /// The errored metric, when one.
        failure: Option<Failure>,
    },
    /// Rolled back with another failure (a widened `rollbackScope`).
    RolledBack,
    /// Never started: the fleet halted or was aborted (or its pin lifted meanwhile).
    Held,
    /// Unreachable past its timeout and skipped by policy.
    Skipped,
    /// Waits for its wave again (a retry, a new revision, a lifted pin).
    Reset,
    /// Held to an image by its overlay or the controller's pin.
    Pinned,
    /// A wave started.
    WaveStarted {
        /// 1-based.
        wave: usize,
    },
    /// A wave's bake began (every cluster decided).
    BakeStarted {
        /// 1-based.
        wave: usize,
        /// Its length (ms).
        bake_ms: u64,
    },
    /// A wave's bake ended.
    BakeEnded {
        /// 1-based.
        wave: usize,
    },
    /// A wave's wave-level analysis reached a verdict the fleet acted on.
    WaveAnalysis {
        /// 1-based.
        wave: usize,
        /// The run's phase.
        phase: AnalysisPhase,
    },
    /// A lockstep wave passed a barrier: its clusters enter the next step together.
    BarrierPassed {
        /// 1-based.
        wave: usize,
        /// The step completed by every cluster (1-based, of `steps`; a blue-green wave's
        /// single barrier is before its switch, step 1 of 1).
        step: u32,
        /// The steps of the wave's Rollout.
        steps: u32,
        /// The clusters that arrived last (several when they arrived at the same reconcile),
        /// when every one arrived.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        last_arrived: Vec<String>,
        /// When they arrived (ms).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        last_arrived_at: Option<Millis>,
        /// The clusters released at the barrier.
        released: Vec<String>,
        /// The clusters not there yet, when an operator released the barrier early.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        not_there: Vec<String>,
    },
    /// A wave completed (validated and baked).
    WaveCompleted {
        /// 1-based.
        wave: usize,
        /// Its clusters.
        clusters: Vec<String>,
    },
    /// A new fleet revision superseded the one in flight.
    Superseded {
        /// The fleet revision superseded.
        previous: String,
    },
    /// The fleet settled on its previous revision (Git agreed with the rollback).
    Settled,
    /// The fleet's phase changed.
    Phase {
        /// The new phase.
        phase: FleetPhase,
        /// The cluster whose failure caused it, when one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failed_cluster: Option<String>,
        /// Its failure.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure: Option<Failure>,
    },
    /// A calibrated metric read its reference.
    Calibrated {
        /// The metric.
        metric: String,
    },
    /// A durable change to Git was decided.
    DurableChange {
        /// What Git gets.
        change: DurableChange,
    },
    /// An operator's command was carried out.
    CommandAccepted {
        /// The command.
        command: FleetCommand,
    },
    /// An operator's command was refused.
    CommandRefused {
        /// The command.
        command: FleetCommand,
        /// Why.
        why: String,
    },
}

impl Decision {
    /// Every variant's name, as [`Decision::name`] gives it (for coverage tests).
    pub const NAMES: &'static [&'static str] = &[
        "adopted",
        "clusterStarted",
        "stepReached",
        "weightSet",
        "rolloutEvent",
        "paused",
        "resumed",
        "validated",
        "failed",
        "abortedWithoutRejection",
        "rolledBack",
        "held",
        "skipped",
        "reset",
        "pinned",
        "waveStarted",
        "bakeStarted",
        "bakeEnded",
        "waveAnalysis",
        "barrierPassed",
        "waveCompleted",
        "superseded",
        "settled",
        "phase",
        "calibrated",
        "durableChange",
        "commandAccepted",
        "commandRefused",
    ];

    /// The variant's name (its `kind` in JSON).
    pub fn name(&self) -> &'static str {
        match self {
            Decision::Adopted => "adopted",
            Decision::ClusterStarted => "clusterStarted",
            Decision::StepReached { .. } => "stepReached",
            Decision::WeightSet { .. } => "weightSet",
            Decision::RolloutEvent { .. } => "rolloutEvent",
            Decision::Paused { .. } => "paused",
            Decision::Resumed => "resumed",
            Decision::Validated { .. } => "validated",
            Decision::Failed { .. } => "failed",
            Decision::AbortedWithoutRejection { .. } => "abortedWithoutRejection",
            Decision::RolledBack => "rolledBack",
            Decision::Held => "held",
            Decision::Skipped => "skipped",
            Decision::Reset => "reset",
            Decision::Pinned => "pinned",
            Decision::WaveStarted { .. } => "waveStarted",
            Decision::BakeStarted { .. } => "bakeStarted",
            Decision::BakeEnded { .. } => "bakeEnded",
            Decision::WaveAnalysis { .. } => "waveAnalysis",
            Decision::BarrierPassed { .. } => "barrierPassed",
            Decision::WaveCompleted { .. } => "waveCompleted",
            Decision::Superseded { .. } => "superseded",
            Decision::Settled => "settled",
            Decision::Phase { .. } => "phase",
            Decision::Calibrated { .. } => "calibrated",
            Decision::DurableChange { .. } => "durableChange",
            Decision::CommandAccepted { .. } => "commandAccepted",
            Decision::CommandRefused { .. } => "commandRefused",
        }
    }
}

/// Events decided since the last tick's output, waiting for their id.
#[derive(Debug, Default)]
pub(crate) struct Pending(Vec<FleetEvent>);

impl Pending {
    /// A decision about `cluster` (or the fleet), at `at` (`None`: the next tick's `now`).
    pub(crate) fn push(
        &mut self,
        at: Option<Millis>,
        cluster: Option<&str>,
        decision: Decision,
        message: String,
    ) {
        self.0.push(FleetEvent {
            id: String::new(),
            at: at.unwrap_or(Millis::MIN),
            revision: String::new(),
            cluster: cluster.map(str::to_owned),
            message,
            evidence: Vec::new(),
            decision,
        });
    }

    /// [`Pending::push`] with the cluster's evidence (each metric's latest finished measurement).
    pub(crate) fn push_with_evidence(
        &mut self,
        at: Millis,
        name: &str,
        cluster: &ClusterState,
        decision: Decision,
        message: String,
    ) {
        self.push(Some(at), Some(name), decision, message);
        if let Some(event) = self.0.last_mut() {
            event.evidence = evidence_of(name, cluster);
        }
    }

    /// The events, numbered from `seq` (which is advanced), for `fleet` at `revision`.
    pub(crate) fn take(
        &mut self,
        fleet: &str,
        revision: &str,
        seq: &mut u64,
        now: Millis,
    ) -> Vec<FleetEvent> {
        let mut events = std::mem::take(&mut self.0);
        for event in &mut events {
            *seq += 1;
            event.id = format!("{fleet}/{revision}/{seq}");
            event.revision = revision.to_owned();
            if event.at == Millis::MIN {
                event.at = now;
            }
        }
        events
    }
}

/// The latest finished measurement of each metric of a cluster's runs.
pub fn evidence_of(name: &str, cluster: &ClusterState) -> Vec<Evidence> {
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
        .collect::<Vec<_>>()
        // Collected through a filter, the list has room for four; the simulator's report keeps
        // a million of them (one measurement each, mostly).
        .into_boxed_slice()
        .into_vec()
}
