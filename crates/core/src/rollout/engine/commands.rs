//! The operator's commands to one rollout: promote, abort, retry, pause, resume, undo,
//! restart and set image.

use super::intents::{Ctx, abort};
use crate::rollout::model::{Action, Command, RolloutState, RunKey};
use crate::spec::analysis::AnalysisPhase;

pub(super) fn handle_commands(ctx: &mut Ctx<'_>, state: &mut RolloutState, commands: &[Command]) {
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
                        // The step is complete; a lockstep barrier still holds the next.
                        if (was_paused || gate)
                            && (index as usize) < steps.len()
                            && state.pass_barrier(index + 1, ctx.now)
                        {
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
