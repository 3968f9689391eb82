//! Every kind of decision the fleet machine makes is produced by a scenario and reported by
//! the simulator from the machine's own events; ids are unique and ordered.

use std::collections::BTreeSet;

use super::run;
use super::test_support::{inputs, with_events};
use crate::fleet::{Decision, FleetMachine, FleetPlan, FleetSpecs};

const SCENARIOS: [&str; 12] = [
    include_str!("../../../../examples/simulate/healthy.yaml"),
    include_str!("../../../../examples/simulate/global-regression.yaml"),
    include_str!("../../../../examples/simulate/metrics-outage.yaml"),
    include_str!("../../../../examples/simulate/no-canary-traffic.yaml"),
    include_str!("../../../../examples/simulate/operator-abort.yaml"),
    include_str!("../../../../examples/simulate/regional-regression.yaml"),
    include_str!("../../../../examples/simulate/superseded-release.yaml"),
    include_str!("../../../../examples/simulate/wave-analysis.yaml"),
    include_str!("../../../../examples/simulate/lockstep.yaml"),
    include_str!("../../../../examples/simulate/lockstep-regression.yaml"),
    include_str!("../../../../examples/judges/healthy-fleet.yaml"),
    include_str!("../../../../examples/judges/regressed-fleet.yaml"),
];

/// Operator commands on the healthy scenario, some of which cannot apply (refused), a cluster
/// joining (adopted) and one leaving, and an unreachable cluster skipped.
const COMMANDS: &str = "    - at: 30s\n      command: pause\n    - at: 31s\n      command: pause\n    - at: 60s\n      command: resume\n    - at: 61s\n      command: resume\n    - {at: 5m, join: prod-ap-south}\n";

#[test]
fn every_decision_is_produced_by_a_scenario_and_reported_with_a_unique_id() {
    let mut seen = BTreeSet::new();
    let mut texts: Vec<String> = SCENARIOS.iter().map(|s| s.to_string()).collect();
    texts.push(with_events(SCENARIOS[0], COMMANDS));
    // prod-us-east stops answering mid-canary and is skipped by policy.
    let anchor = "      canary: {errorRate: 0.002, latency: {p50: 0.21, p95: 0.47}}\n";
    assert!(SCENARIOS[0].contains(anchor));
    texts.push(
        SCENARIOS[0]
            .replace(
                anchor,
                &format!("{anchor}      faults:\n        - {{kind: unreachable, from: {{afterClusterStart: 2m}}, for: 10m}}\n"),
            )
            .replace(
                "  failurePolicy: {rollbackScope: failed}",
                "  failurePolicy: {rollbackScope: failed, unreachable: {timeout: 3m, action: skip}}",
            ),
    );
    // A regional regression with rollbackScope fleet: the validated clusters are rolled back
    // with it.
    texts.push(SCENARIOS[5].replace(
        "  failurePolicy: {rollbackScope: failed}",
        "  failurePolicy: {rollbackScope: fleet}",
    ));
    for text in &texts {
        let report = run(&inputs(text), 1).unwrap();
        let ids: BTreeSet<&str> = report.decisions.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids.len(), report.decisions.len(), "ids are unique");
        assert!(
            report.decisions.windows(2).all(|w| w[0].at <= w[1].at),
            "in time order"
        );
        for event in &report.decisions {
            seen.insert(event.decision.name());
        }
    }
    // Settling on the previous spec is the daemon's answer to Git agreeing with a rollback,
    // which no simulated timeline has: produced here by the machine's own API.
    let loaded = inputs(SCENARIOS[1]);
    let plan = FleetPlan::resolve(&loaded.fleet, &loaded.fleet_rollout, &loaded.templates).unwrap();
    let mut previous = loaded.rollout.clone();
    previous
        .spec
        .template
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .image = Some("payment-api:1.8.3".into());
    let mut specs = FleetSpecs::new(previous.clone());
    let mut machine = FleetMachine::new(plan, &specs.revisions(), None);
    assert!(machine.change_spec(&mut specs, loaded.rollout.clone()));
    assert!(
        !machine.settle(&mut specs, previous.clone()),
        "Git agrees with a rollback only once the fleet halted"
    );
    machine.state.phase = crate::fleet::FleetPhase::Halted;
    assert!(machine.settle(&mut specs, previous.clone()));
    // A cluster held to an image by its overlay is Pinned (overlays come from Git, which the
    // simulator does not have).
    machine.set_overlays(std::collections::BTreeMap::from([(
        "prod-ap-south".to_owned(),
        crate::fleet::ClusterOverlay {
            image: Some("payment-api:1.8.3".into()),
            ..Default::default()
        },
    )]));
    let output = machine.tick(&specs.revisions(), &Default::default(), Vec::new(), &[], 0);
    for event in output.events {
        seen.insert(event.decision.name());
    }
    let missing: Vec<&&str> = Decision::NAMES
        .iter()
        .filter(|n| !seen.contains(**n))
        .collect();
    assert!(
        missing.is_empty(),
        "never produced: {missing:?} (seen {seen:?})"
    );
}
