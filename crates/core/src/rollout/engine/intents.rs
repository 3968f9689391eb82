//! The reconcile's context (the spec, what was observed, `now`, the actions decided) and the
//! intents every strategy changes through it: replicas, weights, analysis runs, routes and the
//! abort, each emitting an action only when the intent changes.

use crate::rollout::model::{Action, Observed, RevisionNumber, RolloutState, RunKey};
use crate::spec::rollout::{CanaryStrategy, Rollout};
use crate::time::Millis;

/// Argo's default `abortScaleDownDelaySeconds` and `scaleDownDelaySeconds`.
pub(super) const DEFAULT_SCALE_DOWN_DELAY_SECONDS: i32 = 30;

/// Argo's default `progressDeadlineSeconds`.
pub(super) const DEFAULT_PROGRESS_DEADLINE_SECONDS: i32 = 600;

/// How long a weight may stay unapplied before the engine asks the router again.
const WEIGHT_RETRY_MILLIS: Millis = 10_000;

/// The number of replicas for a share of the total, rounded up as Argo rounds canary counts.
pub(super) fn ceil_share(total: i32, percent: i32, max: i32) -> i32 {
    if max <= 0 {
        return 0;
    }
    ((i64::from(total) * i64::from(percent) + i64::from(max) - 1) / i64::from(max)) as i32
}

pub(super) struct Ctx<'a> {
    pub(super) rollout: &'a Rollout,
    pub(super) hash: &'a str,
    pub(super) observed: &'a Observed,
    pub(super) now: Millis,
    pub(super) actions: Vec<Action>,
}

impl Ctx<'_> {
    pub(super) fn replicas(&self) -> i32 {
        self.observed
            .spec_replicas
            .or(self.rollout.spec.replicas)
            .unwrap_or(1)
            .max(0)
    }

    pub(super) fn event(&mut self, reason: &str, message: impl Into<String>) {
        self.actions.push(Action::Event {
            reason: reason.into(),
            message: message.into(),
        });
    }
}

/// Asks for `replicas` of a revision, emitting an action only when the intent changes.
pub(super) fn scale(
    ctx: &mut Ctx<'_>,
    state: &mut RolloutState,
    revision: RevisionNumber,
    replicas: i32,
) {
    if state.desired_replicas.get(&revision) != Some(&replicas) {
        state.desired_replicas.insert(revision, replicas);
        ctx.actions.push(Action::Scale {
            revision,
            hash: state.hash(revision),
            replicas,
        });
    }
    if replicas > 0 {
        state.scale_down_at.remove(&revision);
    }
}

/// Asks the router for a canary weight (re-asking when it did not apply it in time).
pub(super) fn set_weight(ctx: &mut Ctx<'_>, state: &mut RolloutState, canary: i32, max: i32) {
    let stale = state
        .weight_requested_at
        .is_some_and(|at| ctx.now - at >= WEIGHT_RETRY_MILLIS)
        && !weight_verified(ctx, canary);
    if state.desired_weight != Some(canary) || stale {
        state.desired_weight = Some(canary);
        state.weight_requested_at = Some(ctx.now);
        ctx.actions.push(Action::SetWeight {
            canary,
            stable: max - canary,
        });
    }
}

pub(super) fn weight_verified(ctx: &Ctx<'_>, canary: i32) -> bool {
    ctx.observed.weights.is_some_and(|w| w.canary == canary)
}

pub(super) fn start_run(ctx: &mut Ctx<'_>, state: &mut RolloutState, run: RunKey) {
    if state.runs.insert(run) {
        ctx.actions.push(Action::StartAnalysis { run });
    }
}

pub(super) fn terminate_runs(ctx: &mut Ctx<'_>, state: &mut RolloutState) {
    for run in std::mem::take(&mut state.runs) {
        let completed = ctx
            .observed
            .analysis
            .get(&run)
            .is_some_and(|r| r.phase.is_completed());
        if !completed {
            ctx.actions.push(Action::TerminateAnalysis { run });
        }
    }
}

pub(super) fn clear_routes(ctx: &mut Ctx<'_>, state: &mut RolloutState) {
    for name in std::mem::take(&mut state.header_routes) {
        ctx.actions.push(Action::RemoveHeaderRoute { name });
    }
    for name in std::mem::take(&mut state.mirror_routes) {
        ctx.actions.push(Action::RemoveMirrorRoute { name });
    }
}

/// Starts waiting on replicas or the router (for the progress deadline), if not already.
pub(super) fn waiting(ctx: &Ctx<'_>, state: &mut RolloutState) {
    if state.waiting_since.is_none() {
        state.waiting_since = Some(ctx.now);
    }
}

pub(super) fn abort(ctx: &mut Ctx<'_>, state: &mut RolloutState, cause: String) {
    if state.abort {
        return;
    }
    state.abort = true;
    state.aborted_at = Some(ctx.now);
    state.abort_cause = cause;
    state.pause_conditions.clear();
    state.controller_pause = false;
    let message = abort_message(state);
    ctx.event("RolloutAborted", message);
}

pub(super) fn abort_message(state: &RolloutState) -> String {
    let revision = state.current.unwrap_or(0);
    if state.abort_cause.is_empty() {
        format!("RolloutAborted: Rollout aborted update to revision {revision}")
    } else {
        format!(
            "RolloutAborted: Rollout aborted update to revision {revision}: {}",
            state.abort_cause
        )
    }
}

/// After an abort, the new revision is scaled down `abortScaleDownDelaySeconds` (default 30)
/// after the abort; with 0 it is kept (Argo: left for inspection).
pub(super) fn schedule_abort_scale_down(
    ctx: &mut Ctx<'_>,
    state: &mut RolloutState,
    revision: RevisionNumber,
    delay_seconds: Option<i32>,
) {
    let delay = delay_seconds.unwrap_or(DEFAULT_SCALE_DOWN_DELAY_SECONDS);
    let running = state
        .desired_replicas
        .get(&revision)
        .is_some_and(|n| *n > 0);
    if delay <= 0 || !running || state.scale_down_at.contains_key(&revision) {
        return;
    }
    let at = state.aborted_at.unwrap_or(ctx.now) + Millis::from(delay) * 1000;
    if at <= ctx.now {
        scale(ctx, state, revision, 0);
    } else {
        state.scale_down_at.insert(revision, at);
    }
}

/// The weight that means "all traffic" for a canary: its `maxTrafficWeight`, or 100.
pub(crate) fn max_weight(canary: Option<&CanaryStrategy>) -> i32 {
    canary
        .and_then(|c| c.traffic_routing.as_ref())
        .map_or(100, |r| r.max_traffic_weight())
}
