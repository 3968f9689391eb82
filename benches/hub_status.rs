//! What a fleet costs its hub: the size of the objects Flotilla writes there
//! (`FleetRollout.status`, the hub Rollout's aggregate status) and how often it writes them,
//! for fleets of 1,000 and 10,000 clusters driven through a whole release by the fleet machine
//! on virtual time (10 s ticks, 1 cluster in 200 regressing), against the API server's object
//! limit (etcd's request limit, 1.5 MiB). Also the size of the Fleet object itself in its two
//! forms: clusters listed, or selected from the spokes' Secrets; and, with the state in the hub
//! (`hub.state: hub`), the FleetRolloutRecords: the fleet's head (the machine's state without its
//! clusters), the largest cluster object (its state and the one it replaces), and how many
//! cluster objects the release writes (only changed clusters are).
//! Run with `cargo bench --bench hub_status`; `HUB_BENCH_CLUSTERS=2000` for one size.

#[path = "common/scale.rs"]
mod scale;

use std::time::Instant;

use flotilla_core::fleet::{FleetPlan, FleetState};
use flotilla_core::simulate::run_with;
use flotilla_runtime::controller::hub_status::{fleet_status, rollout_status};
use flotilla_runtime::controller::record::{ClusterView, FailureView, FleetView, WaveView};
use scale::Scale;

/// etcd's default request limit, which bounds one object.
const OBJECT_LIMIT: usize = 1536 * 1024;

/// The Fleet (clusters listed), the FleetRollout (three label-selected waves: 1 %, 9 %, the
/// rest; 60 failed clusters tolerated per wave), the Rollout, its template and the scenario
/// (every 200th cluster's canary fails its error rate).
fn scenario(clusters: usize) -> (String, String) {
    Scale {
        name: "payments",
        clusters,
        waves_at: (clusters / 100, clusters / 10),
        regress_every: Some(200),
        failure_policy: Some("{rollbackScope: failed, maxFailedClusters: 60}"),
    }
    .manifests()
}

/// What the hub's summaries read of a fleet, from the machine's state (the controller's view
/// has more: analysis runs, weights as observed; the summaries do not read them).
fn view_of(state: &FleetState, plan: &FleetPlan, image: &str) -> FleetView {
    FleetView {
        name: "payments".into(),
        revision: state.revision.clone(),
        image: image.to_owned(),
        previous_image: "payments:1".into(),
        phase: state.outcome(),
        message: state.message.clone(),
        wave: (state.wave + 1).min(plan.waves.len()),
        paused: state.paused,
        git: None,
        waves: plan
            .waves
            .iter()
            .enumerate()
            .map(|(i, members)| WaveView {
                index: i + 1,
                started_at: state.wave_started_at.get(i).copied().flatten(),
                completed_at: state.wave_completed_at.get(i).copied().flatten(),
                lockstep: false,
                barrier: None,
                clusters: members
                    .iter()
                    .map(|name| {
                        let cluster = &state.clusters[name];
                        let engine = &cluster.rollout;
                        ClusterView {
                            name: name.clone(),
                            status: format!("{:?}", cluster.status),
                            reason: cluster.reason.clone(),
                            reachable: true,
                            rollout_phase: format!("{:?}", engine.phase),
                            rollout_message: engine.message.clone(),
                            step: Some(format!("{}/4", engine.step_index.unwrap_or(0))),
                            weights: None,
                            desired_weight: engine.desired_weight,
                            stable_version: None,
                            current_version: None,
                            failure: cluster.failure.as_ref().map(|f| FailureView {
                                metric: f.metric.clone(),
                                value: f.value.clone(),
                                message: f.message.clone(),
                            }),
                            started_at: cluster.started_at,
                            decided_at: cluster.decided_at,
                            analysis: Vec::new(),
                            drift: None,
                            condition: None,
                        }
                    })
                    .collect(),
            })
            .collect(),
        errors: Vec::new(),
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        // `cargo test --benches` and `cargo bench -- --list` probe bench binaries.
        return;
    }
    let sizes: Vec<usize> = match std::env::var("HUB_BENCH_CLUSTERS") {
        Ok(v) => vec![v.parse().expect("HUB_BENCH_CLUSTERS: a number")],
        Err(_) => vec![1_000, 10_000],
    };
    println!(
        "| clusters | ticks | FleetRollout.status max / last | hub Rollout status max | writes (status changes) | writes per tick | summary build p50 / p99 | Fleet (JSON) listed / by selector |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut records = Vec::new();
    for clusters in sizes {
        let (text, fleet) = scenario(clusters);
        let inputs = scale::inputs(&text);
        let (mut ticks, mut writes) = (0usize, 0usize);
        let (mut fleet_max, mut fleet_last, mut rollout_max) = (0usize, 0usize, 0usize);
        let (mut last_fleet, mut last_rollout) = (Vec::new(), Vec::new());
        let mut builds = Vec::new();
        // The state's records: each cluster's last written JSON, the largest head and cluster
        // object, and the cluster objects written.
        let mut written: std::collections::HashMap<String, Vec<u8>> = Default::default();
        let (mut head_max, mut cluster_max, mut cluster_writes, mut busiest) =
            (0usize, 0usize, 0usize, 0usize);
        let report = run_with(&inputs, 1, |tick| {
            let mut changed = 0;
            for (name, cluster) in &tick.state.clusters {
                let json = serde_json::to_vec(cluster).unwrap();
                if written.get(name) != Some(&json) {
                    changed += 1;
                    // The object holds the new state and the one it replaces.
                    let previous = written.get(name).map_or(0, Vec::len);
                    cluster_max = cluster_max.max(json.len() + previous);
                    written.insert(name.clone(), json);
                }
            }
            cluster_writes += changed;
            busiest = busiest.max(changed);
            let mut head = serde_json::to_value(tick.state).unwrap();
            head["clusters"] = serde_json::json!({});
            let names: usize = tick.state.clusters.keys().map(|k| k.len() + 3).sum();
            head_max = head_max.max(serde_json::to_vec(&head).unwrap().len() + names);
            let started = Instant::now();
            let image = tick
                .images
                .get(tick.revision_hash)
                .cloned()
                .unwrap_or_default();
            let view = view_of(tick.state, tick.plan, &image);
            let fleet = serde_json::to_vec(&fleet_status(&view, Some(1))).unwrap();
            let rollout = serde_json::to_vec(&rollout_status(&view, Some(1))).unwrap();
            builds.push(started.elapsed().as_secs_f64() * 1000.0);
            ticks += 1;
            // The writer patches an object only when its status changed.
            writes += usize::from(fleet != last_fleet) + usize::from(rollout != last_rollout);
            fleet_max = fleet_max.max(fleet.len());
            fleet_last = fleet.len();
            rollout_max = rollout_max.max(rollout.len());
            (last_fleet, last_rollout) = (fleet, rollout);
        })
        .unwrap();
        builds.sort_by(|a, b| a.partial_cmp(b).unwrap());
        // The Fleet as the API server stores a custom resource: JSON.
        let stored = |yaml: &str| {
            serde_json::to_vec(&serde_saphyr::from_str::<serde_json::Value>(yaml).unwrap())
                .unwrap()
                .len()
        };
        let listed = stored(&fleet);
        let selector = stored(
            "apiVersion: flotilla.dev/v1alpha1\nkind: Fleet\nmetadata: {name: fleet}\nspec:\n  spokes: {selector: {matchLabels: {env: prod}}}\n",
        );
        assert!(fleet_max < OBJECT_LIMIT, "{fleet_max} bytes");
        // The head also keeps the desired state it runs: the Fleet, in its listed form here.
        let head_listed = head_max + listed;
        records.push(format!(
            "| {clusters} | {:.1} KiB ({:.1} %) / {:.1} KiB ({:.1} %) | {:.1} KiB | {cluster_writes} ({:.1} per cluster, {:.0} per tick, {busiest} at most) |",
            head_max as f64 / 1024.0,
            head_max as f64 * 100.0 / OBJECT_LIMIT as f64,
            head_listed as f64 / 1024.0,
            head_listed as f64 * 100.0 / OBJECT_LIMIT as f64,
            cluster_max as f64 / 1024.0,
            cluster_writes as f64 / clusters as f64,
            cluster_writes as f64 / ticks as f64,
        ));
        println!(
            "| {clusters} | {ticks} ({}) | {:.1} / {:.1} KiB ({:.1} % of 1.5 MiB) | {:.2} KiB | {writes} | {:.2} | {:.2} / {:.2} ms | {:.0} KiB ({:.0} %) / {} B |",
            report.outcome,
            fleet_max as f64 / 1024.0,
            fleet_last as f64 / 1024.0,
            fleet_max as f64 * 100.0 / OBJECT_LIMIT as f64,
            rollout_max as f64 / 1024.0,
            writes as f64 / ticks as f64,
            percentile(&builds, 0.5),
            percentile(&builds, 0.99),
            listed as f64 / 1024.0,
            listed as f64 * 100.0 / OBJECT_LIMIT as f64,
            selector,
        );
    }
    println!();
    println!(
        "| clusters | FleetRolloutRecord head max, Fleet by selector / listed (share of 1.5 MiB; audit trimmed to fit) | cluster record max | cluster records written in the release |"
    );
    println!("|---|---|---|---|");
    for line in records {
        println!("{line}");
    }
}
