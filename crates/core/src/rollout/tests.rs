//! Scenario and property tests of the rollout engine on a virtual clock, against a simulated
//! world that applies the engine's actions (replicas become available, the router applies
//! weights, analysis runs are the real AnalysisRun machine fed with scripted results).

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::analysis::Outcome;
use crate::analysis::plan::{RunPlan, resolve};
use crate::analysis::run::Run;
use crate::spec::analysis::AnalysisPhase;
use crate::spec::rollout::Rollout;

/// A Rollout from a strategy (and optional spec fields).
pub(crate) fn rollout(replicas: i32, strategy: Value, extra: Value) -> Rollout {
    let mut spec = json!({
        "replicas": replicas,
        "selector": {"matchLabels": {"app": "demo"}},
        "template": {"metadata": {"labels": {"app": "demo"}}, "spec": {"containers": [{"name": "app", "image": "demo:1.0"}]}},
        "strategy": strategy,
    });
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            spec[k] = v;
        }
    }
    serde_json::from_value(json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": {"name": "demo"}, "spec": spec})).unwrap()
}

fn with_image(rollout: &Rollout, image: &str) -> Rollout {
    let mut next = rollout.clone();
    next.spec
        .template
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .image = Some(image.into());
    next
}

/// A simulated cluster the engine's actions act on.
pub(crate) struct World {
    pub rollout: Rollout,
    pub state: RolloutState,
    pub now: i64,
    /// Replicas per revision (all available at once unless `slow` holds them back).
    pub replicas: BTreeMap<RevisionNumber, i32>,
    /// Revisions whose pods never become available.
    pub stuck: Vec<RevisionNumber>,
    /// Weights in effect.
    pub weights: Weights,
    /// Whether the router ignores SetWeight.
    pub router_broken: bool,
    /// Analysis: per slot kind, the results each started run will measure.
    pub scripts: BTreeMap<String, Vec<Value>>,
    /// The live runs.
    pub runs: BTreeMap<RunKey, (RunPlan, Run, Vec<Value>)>,
    /// Every action, with the time it was emitted.
    pub log: Vec<(i64, Action)>,
    /// The replicas an autoscaler set on the cluster's Rollout (None: the spec's).
    pub autoscaled: Option<i32>,
}

fn slot_name(slot: AnalysisSlot) -> String {
    match slot {
        AnalysisSlot::Step(i) => format!("step{i}"),
        AnalysisSlot::Background => "background".into(),
        AnalysisSlot::PrePromotion => "pre".into(),
        AnalysisSlot::PostPromotion => "post".into(),
        AnalysisSlot::Wave(n) => format!("wave{n}"),
    }
}

/// One metric measured every 10 s, three times; results scripted per run.
fn analysis_plan(job: bool) -> RunPlan {
    let provider = if job {
        json!({"job": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i", "command": ["false"]}]}}}}})
    } else {
        json!({"web": {"url": "http://127.0.0.1:1"}})
    };
    let metric = if job {
        json!({"name": "check", "provider": provider})
    } else {
        json!({"name": "check", "interval": "10s", "count": 3, "successCondition": "result == 1", "failureCondition": "result == 0", "provider": provider})
    };
    let spec = serde_json::from_value(json!({"metrics": [metric]})).unwrap();
    resolve(&spec, &BTreeMap::new()).unwrap()
}

impl World {
    pub fn new(rollout: Rollout) -> World {
        World {
            rollout,
            state: RolloutState::default(),
            now: 0,
            replicas: BTreeMap::new(),
            stuck: Vec::new(),
            weights: Weights {
                canary: 0,
                stable: 100,
            },
            router_broken: false,
            scripts: BTreeMap::new(),
            runs: BTreeMap::new(),
            log: Vec::new(),
            autoscaled: None,
        }
    }

    pub fn observed(&self) -> Observed {
        let replicas = self
            .replicas
            .iter()
            .map(|(r, n)| {
                let available = if self.stuck.contains(r) { 0 } else { *n };
                (
                    *r,
                    ReplicaCounts {
                        replicas: *n,
                        ready: available,
                        available,
                    },
                )
            })
            .collect();
        let analysis = self
            .runs
            .iter()
            .map(|(key, (plan, run, _))| {
                (
                    *key,
                    RunReport {
                        phase: run.phase,
                        message: run.message.clone(),
                        abort_on_inconclusive: run.inconclusive_action(plan)
                            == crate::spec::analysis::OnInconclusive::Abort,
                        stale: run.stale(plan, self.now),
                    },
                )
            })
            .collect();
        Observed {
            replicas,
            weights: Some(self.weights),
            analysis,
            spec_replicas: self.autoscaled,
        }
    }

    fn advance_runs(&mut self) {
        for (plan, run, script) in self.runs.values_mut() {
            if run.is_completed() {
                continue;
            }
            for request in run.poll_due(plan, self.now) {
                match script.first().cloned() {
                    Some(value) => {
                        script.remove(0);
                        let outcome = crate::analysis::replay::outcome_of(
                            &value,
                            plan.metrics[request.metric_index].provider.job.is_some(),
                        );
                        run.handle_outcome(plan, request.metric_index, self.now, outcome);
                    }
                    None => {
                        // No result scripted: the measurement stays in flight.
                    }
                }
            }
            run.assess(plan, self.now);
        }
    }

    fn apply(&mut self, actions: &[Action]) {
        for action in actions {
            self.log.push((self.now, action.clone()));
            match action {
                Action::Scale {
                    revision, replicas, ..
                } => {
                    self.replicas.insert(*revision, *replicas);
                }
                Action::SetWeight { canary, stable } if !self.router_broken => {
                    self.weights = Weights {
                        canary: *canary,
                        stable: *stable,
                    };
                }
                Action::StartAnalysis { run } => {
                    let name = slot_name(run.slot);
                    let script = self.scripts.get(&name).cloned().unwrap_or_default();
                    let job = name.starts_with("job");
                    let plan =
                        analysis_plan(self.scripts.contains_key(&format!("job-{name}")) || job);
                    let script = if self.scripts.contains_key(&format!("job-{name}")) {
                        self.scripts[&format!("job-{name}")].clone()
                    } else {
                        script
                    };
                    let run_state = Run::new(&plan, self.now);
                    self.runs.insert(*run, (plan, run_state, script));
                }
                Action::TerminateAnalysis { run } => {
                    if let Some((plan, state, _)) = self.runs.get_mut(run) {
                        state.terminate();
                        for index in state.to_cancel() {
                            state.handle_outcome(plan, index, self.now, Outcome::Terminated);
                        }
                        state.assess(plan, self.now);
                    }
                }
                _ => {}
            }
        }
    }

    /// One reconcile at the current time; returns its actions.
    pub fn tick(&mut self, commands: &[Command]) -> Vec<Action> {
        self.advance_runs();
        let observed = self.observed();
        let actions = reconcile(
            &self.rollout,
            &mut self.state,
            &observed,
            commands,
            self.now,
        );
        self.apply(&actions);
        actions
    }

    /// Reconciles every `step` ms until `until`, returning all actions.
    pub fn run_until(&mut self, until: i64, step: i64) -> Vec<Action> {
        let mut all = Vec::new();
        while self.now < until {
            self.now += step;
            all.extend(self.tick(&[]));
        }
        all
    }

    pub fn deploy(&mut self, rollout: Rollout) -> Vec<Action> {
        self.rollout = rollout;
        self.tick(&[])
    }
}

fn without_events(actions: &[Action]) -> Vec<Action> {
    actions
        .iter()
        .filter(|a| !matches!(a, Action::Event { .. }))
        .cloned()
        .collect()
}

fn scale(revision: RevisionNumber, replicas: i32, world: &World) -> Action {
    Action::Scale {
        revision,
        hash: world.state.hash(revision),
        replicas,
    }
}

fn canary_routed(steps: Value) -> Value {
    json!({"canary": {"canaryService": "c", "stableService": "s", "trafficRouting": {"plugins": {"flotilla/agent": {}}}, "steps": steps}})
}

#[test]
fn the_first_deployment_goes_straight_to_healthy() {
    let mut world = World::new(rollout(
        4,
        canary_routed(json!([{"setWeight": 20}, {"pause": {}}])),
        json!({}),
    ));
    let actions = without_events(&world.tick(&[]));
    assert_eq!(
        actions,
        vec![
            scale(1, 4, &world),
            Action::MarkStable { revision: 1 },
            Action::SetWeight {
                canary: 0,
                stable: 100
            }
        ]
    );
    world.now += 1000;
    world.tick(&[]);
    assert_eq!(world.state.phase, Phase::Healthy);
    assert_eq!(world.state.stable, Some(1));
}

#[test]
fn a_routed_canary_walks_its_steps_and_promotes() {
    let base = rollout(
        4,
        canary_routed(
            json!([{"setWeight": 20}, {"pause": {"duration": "30s"}}, {"setWeight": 50}, {"pause": {}}]),
        ),
        json!({"strategy": {"canary": {"canaryService": "c", "stableService": "s", "scaleDownDelaySeconds": 10, "trafficRouting": {"plugins": {"flotilla/agent": {}}}, "steps": [{"setWeight": 20}, {"pause": {"duration": "30s"}}, {"setWeight": 50}, {"pause": {}}]}}}),
    );
    let mut world = World::new(base.clone());
    world.tick(&[]);
    world.now = 1_000;
    let actions = without_events(&world.deploy(with_image(&base, "demo:2.0")));
    // 20% of 4 replicas is one canary pod; the weight follows once it is available.
    assert_eq!(actions, vec![scale(2, 1, &world)]);
    world.now = 2_000;
    let actions = without_events(&world.tick(&[]));
    assert_eq!(
        actions,
        vec![Action::SetWeight {
            canary: 20,
            stable: 80
        }]
    );
    world.now = 3_000;
    world.tick(&[]);
    assert_eq!(
        world.state.step_index,
        Some(1),
        "verified weight completes the step"
    );
    assert_eq!(world.state.phase, Phase::Paused, "timed pause");
    world.run_until(32_000, 1_000);
    assert_eq!(
        world.state.step_index,
        Some(1),
        "the pause lasts 30 s from the step's start"
    );
    world.run_until(40_000, 1_000);
    assert_eq!(
        world.state.step_index,
        Some(3),
        "after 30 s: setWeight 50 done, indefinite pause"
    );
    assert_eq!(
        world.weights,
        Weights {
            canary: 50,
            stable: 50
        }
    );
    assert_eq!(world.state.phase, Phase::Paused);
    assert_eq!(world.state.message, "CanaryPauseStep");
    world.run_until(600_000, 60_000);
    assert_eq!(
        world.state.step_index,
        Some(3),
        "an indefinite pause waits for a human"
    );
    world.now += 1_000;
    let actions = without_events(&world.tick(&[Command::Promote { full: false }]));
    // All steps done: the canary takes every replica, then all traffic, then becomes stable.
    assert_eq!(actions, vec![scale(2, 4, &world)]);
    world.now += 1_000;
    let actions = without_events(&world.tick(&[]));
    assert_eq!(
        actions,
        vec![Action::SetWeight {
            canary: 100,
            stable: 0
        }]
    );
    world.now += 1_000;
    let actions = without_events(&world.tick(&[]));
    assert_eq!(
        actions,
        vec![
            Action::MarkStable { revision: 2 },
            Action::SetWeight {
                canary: 0,
                stable: 100
            }
        ]
    );
    assert_eq!(world.state.stable, Some(2));
    // The old stable goes after scaleDownDelaySeconds (10 s).
    world.now += 9_000;
    assert!(without_events(&world.tick(&[])).is_empty());
    world.now += 1_000;
    assert_eq!(without_events(&world.tick(&[])), vec![scale(1, 0, &world)]);
    world.now += 1_000;
    world.tick(&[]);
    assert_eq!(world.state.phase, Phase::Healthy);
}

#[test]
fn without_traffic_routing_weights_follow_replicas_within_surge_and_unavailability() {
    let steps = json!([{"setWeight": 50}, {"pause": {}}]);
    let base = rollout(
        4,
        json!({"canary": {"maxSurge": 1, "maxUnavailable": 0, "steps": steps}}),
        json!({}),
    );
    let mut world = World::new(base.clone());
    world.tick(&[]);
    world.now = 1_000;
    let actions = without_events(&world.deploy(with_image(&base, "demo:2.0")));
    // Surge 1, unavailable 0: one canary pod first, no stable pod removed yet.
    assert_eq!(actions, vec![scale(2, 1, &world)]);
    world.now = 2_000;
    let actions = without_events(&world.tick(&[]));
    // One canary available: one stable pod may go; and one more canary may come next.
    assert_eq!(actions, vec![scale(1, 3, &world)]);
    world.run_until(10_000, 1_000);
    assert_eq!(world.replicas.get(&2), Some(&2));
    assert_eq!(world.replicas.get(&1), Some(&2));
    assert_eq!(world.state.step_index, Some(1));
    assert!(
        world
            .log
            .iter()
            .all(|(_, a)| !matches!(a, Action::SetWeight { .. })),
        "no router, no weights"
    );
    // Total pods never exceeded replicas + surge, available never fell below replicas.
    world.tick(&[Command::Promote { full: false }]);
    world.run_until(20_000, 1_000);
    assert_eq!(world.state.stable, Some(2));
    assert_eq!(world.replicas.get(&1), Some(&0));
}

#[test]
fn an_autoscaled_rollout_sizes_its_revisions_by_the_clusters_replicas() {
    // The spec says 2 (what Git holds); an HPA scaled the cluster's Rollout to 6.
    let steps = json!([{"setWeight": 50}, {"pause": {}}]);
    let base = rollout(2, json!({"canary": {"steps": steps}}), json!({}));
    let mut world = World::new(base.clone());
    world.autoscaled = Some(6);
    world.tick(&[]);
    world.run_until(3_000, 1_000);
    assert_eq!(
        world.replicas.get(&1),
        Some(&6),
        "the stable at the HPA's count"
    );
    world.deploy(with_image(&base, "demo:2.0"));
    world.run_until(10_000, 1_000);
    assert_eq!(world.state.step_index, Some(1));
    assert_eq!(world.replicas.get(&2), Some(&3), "half of 6, not of 2");
    assert_eq!(world.replicas.get(&1), Some(&3));
    // The HPA scales down to 4 mid-pause: both follow.
    world.autoscaled = Some(4);
    world.run_until(15_000, 1_000);
    assert_eq!(world.replicas.get(&2), Some(&2));
    assert_eq!(world.replicas.get(&1), Some(&2));
    world.tick(&[Command::Promote { full: false }]);
    world.run_until(25_000, 1_000);
    assert_eq!(world.state.stable, Some(2));
    assert_eq!(world.replicas.get(&2), Some(&4));
    assert_eq!(world.replicas.get(&1), Some(&0));
}

#[test]
fn analysis_steps_gate_and_a_failed_run_aborts_back_to_stable() {
    let steps = json!([{"setWeight": 20}, {"analysis": {"templates": [{"templateName": "check"}]}}, {"setWeight": 60}]);
    let base = rollout(5, canary_routed(steps), json!({}));
    let mut world = World::new(base.clone());
    world.tick(&[]);
    world
        .scripts
        .insert("step1".into(), vec![json!(1), json!(0), json!(0)]);
    world.now = 1_000;
    world.deploy(with_image(&base, "demo:2.0"));
    world.run_until(5_000, 1_000);
    assert!(world.log.iter().any(|(_, a)| *a
        == Action::StartAnalysis {
            run: RunKey {
                revision: 2,
                attempt: 0,
                slot: AnalysisSlot::Step(1)
            }
        }));
    assert_eq!(world.state.step_index, Some(1), "waiting on the analysis");
    world.run_until(40_000, 1_000);
    assert!(world.state.abort);
    assert_eq!(world.state.phase, Phase::Degraded);
    assert!(world.state.message.starts_with("RolloutAborted: Rollout aborted update to revision 2: Step-based analysis phase failed: Metric \"check\" assessed Failed"), "{}", world.state.message);
    assert_eq!(world.weights.canary, 0, "traffic back on stable at once");
    assert!(
        world
            .log
            .iter()
            .all(|(_, a)| !matches!(a, Action::SetWeight { canary: 60, .. })),
        "the step after the analysis was never reached"
    );
    // The canary is scaled down after abortScaleDownDelaySeconds (default 30 s).
    let aborted_at = world.state.aborted_at.unwrap();
    let scaled_down = world
        .log
        .iter()
        .find(|(_, a)| *a == scale(2, 0, &world))
        .map(|(t, _)| *t);
    assert!(scaled_down.is_none() || scaled_down.unwrap() >= aborted_at + 30_000);
    world.run_until(aborted_at + 31_000, 1_000);
    assert_eq!(world.replicas.get(&2), Some(&0));

    // retry: a new attempt, from the first step; a passing analysis lets it complete.
    world
        .scripts
        .insert("step1".into(), vec![json!(1), json!(1), json!(1)]);
    world.now += 1_000;
    world.tick(&[Command::Retry]);
    assert!(!world.state.abort);
    world.run_until(world.now + 60_000, 1_000);
    assert!(world.log.iter().any(|(_, a)| *a
        == Action::StartAnalysis {
            run: RunKey {
                revision: 2,
                attempt: 1,
                slot: AnalysisSlot::Step(1)
            }
        }));
    assert_eq!(world.state.stable, Some(2), "{:?}", world.state);
}

#[test]
fn background_analysis_watches_from_its_starting_step() {
    let strategy = json!({"canary": {"canaryService": "c", "stableService": "s", "trafficRouting": {"plugins": {"flotilla/agent": {}}},
        "analysis": {"templates": [{"templateName": "check"}], "startingStep": 1},
        "steps": [{"setWeight": 10}, {"pause": {"duration": "1m"}}, {"setWeight": 50}, {"pause": {"duration": "1m"}}]}});
    let base = rollout(10, strategy, json!({}));
    let mut world = World::new(base.clone());
    world.tick(&[]);
    world
        .scripts
        .insert("background".into(), vec![json!(1), json!(1), json!(0)]);
    world.now = 1_000;
    world.deploy(with_image(&base, "demo:2.0"));
    let started = |world: &World| {
        world.log.iter().any(|(_, a)| matches!(a, Action::StartAnalysis { run } if run.slot == AnalysisSlot::Background))
    };
    world.now = 2_000;
    world.tick(&[]);
    assert!(!started(&world), "not during step 0");
    world.now = 3_000;
    world.tick(&[]);
    assert!(started(&world), "started once step 1 is reached");
    world.run_until(60_000, 1_000);
    assert!(
        world.state.abort,
        "the third measurement failed: {:?}",
        world.state.message
    );
    assert!(
        world
            .state
            .message
            .contains("Background analysis phase failed"),
        "{}",
        world.state.message
    );
}

#[test]
fn an_inconclusive_run_pauses_and_promote_moves_past_it() {
    let steps = json!([{"setWeight": 20}, {"analysis": {"templates": [{"templateName": "check"}]}}, {"setWeight": 40}]);
    let base = rollout(5, canary_routed(steps), json!({}));
    let mut world = World::new(base.clone());
    world.tick(&[]);
    world.scripts.insert("step1".into(), vec![json!(0.5)]);
    world.now = 1_000;
    world.deploy(with_image(&base, "demo:2.0"));
    world.run_until(10_000, 1_000);
    assert_eq!(world.state.phase, Phase::Paused);
    assert!(world.state.has_pause(PauseReason::InconclusiveAnalysisRun));
    assert!(world.state.controller_pause);
    world.now += 1_000;
    world.tick(&[Command::Promote { full: false }]);
    world.run_until(world.now + 5_000, 1_000);
    assert_eq!(
        world.state.stable,
        Some(2),
        "promoted past the inconclusive step and completed: {:?}",
        world.state
    );
}

#[test]
fn abort_with_routing_returns_traffic_at_once_and_respects_abort_scale_down_delay() {
    for (delay, expect_scale_down) in [(Some(0), false), (Some(5), true), (None, true)] {
        let mut strategy = canary_routed(json!([{"setWeight": 40}, {"pause": {}}]));
        if let Some(delay) = delay {
            strategy["canary"]["abortScaleDownDelaySeconds"] = json!(delay);
        }
        let base = rollout(5, strategy, json!({}));
        let mut world = World::new(base.clone());
        world.tick(&[]);
        world.now = 1_000;
        world.deploy(with_image(&base, "demo:2.0"));
        world.run_until(5_000, 1_000);
        assert_eq!(world.weights.canary, 40);
        world.now += 1_000;
        let actions = without_events(&world.tick(&[Command::Abort]));
        assert_eq!(
            actions[0],
            Action::SetWeight {
                canary: 0,
                stable: 100
            },
            "{delay:?}"
        );
        assert_eq!(
            world.state.message,
            "RolloutAborted: Rollout aborted update to revision 2"
        );
        world.run_until(world.now + 60_000, 1_000);
        let scaled = world.replicas.get(&2) == Some(&0);
        assert_eq!(scaled, expect_scale_down, "delay {delay:?}");
    }
}

#[test]
fn abort_with_dynamic_stable_scale_returns_traffic_as_the_stable_scales_back_up() {
    let mut strategy = canary_routed(json!([{"setWeight": 50}, {"pause": {}}]));
    strategy["canary"]["dynamicStableScale"] = json!(true);
    let base = rollout(4, strategy, json!({}));
    let mut world = World::new(base.clone());
    world.tick(&[]);
    world.now = 1_000;
    world.deploy(with_image(&base, "demo:2.0"));
    world.run_until(5_000, 1_000);
    assert_eq!(
        world.replicas.get(&1),
        Some(&2),
        "the stable shrank with the canary's weight"
    );
    // The stable cannot come back at once.
    world.stuck.push(1);
    world.now += 1_000;
    world.tick(&[Command::Abort]);
    assert_eq!(
        world.weights.canary, 100,
        "no available stable pods yet: traffic stays where it can be served"
    );
    world.stuck.clear();
    world.now += 1_000;
    world.tick(&[]);
    assert_eq!(
        world.weights.canary, 0,
        "the stable is back: all traffic returns"
    );
}

#[test]
fn without_routing_an_abort_scales_the_canary_down_at_once() {
    let base = rollout(
        4,
        json!({"canary": {"steps": [{"setWeight": 50}, {"pause": {}}]}}),
        json!({}),
    );
    let mut world = World::new(base.clone());
    world.tick(&[]);
    world.now = 1_000;
    world.deploy(with_image(&base, "demo:2.0"));
    world.run_until(10_000, 1_000);
    world.now += 1_000;
    let actions = without_events(&world.tick(&[Command::Abort]));
    assert!(actions.contains(&scale(2, 0, &world)), "{actions:?}");
    assert!(actions.contains(&scale(1, 4, &world)), "{actions:?}");
}

#[test]
fn promote_full_skips_everything_and_pause_resume_hold_the_rollout() {
    let steps = json!([{"setWeight": 10}, {"pause": {}}, {"analysis": {"templates": [{"templateName": "check"}]}}, {"setWeight": 50}]);
    let base = rollout(2, canary_routed(steps), json!({}));
    let mut world = World::new(base.clone());
    world.tick(&[]);
    world.now = 1_000;
    world.deploy(with_image(&base, "demo:2.0"));
    world.now += 1_000;
    world.tick(&[Command::Pause]);
    assert_eq!(world.state.phase, Phase::Paused);
    assert_eq!(world.state.message, "manually paused");
    let before = world.log.len();
    world.run_until(world.now + 10_000, 1_000);
    assert!(
        without_events(
            &world.log[before..]
                .iter()
                .map(|(_, a)| a.clone())
                .collect::<Vec<_>>()
        )
        .is_empty(),
        "nothing moves while paused"
    );
    world.now += 1_000;
    world.tick(&[Command::Resume]);
    world.run_until(world.now + 3_000, 1_000);
    assert_eq!(world.state.step_index, Some(1));
    world.now += 1_000;
    world.tick(&[Command::Promote { full: true }]);
    world.run_until(world.now + 3_000, 1_000);
    assert_eq!(world.state.stable, Some(2));
    assert!(
        !world
            .log
            .iter()
            .any(|(_, a)| matches!(a, Action::StartAnalysis { .. })),
        "analysis skipped"
    );
}

#[test]
fn undo_set_image_and_restart_are_commands_for_the_spec_and_pods() {
    let base = rollout(2, canary_routed(json!([{"setWeight": 10}])), json!({}));
    let mut world = World::new(base.clone());
    world.tick(&[]);
    world.now = 1_000;
    world.deploy(with_image(&base, "demo:2.0"));
    world.run_until(5_000, 1_000);
    assert_eq!(world.state.stable, Some(2));
    let actions = without_events(&world.tick(&[
        Command::Undo { to_revision: None },
        Command::SetImage {
            container: "app".into(),
            image: "demo:3.0".into(),
        },
        Command::Restart,
    ]));
    assert_eq!(
        actions,
        vec![
            Action::RestoreRevision { revision: 1 },
            Action::UpdateImage {
                container: "app".into(),
                image: "demo:3.0".into()
            },
            Action::RestartPods { revision: 2 },
        ]
    );
}

#[test]
fn returning_to_the_stable_template_skips_the_steps() {
    let base = rollout(
        3,
        canary_routed(json!([{"setWeight": 30}, {"pause": {}}])),
        json!({}),
    );
    let mut world = World::new(base.clone());
    world.tick(&[]);
    world.now = 1_000;
    world.deploy(with_image(&base, "demo:2.0"));
    world.run_until(5_000, 1_000);
    assert_eq!(world.weights.canary, 30);
    world.now += 1_000;
    world.deploy(base.clone());
    assert_eq!(world.state.current, Some(1));
    assert_eq!(world.weights.canary, 0);
    assert_eq!(world.replicas.get(&2), Some(&0));
    world.now += 1_000;
    world.tick(&[]);
    assert_eq!(world.state.phase, Phase::Healthy);
}

#[test]
fn the_rollback_window_skips_steps_for_a_recent_revision() {
    let base = rollout(
        2,
        canary_routed(json!([{"setWeight": 10}, {"pause": {}}])),
        json!({"rollbackWindow": {"revisions": 3}}),
    );
    let mut world = World::new(base.clone());
    world.tick(&[]);
    for (i, image) in ["demo:2.0", "demo:3.0"].iter().enumerate() {
        world.now += 1_000;
        world.deploy(with_image(&base, image));
        world.run_until(world.now + 3_000, 1_000);
        world.now += 1_000;
        world.tick(&[Command::Promote { full: false }]);
        world.run_until(world.now + 3_000, 1_000);
        assert_eq!(world.state.stable, Some(i as u32 + 2));
    }
    // Back to 2.0 (revision 2, within the window): no pause on the way.
    world.now += 1_000;
    world.deploy(with_image(&base, "demo:2.0"));
    world.run_until(world.now + 5_000, 1_000);
    assert_eq!(world.state.stable, Some(4), "{:?}", world.state);
    assert_eq!(world.state.phase, Phase::Healthy);
}

#[test]
fn a_new_template_mid_rollout_starts_a_fresh_canary() {
    let steps = json!([{"setWeight": 20}, {"analysis": {"templates": [{"templateName": "check"}]}}, {"setWeight": 60}]);
    let base = rollout(5, canary_routed(steps), json!({}));
    let mut world = World::new(base.clone());
    world.tick(&[]);
    world.now = 1_000;
    world.deploy(with_image(&base, "demo:2.0"));
    world.run_until(5_000, 1_000);
    world.now += 1_000;
    let actions = without_events(&world.deploy(with_image(&base, "demo:3.0")));
    assert!(
        actions.contains(&Action::TerminateAnalysis {
            run: RunKey {
                revision: 2,
                attempt: 0,
                slot: AnalysisSlot::Step(1)
            }
        }),
        "{actions:?}"
    );
    assert!(actions.contains(&scale(2, 0, &world)), "{actions:?}");
    assert_eq!(world.state.current, Some(3));
    assert_eq!(world.state.step_index, Some(0));
}

#[test]
fn header_mirror_and_canary_scale_steps() {
    let strategy = json!({"canary": {"canaryService": "c", "stableService": "s",
    "trafficRouting": {"plugins": {"flotilla/agent": {}}, "managedRoutes": [{"name": "header"}, {"name": "mirror"}]},
    "steps": [
        {"setCanaryScale": {"replicas": 1}},
        {"setHeaderRoute": {"name": "header", "match": [{"headerName": "x-canary-user", "headerValue": {"exact": "true"}}]}},
        {"setMirrorRoute": {"name": "mirror", "percentage": 35, "match": [{"method": {"exact": "GET"}}]}},
        {"pause": {}},
        {"setHeaderRoute": {"name": "header"}},
        {"setWeight": 100}
    ]}});
    let base = rollout(4, strategy, json!({}));
    let mut world = World::new(base.clone());
    world.tick(&[]);
    world.now = 1_000;
    let actions = without_events(&world.deploy(with_image(&base, "demo:2.0")));
    assert_eq!(actions, vec![scale(2, 1, &world)]);
    world.now += 1_000;
    let actions = without_events(&world.tick(&[]));
    assert!(
        matches!(&actions[0], Action::SetHeaderRoute { name, .. } if name == "header"),
        "{actions:?}"
    );
    assert!(
        matches!(&actions[1], Action::SetMirrorRoute { name, percentage: 35, .. } if name == "mirror"),
        "{actions:?}"
    );
    world.now += 1_000;
    let actions = without_events(&world.tick(&[Command::Promote { full: false }]));
    assert_eq!(
        actions[0],
        Action::RemoveHeaderRoute {
            name: "header".into()
        },
        "{actions:?}"
    );
}

#[test]
fn a_router_that_does_not_apply_a_weight_blocks_the_step() {
    let base = rollout(
        2,
        canary_routed(json!([{"setWeight": 50}, {"setWeight": 80}])),
        json!({}),
    );
    let mut world = World::new(base.clone());
    world.tick(&[]);
    world.router_broken = true;
    world.now = 1_000;
    world.deploy(with_image(&base, "demo:2.0"));
    world.run_until(30_000, 1_000);
    assert_eq!(
        world.state.step_index,
        Some(0),
        "blocked: the router never applied 50"
    );
    let asks = world
        .log
        .iter()
        .filter(|(_, a)| matches!(a, Action::SetWeight { canary: 50, .. }))
        .count();
    assert!(asks >= 2, "the engine asks again ({asks})");
    world.router_broken = false;
    world.run_until(45_000, 1_000);
    assert!(world.state.step_index.unwrap() >= 1);
}

#[test]
fn progress_deadline_degrades_and_optionally_aborts() {
    for abort in [false, true] {
        let base = rollout(
            2,
            canary_routed(json!([{"setWeight": 50}])),
            json!({"progressDeadlineSeconds": 60, "progressDeadlineAbort": abort}),
        );
        let mut world = World::new(base.clone());
        world.tick(&[]);
        world.stuck.push(2);
        world.now = 1_000;
        world.deploy(with_image(&base, "demo:2.0"));
        world.run_until(50_000, 1_000);
        assert_eq!(world.state.phase, Phase::Progressing);
        world.run_until(70_000, 1_000);
        assert_eq!(world.state.phase, Phase::Degraded);
        assert_eq!(world.state.abort, abort);
        assert!(
            world.state.message.contains("ProgressDeadlineExceeded"),
            "{}",
            world.state.message
        );
    }
}

fn blue_green(extra: Value) -> Value {
    let mut bg = json!({"activeService": "active", "previewService": "preview"});
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            bg[k] = v;
        }
    }
    json!({"blueGreen": bg})
}

#[test]
fn blue_green_previews_then_switches_and_scales_the_old_down_later() {
    let base = rollout(
        3,
        blue_green(json!({"previewReplicaCount": 1, "scaleDownDelaySeconds": 20})),
        json!({}),
    );
    let mut world = World::new(base.clone());
    assert_eq!(
        without_events(&world.tick(&[])),
        vec![
            scale(1, 3, &world),
            Action::MarkStable { revision: 1 },
            Action::SwitchActive { revision: 1 }
        ]
    );
    world.now = 1_000;
    let actions = without_events(&world.deploy(with_image(&base, "demo:2.0")));
    assert_eq!(
        actions,
        vec![scale(2, 1, &world), Action::SwitchPreview { revision: 2 }]
    );
    world.now = 2_000;
    let actions = without_events(&world.tick(&[]));
    // Auto-promotion: full size first, then the switch.
    assert_eq!(actions, vec![scale(2, 3, &world)]);
    world.now = 3_000;
    let actions = without_events(&world.tick(&[]));
    assert_eq!(
        actions,
        vec![
            Action::SwitchActive { revision: 2 },
            Action::MarkStable { revision: 2 }
        ]
    );
    world.run_until(22_000, 1_000);
    assert_eq!(
        world.replicas.get(&1),
        Some(&3),
        "old active kept for scaleDownDelaySeconds"
    );
    world.run_until(24_000, 1_000);
    assert_eq!(world.replicas.get(&1), Some(&0));
    assert_eq!(world.state.phase, Phase::Healthy);
}

#[test]
fn blue_green_waits_for_promotion_or_auto_promotion_seconds() {
    let base = rollout(
        2,
        blue_green(json!({"autoPromotionEnabled": false})),
        json!({}),
    );
    let mut world = World::new(base.clone());
    world.tick(&[]);
    world.now = 1_000;
    world.deploy(with_image(&base, "demo:2.0"));
    world.run_until(60_000, 1_000);
    assert_eq!(world.state.phase, Phase::Paused);
    assert!(world.state.has_pause(PauseReason::BlueGreenPause));
    assert_eq!(world.state.active, Some(1));
    world.now += 1_000;
    world.tick(&[Command::Promote { full: false }]);
    world.run_until(world.now + 3_000, 1_000);
    assert_eq!(world.state.active, Some(2));

    let base = rollout(
        2,
        blue_green(json!({"autoPromotionSeconds": 30})),
        json!({}),
    );
    let mut world = World::new(base.clone());
    world.tick(&[]);
    world.now = 1_000;
    world.deploy(with_image(&base, "demo:2.0"));
    world.run_until(25_000, 1_000);
    assert_eq!(world.state.active, Some(1));
    world.run_until(40_000, 1_000);
    assert_eq!(world.state.active, Some(2));
}

#[test]
fn blue_green_analysis_gates_the_switch_and_can_switch_back() {
    let pre = json!({"prePromotionAnalysis": {"templates": [{"templateName": "check"}]}});
    let base = rollout(2, blue_green(pre), json!({}));
    let mut world = World::new(base.clone());
    world.tick(&[]);
    world.scripts.insert("pre".into(), vec![json!(0)]);
    world.now = 1_000;
    world.deploy(with_image(&base, "demo:2.0"));
    world.run_until(10_000, 1_000);
    assert!(world.state.abort);
    assert_eq!(world.state.active, Some(1), "never switched");
    assert!(
        world
            .state
            .message
            .contains("Blue/green pre-promotion analysis phase failed"),
        "{}",
        world.state.message
    );

    let post = json!({"postPromotionAnalysis": {"templates": [{"templateName": "check"}]}, "abortScaleDownDelaySeconds": 0});
    let base = rollout(2, blue_green(post), json!({}));
    let mut world = World::new(base.clone());
    world.tick(&[]);
    world
        .scripts
        .insert("post".into(), vec![json!(1), json!(0), json!(0)]);
    world.now = 1_000;
    world.deploy(with_image(&base, "demo:2.0"));
    world.run_until(5_000, 1_000);
    assert_eq!(
        world.state.active,
        Some(2),
        "switched, post-promotion analysis running"
    );
    world.run_until(40_000, 1_000);
    assert!(world.state.abort);
    assert_eq!(world.state.active, Some(1), "switched back to the stable");
    assert_eq!(world.state.stable, Some(1));
}

/// Seed 004's hands-on lab, steps 2 to 6: 20% → 30 s pause → 50% → manual promote; then an
/// analysis step whose Job exits 1 aborts back to the previous stable.
#[test]
fn seed_004_lab_on_the_virtual_clock() {
    let steps = json!([{"setWeight": 20}, {"pause": {"duration": "30s"}}, {"setWeight": 50}, {"pause": {}}]);
    let lab = rollout(5, json!({"canary": {"steps": steps}}), json!({}));
    let mut world = World::new(lab.clone());
    world.tick(&[]);
    world.now = 1_000;
    world.deploy(with_image(&lab, "argoproj/rollouts-demo:yellow"));
    world.run_until(10_000, 1_000);
    assert_eq!(world.replicas.get(&2), Some(&1), "20% of 5 replicas");
    assert_eq!(world.state.phase, Phase::Paused);
    world.run_until(45_000, 1_000);
    assert_eq!(world.replicas.get(&2), Some(&3), "50% of 5, rounded up");
    assert_eq!(world.state.phase, Phase::Paused, "waiting for promote");
    world.now += 1_000;
    world.tick(&[Command::Promote { full: false }]);
    world.run_until(world.now + 10_000, 1_000);
    assert_eq!(world.state.stable, Some(2));
    assert_eq!(world.state.phase, Phase::Healthy);

    // Step 6: an analysis step whose Job exits 1.
    let steps = json!([{"setWeight": 20}, {"analysis": {"templates": [{"templateName": "job-check"}]}}, {"setWeight": 50}]);
    let lab2 = rollout(5, json!({"canary": {"steps": steps}}), json!({}));
    world.rollout = with_image(&lab2, "argoproj/rollouts-demo:yellow");
    world.scripts.insert("job-step1".into(), vec![json!(1)]);
    world.now += 1_000;
    world.deploy(with_image(&lab2, "argoproj/rollouts-demo:red"));
    world.run_until(world.now + 20_000, 1_000);
    assert!(world.state.abort);
    assert_eq!(world.state.phase, Phase::Degraded);
    assert!(
        world.state.message.starts_with(
            "RolloutAborted: Rollout aborted update to revision 3: Step-based analysis phase failed"
        ),
        "{}",
        world.state.message
    );
    assert_eq!(
        world.replicas.get(&3),
        Some(&0),
        "without routing the canary goes at once"
    );
    assert_eq!(
        world.replicas.get(&2),
        Some(&5),
        "back on the previous stable"
    );
}

#[test]
fn per_rollout_state_is_small() {
    let base = rollout(
        10,
        canary_routed(
            json!([{"setWeight": 20}, {"analysis": {"templates": [{"templateName": "check"}]}}, {"setWeight": 60}]),
        ),
        json!({"strategy": {"canary": {"canaryService": "c", "stableService": "s", "trafficRouting": {"plugins": {"flotilla/agent": {}}}, "analysis": {"templates": [{"templateName": "check"}]}, "steps": [{"setWeight": 20}, {"analysis": {"templates": [{"templateName": "check"}]}}, {"setWeight": 60}]}}}),
    );
    let mut world = World::new(base.clone());
    world.tick(&[]);
    world.now = 1_000;
    world.deploy(with_image(&base, "demo:2.0"));
    world.run_until(5_000, 1_000);
    let bytes = serde_json::to_vec(&world.state).unwrap().len();
    assert!(bytes < 4096, "{bytes} bytes");
}

// === Property tests ===

#[derive(Debug, Clone)]
enum StepSpec {
    Weight(i32),
    Pause(Option<u32>),
    Analysis,
}

fn step_json(step: &StepSpec) -> Value {
    match step {
        StepSpec::Weight(w) => json!({"setWeight": w}),
        StepSpec::Pause(None) => json!({"pause": {}}),
        StepSpec::Pause(Some(s)) => json!({"pause": {"duration": s}}),
        StepSpec::Analysis => json!({"analysis": {"templates": [{"templateName": "check"}]}}),
    }
}

#[derive(Debug, Clone)]
struct Scenario {
    replicas: i32,
    routed: bool,
    dynamic: bool,
    abort_delay: Option<i32>,
    steps: Vec<StepSpec>,
    events: Vec<(u8, Option<Command>)>,
    analysis_results: Vec<i64>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let step = prop_oneof![
        (0i32..=100).prop_map(StepSpec::Weight),
        proptest::option::of(1u32..60).prop_map(StepSpec::Pause),
        Just(StepSpec::Analysis),
    ];
    let command = prop_oneof![
        Just(None),
        Just(None),
        Just(None),
        Just(Some(Command::Promote { full: false })),
        Just(Some(Command::Promote { full: true })),
        Just(Some(Command::Abort)),
        Just(Some(Command::Retry)),
        Just(Some(Command::Pause)),
        Just(Some(Command::Resume)),
    ];
    (
        1i32..10,
        any::<bool>(),
        any::<bool>(),
        proptest::option::of(prop_oneof![Just(0), Just(5), Just(30)]),
        prop::collection::vec(step, 1..7),
        prop::collection::vec((1u8..20, command), 1..40),
        prop::collection::vec(0i64..3, 0..20),
    )
        .prop_map(
            |(replicas, routed, dynamic, abort_delay, steps, events, analysis_results)| Scenario {
                replicas,
                routed,
                dynamic: dynamic && routed,
                abort_delay: abort_delay.filter(|_| routed),
                steps,
                events,
                analysis_results,
            },
        )
}

fn scenario_rollout(s: &Scenario) -> Rollout {
    let steps: Vec<Value> = s.steps.iter().map(step_json).collect();
    let mut canary = json!({"steps": steps});
    if s.routed {
        canary["canaryService"] = json!("c");
        canary["stableService"] = json!("s");
        canary["trafficRouting"] = json!({"plugins": {"flotilla/agent": {}}});
        if s.dynamic {
            canary["dynamicStableScale"] = json!(true);
        }
        if let Some(d) = s.abort_delay {
            canary["abortScaleDownDelaySeconds"] = json!(d);
        }
    }
    rollout(s.replicas, json!({"canary": canary}), json!({}))
}

/// The highest weight the steps reached so far allow: setWeights up to the current step, or
/// everything once all steps are done.
fn weight_allowed(s: &Scenario, state: &RolloutState) -> i32 {
    let index = state.step_index.unwrap_or(0) as usize;
    if index >= s.steps.len() {
        return 100;
    }
    s.steps[..=index]
        .iter()
        .filter_map(|st| {
            if let StepSpec::Weight(w) = st {
                Some(*w)
            } else {
                None
            }
        })
        .max()
        .unwrap_or(0)
}

fn run_scenario(s: &Scenario, checks: bool) -> (Vec<(i64, Action)>, RolloutState) {
    let base = scenario_rollout(s);
    let mut world = World::new(base.clone());
    let results: Vec<Value> = s.analysis_results.iter().map(|v| json!(v)).collect();
    for i in 0..s.steps.len() {
        world.scripts.insert(format!("step{i}"), results.clone());
    }
    world.tick(&[]);
    world.now = 1_000;
    world.deploy(with_image(&base, "demo:2.0"));
    let mut full_promoted = false;
    for (wait, command) in &s.events {
        world.now += i64::from(*wait) * 1_000;
        let commands: Vec<Command> = command.iter().cloned().collect();
        if commands.contains(&Command::Promote { full: true }) {
            full_promoted = true;
        }
        let was_aborted = world.state.abort;
        let before_step = world.state.step_index;
        let actions = world.tick(&commands);
        if !checks {
            continue;
        }
        for action in &actions {
            if let Action::SetWeight { canary, stable } = action {
                assert_eq!(canary + stable, 100, "weights sum to maxTrafficWeight");
            }
        }
        assert_eq!(world.weights.canary + world.weights.stable, 100);
        if s.routed
            && !full_promoted
            && !world.state.abort
            && world.state.current != world.state.stable
        {
            let allowed = weight_allowed(s, &world.state);
            assert!(
                world.weights.canary <= allowed,
                "canary weight {} > allowed {allowed}: {s:?}",
                world.weights.canary
            );
        }
        if world.state.abort && !was_aborted && world.state.current != world.state.stable {
            if s.routed && !s.dynamic {
                assert_eq!(
                    world.weights.canary, 0,
                    "abort with routing: all traffic to stable at once"
                );
            }
            if !s.routed {
                assert_eq!(
                    world.replicas.get(&world.state.current.unwrap()),
                    Some(&0),
                    "no routing: canary scaled down at once"
                );
            }
        }
        if world.state.abort && s.routed && s.abort_delay == Some(0) && !s.dynamic {
            let current = world.state.current.unwrap();
            assert!(
                !actions.contains(&Action::Scale {
                    revision: current,
                    hash: world.state.hash(current),
                    replicas: 0
                }),
                "abortScaleDownDelaySeconds 0: never scaled down"
            );
        }
        if commands.is_empty() && before_step != world.state.step_index {
            // No step after an analysis step is reached while that analysis is not Successful.
            let from = before_step.unwrap_or(0) as usize;
            let to = world.state.step_index.unwrap_or(0) as usize;
            for i in from..to.min(s.steps.len()) {
                if matches!(s.steps[i], StepSpec::Analysis)
                    && world.state.current != world.state.stable
                {
                    let key = RunKey {
                        revision: world.state.current.unwrap(),
                        attempt: world.state.attempt,
                        slot: AnalysisSlot::Step(i as u32),
                    };
                    let phase = world.runs.get(&key).map(|(_, r, _)| r.phase);
                    assert_eq!(
                        phase,
                        Some(AnalysisPhase::Successful),
                        "step {i} passed without a successful analysis: {s:?}"
                    );
                }
            }
        }
    }
    (world.log, world.state)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn invariants_hold_over_random_specs_commands_and_outcomes(s in scenario()) {
        run_scenario(&s, true);
    }

    #[test]
    fn the_engine_is_deterministic(s in scenario()) {
        let (log_a, state_a) = run_scenario(&s, false);
        let (log_b, state_b) = run_scenario(&s, false);
        prop_assert_eq!(log_a, log_b);
        prop_assert_eq!(state_a, state_b);
    }

    #[test]
    fn persisted_state_restores_to_the_same_outputs(s in scenario(), cut in 0usize..40) {
        let base = scenario_rollout(&s);
        let observed = Observed {
            replicas: [(1, ReplicaCounts { replicas: s.replicas, ready: s.replicas, available: s.replicas })].into_iter().collect(),
            weights: Some(Weights { canary: 0, stable: 100 }),
            analysis: BTreeMap::new(),
            spec_replicas: None,
        };
        let mut state = RolloutState::default();
        reconcile(&base, &mut state, &observed, &[], 0);
        let next = with_image(&base, "demo:2.0");
        let mut original = state.clone();
        let mut now = 1_000;
        for (i, (wait, command)) in s.events.iter().enumerate() {
            if i == cut {
                break;
            }
            now += i64::from(*wait) * 1_000;
            reconcile(&next, &mut original, &observed, &command.iter().cloned().collect::<Vec<_>>(), now);
        }
        let text = serde_json::to_string(&original).unwrap();
        let mut restored: RolloutState = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(&restored, &original);
        for (wait, command) in s.events.iter().skip(cut) {
            now += i64::from(*wait) * 1_000;
            let commands: Vec<Command> = command.iter().cloned().collect();
            let a = reconcile(&next, &mut original, &observed, &commands, now);
            let b = reconcile(&next, &mut restored, &observed, &commands, now);
            prop_assert_eq!(a, b);
        }
        prop_assert_eq!(original, restored);
    }
}

#[test]
fn analysis_outcome_helpers_are_wired() {
    // The world's analysis uses the real run machine: a job metric fails on exit code 1.
    let plan = analysis_plan(true);
    let mut run = Run::new(&plan, 0);
    for request in run.poll_due(&plan, 0) {
        run.handle_outcome(
            &plan,
            request.metric_index,
            0,
            crate::analysis::replay::outcome_of(&json!(1), true),
        );
    }
    assert_eq!(run.assess(&plan, 0), AnalysisPhase::Failed);
}

/// A template aborted, rolled back to the stable and released again is one revision under a
/// new number, as Argo re-labels the ReplicaSet: never two revisions of one hash (the data
/// plane, which tells revisions apart by what they run, would count the same pods twice and
/// the old one would never scale down).
#[test]
fn a_template_released_again_is_one_revision_under_a_new_number() {
    let base = rollout(
        4,
        canary_routed(json!([{"setWeight": 40}, {"pause": {"duration": 5}}])),
        json!({}),
    );
    let mut world = World::new(base.clone());
    world.tick(&[]);
    world.now = 1_000;
    let next = with_image(&base, "demo:2.0");
    world.deploy(next.clone());
    world.run_until(5_000, 1_000);
    world.now += 1_000;
    world.tick(&[Command::Abort]);
    world.run_until(world.now + 40_000, 1_000);
    world.deploy(base.clone());
    world.run_until(world.now + 5_000, 1_000);
    world.deploy(next);
    world.run_until(world.now + 60_000, 1_000);
    let hashes: Vec<&str> = world.state.revisions.iter().map(|r| &*r.hash).collect();
    let unique: std::collections::BTreeSet<&str> = hashes.iter().copied().collect();
    assert_eq!(hashes.len(), unique.len(), "{:?}", world.state.revisions);
    assert_eq!(world.state.stable, Some(3), "{:?}", world.state);
    assert_eq!(
        world.state.phase,
        crate::rollout::Phase::Healthy,
        "{}",
        world.state.message
    );
}
