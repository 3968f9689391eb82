//! What a fleet controller shows: the list's summary line, the fleet's waves and clusters, one
//! cluster's rollout in detail.

use flotilla_core::rollout::AnalysisSlot;

use super::FleetController;
use super::images::first_image;
use crate::controller::plots::{Mark, MetricSample, Plots};
use crate::controller::record::{
    ClusterView, FailureView, FleetSummary, FleetView, MetricView, RolloutView, RunView, WaveView,
};

/// A run's name in views and plots: `step-2-rev3`, `background-rev3`.
fn run_name(key: &flotilla_core::rollout::RunKey) -> String {
    format!(
        "{}-rev{}",
        match key.slot {
            AnalysisSlot::Step(i) => format!("step-{i}"),
            AnalysisSlot::Background => "background".into(),
            AnalysisSlot::PrePromotion => "pre-promotion".into(),
            AnalysisSlot::PostPromotion => "post-promotion".into(),
            AnalysisSlot::Wave(n) => format!("wave-{n}"),
        },
        key.revision
    )
}

impl FleetController {
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
            errors: self
                .invalid
                .iter()
                .chain(&self.disagreement)
                .chain(&self.waiting)
                .cloned()
                .collect(),
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
                    lockstep: plan.lockstep.get(i).copied().unwrap_or(false),
                    barrier: self.machine.barrier_status(i, &self.record.specs.next),
                })
                .collect(),
            errors: self
                .invalid
                .iter()
                .chain(&self.disagreement)
                .chain(&self.waiting)
                .cloned()
                .collect(),
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
                .and_then(|r| self.version_of(&r.hash))
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
                    name: run_name(key),
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
            condition: self.refused.get(name).cloned().or_else(|| {
                // A cluster that cannot be read says why (an unreachable server, a kubeconfig
                // that cannot be used, a permission lacking).
                let handle = self.clusters.get(name)?;
                let latest = handle.latest.lock().expect("observation lock");
                match &*latest {
                    Some((_, Err(error))) => Some(error.condition()),
                    _ => None,
                }
            }),
        }
    }

    /// Records every cluster's canary weight and new measurements into the plot history.
    pub fn observe_plots(&self, plots: &mut Plots, now: flotilla_core::time::Millis) {
        let state = self.machine.state();
        for (name, cluster) in &state.clusters {
            let observed = self.observed.get(name).and_then(|o| o.1);
            let weight = observed
                .map(|(canary, _)| canary)
                .or(cluster.rollout.desired_weight);
            let names: Vec<(String, flotilla_core::rollout::RunKey)> = cluster
                .runs
                .keys()
                .map(|key| (run_name(key), *key))
                .collect();
            let samples: Vec<MetricSample<'_>> = cluster
                .runs
                .iter()
                .zip(&names)
                .flat_map(|((_, run), (run_name, _))| {
                    run.metrics.iter().map(move |m| MetricSample {
                        run: run_name,
                        metric: &m.name,
                        measurements: m
                            .measurements
                            .iter()
                            .filter_map(|x| {
                                Some((
                                    x.started_at,
                                    x.finished_at?,
                                    x.value.as_str(),
                                    Mark::of(x.phase)?,
                                    &x.metadata,
                                ))
                            })
                            .collect(),
                        calibration: &m.calibration,
                    })
                })
                .collect();
            plots.observe(
                &self.record.name,
                name,
                now,
                weight,
                &samples,
                |run, metric| {
                    let Some((_, key)) = names.iter().find(|(n, _)| n == run) else {
                        return Vec::new();
                    };
                    let Some(plan) = self
                        .spec_of_hash(&cluster.rollout.hash(key.revision))
                        .and_then(|rollout| self.machine.plan().run_plan(rollout, name, *key).ok())
                    else {
                        return Vec::new();
                    };
                    plan.metrics
                        .iter()
                        .filter(|m| m.name == metric)
                        .flat_map(|m| {
                            let failure = m
                                .failure
                                .iter()
                                .flat_map(|c| c.thresholds())
                                .map(|t| (true, t));
                            let success = m
                                .success
                                .iter()
                                .flat_map(|c| c.thresholds())
                                .map(|t| (false, t));
                            failure.chain(success).collect::<Vec<_>>()
                        })
                        .collect()
                },
            );
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
                        self.version_of(&r.hash).unwrap_or_default(),
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
            steps: if state.on_new_spec {
                &self.record.specs.next
            } else {
                &self.record.specs.previous
            }
            .canary()
            .map(|c| {
                c.steps
                    .iter()
                    .map(|s| serde_json::to_string(s).unwrap_or_default())
                    .collect()
            })
            .unwrap_or_default(),
        })
    }
}
