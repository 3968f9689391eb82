//! One cluster's tick: reachability, its analysis runs fed to its rollout engine, the engine's
//! decisions as actions and events, and its runs advanced into measurement requests.

use std::borrow::Cow;

use super::FleetMachine;
use crate::analysis::Outcome;
use crate::analysis::run::Run;
use crate::fleet::event::Decision;
use crate::fleet::state::{ClusterState, ClusterStatus, FleetPhase};
use crate::fleet::tick::{ClusterMeasurement, ClusterObservation, FleetOutput, Revisions};
use crate::rollout::{self, Action, Command, RunReport};
use crate::spec::analysis::OnInconclusive;
use crate::spec::fleet::UnreachableAction;
use crate::spec::rollout::Rollout;
use crate::time::Millis;

impl FleetMachine {
    /// `place` is the cluster's place in the machine's `names`.
    pub(super) fn tick_cluster(
        &mut self,
        place: usize,
        name: &str,
        revisions: &Revisions<'_>,
        observation: &ClusterObservation,
        now: Millis,
        output: &mut FleetOutput,
    ) {
        let (spec_ref, hash) = self.spec_of(
            name,
            self.state.clusters.at(place).expect("known cluster").1,
            revisions,
        );
        let spec: &Rollout = &spec_ref;
        // Reachability: an unreachable cluster is retried, never validated, and past its
        // timeout halts the fleet or is skipped.
        if !observation.reachable {
            let timeout = self.plan.policy.unreachable_timeout as Millis;
            let action = self.plan.policy.unreachable_action;
            let in_current_wave = self.plan.wave_of(name) == Some(self.state.wave)
                && self.state.phase == FleetPhase::Progressing;
            let cluster = self.state.clusters.get_mut(name).expect("known cluster");
            let since = *cluster.unreachable_since.get_or_insert(now);
            let in_play = matches!(
                cluster.status,
                ClusterStatus::Progressing | ClusterStatus::Paused
            ) || (cluster.status == ClusterStatus::NotStarted && in_current_wave);
            if in_play && now - since >= timeout {
                match action {
                    UnreachableAction::Skip => {
                        cluster.status = ClusterStatus::Skipped;
                        cluster.decided_at = Some(now);
                        cluster.paused_for = None;
                        cluster.reason = format!(
                            "skipped: unreachable for {} s; when it answers again its traffic returns to its stable, and retry rolls it forward",
                            (now - since) / 1000
                        );
                        // Whatever it was doing does not go on unjudged when it answers again:
                        // its canary is aborted then (Skipped is final, and no success).
                        if cluster.on_new_spec {
                            cluster.pending.push(Command::Abort);
                        }
                        self.events.push(
                            Some(now),
                            Some(name),
                            Decision::Skipped,
                            format!("{name}: {}", cluster.reason),
                        );
                    }
                    UnreachableAction::Halt => {
                        let message =
                            format!("cluster {name} unreachable for {} s", (now - since) / 1000);
                        cluster.reason = message.clone();
                        self.halt(message);
                    }
                }
            }
            return;
        }
        if observation.diverged {
            // Reachable, but not running what was decided: nothing advances on it until the
            // driver's repair took effect.
            let cluster = self.state.clusters.get_mut(name).expect("known cluster");
            cluster.unreachable_since = None;
            return;
        }
        // The cluster's state is taken out for its engine and runs, and put back before it is
        // judged, which may read every cluster. It is reached by its place, never by a lookup
        // of its name: at 10,000 clusters a lookup by name missed the cache on most of the
        // names it compared, and the lookups were about a third of a tick.
        let slot = self.state.clusters.at_mut(place).expect("known cluster");
        let mut cluster = std::mem::take(slot);
        let deadline_before = self.tick_engine(
            place,
            name,
            &mut cluster,
            spec,
            &hash,
            observation,
            now,
            output,
        );
        *self.state.clusters.at_mut(place).expect("known cluster") = cluster;
        self.judge_cluster(place, name, spec, now, deadline_before);
    }

    /// A reachable cluster's engine and runs: its runs' phases fed to its rollout engine, the
    /// engine's decisions as actions and events, its runs advanced into measurement requests.
    /// Returns whether its progress deadline was exceeded before this reconcile.
    #[allow(clippy::too_many_arguments)]
    fn tick_engine(
        &mut self,
        place: usize,
        name: &str,
        cluster: &mut ClusterState,
        spec: &Rollout,
        hash: &str,
        observation: &ClusterObservation,
        now: Millis,
        output: &mut FleetOutput,
    ) -> bool {
        // Feed the runs' phases to the engine, take its decisions.
        let mut observed = Cow::Borrowed(&observation.observed);
        for (&key, run) in cluster.runs.iter() {
            // A run whose plan cannot be derived (a missing template, an argument that does not
            // resolve) is still reported: it is in Error, and the engine must see it, or the
            // canary would go on with nothing judging it.
            let plan = self.run_plan_at(place, spec, name, key);
            observed.to_mut().analysis.insert(
                key,
                RunReport {
                    phase: run.phase,
                    message: run.message.clone(),
                    abort_on_inconclusive: plan
                        .as_ref()
                        .is_some_and(|plan| run.inconclusive_action(plan) == OnInconclusive::Abort),
                    stale: plan.as_ref().and_then(|plan| run.stale(plan, now)),
                },
            );
        }
        cluster.unreachable_since = None;
        cluster.rollout.barrier = self.barrier_of(name, cluster);
        let commands = std::mem::take(&mut cluster.pending);
        let (step_before, deadline_before, weight_before) = (
            cluster.rollout.step_index,
            cluster.rollout.deadline_exceeded,
            cluster.rollout.desired_weight,
        );
        let actions = rollout::reconcile_with_hash(
            spec,
            hash,
            &mut cluster.rollout,
            &observed,
            &commands,
            now,
        );
        // An operator's abort that came before the engine made the new revision found nothing
        // to abort (the engine handles commands first): it is given again once the revision
        // is there, instead of being lost while the canary goes on.
        if cluster.abort_requested {
            if cluster.rollout.abort {
                cluster.abort_requested = false;
            } else if cluster.rollout.current != cluster.rollout.stable {
                cluster.pending.push(Command::Abort);
            }
        }
        // What the engine decided: a step reached, a weight set without one, its own events.
        let engine = &cluster.rollout;
        let stepped = cluster.status == ClusterStatus::Progressing
            && step_before.is_some()
            && engine.step_index > step_before;
        if stepped {
            let steps = spec.canary().map_or(0, |c| c.steps.len()) as u32;
            let (step, weight) = (
                engine.step_index.unwrap_or(0),
                engine.desired_weight.unwrap_or(0),
            );
            self.events.push_with_evidence(
                now,
                name,
                cluster,
                Decision::StepReached {
                    step,
                    steps,
                    weight,
                },
                format!("{name}: step {step}/{steps} (canary weight {weight})"),
            );
        }
        for action in &actions {
            match action {
                // A first reconcile putting nothing on the canary changes no weight: no
                // decision (at 10,000 clusters, 10,000 audit entries that say nothing).
                Action::SetWeight { canary, .. }
                    if !(stepped || weight_before.is_none() && *canary == 0) =>
                {
                    self.events.push(
                        Some(now),
                        Some(name),
                        Decision::WeightSet { weight: *canary },
                        format!("{name}: canary weight {canary}"),
                    )
                }
                Action::Event { reason, message } => self.events.push(
                    Some(now),
                    Some(name),
                    Decision::RolloutEvent {
                        reason: reason.clone(),
                    },
                    format!("{name}: {message}"),
                ),
                _ => {}
            }
        }
        let mut starts = Vec::new();
        for action in &actions {
            match action {
                Action::StartAnalysis { run } => starts.push(*run),
                Action::TerminateAnalysis { run } => {
                    let plan = self.run_plan_at(place, spec, name, *run);
                    if let (Some(plan), Some(state)) = (plan, cluster.runs.get_mut(run)) {
                        state.terminate();
                        for index in state.to_cancel() {
                            state.handle_outcome(&plan, index, now, Outcome::Terminated);
                        }
                        state.assess(&plan, now);
                    }
                }
                _ => {}
            }
            output.actions.push((name.to_owned(), action.clone()));
        }
        for run in starts {
            let plan = self.run_plan_at(place, spec, name, run);
            let state = match &plan {
                Some(plan) => Run::new(plan, now),
                None => {
                    Run::failed_to_start("Unable to resolve metric arguments for this cluster", now)
                }
            };
            cluster.runs.insert(run, state);
        }
        // Advance the runs: due measurements become requests.
        for (&key, run) in cluster.runs.iter_mut() {
            let Some(plan) = self.run_plan_at(place, spec, name, key) else {
                continue;
            };
            run.assess(&plan, now);
            for request in run.poll_due(&plan, now) {
                output.measurements.push(ClusterMeasurement {
                    cluster: name.to_owned(),
                    run: key,
                    request,
                    plan: Some(plan.clone()),
                });
            }
        }
        deadline_before
    }
}
