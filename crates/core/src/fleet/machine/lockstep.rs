//! Lockstep waves: the barrier before each step, where the clusters of the wave in progress
//! wait for each other; its release (every cluster in flight arrived, or an operator's
//! `promote --wave N`); and what a waiting cluster says.
//!
//! A cluster's rollout engine is given the barrier before each reconcile (the highest step
//! index it may enter); a step it completes at the barrier holds it with a `LockstepBarrier`
//! pause condition. The fleet releases the barrier once every cluster of the wave in flight
//! (and every one that has yet to start) completed that step, so that no cluster is ever more
//! than one step ahead of the slowest.

use serde::{Deserialize, Serialize};

use super::FleetMachine;
use crate::fleet::event::Decision;
use crate::fleet::state::{Barrier, ClusterState, ClusterStatus, FleetPhase, PausedFor};
use crate::spec::rollout::Rollout;
use crate::time::Millis;

/// Where a lockstep wave's barrier stands (for views: the API's wave carries it as is).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BarrierStatus {
    /// The step the wave waits to complete together (1-based, of `steps`).
    pub step: u32,
    /// The steps of the wave's Rollout (a blue-green Rollout: 1, its switch).
    pub steps: u32,
    /// Barriers passed.
    pub passed: u32,
    /// The clusters that completed the step and wait.
    pub waiting: Vec<String>,
    /// The clusters that have not completed it yet.
    pub not_there: Vec<String>,
}

/// The steps a barrier counts in a Rollout: its canary steps, or 1 (a blue-green switch).
pub fn barrier_steps(rollout: &Rollout) -> u32 {
    match rollout.canary() {
        Some(canary) => canary.steps.len() as u32,
        None => 1,
    }
}

/// The clusters of a lockstep wave, by where they stand at its barrier.
struct Standing {
    /// In flight: (name, steps completed, waiting at the barrier since).
    in_flight: Vec<(String, u32, Option<Millis>)>,
    /// Yet to start (not rejected for the revision).
    to_start: Vec<String>,
}

impl FleetMachine {
    /// Whether the wave in progress moves in lockstep.
    fn lockstep_wave(&self) -> Option<usize> {
        let wave = self.state.wave;
        self.plan
            .lockstep
            .get(wave)
            .copied()
            .unwrap_or(false)
            .then_some(wave)
    }

    /// The barrier a cluster's engine is given before its reconcile: the highest step index it
    /// may enter, when it is in flight in the lockstep wave in progress.
    pub(super) fn barrier_for(&self, name: &str) -> Option<u32> {
        self.barrier_of(name, self.state.clusters.get(name)?)
    }

    /// [`Self::barrier_for`] of a cluster's state at hand.
    pub(super) fn barrier_of(&self, name: &str, cluster: &ClusterState) -> Option<u32> {
        let wave = self.lockstep_wave()?;
        if self.plan.wave_of(name) != Some(wave) {
            return None;
        }
        let in_flight = cluster.on_new_spec
            && matches!(
                cluster.status,
                ClusterStatus::Progressing | ClusterStatus::Paused
            );
        in_flight.then(|| self.released(wave))
    }

    /// Barriers the wave passed (0 for a barrier of another wave or revision).
    fn released(&self, wave: usize) -> u32 {
        self.state
            .barrier
            .as_ref()
            .filter(|b| b.wave == wave && b.revision == self.state.revision)
            .map_or(0, |b| b.released)
    }

    fn standing(&self, wave: usize) -> Standing {
        let mut standing = Standing {
            in_flight: Vec::new(),
            to_start: Vec::new(),
        };
        for name in &self.plan.waves[wave] {
            let Some(cluster) = self.state.clusters.get(name) else {
                continue;
            };
            match cluster.status {
                ClusterStatus::Progressing | ClusterStatus::Paused if cluster.on_new_spec => {
                    // Started, but its engine has not taken the new revision yet: at the start.
                    let engine = &cluster.rollout;
                    let on_new = engine
                        .current
                        .and_then(|c| engine.revision(c))
                        .is_some_and(|r| *r.hash == *self.next_hash_of(name));
                    let progress = if on_new {
                        engine.lockstep_progress()
                    } else {
                        0
                    };
                    standing
                        .in_flight
                        .push((name.clone(), progress, engine.at_barrier_since()));
                }
                ClusterStatus::NotStarted
                    if !self
                        .state
                        .rejections
                        .contains(&(name.clone(), self.state.revision.clone())) =>
                {
                    standing.to_start.push(name.clone());
                }
                _ => {}
            }
        }
        standing
    }

    /// Where wave `wave`'s barrier stands, when the wave is in progress, moves in lockstep and
    /// has clusters in flight.
    pub fn barrier_status(&self, wave: usize, next: &Rollout) -> Option<BarrierStatus> {
        if self.lockstep_wave() != Some(wave) {
            return None;
        }
        self.status_of(wave, self.standing(wave), next)
    }

    /// The barrier's status from where the wave's clusters stand: None with no cluster in flight,
    /// or every barrier passed (the wave is promoting).
    fn status_of(&self, wave: usize, standing: Standing, next: &Rollout) -> Option<BarrierStatus> {
        if standing.in_flight.is_empty() {
            return None;
        }
        let released = self.released(wave);
        let steps = barrier_steps(next);
        // Every barrier passed: the wave is promoting.
        if released >= steps {
            return None;
        }
        let (waiting, mut not_there): (Vec<_>, Vec<_>) = standing
            .in_flight
            .iter()
            .partition(|(_, progress, _)| *progress > released);
        let waiting = waiting.into_iter().map(|(n, ..)| n.clone()).collect();
        let mut not_there: Vec<String> = not_there.drain(..).map(|(n, ..)| n.clone()).collect();
        not_there.extend(standing.to_start);
        Some(BarrierStatus {
            step: released + 1,
            steps,
            passed: released,
            waiting,
            not_there,
        })
    }

    /// After every cluster's tick: releases the lockstep wave's barrier when every cluster in
    /// flight completed its step and none is yet to start; else tells each waiting cluster
    /// which are not there yet. Forgets the barrier of a wave with no cluster in flight (a
    /// wave aborted together starts again from the first barrier).
    pub(super) fn lockstep(&mut self, next: &Rollout, now: Millis) {
        let Some(wave) = self.lockstep_wave() else {
            self.state.barrier = None;
            return;
        };
        let standing = self.standing(wave);
        if standing.in_flight.is_empty() {
            self.state.barrier = None;
            return;
        }
        // None: every barrier passed, the wave is promoting.
        let Some(status) = self.status_of(wave, standing, next) else {
            return;
        };
        if matches!(self.state.phase, FleetPhase::Halted | FleetPhase::Aborted) {
            return;
        }
        if status.not_there.is_empty() {
            self.release(wave, &status, now, false);
            return;
        }
        let reason = format!(
            "waiting for lockstep barrier at step {}: clusters {} not there yet",
            status.step,
            status.not_there.join(", ")
        );
        for name in &status.waiting {
            let cluster = self.state.clusters.get_mut(name).expect("known cluster");
            // Paused for a verdict (inconclusive, no evidence) says that instead.
            match (cluster.status, cluster.paused_for) {
                (ClusterStatus::Progressing, _) => {
                    cluster.status = ClusterStatus::Paused;
                    cluster.paused_for = Some(PausedFor::Barrier);
                    cluster.reason = reason.clone();
                    self.events.push(
                        Some(now),
                        Some(name),
                        Decision::Paused {
                            paused_for: Some(PausedFor::Barrier),
                            needs_human: false,
                            condition: Some("LockstepBarrier".into()),
                        },
                        format!("{name}: {reason}"),
                    );
                }
                (ClusterStatus::Paused, Some(PausedFor::Barrier)) if cluster.reason != reason => {
                    cluster.reason = reason.clone();
                }
                _ => {}
            }
        }
    }

    /// Releases wave `wave`'s barrier: its waiting clusters enter the next step on their next
    /// reconcile. `early`: an operator released it before every cluster arrived.
    fn release(&mut self, wave: usize, status: &BarrierStatus, now: Millis, early: bool) {
        let revision = self.state.revision.clone();
        let released = status.passed + 1;
        self.state.barrier = Some(Barrier {
            wave,
            revision,
            released,
        });
        let mut arrivals: Vec<(Millis, &String)> = Vec::new();
        for name in &status.waiting {
            let cluster = self.state.clusters.get_mut(name).expect("known cluster");
            arrivals.push((cluster.rollout.at_barrier_since().unwrap_or(now), name));
            if cluster.status == ClusterStatus::Paused
                && cluster.paused_for == Some(PausedFor::Barrier)
            {
                cluster.status = ClusterStatus::Progressing;
                cluster.paused_for = None;
                cluster.reason = "updating".into();
            }
        }
        // The clusters that arrived last (together, when several did), unless an operator
        // released the barrier before every cluster arrived.
        let last_arrived_at = arrivals.iter().map(|(at, _)| *at).max().filter(|_| !early);
        let last_arrived: Vec<String> = arrivals
            .iter()
            .filter(|(at, _)| Some(*at) == last_arrived_at)
            .map(|(_, name)| (*name).clone())
            .collect();
        let steps = status.steps;
        let mut message = format!(
            "{}: lockstep wave {} passed its barrier at step {}/{steps} ({})",
            self.plan.name,
            wave + 1,
            status.step,
            status.waiting.join(", ")
        );
        match last_arrived.len() {
            0 => {}
            n if n == status.waiting.len() && n > 1 => {
                message.push_str("; they arrived together");
            }
            1 => message.push_str(&format!("; {} arrived last", last_arrived[0])),
            _ => message.push_str(&format!(
                "; {} arrived last, together",
                last_arrived.join(", ")
            )),
        }
        if early {
            message.push_str(&format!(
                "; released by an operator, {} not there yet",
                status.not_there.join(", ")
            ));
        }
        self.events.push(
            Some(now),
            None,
            Decision::BarrierPassed {
                wave: wave + 1,
                step: status.step,
                steps,
                last_arrived,
                last_arrived_at,
                released: status.waiting.clone(),
                not_there: if early {
                    status.not_there.clone()
                } else {
                    Vec::new()
                },
            },
            message,
        );
    }

    /// An operator's `promote --wave N` of the lockstep wave in progress while clusters wait at
    /// its barrier: releases it (the waiting clusters advance; the ones not there yet are not
    /// skipped ahead). None when no cluster waits there (the promote is an ordinary one).
    pub(super) fn release_by_operator(
        &mut self,
        wave: usize,
        next: &Rollout,
        now: Millis,
    ) -> Option<String> {
        if self.lockstep_wave() != Some(wave) {
            return None;
        }
        let status = self.barrier_status(wave, next)?;
        if status.waiting.is_empty() {
            return None;
        }
        self.release(wave, &status, now, !status.not_there.is_empty());
        let mut what = format!(
            "promote wave {}: lockstep barrier at step {}/{} released ({} advance)",
            wave + 1,
            status.step,
            status.steps,
            status.waiting.join(", ")
        );
        if !status.not_there.is_empty() {
            what.push_str(&format!(
                "; {} not there yet, not skipped ahead",
                status.not_there.join(", ")
            ));
        }
        Some(what)
    }

    /// Whether a cluster waits at the barrier of the lockstep wave in progress.
    pub(super) fn at_barrier(&self, name: &str) -> bool {
        self.barrier_for(name).is_some()
            && self
                .state
                .clusters
                .get(name)
                .is_some_and(|c| c.rollout.at_barrier_since().is_some())
    }
}
