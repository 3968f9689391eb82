//! Scenario timelines: revisions superseding one another, operator commands, clusters joining
//! and leaving, relative fault windows and per-subset traffic, with the supersede invariants
//! checked at every tick.

use std::collections::{BTreeMap, BTreeSet};

use super::test_support::{HEALTHY, by_name, inputs, with_events};
use super::*;
use crate::fleet::{ClusterStatus, FleetPhase};
use crate::rollout::Action;
const SUPERSEDED: &str = include_str!("../../../../examples/simulate/superseded-release.yaml");
const ABORT: &str = include_str!("../../../../examples/simulate/operator-abort.yaml");
const NO_TRAFFIC: &str = include_str!("../../../../examples/simulate/no-canary-traffic.yaml");

/// The healthy scenario with these events (YAML list items, indented for `spec.events`).
fn healthy_with(events: &str) -> String {
    with_events(HEALTHY, events)
}

/// Checks the supersede rule at every tick, from the actions the machine decided:
/// - no cluster runs canaries of two revisions at once (at most one revision with replicas
///   besides its stable);
/// - a cluster never receives a superseded revision it had not started before the supersede;
/// - a new revision starts at wave 1: a cluster of wave k > 1 starts it only once wave k − 1
///   completed on it.
#[derive(Default)]
struct SupersedeInvariants {
    /// Per cluster: replicas by revision, the revision's hash, and the stable revision.
    replicas: BTreeMap<String, BTreeMap<u32, (String, i32)>>,
    stable: BTreeMap<String, u32>,
    /// Clusters that have run each hash.
    started: BTreeMap<String, BTreeSet<String>>,
    /// Superseded hashes, with the clusters that had started them when superseded.
    superseded: Vec<(String, BTreeSet<String>)>,
    /// The revision in flight.
    current: Option<String>,
    /// Images by hash.
    images: BTreeMap<String, String>,
    violations: Vec<String>,
}

impl SupersedeInvariants {
    fn observe(&mut self, view: &TickView<'_>) {
        if self.images.len() != view.images.len() {
            self.images = view.images.clone();
        }
        if self.current.as_deref() != Some(view.revision_hash) {
            if let Some(old) = self.current.take() {
                let had = self.started.get(&old).cloned().unwrap_or_default();
                self.superseded.push((old, had));
            }
            self.current = Some(view.revision_hash.to_owned());
        }
        for (cluster, action) in view.actions {
            match action {
                Action::Scale {
                    revision,
                    hash,
                    replicas,
                } => {
                    if *replicas > 0 {
                        for (old, had) in &self.superseded {
                            if old == hash && hash != view.revision_hash && !had.contains(cluster) {
                                self.violations.push(format!(
                                    "{} s: {cluster} receives superseded {} it had not started",
                                    view.now / 1000,
                                    view.images.get(hash).map_or("?", String::as_str)
                                ));
                            }
                        }
                        let stable_hash = self
                            .stable
                            .get(cluster)
                            .and_then(|s| self.replicas.get(cluster).and_then(|r| r.get(s)))
                            .map(|(h, _)| h.clone());
                        let first = !self.started.get(hash).is_some_and(|c| c.contains(cluster));
                        if hash == view.revision_hash
                            && first
                            && stable_hash.as_deref() != Some(hash.as_str())
                            && let Some(wave) = view.plan.wave_of(cluster)
                            && wave > 0
                            && view.state.wave_completed_at[wave - 1].is_none()
                        {
                            self.violations.push(format!(
                                "{} s: {cluster} (wave {}) starts the new revision before wave {} completed",
                                view.now / 1000,
                                wave + 1,
                                wave
                            ));
                        }
                        self.started
                            .entry(hash.clone())
                            .or_default()
                            .insert(cluster.clone());
                    }
                    self.replicas
                        .entry(cluster.clone())
                        .or_default()
                        .insert(*revision, (hash.clone(), *replicas));
                }
                Action::MarkStable { revision } => {
                    self.stable.insert(cluster.clone(), *revision);
                }
                _ => {}
            }
        }
        for (cluster, revisions) in &self.replicas {
            let stable = self.stable.get(cluster);
            let canaries: BTreeSet<&str> = revisions
                .iter()
                .filter(|(r, (_, n))| *n > 0 && Some(*r) != stable)
                .map(|(_, (h, _))| h.as_str())
                .collect();
            if canaries.len() > 1 {
                self.violations.push(format!(
                    "{} s: {cluster} runs canaries of {} revisions at once",
                    view.now / 1000,
                    canaries.len()
                ));
            }
        }
    }
}

fn checked(inputs: &Inputs, seed: u64) -> (Report, SupersedeInvariants) {
    let mut check = SupersedeInvariants::default();
    let report = run_with(inputs, seed, |view| check.observe(view)).unwrap();
    (report, check)
}

#[test]
fn a_release_superseded_during_wave_2_starts_again_from_wave_1() {
    let inputs = inputs(SUPERSEDED);
    let (report, check) = checked(&inputs, 1);
    assert!(check.violations.is_empty(), "{:?}", check.violations);
    assert_eq!(report.outcome, "Completed", "{report:#?}");
    assert_eq!(report.events.len(), 1);
    assert!(
        report.events[0].message.contains("supersedes"),
        "{:?}",
        report.events
    );
    for cluster in &report.clusters {
        assert_eq!(cluster.outcome, "Promoted", "{cluster:?}");
        assert_eq!(cluster.image.as_deref(), Some("payment-api:1.9.1"));
    }
    // 1.9.1 starts from wave 1 at the supersede, and the waves stay ordered.
    assert_eq!(report.waves[0].started_at, Some(720.0));
    for pair in report.waves.windows(2) {
        assert!(pair[1].started_at.unwrap() >= pair[0].completed_at.unwrap());
    }
    // 1.9.0 reached wave 1 and 2 only: wave 3 never ran it.
    let (old, had) = &check.superseded[0];
    assert_eq!(check.images[old], "payment-api:1.9.0");
    assert_eq!(
        had.iter().map(String::as_str).collect::<Vec<_>>(),
        ["canary-eu-west", "prod-eu-west"]
    );
}

#[test]
fn the_supersede_rule_holds_wherever_a_new_revision_lands() {
    // Revisions landing at every phase of the rollout (before wave 1 completes, in each wave,
    // after completion), once or twice, over several seeds.
    let (mut runs, mut completed) = (0, 0);
    for seed in 1..=4 {
        for first in [0, 130, 300, 430, 560, 700, 980, 1150, 1400, 1700] {
            for second in [None, Some(first + 250), Some(first + 610)] {
                let mut events =
                    format!("    - {{at: {first}s, revision: {{image: \"payment-api:1.9.1\"}}}}\n");
                if let Some(second) = second {
                    events.push_str(&format!(
                        "    - {{at: {second}s, revision: {{image: \"payment-api:1.9.2\"}}}}\n"
                    ));
                }
                let inputs = inputs(&healthy_with(&events));
                let (report, check) = checked(&inputs, seed);
                runs += 1;
                assert!(
                    check.violations.is_empty(),
                    "seed {seed}, events {events}: {:?}",
                    check.violations
                );
                let last = if second.is_some() {
                    "payment-api:1.9.2"
                } else {
                    "payment-api:1.9.1"
                };
                // Healthy everywhere, but the canary cluster's thin canary traffic (2 request/s
                // at 10%) makes a false rollback on its fixed 1% error threshold possible.
                if report.outcome == "Completed" {
                    completed += 1;
                    assert!(
                        report
                            .clusters
                            .iter()
                            .all(|c| c.image.as_deref() == Some(last)),
                        "seed {seed}, {events}: {:?}",
                        report.clusters
                    );
                } else {
                    assert_eq!(report.outcome, "Halted", "seed {seed}, {events}");
                    assert!(report.clusters.iter().any(|c| c.failure.is_some()));
                }
            }
        }
    }
    assert_eq!(runs, 120);
    assert!(completed >= 108, "{completed} of {runs} completed");
}

#[test]
fn an_operator_abort_rolls_one_cluster_back_and_retry_completes_it() {
    let inputs = inputs(ABORT);
    let mut during = Vec::new();
    let report = run_with(&inputs, 1, |view| {
        if view.now == 1_500_000 {
            let c = &view.state.clusters["prod-us-east"];
            during.push((
                view.state.phase,
                c.status,
                view.state.clusters["prod-ap-south"].status,
            ));
        }
    })
    .unwrap();
    // Between the abort and the retry: prod-us-east rolled back, the fleet halted, its
    // wave-mate paused where it stood.
    assert_eq!(
        during,
        [(
            FleetPhase::Halted,
            ClusterStatus::RolledBack,
            ClusterStatus::Paused
        )]
    );
    assert_eq!(report.outcome, "Completed", "{report:#?}");
    let clusters = by_name(&report);
    assert!(clusters.values().all(|c| c.outcome == "Promoted"));
    // Started again by the retry, at 30m.
    assert_eq!(clusters["prod-us-east"].started_at, Some(1800.0));
    assert_eq!(report.events[0].message, "abort prod-us-east");
    assert_eq!(report.events[1].message, "retry");
}

#[test]
fn a_canary_that_receives_no_traffic_is_never_validated() {
    let inputs = inputs(NO_TRAFFIC);
    let mut validated_in_wave_2 = false;
    let report = run_with(&inputs, 1, |view| {
        validated_in_wave_2 |=
            view.state.clusters["prod-eu-west"].status == ClusterStatus::Validated;
    })
    .unwrap();
    assert!(!validated_in_wave_2);
    let clusters = by_name(&report);
    let eu = clusters["prod-eu-west"];
    assert_eq!(eu.new_requests, 0, "the canary served nothing");
    assert_eq!(eu.outcome, "RolledBack", "{eu:?}");
    assert!(eu.reason.contains("without rejection"), "{}", eu.reason);
    assert!(eu.failure.is_some());
    assert_eq!(clusters["prod-us-east"].outcome, "NotStarted");
    assert_eq!(clusters["prod-ap-south"].outcome, "NotStarted");
    assert_eq!(report.waves[2].started_at, None);
    assert_eq!(report.outcome, "Incomplete");
}

#[test]
fn a_canary_served_by_its_own_rate_is_judged_on_it() {
    // Only 1 request/s reaches prod-eu-west's canary, whatever its weight: enough for its
    // metrics' 50 requests per 2-minute window, so every measurement after the first window
    // has evidence and the cluster is decided (promoted, or rolled back on a thin-traffic
    // false alarm of the fixed 1% threshold), never left waiting for evidence. With
    // `trafficShare: 0` nothing reaches it and it is never validated.
    let text = HEALTHY.replace(
        "      canary: {errorRate: 0.002, latency: {p50: 0.055, p95: 0.13}}\n    - name: prod-us-east",
        "      canary: {errorRate: 0.002, latency: {p50: 0.055, p95: 0.13}, requestsPerSecond: 1}\n    - name: prod-us-east",
    );
    assert_ne!(text, HEALTHY);
    let inputs = inputs(&text);
    let mut promoted = 0;
    for seed in 1..=6 {
        let mut values = Vec::new();
        let report = run_with(&inputs, seed, |view| {
            let cluster = &view.state.clusters["prod-eu-west"];
            for run in cluster.runs.values() {
                for metric in run.metrics.iter().filter(|m| m.name == "latency-p95") {
                    if let Some(m) = metric.measurements.back()
                        && let Some(at) = m.finished_at
                        && cluster.started_at.is_some_and(|s| at >= s + 150_000)
                    {
                        values.push((at, m.evidence));
                    }
                }
            }
        })
        .unwrap();
        let eu = by_name(&report)["prod-eu-west"];
        assert!(
            matches!(eu.outcome.as_str(), "Promoted" | "RolledBack"),
            "seed {seed}: {eu:?}"
        );
        if eu.outcome == "RolledBack" {
            assert_eq!(eu.failure.as_ref().unwrap().metric, "error-rate");
        } else {
            promoted += 1;
        }
        assert!(
            !values.is_empty() && values.iter().all(|(_, evidence)| *evidence),
            "seed {seed}: {values:?}"
        );
    }
    assert!(promoted >= 4, "{promoted} of 6 promoted");
}

#[test]
fn clusters_join_and_leave_mid_rollout() {
    // prod-ap-south joins at 5m (before its wave); prod-us-east leaves mid-canary at 20m.
    let text =
        healthy_with("    - {at: 5m, join: prod-ap-south}\n    - {at: 20m, leave: prod-us-east}\n");
    let mut present_at_start = None;
    let report = run_with(&inputs(&text), 1, |view| {
        if view.now == 0 {
            present_at_start = Some(view.state.clusters.keys().cloned().collect::<Vec<_>>());
        }
    })
    .unwrap();
    assert_eq!(
        present_at_start.unwrap(),
        ["canary-eu-west", "prod-eu-west", "prod-us-east"]
    );
    assert_eq!(report.outcome, "Completed", "{report:#?}");
    let clusters = by_name(&report);
    assert_eq!(clusters["prod-ap-south"].outcome, "Promoted");
    assert_eq!(clusters["prod-us-east"].outcome, "Left");
    assert!(clusters["prod-us-east"].reason.contains("Progressing"));
    assert_eq!(
        report
            .events
            .iter()
            .map(|e| e.kind.as_str())
            .collect::<Vec<_>>(),
        ["join", "leave"]
    );
    assert_eq!(report.waves.len(), 3);
    assert_eq!(report.waves[2].clusters, ["prod-ap-south"]);
}

#[test]
fn a_cluster_joining_a_passed_wave_takes_the_fleet_back_to_it() {
    // prod-eu-west (wave 2) is absent until 12m: without it the layout has two waves, and the
    // second (us-east, ap-south) starts at once after the canary cluster's. At 12m that wave is
    // in flight: the fleet goes back to wave 2 for prod-eu-west, the clusters of wave 3 go on,
    // and the fleet completes once prod-eu-west is validated.
    let text = healthy_with("    - {at: 12m, join: prod-eu-west}\n");
    let mut check = SupersedeInvariants::default();
    let report = run_with(&inputs(&text), 1, |view| check.observe(view)).unwrap();
    assert!(check.violations.is_empty(), "{:?}", check.violations);
    assert_eq!(report.outcome, "Completed", "{report:#?}");
    let clusters = by_name(&report);
    assert!(
        clusters.values().all(|c| c.outcome == "Promoted"),
        "{clusters:#?}"
    );
    let eu = clusters["prod-eu-west"];
    assert_eq!(eu.started_at, Some(720.0));
    assert!(clusters["prod-us-east"].started_at.unwrap() < 720.0);
    assert_eq!(eu.wave, 2);
    // The fleet completed only after it: wave 2 completes after its validation.
    assert!(report.waves[1].completed_at.unwrap() >= eu.decided_at.unwrap());
    assert!(report.waves[2].completed_at.unwrap() >= report.waves[1].completed_at.unwrap());
}

/// The times (ms) of prod-us-east's errored measurements in the window `[from, to)` after its
/// start, in a run of `text`, and the report.
fn errors_after_start(text: &str, from: i64, to: i64) -> (Vec<i64>, Report) {
    let mut errored: BTreeSet<i64> = BTreeSet::new();
    let mut start = None;
    let report = run_with(&inputs(text), 1, |view| {
        let cluster = &view.state.clusters["prod-us-east"];
        start = start.or(cluster.started_at);
        for run in cluster.runs.values() {
            for metric in &run.metrics {
                for m in &metric.measurements {
                    if m.phase == crate::spec::analysis::AnalysisPhase::Error
                        && m.message.contains("simulated outage")
                    {
                        errored.insert(m.finished_at.unwrap_or(m.started_at));
                    }
                }
            }
        }
    })
    .unwrap();
    let start = start.expect("prod-us-east started");
    let inside = errored
        .into_iter()
        .filter(|at| *at >= start + from && *at < start + to)
        .collect();
    (inside, report)
}

#[test]
fn fault_windows_relative_to_a_clusters_start_follow_it() {
    // prod-us-east's metrics go down 4 minutes into its own canary, for 30 s, wherever the
    // canary lands in time; or 4 minutes after its wave started.
    for anchor in ["afterClusterStart", "afterWaveStart"] {
        let text = HEALTHY.replace(
            "      canary: {errorRate: 0.002, latency: {p50: 0.21, p95: 0.47}}\n",
            &format!("      canary: {{errorRate: 0.002, latency: {{p50: 0.21, p95: 0.47}}}}\n      faults:\n        - {{kind: metricsOutage, from: {{{anchor}: 4m}}, for: 30s}}\n"),
        );
        assert_ne!(text, HEALTHY);
        let (all, report) = errors_after_start(&text, i64::MIN / 4, i64::MAX / 4);
        let (inside, _) = errors_after_start(&text, 240_000, 280_000);
        assert!(
            !inside.is_empty(),
            "{anchor}: the outage errored no measurement"
        );
        assert_eq!(all, inside, "{anchor}: outage errors outside the window");
        let us = by_name(&report)["prod-us-east"];
        assert_eq!(us.outcome, "Promoted", "{us:?}");
    }
    // Without the fault, nothing errors for an outage.
    let (none, _) = errors_after_start(HEALTHY, i64::MIN / 4, i64::MAX / 4);
    assert!(none.is_empty());
}

#[test]
fn a_timeline_run_is_byte_identical_for_a_seed() {
    let inputs = inputs(SUPERSEDED);
    let a = serde_json::to_string(&run(&inputs, 9).unwrap()).unwrap();
    let b = serde_json::to_string(&run(&inputs, 9).unwrap()).unwrap();
    assert_eq!(a, b);
    let c = serde_json::to_string(&run(&inputs, 10).unwrap()).unwrap();
    assert_ne!(a, c, "another seed draws other traffic");
}

#[test]
fn promote_full_of_one_cluster_skips_its_remaining_steps() {
    // At 2m canary-eu-west is at 10% in its first pause (3 minutes); `promote --full` of that
    // cluster alone takes it to full weight at once, and no other cluster moves.
    let text =
        healthy_with("    - {at: 2m, command: promote, cluster: canary-eu-west, full: true}\n");
    let report = run(&inputs(&text), 1).unwrap();
    let healthy = run(&inputs(HEALTHY), 1).unwrap();
    let decided = |r: &Report| by_name(r)["canary-eu-west"].decided_at.unwrap();
    assert!(
        decided(&report) < decided(&healthy) - 200.0,
        "promoted --full at 120 s, decided at {} s (healthy: {} s)",
        decided(&report),
        decided(&healthy)
    );
    assert_eq!(report.events[0].message, "promote canary-eu-west --full");
    assert!(by_name(&report)["prod-eu-west"].started_at.unwrap() > decided(&report));
}
