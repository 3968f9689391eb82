//! The fleet controller's unit tests: decisions to audit entries and notifications, adoption
//! on resume, and the cluster-backend port driven through a fake backend.

use flotilla_core::fleet::{ClusterState, FleetSpecs};

fn desired(image: &str) -> super::Desired {
    let controls: Vec<String> = (0..4)
        .map(|i| format!("http://127.0.0.1:{}", 1 + i))
        .collect();
    let text = crate::demo::manifests(&controls, 1.0).replace("payment-api:1.8.3", image);
    let load = flotilla_core::manifest::load_bytes("fleet.yaml", text.as_bytes());
    crate::controller::source::desired_from(&load.manifests, load.diagnostics, &[], "test")
        .desired
        .remove(0)
}

/// The wiring of a controller the tests drive by hand (no cluster is reached).
fn wiring() -> super::Wiring {
    super::Wiring {
        providers: flotilla_providers::Providers::new(std::sync::Arc::new(
            crate::secrets::Secrets::default(),
        ))
        .unwrap(),
        tick: std::time::Duration::from_secs(1),
        correct_drift: false,
        backends: crate::controller::backends::Backends::standard(
            Default::default(),
            Default::default(),
        ),
        urgent: Default::default(),
    }
}

/// Every decision of a simulated release (healthy, regressions, an abort, a supersede, an
/// outage) maps to a typed audit entry carrying its id; a cluster waiting for a human is a
/// `cluster-paused` notification naming what continues it, evidence on its way notifies no
/// one; a failure notifies with its metric; every notification's id is its decision's.
#[test]
fn every_decision_is_an_audit_entry_and_the_right_notifications() {
    use flotilla_core::fleet::{Decision, PausedFor};
    let scenarios = [
        include_str!("../../../../../examples/simulate/healthy.yaml"),
        include_str!("../../../../../examples/simulate/regional-regression.yaml"),
        include_str!("../../../../../examples/simulate/operator-abort.yaml"),
        include_str!("../../../../../examples/simulate/superseded-release.yaml"),
        include_str!("../../../../../examples/simulate/metrics-outage.yaml"),
        include_str!("../../../../../examples/simulate/no-canary-traffic.yaml"),
    ];
    let mut kinds = std::collections::BTreeSet::new();
    let mut notified = std::collections::BTreeSet::new();
    for text in scenarios {
        let load = flotilla_core::manifest::load_bytes("s.yaml", text.as_bytes());
        let inputs = flotilla_core::simulate::Inputs::from_manifests(&load.manifests).unwrap();
        let report = flotilla_core::simulate::run(&inputs, 1).unwrap();
        let specs = FleetSpecs::new(inputs.rollout.clone());
        for event in &report.decisions {
            let entry = super::audit_entry("payment-api", event);
            assert_ne!(entry.kind, super::AuditKind::Unknown);
            assert_eq!(entry.decision.as_deref(), Some(event.id.as_str()));
            kinds.insert(entry.kind);
            for n in super::notifications_of("payment-api", &specs, event) {
                assert!(n.id.starts_with(&event.id), "{n:?}");
                notified.insert(n.event.clone());
                if n.event == "analysis-failed" {
                    assert!(n.metric.is_some() && n.value.is_some(), "{n:?}");
                }
                if n.event == "cluster-paused" {
                    assert!(n.message.contains("paused: "), "{n:?}");
                }
            }
            if let Decision::Paused {
                paused_for: Some(PausedFor::Evidence),
                needs_human: false,
                ..
            } = event.decision
            {
                assert!(super::notifications_of("payment-api", &specs, event).is_empty());
            }
        }
    }
    for kind in [
        "advance", "validate", "rollback", "wave", "fleet", "command",
    ] {
        assert!(kinds.iter().any(|k| *k == kind), "{kind}: {kinds:?}");
    }
    for event in [
        "rollout-aborted",
        "analysis-failed",
        "wave-completed",
        "fleet-completed",
    ] {
        assert!(notified.contains(event), "{event}: {notified:?}");
    }
}

/// The Fleet's clusters changing under a running fleet: one that left is dropped and said in
/// the audit log (`ClusterRemovedMidRollout` when it left in flight, with its status), one that
/// joined gets a backend and is adopted from what it runs; an unchanged Fleet is no change.
#[tokio::test]
async fn clusters_join_and_leave_a_running_fleet_without_a_restart() {
    let wiring = wiring();
    let before = desired("payment-api:1.8.3");
    let first = super::FleetController::new(&before, None, &wiring).unwrap();
    let leaving = before.fleet.spec.clusters[1].name.clone();
    // Resumed with the leaving cluster in flight.
    let mut stored = first.record.clone();
    stored.adopting.clear();
    stored.state.clusters.get_mut(&leaving).unwrap().status =
        flotilla_core::fleet::ClusterStatus::Progressing;
    drop(first);
    let mut controller = super::FleetController::new(&before, Some(stored), &wiring).unwrap();
    assert!(!controller.fleet_changed(&before));
    controller
        .observed
        .insert(leaving.clone(), (true, Some((34, 66))));
    let mut after = before.clone();
    after.fleet.spec.clusters.remove(1);
    let mut joining = after.fleet.spec.clusters[0].clone();
    joining.name = "prod-eu-north".into();
    after.fleet.spec.clusters.push(joining);
    // The list-generated waves follow the Fleet: the leaving cluster's place is taken.
    let list = after.fleet_rollout.spec.waves.list.as_mut().unwrap();
    list.iter_mut()
        .find(|e| e.cluster == leaving)
        .unwrap()
        .cluster = "prod-eu-north".into();
    assert!(controller.fleet_changed(&after));
    let audit = controller.take(&after, "c0ffee", &wiring, 1_000);
    assert!(controller.invalid.is_empty(), "{:?}", controller.invalid);
    let said: Vec<&str> = audit.iter().map(|e| e.message.as_str()).collect();
    assert!(
        said.iter().any(|m| m.starts_with(&format!(
            "ClusterRemovedMidRollout: cluster {leaving} left the fleet while Progressing (last weights canary 34, stable 66)"
        ))),
        "{said:#?}"
    );
    assert!(
        said.iter()
            .any(|m| m.starts_with("cluster prod-eu-north joined the fleet")),
        "{said:#?}"
    );
    assert!(!controller.clusters.contains_key(&leaving));
    assert!(controller.clusters.contains_key("prod-eu-north"));
    assert!(!controller.record.state.clusters.contains_key(&leaving));
    assert!(
        controller
            .record
            .state
            .clusters
            .contains_key("prod-eu-north")
    );
    assert_eq!(
        controller.record.adopting.iter().collect::<Vec<_>>(),
        ["prod-eu-north"]
    );
    assert!(controller.plan().clusters.contains_key("prod-eu-north"));
}

/// A commit that changes the image and adds a cluster that cannot be driven is refused whole
/// for the fleet: no new revision, the Fleet it ran with kept (what a restart starts from), the
/// refusal shown and shown again for the same commit; the image alone is then taken.
#[tokio::test]
async fn a_commit_whose_new_cluster_cannot_be_driven_changes_nothing() {
    let standard =
        crate::controller::backends::Backends::standard(Default::default(), Default::default());
    let mut wiring = wiring();
    wiring.backends = crate::controller::backends::Backends::with(move |cluster, target| {
        if cluster.name == "prod-eu-north" {
            Err("its API server refused the connection".into())
        } else {
            standard.connect(cluster, target)
        }
    });
    let before = desired("payment-api:1.8.3");
    let mut controller = super::FleetController::new(&before, None, &wiring).unwrap();
    let revision = controller.record.state.revision.clone();
    let mut after = desired("payment-api:1.9.0");
    let mut joining = after.fleet.spec.clusters[0].clone();
    joining.name = "prod-eu-north".into();
    after.fleet.spec.clusters.push(joining);
    let list = after.fleet_rollout.spec.waves.list.as_mut().unwrap();
    let mut entry = list.last().unwrap().clone();
    entry.cluster = "prod-eu-north".into();
    list.push(entry);
    for _ in 0..2 {
        let audit = controller.take(&after, "badc0ffee", &wiring, 1_000);
        assert!(audit.is_empty(), "{audit:#?}");
        assert_eq!(controller.invalid.len(), 1, "{:?}", controller.invalid);
        assert!(
            controller.invalid[0].starts_with(
                "commit badc0ffee: the Fleet's new clusters cannot be driven: its API server refused"
            ),
            "{:?}",
            controller.invalid
        );
        assert_eq!(
            controller.record.state.revision, revision,
            "no new revision"
        );
        assert_eq!(controller.machine.state().revision, revision);
        assert_eq!(
            controller.record.desired.as_ref().unwrap().fleet,
            before.fleet,
            "the Fleet it ran with is kept"
        );
        assert!(!controller.clusters.contains_key("prod-eu-north"));
        assert!(
            !controller
                .record
                .state
                .clusters
                .contains_key("prod-eu-north")
        );
    }
    // The record as stored restarts the fleet on what it ran.
    super::FleetController::new(&before, Some(controller.record.clone()), &wiring).unwrap();
    let image_only = desired("payment-api:1.9.0");
    controller.take(&image_only, "good", &wiring, 2_000);
    assert!(controller.invalid.is_empty(), "{:?}", controller.invalid);
    assert_ne!(
        controller.record.state.revision, revision,
        "the new image is a revision"
    );
}

/// A cluster added to the Fleet of a fleet that already has a record is adopted from what
/// it runs before its first reconcile, as at a first start; one removed is forgotten.
#[tokio::test]
async fn a_cluster_new_to_a_resumed_fleet_is_adopted_not_deployed_to() {
    let wiring = wiring();
    let desired = desired("payment-api:1.8.3");
    let first = super::FleetController::new(&desired, None, &wiring).unwrap();
    assert_eq!(
        first.record.adopting.len(),
        4,
        "a first start adopts every cluster"
    );
    let mut stored = first.record.clone();
    stored.adopting.clear();
    stored.state.clusters.remove("prod-ap-south");
    stored.adopting.insert("gone-cluster".into());
    // The stored state is of another plan: a cluster the Fleet no longer has, fewer waves.
    stored
        .state
        .clusters
        .insert("gone-cluster".into(), ClusterState::default());
    stored.state.wave_started_at.truncate(1);
    stored.state.wave_completed_at.truncate(1);
    let resumed = super::FleetController::new(&desired, Some(stored), &wiring).unwrap();
    assert_eq!(
        resumed.record.adopting.iter().collect::<Vec<_>>(),
        ["prod-ap-south"]
    );
    // The machine is fitted to the plan: a tick would not index a missing wave or cluster.
    let state = resumed.machine.state();
    assert!(!state.clusters.contains_key("gone-cluster"));
    assert!(state.clusters.contains_key("prod-ap-south"));
    let waves = resumed.machine.plan().waves.len();
    assert_eq!(state.wave_started_at.len(), waves);
    assert_eq!(state.wave_completed_at.len(), waves);
}

/// Through the cluster-backend port, with the fake backend (a cluster that lags, conflicts,
/// refuses and sends commands): the fleet controller only ever sees the port.
mod port {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use flotilla_core::backend::{ClusterBackend, ClusterCommand, ClusterVerb};

    use crate::controller::backends::Backends;
    use crate::controller::fake_backend::FakeBackend;
    use crate::controller::record::{AuditEntry, AuditKind, OperatorCommand, QueuedCommand};

    const MANIFESTS: &str = r#"apiVersion: flotilla.dev/v1alpha1
kind: Fleet
metadata: {name: edge}
spec:
  clusters:
    - {name: east, endpoint: {agent: "http://127.0.0.1:9"}}
---
apiVersion: flotilla.dev/v1alpha1
kind: FleetRollout
metadata: {name: app}
spec:
  fleet: edge
  rollout: app
  waves:
    list:
      - {cluster: east, wave: 1}
---
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: app}
spec:
  replicas: 2
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      containers: [{name: app, image: "app:1.0"}]
  strategy:
    canary:
      trafficRouting: {plugins: {flotilla/agent: {}}}
      steps:
        - setWeight: 30
        - setWeight: 60
"#;

    /// The desired state of the one fleet in `text`.
    fn desired_of(text: &str) -> super::super::Desired {
        let load = flotilla_core::manifest::load_bytes("fleet.yaml", text.as_bytes());
        crate::controller::source::desired_from(&load.manifests, load.diagnostics, &[], "test")
            .desired
            .remove(0)
    }

    /// The wiring of a controller ticking every 100 ms, its clusters reached through `backends`.
    fn wiring_with(backends: Backends) -> super::super::Wiring {
        super::super::Wiring {
            providers: flotilla_providers::Providers::new(std::sync::Arc::new(
                crate::secrets::Secrets::default(),
            ))
            .unwrap(),
            tick: Duration::from_millis(100),
            correct_drift: false,
            backends,
            urgent: Default::default(),
        }
    }

    /// Every cluster behind `fake`.
    fn behind(fake: &Arc<FakeBackend>) -> Backends {
        let backend = fake.clone();
        Backends::with(move |_, _| Ok(backend.clone() as Arc<dyn ClusterBackend>))
    }

    /// A controller of one cluster behind `fake`, ticking every 100 ms.
    fn controller(fake: &Arc<FakeBackend>) -> super::super::FleetController {
        super::super::FleetController::new(&desired_of(MANIFESTS), None, &wiring_with(behind(fake)))
            .unwrap()
    }

    fn now() -> flotilla_core::analysis::Millis {
        crate::clock::wall_clock()
    }

    /// Ticks until `done` (or panics after `limit`), giving `commands` at the first tick;
    /// returns every audit entry.
    async fn run(
        controller: &mut super::super::FleetController,
        commands: &[QueuedCommand],
        limit: Duration,
        mut done: impl FnMut(&super::super::FleetController) -> bool,
    ) -> Vec<AuditEntry> {
        let start = Instant::now();
        let mut audit = Vec::new();
        let mut first = true;
        loop {
            let out = controller.tick(if first { commands } else { &[] }, now());
            first = false;
            audit.extend(out.audit.iter().cloned());
            controller.dispatch(out);
            if done(controller) {
                return audit;
            }
            assert!(
                start.elapsed() < limit,
                "not done within {limit:?}: {audit:#?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn set_image(image: &str) -> QueuedCommand {
        QueuedCommand {
            id: 1,
            fleet: "app".into(),
            command: OperatorCommand::SetImage {
                container: None,
                image: image.into(),
            },
            operator: "test".into(),
            accepted_at: now(),
            uid: None,
        }
    }

    /// The step of the release of app:2.0 (revision 2) the cluster is at; 0 before it starts.
    fn step(controller: &super::super::FleetController) -> u32 {
        let rollout = &controller.machine.state().clusters["east"].rollout;
        if rollout.current == Some(2) {
            rollout.step_index.unwrap_or(0)
        } else {
            0
        }
    }

    async fn adopted(controller: &mut super::super::FleetController) {
        run(controller, &[], Duration::from_secs(10), |c| {
            c.record.adopting.is_empty()
                && c.machine.state().clusters["east"].rollout.current == Some(1)
        })
        .await;
    }

    /// Adopted, then released: app:2.0's canary at its first setWeight step.
    async fn released(controller: &mut super::super::FleetController) {
        adopted(controller).await;
        run(
            controller,
            &[set_image("app:2.0")],
            Duration::from_secs(10),
            |c| c.machine.state().clusters["east"].rollout.current == Some(2),
        )
        .await;
    }

    /// A cluster that lags: no step advances before the observed weights match the ones asked
    /// for, however long the cluster takes to apply them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_step_advances_before_the_observed_weights_match() {
        let delay = Duration::from_millis(1500);
        let fake = Arc::new(FakeBackend::new("1.0", 2, delay));
        let mut controller = controller(&fake);
        released(&mut controller).await;
        assert_eq!(step(&controller), 0);
        run(&mut controller, &[], Duration::from_secs(20), |c| {
            step(c) >= 1
        })
        .await;
        let advanced = Instant::now();
        let accepted = fake
            .state
            .lock()
            .unwrap()
            .accepted_weight_at(30)
            .expect("weight 30 was asked for");
        assert!(
            advanced.duration_since(accepted) >= delay,
            "the step advanced {:?} after weight 30 was accepted; the cluster applies it after {delay:?}",
            advanced.duration_since(accepted)
        );
    }

    /// Conflicts with another writer are retried at once on a fresh read, never lost.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_conflict_is_retried_never_lost() {
        let fake = Arc::new(FakeBackend::new("1.0", 2, Duration::ZERO));
        let mut controller = controller(&fake);
        adopted(&mut controller).await;
        fake.state.lock().unwrap().conflicts = 3;
        run(
            &mut controller,
            &[set_image("app:2.0")],
            Duration::from_secs(20),
            |c| step(c) >= 2,
        )
        .await;
        // Settled: the latest desired state was accepted, none lost.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let latest = controller.desired_of("east").unwrap();
        let state = fake.state.lock().unwrap();
        let refused = state.ensures.iter().filter(|(_, ok, _)| !ok).count();
        assert_eq!(refused, 3, "three conflicts answered");
        for weight in [30, 60] {
            assert!(
                state.accepted_weight_at(weight).is_some(),
                "weight {weight} reached the cluster"
            );
        }
        let (_, accepted, last) = state.ensures.last().unwrap();
        assert!(
            *accepted && *last == latest,
            "the latest state reached the cluster"
        );
    }

    /// A write refused for want of a permission holds the cluster with a condition naming the
    /// verb and the resource, in the audit log and the cluster's view; granted, it proceeds.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn forbidden_holds_the_cluster_with_a_clear_condition() {
        let fake = Arc::new(FakeBackend::new("1.0", 2, Duration::ZERO));
        let mut controller = controller(&fake);
        adopted(&mut controller).await;
        fake.state.lock().unwrap().forbidden =
            Some(("patch".into(), "rollouts.argoproj.io".into()));
        let audit = run(
            &mut controller,
            &[set_image("app:2.0")],
            Duration::from_secs(10),
            |c| c.view().waves[0].clusters[0].condition.is_some(),
        )
        .await;
        let condition = controller.view().waves[0].clusters[0]
            .condition
            .clone()
            .unwrap();
        assert!(
            condition.contains("Forbidden: cannot patch rollouts.argoproj.io"),
            "{condition}"
        );
        assert!(
            audit.iter().any(|e| e.kind == AuditKind::Repair
                && e.cluster.as_deref() == Some("east")
                && e.message.contains("cannot patch rollouts.argoproj.io")),
            "{audit:#?}"
        );
        // Held: however long, nothing advances.
        let held = run(&mut controller, &[], Duration::from_secs(10), {
            let start = Instant::now();
            move |_| start.elapsed() > Duration::from_secs(2)
        })
        .await;
        assert_eq!(step(&controller), 0, "{held:#?}");
        fake.state.lock().unwrap().forbidden = None;
        let audit = run(&mut controller, &[], Duration::from_secs(20), |c| {
            step(c) >= 2
        })
        .await;
        assert!(controller.view().waves[0].clusters[0].condition.is_none());
        assert!(
            audit
                .iter()
                .any(|e| e.message.contains("accepts its desired state again"))
        );
    }

    /// A command issued in the cluster (`kubectl argo rollouts abort`) becomes a fleet command
    /// for that cluster, applied once, with its origin in the audit log.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_command_from_the_cluster_is_a_fleet_command_with_its_origin() {
        let fake = Arc::new(FakeBackend::new("1.0", 2, Duration::ZERO));
        let mut controller = controller(&fake);
        released(&mut controller).await;
        let abort = ClusterCommand {
            id: "abort-1".into(),
            origin: "kubectl argo rollouts abort (alice)".into(),
            verb: ClusterVerb::Abort,
        };
        // Heard twice (two polls): applied once.
        fake.state.lock().unwrap().commands = vec![abort.clone(), abort];
        let audit = run(&mut controller, &[], Duration::from_secs(10), |c| {
            c.machine.state().clusters["east"].rollout.abort
        })
        .await;
        let commands: Vec<&AuditEntry> = audit
            .iter()
            .filter(|e| e.kind == AuditKind::Command)
            .collect();
        assert_eq!(commands.len(), 1, "{commands:#?}");
        let entry = commands[0];
        assert_eq!(
            entry.operator.as_deref(),
            Some("east: kubectl argo rollouts abort (alice)")
        );
        assert!(
            entry
                .message
                .contains("abort east (issued in cluster east)"),
            "{entry:?}"
        );

        // Restarted from what the tick persisted, the cluster still shows the patch: heard
        // again, not applied again.
        assert_eq!(controller.record.heard.len(), 1);
        let stored = controller.record.clone();
        drop(controller);
        let mut resumed = super::super::FleetController::new(
            &desired_of(MANIFESTS),
            Some(stored),
            &wiring_with(behind(&fake)),
        )
        .unwrap();
        fake.state.lock().unwrap().commands = vec![ClusterCommand {
            id: "abort-1".into(),
            origin: "kubectl argo rollouts abort (alice)".into(),
            verb: ClusterVerb::Abort,
        }];
        let mut ticks = 0;
        let audit = run(&mut resumed, &[], Duration::from_secs(10), |_| {
            ticks += 1;
            ticks > 10
        })
        .await;
        assert!(
            !audit.iter().any(|e| e.kind == AuditKind::Command),
            "applied again after a restart: {audit:#?}"
        );
    }

    /// The manifests' Rollout as a cluster holds it, with `image` and `steps` setWeight steps.
    fn held(image: &str, steps: usize) -> serde_json::Value {
        let load = flotilla_core::manifest::load_bytes("fleet.yaml", MANIFESTS.as_bytes());
        let rollout = load
            .manifests
            .iter()
            .find_map(|m| match &m.manifest {
                flotilla_core::spec::Manifest::Rollout(r) => Some(r.clone()),
                _ => None,
            })
            .unwrap();
        let mut value = serde_json::to_value(&rollout).unwrap();
        value["spec"]["template"]["spec"]["containers"][0]["image"] = image.into();
        value["spec"]["strategy"]["canary"]["steps"] = (1..=steps)
            .map(|i| serde_json::json!({"setWeight": 10 * i}))
            .collect();
        value
    }

    /// `rolloutSource: cluster`: two clusters that hold the same pod template but different
    /// steps are named, and no revision starts on them (the fleet runs one Rollout's steps in
    /// every cluster) until their owner makes them agree.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn clusters_holding_different_strategies_start_no_revision() {
        let manifests = MANIFESTS
            .replace(
                "    - {name: east, endpoint: {agent: \"http://127.0.0.1:9\"}}\n",
                "    - {name: east, endpoint: {kubernetes: {namespace: default}}}\n    - {name: west, endpoint: {kubernetes: {namespace: default}}}\n",
            )
            .replace(
                "      - {cluster: east, wave: 1}\n",
                "      - {cluster: east, wave: 1}\n      - {cluster: west, wave: 2}\n",
            );
        let east = Arc::new(FakeBackend::new("1.0", 2, Duration::ZERO));
        let west = Arc::new(FakeBackend::new("1.0", 2, Duration::ZERO));
        east.state.lock().unwrap().held = Some(held("app:1.0", 2));
        west.state.lock().unwrap().held = Some(held("app:1.0", 2));
        let (e, w) = (east.clone(), west.clone());
        let backends = Backends::with(move |cluster, _| {
            Ok(if cluster.name == "east" {
                e.clone()
            } else {
                w.clone()
            } as Arc<dyn ClusterBackend>)
        });
        let mut controller = super::super::FleetController::new(
            &desired_of(&manifests),
            None,
            &wiring_with(backends),
        )
        .unwrap();
        let current = |c: &super::super::FleetController, name: &str| {
            c.machine.state().clusters[name].rollout.current
        };
        run(&mut controller, &[], Duration::from_secs(10), |c| {
            c.record.adopting.is_empty() && current(c, "east") == Some(1)
        })
        .await;
        assert!(
            controller.view().errors.is_empty(),
            "{:?}",
            controller.view().errors
        );

        // Argo CD syncs 2.0 everywhere, but west's Rollout has three steps.
        east.state.lock().unwrap().held = Some(held("app:2.0", 2));
        west.state.lock().unwrap().held = Some(held("app:2.0", 3));
        run(&mut controller, &[], Duration::from_secs(10), |c| {
            !c.view().errors.is_empty()
        })
        .await;
        let errors = controller.view().errors;
        assert!(
            errors[0].contains("different strategies")
                && errors[0].contains("east holds strategy 1 (2 canary steps)")
                && errors[0].contains("west holds strategy 2 (3 canary steps)"),
            "{errors:?}"
        );
        for _ in 0..5 {
            run(&mut controller, &[], Duration::from_secs(1), |_| true).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(
            current(&controller, "east"),
            Some(1),
            "a revision started on disagreeing steps"
        );

        // They agree: the revision starts, and the error is gone.
        west.state.lock().unwrap().held = Some(held("app:2.0", 2));
        run(&mut controller, &[], Duration::from_secs(10), |c| {
            current(c, "east") == Some(2)
        })
        .await;
        assert!(
            controller.view().errors.is_empty(),
            "{:?}",
            controller.view().errors
        );
    }

    /// `serve` refuses a Rollout that needs what a cluster's backend lacks, by cluster and
    /// capability, before anything runs.
    #[tokio::test]
    async fn a_rollout_needing_what_the_backend_lacks_is_refused_by_name() {
        let fake = Arc::new(FakeBackend::new("1.0", 2, Duration::ZERO));
        let text = MANIFESTS.replace(
            "        - setWeight: 60\n",
            "        - setWeight: 60\n        - setMirrorRoute: {name: shadow, percentage: 5, match: [{headers: {x-a: {exact: \"1\"}}}]}\n",
        ).replace(
            "      trafficRouting: {plugins: {flotilla/agent: {}}}",
            "      trafficRouting: {plugins: {flotilla/agent: {}}, managedRoutes: [{name: shadow}]}",
        );
        let Err(error) = super::super::FleetController::new(
            &desired_of(&text),
            None,
            &wiring_with(behind(&fake)),
        ) else {
            panic!("a Rollout the backend cannot run was accepted");
        };
        assert_eq!(
            error.to_string(),
            "cluster \"east\" (fake) cannot run this Rollout: it lacks mirror routes (at spec.strategy.canary.steps[2].setMirrorRoute)"
        );
        assert!(
            fake.state.lock().unwrap().ensures.is_empty(),
            "nothing was written"
        );
    }

    /// A lockstep wave through the daemon: a cluster that lags holds the other at the
    /// barrier (its view says who waits for whom), then both pass it together; the barrier is
    /// an audit entry of its own kind.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lockstep_wave_waits_at_its_barrier_for_the_cluster_that_lags() {
        let manifests = MANIFESTS
            .replace(
                "    - {name: east, endpoint: {agent: \"http://127.0.0.1:9\"}}\n",
                "    - {name: east, endpoint: {agent: \"http://127.0.0.1:9\"}}\n    - {name: west, endpoint: {agent: \"http://127.0.0.1:9\"}}\n",
            )
            .replace(
                "      - {cluster: east, wave: 1}\n",
                "      - {cluster: east, wave: 1}\n      - {cluster: west, wave: 1}\n    lockstep: true\n",
            );
        assert!(manifests.contains("lockstep: true") && manifests.contains("name: west"));
        let east = Arc::new(FakeBackend::new("1.0", 2, Duration::ZERO));
        let west = Arc::new(FakeBackend::new("1.0", 2, Duration::from_millis(2500)));
        let (e, w) = (east.clone(), west.clone());
        let wiring = wiring_with(Backends::with(move |cluster, _| {
            Ok(if cluster.name == "east" {
                e.clone() as Arc<dyn ClusterBackend>
            } else {
                w.clone() as Arc<dyn ClusterBackend>
            })
        }));
        let mut controller =
            super::super::FleetController::new(&desired_of(&manifests), None, &wiring).unwrap();
        run(&mut controller, &[], Duration::from_secs(10), |c| {
            c.record.adopting.is_empty()
                && c.machine
                    .state()
                    .clusters
                    .values()
                    .all(|s| s.rollout.current == Some(1))
        })
        .await;
        // east completes step 1 at once and waits for west, which applies weights late.
        let audit = run(
            &mut controller,
            &[set_image("app:2.0")],
            Duration::from_secs(20),
            |c| {
                c.view().waves[0]
                    .barrier
                    .as_ref()
                    .is_some_and(|b| b.waiting == ["east"])
            },
        )
        .await;
        let view = controller.view();
        assert!(view.waves[0].lockstep);
        let barrier = view.waves[0].barrier.clone().unwrap();
        assert_eq!((barrier.step, barrier.steps, barrier.passed), (1, 2, 0));
        assert_eq!(barrier.not_there, vec!["west".to_owned()]);
        let east_view = &view.waves[0].clusters[0];
        assert_eq!(east_view.status, "Paused");
        assert_eq!(
            east_view.reason,
            "waiting for lockstep barrier at step 1: clusters west not there yet"
        );
        assert!(
            !audit.iter().any(|e| e.kind == AuditKind::Barrier),
            "not passed while west lags: {audit:#?}"
        );
        // west gets there: the barrier is passed, west named as the last to arrive.
        let audit = run(&mut controller, &[], Duration::from_secs(20), |c| {
            c.machine
                .state()
                .clusters
                .values()
                .all(|s| s.rollout.step_index >= Some(1))
        })
        .await;
        let passed = audit
            .iter()
            .find(|e| e.kind == AuditKind::Barrier)
            .expect("a barrier entry");
        assert!(
            passed.message.contains("passed its barrier at step 1/2")
                && passed.message.contains("west arrived last"),
            "{}",
            passed.message
        );
        let json = serde_json::to_value(controller.view()).unwrap();
        assert_eq!(json["waves"][0]["lockstep"], true);
    }
}
