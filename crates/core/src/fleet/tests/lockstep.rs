//! Lockstep waves on the simulated fleet: the barrier before each step over random layouts,
//! regressions and stalls (a cluster that stops answering for a while falls behind), the
//! whole wave aborted with `abortWave`, the operator's release, and blue-green's switch.

use proptest::prelude::*;

use super::*;

/// A random lockstep case: each cluster's wave (1..=3, every wave in lockstep), the clusters
/// whose new version fails, stalls (cluster, first tick, ticks), the failure policy, and
/// whether an unreachable cluster is skipped (after 1m) instead of halting (after 10m).
#[derive(Debug, Clone)]
struct LockstepCase {
    waves: Vec<u32>,
    regressed: Vec<bool>,
    stalls: Vec<(usize, u16, u16)>,
    abort_wave: bool,
    skip: bool,
}

fn lockstep_case() -> impl Strategy<Value = LockstepCase> {
    (
        prop::collection::vec(1u32..4, 4),
        prop::collection::vec(prop::bool::weighted(0.25), 4),
        prop::collection::vec((0usize..4, 0u16..250, 1u16..40), 0..5),
        any::<bool>(),
        prop::bool::weighted(0.3),
    )
        .prop_map(
            |(waves, regressed, stalls, abort_wave, skip)| LockstepCase {
                waves,
                regressed,
                stalls,
                abort_wave,
                skip,
            },
        )
}

fn lockstep_sim(case: &LockstepCase) -> Sim {
    let list: Vec<Value> = CLUSTERS
        .iter()
        .zip(&case.waves)
        .map(|(c, w)| json!({"cluster": c, "wave": w}))
        .collect();
    let unreachable = if case.skip {
        json!({"timeout": "1m", "action": "skip"})
    } else {
        json!({"timeout": "10m"})
    };
    let policy = if case.abort_wave {
        "abortWave"
    } else {
        "continue"
    };
    let truth = Truth {
        regressed: CLUSTERS
            .iter()
            .zip(&case.regressed)
            .filter(|(_, r)| **r)
            .map(|(c, _)| *c)
            .collect(),
        ..Truth::healthy()
    };
    Sim::new(
        fleet_rollout(json!({
            "waves": {"list": list, "lockstep": true},
            "bakeTime": "30s",
            "failurePolicy": {"maxFailedClusters": 1, "unreachable": unreachable, "lockstep": policy}
        })),
        GUARDED,
        truth,
    )
}

/// The step index of each cluster of a lockstep wave that is still to pass the wave's steps:
/// in flight on the new revision, or (in the wave in progress) yet to start.
/// A cluster started but not yet on the new revision is at its start.
fn unfinished_steps(
    state: &FleetState,
    plan: &FleetPlan,
    wave: usize,
    new_hash: &str,
) -> Vec<(String, u32)> {
    plan.waves[wave]
        .iter()
        .filter_map(|name| {
            let cluster = &state.clusters[name];
            let engine = &cluster.rollout;
            let on_new = engine
                .current
                .and_then(|c| engine.revision(c))
                .is_some_and(|r| r.hash == new_hash);
            match cluster.status {
                ClusterStatus::Progressing | ClusterStatus::Paused if cluster.on_new_spec => {
                    Some((
                        name.clone(),
                        if on_new {
                            engine.step_index.unwrap_or(0)
                        } else {
                            0
                        },
                    ))
                }
                ClusterStatus::NotStarted
                    if wave == state.wave
                        && state.phase == FleetPhase::Progressing
                        && !state
                            .rejections
                            .contains(&(name.clone(), state.revision.clone())) =>
                {
                    Some((name.clone(), 0))
                }
                _ => None,
            }
        })
        .collect()
}

/// Runs a case, checking the lockstep invariants at every tick; returns the simulation.
fn run_lockstep(case: &LockstepCase) -> Sim {
    let mut sim = lockstep_sim(case);
    assert!(sim.machine.plan.lockstep.iter().all(|l| *l));
    // When each cluster's failure was decided (tick), and the wave it failed in.
    let mut failed: Vec<(u16, String, usize)> = Vec::new();
    for tick in 0..500u16 {
        sim.truth.unreachable = case
            .stalls
            .iter()
            .filter(|(_, from, len)| (*from..from + len).contains(&tick))
            .map(|(c, ..)| CLUSTERS[*c])
            .collect();
        sim.now += 5_000;
        let before = sim.machine.state.clone();
        sim.step(&[]);
        let new_hash = sim.new_hash();
        let state = &sim.machine.state;
        let plan = &sim.machine.plan;
        // No cluster of a lockstep wave is ever more than one step ahead of the slowest
        // cluster of that wave still to pass its steps.
        for wave in 0..plan.waves.len() {
            let steps = unfinished_steps(state, plan, wave, &new_hash);
            if let (Some(max), Some(min)) = (
                steps.iter().map(|(_, s)| *s).max(),
                steps.iter().map(|(_, s)| *s).min(),
            ) {
                assert!(
                    max <= min + 1,
                    "tick {tick}: wave {} apart by more than a step: {steps:?}: {case:?}",
                    wave + 1
                );
            }
        }
        for (name, cluster) in &state.clusters {
            let was = &before.clusters[name];
            if cluster.status == ClusterStatus::RolledBack
                && was.status != ClusterStatus::RolledBack
                && state
                    .rejections
                    .contains(&(name.clone(), state.revision.clone()))
            {
                failed.push((tick, name.clone(), plan.wave_of(name).unwrap()));
            }
        }
        // With abortWave, one reconcile after a failure no reachable cluster of the wave
        // serves canary traffic, and only the clusters that failed reject the revision.
        if case.abort_wave {
            for (at, who, wave) in &failed {
                if tick < at + 1 {
                    continue;
                }
                for member in &plan.waves[*wave] {
                    let reachable_since_failure = !case.stalls.iter().any(|(c, from, len)| {
                        CLUSTERS[*c] == member.as_str() && *from <= tick && from + len > *at
                    });
                    if reachable_since_failure && state.clusters[member].on_new_spec {
                        panic!(
                            "tick {tick}: {member} still on the new revision after {who} failed at tick {at}: {case:?}"
                        );
                    }
                    if reachable_since_failure {
                        let canary = sim.weights.get(member).map_or(0, |w| w.canary);
                        assert_eq!(
                            canary, 0,
                            "tick {tick}: {member} serves canary traffic after {who} failed at tick {at}: {case:?}"
                        );
                    }
                }
                let rejected: BTreeSet<&String> = state
                    .rejections
                    .iter()
                    .filter(|(c, r)| *r == state.revision && plan.wave_of(c) == Some(*wave))
                    .map(|(c, _)| c)
                    .collect();
                let failed_here: BTreeSet<&String> = failed
                    .iter()
                    .filter(|(_, _, w)| w == wave)
                    .map(|(_, c, _)| c)
                    .collect();
                assert_eq!(
                    rejected, failed_here,
                    "only the failed clusters reject the revision: {case:?}"
                );
            }
        }
    }
    sim
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_lockstep_wave_never_runs_more_than_a_step_apart_and_aborts_together(case in lockstep_case()) {
        let sim = run_lockstep(&case);
        // Without a regression or a stall the whole fleet completes.
        if case.regressed.iter().all(|r| !r) && case.stalls.is_empty() {
            prop_assert_eq!(sim.machine.state.phase, FleetPhase::Completed, "{:?}", case);
        }
    }
}

/// The fleet with `tier` labels: canary-eu-west `canary`, the others `prod`.
fn tiered_fleet() -> Fleet {
    let mut fleet = fleet();
    for cluster in &mut fleet.spec.clusters {
        let tier = if cluster.name == "canary-eu-west" {
            "canary"
        } else {
            "prod"
        };
        cluster.labels.insert("tier".into(), tier.into());
    }
    fleet
}

/// Three clusters in one lockstep wave after a canary cluster.
fn three_in_step(truth: Truth, extra: Value) -> Sim {
    let mut spec = json!({
        "waves": {"steps": [
            {"matchLabels": {"tier": "canary"}},
            {"matchLabels": {"tier": "prod"}, "lockstep": true}
        ]},
        "bakeTime": "30s",
        "failurePolicy": {"unreachable": {"timeout": "10m"}}
    });
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            spec[k] = v;
        }
    }
    Sim::with_fleet(&tiered_fleet(), fleet_rollout(spec), GUARDED, truth)
}

fn run_until_started(sim: &mut Sim, cluster: &str) {
    while sim.status(cluster) == ClusterStatus::NotStarted {
        sim.now += 5_000;
        sim.step(&[]);
        assert!(sim.now < 3_600_000, "{cluster} never started");
    }
}

/// One step with `commands`; its decisions.
fn barrier_events(sim: &mut Sim, commands: &[FleetCommand]) -> Vec<FleetEvent> {
    sim.step(commands);
    std::mem::take(&mut sim.events)
}

#[test]
fn a_stalled_cluster_holds_the_wave_at_the_barrier_and_the_operator_releases_it() {
    let mut sim = three_in_step(Truth::healthy(), json!({}));
    run_until_started(&mut sim, "prod-eu-west");
    // prod-ap-south stops answering right after its wave started: the other two complete
    // step 1 (setWeight 20) and wait for it.
    sim.truth.unreachable.insert("prod-ap-south");
    for _ in 0..12 {
        sim.now += 5_000;
        sim.step(&[]);
    }
    for name in ["prod-eu-west", "prod-us-east"] {
        let cluster = &sim.machine.state.clusters[name];
        assert_eq!(cluster.status, ClusterStatus::Paused, "{name}");
        assert_eq!(cluster.paused_for, Some(PausedFor::Barrier), "{name}");
        assert_eq!(
            cluster.reason,
            "waiting for lockstep barrier at step 1: clusters prod-ap-south not there yet"
        );
        assert_eq!(cluster.rollout.step_index, Some(0), "{name} holds step 1");
        assert_eq!(
            sim.weights[name].canary, 20,
            "{name} keeps its step's weight"
        );
    }
    let status = sim
        .machine
        .barrier_status(1, &sim.next)
        .expect("a barrier in wave 2");
    assert_eq!(
        (status.step, status.steps, status.passed),
        (1, 4, 0),
        "{status:?}"
    );
    assert_eq!(status.not_there, vec!["prod-ap-south".to_owned()]);
    // One cluster alone cannot pass the barrier.
    sim.now += 5_000;
    let refused = barrier_events(
        &mut sim,
        &[FleetCommand::Promote {
            wave: None,
            full: false,
            cluster: Some("prod-eu-west".into()),
        }],
    );
    assert!(
        refused.iter().any(|e| matches!(&e.decision, Decision::CommandRefused { why, .. } if why.contains("promote --wave 2"))),
        "{refused:#?}"
    );
    // The operator releases the barrier for the wave: the waiting clusters enter step 2, the
    // stalled one is not skipped ahead.
    sim.now += 5_000;
    let released = barrier_events(
        &mut sim,
        &[FleetCommand::Promote {
            wave: Some(2),
            full: false,
            cluster: None,
        }],
    );
    let passed = released
        .iter()
        .find_map(|e| match &e.decision {
            Decision::BarrierPassed {
                step,
                released,
                not_there,
                last_arrived,
                ..
            } => Some((
                *step,
                released.clone(),
                not_there.clone(),
                last_arrived.clone(),
            )),
            _ => None,
        })
        .expect("the barrier passed");
    assert_eq!(
        passed,
        (
            1,
            vec!["prod-eu-west".to_owned(), "prod-us-east".to_owned()],
            vec!["prod-ap-south".to_owned()],
            Vec::<String>::new()
        )
    );
    for _ in 0..3 {
        sim.now += 5_000;
        sim.step(&[]);
    }
    for name in ["prod-eu-west", "prod-us-east"] {
        assert!(
            sim.machine.state.clusters[name].rollout.step_index >= Some(1),
            "{name} entered step 2"
        );
    }
    let status = sim.machine.barrier_status(1, &sim.next).unwrap();
    assert_eq!((status.step, status.passed), (2, 1), "{status:?}");
    assert!(
        status.not_there.contains(&"prod-ap-south".to_owned()),
        "prod-ap-south was not skipped ahead: {status:?}"
    );
    // It answers again and catches up; the wave then moves together to the end.
    sim.truth.unreachable.clear();
    sim.run_until(3_600_000);
    assert_eq!(sim.machine.state.phase, FleetPhase::Completed);
}

#[test]
fn with_continue_the_failed_cluster_is_rolled_back_alone_and_the_barrier_stops_waiting() {
    let mut truth = Truth::healthy();
    truth.regressed.insert("prod-us-east");
    let mut sim = three_in_step(
        truth,
        json!({"failurePolicy": {"maxFailedClusters": 1, "lockstep": "continue"}}),
    );
    sim.run_until(3_600_000);
    let state = &sim.machine.state;
    assert_eq!(state.phase, FleetPhase::Completed, "{}", state.message);
    assert_eq!(
        state.clusters["prod-us-east"].status,
        ClusterStatus::RolledBack
    );
    for name in ["canary-eu-west", "prod-eu-west", "prod-ap-south"] {
        assert_eq!(
            state.clusters[name].status,
            ClusterStatus::Validated,
            "{name}"
        );
    }
}

#[test]
fn with_abort_wave_one_failure_returns_the_whole_wave_to_its_stable() {
    let mut truth = Truth::healthy();
    truth.regressed.insert("prod-us-east");
    let mut sim = three_in_step(truth, json!({}));
    sim.run_until(3_600_000);
    let state = &sim.machine.state;
    assert_eq!(state.phase, FleetPhase::Halted);
    assert!(
        state.message.contains("lockstep wave 2 aborted"),
        "{}",
        state.message
    );
    assert_eq!(
        state.clusters["canary-eu-west"].status,
        ClusterStatus::Validated
    );
    for name in ["prod-eu-west", "prod-us-east", "prod-ap-south"] {
        assert_eq!(
            state.clusters[name].status,
            ClusterStatus::RolledBack,
            "{name}"
        );
        assert_eq!(sim.weights[name].canary, 0, "{name}");
    }
    let rejected: Vec<&str> = state.rejections.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(rejected, vec!["prod-us-east"]);
    assert!(
        state.clusters["prod-eu-west"]
            .reason
            .contains("aborted with its lockstep wave 2: prod-us-east failed"),
        "{}",
        state.clusters["prod-eu-west"].reason
    );
}

#[test]
fn a_blue_green_lockstep_wave_switches_together() {
    let blue_green = |image: &str| -> Rollout {
        serde_json::from_value(json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": {"name": "payment-api"}, "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "payment-api"}},
            "template": {"metadata": {"labels": {"app": "payment-api"}}, "spec": {"containers": [{"name": "app", "image": image}]}},
            "strategy": {"blueGreen": {
                "activeService": "payment-api", "previewService": "payment-api-preview",
                "prePromotionAnalysis": {"templates": [{"templateName": "error-rate"}]}
            }}
        }}))
        .unwrap()
    };
    let mut fleet = fleet();
    for cluster in &mut fleet.spec.clusters {
        cluster.labels.insert("tier".into(), "prod".into());
    }
    // A pre-promotion analysis completes: two measurements.
    let counted: AnalysisTemplate = serde_json::from_value(json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AnalysisTemplate", "metadata": {"name": "error-rate"}, "spec": {
        "metrics": [{"name": "error-rate", "interval": "10s", "count": 2, "successCondition": GUARDED,
                     "provider": {"prometheus": {"query": "sum(rate(http_requests_total{code=~\"5..\",cluster=\"{{args.cluster}}\"}[1m]))"}}}]
    }}))
    .unwrap();
    let fleet_rollout = fleet_rollout(json!({
        "waves": {"steps": [{"matchLabels": {"tier": "prod"}, "lockstep": true}]},
        "failurePolicy": {"unreachable": {"timeout": "10m"}}
    }));
    let mut sim = Sim::with_templates(
        &fleet,
        fleet_rollout,
        &[counted],
        Truth::healthy(),
        (
            blue_green("payment-api:1.8.3"),
            blue_green("payment-api:1.9.0"),
        ),
    );
    run_until_started(&mut sim, "prod-eu-west");
    sim.truth.unreachable.insert("prod-ap-south");
    for _ in 0..40 {
        sim.now += 5_000;
        sim.step(&[]);
    }
    for name in ["canary-eu-west", "prod-eu-west", "prod-us-east"] {
        let engine = &sim.machine.state.clusters[name].rollout;
        assert!(!engine.switched, "{name} waits before its switch");
        assert!(engine.at_barrier_since().is_some(), "{name} at the barrier");
    }
    sim.truth.unreachable.clear();
    sim.run_until(3_600_000);
    assert_eq!(sim.machine.state.phase, FleetPhase::Completed);
    let switched: BTreeSet<i64> = sim
        .machine
        .state
        .clusters
        .values()
        .map(|c| c.decided_at.unwrap())
        .collect();
    assert!(
        switched.iter().max().unwrap() - switched.iter().min().unwrap() <= 60_000,
        "validated within a minute of each other: {switched:?}"
    );
}

#[test]
fn lockstep_ignores_max_update() {
    let fleet_rollout = fleet_rollout(json!({"waves": {"steps": [
        {"matchLabels": {"tier": "canary"}},
        {"matchLabels": {"tier": "prod"}, "lockstep": true, "maxUpdate": 1}
    ]}}));
    let plan = FleetPlan::resolve(&tiered_fleet(), &fleet_rollout, &[]).unwrap();
    assert_eq!(plan.lockstep, vec![false, true]);
    assert_eq!(
        plan.max_update,
        vec![1, 3],
        "maxUpdate 1 is ignored in the lockstep wave"
    );
}
