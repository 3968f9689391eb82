//! The Rollout state machine: one reconcile takes the spec, the state, what was observed, the
//! operator's commands and `now`, and returns the actions to execute. Argo Rollouts' semantics,
//! no I/O, no clock, no randomness: the same inputs give the same outputs.
//!
//! Actions are emitted when an intent changes (a new replica count, a new weight, a run to
//! start), so a runtime that executes each action once, idempotently, converges; after a restart
//! it re-applies [`super::desired_actions`].

use crate::spec::analysis::AnalysisPhase;
use crate::spec::rollout::{BlueGreenStrategy, CanaryStrategy, Rollout};
use crate::time::Millis;

use super::model::*;

/// Argo's default `abortScaleDownDelaySeconds` and `scaleDownDelaySeconds`.
const DEFAULT_SCALE_DOWN_DELAY_SECONDS: i32 = 30;
/// Argo's default `progressDeadlineSeconds`.
const DEFAULT_PROGRESS_DEADLINE_SECONDS: i32 = 600;
/// How long a weight may stay unapplied before the engine asks the router again.
const WEIGHT_RETRY_MILLIS: Millis = 10_000;

/// A stable 64-bit FNV-1a hash, rendered as Argo renders pod-template hashes (10 characters).
pub fn template_hash(rollout: &Rollout) -> String {
    let text = serde_json::to_string(&rollout.spec.template).unwrap_or_default();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut out = String::with_capacity(10);
    let mut n = hash;
    for _ in 0..10 {
        out.push(ALPHABET[(n % ALPHABET.len() as u64) as usize] as char);
        n /= ALPHABET.len() as u64;
    }
    out
}

/// A 64-bit FNV-1a fingerprint of a pod-template hash.
fn fingerprint(hash: &str) -> u64 {
    hash.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The number of replicas for a share of the total, rounded up as Argo rounds canary counts.
fn ceil_share(total: i32, percent: i32, max: i32) -> i32 {
    if max <= 0 {
        return 0;
    }
    ((i64::from(total) * i64::from(percent) + i64::from(max) - 1) / i64::from(max)) as i32
}

struct Ctx<'a> {
    rollout: &'a Rollout,
    hash: &'a str,
    observed: &'a Observed,
    now: Millis,
    actions: Vec<Action>,
}

impl Ctx<'_> {
    fn replicas(&self) -> i32 {
        self.rollout.spec.replicas.unwrap_or(1).max(0)
    }

    fn event(&mut self, reason: &str, message: impl Into<String>) {
        self.actions.push(Action::Event {
            reason: reason.into(),
            message: message.into(),
        });
    }
}

/// Asks for `replicas` of a revision, emitting an action only when the intent changes.
fn scale(ctx: &mut Ctx<'_>, state: &mut RolloutState, revision: RevisionNumber, replicas: i32) {
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
fn set_weight(ctx: &mut Ctx<'_>, state: &mut RolloutState, canary: i32, max: i32) {
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

fn weight_verified(ctx: &Ctx<'_>, canary: i32) -> bool {
    ctx.observed.weights.is_some_and(|w| w.canary == canary)
}

fn start_run(ctx: &mut Ctx<'_>, state: &mut RolloutState, run: RunKey) {
    if state.runs.insert(run) {
        ctx.actions.push(Action::StartAnalysis { run });
    }
}

fn terminate_runs(ctx: &mut Ctx<'_>, state: &mut RolloutState) {
    for run in std::mem::take(&mut state.runs) {
        let completed = ctx.observed.analysis.get(&run).is_some_and(|r| {
            matches!(
                r.phase,
                AnalysisPhase::Successful
                    | AnalysisPhase::Failed
                    | AnalysisPhase::Error
                    | AnalysisPhase::Inconclusive
            )
        });
        if !completed {
            ctx.actions.push(Action::TerminateAnalysis { run });
        }
    }
}

fn clear_routes(ctx: &mut Ctx<'_>, state: &mut RolloutState) {
    for name in std::mem::take(&mut state.header_routes) {
        ctx.actions.push(Action::RemoveHeaderRoute { name });
    }
    for name in std::mem::take(&mut state.mirror_routes) {
        ctx.actions.push(Action::RemoveMirrorRoute { name });
    }
}

/// Starts waiting on replicas or the router (for the progress deadline), if not already.
fn waiting(ctx: &Ctx<'_>, state: &mut RolloutState) {
    if state.waiting_since.is_none() {
        state.waiting_since = Some(ctx.now);
    }
}

fn abort(ctx: &mut Ctx<'_>, state: &mut RolloutState, cause: String) {
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

fn abort_message(state: &RolloutState) -> String {
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

/// How a rollout reacts to an analysis run's phase: Ok(true) when it passed.
fn react_to_run(ctx: &mut Ctx<'_>, state: &mut RolloutState, run: RunKey, label: &str) -> bool {
    if state.overridden_runs.contains(&run) {
        return true;
    }
    let observed = ctx.observed;
    let Some(report) = observed.analysis.get(&run) else {
        return false;
    };
    match report.phase {
        AnalysisPhase::Successful => true,
        AnalysisPhase::Failed | AnalysisPhase::Error => {
            let verb = if report.phase == AnalysisPhase::Failed {
                "failed"
            } else {
                "error"
            };
            abort(
                ctx,
                state,
                format!("{label} analysis phase {verb}: {}", report.message),
            );
            false
        }
        AnalysisPhase::Inconclusive => {
            if report.abort_on_inconclusive {
                abort(
                    ctx,
                    state,
                    format!("{label} analysis phase inconclusive: {}", report.message),
                );
            } else if !state.has_pause(PauseReason::InconclusiveAnalysisRun) {
                state.pause_conditions.push(PauseCondition {
                    reason: PauseReason::InconclusiveAnalysisRun,
                    start_time: ctx.now,
                });
                state.controller_pause = true;
                ctx.event(
                    "RolloutPaused",
                    format!("{label} analysis run was inconclusive: {}", report.message),
                );
            }
            false
        }
        AnalysisPhase::Pending | AnalysisPhase::Running => false,
    }
}

/// Where an analysis gate stands.
enum Gate {
    Passed,
    Waiting,
    Aborted,
}

/// Starts (once) the run of an analysis gate and reads its verdict.
fn analysis_gate(
    ctx: &mut Ctx<'_>,
    state: &mut RolloutState,
    revision: RevisionNumber,
    slot: AnalysisSlot,
    label: &str,
) -> Gate {
    let key = RunKey {
        revision,
        attempt: state.attempt,
        slot,
    };
    start_run(ctx, state, key);
    let passed = react_to_run(ctx, state, key, label);
    if state.abort {
        Gate::Aborted
    } else if passed {
        Gate::Passed
    } else {
        Gate::Waiting
    }
}

/// Registers the current template's revision, handling a new template the way Argo does.
fn observe_template(ctx: &mut Ctx<'_>, state: &mut RolloutState) {
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

/// After an abort, the new revision is scaled down `abortScaleDownDelaySeconds` (default 30)
/// after the abort; with 0 it is kept (Argo: left for inspection).
fn schedule_abort_scale_down(
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

fn max_weight(canary: Option<&CanaryStrategy>) -> i32 {
    canary
        .and_then(|c| c.traffic_routing.as_ref())
        .map_or(100, |r| r.max_traffic_weight())
}

fn handle_commands(ctx: &mut Ctx<'_>, state: &mut RolloutState, commands: &[Command]) {
    for command in commands {
        match command {
            Command::Promote { full } => {
                if *full {
                    state.promote_full = true;
                    state.pause_conditions.clear();
                    state.controller_pause = false;
                    ctx.event("RolloutPromoted", "promoted fully: remaining steps skipped");
                } else {
                    let was_paused = !state.pause_conditions.is_empty();
                    let inconclusive: Vec<RunKey> = state
                        .runs
                        .iter()
                        .filter(|run| {
                            ctx.observed
                                .analysis
                                .get(run)
                                .is_some_and(|r| r.phase == AnalysisPhase::Inconclusive)
                        })
                        .copied()
                        .collect();
                    state.overridden_runs.extend(inconclusive);
                    state.pause_conditions.clear();
                    state.controller_pause = false;
                    state.paused = false;
                    if ctx.rollout.blue_green().is_some() {
                        state.promotion_allowed = true;
                    } else if let Some(index) = state.step_index {
                        let steps = ctx.rollout.steps();
                        let gate = steps.get(index as usize).is_some_and(|s| {
                            s.pause.is_some()
                                || s.analysis.is_some()
                                || s.experiment.is_some()
                                || s.plugin.is_some()
                        });
                        if (was_paused || gate) && (index as usize) < steps.len() {
                            state.step_index = Some(index + 1);
                            state.step_started_at = Some(ctx.now);
                        }
                    }
                    ctx.event("RolloutPromoted", "promoted");
                }
            }
            Command::Abort => {
                if state.current != state.stable {
                    abort(ctx, state, String::new());
                }
            }
            Command::Retry => {
                if state.abort {
                    state.abort = false;
                    state.aborted_at = None;
                    state.abort_cause.clear();
                    state.step_index = Some(0);
                    state.step_started_at = Some(ctx.now);
                    state.background_started = false;
                    state.canary_scale = None;
                    state.weight_ceiling = 0;
                    state.promotion_allowed = false;
                    state.switched = false;
                    state.preview_ready_at = None;
                    state.deadline_exceeded = false;
                    state.waiting_since = None;
                    state.runs.clear();
                    state.overridden_runs.clear();
                    state.attempt += 1;
                    ctx.event("RolloutRetried", "retrying the update from the first step");
                }
            }
            Command::Pause => {
                state.paused = true;
                ctx.event("RolloutPaused", "manually paused");
            }
            Command::Resume => {
                state.paused = false;
                ctx.event("RolloutResumed", "resumed");
            }
            Command::Undo { to_revision } => {
                let target = match to_revision {
                    Some(n) => state.revision(*n).map(|r| r.number),
                    None => {
                        let current = state.current.unwrap_or(0);
                        state
                            .revisions
                            .iter()
                            .rev()
                            .map(|r| r.number)
                            .find(|n| *n < current)
                    }
                };
                match target {
                    Some(revision) => ctx.actions.push(Action::RestoreRevision { revision }),
                    None => ctx.event("UndoRefused", "no such revision in the history"),
                }
            }
            Command::Restart => {
                for revision in [state.stable, state.current]
                    .into_iter()
                    .flatten()
                    .collect::<std::collections::BTreeSet<_>>()
                {
                    ctx.actions.push(Action::RestartPods { revision });
                }
            }
            Command::SetImage { container, image } => ctx.actions.push(Action::UpdateImage {
                container: container.clone(),
                image: image.clone(),
            }),
        }
    }
}

/// Runs one reconcile. Returns the actions to execute, in order; `state` is updated in place.
pub fn reconcile(
    rollout: &Rollout,
    state: &mut RolloutState,
    observed: &Observed,
    commands: &[Command],
    now: Millis,
) -> Vec<Action> {
    reconcile_with_hash(
        rollout,
        &template_hash(rollout),
        state,
        observed,
        commands,
        now,
    )
}

/// [`reconcile`] with the pod-template hash computed once by the caller (a fleet of rollouts
/// sharing one spec hashes it once, not once per reconcile).
pub fn reconcile_with_hash(
    rollout: &Rollout,
    hash: &str,
    state: &mut RolloutState,
    observed: &Observed,
    commands: &[Command],
    now: Millis,
) -> Vec<Action> {
    let mut ctx = Ctx {
        rollout,
        hash,
        observed,
        now,
        actions: Vec::new(),
    };
    if rollout.canary().is_some() == rollout.blue_green().is_some()
        || rollout.spec.template.is_none()
    {
        state.phase = Phase::Degraded;
        state.message =
            "InvalidSpec: the Rollout needs a pod template and exactly one of canary and blueGreen"
                .into();
        return ctx.actions;
    }
    handle_commands(&mut ctx, state, commands);
    observe_template(&mut ctx, state);
    // Scale-downs whose delay has passed.
    let due: Vec<RevisionNumber> = if state.scale_down_at.is_empty() {
        Vec::new()
    } else {
        state
            .scale_down_at
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(r, _)| *r)
            .collect()
    };
    for revision in due {
        state.scale_down_at.remove(&revision);
        scale(&mut ctx, state, revision, 0);
    }
    if let Some(canary) = rollout.canary() {
        reconcile_canary(&mut ctx, state, canary);
    } else if let Some(blue_green) = rollout.blue_green() {
        reconcile_blue_green(&mut ctx, state, blue_green);
    }
    check_deadline(&mut ctx, state);
    compute_phase(&ctx, state);
    ctx.actions
}

fn check_deadline(ctx: &mut Ctx<'_>, state: &mut RolloutState) {
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

fn compute_phase(ctx: &Ctx<'_>, state: &mut RolloutState) {
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

fn pause_reason_name(reason: PauseReason) -> &'static str {
    match reason {
        PauseReason::CanaryPauseStep => "CanaryPauseStep",
        PauseReason::BlueGreenPause => "BlueGreenPause",
        PauseReason::InconclusiveAnalysisRun => "InconclusiveAnalysisRun",
    }
}

/// The canary's replica targets for a weight: (canary, stable).
fn canary_replicas(
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

fn reconcile_canary(ctx: &mut Ctx<'_>, state: &mut RolloutState, canary: &CanaryStrategy) {
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
        let index = state.step_index.unwrap_or(0) as usize;
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
        state.step_index = Some(index + 1);
        state.step_started_at = Some(ctx.now);
        ctx.event(
            "StepCompleted",
            format!("step {} of {} completed", index + 1, steps_len),
        );
    }
}

/// Argo's basic canary: move toward the targets without exceeding `replicas + maxSurge` pods
/// or falling below `replicas - maxUnavailable` available ones (defaults 25% each).
fn basic_canary_targets(
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
fn promote(
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

fn reconcile_blue_green(
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

/// Every action that re-establishes the engine's current intent, for a runtime that restarted
/// and cannot know which of its last actions took effect. All are idempotent.
pub fn desired_actions(state: &RolloutState, rollout: &Rollout) -> Vec<Action> {
    let mut actions: Vec<Action> = state
        .desired_replicas
        .iter()
        .map(|(revision, replicas)| Action::Scale {
            revision: *revision,
            hash: state.hash(*revision),
            replicas: *replicas,
        })
        .collect();
    if let Some(stable) = state.stable {
        actions.push(Action::MarkStable { revision: stable });
    }
    if let Some(canary) = state.desired_weight {
        let max = max_weight(rollout.canary());
        actions.push(Action::SetWeight {
            canary,
            stable: max - canary,
        });
    }
    if let Some(active) = state.active {
        actions.push(Action::SwitchActive { revision: active });
    }
    if let Some(preview) = state.preview {
        actions.push(Action::SwitchPreview { revision: preview });
    }
    actions
}
