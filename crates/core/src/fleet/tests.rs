//! The fleet machine on seed 000's layout (canary-eu-west in wave 1, prod-eu-west in wave 2,
//! prod-us-east and prod-ap-south in wave 3), against a simulated fleet on a virtual clock.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::*;
use crate::analysis::{MetricResult, Outcome};
use crate::rollout::{Action, ReplicaCounts, RevisionNumber, Weights};
use crate::spec::analysis::{AnalysisPhase, AnalysisTemplate};
use crate::spec::fleet::{Fleet, FleetRollout};
use crate::spec::rollout::Rollout;

mod lockstep;

const CLUSTERS: [&str; 4] = [
    "canary-eu-west",
    "prod-eu-west",
    "prod-us-east",
    "prod-ap-south",
];

fn fleet() -> Fleet {
    serde_json::from_value(json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Fleet", "metadata": {"name": "payments"}, "spec": {"clusters": [
        {"name": "canary-eu-west", "region": "eu-west", "metrics": {"address": "http://127.0.0.1:9101"}},
        {"name": "prod-eu-west", "region": "eu-west", "metrics": {"address": "http://127.0.0.1:9102"}},
        {"name": "prod-us-east", "region": "us-east", "metrics": {"address": "http://127.0.0.1:9103"}},
        {"name": "prod-ap-south", "region": "ap-south", "metrics": {"address": "http://127.0.0.1:9104"}}
    ]}}))
    .unwrap()
}

fn fleet_rollout(extra: Value) -> FleetRollout {
    let mut spec = json!({"fleet": "payments", "rollout": "payment-api", "bakeTime": "2m", "waves": {"list": [
        {"cluster": "canary-eu-west", "wave": 1}, {"cluster": "prod-eu-west", "wave": 2},
        {"cluster": "prod-us-east", "wave": 3}, {"cluster": "prod-ap-south", "wave": 3}
    ]}});
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            spec[k] = v;
        }
    }
    serde_json::from_value(json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "FleetRollout", "metadata": {"name": "payment-api"}, "spec": spec})).unwrap()
}

fn rollout(image: &str) -> Rollout {
    serde_json::from_value(json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": {"name": "payment-api"}, "spec": {
        "replicas": 4,
        "selector": {"matchLabels": {"app": "payment-api"}},
        "template": {"metadata": {"labels": {"app": "payment-api"}}, "spec": {"containers": [{"name": "app", "image": image}]}},
        "strategy": {"canary": {
            "trafficRouting": {"plugins": {"flotilla/agent": {}}},
            "analysis": {"templates": [{"templateName": "error-rate"}]},
            "steps": [{"setWeight": 20}, {"pause": {"duration": "1m"}}, {"setWeight": 50}, {"pause": {"duration": "1m"}}]
        }}
    }}))
    .unwrap()
}

fn template(condition: &str) -> AnalysisTemplate {
    serde_json::from_value(json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AnalysisTemplate", "metadata": {"name": "error-rate"}, "spec": {
        "metrics": [{"name": "error-rate", "interval": "30s", "successCondition": condition,
                     "provider": {"prometheus": {"query": "sum(rate(http_requests_total{code=~\"5..\",cluster=\"{{args.cluster}}\"}[1m]))"}}}]
    }}))
    .unwrap()
}

/// The wave-level analysis template: two measurements 30 s apart over the wave's traffic.
fn wave_template(condition: &str) -> AnalysisTemplate {
    serde_json::from_value(json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AnalysisTemplate", "metadata": {"name": "wave-error-rate"}, "spec": {
        "args": [{"name": "wave"}, {"name": "max-error-rate", "value": "0.01"}],
        "metrics": [{"name": "wave-error-rate", "interval": "30s", "count": 2, "successCondition": condition,
                     "provider": {"prometheus": {"query": "sum(rate(http_requests_total{code=~\"5..\",wave=\"{{args.wave}}\"}[5m])) < {{args.max-error-rate}}"}}}]
    }}))
    .unwrap()
}

/// The FleetRollout fields that turn the wave-level analysis on.
fn with_wave_analysis() -> Value {
    json!({"waveAnalysis": {"templates": [{"templateName": "wave-error-rate"}], "args": [{"name": "max-error-rate", "value": "0.02"}]}})
}

const GUARDED: &str = "len(result) > 0 && !isNaN(result[0]) && result[0] < 0.01";

/// What the simulated fleet serves.
#[derive(Clone)]
struct Truth {
    /// Clusters where the new version's error rate is 5%.
    regressed: BTreeSet<&'static str>,
    /// Clusters that do not answer.
    unreachable: BTreeSet<&'static str>,
    /// Clusters whose metrics provider is down.
    outage: BTreeSet<&'static str>,
    /// Clusters whose canary gets no traffic (queries return no data).
    no_traffic: BTreeSet<&'static str>,
    /// Waves (1-based) whose combined traffic has a 5% error rate (wave-level analysis).
    wave_regressed: BTreeSet<usize>,
    /// Waves (1-based) whose wave-level analysis queries return no data.
    wave_no_data: BTreeSet<usize>,
    /// Clusters the driver reports diverged from what was decided (being repaired).
    diverged: BTreeSet<&'static str>,
}

impl Truth {
    fn healthy() -> Truth {
        Truth {
            regressed: BTreeSet::new(),
            unreachable: BTreeSet::new(),
            outage: BTreeSet::new(),
            no_traffic: BTreeSet::new(),
            wave_regressed: BTreeSet::new(),
            wave_no_data: BTreeSet::new(),
            diverged: BTreeSet::new(),
        }
    }
}

struct Sim {
    machine: FleetMachine,
    previous: Rollout,
    next: Rollout,
    truth: Truth,
    now: i64,
    replicas: BTreeMap<String, BTreeMap<RevisionNumber, i32>>,
    weights: BTreeMap<String, Weights>,
    pending: Vec<ClusterMeasurement>,
    /// (time, cluster, revision hash) whenever a cluster first scales a revision up.
    deployed: Vec<(i64, String, String)>,
    /// (time, 0-based wave, query) of every wave-level analysis measurement requested.
    wave_measured: Vec<(i64, usize, String)>,
    /// The decisions of the last step.
    events: Vec<FleetEvent>,
}

impl Sim {
    fn new(fleet_rollout: FleetRollout, condition: &str, truth: Truth) -> Sim {
        Sim::with_fleet(&fleet(), fleet_rollout, condition, truth)
    }

    fn with_fleet(
        fleet: &Fleet,
        fleet_rollout: FleetRollout,
        condition: &str,
        truth: Truth,
    ) -> Sim {
        let specs = (rollout("payment-api:1.8.3"), rollout("payment-api:1.9.0"));
        Sim::with_specs(fleet, fleet_rollout, condition, truth, specs)
    }

    /// Panics if `cluster` scaled up a revision after the first `since` deployments.
    fn assert_nothing_deployed_since(&self, since: usize, cluster: &str) {
        let later = &self.deployed[since..];
        assert!(
            !later.iter().any(|(_, c, _)| c == cluster),
            "nothing deployed to {cluster}: {later:?}"
        );
    }

    /// A fleet moving from `previous` to `next`.
    fn with_specs(
        fleet: &Fleet,
        fleet_rollout: FleetRollout,
        condition: &str,
        truth: Truth,
        specs: (Rollout, Rollout),
    ) -> Sim {
        let templates = [template(condition), wave_template(condition)];
        Sim::with_templates(fleet, fleet_rollout, &templates, truth, specs)
    }

    /// A fleet moving from `previous` to `next`, its analysis from `templates`.
    fn with_templates(
        fleet: &Fleet,
        fleet_rollout: FleetRollout,
        templates: &[AnalysisTemplate],
        truth: Truth,
        (previous, next): (Rollout, Rollout),
    ) -> Sim {
        let plan = FleetPlan::resolve(fleet, &fleet_rollout, templates).unwrap();
        let machine = FleetMachine::new(
            plan,
            &Revisions {
                previous: &previous,
                next: &next,
            },
            None,
        );
        let mut sim = Sim {
            machine,
            previous,
            next,
            truth,
            now: 0,
            replicas: BTreeMap::new(),
            weights: BTreeMap::new(),
            pending: Vec::new(),
            deployed: Vec::new(),
            wave_measured: Vec::new(),
            events: Vec::new(),
        };
        // Every cluster starts settled on the previous version.
        sim.step(&[]);
        sim
    }

    fn observations(&self) -> BTreeMap<String, ClusterObservation> {
        CLUSTERS
            .iter()
            .map(|c| {
                let replicas = self
                    .replicas
                    .get(*c)
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(r, n)| {
                        (
                            r,
                            ReplicaCounts {
                                replicas: n,
                                ready: n,
                                available: n,
                            },
                        )
                    })
                    .collect();
                let observed = crate::rollout::Observed {
                    replicas,
                    weights: Some(self.weights.get(*c).copied().unwrap_or(Weights {
                        canary: 0,
                        stable: 100,
                    })),
                    analysis: BTreeMap::new(),
                    spec_replicas: None,
                };
                (
                    c.to_string(),
                    ClusterObservation {
                        reachable: !self.truth.unreachable.contains(c),
                        observed,
                        diverged: self.truth.diverged.contains(c),
                    },
                )
            })
            .collect()
    }

    /// The error rate a cluster's canary serves right now.
    fn measure(&self, m: &ClusterMeasurement) -> Outcome {
        if let Some(wave) = m.wave() {
            let rate = if self.truth.wave_no_data.contains(&(wave + 1)) {
                vec![]
            } else if self.truth.wave_regressed.contains(&(wave + 1)) {
                vec![0.05]
            } else {
                vec![0.002]
            };
            return Outcome::Value {
                result: MetricResult::Vector(rate),
                metadata: BTreeMap::new(),
            };
        }
        let cluster = m.cluster.as_str();
        if self.truth.outage.contains(cluster) {
            return Outcome::Error(format!(
                "Post \"http://{cluster}/api/v1/query\": connection refused"
            ));
        }
        if self.truth.no_traffic.contains(cluster) {
            return Outcome::Value {
                result: MetricResult::Vector(vec![]),
                metadata: BTreeMap::new(),
            };
        }
        let rate = if self.truth.regressed.contains(cluster) {
            0.05
        } else {
            0.002
        };
        Outcome::Value {
            result: MetricResult::Vector(vec![rate]),
            metadata: BTreeMap::new(),
        }
    }

    fn step(&mut self, commands: &[FleetCommand]) {
        let outcomes: Vec<ClusterOutcome> = std::mem::take(&mut self.pending)
            .into_iter()
            .map(|m| ClusterOutcome {
                outcome: self.measure(&m),
                cluster: m.cluster,
                run: m.run,
                metric_index: m.request.metric_index,
            })
            .collect();
        let observations = self.observations();
        let revisions = Revisions {
            previous: &self.previous,
            next: &self.next,
        };
        let output = self
            .machine
            .tick(&revisions, &observations, outcomes, commands, self.now);
        self.events = output.events;
        for (cluster, action) in output.actions {
            if self.truth.unreachable.contains(cluster.as_str()) {
                continue;
            }
            match action {
                Action::Scale {
                    revision,
                    hash,
                    replicas,
                } => {
                    let before = self
                        .replicas
                        .entry(cluster.clone())
                        .or_default()
                        .insert(revision, replicas);
                    if replicas > 0 && before.unwrap_or(0) == 0 {
                        self.deployed.push((self.now, cluster.clone(), hash));
                    }
                }
                Action::SetWeight { canary, stable } => {
                    self.weights.insert(cluster, Weights { canary, stable });
                }
                _ => {}
            }
        }
        for m in &output.measurements {
            if let Some(wave) = m.wave() {
                let query = m.request.provider.prometheus.as_ref();
                let query = query.and_then(|p| p.query.clone()).unwrap_or_default();
                self.wave_measured.push((self.now, wave, query));
            }
        }
        self.pending = output.measurements;
    }

    fn run_until(&mut self, until: i64) {
        while self.now < until && !matches!(self.machine.state.phase, FleetPhase::Completed) {
            self.now += 5_000;
            self.step(&[]);
        }
    }

    fn status(&self, cluster: &str) -> ClusterStatus {
        self.machine.state.clusters[cluster].status
    }

    fn new_hash(&self) -> String {
        crate::rollout::template_hash(&self.next)
    }

    /// When a cluster first ran the new version, if ever.
    fn got_new_version(&self, cluster: &str) -> Option<i64> {
        let hash = self.new_hash();
        self.deployed
            .iter()
            .find(|(_, c, h)| c == cluster && *h == hash)
            .map(|(t, _, _)| *t)
    }

    /// Clears every regression, retries `after` ms later, and checks that the fleet then
    /// completes with every cluster on the new version.
    fn fix_and_retry(&mut self, after: i64) {
        self.truth.regressed.clear();
        self.now += after;
        self.step(&[FleetCommand::Retry]);
        self.run_until(self.now + 3_600_000);
        let state = &self.machine.state;
        assert_eq!(state.phase, FleetPhase::Completed, "{}", state.message);
        for cluster in CLUSTERS {
            assert!(self.stable_is_new(cluster), "{cluster}");
        }
    }

    /// Whether the cluster's stable (what it serves at weight 0) is the new version.
    fn stable_is_new(&self, cluster: &str) -> bool {
        let engine = &self.machine.state.clusters[cluster].rollout;
        engine
            .stable
            .and_then(|s| engine.revision(s))
            .is_some_and(|r| r.hash == self.new_hash())
    }
}

#[test]
fn a_healthy_release_reaches_every_cluster_in_strictly_ordered_waves() {
    let mut sim = Sim::new(fleet_rollout(json!({})), GUARDED, Truth::healthy());
    sim.run_until(3_600_000);
    assert_eq!(
        sim.machine.state.phase,
        FleetPhase::Completed,
        "{:#?}",
        sim.machine.state.message
    );
    for cluster in CLUSTERS {
        assert_eq!(sim.status(cluster), ClusterStatus::Validated, "{cluster}");
        assert!(sim.stable_is_new(cluster), "{cluster}");
    }
    // Waves strictly ordered: a wave starts only after the previous one completed (and baked).
    let state = &sim.machine.state;
    for w in 1..3 {
        assert!(
            state.wave_started_at[w].unwrap() >= state.wave_completed_at[w - 1].unwrap(),
            "wave {w} overlapped wave {}",
            w - 1
        );
        assert!(
            state.wave_completed_at[w - 1].unwrap()
                - state.clusters[&sim.machine.plan.waves[w - 1][0]]
                    .decided_at
                    .unwrap()
                >= 120_000,
            "bake"
        );
    }
    let first = |c: &str| sim.got_new_version(c).unwrap();
    assert!(first("canary-eu-west") < first("prod-eu-west"));
    assert!(first("prod-eu-west") < first("prod-us-east"));
    assert_eq!(
        first("prod-us-east"),
        first("prod-ap-south"),
        "one wave, in parallel"
    );
}

#[test]
fn a_regression_in_the_canary_cluster_never_leaves_wave_1() {
    let truth = Truth {
        regressed: ["canary-eu-west"].into(),
        ..Truth::healthy()
    };
    let mut sim = Sim::new(fleet_rollout(json!({})), GUARDED, truth);
    sim.run_until(3_600_000);
    assert_eq!(sim.machine.state.phase, FleetPhase::Halted);
    assert_eq!(sim.status("canary-eu-west"), ClusterStatus::RolledBack);
    for cluster in ["prod-eu-west", "prod-us-east", "prod-ap-south"] {
        assert_eq!(
            sim.got_new_version(cluster),
            None,
            "{cluster} received the new version"
        );
        assert_eq!(sim.status(cluster), ClusterStatus::Held);
    }
    let failure = sim.machine.state.clusters["canary-eu-west"]
        .failure
        .clone()
        .unwrap();
    assert_eq!(failure.metric, "error-rate");
    assert_eq!(failure.value, "[0.05]");
    assert!(
        sim.machine.state.message.contains("canary-eu-west")
            && sim.machine.state.message.contains("error-rate"),
        "{}",
        sim.machine.state.message
    );
    assert!(!sim.stable_is_new("canary-eu-west"));
    assert_eq!(
        sim.weights["canary-eu-west"].canary, 0,
        "traffic back on the stable"
    );
}

#[test]
fn a_regression_far_from_the_database_rolls_back_only_that_cluster() {
    let truth = Truth {
        regressed: ["prod-us-east"].into(),
        ..Truth::healthy()
    };
    let mut sim = Sim::new(fleet_rollout(json!({})), GUARDED, truth);
    sim.run_until(3_600_000);
    assert_eq!(sim.machine.state.phase, FleetPhase::Halted);
    assert!(
        sim.machine.state.message.contains("prod-us-east"),
        "{}",
        sim.machine.state.message
    );
    assert!(
        sim.machine.state.message.contains("error-rate")
            && sim.machine.state.message.contains("0.05"),
        "{}",
        sim.machine.state.message
    );
    assert_eq!(sim.status("prod-us-east"), ClusterStatus::RolledBack);
    assert!(!sim.stable_is_new("prod-us-east"));
    for cluster in ["canary-eu-west", "prod-eu-west"] {
        assert_eq!(sim.status(cluster), ClusterStatus::Validated, "{cluster}");
        assert!(
            sim.stable_is_new(cluster),
            "{cluster} stays on the new version"
        );
    }
    let ap_south = sim.status("prod-ap-south");
    assert!(
        matches!(ap_south, ClusterStatus::Paused | ClusterStatus::Validated),
        "{ap_south:?}"
    );
    assert!(sim.machine.state.rejections.contains(&(
        "prod-us-east".to_owned(),
        sim.machine.state.revision.clone()
    )));
}

#[test]
fn rollback_scope_fleet_reverts_every_cluster_that_had_the_new_version() {
    let truth = Truth {
        regressed: ["prod-us-east"].into(),
        ..Truth::healthy()
    };
    let mut sim = Sim::new(
        fleet_rollout(json!({"failurePolicy": {"rollbackScope": "fleet"}})),
        GUARDED,
        truth,
    );
    sim.run_until(3_600_000);
    assert_eq!(sim.machine.state.phase, FleetPhase::Halted);
    sim.run_until(sim.now + 120_000);
    for cluster in CLUSTERS {
        assert!(
            !sim.stable_is_new(cluster),
            "{cluster} still on the new version"
        );
        assert_eq!(sim.status(cluster), ClusterStatus::RolledBack, "{cluster}");
    }
}

#[test]
fn an_unreachable_cluster_is_never_validated() {
    for (action, phase, status) in [
        ("halt", FleetPhase::Halted, ClusterStatus::Progressing),
        ("skip", FleetPhase::Completed, ClusterStatus::Skipped),
    ] {
        let truth = Truth {
            unreachable: ["prod-eu-west"].into(),
            ..Truth::healthy()
        };
        let mut sim = Sim::new(
            fleet_rollout(
                json!({"failurePolicy": {"unreachable": {"timeout": "5m", "action": action}}}),
            ),
            GUARDED,
            truth,
        );
        sim.run_until(3_600_000);
        assert_eq!(
            sim.machine.state.phase, phase,
            "{action}: {}",
            sim.machine.state.message
        );
        assert_ne!(sim.status("prod-eu-west"), ClusterStatus::Validated);
        if action == "halt" {
            assert!(
                sim.machine
                    .state
                    .message
                    .contains("prod-eu-west unreachable"),
                "{}",
                sim.machine.state.message
            );
            assert_eq!(sim.got_new_version("prod-us-east"), None);
        } else {
            assert_eq!(sim.status("prod-eu-west"), status);
            assert!(
                sim.machine.state.clusters["prod-eu-west"]
                    .reason
                    .contains("skipped")
            );
        }
    }
}

#[test]
fn a_provider_outage_never_validates_a_cluster() {
    let truth = Truth {
        outage: ["canary-eu-west"].into(),
        ..Truth::healthy()
    };
    let mut sim = Sim::new(fleet_rollout(json!({})), GUARDED, truth);
    sim.run_until(3_600_000);
    assert_ne!(sim.status("canary-eu-west"), ClusterStatus::Validated);
    assert_eq!(sim.got_new_version("prod-eu-west"), None);
}

#[test]
fn a_canary_with_no_traffic_never_validates_its_cluster() {
    // A failure-only condition passes on an empty result (Argo's verdict): Successful, yet no
    // evidence, so the cluster pauses instead of validating.
    let truth = Truth {
        no_traffic: ["canary-eu-west"].into(),
        ..Truth::healthy()
    };
    let mut sim = Sim::new(
        fleet_rollout(json!({})),
        "len(result) == 0 || result[0] < 0.01",
        truth,
    );
    sim.run_until(3_600_000);
    assert_eq!(
        sim.status("canary-eu-west"),
        ClusterStatus::Paused,
        "{}",
        sim.machine.state.clusters["canary-eu-west"].reason
    );
    // Held before its promotion: never promoted on a result without data.
    let reason = &sim.machine.state.clusters["canary-eu-west"].reason;
    assert!(
        reason.starts_with("EvidenceTimeout: waiting for evidence") && reason.contains("no data"),
        "{reason}"
    );
    assert!(!sim.stable_is_new("canary-eu-west"), "never promoted");
    assert_eq!(sim.got_new_version("prod-eu-west"), None);
}

#[test]
fn the_fleet_state_serializes_and_resumes_to_the_same_outputs() {
    let truth = Truth {
        regressed: ["prod-us-east"].into(),
        ..Truth::healthy()
    };
    let mut a = Sim::new(fleet_rollout(json!({})), GUARDED, truth.clone());
    a.run_until(700_000);
    let saved = serde_json::to_string(&a.machine.state).unwrap();
    let restored: FleetState = serde_json::from_str(&saved).unwrap();
    assert_eq!(restored, a.machine.state);
    let mut b = Sim::new(fleet_rollout(json!({})), GUARDED, truth);
    b.machine = FleetMachine::new(
        a.machine.plan.clone(),
        &Revisions {
            previous: &a.previous,
            next: &a.next,
        },
        Some(restored),
    );
    b.now = a.now;
    b.replicas = a.replicas.clone();
    b.weights = a.weights.clone();
    b.pending = a.pending.clone();
    a.run_until(3_600_000);
    b.run_until(3_600_000);
    assert_eq!(a.machine.state, b.machine.state);
}

#[test]
fn a_step_that_takes_no_cluster_keeps_each_step_its_own_max_update() {
    let mut fleet = fleet();
    for cluster in &mut fleet.spec.clusters {
        cluster.labels = [("tier".to_owned(), "prod".to_owned())].into();
    }
    let steps = json!({"steps": [
        {"matchLabels": {"tier": "canary"}, "maxUpdate": 3},
        {"matchLabels": {"tier": "prod"}, "maxUpdate": "25%"}
    ]});
    let plan = FleetPlan::resolve(
        &fleet,
        &fleet_rollout(json!({"waves": steps})),
        &[template(GUARDED)],
    )
    .unwrap();
    assert_eq!(plan.waves.len(), 1);
    assert_eq!(plan.max_update, vec![1], "wave 2's own step: 25% of 4");
}

// === Wave-level analysis ===

/// When the last cluster of a wave (0-based) was decided.
fn wave_decided_at(sim: &Sim, wave: usize) -> i64 {
    sim.machine.plan.waves[wave]
        .iter()
        .filter_map(|c| sim.machine.state.clusters[c].decided_at)
        .max()
        .unwrap()
}

#[test]
fn a_passing_wave_analysis_lets_the_next_wave_start() {
    let mut sim = Sim::new(
        fleet_rollout(with_wave_analysis()),
        GUARDED,
        Truth::healthy(),
    );
    sim.run_until(3_600_000);
    let state = &sim.machine.state;
    assert_eq!(state.phase, FleetPhase::Completed, "{}", state.message);
    for wave in 0..3 {
        let measured: Vec<&(i64, usize, String)> = sim
            .wave_measured
            .iter()
            .filter(|(_, w, _)| *w == wave)
            .collect();
        assert_eq!(measured.len(), 2, "wave {}: {measured:?}", wave + 1);
        // Arguments: the waveAnalysis args, the template's defaults, and `wave`, 1-based.
        let expected = format!("wave=\"{}\"}}[5m])) < 0.02", wave + 1);
        assert!(measured[0].2.contains(&expected), "{}", measured[0].2);
        // The analysis starts after the bake, and the wave completes only once it passed.
        let baked = wave_decided_at(&sim, wave) + 120_000;
        assert!(
            measured[0].0 >= baked,
            "wave {}: analysis before the bake ended",
            wave + 1
        );
        let completed = state.wave_completed_at[wave].unwrap();
        assert!(
            completed > measured[1].0,
            "wave {} completed before its analysis",
            wave + 1
        );
        if wave + 1 < 3 {
            assert!(state.wave_started_at[wave + 1].unwrap() >= completed);
        }
    }
    assert_eq!(
        state.wave_run.as_ref().unwrap().run.phase,
        AnalysisPhase::Successful
    );
}

#[test]
fn a_failing_wave_analysis_halts_the_fleet_naming_the_wave_metric_and_value() {
    let truth = Truth {
        wave_regressed: [2].into(),
        ..Truth::healthy()
    };
    let mut sim = Sim::new(fleet_rollout(with_wave_analysis()), GUARDED, truth.clone());
    sim.run_until(3_600_000);
    let state = &sim.machine.state;
    assert_eq!(state.phase, FleetPhase::Halted);
    for needle in ["wave 2 analysis failed", "wave-error-rate", "0.05"] {
        assert!(
            state.message.contains(needle),
            "{needle}: {}",
            state.message
        );
    }
    assert_eq!(state.wave, 1, "wave 2 never completed");
    assert_eq!(state.wave_completed_at[1], None);
    // Default rollbackScope: the validated clusters stay on the new version.
    for cluster in ["canary-eu-west", "prod-eu-west"] {
        assert_eq!(sim.status(cluster), ClusterStatus::Validated, "{cluster}");
        assert!(sim.stable_is_new(cluster), "{cluster}");
    }
    for cluster in ["prod-us-east", "prod-ap-south"] {
        assert_eq!(sim.status(cluster), ClusterStatus::Held, "{cluster}");
        assert_eq!(sim.got_new_version(cluster), None, "{cluster}");
    }
    // rollbackScope: wave reverts the failing wave's clusters, not the earlier waves'.
    let mut sim = Sim::new(
        fleet_rollout(json!({
            "waveAnalysis": with_wave_analysis()["waveAnalysis"],
            "failurePolicy": {"rollbackScope": "wave"}
        })),
        GUARDED,
        truth,
    );
    sim.run_until(3_600_000);
    assert_eq!(sim.machine.state.phase, FleetPhase::Halted);
    sim.run_until(sim.now + 120_000);
    assert_eq!(sim.status("prod-eu-west"), ClusterStatus::RolledBack);
    assert!(!sim.stable_is_new("prod-eu-west"));
    assert!(sim.stable_is_new("canary-eu-west"));
}

#[test]
fn retry_after_a_failed_wave_analysis_runs_it_again() {
    let truth = Truth {
        wave_regressed: [1].into(),
        ..Truth::healthy()
    };
    let mut sim = Sim::new(fleet_rollout(with_wave_analysis()), GUARDED, truth);
    sim.run_until(3_600_000);
    assert_eq!(sim.machine.state.phase, FleetPhase::Halted);
    assert_eq!(sim.machine.state.wave_run.as_ref().unwrap().attempt, 0);
    // The wave's traffic recovers; an operator retries.
    sim.truth.wave_regressed.clear();
    sim.now += 5_000;
    sim.step(&[FleetCommand::Retry]);
    sim.run_until(sim.now + 3_600_000);
    let state = &sim.machine.state;
    assert_eq!(state.phase, FleetPhase::Completed, "{}", state.message);
    let first_wave_runs: Vec<i64> = sim
        .wave_measured
        .iter()
        .filter(|(_, w, _)| *w == 0)
        .map(|(t, _, _)| *t)
        .collect();
    assert_eq!(
        first_wave_runs.len(),
        3,
        "one failed measurement, then two that passed"
    );
    for cluster in CLUSTERS {
        assert!(sim.stable_is_new(cluster), "{cluster}");
    }
}

/// An operator who retries in the tick right after a cluster failed (before its engine has
/// reconciled the rollback) gets a fresh attempt, not the aborted one again: the old run's
/// failure is no evidence against the retry.
/// Argo's abort on a Kubernetes cluster (whoever owns its Rollout spec): the failed cluster
/// stays on that spec, aborted (canary at zero, the stable serving), until it is retried;
/// elsewhere a rolled-back cluster returns to the previous spec.
#[test]
fn an_abort_on_kubernetes_stays_on_its_spec_until_retried() {
    let kubernetes = |source: &str| {
        let mut fleet = fleet();
        fleet.spec.clusters[0].endpoint =
            Some(serde_json::from_value(json!({"kubernetes": {"rolloutSource": source}})).unwrap());
        fleet
    };
    for (fleet, in_place) in [
        (fleet(), false),
        (kubernetes("cluster"), true),
        (kubernetes("flotilla"), true),
    ] {
        let truth = Truth {
            regressed: ["canary-eu-west"].into(),
            ..Truth::healthy()
        };
        let mut sim = Sim::with_fleet(&fleet, fleet_rollout(json!({})), GUARDED, truth);
        sim.run_until(3_600_000);
        assert_eq!(sim.machine.state.phase, FleetPhase::Halted);
        assert_eq!(sim.status("canary-eu-west"), ClusterStatus::RolledBack);
        let engine = &sim.machine.state.clusters["canary-eu-west"].rollout;
        let current = engine.current.map(|c| engine.hash(c).to_string());
        assert_eq!(engine.abort, in_place, "in place: {in_place}");
        assert_eq!(
            current == Some(sim.new_hash()),
            in_place,
            "in place: {in_place}"
        );
        assert!(!sim.stable_is_new("canary-eu-west"));
        assert_eq!(sim.weights["canary-eu-west"].canary, 0);
        // Fixed, and retried: the cluster starts again, and the fleet completes.
        sim.fix_and_retry(1_000);
    }
}

#[test]
fn a_retry_right_after_a_failure_starts_a_fresh_attempt() {
    let truth = Truth {
        regressed: ["canary-eu-west"].into(),
        ..Truth::healthy()
    };
    let mut sim = Sim::new(fleet_rollout(json!({})), GUARDED, truth);
    while sim.status("canary-eu-west") != ClusterStatus::RolledBack {
        assert!(sim.now < 3_600_000, "the regression was never caught");
        sim.now += 5_000;
        sim.step(&[]);
    }
    assert!(sim.machine.state.clusters["canary-eu-west"].rollout.abort);
    // Fixed at once; the retry comes a few milliseconds later.
    sim.fix_and_retry(4);
}

/// An answer that may change a decision is urgent (the daemon ticks at once for it); a
/// passing or deferred one waits for the next tick.
#[test]
fn only_an_answer_that_may_change_a_decision_is_urgent() {
    let mut sim = Sim::new(fleet_rollout(json!({})), GUARDED, Truth::healthy());
    while sim.pending.iter().all(|m| m.cluster != "canary-eu-west") {
        assert!(sim.now < 600_000, "no measurement was ever asked");
        sim.now += 5_000;
        sim.step(&[]);
    }
    let m = sim
        .pending
        .iter()
        .find(|m| m.cluster == "canary-eu-west")
        .unwrap();
    let value = |v: Vec<f64>| Outcome::Value {
        result: MetricResult::Vector(v),
        metadata: BTreeMap::new(),
    };
    assert!(!m.is_urgent(&value(vec![0.002])), "a passing value");
    assert!(m.is_urgent(&value(vec![0.05])), "a failing value");
    assert!(
        m.is_urgent(&value(vec![])),
        "no data fails the guarded condition"
    );
    assert!(m.is_urgent(&Outcome::Error("connection refused".into())));
    assert!(!m.is_urgent(&Outcome::Deferred("too few points".into())));
    // Without its plan nothing can be told: urgent.
    let mut planless = m.clone();
    planless.plan = None;
    assert!(planless.is_urgent(&value(vec![0.002])));
}

#[test]
fn a_wave_analysis_without_data_never_advances_the_fleet() {
    // A failure-only condition passes on an empty result: Successful without evidence, which
    // pauses the fleet instead of completing the wave, and keeps doing so after a resume.
    let truth = Truth {
        wave_no_data: [1].into(),
        ..Truth::healthy()
    };
    let condition = "len(result) == 0 || result[0] < 0.01";
    let mut sim = Sim::new(
        fleet_rollout(with_wave_analysis()),
        condition,
        truth.clone(),
    );
    sim.run_until(3_600_000);
    let state = &sim.machine.state;
    assert_eq!(state.phase, FleetPhase::Paused, "{}", state.message);
    assert!(
        state.message.contains("wave 1 analysis") && state.message.contains("without evidence"),
        "{}",
        state.message
    );
    assert_eq!(sim.status("canary-eu-west"), ClusterStatus::Validated);
    assert_eq!(sim.got_new_version("prod-eu-west"), None);
    let measured = sim.wave_measured.len();
    sim.now += 5_000;
    sim.step(&[FleetCommand::Resume]);
    sim.run_until(sim.now + 600_000);
    assert!(
        sim.wave_measured.len() > measured,
        "resume runs the analysis again"
    );
    assert_eq!(sim.machine.state.wave_run.as_ref().unwrap().attempt, 1);
    assert_eq!(sim.machine.state.phase, FleetPhase::Paused);
    assert_eq!(sim.got_new_version("prod-eu-west"), None);
    // With a guarded condition, no data fails the wave instead: never advances either.
    let mut sim = Sim::new(fleet_rollout(with_wave_analysis()), GUARDED, truth);
    sim.run_until(3_600_000);
    assert_eq!(sim.machine.state.phase, FleetPhase::Halted);
    assert_eq!(sim.got_new_version("prod-eu-west"), None);
}

#[test]
fn promote_skips_the_bake_but_not_the_wave_analysis() {
    let long_bake = |truth: Truth| {
        let mut extra = with_wave_analysis();
        extra["bakeTime"] = json!("30m");
        let mut sim = Sim::new(fleet_rollout(extra), GUARDED, truth);
        while sim.status("canary-eu-west") != ClusterStatus::Validated {
            sim.now += 5_000;
            sim.step(&[]);
        }
        sim.now += 5_000;
        sim.step(&[FleetCommand::Promote {
            wave: None,
            full: false,
            cluster: None,
        }]);
        sim
    };
    let mut sim = long_bake(Truth::healthy());
    while sim.machine.state.wave == 0 {
        sim.now += 5_000;
        sim.step(&[]);
    }
    let decided = wave_decided_at(&sim, 0);
    let first = sim.wave_measured.first().unwrap();
    assert!(first.0 - decided < 60_000, "the bake was skipped");
    assert_eq!(
        sim.wave_measured.iter().filter(|(_, w, _)| *w == 0).count(),
        2,
        "the analysis ran in full"
    );
    assert!(sim.machine.state.wave_completed_at[0].unwrap() > sim.wave_measured[1].0);
    // A failing analysis still halts a promoted wave.
    let mut sim = long_bake(Truth {
        wave_regressed: [1].into(),
        ..Truth::healthy()
    });
    sim.run_until(3_600_000);
    assert_eq!(sim.machine.state.phase, FleetPhase::Halted);
    assert_eq!(sim.got_new_version("prod-eu-west"), None);
}

// === Property tests ===

use proptest::prelude::*;

#[derive(Debug, Clone)]
struct FleetCase {
    layout: Layout,
    regressed: Vec<bool>,
    unreachable: Option<usize>,
    commands: Vec<(u16, u8)>,
    cut: usize,
    /// Whether the FleetRollout has a waveAnalysis, and which wave (1-based) it finds regressed.
    wave_analysis: Option<Option<usize>>,
}

/// How the random fleet forms its waves.
#[derive(Debug, Clone)]
enum Layout {
    /// `waves.list`: each cluster's wave.
    List(Vec<u32>),
    /// `waves.steps` over labelled clusters: each cluster's labels, and the steps (JSON).
    Steps {
        labels: Vec<BTreeMap<String, String>>,
        steps: Vec<Value>,
    },
}

const TIERS: [&str; 3] = ["canary", "prod", "edge"];
const ZONES: [&str; 2] = ["a", "b"];

/// One random label-selector step: matchLabels, matchExpressions (every operator), both, or
/// none (takes every cluster left), with an optional maxUpdate as a count or a percentage.
fn wave_step() -> impl Strategy<Value = Value> {
    (
        0u8..4,
        0usize..3,
        0usize..2,
        0u8..4,
        proptest::option::of((any::<bool>(), 1i64..4, 1i64..=100)),
    )
        .prop_map(|(kind, tier, zone, op, max_update)| {
            let mut step = match kind {
                0 => json!({"matchLabels": {"tier": TIERS[tier]}}),
                1 => {
                    let (key, operator, values) = match op {
                        0 => ("tier", "In", json!([TIERS[tier], TIERS[(tier + 1) % 3]])),
                        1 => ("tier", "NotIn", json!([TIERS[tier]])),
                        2 => ("zone", "Exists", json!([])),
                        _ => ("zone", "DoesNotExist", json!([])),
                    };
                    json!({"matchExpressions": [{"key": key, "operator": operator, "values": values}]})
                }
                2 => json!({
                    "matchLabels": {"zone": ZONES[zone]},
                    "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": [TIERS[tier]]}]
                }),
                _ => json!({}),
            };
            if let Some((percent, count, share)) = max_update {
                step["maxUpdate"] = if percent {
                    json!(format!("{share}%"))
                } else {
                    json!(count)
                };
            }
            step
        })
}

fn layout() -> impl Strategy<Value = Layout> {
    let labels = (
        proptest::option::of(0usize..3),
        proptest::option::of(0usize..2),
    )
        .prop_map(|(tier, zone)| {
            let mut labels = BTreeMap::new();
            if let Some(tier) = tier {
                labels.insert("tier".to_owned(), TIERS[tier].to_owned());
            }
            if let Some(zone) = zone {
                labels.insert("zone".to_owned(), ZONES[zone].to_owned());
            }
            labels
        });
    prop_oneof![
        prop::collection::vec(1u32..4, 4).prop_map(Layout::List),
        (
            prop::collection::vec(labels, 4),
            prop::collection::vec(wave_step(), 1..4)
        )
            .prop_map(|(labels, steps)| Layout::Steps { labels, steps })
            // At least one cluster must be targeted.
            .prop_filter("targets no cluster", |layout| !expected_waves(layout)
                .is_empty()),
    ]
}

fn fleet_case() -> impl Strategy<Value = FleetCase> {
    (
        layout(),
        prop::collection::vec(prop::bool::weighted(0.3), 4),
        proptest::option::of(0usize..4),
        prop::collection::vec((1u16..400, 0u8..5), 0..6),
        0usize..300,
        proptest::option::of(proptest::option::weighted(0.3, 1usize..4)),
    )
        .prop_map(
            |(layout, regressed, unreachable, commands, cut, wave_analysis)| FleetCase {
                layout,
                regressed,
                unreachable,
                commands,
                cut,
                wave_analysis,
            },
        )
}

/// The waves a layout forms, computed here from the steps' selectors (first matching step
/// wins; step i is wave i + 1; an empty step leaves its number unused), each with the maxUpdate
/// its step allows: wave number -> (clusters, maxUpdate).
fn expected_waves(layout: &Layout) -> BTreeMap<u32, (Vec<String>, usize)> {
    let mut waves: BTreeMap<u32, (Vec<String>, usize)> = BTreeMap::new();
    match layout {
        Layout::List(list) => {
            for (cluster, wave) in CLUSTERS.iter().zip(list) {
                waves.entry(*wave).or_default().0.push(cluster.to_string());
            }
            for (members, max) in waves.values_mut() {
                *max = members.len();
            }
        }
        Layout::Steps { labels, steps } => {
            let steps: Vec<crate::spec::fleet::WaveStep> = steps
                .iter()
                .map(|s| serde_json::from_value(s.clone()).unwrap())
                .collect();
            for (cluster, labels) in CLUSTERS.iter().zip(labels) {
                if let Some(i) = steps.iter().position(|s| s.matches(labels)) {
                    waves
                        .entry(i as u32 + 1)
                        .or_default()
                        .0
                        .push(cluster.to_string());
                }
            }
            for (number, (members, max)) in waves.iter_mut() {
                let len = members.len() as i64;
                *max = match steps[*number as usize - 1].max_update {
                    None => len,
                    Some(crate::spec::common::IntOrPercent::Int(n)) => n,
                    Some(crate::spec::common::IntOrPercent::Percent(p)) => (len * p + 99) / 100,
                }
                .max(1) as usize;
            }
        }
    }
    waves
}

fn command_of(code: u8, cluster: &str) -> FleetCommand {
    match code {
        0 => FleetCommand::Pause,
        1 => FleetCommand::Resume,
        2 => FleetCommand::Promote {
            wave: None,
            full: false,
            cluster: None,
        },
        3 => FleetCommand::Abort {
            cluster: Some(cluster.to_owned()),
        },
        _ => FleetCommand::Resume,
    }
}

fn case_sim(case: &FleetCase) -> Sim {
    let mut fleet = fleet();
    let waves = match &case.layout {
        Layout::List(list) => {
            let list: Vec<Value> = CLUSTERS
                .iter()
                .zip(list)
                .map(|(c, w)| json!({"cluster": c, "wave": w}))
                .collect();
            json!({"list": list})
        }
        Layout::Steps { labels, steps } => {
            for (cluster, labels) in fleet.spec.clusters.iter_mut().zip(labels) {
                cluster.labels = labels.clone();
            }
            json!({"steps": steps})
        }
    };
    let truth = Truth {
        regressed: CLUSTERS
            .iter()
            .zip(&case.regressed)
            .filter(|(_, r)| **r)
            .map(|(c, _)| *c)
            .collect(),
        unreachable: case.unreachable.map(|i| CLUSTERS[i]).into_iter().collect(),
        wave_regressed: case.wave_analysis.flatten().into_iter().collect(),
        ..Truth::healthy()
    };
    let mut spec = json!({"waves": waves, "bakeTime": "30s", "failurePolicy": {"unreachable": {"timeout": "2m"}}});
    if case.wave_analysis.is_some() {
        spec["waveAnalysis"] = with_wave_analysis()["waveAnalysis"].clone();
    }
    Sim::with_fleet(&fleet, fleet_rollout(spec), GUARDED, truth)
}

/// Runs a case, checking the invariants at every tick; returns the final state.
fn run_case(case: &FleetCase, checks: bool) -> FleetState {
    let mut sim = case_sim(case);
    let expected = expected_waves(&case.layout);
    let plan = &sim.machine.plan;
    assert_eq!(
        plan.waves,
        expected
            .values()
            .map(|(c, _)| c.clone())
            .collect::<Vec<_>>(),
        "{case:?}"
    );
    assert_eq!(
        plan.max_update,
        expected.values().map(|(_, m)| *m).collect::<Vec<_>>(),
        "{case:?}"
    );
    let mut validated_at: BTreeMap<String, i64> = BTreeMap::new();
    let mut commands = case.commands.clone();
    commands.sort();
    for tick in 0..500u16 {
        sim.now += 5_000;
        let due: Vec<FleetCommand> = commands
            .iter()
            .filter(|(t, _)| *t == tick)
            .map(|(t, c)| command_of(*c, CLUSTERS[*t as usize % 4]))
            .collect();
        let replicas_before = sim.replicas.clone();
        sim.step(&due);
        if !checks {
            continue;
        }
        let state = &sim.machine.state;
        let new_hash = sim.new_hash();
        for (name, cluster) in &state.clusters {
            if cluster.status == ClusterStatus::Validated {
                validated_at.entry(name.clone()).or_insert(sim.now);
            }
            // A validated cluster is never rolled back under the default scope.
            if validated_at.contains_key(name) {
                assert_ne!(
                    cluster.status,
                    ClusterStatus::RolledBack,
                    "{name} validated then rolled back: {case:?}"
                );
            }
            // A rejected (cluster, revision) is never redeployed: its new revision never scales up again.
            if state
                .rejections
                .contains(&(name.clone(), state.revision.clone()))
            {
                let engine = &cluster.rollout;
                for revision in engine.revisions.iter().filter(|r| r.hash == new_hash) {
                    let before = replicas_before
                        .get(name)
                        .and_then(|m| m.get(&revision.number))
                        .copied()
                        .unwrap_or(0);
                    let after = sim
                        .replicas
                        .get(name)
                        .and_then(|m| m.get(&revision.number))
                        .copied()
                        .unwrap_or(0);
                    assert!(
                        after <= before,
                        "{name} redeployed after rejection: {case:?}"
                    );
                }
            }
        }
        // At most maxUpdate clusters of a step in flight (progressing, or paused mid-update).
        for (wave, members) in sim.machine.plan.waves.iter().enumerate() {
            let in_flight = members
                .iter()
                .filter(|c| {
                    matches!(
                        state.clusters[*c].status,
                        ClusterStatus::Progressing | ClusterStatus::Paused
                    )
                })
                .count();
            assert!(
                in_flight <= sim.machine.plan.max_update[wave],
                "wave {}: {in_flight} clusters in flight: {case:?}",
                wave + 1
            );
        }
        // No cluster of a later wave gets the new revision before every cluster of the earlier
        // waves is validated on it (and, with a waveAnalysis, before the earlier waves'
        // analyses measured).
        for (time, cluster, hash) in &sim.deployed {
            if *hash != new_hash {
                continue;
            }
            let wave = sim.machine.plan.wave_of(cluster).unwrap();
            for earlier in sim.machine.plan.waves[..wave].iter().flatten() {
                let ok = validated_at.get(earlier).is_some_and(|v| v <= time);
                assert!(
                    ok,
                    "{cluster} (wave {}) got the new version at {time} before {earlier} was validated: {case:?}",
                    wave + 1
                );
            }
            if case.wave_analysis.is_some() {
                for earlier in 0..wave {
                    assert!(
                        sim.wave_measured
                            .iter()
                            .any(|(t, w, _)| *w == earlier && t < time),
                        "{cluster} (wave {}) got the new version before wave {}'s analysis: {case:?}",
                        wave + 1,
                        earlier + 1
                    );
                    assert!(
                        case.wave_analysis != Some(Some(earlier + 1)),
                        "{cluster} got the new version past a failing wave analysis: {case:?}"
                    );
                }
            }
        }
    }
    sim.machine.state.clone()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn fleet_invariants_hold_over_random_layouts_outcomes_and_commands(case in fleet_case()) {
        run_case(&case, true);
    }

    #[test]
    fn fleet_state_resumes_to_the_same_outputs(case in fleet_case()) {
        let mut a = case_sim(&case);
        let mut b = case_sim(&case);
        let mut commands = case.commands.clone();
        commands.sort();
        for tick in 0..400u16 {
            a.now += 5_000;
            b.now += 5_000;
            let due: Vec<FleetCommand> = commands.iter().filter(|(t, _)| *t == tick).map(|(t, c)| command_of(*c, CLUSTERS[*t as usize % 4])).collect();
            if usize::from(tick) == case.cut {
                // b restarts from a's persisted state.
                let saved = serde_json::to_string(&a.machine.state).unwrap();
                let restored: FleetState = serde_json::from_str(&saved).unwrap();
                b.machine = FleetMachine::new(a.machine.plan.clone(), &Revisions { previous: &a.previous, next: &a.next }, Some(restored));
                b.replicas = a.replicas.clone();
                b.weights = a.weights.clone();
                b.pending = a.pending.clone();
            }
            a.step(&due);
            b.step(&due);
            if usize::from(tick) >= case.cut {
                prop_assert_eq!(&a.machine.state, &b.machine.state);
            }
        }
        let _ = run_case(&case, false);
    }
}

#[test]
fn a_new_revision_supersedes_the_one_in_flight() {
    let mut sim = Sim::new(fleet_rollout(json!({})), GUARDED, Truth::healthy());
    // Wave 1 validated and wave 2 in flight.
    while sim.machine.state.clusters["prod-eu-west"].status != ClusterStatus::Progressing {
        sim.now += 5_000;
        sim.step(&[]);
    }
    for _ in 0..4 {
        sim.now += 5_000;
        sim.step(&[]);
    }
    assert!(
        sim.weights["prod-eu-west"].canary > 0,
        "prod-eu-west mid-canary"
    );
    let promoted_hash = sim.new_hash();
    // 1.9.1 arrives.
    let newer = rollout("payment-api:1.9.1");
    let old_previous = sim.previous.clone();
    let old_next = sim.next.clone();
    sim.previous = old_next.clone();
    sim.next = newer;
    let revisions = Revisions {
        previous: &sim.previous,
        next: &sim.next,
    };
    sim.machine.supersede(
        &Revisions {
            previous: &old_previous,
            next: &old_next,
        },
        &revisions,
    );
    assert_eq!(
        sim.machine.state.wave, 0,
        "the new revision starts from wave 1"
    );
    sim.run_until(sim.now + 3_600_000);
    assert_eq!(
        sim.machine.state.phase,
        FleetPhase::Completed,
        "{}",
        sim.machine.state.message
    );
    for cluster in CLUSTERS {
        assert!(sim.stable_is_new(cluster), "{cluster} ends on 1.9.1");
    }
    // prod-eu-west's in-flight 1.9.0 canary went back to its stable before 1.9.1 reached it.
    let eu_west = &sim.machine.state.clusters["prod-eu-west"].rollout;
    assert!(
        eu_west.revisions.iter().any(|r| r.hash == promoted_hash),
        "it had 1.9.0 in flight"
    );
    // Clusters that never ran 1.9.0 never get it after the supersede.
    for cluster in ["prod-us-east", "prod-ap-south"] {
        assert!(
            !sim.deployed
                .iter()
                .any(|(_, c, h)| c == cluster && *h == promoted_hash),
            "{cluster} got the superseded 1.9.0"
        );
    }
}

/// `undo` mid-rollout is a supersede back to the previous spec: the clusters still on it are
/// already there (nothing deployed, nothing to prove), the validated one takes it through the
/// canary with analysis, and the fleet completes; none is left Paused for "no analysis".
#[test]
fn an_undo_mid_rollout_returns_every_cluster_and_completes() {
    let mut sim = Sim::new(fleet_rollout(json!({})), GUARDED, Truth::healthy());
    while sim.machine.state.clusters["prod-eu-west"].status != ClusterStatus::Progressing {
        sim.now += 5_000;
        sim.step(&[]);
    }
    run_for(&mut sim, 20_000);
    assert!(
        sim.weights["prod-eu-west"].canary > 0,
        "prod-eu-west mid-canary"
    );
    let (old_previous, old_next) = (sim.previous.clone(), sim.next.clone());
    sim.previous = old_next.clone();
    sim.next = old_previous.clone();
    let deployed_before = sim.deployed.len();
    sim.machine.supersede(
        &Revisions {
            previous: &old_previous,
            next: &old_next,
        },
        &Revisions {
            previous: &sim.previous,
            next: &sim.next,
        },
    );
    sim.run_until(sim.now + 3_600_000);
    assert_eq!(
        sim.machine.state.phase,
        FleetPhase::Completed,
        "{}: {:?}",
        sim.machine.state.message,
        sim.machine
            .state
            .clusters
            .iter()
            .map(|(n, c)| (n.clone(), c.status, c.reason.clone()))
            .collect::<Vec<_>>()
    );
    for cluster in CLUSTERS {
        assert!(sim.stable_is_new(cluster), "{cluster} ends on 1.8.3");
    }
    for cluster in ["prod-eu-west", "prod-us-east", "prod-ap-south"] {
        assert_eq!(
            sim.machine.state.clusters[cluster].reason, "already on this revision",
            "{cluster}"
        );
        sim.assert_nothing_deployed_since(deployed_before, cluster);
    }
    // canary-eu-west had 1.9.0 validated: it goes back through a canary of 1.8.3, on evidence.
    assert!(
        sim.machine.state.clusters["canary-eu-west"]
            .reason
            .starts_with("validated"),
        "{}",
        sim.machine.state.clusters["canary-eu-west"].reason
    );
}

/// A run that cannot be planned (the Rollout names a template nobody loaded) is an Error the
/// engine sees: the canary is aborted back to weight 0 instead of going to 100% with nothing
/// judging it, no rejection is recorded (an error is no verdict), and the wave waits.
#[test]
fn a_run_that_cannot_be_planned_aborts_the_canary_without_a_rejection() {
    let mut next = rollout("payment-api:1.9.0");
    next.spec
        .strategy
        .as_mut()
        .and_then(|s| s.canary.as_mut())
        .and_then(|c| c.analysis.as_mut())
        .unwrap()
        .templates[0]
        .template_name = "no-such-template".into();
    let mut sim = Sim::with_specs(
        &fleet(),
        fleet_rollout(json!({})),
        GUARDED,
        Truth::healthy(),
        (rollout("payment-api:1.8.3"), next),
    );
    sim.run_until(3_600_000);
    let canary = &sim.machine.state.clusters["canary-eu-west"];
    assert_eq!(
        canary.status,
        ClusterStatus::RolledBack,
        "{}",
        canary.reason
    );
    assert!(canary.aborted_on_error, "{}", canary.reason);
    assert!(
        canary.reason.contains("aborted without rejection"),
        "{}",
        canary.reason
    );
    assert!(sim.machine.state.rejections.is_empty());
    assert!(!sim.stable_is_new("canary-eu-west"), "never promoted");
    assert_eq!(
        sim.weights["canary-eu-west"].canary, 0,
        "its canary is back at 0"
    );
    assert_eq!(
        sim.got_new_version("prod-eu-west"),
        None,
        "wave 2 never starts"
    );
    assert!(
        sim.machine.state.message.contains("retry"),
        "{}",
        sim.machine.state.message
    );
}

/// A diverged cluster is held: its step does not advance and it is not judged while the driver
/// repairs it; it carries on from the same step once it matches again.
#[test]
fn a_diverged_cluster_advances_no_step_until_it_matches_again() {
    let mut sim = Sim::new(fleet_rollout(json!({})), GUARDED, Truth::healthy());
    while sim.machine.state.clusters["canary-eu-west"]
        .rollout
        .step_index
        .unwrap_or(0)
        < 1
    {
        sim.now += 5_000;
        sim.step(&[]);
    }
    let step = sim.machine.state.clusters["canary-eu-west"]
        .rollout
        .step_index;
    sim.truth.diverged.insert("canary-eu-west");
    run_for(&mut sim, 600_000);
    let cluster = &sim.machine.state.clusters["canary-eu-west"];
    assert_eq!(cluster.rollout.step_index, step, "held at its step");
    assert_eq!(cluster.status, ClusterStatus::Progressing);
    assert_eq!(
        cluster.unreachable_since, None,
        "diverged is not unreachable"
    );
    sim.truth.diverged.clear();
    sim.run_until(sim.now + 3_600_000);
    assert_eq!(sim.machine.state.phase, FleetPhase::Completed);
}

/// First start: a cluster adopted on an older version is taken through its wave with
/// analysis (never "already on this revision"); one adopted on the manifest's revision is.
#[test]
fn clusters_adopted_at_first_start_are_judged_unless_already_on_the_revision() {
    let next = rollout("payment-api:1.9.0");
    let plan = FleetPlan::resolve(
        &fleet(),
        &fleet_rollout(json!({})),
        &[template(GUARDED), wave_template(GUARDED)],
    )
    .unwrap();
    // The first start's revision: previous and next are both the manifest.
    let machine = FleetMachine::new(
        plan,
        &Revisions {
            previous: &next,
            next: &next,
        },
        None,
    );
    let mut sim = Sim {
        machine,
        previous: next.clone(),
        next: next.clone(),
        truth: Truth::healthy(),
        now: 0,
        replicas: BTreeMap::new(),
        weights: BTreeMap::new(),
        pending: Vec::new(),
        deployed: Vec::new(),
        wave_measured: Vec::new(),
        events: Vec::new(),
    };
    let old = rollout("payment-api:1.8.3");
    for cluster in ["canary-eu-west", "prod-eu-west", "prod-us-east"] {
        assert!(sim.machine.adopt(cluster, &old, String::new()));
    }
    assert!(sim.machine.adopt("prod-ap-south", &next, String::new()));
    sim.step(&[]);
    assert!(
        !sim.machine.adopt("canary-eu-west", &next, String::new()),
        "only before its first reconcile"
    );
    // The first reconcile asserts what each cluster already runs: the old spec where it was
    // adopted on 1.8.3 (the simulated fleet starts empty, so it shows as a scale-up), never 1.9.0.
    let old_hash = crate::rollout::template_hash(&old);
    for (_, cluster, hash) in &sim.deployed {
        let expected = if cluster == "prod-ap-south" {
            sim.new_hash()
        } else {
            old_hash.clone()
        };
        assert_eq!(*hash, expected, "{cluster}");
    }
    sim.run_until(3_600_000);
    assert_eq!(sim.machine.state.phase, FleetPhase::Completed);
    for cluster in ["canary-eu-west", "prod-eu-west", "prod-us-east"] {
        let c = &sim.machine.state.clusters[cluster];
        assert!(c.reason.starts_with("validated"), "{cluster}: {}", c.reason);
        assert!(
            sim.got_new_version(cluster).is_some(),
            "{cluster} got 1.9.0 in its wave"
        );
    }
    assert_eq!(
        sim.machine.state.clusters["prod-ap-south"].reason,
        "already on this revision"
    );
    // Waves stayed ordered: wave 2's cluster got the new version after wave 1's was validated.
    assert!(
        sim.got_new_version("prod-eu-west").unwrap()
            > sim.machine.state.clusters["canary-eu-west"]
                .decided_at
                .unwrap()
    );
}

/// A template argument from `valueFrom.secretKeyRef` takes the value the runtime read into the
/// plan (redacted in the run's outputs); without it, the argument stays unresolved and the run
/// cannot start.
#[test]
fn secret_arguments_come_from_the_plan_and_are_redacted() {
    let mut secret_template = template(GUARDED);
    secret_template.spec.args.push(
        serde_json::from_value(json!({"name": "token", "valueFrom": {"secretKeyRef": {"name": "prom", "key": "token"}}}))
            .unwrap(),
    );
    secret_template.spec.metrics[0]
        .provider
        .prometheus
        .as_mut()
        .unwrap()
        .query = Some("up{token=\"{{args.token}}\"}".into());
    let mut plan =
        FleetPlan::resolve(&fleet(), &fleet_rollout(json!({})), &[secret_template]).unwrap();
    assert_eq!(
        plan.secret_refs().into_iter().collect::<Vec<_>>(),
        [("prom".to_owned(), "token".to_owned())]
    );
    let key = crate::rollout::RunKey {
        revision: 2,
        attempt: 0,
        slot: crate::rollout::AnalysisSlot::Background,
    };
    let next = rollout("payment-api:1.9.0");
    assert!(
        plan.run_plan(&next, "canary-eu-west", key).is_err(),
        "unresolved without it"
    );
    plan.secrets
        .insert(("prom".into(), "token".into()), "hunter2".into());
    let run = plan.run_plan(&next, "canary-eu-west", key).unwrap();
    assert_eq!(run.secrets, ["hunter2"]);
    let query = run.metrics[0]
        .provider
        .prometheus
        .as_ref()
        .unwrap()
        .query
        .clone();
    assert_eq!(query.as_deref(), Some("up{token=\"hunter2\"}"));
    assert_eq!(run.redact("token hunter2"), "token *****");
}

/// Evidence at the moment of decision: the metrics provider goes down as the canary reaches the
/// end of its steps. The promotion to full weight is held (Paused, saying why) while no fresh
/// measurement exists, and happens once one arrives; the cluster is then validated.
#[test]
fn an_outage_across_the_end_of_a_canary_holds_its_promotion_until_evidence_returns() {
    let mut sim = Sim::new(fleet_rollout(json!({})), GUARDED, Truth::healthy());
    // Errors are retried every 10 s: a limit of 12 outlasts the outage, so only freshness can
    // hold the promotion.
    sim.machine
        .plan
        .templates
        .get_mut("error-rate")
        .unwrap()
        .metrics[0]
        .consecutive_error_limit = Some(crate::spec::IntOrString::Int(12));
    // Into the last step (the final pause) of canary-eu-west's canary.
    loop {
        let engine = &sim.machine.state.clusters["canary-eu-west"].rollout;
        if engine.current != engine.stable && engine.step_index.unwrap_or(0) >= 3 {
            break;
        }
        sim.now += 5_000;
        sim.step(&[]);
    }
    sim.truth.outage.insert("canary-eu-west");
    let outage_started = sim.now;
    let mut held = false;
    while sim.now < outage_started + 100_000 {
        sim.now += 5_000;
        sim.step(&[]);
        let c = &sim.machine.state.clusters["canary-eu-west"];
        assert!(
            !sim.stable_is_new("canary-eu-west"),
            "promoted during the outage"
        );
        if c.status == ClusterStatus::Paused {
            assert!(c.reason.starts_with("waiting for evidence"), "{}", c.reason);
            held = true;
        }
    }
    assert!(
        held,
        "never held: {:?}",
        sim.machine.state.clusters["canary-eu-west"].rollout
    );
    sim.truth.outage.clear();
    sim.run_until(sim.now + 3_600_000);
    let c = &sim.machine.state.clusters["canary-eu-west"];
    assert!(c.reason.starts_with("validated"), "{}", c.reason);
    assert_eq!(sim.machine.state.phase, FleetPhase::Completed);
}

fn pinned_to(image: &str) -> ClusterOverlay {
    ClusterOverlay {
        image: Some(image.into()),
        ..ClusterOverlay::default()
    }
}

/// Runs the sim `ms` longer, whatever the phase.
fn run_for(sim: &mut Sim, ms: i64) {
    let until = sim.now + ms;
    while sim.now < until {
        sim.now += 5_000;
        sim.step(&[]);
    }
}

#[test]
fn a_cluster_pinned_by_its_overlay_stays_on_its_version_while_the_fleet_moves_on() {
    let mut sim = Sim::new(fleet_rollout(json!({})), GUARDED, Truth::healthy());
    sim.machine
        .set_overlays([("prod-ap-south".to_owned(), pinned_to("payment-api:1.8.3"))].into());
    sim.run_until(3_600_000);
    assert_eq!(sim.machine.state.phase, FleetPhase::Completed);
    assert_eq!(sim.status("prod-ap-south"), ClusterStatus::Pinned);
    assert!(
        sim.machine.state.clusters["prod-ap-south"]
            .reason
            .contains("payment-api:1.8.3"),
        "{}",
        sim.machine.state.clusters["prod-ap-south"].reason
    );
    assert_eq!(sim.got_new_version("prod-ap-south"), None);
    for cluster in ["canary-eu-west", "prod-eu-west", "prod-us-east"] {
        assert!(sim.stable_is_new(cluster), "{cluster}");
    }
    // Lifting the overlay returns the cluster to the fleet: a completed fleet has no wave to
    // start it in, so it waits for the next revision (NotStarted), never silently deployed.
    sim.machine.set_overlays(BTreeMap::new());
    run_for(&mut sim, 60_000);
    assert_eq!(sim.status("prod-ap-south"), ClusterStatus::NotStarted);
    assert_eq!(sim.got_new_version("prod-ap-south"), None);
}

#[test]
fn an_overlay_with_env_gives_the_cluster_its_own_spec_through_the_waves() {
    let mut sim = Sim::new(fleet_rollout(json!({})), GUARDED, Truth::healthy());
    let overlay = ClusterOverlay {
        env: [("REGION_DB".to_owned(), "us-east-1".to_owned())].into(),
        ..ClusterOverlay::default()
    };
    let own_next = crate::rollout::template_hash(&overlay.apply(&sim.next, None));
    sim.machine
        .set_overlays([("prod-us-east".to_owned(), overlay)].into());
    sim.run_until(3_600_000);
    assert_eq!(sim.machine.state.phase, FleetPhase::Completed);
    assert_eq!(sim.status("prod-us-east"), ClusterStatus::Validated);
    assert!(
        sim.deployed
            .iter()
            .any(|(_, c, h)| c == "prod-us-east" && *h == own_next),
        "prod-us-east ran its overlaid spec"
    );
    assert_eq!(
        sim.got_new_version("prod-us-east"),
        None,
        "never the plain spec"
    );
    assert!(sim.got_new_version("prod-eu-west").is_some());
}

#[test]
fn a_pin_keeps_the_failed_cluster_off_the_rejected_revision_until_a_fix_forward() {
    let truth = Truth {
        regressed: ["prod-us-east"].into(),
        ..Truth::healthy()
    };
    let mut sim = Sim::new(fleet_rollout(json!({})), GUARDED, truth);
    sim.run_until(3_600_000);
    assert_eq!(sim.machine.state.phase, FleetPhase::Halted);
    let rejected = sim.machine.state.revision.clone();
    let pin = ClusterOverlay {
        pin: Some(Pin {
            rejects: rejected.clone(),
            image: "payment-api:1.8.3".into(),
        }),
        ..ClusterOverlay::default()
    };
    sim.machine
        .set_overlays([("prod-us-east".to_owned(), pin)].into());
    let deployed_before = sim.deployed.len();
    run_for(&mut sim, 120_000);
    assert_eq!(sim.status("prod-us-east"), ClusterStatus::RolledBack);
    assert!(!sim.stable_is_new("prod-us-east"));
    // A retry would start it again; the pin keeps it on 1.8.3 instead.
    sim.step(&[FleetCommand::Retry]);
    run_for(&mut sim, 600_000);
    assert_eq!(sim.status("prod-us-east"), ClusterStatus::Pinned);
    sim.assert_nothing_deployed_since(deployed_before, "prod-us-east");
    // Fix forward: 1.9.1 is another revision, so the pin lapses and it goes through the waves.
    sim.truth.regressed.clear();
    let old_previous = sim.previous.clone();
    let old_next = sim.next.clone();
    sim.previous = old_next.clone();
    sim.next = rollout("payment-api:1.9.1");
    let revisions = Revisions {
        previous: &sim.previous,
        next: &sim.next,
    };
    sim.machine.supersede(
        &Revisions {
            previous: &old_previous,
            next: &old_next,
        },
        &revisions,
    );
    sim.run_until(sim.now + 3_600_000);
    assert_eq!(
        sim.machine.state.phase,
        FleetPhase::Completed,
        "{} {:#?}",
        sim.machine.state.message,
        sim.machine
            .state
            .clusters
            .iter()
            .map(|(n, c)| (n, c.status, &c.reason, c.rollout.phase, &c.rollout.message))
            .collect::<Vec<_>>()
    );
    assert!(sim.stable_is_new("prod-us-east"), "the pin lapsed");
    assert_eq!(sim.status("prod-us-east"), ClusterStatus::Validated);
}

/// A pin holds the failed cluster on what it ran before the rejected revision, not on the
/// rejected revision's template with the old image: a release that changed more than the image
/// (here an environment variable) deploys none of it to the pinned cluster.
#[test]
fn a_pinned_cluster_keeps_its_previous_spec_not_the_rejected_one_with_the_old_image() {
    let truth = Truth {
        regressed: ["prod-us-east"].into(),
        ..Truth::healthy()
    };
    let mut next = serde_json::to_value(rollout("payment-api:1.9.0")).unwrap();
    next["spec"]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "FEATURE_N_PLUS_ONE", "value": "on"}]);
    let specs = (
        rollout("payment-api:1.8.3"),
        serde_json::from_value(next).unwrap(),
    );
    let mut sim = Sim::with_specs(&fleet(), fleet_rollout(json!({})), GUARDED, truth, specs);
    sim.run_until(3_600_000);
    assert_eq!(sim.machine.state.phase, FleetPhase::Halted);
    let pin = ClusterOverlay {
        pin: Some(Pin {
            rejects: sim.machine.state.revision.clone(),
            image: "payment-api:1.8.3".into(),
        }),
        ..ClusterOverlay::default()
    };
    sim.machine
        .set_overlays([("prod-us-east".to_owned(), pin)].into());
    let deployed_before = sim.deployed.len();
    sim.step(&[FleetCommand::Retry]);
    run_for(&mut sim, 600_000);
    assert_eq!(sim.status("prod-us-east"), ClusterStatus::Pinned);
    sim.assert_nothing_deployed_since(deployed_before, "prod-us-east");
}

#[test]
fn held_clusters_of_a_halted_fleet_stay_off_the_bad_revision_across_a_restart() {
    let truth = Truth {
        regressed: ["canary-eu-west"].into(),
        ..Truth::healthy()
    };
    let mut a = Sim::new(fleet_rollout(json!({})), GUARDED, truth);
    a.run_until(3_600_000);
    assert_eq!(a.machine.state.phase, FleetPhase::Halted);
    for cluster in ["prod-eu-west", "prod-us-east", "prod-ap-south"] {
        assert_eq!(a.status(cluster), ClusterStatus::Held, "{cluster}");
    }
    // The process restarts from the stored state.
    let saved = serde_json::to_string(&a.machine.state).unwrap();
    a.machine = FleetMachine::new(
        a.machine.plan.clone(),
        &Revisions {
            previous: &a.previous,
            next: &a.next,
        },
        Some(serde_json::from_str(&saved).unwrap()),
    );
    // Even a cluster whose replicas were lost (drifted) is only ever given the previous spec.
    a.replicas.remove("prod-us-east");
    run_for(&mut a, 600_000);
    for cluster in ["prod-eu-west", "prod-us-east", "prod-ap-south"] {
        assert_eq!(a.status(cluster), ClusterStatus::Held, "{cluster}");
        assert_eq!(a.got_new_version(cluster), None, "{cluster}");
        let spec = a
            .machine
            .cluster_spec(
                cluster,
                &Revisions {
                    previous: &a.previous,
                    next: &a.next,
                },
            )
            .unwrap();
        assert_eq!(
            crate::rollout::template_hash(&spec),
            crate::rollout::template_hash(&a.previous)
        );
    }
}

/// The fleet's spec history is bounded by the Rollout's `revisionHistoryLimit` (default 10)
/// over any number of releases, oldest dropped first; `undo` reaches what is kept. (A spec a
/// cluster runs as its baseline is kept too: `FleetSpecs::trim`'s test.)
#[test]
fn the_spec_history_keeps_revision_history_limit_specs() {
    let (mut machine, mut specs) = durable_machine();
    for minor in 10..40 {
        assert!(machine.change_spec(&mut specs, rollout(&format!("payment-api:1.{minor}.0"))));
    }
    let images: Vec<&str> = specs
        .history
        .iter()
        .map(|s| s.first_image().unwrap())
        .collect();
    assert_eq!(specs.history.len(), 10, "{images:?}");
    assert_eq!(
        images[0], "payment-api:1.28.0",
        "the newest ten: {images:?}"
    );
    assert_eq!(images[9], "payment-api:1.37.0");
    assert_eq!(specs.previous.first_image(), Some("payment-api:1.38.0"));
    assert_eq!(
        specs.undo_target(Some(2)).unwrap().first_image(),
        Some("payment-api:1.29.0")
    );
    // A smaller limit in the desired Rollout applies at the next release.
    let mut limited = rollout("payment-api:2.0.0");
    limited.spec.revision_history_limit = Some(2);
    assert!(machine.change_spec(&mut specs, limited));
    let images: Vec<&str> = specs
        .history
        .iter()
        .map(|s| s.first_image().unwrap())
        .collect();
    assert_eq!(images, ["payment-api:1.37.0", "payment-api:1.38.0"]);
}

/// A machine on 1.9.0 superseding 1.8.3, for the durable-change tests (states set by hand).
fn durable_machine() -> (FleetMachine, FleetSpecs) {
    let plan =
        FleetPlan::resolve(&fleet(), &fleet_rollout(json!({})), &[template(GUARDED)]).unwrap();
    let mut specs = FleetSpecs::new(rollout("payment-api:1.8.3"));
    let mut machine = FleetMachine::new(plan, &specs.revisions(), None);
    assert!(machine.change_spec(&mut specs, rollout("payment-api:1.9.0")));
    (machine, specs)
}

fn fail(machine: &mut FleetMachine, name: &str) {
    let revision = machine.state.revision.clone();
    machine.state.phase = FleetPhase::Halted;
    machine.state.clusters.get_mut(name).unwrap().status = ClusterStatus::RolledBack;
    machine.state.rejections.insert((name.to_owned(), revision));
}

fn pinned(change: Option<DurableChange>) -> Vec<String> {
    match change {
        Some(c) if c.edit == DurableEdit::Pin => c.failed.into_iter().map(|f| f.name).collect(),
        other => panic!("expected a pin, got {other:?}"),
    }
}

/// No cluster validated and the fleet halted: a revert, once. Some validated: a pin of exactly
/// the failed clusters; a cluster that fails after the first pin was committed (a retry, then
/// a failure elsewhere) gets a pin of its own, the pinned ones are not pinned again.
#[test]
fn the_durable_change_is_a_revert_or_a_pin_of_exactly_the_failed_clusters() {
    let (mut machine, specs) = durable_machine();
    let none = BTreeSet::new();
    assert_eq!(
        machine.durable_change(&specs, None, &none),
        None,
        "in flight"
    );
    fail(&mut machine, "canary-eu-west");
    let revert = machine.durable_change(&specs, None, &none).unwrap();
    assert_eq!(revert.edit, DurableEdit::Revert);
    assert_eq!(
        (revert.bad_image.as_str(), revert.good_image.as_str()),
        ("payment-api:1.9.0", "payment-api:1.8.3")
    );
    let revision = machine.state.revision.clone();
    assert_eq!(
        machine.durable_change(&specs, Some(&revision), &none),
        None,
        "never twice"
    );

    let (mut machine, specs) = durable_machine();
    let revision = machine.state.revision.clone();
    for name in ["canary-eu-west", "prod-eu-west"] {
        machine.state.clusters.get_mut(name).unwrap().status = ClusterStatus::Validated;
    }
    fail(&mut machine, "prod-us-east");
    let change = machine.durable_change(&specs, None, &none);
    assert_eq!(
        change.as_ref().unwrap().failed[0].image,
        "payment-api:1.8.3",
        "a failed cluster stays on its previous image"
    );
    assert_eq!(pinned(change.clone()), ["prod-us-east"]);
    machine.record_durable(&change.unwrap());
    let mut committed = BTreeSet::from(["prod-us-east".to_owned()]);
    assert_eq!(
        machine.durable_change(&specs, Some(&revision), &committed),
        None
    );
    fail(&mut machine, "prod-ap-south");
    assert_eq!(
        pinned(machine.durable_change(&specs, Some(&revision), &committed)),
        ["prod-ap-south"]
    );
    committed.insert("prod-ap-south".into());
    assert_eq!(
        machine.durable_change(&specs, Some(&revision), &committed),
        None
    );
    let events = machine.flush_events(0);
    assert!(
        events
            .iter()
            .any(|e| matches!(e.decision, Decision::DurableChange { .. })),
        "{events:#?}"
    );
}

/// An outage is no verdict: a cluster aborted on an analysis error (no rejection) is never
/// reverted or pinned in Git, alone or beside a cluster that failed.
#[test]
fn a_cluster_aborted_on_an_error_needs_no_durable_change() {
    let (mut machine, specs) = durable_machine();
    let none = BTreeSet::new();
    machine
        .state
        .clusters
        .get_mut("canary-eu-west")
        .unwrap()
        .status = ClusterStatus::Validated;
    let errored = machine.state.clusters.get_mut("prod-eu-west").unwrap();
    errored.status = ClusterStatus::RolledBack;
    errored.aborted_on_error = true;
    for phase in [
        FleetPhase::Progressing,
        FleetPhase::Halted,
        FleetPhase::Completed,
    ] {
        machine.state.phase = phase;
        assert_eq!(
            machine.durable_change(&specs, None, &none),
            None,
            "{phase:?}"
        );
    }
    fail(&mut machine, "prod-us-east");
    assert_eq!(
        pinned(machine.durable_change(&specs, None, &none)),
        ["prod-us-east"]
    );
}

/// Commands that cannot apply are refused, saying why, and change nothing; the others are
/// accepted events, in order.
#[test]
fn commands_are_accepted_or_refused_with_why() {
    let mut sim = Sim::new(fleet_rollout(json!({})), GUARDED, Truth::healthy());
    let before = sim.machine.state.clone();
    let refused = [
        FleetCommand::Resume,
        FleetCommand::Retry,
        FleetCommand::Abort {
            cluster: Some("nowhere".into()),
        },
        FleetCommand::Promote {
            wave: Some(9),
            full: false,
            cluster: None,
        },
    ];
    let output = sim.machine.tick(
        &Revisions {
            previous: &sim.previous,
            next: &sim.next,
        },
        &sim.observations(),
        Vec::new(),
        &refused,
        0,
    );
    let verdicts: Vec<&Decision> = output
        .events
        .iter()
        .map(|e| &e.decision)
        .filter(|d| {
            matches!(
                d,
                Decision::CommandAccepted { .. } | Decision::CommandRefused { .. }
            )
        })
        .collect();
    assert_eq!(verdicts.len(), refused.len(), "{verdicts:#?}");
    for (decision, command) in verdicts.iter().zip(&refused) {
        match decision {
            Decision::CommandRefused { command: c, why } => {
                assert_eq!(c, command);
                assert!(!why.is_empty());
            }
            other => panic!("{command:?} should be refused: {other:?}"),
        }
    }
    assert_eq!(sim.machine.state.rejections, before.rejections);
    assert!(!sim.machine.state.paused);
    let output = sim.machine.tick(
        &Revisions {
            previous: &sim.previous,
            next: &sim.next,
        },
        &sim.observations(),
        Vec::new(),
        &[FleetCommand::Pause, FleetCommand::Pause],
        1_000,
    );
    let names: Vec<&str> = output.events.iter().map(|e| e.decision.name()).collect();
    assert!(names.contains(&"commandAccepted"), "{names:?}");
    assert!(names.contains(&"commandRefused"), "{names:?}");
    // Ids are numbered on from the state: stable across a restore.
    let ids: Vec<&str> = output.events.iter().map(|e| e.id.as_str()).collect();
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!(ids, unique);
}

/// The first reconcile of a fleet puts nothing on any canary: it decides no weight (at 10,000
/// clusters that was 10,000 audit entries saying "canary weight 0"); a canary's weights are.
#[test]
fn a_first_reconcile_decides_no_weight() {
    let mut sim = Sim::new(fleet_rollout(json!({})), GUARDED, Truth::healthy());
    assert!(
        !sim.events
            .iter()
            .any(|e| matches!(e.decision, Decision::WeightSet { .. })),
        "{:#?}",
        sim.events
    );
    let mut weights = Vec::new();
    while sim.now < 600_000 {
        sim.now += 5_000;
        sim.step(&[]);
        weights.extend(sim.events.iter().filter_map(|e| match e.decision {
            Decision::StepReached { weight, .. } | Decision::WeightSet { weight } => Some(weight),
            _ => None,
        }));
    }
    assert!(
        weights.contains(&20),
        "the canary's weights are decided: {weights:?}"
    );
}

/// An operator's abort that arrives as its cluster starts, before the engine has made the new
/// revision (it has nothing to abort yet), is not lost: it waits for the revision and the
/// cluster rolls back. Found by the dashboard's browser test, where the abort was accepted and
/// the canary went on.
#[test]
fn an_abort_as_a_cluster_starts_waits_for_the_new_revision() {
    let mut sim = Sim::new(fleet_rollout(json!({})), GUARDED, Truth::healthy());
    let first = CLUSTERS[0];
    while sim.status(first) != ClusterStatus::Progressing {
        assert!(sim.now < 60_000, "{first} never started");
        sim.now += 1_000;
        sim.step(&[]);
    }
    let engine = &sim.machine.state.clusters[first].rollout;
    assert_eq!(
        engine.current, engine.stable,
        "the engine has not made the new revision yet"
    );
    sim.now += 1_000;
    sim.step(&[FleetCommand::Abort {
        cluster: Some(first.into()),
    }]);
    assert!(
        sim.events
            .iter()
            .any(|e| matches!(e.decision, Decision::CommandAccepted { .. })),
        "{:#?}",
        sim.events
    );
    while sim.status(first) != ClusterStatus::RolledBack {
        assert!(
            sim.now < 120_000,
            "{first} went on after its abort: {:?}",
            sim.machine.state.clusters[first]
        );
        sim.now += 1_000;
        sim.step(&[]);
    }
    assert!(sim.machine.state.clusters[first].rollout.abort);
}

/// A healthy fleet `offset` seconds after `cluster` started its update (1 s ticks).
fn in_flight_for(cluster: &str, offset: usize) -> Sim {
    let mut sim = Sim::new(fleet_rollout(json!({})), GUARDED, Truth::healthy());
    while sim.status(cluster) != ClusterStatus::Progressing {
        sim.now += 1_000;
        sim.step(&[]);
    }
    for _ in 0..offset {
        sim.now += 1_000;
        sim.step(&[]);
    }
    sim
}

/// Whatever moment an operator picks while a cluster is in flight, an accepted abort rolls it
/// back and an accepted pause holds it: swept over every second of the first cluster's update,
/// from the tick it starts (before its engine made the revision) to its decision.
#[test]
fn an_accepted_abort_or_pause_takes_effect_at_any_moment_of_an_update() {
    let first = CLUSTERS[0];
    let mut offsets_tried = 0;
    for offset in 0..120 {
        for pause in [false, true] {
            let mut sim = in_flight_for(first, offset);
            if !matches!(
                sim.status(first),
                ClusterStatus::Progressing | ClusterStatus::Paused
            ) {
                continue;
            }
            offsets_tried += 1;
            let command = if pause {
                FleetCommand::PauseCluster {
                    cluster: first.into(),
                }
            } else {
                FleetCommand::Abort {
                    cluster: Some(first.into()),
                }
            };
            sim.now += 1_000;
            sim.step(std::slice::from_ref(&command));
            let accepted = sim
                .events
                .iter()
                .any(|e| matches!(e.decision, Decision::CommandAccepted { .. }));
            if !accepted {
                // Refused (e.g. paused already): nothing was promised.
                continue;
            }
            for _ in 0..60 {
                sim.now += 1_000;
                sim.step(&[]);
            }
            let cluster = &sim.machine.state.clusters[first];
            if pause {
                assert!(
                    cluster.rollout.paused && cluster.status != ClusterStatus::Validated,
                    "offset {offset}: a pause accepted did not hold {first}: {:?} {:?}",
                    cluster.status,
                    cluster.rollout.phase
                );
            } else {
                assert_eq!(
                    cluster.status,
                    ClusterStatus::RolledBack,
                    "offset {offset}: an abort accepted did not roll {first} back"
                );
            }
        }
    }
    assert!(offsets_tried > 20, "{offsets_tried}");
}

/// An accepted full promotion of one cluster takes its canary past every remaining step within
/// a few ticks, whatever moment the operator picks while it is in flight (swept as above).
#[test]
fn an_accepted_full_promotion_takes_effect_at_any_moment_of_an_update() {
    let first = CLUSTERS[0];
    let mut tried = 0;
    for offset in 0..120 {
        let mut sim = in_flight_for(first, offset);
        let steps = sim.next.canary().map_or(0, |c| c.steps.len()) as u32;
        let cluster = &sim.machine.state.clusters[first];
        if cluster.status != ClusterStatus::Progressing
            || cluster.rollout.step_index.unwrap_or(0) >= steps
        {
            continue;
        }
        sim.now += 1_000;
        sim.step(&[FleetCommand::Promote {
            wave: None,
            full: true,
            cluster: Some(first.into()),
        }]);
        if !sim
            .events
            .iter()
            .any(|e| matches!(e.decision, Decision::CommandAccepted { .. }))
        {
            continue;
        }
        tried += 1;
        for _ in 0..3 {
            sim.now += 1_000;
            sim.step(&[]);
        }
        let cluster = &sim.machine.state.clusters[first];
        assert!(
            cluster.rollout.step_index.unwrap_or(0) >= steps
                || cluster.status == ClusterStatus::Validated,
            "offset {offset}: a full promotion accepted left {first} at step {:?} of {steps} ({:?})",
            cluster.rollout.step_index,
            cluster.status
        );
    }
    assert!(tried > 10, "{tried}");
}
