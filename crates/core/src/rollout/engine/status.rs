//! The rollout's progress deadline, and its phase and message from its state.

use super::intents::{Ctx, DEFAULT_PROGRESS_DEADLINE_SECONDS, abort, abort_message};
use crate::rollout::model::{PauseReason, Phase, RolloutState};
use crate::time::Millis;

pub(super) fn check_deadline(ctx: &mut Ctx<'_>, state: &mut RolloutState) {
    let Some(since) = state.waiting_since else {
        state.deadline_exceeded = false;
        return;
    };
    let deadline = ctx
        .rollout
        .spec
        .progress_deadline_seconds
        .unwrap_or(DEFAULT_PROGRESS_DEADLINE_SECONDS);
    if state.abort || state.paused || !state.pause_conditions.is_empty() {
        state.waiting_since = None;
        return;
    }
    if ctx.now - since > Millis::from(deadline) * 1000 && !state.deadline_exceeded {
        state.deadline_exceeded = true;
        let message = format!(
            "ProgressDeadlineExceeded: revision {} has timed out progressing",
            state.current.unwrap_or(0)
        );
        ctx.event("ProgressDeadlineExceeded", message.clone());
        if ctx.rollout.spec.progress_deadline_abort == Some(true) && state.current != state.stable {
            abort(ctx, state, message);
        }
    }
}

pub(super) fn compute_phase(ctx: &Ctx<'_>, state: &mut RolloutState) {
    let settled = state.current == state.stable
        && state
            .current
            .is_some_and(|c| ctx.observed.available(c) >= ctx.replicas())
        && state.desired_replicas.iter().all(|(r, n)| {
            ctx.observed
                .replicas
                .get(r)
                .is_none_or(|c| c.replicas == *n)
                || Some(*r) == state.current
        });
    // The message is rebuilt only when what it says changes: most reconciles change nothing.
    enum Says {
        Aborted,
        Deadline,
        Manual,
        Condition(PauseReason),
        Healthy,
        Updating,
        Waiting,
        Evidence(String),
    }
    let (phase, says) = if state.abort {
        (Phase::Degraded, Says::Aborted)
    } else if state.deadline_exceeded {
        (Phase::Degraded, Says::Deadline)
    } else if state.paused {
        (Phase::Paused, Says::Manual)
    } else if let Some(condition) = state.pause_conditions.first() {
        (Phase::Paused, Says::Condition(condition.reason))
    } else if let Some(hold) = &state.evidence_hold {
        (Phase::Progressing, Says::Evidence(hold.clone()))
    } else if settled {
        (Phase::Healthy, Says::Healthy)
    } else if state.current != state.stable {
        (Phase::Progressing, Says::Updating)
    } else {
        (Phase::Progressing, Says::Waiting)
    };
    let revision = state.current.unwrap_or(0);
    let same = state.phase == phase
        && match &says {
            Says::Aborted => state.message == abort_message(state),
            Says::Deadline => {
                state.message.starts_with("ProgressDeadlineExceeded")
                    && state.message.contains(&format!("revision {revision} "))
            }
            Says::Manual => state.message == "manually paused",
            Says::Condition(reason) => state.message == pause_reason_name(*reason),
            Says::Healthy => state.message.is_empty(),
            Says::Updating => {
                state
                    .message
                    .strip_prefix("updating to revision ")
                    .and_then(|n| n.parse::<u32>().ok())
                    == Some(revision)
            }
            Says::Waiting => state.message == "waiting for replicas",
            Says::Evidence(hold) => state.message == *hold,
        };
    if same {
        return;
    }
    state.phase = phase;
    state.message = match says {
        Says::Aborted => abort_message(state),
        Says::Deadline => {
            format!("ProgressDeadlineExceeded: revision {revision} has timed out progressing")
        }
        Says::Manual => "manually paused".into(),
        Says::Condition(reason) => pause_reason_name(reason).into(),
        Says::Healthy => String::new(),
        Says::Updating => format!("updating to revision {revision}"),
        Says::Waiting => "waiting for replicas".into(),
        Says::Evidence(hold) => hold,
    };
}

pub(super) fn pause_reason_name(reason: PauseReason) -> &'static str {
    match reason {
        PauseReason::CanaryPauseStep => "CanaryPauseStep",
        PauseReason::BlueGreenPause => "BlueGreenPause",
        PauseReason::InconclusiveAnalysisRun => "InconclusiveAnalysisRun",
        PauseReason::LockstepBarrier => "LockstepBarrier",
    }
}
