//! The Rollout state machine: one reconcile takes the spec, the state, what was observed, the
//! operator's commands and `now`, and returns the actions to execute. Argo Rollouts' semantics,
//! no I/O, no clock, no randomness: the same inputs give the same outputs.
//!
//! Actions are emitted when an intent changes (a new replica count, a new weight, a run to
//! start); what a cluster must run at any moment follows from the state alone
//! ([`crate::backend::ClusterDesired::of`]), which a runtime ensures level-triggered, also after
//! a restart.
//!
//! This module is the reconcile's order of work; each step is a child module: `commands` (the
//! operator's), `revision` (a new pod template), `canary` and `blue_green` (the strategies),
//! `gate` (analysis runs as gates), `status` (deadline, phase and message), over `intents` (the
//! context and the intents every step changes).

mod blue_green;
mod canary;
mod commands;
mod gate;
mod intents;
mod revision;
mod status;

use self::blue_green::reconcile_blue_green;
use self::canary::reconcile_canary;
use self::commands::handle_commands;
pub(crate) use self::intents::max_weight;
use self::intents::{Ctx, scale};
use self::revision::observe_template;
use self::status::{check_deadline, compute_phase};
use super::model::{Action, Command, Observed, Phase, RevisionNumber, RolloutState};
use crate::spec::rollout::Rollout;
use crate::time::Millis;

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
