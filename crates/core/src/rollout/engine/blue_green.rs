//! The blue-green strategy: the preview, pre-promotion analysis and auto-promotion, the switch
//! of the active service, post-promotion analysis, and the abort.

use super::gate::{Gate, analysis_gate};
use super::intents::{
    Ctx, DEFAULT_SCALE_DOWN_DELAY_SECONDS, scale, schedule_abort_scale_down, terminate_runs,
    waiting,
};
use crate::rollout::model::{Action, AnalysisSlot, PauseCondition, PauseReason, RolloutState};
use crate::spec::rollout::BlueGreenStrategy;
use crate::time::Millis;

pub(super) fn reconcile_blue_green(
    ctx: &mut Ctx<'_>,
    state: &mut RolloutState,
    blue_green: &BlueGreenStrategy,
) {
    let (Some(current), Some(stable)) = (state.current, state.stable) else {
        return;
    };
    let total = ctx.replicas();
    if current == stable {
        scale(ctx, state, stable, total);
        if state.active != Some(stable) {
            state.active = Some(stable);
            ctx.actions.push(Action::SwitchActive { revision: stable });
        }
        if ctx.observed.available(stable) < total {
            waiting(ctx, state)
        } else {
            state.waiting_since = None
        }
        return;
    }
    if state.abort {
        terminate_runs(ctx, state);
        scale(ctx, state, stable, total);
        if state.active != Some(stable) {
            state.active = Some(stable);
            ctx.actions.push(Action::SwitchActive { revision: stable });
            ctx.event(
                "SwitchedBack",
                format!("active service returned to stable revision {stable}"),
            );
        }
        schedule_abort_scale_down(
            ctx,
            state,
            current,
            blue_green.abort_scale_down_delay_seconds,
        );
        state.waiting_since = None;
        return;
    }
    if state.paused {
        return;
    }
    // The preview: the new revision behind the preview service.
    let preview_replicas =
        if state.promote_full || state.promotion_allowed && state.preview_ready_at.is_some() {
            total
        } else {
            blue_green
                .preview_replica_count
                .unwrap_or(total)
                .clamp(0, total)
        };
    scale(ctx, state, current, preview_replicas);
    scale(ctx, state, stable, total);
    if blue_green.preview_service.is_some() && state.preview != Some(current) {
        state.preview = Some(current);
        ctx.actions
            .push(Action::SwitchPreview { revision: current });
    }
    if state.preview_ready_at.is_none() {
        if ctx.observed.available(current) < preview_replicas {
            waiting(ctx, state);
            return;
        }
        state.preview_ready_at = Some(ctx.now);
        state.waiting_since = None;
    }
    if !state.switched && !state.promote_full {
        if blue_green.pre_promotion_analysis.is_some() {
            match analysis_gate(
                ctx,
                state,
                current,
                AnalysisSlot::PrePromotion,
                "Blue/green pre-promotion",
            ) {
                Gate::Passed => {}
                Gate::Waiting => return,
                Gate::Aborted => return reconcile_blue_green(ctx, state, blue_green),
            }
        }
        if !state.promotion_allowed {
            let auto = blue_green.auto_promotion_enabled.unwrap_or(true);
            let seconds = blue_green.auto_promotion_seconds.unwrap_or(0);
            let ready_at = state.preview_ready_at.unwrap_or(ctx.now);
            if auto && (seconds <= 0 || ctx.now - ready_at >= Millis::from(seconds) * 1000) {
                state.promotion_allowed = true;
                state
                    .pause_conditions
                    .retain(|p| p.reason != PauseReason::BlueGreenPause);
            } else {
                if !state.has_pause(PauseReason::BlueGreenPause) {
                    state.pause_conditions.push(PauseCondition {
                        reason: PauseReason::BlueGreenPause,
                        start_time: ctx.now,
                    });
                }
                return;
            }
        }
    }
    if !state.switched {
        // Promotion: the new revision at full size, then the active service switches to it.
        scale(ctx, state, current, total);
        if ctx.observed.available(current) < total {
            waiting(ctx, state);
            return;
        }
        state.waiting_since = None;
        // In a lockstep wave the switch waits for the rest of the wave.
        if !state.pass_barrier(1, ctx.now) {
            if state.at_barrier_since() == Some(ctx.now) {
                ctx.event(
                    "LockstepBarrier",
                    "ready to switch; waiting for the lockstep wave".to_owned(),
                );
            }
            return;
        }
        state.switched = true;
        state.active = Some(current);
        ctx.actions.push(Action::SwitchActive { revision: current });
        ctx.event(
            "SwitchedActive",
            format!("active service switched to revision {current}"),
        );
    }
    if blue_green.post_promotion_analysis.is_some() && !state.promote_full {
        match analysis_gate(
            ctx,
            state,
            current,
            AnalysisSlot::PostPromotion,
            "Blue/green post-promotion",
        ) {
            Gate::Passed => {}
            Gate::Waiting => return,
            Gate::Aborted => return reconcile_blue_green(ctx, state, blue_green),
        }
    }
    terminate_runs(ctx, state);
    state.stable = Some(current);
    state.promote_full = false;
    ctx.actions.push(Action::MarkStable { revision: current });
    let delay = blue_green
        .scale_down_delay_seconds
        .unwrap_or(DEFAULT_SCALE_DOWN_DELAY_SECONDS)
        .max(0);
    if delay == 0 {
        scale(ctx, state, stable, 0);
    } else {
        state
            .scale_down_at
            .insert(stable, ctx.now + Millis::from(delay) * 1000);
    }
    ctx.event("RolloutCompleted", format!("revision {current} is stable"));
}
