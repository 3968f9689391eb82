//! The machine's answer to operator commands: each accepted (what it did) or refused (why, and
//! nothing changed), as a [`Decision`].

use super::FleetMachine;
use crate::fleet::commands::{FleetCommand, command_cluster, describe};
use crate::fleet::event::Decision;
use crate::fleet::state::{ClusterStatus, FleetPhase, PausedFor};
use crate::rollout::Command;
use crate::spec::rollout::Rollout;
use crate::time::Millis;

impl FleetMachine {
    pub(super) fn handle_commands(
        &mut self,
        commands: &[FleetCommand],
        next: &Rollout,
        now: Millis,
    ) {
        for command in commands {
            match self.handle_command(command, next, now) {
                Ok(what) => self.events.push(
                    None,
                    command_cluster(command),
                    Decision::CommandAccepted {
                        command: command.clone(),
                    },
                    what,
                ),
                Err(why) => self.events.push(
                    None,
                    command_cluster(command),
                    Decision::CommandRefused {
                        command: command.clone(),
                        why: why.clone(),
                    },
                    format!("{}: refused: {why}", describe(command)),
                ),
            }
        }
    }

    /// One operator command: what it did, or why it was refused (nothing changed then).
    fn handle_command(
        &mut self,
        command: &FleetCommand,
        next: &Rollout,
        now: Millis,
    ) -> Result<String, String> {
        match command {
            FleetCommand::Pause => {
                if self.state.paused {
                    return Err("the fleet is paused already".into());
                }
                self.state.paused = true;
                if self.state.phase == FleetPhase::Progressing {
                    let message = "paused by an operator".to_owned();
                    self.set_phase(FleetPhase::Paused, message);
                }
                Ok("pause: no new cluster or wave starts".into())
            }
            FleetCommand::Resume => {
                if !self.state.paused && self.state.phase != FleetPhase::Paused {
                    return Err("the fleet is not paused".into());
                }
                self.state.paused = false;
                if self.state.phase == FleetPhase::Paused {
                    self.set_phase(FleetPhase::Progressing, "resumed by an operator".into());
                }
                Ok("resume".into())
            }
            FleetCommand::Promote {
                wave,
                full,
                cluster,
            } => {
                let index = wave.map_or(self.state.wave, |w| w.saturating_sub(1));
                if cluster.is_none() && index >= self.plan.waves.len() {
                    return Err(format!(
                        "there is no wave {} (the fleet has {})",
                        index + 1,
                        self.plan.waves.len()
                    ));
                }
                if let Some(name) = cluster
                    && !self.state.clusters.contains_key(name)
                {
                    return Err(format!("there is no cluster {name:?} in the fleet"));
                }
                // A lockstep wave's barrier is released for the whole wave, never passed by
                // one cluster alone (`--full` skips every step, barriers included).
                if let Some(name) = cluster
                    && !*full
                    && self.at_barrier(name)
                {
                    let wave = self.state.wave + 1;
                    return Err(format!(
                        "{name} waits at the lockstep barrier of wave {wave}; `promote --wave {wave}` releases the barrier for the whole wave"
                    ));
                }
                if cluster.is_none()
                    && !*full
                    && let Some(what) = self.release_by_operator(index, next, now)
                {
                    return Ok(what);
                }
                let members: Vec<String> = match cluster {
                    Some(name) => vec![name.clone()],
                    None => self.plan.waves[index].clone(),
                };
                let in_flight: Vec<&String> = members
                    .iter()
                    .filter(|n| {
                        self.state.clusters.get(n.as_str()).is_some_and(|c| {
                            matches!(c.status, ClusterStatus::Paused | ClusterStatus::Progressing)
                        })
                    })
                    .collect();
                let baking = cluster.is_none()
                    && index == self.state.wave
                    && self.state.bake_started_at.is_some();
                if in_flight.is_empty() && !baking {
                    return Err(match cluster {
                        Some(name)
                            if self
                                .state
                                .clusters
                                .get(name)
                                .is_some_and(|c| c.status == ClusterStatus::NotStarted) =>
                        {
                            let wave = self.plan.wave_of(name).map_or(0, |w| w + 1);
                            format!(
                                "{name} is held by its wave: wave {wave} has not started (the fleet is at wave {}); it starts when the waves before it are validated, or with `promote --wave {}` of the wave in progress",
                                self.state.wave + 1,
                                self.state.wave + 1
                            )
                        }
                        Some(name) => format!("{name} is not progressing or paused"),
                        None => format!(
                            "no cluster of wave {} is progressing or paused, and it is not baking",
                            index + 1
                        ),
                    });
                }
                if baking {
                    self.state.bake_started_at = Some(Millis::MIN / 2);
                }
                let promoted: Vec<String> = in_flight.into_iter().cloned().collect();
                for name in &promoted {
                    let cluster = self.state.clusters.get_mut(name).expect("known cluster");
                    // A human's promote of a cluster waiting for a verdict accepts it: the
                    // evidence hold is passed, an inconclusive or evidence-less run no longer
                    // stops its validation.
                    let waiting = cluster.status == ClusterStatus::Paused
                        && matches!(
                            cluster.paused_for,
                            Some(
                                PausedFor::Evidence
                                    | PausedFor::Inconclusive
                                    | PausedFor::NoEvidence
                            )
                        );
                    if waiting {
                        cluster.accepted = true;
                    }
                    let full = *full || cluster.paused_for == Some(PausedFor::Evidence);
                    cluster.pending.push(Command::Promote { full });
                }
                let mut what = format!(
                    "promote{}: {}",
                    if *full { " --full" } else { "" },
                    if promoted.is_empty() {
                        "none in flight".to_owned()
                    } else {
                        promoted.join(", ")
                    }
                );
                if baking {
                    what.push_str(&format!("; wave {}'s bake skipped", index + 1));
                }
                Ok(what)
            }
            FleetCommand::Abort { cluster } => match cluster {
                Some(name) => {
                    let Some(state) = self.state.clusters.get_mut(name) else {
                        return Err(format!("there is no cluster {name:?} in the fleet"));
                    };
                    if !matches!(
                        state.status,
                        ClusterStatus::Progressing | ClusterStatus::Paused
                    ) {
                        return Err(format!(
                            "{name} is {:?}: only a cluster in flight can be aborted",
                            state.status
                        ));
                    }
                    state.pending.push(Command::Abort);
                    state.abort_requested = true;
                    Ok(format!("abort {name}: its canary returns to its stable"))
                }
                None => {
                    if self.state.phase == FleetPhase::Aborted {
                        return Err("the fleet is aborted already".into());
                    }
                    for state in self.state.clusters.values_mut() {
                        if matches!(
                            state.status,
                            ClusterStatus::Progressing | ClusterStatus::Paused
                        ) {
                            state.pending.push(Command::Abort);
                            state.abort_requested = true;
                        }
                    }
                    for (name, state) in self.state.clusters.iter_mut() {
                        if state.status == ClusterStatus::NotStarted {
                            state.status = ClusterStatus::Held;
                            state.reason = "held: the fleet was aborted".into();
                            self.events.push(
                                None,
                                Some(name),
                                Decision::Held,
                                format!("{name}: {}", state.reason),
                            );
                        }
                    }
                    self.set_phase(FleetPhase::Aborted, "aborted by an operator".into());
                    Ok("abort: every cluster in flight returns to its stable".into())
                }
            },
            FleetCommand::PauseCluster { cluster: name } => {
                let state = self.in_flight(name, "paused")?;
                if state.rollout.paused {
                    return Err(format!("{name} is paused already"));
                }
                state.pending.push(Command::Pause);
                Ok(format!(
                    "pause {name}: its update stays where it stands (step, weights, analysis) until resumed"
                ))
            }
            FleetCommand::ResumeCluster { cluster: name } => {
                let state = self.in_flight(name, "resumed")?;
                if !state.rollout.paused {
                    return Err(format!("{name} is not paused by an operator"));
                }
                state.pending.push(Command::Resume);
                Ok(format!("resume {name}: its update goes on"))
            }
            FleetCommand::Retry => {
                let revision = self.state.revision.clone();
                let mut retried = Vec::new();
                for (name, state) in self.state.clusters.iter_mut() {
                    let was = state.status;
                    if state.status == ClusterStatus::RolledBack {
                        self.state
                            .rejections
                            .remove(&(name.clone(), revision.clone()));
                        state.status = ClusterStatus::NotStarted;
                        state.aborted_on_error = false;
                        state.failure = None;
                        state.reason = "retrying".into();
                        state.runs.clear();
                    }
                    if state.status == ClusterStatus::Held {
                        state.status = ClusterStatus::NotStarted;
                        state.reason.clear();
                    }
                    // Paused by the halt mid-update: it goes on where it stood.
                    if state.paused_for == Some(PausedFor::Halt) {
                        state.paused_for = None;
                        if state.status == ClusterStatus::Paused {
                            state.pending.push(Command::Resume);
                            state.status = ClusterStatus::Progressing;
                            state.reason = "updating".into();
                            self.events.push(
                                None,
                                Some(name),
                                Decision::Resumed,
                                format!("{name}: resumes where the halt paused it"),
                            );
                            retried.push(name.clone());
                        }
                    }
                    // Skipped (unreachable past the timeout, its canary aborted): rolled
                    // forward again; a skip is no rejection.
                    if state.status == ClusterStatus::Skipped {
                        state.status = ClusterStatus::NotStarted;
                        state.failure = None;
                        state.reason = "retrying".into();
                        state.runs.clear();
                    }
                    if was != ClusterStatus::NotStarted && state.status == ClusterStatus::NotStarted
                    {
                        self.events.push(
                            None,
                            Some(name),
                            Decision::Reset,
                            format!("{name}: waits for its wave"),
                        );
                        retried.push(name.clone());
                    }
                }
                if retried.is_empty() && self.state.phase != FleetPhase::Halted {
                    return Err("no cluster failed, was held, skipped or paused by a halt".into());
                }
                if self.state.phase == FleetPhase::Halted {
                    self.set_phase(
                        FleetPhase::Progressing,
                        "retrying the failed clusters".into(),
                    );
                }
                // A retried cluster of a wave the fleet passed takes it back there.
                self.reopen_waves();
                Ok(format!("retry: {}", retried.join(", ")))
            }
        }
    }
}

impl FleetMachine {
    /// The state of cluster `name` when its update is in flight (progressing or paused), else
    /// why it cannot be `what` (its wave not started, or done with this revision).
    fn in_flight(
        &mut self,
        name: &str,
        what: &str,
    ) -> Result<&mut crate::fleet::state::ClusterState, String> {
        let wave = self.plan.wave_of(name).map_or(0, |w| w + 1);
        let fleet_wave = self.state.wave + 1;
        let Some(state) = self.state.clusters.get_mut(name) else {
            return Err(format!("there is no cluster {name:?} in the fleet"));
        };
        match state.status {
            ClusterStatus::Progressing | ClusterStatus::Paused => Ok(state),
            ClusterStatus::NotStarted => Err(format!(
                "{name} is held by its wave: wave {wave} has not started (the fleet is at wave {fleet_wave}); only an update in flight can be {what}"
            )),
            other => Err(format!(
                "{name} is {other:?}: only an update in flight can be {what}"
            )),
        }
    }
}
