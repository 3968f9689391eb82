//! Deterministic fleet simulation: the real fleet, rollout and analysis engines on virtual time
//! against synthetic traffic, aggregated per time bucket (never per request), so that large
//! fleets stay cheap. `builtin` metrics read the synthetic traffic, so templates run unchanged.

mod driver;
mod traffic;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::analysis::{MetricResult, Outcome};
use crate::spec::analysis::{AnalysisTemplate, TrafficSubset};
use crate::spec::fleet::{Fleet, FleetRollout};
use crate::spec::rollout::Rollout;
pub use crate::spec::scenario::*;
use crate::time::Millis;

pub use crate::rng::Rng;
pub use driver::TickView;
pub use traffic::Bucket;

/// Everything a simulation needs, as found in the scenario file.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The scenario.
    pub scenario: Scenario,
    /// The Fleet.
    pub fleet: Fleet,
    /// The FleetRollout.
    pub fleet_rollout: FleetRollout,
    /// The Rollout (the new revision).
    pub rollout: Rollout,
    /// The analysis templates.
    pub templates: Vec<AnalysisTemplate>,
}

/// The report of one simulation run (JSON output of `flotilla simulate`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// `Completed`, `Halted`, `Aborted`, or `Incomplete` when the simulated time ran out first.
    pub outcome: String,
    /// Why.
    pub message: String,
    /// The waves.
    pub waves: Vec<WaveReport>,
    /// The clusters (those that left the Fleet last, with outcome `Left`).
    pub clusters: Vec<ClusterReport>,
    /// The scenario's events, as they were applied.
    pub events: Vec<EventReport>,
    /// The fleet machine's decisions, in order, as the daemon's audit log records them
    /// (including the durable change Git would get, taken as committed at once).
    pub decisions: Vec<crate::fleet::FleetEvent>,
}

/// One applied event of a [`Report`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventReport {
    /// When it was due (s of virtual time).
    pub at: f64,
    /// The tick it was applied at (s).
    pub applied_at: f64,
    /// `revision`, `command`, `join` or `leave`.
    pub kind: String,
    /// What it did.
    pub message: String,
}

/// One wave of a [`Report`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WaveReport {
    /// 1-based.
    pub index: usize,
    /// Its clusters.
    pub clusters: Vec<String>,
    /// Seconds of virtual time, or null.
    pub started_at: Option<f64>,
    /// Seconds of virtual time, or null.
    pub completed_at: Option<f64>,
    /// Whether its clusters move in lockstep.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub lockstep: bool,
    /// The lockstep barriers it passed, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub barriers: Vec<BarrierReport>,
}

/// A lockstep barrier a wave passed, in a [`WaveReport`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BarrierReport {
    /// The step every cluster completed (1-based, of `steps`).
    pub step: u32,
    /// The steps of the Rollout.
    pub steps: u32,
    /// When the barrier was passed (s).
    pub passed_at: f64,
    /// The clusters that arrived last (several when they arrived at the same tick), when every
    /// one arrived.
    pub last_arrived: Vec<String>,
    /// When they arrived (s).
    pub last_arrived_at: Option<f64>,
    /// The clusters released.
    pub released: Vec<String>,
    /// The clusters not there yet, when an operator released it early.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_there: Vec<String>,
}

/// One cluster of a [`Report`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterReport {
    /// The cluster.
    pub name: String,
    /// 1-based wave.
    pub wave: usize,
    /// `Promoted`, `RolledBack`, `Paused`, `Held`, `NotStarted`, `Skipped`, `Pinned` or `Left`.
    pub outcome: String,
    /// When it started the new version (s), or null.
    pub started_at: Option<f64>,
    /// When it was decided (s), or null.
    pub decided_at: Option<f64>,
    /// Why.
    pub reason: String,
    /// The failing metric, if any.
    pub failure: Option<FailureReport>,
    /// The new version's requests that failed or missed the latency objective.
    pub bad_requests: u64,
    /// Requests the new version served.
    pub new_requests: u64,
    /// The image its stable runs at the end.
    pub image: Option<String>,
}

/// A failure of a [`ClusterReport`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailureReport {
    /// The metric.
    pub metric: String,
    /// Its value.
    pub value: String,
    /// The verdict's message.
    pub message: String,
}

/// Why a simulation could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SimulationError(pub String);

/// Answers one plain `builtin` read from the synthetic traffic of `series`, over the window
/// ending at `at`: a value, or with a step a series.
fn builtin_read<'a>(
    read: &crate::analysis::MeasureRequest,
    at: Millis,
    series: impl IntoIterator<Item = &'a traffic::Series> + Clone,
) -> Outcome {
    let Some(builtin) = &read.provider.builtin else {
        return Outcome::Error("the simulator runs only builtin metrics".into());
    };
    let (statistic, quantile, subset, window, min_requests) = builtin.resolved();
    let window = read.window.unwrap_or(window) as Millis;
    // Never before the run started: earlier canary traffic may be another version's (as the
    // agent-backed provider reads it).
    let from = (at - window).max(read.not_before.unwrap_or(Millis::MIN));
    let canary = subset == TrafficSubset::Canary;
    let result = match read.step {
        Some(step) => traffic::read_series(
            series,
            statistic,
            quantile,
            canary,
            from,
            at,
            step as Millis,
            min_requests,
        )
        .map_or(MetricResult::Nil, MetricResult::Vector),
        None => traffic::read_all(series, statistic, quantile, canary, from, at, min_requests)
            .map_or(MetricResult::Nil, |v| MetricResult::Vector(vec![v])),
    };
    Outcome::Value {
        result,
        metadata: BTreeMap::new(),
    }
}

/// How far back (ms) any metric of `templates` reads before the newest bucket, and how far
/// before a run's start: (window, reference reach).
fn reach(templates: &[AnalysisTemplate]) -> (u64, u64) {
    let mut window = 0u64;
    let mut reference = 0u64;
    let ms = |d: &Option<crate::spec::Duration>| d.as_ref().and_then(|d| d.as_millis());
    for metric in templates.iter().flat_map(|t| t.spec.metrics.iter()) {
        let p = &metric.provider;
        if let Some(b) = &p.builtin {
            window = window.max(b.resolved().3);
        }
        if let Some(c) = &p.compare {
            let w = ms(&c.window).unwrap_or(crate::analysis::compare::DEFAULT_COMPARE_WINDOW_MS);
            window = window.max(w);
            if let Some(r) = &c.reference {
                reference = reference
                    .max(ms(&r.offset).map_or(0, |o| o + w))
                    .max(ms(&r.before_start).unwrap_or(0));
            }
        }
        if p.sequential.is_some() {
            // The test reads from the run's start.
            reference = reference.max(1);
        }
        if let Some(c) = &metric.baseline {
            reference = reference.max(c.resolved().0);
        }
    }
    (
        window.max(if reference > 0 { 0 } else { 120_000 }),
        reference,
    )
}

/// Runs one simulation with a seed.
pub fn run(inputs: &Inputs, seed: u64) -> Result<Report, SimulationError> {
    driver::simulate(inputs, seed, true, &mut |_| {})
}

/// [`run`], calling `observe` with the virtual time after every tick (benchmarks time ticks
/// with it; the core itself reads no clock).
pub fn run_observed(
    inputs: &Inputs,
    seed: u64,
    mut observe: impl FnMut(Millis),
) -> Result<Report, SimulationError> {
    driver::simulate(inputs, seed, true, &mut |view| observe(view.now))
}

/// [`run`], showing `observe` every tick: the actions, the fleet's state and the events
/// applied (tests check the machine's invariants with it).
pub fn run_with(
    inputs: &Inputs,
    seed: u64,
    mut observe: impl FnMut(&TickView<'_>),
) -> Result<Report, SimulationError> {
    driver::simulate(inputs, seed, true, &mut observe)
}

/// [`run_with`], where each tick's decisions are only shown to `observe`, as the daemon hands
/// them to its audit log: the report's `decisions` hold only those made after the last tick
/// (its lockstep barriers are still reported), and memory holds the fleet's state, not every
/// decision it made (benchmarks measure what a controller holds with it).
pub fn run_streamed(
    inputs: &Inputs,
    seed: u64,
    mut observe: impl FnMut(&TickView<'_>),
) -> Result<Report, SimulationError> {
    driver::simulate(inputs, seed, false, &mut observe)
}

/// Aggregates of repeated runs over consecutive seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Aggregate {
    /// How many runs.
    pub runs: u64,
    /// The first seed.
    pub seed: u64,
    /// Fleet outcomes and how often.
    pub outcomes: BTreeMap<String, u64>,
    /// Per cluster: outcomes and how often.
    pub clusters: BTreeMap<String, BTreeMap<String, u64>>,
    /// Mean bad requests of the new version per run.
    pub mean_bad_requests: f64,
}

/// Runs `runs` simulations over consecutive seeds from `seed`.
pub fn run_many(inputs: &Inputs, seed: u64, runs: u64) -> Result<Aggregate, SimulationError> {
    let mut aggregate = Aggregate {
        runs,
        seed,
        outcomes: BTreeMap::new(),
        clusters: BTreeMap::new(),
        mean_bad_requests: 0.0,
    };
    let mut bad = 0u64;
    for i in 0..runs {
        let report = run(inputs, seed + i)?;
        *aggregate
            .outcomes
            .entry(report.outcome.clone())
            .or_default() += 1;
        for cluster in &report.clusters {
            *aggregate
                .clusters
                .entry(cluster.name.clone())
                .or_default()
                .entry(cluster.outcome.clone())
                .or_default() += 1;
            bad += cluster.bad_requests;
        }
    }
    aggregate.mean_bad_requests = if runs == 0 {
        0.0
    } else {
        bad as f64 / runs as f64
    };
    Ok(aggregate)
}

impl Inputs {
    /// Picks the scenario's inputs from loaded manifests.
    pub fn from_manifests(
        manifests: &[crate::manifest::LoadedManifest],
    ) -> Result<Inputs, SimulationError> {
        use crate::spec::Manifest;
        let mut scenarios = Vec::new();
        let mut fleets = Vec::new();
        let mut fleet_rollouts = Vec::new();
        let mut rollouts = Vec::new();
        let mut templates = Vec::new();
        for loaded in manifests {
            match &loaded.manifest {
                Manifest::Scenario(s) => scenarios.push(s.as_ref().clone()),
                Manifest::Fleet(f) => fleets.push(f.as_ref().clone()),
                Manifest::FleetRollout(f) => fleet_rollouts.push(f.as_ref().clone()),
                Manifest::Rollout(r) => rollouts.push(r.as_ref().clone()),
                Manifest::AnalysisTemplate(t) | Manifest::ClusterAnalysisTemplate(t) => {
                    templates.push(t.as_ref().clone())
                }
                _ => {}
            }
        }
        let scenario = match scenarios.as_slice() {
            [one] => one.clone(),
            [] => {
                return Err(SimulationError(
                    "the file holds no `kind: Scenario` document".into(),
                ));
            }
            _ => {
                return Err(SimulationError(
                    "the file holds more than one Scenario".into(),
                ));
            }
        };
        let fleet_rollout = match &scenario.spec.fleet_rollout {
            Some(name) => fleet_rollouts
                .iter()
                .find(|f| f.metadata.name.as_deref() == Some(name))
                .cloned()
                .ok_or_else(|| SimulationError(format!("no FleetRollout named {name:?}")))?,
            None => match fleet_rollouts.as_slice() {
                [one] => one.clone(),
                _ => return Err(SimulationError(
                    "name the FleetRollout with spec.fleetRollout (the file holds none or several)"
                        .into(),
                )),
            },
        };
        let fleet = fleets
            .iter()
            .find(|f| f.metadata.name.as_deref() == Some(fleet_rollout.spec.fleet.as_str()))
            .cloned()
            .ok_or_else(|| {
                SimulationError(format!("no Fleet named {:?}", fleet_rollout.spec.fleet))
            })?;
        let rollout = rollouts
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(fleet_rollout.spec.rollout.as_str()))
            .cloned()
            .ok_or_else(|| {
                SimulationError(format!("no Rollout named {:?}", fleet_rollout.spec.rollout))
            })?;
        Ok(Inputs {
            scenario,
            fleet,
            fleet_rollout,
            rollout,
            templates,
        })
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod test_support;

#[cfg(test)]
mod timeline_tests;

#[cfg(test)]
mod evidence_tests;

#[cfg(test)]
mod decision_tests;

/// How one judge (an AnalysisTemplate standing in for the Rollout's background analysis) did
/// over repeated runs of a scenario: its false rollbacks of healthy clusters and its detections
/// of regressed ones, with exact (Clopper–Pearson) 95% bounds.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JudgeReport {
    /// The template's name.
    pub judge: String,
    /// Cluster-rollouts of healthy clusters (the new version behaves as the stable) that started.
    pub healthy: u64,
    /// Of those, rolled back (false positives).
    pub false_rollbacks: u64,
    /// Of those, neither promoted nor rolled back (paused or left running).
    pub healthy_undecided: u64,
    /// Upper 95% bound of the false-rollback rate.
    pub false_rollback_upper: f64,
    /// Cluster-rollouts of regressed clusters that started.
    pub regressed: u64,
    /// Of those, rolled back (detections).
    pub detected: u64,
    /// Lower 95% bound of the detection rate (power).
    pub power_lower: f64,
    /// Median seconds from a regressed cluster's start to its rollback.
    pub median_detection_seconds: Option<f64>,
    /// Median requests the new version served in a regressed cluster before its rollback.
    pub median_detection_requests: Option<f64>,
    /// Mean bad requests served by the new version per run.
    pub mean_bad_requests: f64,
    /// Per cluster: outcome counts.
    pub clusters: BTreeMap<String, BTreeMap<String, u64>>,
}

/// Whether the scenario's new version differs from the stable in `cluster` (the truth a judge is
/// scored against).
fn regressed(cluster: &ScenarioCluster) -> bool {
    cluster.canary.is_some_and(|c| {
        c.error_rate > cluster.stable.error_rate * 1.001
            || c.latency.p95 > cluster.stable.latency.p95 * 1.001
            || c.latency.p50 > cluster.stable.latency.p50 * 1.001
    })
}

fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    })
}

/// Clopper–Pearson bounds of a binomial proportion at 95%: (lower, upper).
pub fn clopper_pearson(successes: u64, trials: u64) -> (f64, f64) {
    use statrs::distribution::{Beta, ContinuousCDF};
    if trials == 0 {
        return (0.0, 1.0);
    }
    let (k, n) = (successes as f64, trials as f64);
    let lower = if successes == 0 {
        0.0
    } else {
        Beta::new(k, n - k + 1.0).map_or(0.0, |b| b.inverse_cdf(0.025))
    };
    let upper = if successes == trials {
        1.0
    } else {
        Beta::new(k + 1.0, n - k).map_or(1.0, |b| b.inverse_cdf(0.975))
    };
    (lower, upper)
}

/// Runs the scenario `runs` times (consecutive seeds from `seed`) once per judge, each judge's
/// template replacing the Rollout's background analysis, and scores every judge against the
/// scenario's truth.
pub fn compare_judges(
    inputs: &Inputs,
    judges: &[String],
    seed: u64,
    runs: u64,
) -> Result<Vec<JudgeReport>, SimulationError> {
    let truth: BTreeMap<&str, bool> = inputs
        .scenario
        .spec
        .clusters
        .iter()
        .map(|c| (c.name.as_str(), regressed(c)))
        .collect();
    let mut reports = Vec::with_capacity(judges.len());
    for judge in judges {
        if !inputs
            .templates
            .iter()
            .any(|t| t.metadata.name.as_deref() == Some(judge.as_str()))
        {
            return Err(SimulationError(format!(
                "no AnalysisTemplate named {judge:?} to judge with"
            )));
        }
        let mut judged = inputs.clone();
        let canary = judged
            .rollout
            .spec
            .strategy
            .as_mut()
            .and_then(|s| s.canary.as_mut())
            .ok_or_else(|| SimulationError("judges replace a canary Rollout's analysis".into()))?;
        let analysis = canary.analysis.get_or_insert_with(Default::default);
        analysis.templates = vec![crate::spec::rollout::AnalysisTemplateRef {
            template_name: judge.clone(),
            cluster_scope: None,
        }];
        analysis.args.clear();
        let mut report = JudgeReport {
            judge: judge.clone(),
            healthy: 0,
            false_rollbacks: 0,
            healthy_undecided: 0,
            false_rollback_upper: 1.0,
            regressed: 0,
            detected: 0,
            power_lower: 0.0,
            median_detection_seconds: None,
            median_detection_requests: None,
            mean_bad_requests: 0.0,
            clusters: BTreeMap::new(),
        };
        let (mut detection_times, mut detection_requests, mut bad) = (Vec::new(), Vec::new(), 0u64);
        for i in 0..runs {
            let run = run(&judged, seed + i)?;
            for cluster in &run.clusters {
                *report
                    .clusters
                    .entry(cluster.name.clone())
                    .or_default()
                    .entry(cluster.outcome.clone())
                    .or_default() += 1;
                bad += cluster.bad_requests;
                if cluster.started_at.is_none() {
                    continue;
                }
                let rolled_back = cluster.outcome == "RolledBack";
                if truth.get(cluster.name.as_str()).copied().unwrap_or(false) {
                    report.regressed += 1;
                    if rolled_back {
                        report.detected += 1;
                        if let (Some(start), Some(decided)) =
                            (cluster.started_at, cluster.decided_at)
                        {
                            detection_times.push(decided - start);
                        }
                        detection_requests.push(cluster.new_requests as f64);
                    }
                } else {
                    report.healthy += 1;
                    if rolled_back {
                        report.false_rollbacks += 1;
                    } else if cluster.outcome != "Promoted" {
                        report.healthy_undecided += 1;
                    }
                }
            }
        }
        report.false_rollback_upper = clopper_pearson(report.false_rollbacks, report.healthy).1;
        report.power_lower = clopper_pearson(report.detected, report.regressed).0;
        report.median_detection_seconds = median(&mut detection_times);
        report.median_detection_requests = median(&mut detection_requests);
        report.mean_bad_requests = if runs == 0 {
            0.0
        } else {
            bad as f64 / runs as f64
        };
        reports.push(report);
    }
    Ok(reports)
}
