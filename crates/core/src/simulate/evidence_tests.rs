//! No cluster validated or promoted without current evidence; a provider outage is no verdict;
//! states that tell an operator what to do — on scenario timelines.

use std::collections::BTreeMap;

use super::test_support::{HEALTHY, by_name, inputs, with_events};
use super::*;
use crate::fleet::{ClusterStatus, FleetPhase, PausedFor};
use crate::rollout::Action;
use crate::spec::analysis::AnalysisPhase;

/// A fleet where false alarms are negligible: every cluster at 100 request/s with 0.05% errors
/// (a canary at 10% serves 1,200 requests per 2-minute window; its threshold is 1%).
fn quiet_fleet() -> String {
    let mut text = HEALTHY.to_owned();
    for (from, to) in [
        ("requestsPerSecond: 20", "requestsPerSecond: 100"),
        ("requestsPerSecond: 120", "requestsPerSecond: 100"),
        ("requestsPerSecond: 80", "requestsPerSecond: 100"),
    ] {
        text = text.replace(from, to);
    }
    text.replace("errorRate: 0.002", "errorRate: 0.0005")
}

/// `text` (a [`quiet_fleet`]) with these events (YAML list items) and these faults on
/// prod-us-east.
fn with(text: &str, events: &str, us_east_faults: &str) -> String {
    let mut text = with_events(text, events);
    if !us_east_faults.is_empty() {
        let anchor = "      canary: {errorRate: 0.0005, latency: {p50: 0.21, p95: 0.47}}\n";
        assert!(text.contains(anchor));
        text = text.replace(anchor, &format!("{anchor}      faults:\n{us_east_faults}"));
    }
    text
}

/// What a promotion checks, observed at every tick: whenever a cluster is promoted to full
/// weight (the new revision becomes its stable) or validated, each wet metric of its
/// background run has a measurement with evidence no older than the metrics' interval plus
/// its (builtin: no) provider timeout, i.e. 2 minutes; and a wave starts only once every
/// cluster of the waves before it is decided.
#[derive(Default)]
struct EvidenceCheck {
    violations: Vec<String>,
    /// Clusters and the times they were held waiting for evidence.
    held: BTreeMap<String, Vec<i64>>,
    started_waves: usize,
}

impl EvidenceCheck {
    fn observe(&mut self, view: &TickView<'_>) {
        for (cluster, action) in view.actions {
            if let Action::MarkStable { .. } = action
                && let Some(state) = view.state.clusters.get(cluster)
                && state.on_new_spec
                && !state.accepted
            {
                self.fresh(view, cluster, "promoted");
            }
        }
        for (name, state) in &view.state.clusters {
            if state.status == ClusterStatus::Validated
                && state.decided_at == Some(view.now)
                && !state.accepted
            {
                self.fresh(view, name, "validated");
            }
            if state.paused_for == Some(PausedFor::Evidence) {
                self.held.entry(name.clone()).or_default().push(view.now);
            }
        }
        let started = view
            .state
            .wave_started_at
            .iter()
            .filter(|w| w.is_some())
            .count();
        if started > self.started_waves {
            let wave = started - 1;
            for earlier in &view.plan.waves[..wave] {
                for name in earlier {
                    let status = view.state.clusters[name].status;
                    if !matches!(
                        status,
                        ClusterStatus::Validated
                            | ClusterStatus::Skipped
                            | ClusterStatus::RolledBack
                            | ClusterStatus::Pinned
                    ) {
                        self.violations.push(format!(
                            "{} s: wave {} started while {name} was {status:?}",
                            view.now / 1000,
                            wave + 1
                        ));
                    }
                }
            }
        }
        self.started_waves = started;
    }

    fn fresh(&mut self, view: &TickView<'_>, cluster: &str, what: &str) {
        let state = &view.state.clusters[cluster];
        for (key, run) in state.runs.iter() {
            if key.slot != crate::rollout::AnalysisSlot::Background {
                continue;
            }
            for metric in run.metrics.iter().filter(|m| !m.dry_run) {
                let latest = metric
                    .measurements
                    .iter()
                    .rev()
                    .filter(|m| {
                        m.evidence
                            && matches!(m.phase, AnalysisPhase::Successful | AnalysisPhase::Failed)
                    })
                    .find_map(|m| m.finished_at);
                if latest.is_none_or(|at| view.now - at > 120_000) {
                    self.violations.push(format!(
                        "{} s: {cluster} {what} with {}'s latest evidence at {:?}",
                        view.now / 1000,
                        metric.name,
                        latest.map(|at| at / 1000)
                    ));
                }
            }
        }
    }
}

#[test]
fn no_cluster_is_promoted_validated_or_followed_by_a_wave_without_current_evidence() {
    // Random outage windows: which clusters, when relative to their canary, how long. A retry
    // every 45 minutes starts again any cluster an outage aborted (a later wave's outage comes
    // after an earlier wave's retry).
    let mut rng = Rng::new(2026);
    let clusters = [
        "canary-eu-west",
        "prod-eu-west",
        "prod-us-east",
        "prod-ap-south",
    ];
    let (mut runs, mut aborted, mut short_never_aborted, mut long_aborted) = (0, 0, 0, 0);
    for case in 0..48 {
        let mut text = quiet_fleet();
        let mut lengths = BTreeMap::new();
        for name in clusters {
            if rng.uniform() < 0.5 {
                continue;
            }
            // Start 0..7 minutes into its canary (its steps take 6), 10 s to 4 minutes long.
            let start = (rng.uniform() * 42.0).floor() as u64 * 10;
            let length = 10 + (rng.uniform() * 24.0).floor() as u64 * 10;
            lengths.insert(name, length);
            let marker = format!("    - name: {name}\n");
            let at = text.find(&marker).unwrap() + marker.len();
            let end = text[at..]
                .find("    - name: ")
                .map_or(text.len(), |i| at + i);
            let block = &text[at..end];
            let fault = format!(
                "      faults:\n        - {{kind: metricsOutage, from: {{afterClusterStart: {start}s}}, for: {length}s}}\n"
            );
            let new_block = format!("{block}{fault}");
            text.replace_range(at..end, &new_block);
        }
        let text = with_events(
            &text,
            "    - {at: 45m, command: retry}\n    - {at: 90m, command: retry}\n    - {at: 135m, command: retry}\n    - {at: 180m, command: retry}\n",
        );
        let mut check = EvidenceCheck::default();
        let mut ever_aborted = std::collections::BTreeSet::new();
        let report = run_with(&inputs(&text), case, |view| {
            check.observe(view);
            for (name, c) in &view.state.clusters {
                if c.aborted_on_error {
                    ever_aborted.insert(name.clone());
                }
                assert!(
                    view.state.rejections.is_empty(),
                    "case {case}: an outage rejected a cluster: {:?}",
                    view.state.rejections
                );
            }
        })
        .unwrap();
        runs += 1;
        assert!(
            check.violations.is_empty(),
            "case {case}: {:?}\n{text}",
            check.violations
        );
        assert_eq!(report.outcome, "Completed", "case {case}: {report:#?}");
        for (name, length) in &lengths {
            let was_aborted = ever_aborted.contains(*name);
            aborted += usize::from(was_aborted);
            // At most 4 errors (the error retry interval is 10 s, the default
            // consecutiveErrorLimit 4) in 30 s: never aborted.
            if *length <= 30 {
                assert!(
                    !was_aborted,
                    "case {case}: {name}'s {length} s outage aborted it"
                );
                short_never_aborted += 1;
            }
            if was_aborted {
                let c = by_name(&report)[*name];
                assert_eq!(c.outcome, "Promoted", "case {case}: retry completes {name}");
                if *length >= 180 {
                    long_aborted += 1;
                }
            }
        }
    }
    assert_eq!(runs, 48);
    assert!(aborted > 0 && short_never_aborted > 0 && long_aborted > 0);
}

#[test]
fn an_outage_across_the_end_of_a_canary_holds_its_promotion_until_fresh_evidence() {
    // prod-us-east's provider is down from 5m10s into its canary until 8m; its templates
    // tolerate 30 consecutive errors (errors retry every 10 s), so the run does not end in
    // Error. The steps end (6 minutes) inside the outage; from 7 minutes its latest evidence
    // (at 5 minutes) is older than the metrics' interval twice over: the promotion waits,
    // Paused with the reason, and goes on once a fresh measurement comes after the outage.
    let text = with(
        &quiet_fleet(),
        "",
        "        - {kind: metricsOutage, from: {afterClusterStart: 5m10s}, for: 2m50s}\n",
    )
    .replace(
        "      failureLimit: 1\n",
        "      failureLimit: 1\n      consecutiveErrorLimit: 30\n",
    );
    let mut check = EvidenceCheck::default();
    let mut reasons = Vec::new();
    let report = run_with(&inputs(&text), 1, |view| {
        check.observe(view);
        let c = &view.state.clusters["prod-us-east"];
        if c.paused_for == Some(PausedFor::Evidence) && reasons.last() != Some(&c.reason) {
            reasons.push(c.reason.clone());
        }
    })
    .unwrap();
    assert!(check.violations.is_empty(), "{:?}", check.violations);
    let held = &check.held["prod-us-east"];
    assert!(!held.is_empty(), "never held");
    assert!(
        reasons[0].starts_with("waiting for evidence: metric")
            && reasons[0].contains("simulated outage"),
        "{reasons:?}"
    );
    let us = by_name(&report)["prod-us-east"];
    assert_eq!(us.outcome, "Promoted");
    let start = (us.started_at.unwrap() * 1000.0) as i64;
    assert!(
        (us.decided_at.unwrap() * 1000.0) as i64 >= start + 480_000,
        "decided inside the outage: {us:?}"
    );
    assert_eq!(report.outcome, "Completed");
}

#[test]
fn a_long_outage_aborts_without_rejection_and_retry_completes_the_cluster() {
    let text = with(
        &quiet_fleet(),
        "    - {at: 50m, command: retry}\n",
        "        - {kind: metricsOutage, from: {afterClusterStart: 2m}, for: 5m}\n",
    );
    let mut during = None;
    let report = run_with(&inputs(&text), 1, |view| {
        if view.now == 40 * 60_000 {
            let c = &view.state.clusters["prod-us-east"];
            during = Some((
                c.status,
                c.aborted_on_error,
                c.reason.clone(),
                view.state.rejections.len(),
                view.state.phase,
                view.state.message.clone(),
            ));
        }
    })
    .unwrap();
    let (status, on_error, reason, rejections, phase, message) = during.unwrap();
    assert_eq!(status, ClusterStatus::RolledBack);
    assert!(on_error);
    assert!(reason.starts_with("aborted without rejection"), "{reason}");
    assert_eq!(rejections, 0, "an outage is no verdict");
    assert_eq!(phase, FleetPhase::Progressing, "it does not halt the fleet");
    assert!(message.contains("retry starts it again"), "{message}");
    assert_eq!(report.outcome, "Completed", "{report:#?}");
    assert!(by_name(&report).values().all(|c| c.outcome == "Promoted"));
}

/// The fleet's state messages when prod-us-east and prod-ap-south, each with `metrics` (a flow
/// mapping's fields, e.g. `metrics: {...}`), lose their metrics for 5 minutes into wave 3.
fn messages_of_an_outage_on_two_clusters(fields: &str) -> Vec<String> {
    let text = with(
        &quiet_fleet(),
        "",
        "        - {kind: metricsOutage, from: {afterWaveStart: 2m}, for: 5m}\n",
    )
    .replace(
        "      canary: {errorRate: 0.0005, latency: {p50: 0.125, p95: 0.31}}\n",
        "      canary: {errorRate: 0.0005, latency: {p50: 0.125, p95: 0.31}}\n      faults:\n        - {kind: metricsOutage, from: {afterWaveStart: 2m}, for: 5m}\n",
    )
    .replace(
        "    - {name: prod-us-east, region: us-east, labels: {tier: prod}}\n    - {name: prod-ap-south, region: ap-south, labels: {tier: prod}}",
        &format!("    - {{name: prod-us-east, region: us-east, labels: {{tier: prod}}, {fields}}}\n    - {{name: prod-ap-south, region: ap-south, labels: {{tier: prod}}, {fields}}}"),
    );
    assert!(text.contains(fields));
    let mut messages = Vec::new();
    run_with(&inputs(&text), 1, |view| {
        if messages.last() != Some(&view.state.message) {
            messages.push(view.state.message.clone());
        }
    })
    .unwrap();
    messages
}

#[test]
fn clusters_failing_together_on_one_provider_are_one_metrics_provider_down() {
    // prod-us-east and prod-ap-south read one Prometheus.
    let messages = messages_of_an_outage_on_two_clusters(
        "metrics: {address: 'http://prometheus.shared:9090'}",
    );
    let down: Vec<&String> = messages
        .iter()
        .filter(|m| m.contains("MetricsProviderDown"))
        .collect();
    assert!(!down.is_empty(), "{messages:#?}");
    assert!(
        down[0].contains("http://prometheus.shared:9090")
            && down[0].contains("prod-ap-south, prod-us-east"),
        "{}",
        down[0]
    );
}

#[test]
fn one_in_cluster_address_on_each_cluster_is_no_shared_provider() {
    // The same outage, but the address is reached through each cluster's own API server
    // (`metrics.via: apiserver`): one Prometheus per cluster, each named by the same address.
    let messages = messages_of_an_outage_on_two_clusters(
        "endpoint: {kubernetes: {context: sim}}, metrics: {address: 'http://prometheus.monitoring:9090', via: apiserver}",
    );
    assert!(
        messages.iter().any(|m| m.contains("prod-us-east")),
        "the outage is reported: {messages:#?}"
    );
    assert!(
        !messages.iter().any(|m| m.contains("MetricsProviderDown")),
        "{messages:#?}"
    );
}

/// The healthy fleet with the error-rate template's condition replaced.
fn with_condition(text: &str, condition: &str) -> String {
    let old = "      successCondition: len(result) > 0 && result[0] < 0.01\n";
    assert!(text.contains(old));
    text.replace(old, &format!("      {condition}\n"))
}

#[test]
fn a_canary_with_no_traffic_and_a_condition_passing_on_no_data_times_out_on_evidence() {
    // The route sends prod-eu-west's canary nothing; the error-rate condition passes on no
    // data (`default`), so nothing errors: the promotion is held for evidence that never comes,
    // and past progressDeadlineSeconds (10 minutes by default) the reason says EvidenceTimeout.
    // (`initialDelay` keeps the clusters with traffic from measuring an empty first window.)
    let text = with_condition(
        &quiet_fleet(),
        "initialDelay: 2m\n      successCondition: default(result, [0])[0] < 0.01",
    )
    .replace(
        "      successCondition: len(result) > 0 && result[0] <= {{args.max-p95}}\n",
        "      initialDelay: 2m\n      successCondition: default(result, [0])[0] <= {{args.max-p95}}\n",
    )
    .replace(
        "      canary: {errorRate: 0.0005, latency: {p50: 0.055, p95: 0.13}}\n    - name: prod-us-east",
        "      canary: {errorRate: 0.0005, latency: {p50: 0.055, p95: 0.13}, trafficShare: 0}\n    - name: prod-us-east",
    );
    assert!(text.contains("trafficShare: 0"));
    let mut reasons: Vec<String> = Vec::new();
    let report = run_with(&inputs(&text), 1, |view| {
        let c = &view.state.clusters["prod-eu-west"];
        if reasons.last() != Some(&c.reason) {
            reasons.push(c.reason.clone());
        }
    })
    .unwrap();
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("waiting for evidence")),
        "{reasons:#?}"
    );
    let last = reasons.last().unwrap();
    assert!(
        last.starts_with("EvidenceTimeout: waiting for evidence")
            && last.contains("promote to accept, abort to roll back"),
        "{reasons:#?}"
    );
    let eu = by_name(&report)["prod-eu-west"];
    assert_eq!(eu.outcome, "Paused");
    assert_eq!(report.waves[2].started_at, None, "wave 3 never starts");
    // With progressDeadlineAbort the canary is aborted instead — without a rejection.
    let aborting = text.replace(
        "spec:\n  replicas: 4\n",
        "spec:\n  replicas: 4\n  progressDeadlineAbort: true\n",
    );
    assert_ne!(aborting, text);
    let mut rejections = 0;
    let report = run_with(&inputs(&aborting), 1, |view| {
        rejections += view.state.rejections.len();
    })
    .unwrap();
    let eu = by_name(&report)["prod-eu-west"];
    assert_eq!(eu.outcome, "RolledBack", "{eu:?}");
    assert!(
        eu.reason.starts_with("aborted without rejection"),
        "{}",
        eu.reason
    );
    assert_eq!(rejections, 0);
}

#[test]
fn an_inconclusive_pause_names_what_to_do_and_promote_continues_it() {
    // Neither condition holds for prod-eu-west's error rate (0.05%): Inconclusive, the
    // rollout pauses; the operator promotes at 25m and the cluster goes on to validation.
    let text = with_condition(
        &quiet_fleet(),
        "successCondition: len(result) > 0 && result[0] < 0.00001\n      failureCondition: len(result) > 0 && result[0] > 0.05",
    );
    let text = with(
        &text,
        "    - {at: 25m, command: promote, cluster: prod-eu-west}\n",
        "",
    );
    let mut reasons: Vec<(i64, ClusterStatus, String)> = Vec::new();
    let report = run_with(&inputs(&text), 1, |view| {
        let c = &view.state.clusters["prod-eu-west"];
        if reasons.last().map(|r| &r.2) != Some(&c.reason) {
            reasons.push((view.now / 1000, c.status, c.reason.clone()));
        }
    })
    .unwrap();
    let paused = reasons
        .iter()
        .find(|(_, status, _)| *status == ClusterStatus::Paused)
        .unwrap_or_else(|| panic!("{reasons:#?}"));
    assert!(
        paused
            .2
            .starts_with("inconclusive: metric \"error-rate\" = [")
            && paused.2.ends_with("promote to accept, abort to roll back"),
        "{paused:?}"
    );
    assert!(
        !reasons.iter().any(|(at, status, reason)| *at > paused.0
            && *at < 1500
            && (*status != ClusterStatus::Paused || reason == "updating")),
        "left the pause before the promote: {reasons:#?}"
    );
    let eu = by_name(&report)["prod-eu-west"];
    assert_eq!(eu.outcome, "Promoted", "{reasons:#?}");
    assert!(
        eu.reason.starts_with("validated by an operator's promote"),
        "{}",
        eu.reason
    );
    assert!(eu.decided_at.unwrap() >= 1500.0);
}

#[test]
fn a_skipped_cluster_that_returns_goes_back_to_its_stable_and_retry_rolls_it_forward() {
    // prod-us-east stops answering 2 minutes into its canary, for 10 minutes; the policy
    // skips it after 3. When it answers again its canary's traffic returns to its stable, it
    // stays Skipped, and the fleet completes with skips; a retry at 45m rolls it forward.
    // (A `resume` at 40m, which changes nothing, keeps the run going after the fleet completed.)
    let text = with(
        &quiet_fleet(),
        "    - {at: 40m, command: resume}\n",
        "        - {kind: unreachable, from: {afterClusterStart: 2m}, for: 10m}\n",
    )
    .replace(
        "  failurePolicy: {rollbackScope: failed}",
        "  failurePolicy: {rollbackScope: failed, unreachable: {timeout: 3m, action: skip}}",
    );
    assert!(text.contains("action: skip"));
    let mut weight_after_return = None;
    let mut statuses = Vec::new();
    let report = run_with(&inputs(&text), 1, |view| {
        for (cluster, action) in view.actions {
            if cluster == "prod-us-east"
                && let Action::SetWeight { canary, .. } = action
                && weight_after_return.is_none()
                && view.state.clusters[cluster].status == ClusterStatus::Skipped
            {
                weight_after_return = Some((view.now / 1000, *canary));
            }
        }
        let status = view.state.clusters["prod-us-east"].status;
        if statuses.last().map(|s: &(i64, ClusterStatus)| s.1) != Some(status) {
            statuses.push((view.now / 1000, status));
        }
    })
    .unwrap();
    assert_eq!(report.outcome, "CompletedWithSkips", "{report:#?}");
    let us = by_name(&report)["prod-us-east"];
    assert_eq!(us.outcome, "Skipped");
    assert!(us.failure.is_none());
    let (at, weight) = weight_after_return.unwrap_or_else(|| {
        panic!("its traffic never returned to its stable: {statuses:?} {report:#?}")
    });
    assert_eq!(weight, 0, "at {at} s");
    assert!(at >= 1820, "{statuses:?}");
    assert_eq!(
        statuses.iter().map(|(_, s)| *s).collect::<Vec<_>>(),
        [
            ClusterStatus::NotStarted,
            ClusterStatus::Progressing,
            ClusterStatus::Skipped
        ],
        "it stays Skipped"
    );
    // Retry rolls it forward.
    let retried = text.replace(
        "    - {at: 40m, command: resume}\n",
        "    - {at: 40m, command: resume}\n    - {at: 45m, command: retry}\n",
    );
    assert_ne!(retried, text);
    let report = run(&inputs(&retried), 1).unwrap();
    assert_eq!(report.outcome, "Completed", "{report:#?}");
    assert_eq!(by_name(&report)["prod-us-east"].outcome, "Promoted");
    assert!(by_name(&report)["prod-us-east"].started_at.unwrap() >= 2700.0);
}
