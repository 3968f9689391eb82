//! How the engine reads its analysis runs: a run's phase as a pass, an abort or a pause (an
//! inconclusive run), and the analysis gates of steps and blue-green promotions.

use super::intents::{Ctx, abort, start_run};
use crate::rollout::model::{
    AnalysisSlot, PauseCondition, PauseReason, RevisionNumber, RolloutState, RunKey,
};
use crate::spec::analysis::AnalysisPhase;

/// How a rollout reacts to an analysis run's phase: Ok(true) when it passed.
pub(super) fn react_to_run(
    ctx: &mut Ctx<'_>,
    state: &mut RolloutState,
    run: RunKey,
    label: &str,
) -> bool {
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
pub(super) enum Gate {
    Passed,
    Waiting,
    Aborted,
}

/// Starts (once) the run of an analysis gate and reads its verdict.
pub(super) fn analysis_gate(
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
