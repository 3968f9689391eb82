//! A cluster's verdict from its engine and runs: validated on evidence, failed and rejected,
//! aborted without rejection, or paused for a human (saying what, and what continues it).

use super::FleetMachine;
use crate::analysis::run::{MetricState, Run};
use crate::fleet::event::Decision;
use crate::fleet::state::{ClusterStatus, Failure, PausedFor, RunMap};
use crate::rollout::{PauseReason, Phase, RunKey};
use crate::spec::analysis::AnalysisPhase;
use crate::spec::rollout::Rollout;
use crate::time::Millis;

impl FleetMachine {
    /// Decides a cluster's status from its engine and runs: validated (with evidence), failed,
    /// or paused without evidence.
    ///
    /// `place` is the cluster's place in the state's clusters.
    pub(super) fn judge_cluster(
        &mut self,
        place: usize,
        name: &str,
        spec: &Rollout,
        now: Millis,
        deadline_before: bool,
    ) {
        let new_hash = self.next_hash_of(name);
        let previous_hash = self.previous_hash_of(name);
        let cluster = self.state.clusters.at_mut(place).expect("known cluster");
        match cluster.status {
            ClusterStatus::Progressing | ClusterStatus::Paused => {}
            ClusterStatus::RolledBack | ClusterStatus::Skipped => {
                let in_place = self
                    .plan
                    .clusters
                    .get(name)
                    .is_some_and(|c| c.aborts_in_place);
                // Keep returning it to the previous spec once its abort has taken effect; a
                // Kubernetes cluster stays aborted on its spec, as Argo's abort does (canary at
                // zero, stable serving, Degraded), until the spec changes or it is retried.
                if cluster.on_new_spec && cluster.rollout.abort && !in_place {
                    cluster.on_new_spec = false;
                }
                return;
            }
            _ => return,
        }
        let engine = &cluster.rollout;
        if engine.abort {
            let failure = cluster.runs.values().find_map(run_failure);
            // An analysis that errored (and none that failed) is no verdict on the version: the
            // canary is aborted, but nothing is rejected and the failure budget is untouched.
            let failed = cluster
                .runs
                .values()
                .any(|r| r.phase == AnalysisPhase::Failed);
            let errored = !failed
                && cluster
                    .runs
                    .values()
                    .any(|r| r.phase == AnalysisPhase::Error);
            // Aborted past its progress deadline (`progressDeadlineAbort`), held for evidence
            // that never came: no verdict on the version either.
            if !failed && !errored && engine.deadline_exceeded {
                cluster.status = ClusterStatus::RolledBack;
                cluster.aborted_on_error = true;
                cluster.decided_at = Some(now);
                cluster.paused_for = None;
                cluster.reason = format!(
                    "aborted without rejection: {} (progressDeadlineAbort; no verdict on the version): retry starts the cluster again",
                    engine.message
                );
                self.events.push_with_evidence(
                    now,
                    name,
                    cluster,
                    Decision::AbortedWithoutRejection { failure: None },
                    format!("{name}: {}", cluster.reason),
                );
                return;
            }
            if errored {
                cluster.status = ClusterStatus::RolledBack;
                cluster.aborted_on_error = true;
                cluster.paused_for = None;
                cluster.decided_at = Some(now);
                cluster.failure = failure.clone();
                let why = match &failure {
                    Some(f) => format!("metric {} errored: {}", f.metric, f.message),
                    None => engine.message.clone(),
                };
                cluster.reason = format!(
                    "aborted without rejection: the analysis errored ({why}); an error is not a verdict on the version: retry starts the cluster again"
                );
                self.events.push_with_evidence(
                    now,
                    name,
                    cluster,
                    Decision::AbortedWithoutRejection { failure },
                    format!("{name}: {}", cluster.reason),
                );
                return;
            }
            // Failed: record why, reject the revision for this cluster, roll it back alone.
            let revision = self.state.revision.clone();
            let scope = self.plan.policy.rollback_scope;
            let wave = self.plan.wave_of(name);
            cluster.status = ClusterStatus::RolledBack;
            cluster.decided_at = Some(now);
            cluster.reason = engine.message.clone();
            cluster.failure = failure.clone();
            self.events.push_with_evidence(
                now,
                name,
                cluster,
                Decision::Failed {
                    failure: failure.clone(),
                    condition: "RolloutAborted".into(),
                },
                format!("{name}: {}", cluster.reason),
            );
            self.state.rejections.insert((name.to_owned(), revision));
            let cause = match &failure {
                Some(f) => format!(
                    "cluster {name} failed: metric {} = {} ({})",
                    f.metric, f.value, f.message
                ),
                None => format!("cluster {name} failed: {}", engine.message),
            };
            self.on_failure(name, wave, scope, cause);
            return;
        }
        // Held before its promotion for want of current evidence: Paused, saying why; back to
        // Progressing when the evidence arrives.
        if let Some(hold) = &engine.evidence_hold {
            // Past the progress deadline the hold is an EvidenceTimeout (a canary that gets no
            // traffic never waits silently forever).
            let reason = if engine.deadline_exceeded {
                format!(
                    "EvidenceTimeout: {hold} (past progressDeadlineSeconds; promote to accept, abort to roll back)"
                )
            } else {
                hold.clone()
            };
            // Said when it begins, and again when it needs a human (past the deadline).
            let timed_out = engine.deadline_exceeded && !deadline_before;
            let begins = cluster.status != ClusterStatus::Paused
                || cluster.paused_for != Some(PausedFor::Evidence);
            if cluster.status != ClusterStatus::Paused || cluster.reason != reason {
                cluster.status = ClusterStatus::Paused;
                cluster.reason = reason;
                cluster.paused_for = Some(PausedFor::Evidence);
            }
            if begins || timed_out {
                self.events.push_with_evidence(
                    now,
                    name,
                    cluster,
                    Decision::Paused {
                        paused_for: Some(PausedFor::Evidence),
                        needs_human: cluster.rollout.deadline_exceeded,
                        condition: None,
                    },
                    format!("{name}: {}", cluster.reason),
                );
            }
            return;
        }
        // Stopped by an Inconclusive run: Paused for a human, saying what and how to go on.
        if engine
            .pause_conditions
            .iter()
            .any(|p| p.reason == PauseReason::InconclusiveAnalysisRun)
        {
            let reason = inconclusive_reason(&cluster.runs);
            if cluster.status != ClusterStatus::Paused
                || cluster.paused_for != Some(PausedFor::Inconclusive)
            {
                cluster.status = ClusterStatus::Paused;
                cluster.reason = reason;
                cluster.paused_for = Some(PausedFor::Inconclusive);
                self.events.push_with_evidence(
                    now,
                    name,
                    cluster,
                    Decision::Paused {
                        paused_for: Some(PausedFor::Inconclusive),
                        needs_human: true,
                        condition: Some("InconclusiveAnalysisRun".into()),
                    },
                    format!("{name}: {}", cluster.reason),
                );
            } else if cluster.reason != reason {
                cluster.reason = reason;
            }
            return;
        }
        // The hold or the pause is over (fresh evidence came, or a human promoted).
        let waited = matches!(
            cluster.paused_for,
            Some(PausedFor::Evidence | PausedFor::Inconclusive)
        ) || cluster.reason.starts_with("waiting for evidence")
            || cluster.reason.starts_with("EvidenceTimeout");
        if cluster.status == ClusterStatus::Paused && waited {
            cluster.status = ClusterStatus::Progressing;
            cluster.reason = "updating".into();
            cluster.paused_for = None;
            self.events.push_with_evidence(
                now,
                name,
                cluster,
                Decision::Resumed,
                format!("{name}: goes on (its evidence came, or an operator promoted it)"),
            );
        }
        let engine = &cluster.rollout;
        let healthy = engine.phase == Phase::Healthy
            && engine.stable == engine.current
            && engine
                .current
                .and_then(|c| engine.revision(c))
                .is_some_and(|r| *r.hash == *new_hash);
        if !healthy {
            return;
        }
        // Already on this revision before the fleet rollout began (the whole fleet, or this
        // cluster: a supersede back to what it runs, as an `undo` mid-rollout is, or a cluster
        // adopted at first start): nothing to prove, and nothing was deployed.
        let ran_before = cluster
            .baseline
            .as_deref()
            .map_or(previous_hash == new_hash, |b| *b == *new_hash);
        if ran_before {
            cluster.status = ClusterStatus::Validated;
            cluster.decided_at = Some(now);
            cluster.reason = "already on this revision".into();
            self.events.push(
                Some(now),
                Some(name),
                Decision::Validated { accepted: false },
                format!("{name}: {}", cluster.reason),
            );
            return;
        }
        // Healthy on this revision: validated only on evidence.
        let mut evidence = !cluster.runs.is_empty();
        let mut missing = String::new();
        let keys: Vec<RunKey> = cluster.runs.keys().copied().collect();
        for key in keys {
            let plan = self.run_plan_at(place, spec, name, key);
            let run = &self.state.clusters.at(place).expect("known cluster").1.runs[&key];
            let ok = run.phase == AnalysisPhase::Successful
                && plan.as_ref().is_some_and(|p| run.has_evidence(p));
            if !ok {
                evidence = false;
                missing = match run.without_evidence() {
                    Some(metric) => format!(
                        "metric {:?} passed without evidence (no data or NaN; last value {})",
                        metric.name,
                        last_value(metric)
                    ),
                    None => format!("its {:?} analysis run ended {:?}", key.slot, run.phase),
                };
            }
        }
        let cluster = self.state.clusters.at_mut(place).expect("known cluster");
        let was = (cluster.status, cluster.paused_for);
        if evidence {
            cluster.status = ClusterStatus::Validated;
            cluster.decided_at = Some(now);
            cluster.paused_for = None;
            cluster.reason =
                "validated: healthy on the new revision, every gating metric with evidence".into();
        } else if cluster.accepted {
            cluster.status = ClusterStatus::Validated;
            cluster.decided_at = Some(now);
            cluster.paused_for = None;
            cluster.reason = format!(
                "validated by an operator's promote, without a verdict: {}",
                if missing.is_empty() {
                    "no evidence"
                } else {
                    missing.as_str()
                }
            );
        } else if cluster.status != ClusterStatus::Paused
            || cluster.paused_for != Some(PausedFor::NoEvidence)
        {
            cluster.status = ClusterStatus::Paused;
            cluster.paused_for = Some(PausedFor::NoEvidence);
            cluster.reason = if cluster.runs.is_empty() {
                format!(
                    "inconclusive: the Rollout has no analysis, so nothing proves this cluster healthy; {CONTINUE}"
                )
            } else {
                format!("inconclusive: {missing}; {CONTINUE}")
            };
        }
        if (cluster.status, cluster.paused_for) != was {
            let decision = match cluster.status {
                ClusterStatus::Validated => Decision::Validated {
                    accepted: !evidence,
                },
                _ => Decision::Paused {
                    paused_for: Some(PausedFor::NoEvidence),
                    needs_human: true,
                    condition: None,
                },
            };
            self.events.push_with_evidence(
                now,
                name,
                cluster,
                decision,
                format!("{name}: {}", cluster.reason),
            );
        }
    }
}

/// What continues a cluster a human must decide on.
const CONTINUE: &str = "promote to accept, abort to roll back";

/// The last finished measurement's value of a metric, or `none`.
fn last_value(metric: &MetricState) -> String {
    metric
        .measurements
        .iter()
        .rev()
        .find(|m| m.finished_at.is_some())
        .map_or_else(
            || "none".to_owned(),
            |m| {
                if m.value.is_empty() {
                    "empty".to_owned()
                } else {
                    m.value.clone()
                }
            },
        )
}

/// Why a cluster stopped on an Inconclusive run: the metric, its last value and message, and
/// the commands that continue it.
fn inconclusive_reason(runs: &RunMap) -> String {
    let metric = runs
        .values()
        .filter(|r| r.phase == AnalysisPhase::Inconclusive)
        .flat_map(|r| r.metrics.iter())
        .find(|m| !m.dry_run && m.phase == AnalysisPhase::Inconclusive);
    match metric {
        Some(m) => {
            let message = m
                .measurements
                .iter()
                .rev()
                .find(|x| x.finished_at.is_some())
                .map_or("", |x| x.message.as_str());
            format!(
                "inconclusive: metric {:?} = {}{}; {CONTINUE}",
                m.name,
                last_value(m),
                if message.is_empty() {
                    String::new()
                } else {
                    format!(" ({message})")
                }
            )
        }
        None => format!("inconclusive: an analysis run was inconclusive; {CONTINUE}"),
    }
}

/// The failure that decided a run: its first wet metric that failed, errored or went
/// inconclusive, with its last value and the messages.
pub(super) fn run_failure(run: &Run) -> Option<Failure> {
    if !matches!(
        run.phase,
        AnalysisPhase::Failed | AnalysisPhase::Error | AnalysisPhase::Inconclusive
    ) {
        return None;
    }
    let (metric, last) = run
        .metrics
        .iter()
        .find(|m| {
            !m.dry_run
                && matches!(
                    m.phase,
                    AnalysisPhase::Failed | AnalysisPhase::Error | AnalysisPhase::Inconclusive
                )
        })
        .map(|m| {
            (
                m,
                m.measurements
                    .iter()
                    .rev()
                    .find(|x| x.finished_at.is_some()),
            )
        })?;
    let message = [
        run.message.as_str(),
        last.map_or("", |x| x.message.as_str()),
    ]
    .iter()
    .filter(|t| !t.is_empty())
    .copied()
    .collect::<Vec<_>>()
    .join(": ");
    Some(Failure {
        metric: metric.name.clone(),
        value: last.map(|x| x.value.clone()).unwrap_or_default(),
        message,
    })
}
