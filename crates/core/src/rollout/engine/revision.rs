//! A pod template observed: its revision registered (history kept within its limit), a return
//! to the stable template, a rollback window, or a new update whose steps start.

use super::intents::{Ctx, clear_routes, max_weight, scale, set_weight, terminate_runs};
use crate::rollout::model::{Action, Revision, RolloutState};

/// A 64-bit FNV-1a fingerprint of a pod-template hash.
pub(super) fn fingerprint(hash: &str) -> u64 {
    hash.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Registers the current template's revision, handling a new template the way Argo does.
pub(super) fn observe_template(ctx: &mut Ctx<'_>, state: &mut RolloutState) {
    let current_fp = fingerprint(ctx.hash);
    if state.current.is_some() && state.current_fingerprint == current_fp {
        return;
    }
    if state
        .current
        .is_some_and(|c| state.revision(c).is_some_and(|r| r.hash == ctx.hash))
    {
        state.current_fingerprint = current_fp;
        return;
    }
    let hash = ctx.hash.to_owned();
    let number = state.revisions.iter().map(|r| r.number).max().unwrap_or(0) + 1;
    let previous_current = state.current;
    let stable = state.stable;
    // rollbackWindow: returning to one of the last N revisions skips steps and analysis.
    let window = ctx
        .rollout
        .spec
        .rollback_window
        .as_ref()
        .and_then(|w| w.revisions)
        .unwrap_or(0)
        .max(0) as usize;
    let within_window = window > 0
        && state
            .revisions
            .iter()
            .rev()
            .take(window)
            .any(|r| r.hash == hash);
    // A template seen before (not the stable's): Argo re-labels its ReplicaSet with the new
    // revision number, so one hash is never two revisions (the data plane tells revisions
    // apart by what they run, and would count the same pods for both).
    state
        .revisions
        .retain(|r| r.hash != hash || Some(r.number) == stable);
    state.revisions.push(Revision {
        number,
        hash: hash.clone(),
    });
    // History: keep revisionHistoryLimit (default 10) revisions besides the live ones.
    let limit = ctx.rollout.spec.revision_history_limit.unwrap_or(10).max(0) as usize + 2;
    while state.revisions.len() > limit {
        let oldest = state.revisions[0].number;
        if Some(oldest) == state.stable || Some(oldest) == previous_current {
            break;
        }
        state.revisions.remove(0);
    }
    let Some(stable) = stable else {
        // First deployment: nothing to canary against.
        state.current = Some(number);
        state.current_fingerprint = fingerprint(ctx.hash);
        state.stable = Some(number);
        state.step_index = Some(ctx.rollout.steps().len() as u32);
        let replicas = ctx.replicas();
        scale(ctx, state, number, replicas);
        ctx.actions.push(Action::MarkStable { revision: number });
        if ctx.rollout.blue_green().is_some() {
            state.active = Some(number);
            ctx.actions.push(Action::SwitchActive { revision: number });
        }
        ctx.event(
            "RolloutNew",
            format!("first revision {number} deployed without steps"),
        );
        return;
    };
    // Leaving an update in flight: its runs end, its routes go, its canary returns to zero.
    terminate_runs(ctx, state);
    clear_routes(ctx, state);
    if let Some(old) = previous_current.filter(|c| *c != stable) {
        scale(ctx, state, old, 0);
    }
    state.abort = false;
    state.aborted_at = None;
    state.abort_cause.clear();
    state.promote_full = false;
    state.pause_conditions.clear();
    state.controller_pause = false;
    state.background_started = false;
    state.overridden_runs.clear();
    state.attempt = 0;
    state.canary_scale = None;
    state.deadline_exceeded = false;
    state.waiting_since = None;
    state.preview_ready_at = None;
    state.promotion_allowed = false;
    state.switched = false;
    state.step_started_at = Some(ctx.now);
    state.weight_ceiling = 0;
    if state.hash(stable) == hash {
        // A rollback to the stable template: skip the steps.
        state.revisions.pop();
        state.current = Some(stable);
        state.current_fingerprint = fingerprint(ctx.hash);
        state.step_index = Some(ctx.rollout.steps().len() as u32);
        if ctx
            .rollout
            .canary()
            .is_some_and(|c| c.traffic_routing.is_some())
        {
            let max = max_weight(ctx.rollout.canary());
            set_weight(ctx, state, 0, max);
        }
        if let Some(preview) = state.preview.take()
            && preview != stable
        {
            ctx.actions.push(Action::SwitchPreview { revision: stable });
        }
        ctx.event(
            "RollbackToStable",
            format!("template matches stable revision {stable}; steps skipped"),
        );
        return;
    }
    state.current = Some(number);
    state.current_fingerprint = fingerprint(ctx.hash);
    state.step_index = Some(0);
    if within_window {
        state.promote_full = true;
        ctx.event("RollbackWindow", format!("revision {number} returns to a template within the rollback window; steps and analysis skipped"));
    } else {
        ctx.event(
            "RolloutUpdated",
            format!("updated to revision {number} (stable {stable})"),
        );
    }
}
