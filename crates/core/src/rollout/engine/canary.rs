//! The canary strategy: its steps (weights, pauses, analysis, canary scale, header and mirror
//! routes), basic canary replica arithmetic, the abort, and the promotion.

use super::gate::{Gate, analysis_gate, react_to_run};
use super::intents::{
    Ctx, DEFAULT_SCALE_DOWN_DELAY_SECONDS, ceil_share, clear_routes, max_weight, scale,
    schedule_abort_scale_down, set_weight, start_run, terminate_runs, waiting, weight_verified,
};
use crate::rollout::model::{
    Action, AnalysisSlot, PauseCondition, PauseReason, RevisionNumber, RolloutState, RunKey,
};
use crate::spec::rollout::CanaryStrategy;
use crate::time::Millis;

/// The canary's replica targets for a weight: (canary, stable).
pub(super) fn canary_replicas(
    ctx: &Ctx<'_>,
    state: &RolloutState,
    canary: &CanaryStrategy,
    weight: i32,
) -> (i32, i32) {
    let total = ctx.replicas();
    let max = max_weight(Some(canary));
    let routed = canary.traffic_routing.is_some();
    let mut canary_count = ceil_share(total, weight, max);
    if let Some((scale_weight, scale_replicas, match_traffic)) = state.canary_scale
        && routed
        && !match_traffic
    {
        if let Some(r) = scale_replicas {
            canary_count = r;
        } else if let Some(w) = scale_weight {
            canary_count = ceil_share(total, w, 100);
        }
    }
    let stable_count = if !routed || canary.dynamic_stable_scale == Some(true) {
        ceil_share(total, max - weight, max)
    } else {
        total
    };
    (canary_count, stable_count)
}

pub(super) fn reconcile_canary(
    ctx: &mut Ctx<'_>,
    state: &mut RolloutState,
    canary: &CanaryStrategy,
) {
    let (Some(current), Some(stable)) = (state.current, state.stable) else {
        return;
    };
    let routed = canary.traffic_routing.is_some();
    let max = max_weight(Some(canary));
    let total = ctx.replicas();
    if current == stable {
        // Nothing to update: keep the stable at full size and all traffic on it.
        scale(ctx, state, stable, total);
        if routed {
            set_weight(ctx, state, 0, max);
        }
        if ctx.observed.available(stable) < total {
            waiting(ctx, state);
        } else {
            state.waiting_since = None;
        }
        return;
    }
    if state.abort {
        terminate_runs(ctx, state);
        clear_routes(ctx, state);
        if routed {
            if canary.dynamic_stable_scale == Some(true) {
                // Traffic returns as the stable scales back up: never more than it can serve.
                scale(ctx, state, stable, total);
                let stable_available = ctx.observed.available(stable);
                let canary_weight = if total == 0 {
                    0
                } else {
                    (max - ceil_share(max, stable_available, total).min(max)).max(0)
                };
                set_weight(ctx, state, canary_weight, max);
            } else {
                set_weight(ctx, state, 0, max);
                scale(ctx, state, stable, total);
            }
            schedule_abort_scale_down(ctx, state, current, canary.abort_scale_down_delay_seconds);
        } else {
            scale(ctx, state, current, 0);
            scale(ctx, state, stable, total);
        }
        state.waiting_since = None;
        return;
    }
    let steps = canary.steps.as_slice();
    // The weight the completed steps allow (after a retry the canary starts again from it).
    if routed && !state.promote_full && (state.step_index.unwrap_or(0) as usize) < steps.len() {
        // A step held at a lockstep barrier is complete: its weight stands.
        let index = (state.lockstep_progress() as usize).min(steps.len());
        let base = steps[..index]
            .iter()
            .rev()
            .find_map(|s| s.set_weight)
            .unwrap_or(0);
        if state.desired_weight.unwrap_or(0) > base {
            set_weight(ctx, state, base, max);
        }
    }
    if state.paused {
        return;
    }
    let steps_len = steps.len() as u32;
    if state.promote_full {
        state.step_index = Some(steps_len);
        terminate_runs(ctx, state);
    }
    state.evidence_hold = None;
    // Held at a lockstep barrier after a completed step: once the fleet raises the barrier it
    // enters the next step (the completed one is not judged again: a pause completed by a
    // promote stays completed).
    if state.has_pause(PauseReason::LockstepBarrier) {
        let index = state.step_index.unwrap_or(0);
        if state.pass_barrier(index + 1, ctx.now) {
            state.step_index = Some(index + 1);
            state.step_started_at = Some(ctx.now);
            ctx.event(
                "StepCompleted",
                format!(
                    "step {} of {} completed; the lockstep wave passed its barrier",
                    index + 1,
                    steps_len
                ),
            );
        }
    }
    // Walk the steps while each is complete; stop at the first that must wait.
    for _ in 0..=steps.len() + 1 {
        let index = state.step_index.unwrap_or(0);
        // Background analysis runs alongside the steps from startingStep.
        if let Some(background) = &canary.analysis {
            let start = background.starting_step.unwrap_or(0).max(0) as u32;
            let key = RunKey {
                revision: current,
                attempt: state.attempt,
                slot: AnalysisSlot::Background,
            };
            if !state.promote_full
                && !state.background_started
                && index >= start
                && index < steps_len
            {
                state.background_started = true;
                start_run(ctx, state, key);
            }
            if state.background_started {
                react_to_run(ctx, state, key, "Background");
                if state.abort {
                    return reconcile_canary(ctx, state, canary);
                }
            }
        }
        if state
            .pause_conditions
            .iter()
            .any(|p| p.reason != PauseReason::CanaryPauseStep)
        {
            return;
        }
        if index >= steps_len {
            // Evidence at the moment of decision: a background run still measuring must have a
            // fresh measurement of every wet metric, or the promotion to full weight waits
            // (counting toward the progress deadline). Argo promotes here on whatever the run
            // last said; a canary is only ever promoted on current evidence.
            if !state.promote_full && state.background_started {
                let key = RunKey {
                    revision: current,
                    attempt: state.attempt,
                    slot: AnalysisSlot::Background,
                };
                if let Some(why) = ctx
                    .observed
                    .analysis
                    .get(&key)
                    .filter(|r| !r.phase.is_completed())
                    .and_then(|r| r.stale.as_ref())
                {
                    let message = format!("waiting for evidence: {why}");
                    if state.evidence_hold.as_ref() != Some(&message) {
                        ctx.event("WaitingForEvidence", message.clone());
                        state.evidence_hold = Some(message);
                    }
                    waiting(ctx, state);
                    return;
                }
            }
            promote(ctx, state, canary, current, stable);
            return;
        }
        let step = &steps[index as usize];
        if step.set_weight.is_none() && step.set_canary_scale.is_none() {
            // Between weights (a pause, an analysis, a route step) the revisions stay sized for
            // the weight the completed steps set, re-counted when the cluster's replicas change
            // (an HPA scaling the Rollout mid-pause), as Argo re-counts them on every reconcile.
            let weight = steps[..index as usize]
                .iter()
                .rev()
                .find_map(|s| s.set_weight)
                .unwrap_or(0);
            hold_weight(ctx, state, canary, current, stable, weight);
        }
        let done = if let Some(weight) = step.set_weight {
            let (want_canary, want_stable) = canary_replicas(ctx, state, canary, weight);
            let (canary_target, stable_target) = if routed {
                (want_canary, want_stable)
            } else {
                basic_canary_targets(ctx, canary, current, stable, want_canary, want_stable)
            };
            scale(ctx, state, current, canary_target);
            scale(ctx, state, stable, stable_target);
            let canary_ready = ctx.observed.available(current) >= want_canary;
            if routed {
                if canary_ready {
                    set_weight(ctx, state, weight, max);
                }
                canary_ready && weight_verified(ctx, weight)
            } else {
                canary_ready
                    && ctx
                        .observed
                        .replicas
                        .get(&stable)
                        .is_some_and(|c| c.replicas <= want_stable)
            }
        } else if let Some(pause) = &step.pause {
            let started = state.step_started_at.unwrap_or(ctx.now);
            match pause.duration.as_ref().and_then(|d| d.as_millis()) {
                Some(duration) if ctx.now - started >= duration as Millis => true,
                _ => {
                    if !state.has_pause(PauseReason::CanaryPauseStep) {
                        state.pause_conditions.push(PauseCondition {
                            reason: PauseReason::CanaryPauseStep,
                            start_time: ctx.now,
                        });
                    }
                    // A timed pause ends on a later reconcile; an indefinite one on promote.
                    return;
                }
            }
        } else if step.analysis.is_some() {
            match analysis_gate(ctx, state, current, AnalysisSlot::Step(index), "Step-based") {
                Gate::Passed => true,
                Gate::Waiting => false,
                Gate::Aborted => return reconcile_canary(ctx, state, canary),
            }
        } else if let Some(scale_step) = &step.set_canary_scale {
            state.canary_scale = Some((
                scale_step.weight,
                scale_step.replicas,
                scale_step.match_traffic_weight == Some(true),
            ));
            let weight = state.desired_weight.unwrap_or(0);
            let (want_canary, _) = canary_replicas(ctx, state, canary, weight);
            scale(ctx, state, current, want_canary);
            ctx.observed.available(current) >= want_canary
        } else if let Some(route) = &step.set_header_route {
            let name = route.name.clone().unwrap_or_default();
            if route.r#match.is_empty() {
                if state.header_routes.remove(&name) {
                    ctx.actions.push(Action::RemoveHeaderRoute { name });
                }
            } else if state.header_routes.insert(name.clone()) {
                ctx.actions.push(Action::SetHeaderRoute {
                    name,
                    matches: route.r#match.clone(),
                });
            }
            true
        } else if let Some(route) = &step.set_mirror_route {
            let name = route.name.clone();
            if route.r#match.is_empty() {
                if state.mirror_routes.remove(&name) {
                    ctx.actions.push(Action::RemoveMirrorRoute { name });
                }
            } else if state.mirror_routes.insert(name.clone()) {
                ctx.actions.push(Action::SetMirrorRoute {
                    name,
                    matches: route.r#match.clone(),
                    percentage: route.percentage.unwrap_or(100),
                });
            }
            true
        } else {
            // Experiment and plugin steps are not executed by Flotilla: a human decides.
            if !state.has_pause(PauseReason::CanaryPauseStep) {
                state.pause_conditions.push(PauseCondition {
                    reason: PauseReason::CanaryPauseStep,
                    start_time: ctx.now,
                });
                ctx.event(
                    "StepNotExecuted",
                    format!(
                        "step {index} ({}) is not executed by Flotilla; promote to continue",
                        step.kind_name().unwrap_or("empty")
                    ),
                );
            }
            return;
        };
        if !done {
            waiting(ctx, state);
            return;
        }
        state.waiting_since = None;
        if let Some(weight) = step.set_weight {
            state.weight_ceiling = state.weight_ceiling.max(weight);
        }
        state
            .pause_conditions
            .retain(|p| p.reason != PauseReason::CanaryPauseStep);
        // Complete; in a lockstep wave the next step waits for the rest of the wave.
        if !state.pass_barrier(index + 1, ctx.now) {
            if state.at_barrier_since() == Some(ctx.now) {
                ctx.event(
                    "LockstepBarrier",
                    format!(
                        "step {} of {} completed; waiting for the lockstep wave",
                        index + 1,
                        steps_len
                    ),
                );
            }
            return;
        }
        state.step_index = Some(index + 1);
        state.step_started_at = Some(ctx.now);
        ctx.event(
            "StepCompleted",
            format!("step {} of {} completed", index + 1, steps_len),
        );
    }
}

/// Keeps both revisions sized for `weight` (a canary and stable already there emit nothing).
fn hold_weight(
    ctx: &mut Ctx<'_>,
    state: &mut RolloutState,
    canary: &CanaryStrategy,
    current: RevisionNumber,
    stable: RevisionNumber,
    weight: i32,
) {
    let (want_canary, want_stable) = canary_replicas(ctx, state, canary, weight);
    let (canary_target, stable_target) = if canary.traffic_routing.is_some() {
        (want_canary, want_stable)
    } else {
        basic_canary_targets(ctx, canary, current, stable, want_canary, want_stable)
    };
    scale(ctx, state, current, canary_target);
    scale(ctx, state, stable, stable_target);
}

/// Argo's basic canary: move toward the targets without exceeding `replicas + maxSurge` pods
/// or falling below `replicas - maxUnavailable` available ones (defaults 25% each).
pub(super) fn basic_canary_targets(
    ctx: &Ctx<'_>,
    canary: &CanaryStrategy,
    current: RevisionNumber,
    stable: RevisionNumber,
    want_canary: i32,
    want_stable: i32,
) -> (i32, i32) {
    let total = ctx.replicas();
    let surge = canary
        .max_surge
        .unwrap_or(crate::spec::IntOrPercent::Percent(25))
        .resolve_ceil(i64::from(total)) as i32;
    let mut unavailable = canary
        .max_unavailable
        .unwrap_or(crate::spec::IntOrPercent::Percent(25))
        .resolve_floor(i64::from(total)) as i32;
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    let stable_now = ctx
        .observed
        .replicas
        .get(&stable)
        .map_or(total, |c| c.replicas);
    let canary_now = ctx
        .observed
        .replicas
        .get(&current)
        .map_or(0, |c| c.replicas);
    let canary_available = ctx.observed.available(current);
    let canary_target = if want_canary > canary_now {
        want_canary.min((total + surge - stable_now).max(canary_now))
    } else {
        want_canary
    };
    let stable_target = if want_stable < stable_now {
        want_stable.max((total - unavailable - canary_available).min(stable_now))
    } else {
        want_stable
    };
    (canary_target, stable_target)
}

/// After the last step (or `promote --full`): the canary takes everything, becomes stable, and
/// the old stable is scaled down (after scaleDownDelaySeconds with traffic routing).
pub(super) fn promote(
    ctx: &mut Ctx<'_>,
    state: &mut RolloutState,
    canary: &CanaryStrategy,
    current: RevisionNumber,
    stable: RevisionNumber,
) {
    let routed = canary.traffic_routing.is_some();
    let max = max_weight(Some(canary));
    let total = ctx.replicas();
    scale(ctx, state, current, total);
    if ctx.observed.available(current) < total {
        waiting(ctx, state);
        return;
    }
    if routed {
        state.weight_ceiling = max;
        set_weight(ctx, state, max, max);
        if !weight_verified(ctx, max) {
            waiting(ctx, state);
            return;
        }
    } else {
        scale(ctx, state, stable, 0);
    }
    state.waiting_since = None;
    terminate_runs(ctx, state);
    clear_routes(ctx, state);
    state.stable = Some(current);
    state.promote_full = false;
    state.canary_scale = None;
    ctx.actions.push(Action::MarkStable { revision: current });
    if routed {
        // The stable subset is now the new revision: all traffic stays on it.
        state.desired_weight = Some(0);
        state.weight_requested_at = Some(ctx.now);
        ctx.actions.push(Action::SetWeight {
            canary: 0,
            stable: max,
        });
        let delay = canary
            .scale_down_delay_seconds
            .unwrap_or(DEFAULT_SCALE_DOWN_DELAY_SECONDS)
            .max(0);
        state
            .scale_down_at
            .insert(stable, ctx.now + Millis::from(delay) * 1000);
        if delay == 0 {
            state.scale_down_at.remove(&stable);
            scale(ctx, state, stable, 0);
        }
    }
    ctx.event("RolloutCompleted", format!("revision {current} is stable"));
}
