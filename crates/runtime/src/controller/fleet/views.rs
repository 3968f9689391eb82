//! What a fleet controller shows: the list's summary line, the fleet's waves and clusters, one
//! cluster's rollout in detail.

use flotilla_core::rollout::AnalysisSlot;

use super::FleetController;
use super::images::first_image;
use crate::controller::record::{
    ClusterView, FailureView, FleetSummary, FleetView, MetricView, RolloutView, RunView, WaveView,
};

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
        })
    }
}
