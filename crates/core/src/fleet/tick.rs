//! What one tick of the fleet machine takes and hands back: what each cluster reports, the
//! specs of the revision in flight, the measurements the driver must take and their outcomes,
//! and the tick's output.

use super::event::FleetEvent;
use crate::analysis::{MeasureRequest, Outcome};
use crate::rollout::{Action, AnalysisSlot, Observed, RunKey};
use crate::spec::rollout::Rollout;

/// What a cluster reports at one tick.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusterObservation {
    /// Whether the cluster answered.
    pub reachable: bool,
    /// What its workloads and router report (analysis is filled by the machine).
    pub observed: Observed,
    /// What it runs differs from what the machine last decided for it (a restarted data plane,
    /// a change by hand), and the driver is re-applying the decision: the cluster is held (no
    /// step advances, nothing is judged) until it matches again.
    pub diverged: bool,
}

/// A measurement the driver must take for a cluster's run, or for a wave-level analysis.
///
/// A wave-level analysis is keyed by its run's slot, `AnalysisSlot::Wave(n)` (n the 1-based
/// wave), and has no cluster: `cluster` is empty, and [`ClusterMeasurement::wave`] gives the
/// wave. The driver measures it over the wave (docs/simulate.md: the simulator aggregates the
/// wave's validated clusters' traffic).
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterMeasurement {
    /// The cluster (empty for a wave-level analysis).
    pub cluster: String,
    /// The run (slot `AnalysisSlot::Wave(n)` for wave n's analysis).
    pub run: RunKey,
    /// The measurement.
    pub request: MeasureRequest,
}

impl ClusterMeasurement {
    /// The 0-based wave whose wave-level analysis this measurement is for, if it is one.
    pub fn wave(&self) -> Option<usize> {
        wave_of_key(self.run)
    }
}

/// The 0-based wave of a wave-level analysis run's key.
pub(super) fn wave_of_key(run: RunKey) -> Option<usize> {
    match run.slot {
        AnalysisSlot::Wave(n) => (n as usize).checked_sub(1),
        _ => None,
    }
}

/// A measurement's outcome, fed back to the machine (with the `cluster` and `run` of its
/// [`ClusterMeasurement`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterOutcome {
    /// The cluster (empty for a wave-level analysis).
    pub cluster: String,
    /// The run.
    pub run: RunKey,
    /// Which metric of the run.
    pub metric_index: usize,
    /// What the provider answered.
    pub outcome: Outcome,
}

/// What one tick decided.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FleetOutput {
    /// Actions per cluster, in order.
    pub actions: Vec<(String, Action)>,
    /// Measurements to take.
    pub measurements: Vec<ClusterMeasurement>,
    /// What was decided, in order (with what was decided between ticks first).
    pub events: Vec<FleetEvent>,
}

/// The specs one fleet revision runs: the new Rollout and the one it replaces.
#[derive(Debug, Clone)]
pub struct Revisions<'a> {
    /// The Rollout as before this fleet revision (what clusters run until their wave starts).
    pub previous: &'a Rollout,
    /// The Rollout of this fleet revision.
    pub next: &'a Rollout,
}
