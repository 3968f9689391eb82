//! The waves: starting clusters within maxUpdate, the wave gate (decided, baked, the wave-level
//! analysis passed), failures within the wave's budget, and widened rollbacks.

use std::collections::BTreeMap;

use super::FleetMachine;
use super::validation::run_failure;
use crate::analysis::run::Run;
use crate::fleet::event::Decision;
use crate::fleet::state::{ClusterStatus, FleetPhase, WaveRun};
use crate::fleet::tick::{ClusterMeasurement, ClusterOutcome, FleetOutput};
use crate::rollout::Command;
use crate::spec::analysis::AnalysisPhase;
use crate::spec::fleet::{LockstepFailure, RollbackScope};
use crate::spec::rollout::Rollout;
use crate::time::Millis;

impl FleetMachine {
    /// Starts clusters of the current wave, within maxUpdate (clusters in flight: progressing or
    /// paused), unless the fleet is paused or halted or the cluster rejected.
    pub(super) fn start_clusters(&mut self, now: Millis, next: &Rollout) {
        if self.state.phase != FleetPhase::Progressing || self.state.paused {
            return;
        }
        let Some(places) = self.wave_places.get(self.state.wave) else {
            return;
        };
        let members = &self.plan.waves[self.state.wave];
        let names = self.names.clone();
        let limit = self.plan.max_update[self.state.wave];
        let state = &mut self.state;
        // A paused cluster is still mid-update: it holds its maxUpdate slot.
        let mut progressing = places
            .iter()
            .filter(|&&place| {
                state.clusters.at(place).is_some_and(|(_, c)| {
                    matches!(c.status, ClusterStatus::Progressing | ClusterStatus::Paused)
                })
            })
            .count();
        for &place in places {
            if progressing >= limit {
                break;
            }
            let Some(name) = names.get(place) else {
                continue;
            };
            let Some(cluster) = state.clusters.at_mut(place) else {
                continue;
            };
            // A cluster starts from its settled previous revision (reconciled at least once),
            // unless it rejected this revision.
            if cluster.status != ClusterStatus::NotStarted
                || cluster.rollout.stable.is_none()
                || state
                    .rejections
                    .contains(&(name.clone(), state.revision.clone()))
            {
                continue;
            }
            cluster.status = ClusterStatus::Progressing;
            cluster.on_new_spec = true;
            // A start (or a retry) is a new attempt: an earlier operator's abort is spent.
            cluster.abort_requested = false;
            // Retried before its engine reconciled the rollback, the engine still holds the
            // aborted update (its failed runs): it retries it too (Argo's `retry`), so that the
            // old attempt's failure is no evidence against this one. Only here, as the cluster
            // starts: a retried cluster that waits for its turn must not move meanwhile.
            if cluster.rollout.abort {
                cluster.pending.push(Command::Retry);
            }
            cluster.started_at = Some(now);
            cluster.reason = "updating".into();
            cluster.accepted = false;
            cluster.paused_for = None;
            progressing += 1;
            if state.wave_started_at[state.wave].is_none() {
                state.wave_started_at[state.wave] = Some(now);
                self.events.push(
                    Some(now),
                    None,
                    Decision::WaveStarted {
                        wave: state.wave + 1,
                    },
                    format!(
                        "{}: wave {} started ({})",
                        self.plan.name,
                        state.wave + 1,
                        members.join(", ")
                    ),
                );
            }
            self.events.push(
                Some(now),
                Some(name),
                Decision::ClusterStarted,
                format!(
                    "{name} starts revision {}",
                    next.first_image().unwrap_or_default()
                ),
            );
        }
    }

    /// The wave gate: complete when every cluster is decided (validated, skipped, or failed
    /// within budget); then the bake; then the wave-level analysis, if any, must pass; then the
    /// next wave.
    pub(super) fn gate(&mut self, next: &Rollout, now: Millis, output: &mut FleetOutput) {
        if self.state.phase != FleetPhase::Progressing {
            return;
        }
        if self.state.wave >= self.plan.waves.len() {
            self.set_phase(FleetPhase::Completed, "every wave validated".into());
            return;
        }
        let places = &self.wave_places[self.state.wave];
        let decided = places.iter().all(|&place| {
            let (_, cluster) = self.state.clusters.at(place).expect("known cluster");
            matches!(
                cluster.status,
                ClusterStatus::Validated
                    | ClusterStatus::Skipped
                    | ClusterStatus::RolledBack
                    | ClusterStatus::Pinned
            ) && !cluster.aborted_on_error
        });
        if !decided {
            let errored: Vec<&str> = places
                .iter()
                .filter_map(|&place| self.state.clusters.at(place))
                .filter(|(_, cluster)| cluster.aborted_on_error)
                .map(|(name, _)| name.as_str())
                .collect();
            if !errored.is_empty() {
                self.state.message = format!(
                    "wave {} waits: {}",
                    self.state.wave + 1,
                    self.errored_message(&errored)
                );
            }
            if self.state.bake_started_at.take().is_some() {
                self.bake_ended(now, "a cluster is undecided again");
            }
            // A wave undecided again (a retry) runs its wave analysis anew once decided.
            if let Some(wave_run) = &mut self.state.wave_run
                && wave_run.wave == self.state.wave
                && !wave_run.settled
            {
                wave_run.run.terminate();
                wave_run.settled = true;
            }
            return;
        }
        // A wave passed before, still decided (the fleet came back to an earlier wave a
        // cluster joined): baked and analysed already.
        let passed = self.state.wave_completed_at[self.state.wave].is_some();
        if !passed {
            if self.state.bake_started_at.is_none() && self.plan.bake > 0 {
                let wave = self.state.wave + 1;
                self.events.push(
                    Some(now),
                    None,
                    Decision::BakeStarted {
                        wave,
                        bake_ms: self.plan.bake,
                    },
                    format!(
                        "{}: wave {wave} decided; baking for {} s",
                        self.plan.name,
                        self.plan.bake / 1000
                    ),
                );
            }
            let started = *self.state.bake_started_at.get_or_insert(now);
            if now - started < self.plan.bake as Millis {
                return;
            }
            if !self.wave_analysis(next, now, output) {
                return;
            }
            self.state.wave_completed_at[self.state.wave] = Some(now);
            let wave = self.state.wave + 1;
            if self.plan.bake > 0 {
                self.bake_ended(now, "baked");
            }
            let members = self.plan.waves[self.state.wave].clone();
            let message = format!(
                "{}: wave {wave} completed ({})",
                self.plan.name,
                members.join(", ")
            );
            self.events.push(
                Some(now),
                None,
                Decision::WaveCompleted {
                    wave,
                    clusters: members,
                },
                message,
            );
        }
        self.state.bake_started_at = None;
        self.state.wave += 1;
        if self.state.wave >= self.plan.waves.len() {
            self.set_phase(FleetPhase::Completed, "every wave validated".into());
        } else {
            self.start_clusters(now, next);
        }
    }

    /// The current wave's bake ended (`how`: baked, skipped, undecided again).
    fn bake_ended(&mut self, now: Millis, how: &str) {
        let wave = self.state.wave + 1;
        self.events.push(
            Some(now),
            None,
            Decision::BakeEnded { wave },
            format!("{}: wave {wave}'s bake ended: {how}", self.plan.name),
        );
    }

    /// Says why clusters aborted on an analysis error: clusters whose metrics come from one
    /// provider address and erred together are one `MetricsProviderDown` condition naming the
    /// provider, not one failure each (an address reached through each cluster's own API server
    /// names a provider in each cluster: not grouped).
    fn errored_message(&self, errored: &[&str]) -> String {
        let mut by_provider: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        let mut alone = Vec::new();
        for name in errored {
            match self
                .plan
                .clusters
                .get(*name)
                .filter(|c| !c.metrics_in_cluster)
                .and_then(|c| c.metrics_address.as_deref())
            {
                Some(address) => by_provider.entry(address).or_default().push(name),
                None => alone.push(*name),
            }
        }
        let mut parts = Vec::new();
        for (address, mut clusters) in by_provider {
            clusters.sort_unstable();
            if clusters.len() > 1 {
                parts.push(format!(
                    "MetricsProviderDown: the metrics provider {address} failed for {}",
                    clusters.join(", ")
                ));
            } else {
                alone.extend(clusters);
            }
        }
        if !alone.is_empty() {
            alone.sort_unstable();
            parts.push(format!("{} aborted on an analysis error", alone.join(", ")));
        }
        format!(
            "{}; an error is no verdict on the version: retry starts {} again",
            parts.join("; "),
            if errored.len() == 1 { "it" } else { "them" }
        )
    }

    pub(super) fn on_failure(
        &mut self,
        name: &str,
        wave: Option<usize>,
        scope: RollbackScope,
        cause: String,
    ) {
        // A lockstep wave aborts together (`failurePolicy.lockstep: abortWave`): every cluster
        // of the wave returns to its stable at once, only the failed one rejects the revision,
        // and the fleet halts.
        if let Some(w) = wave
            && self.plan.lockstep.get(w).copied().unwrap_or(false)
            && self.plan.policy.lockstep == LockstepFailure::AbortWave
        {
            let scope = if scope == RollbackScope::Fleet {
                RollbackScope::Fleet
            } else {
                RollbackScope::Wave
            };
            self.widen_rollback(
                Some(name),
                wave,
                scope,
                &format!(
                    "aborted with its lockstep wave {}: {name} failed (failurePolicy.lockstep abortWave)",
                    w + 1
                ),
            );
            self.halt(format!(
                "Halted: {cause}; lockstep wave {} aborted with it",
                w + 1
            ));
            return;
        }
        self.widen_rollback(
            Some(name),
            wave,
            scope,
            &format!("rolled back with {name} (rollbackScope {scope:?})"),
        );
        // Within the wave's failure budget, the wave goes on.
        let revision = self.state.revision.clone();
        let failed_in_wave = wave.map_or(0, |w| {
            self.plan.waves[w]
                .iter()
                .filter(|c| {
                    self.state
                        .rejections
                        .contains(&((*c).clone(), revision.clone()))
                })
                .count()
        });
        if scope == RollbackScope::Failed && failed_in_wave <= self.plan.policy.max_failed_clusters
        {
            return;
        }
        self.halt(format!("Halted: {cause}"));
    }

    /// Widened scopes (`wave`, `fleet`) roll the clusters running the new revision back fast
    /// (no steps) to their previous stable; `failed` rolls back nothing more. `reason` is what
    /// each of them says (what failed, and the policy).
    fn widen_rollback(
        &mut self,
        failed: Option<&str>,
        wave: Option<usize>,
        scope: RollbackScope,
        reason: &str,
    ) {
        let widen: Vec<String> = match scope {
            RollbackScope::Failed => Vec::new(),
            RollbackScope::Wave => wave.map(|w| self.plan.waves[w].clone()).unwrap_or_default(),
            RollbackScope::Fleet => self.plan.clusters.keys().cloned().collect(),
        };
        for other in widen {
            if Some(other.as_str()) == failed {
                continue;
            }
            if let Some(cluster) = self.state.clusters.get_mut(&other)
                && matches!(
                    cluster.status,
                    ClusterStatus::Validated | ClusterStatus::Progressing | ClusterStatus::Paused
                )
            {
                cluster.status = ClusterStatus::RolledBack;
                cluster.reason = reason.to_owned();
                cluster.paused_for = None;
                cluster.on_new_spec = false;
                cluster.pending.push(Command::Promote { full: true });
                self.events.push(
                    None,
                    Some(&other),
                    Decision::RolledBack,
                    format!("{other}: {}", cluster.reason),
                );
            }
        }
    }

    /// A measurement outcome of a wave-level analysis: into the wave's current run, unless it
    /// belongs to an earlier attempt or another wave (a late answer).
    pub(super) fn wave_outcome(
        &mut self,
        wave: usize,
        outcome: ClusterOutcome,
        next: &Rollout,
        now: Millis,
    ) {
        let current = self
            .state
            .wave_run
            .as_ref()
            .is_some_and(|w| w.wave == wave && w.key() == outcome.run);
        if !current {
            return;
        }
        let Some(Ok(plan)) = self.wave_run_plan(next, wave) else {
            return;
        };
        if let Some(wave_run) = &mut self.state.wave_run {
            wave_run
                .run
                .handle_outcome(&plan, outcome.metric_index, now, outcome.outcome);
        }
    }

    /// The wave-level analysis of the current wave, once it is validated and baked: starts it
    /// (again, after a settled verdict that did not pass), advances it, and acts on its verdict.
    /// Returns whether it passed: Successful with evidence.
    fn wave_analysis(&mut self, next: &Rollout, now: Millis, output: &mut FleetOutput) -> bool {
        let wave = self.state.wave;
        let Some(plan) = self.wave_run_plan(next, wave) else {
            return true;
        };
        let fresh = match &self.state.wave_run {
            Some(w) if w.wave == wave => w.settled.then_some(w.attempt + 1),
            _ => Some(0),
        };
        if let Some(attempt) = fresh {
            let run = match &plan {
                Ok(plan) => Run::new(plan, now),
                Err(message) => Run::failed_to_start(message.clone(), now),
            };
            self.state.wave_run = Some(WaveRun {
                wave,
                attempt,
                run,
                settled: false,
            });
        }
        let Some(wave_run) = self.state.wave_run.as_mut() else {
            return false;
        };
        let key = wave_run.key();
        let phase = match &plan {
            Ok(plan) => {
                wave_run.run.assess(plan, now);
                for request in wave_run.run.poll_due(plan, now) {
                    output.measurements.push(ClusterMeasurement {
                        cluster: String::new(),
                        run: key,
                        request,
                        plan: Some(plan.clone()),
                    });
                }
                wave_run.run.phase
            }
            Err(_) => wave_run.run.phase,
        };
        let evidence = plan.as_ref().is_ok_and(|p| wave_run.run.has_evidence(p));
        // A run with no wet metric proves nothing (and, with no metric at all, never completes).
        let no_metric = plan
            .as_ref()
            .is_ok_and(|p| p.metrics.iter().all(|m| m.dry_run));
        let number = wave + 1;
        match phase {
            _ if no_metric && !wave_run.settled => {
                wave_run.settled = true;
                self.state.paused = true;
                self.wave_verdict(number, phase);
                self.set_phase(FleetPhase::Paused, format!(
                    "paused: wave {number} analysis has no metric that is not a dry run, so nothing proves the wave healthy"
                ));
                false
            }
            AnalysisPhase::Successful if evidence => {
                self.wave_verdict(number, phase);
                true
            }
            AnalysisPhase::Successful | AnalysisPhase::Inconclusive => {
                // No verdict to act on: the fleet pauses for a human (resume runs it again).
                wave_run.settled = true;
                let why = if phase == AnalysisPhase::Inconclusive {
                    format!("inconclusive ({})", wave_run.run.message)
                } else {
                    let missing = wave_run
                        .run
                        .without_evidence()
                        .map(|m| m.name.clone())
                        .unwrap_or_default();
                    format!("metric {missing:?} passed without evidence (no data or NaN)")
                };
                self.state.paused = true;
                self.wave_verdict(number, phase);
                self.set_phase(
                    FleetPhase::Paused,
                    format!("paused: wave {number} analysis {why}; resume runs it again"),
                );
                false
            }
            AnalysisPhase::Failed | AnalysisPhase::Error => {
                wave_run.settled = true;
                let cause = match run_failure(&wave_run.run) {
                    Some(f) => format!(
                        "wave {number} analysis failed: metric {} = {} ({})",
                        f.metric, f.value, f.message
                    ),
                    None => format!("wave {number} analysis failed: {}", wave_run.run.message),
                };
                let scope = self.plan.policy.rollback_scope;
                self.wave_verdict(number, phase);
                self.widen_rollback(
                    None,
                    Some(wave),
                    scope,
                    &format!("rolled back with wave {number}'s analysis (rollbackScope {scope:?})"),
                );
                self.halt(format!("Halted: {cause}"));
                false
            }
            _ => false,
        }
    }

    /// Wave `number`'s analysis reached a verdict the fleet acts on.
    fn wave_verdict(&mut self, number: usize, phase: AnalysisPhase) {
        let message = match &self.state.wave_run {
            Some(w) if !w.run.message.is_empty() => {
                format!("wave {number} analysis {phase:?}: {}", w.run.message)
            }
            _ => format!("wave {number} analysis {phase:?}"),
        };
        self.events.push(
            None,
            None,
            Decision::WaveAnalysis {
                wave: number,
                phase,
            },
            format!("{}: {message}", self.plan.name),
        );
    }
}
